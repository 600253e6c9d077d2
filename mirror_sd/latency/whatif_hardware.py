"""Profile (c) of the what-if projection, a heterogeneous accelerator pair in the paper's spirit,
and `project_all`: profiles (a), (b) and (c) for one set of runs.

The target runs on a GPU, the draft on an NPU or a second device; no shared bus (contention 1).
At batch 1 a decoder forward over a few tokens is memory-bound: it reads every weight once.
So each forward costs a roofline time

    t(k tokens) = max(weight bytes / achieved bandwidth, 2 * params * k / achieved FLOP/s) + launch

with "weight bytes" the weights one forward reads (all of them but the input embedding table,
of which it reads k rows; a tied LM head is read as the head). For small k the bandwidth term
wins: verify of gamma+1 tokens costs about one forward (stated assumption; the FLOP term takes
over only near k ~ FLOP/s / (bytes/s) ~ hundreds of tokens at 2 bytes per weight). The early
exit reads the final norm + LM head once more (its bytes over the target's bandwidth); the
split of a target forward at the exit layer is by layers. Messages between the devices (the
top-kappa ids after the exit, the verdict) cost `comm_ms` each; host work per step (sampling,
the acceptance rule, scheduling) `host_ms`. Speculative streaming (the paper's draft emits
several tokens per forward) is `draft_tokens_per_forward`.

Shapes are the public model cards' (approximate parameter counts). All numbers here feed a
projection.

With `costs` "measured-h200" the forward times are not the roofline's but those measured on
an NVIDIA H200 for each shape (random weights, bf16, transformers' eager forward as the
engine runs it: mirror_sd/data/measured.json "h200_eager_forward_ms", from `python -m
mirror_sd.gpu_check`). There the kernel launches, not the weight bytes, set the time: a
0.6B draft forward costs 0.65x of a 14B target forward, against 0.04x on the roofline
with both on one kind of GPU (0.2x with the default inputs' slower draft device). The
acceptance and the hit rate still come from the recorded run (or tau / hit_rate).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from mirror_sd import measured

from mirror_sd.latency import latency_model as lm
from mirror_sd.latency import whatif as wi
from mirror_sd.latency import whatif_choice as wc
from mirror_sd.latency import whatif_hits as wh
from mirror_sd.latency.whatif_costs import PROFILE_D, many_cores_profile, split_costs
from mirror_sd.latency.whatif import PROFILE_NAMES, Profile


@dataclass(frozen=True)
class ModelShape:
    name: str
    params_b: float  # billions of parameters, embeddings included
    layers: int
    hidden: int
    vocab: int = 151_936
    tied: bool = False  # input embedding shared with the LM head

    @property
    def head_params(self) -> float:
        return self.vocab * self.hidden

    def read_params(self) -> float:
        """Parameters one forward reads: all but the input embedding table (its rows are
        gathered), which a tied model reads anyway as its LM head."""
        total = self.params_b * 1e9
        return total if self.tied else total - self.head_params


TARGETS = {
    "1.5B": ModelShape("Qwen2.5-1.5B", 1.54, 28, 1536, tied=True),
    "8B": ModelShape("Qwen3-8B", 8.19, 36, 4096),
    "14B": ModelShape("Qwen3-14B", 14.77, 40, 5120),
    "32B": ModelShape("Qwen3-32B", 32.76, 64, 5120),
}
DRAFTS = {
    "0.5B": ModelShape("Qwen2.5-0.5B", 0.49, 24, 896, tied=True),
    "0.6B": ModelShape("Qwen3-0.6B", 0.60, 28, 1024, tied=True),
}


COSTS_CHOICES = ("roofline", "measured-h200")
MEASURED_H200 = "h200_eager_forward_ms"  # the measured.json entry


def measured_forward(shape: str, tokens: int) -> float:
    """Seconds of one eager forward of What-if shape `shape` over `tokens` rows on the H200,
    linear between the measured row counts (1, 2, 4, 8) and flat past the last: an eager
    forward of a few rows is launch-bound, its time barely grows with them."""
    rows = sorted((int(k), v) for k, v in measured.values(MEASURED_H200)[shape].items())
    if tokens <= rows[0][0]:
        return rows[0][1] / 1e3
    for (k0, v0), (k1, v1) in zip(rows, rows[1:]):
        if tokens <= k1:
            return (v0 + (v1 - v0) * (tokens - k0) / (k1 - k0)) / 1e3
    return rows[-1][1] / 1e3


@dataclass
class Accelerators:
    """The editable inputs of profile (c); defaults: an H100-class GPU (3.35 TB/s HBM, about
    80% achieved) for the target and an NPU with 800 GB/s unified memory (M2 Ultra class, 80%
    achieved) for the draft, bf16 weights."""
    target: str = "14B"
    draft: str = "0.6B"
    target_bw_gbs: float = 2680.0  # achieved memory bandwidth, GB/s
    draft_bw_gbs: float = 640.0
    target_tflops: float = 400.0  # achieved dense bf16 TFLOP/s
    draft_tflops: float = 30.0
    bytes_per_weight: float = 2.0  # bf16
    launch_ms: float = 0.2  # fixed cost per forward (kernel launches), each device
    comm_ms: float = 0.05  # one message between the devices (a few hundred bytes)
    host_ms: float = 0.5  # host work per step, every method
    gamma: int | None = None  # drafted tokens per window (None: the run's window setting)
    kappa: int = 8
    exit_fraction: float = 0.5  # early-exit layer as a fraction of the target's layers
    branch_budget: int = 2
    draft_tokens_per_forward: float = 1.0  # speculative streaming: > 1
    tau: float | None = None  # tokens per step at this gamma (None: the run's acceptance)
    hit_rate: float | None = None  # Mirror-SD steps whose next window was ready (None: the run's)
    costs: str = "roofline"  # forward times: roofline (bytes over bandwidth) | measured-h200 (COSTS_CHOICES)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Accelerators":
        known = {k: v for k, v in (d or {}).items() if k in cls.__dataclass_fields__}
        return cls(**known)


def forward_s(shape: ModelShape, tokens: int, bw_gbs: float, tflops: float, bytes_per_weight: float,
              launch_ms: float) -> float:
    """Roofline seconds of one forward over `tokens` tokens (batch 1)."""
    memory = shape.read_params() * bytes_per_weight / (bw_gbs * 1e9)
    compute = 2.0 * shape.params_b * 1e9 * tokens / (tflops * 1e12)
    return max(memory, compute) + launch_ms / 1e3


def _check(hw: Accelerators) -> None:
    if hw.target not in TARGETS:
        raise ValueError(f"target size must be one of {', '.join(TARGETS)}")
    if hw.draft not in DRAFTS:
        raise ValueError(f"draft size must be one of {', '.join(DRAFTS)}")
    for name in ("target_bw_gbs", "draft_bw_gbs", "target_tflops", "draft_tflops",
                 "bytes_per_weight", "draft_tokens_per_forward"):
        if not getattr(hw, name) > 0:
            raise ValueError(f"{name} must be positive")
    if not 0.0 < hw.exit_fraction < 1.0:
        raise ValueError("exit_fraction must be between 0 and 1")
    if (hw.gamma is not None and hw.gamma < 1) or hw.branch_budget < 1:
        raise ValueError("gamma and branch_budget must be at least 1")
    if hw.costs not in COSTS_CHOICES:
        raise ValueError(f"costs must be one of {', '.join(COSTS_CHOICES)}")


def accelerator_calibration(hw: Accelerators, run: lm.Calibration | None = None) -> lm.Calibration:
    """A latency-model calibration for the pair; acceptance and hit rate from `run` (the
    recorded run's calibration) unless `hw` sets tau / hit_rate."""
    _check(hw)
    tgt, dft = TARGETS[hw.target], DRAFTS[hw.draft]
    g, bpw = window_of(hw, run), hw.bytes_per_weight

    def t_target(k):
        if hw.costs == "measured-h200":
            return measured_forward(hw.target, k)
        return forward_s(tgt, k, hw.target_bw_gbs, hw.target_tflops, bpw, hw.launch_ms)

    def t_draft(k):
        if hw.costs == "measured-h200":
            return measured_forward(hw.draft, k)
        return forward_s(dft, k, hw.draft_bw_gbs, hw.draft_tflops, bpw, hw.launch_ms)

    head_bytes = tgt.head_params * bpw
    t1, tk = t_target(1), t_target(g + 1)
    head_share = head_bytes / (tgt.read_params() * bpw)
    per_token = t_draft(1) / hw.draft_tokens_per_forward
    rows = max(1, hw.branch_budget)
    if hw.tau is not None:
        alpha = lm.alpha_from_tau(hw.tau, g)
    elif run is not None:  # the run's per-token acceptance, carried to this gamma
        alpha = run.alpha_mirror if run.alpha_mirror is not None else run.alpha_sd
    else:
        alpha = None
    hit = hw.hit_rate if hw.hit_rate is not None else (run.hit_rate if run is not None else None)
    measured_h200 = hw.costs == "measured-h200"
    where = ("measured on an NVIDIA H200 (eager transformers forward, bf16)" if measured_h200 else None)
    notes = [f"target {tgt.name} ({tgt.params_b:g}B, {tgt.layers} layers) "
             f"{where or f'at {hw.target_bw_gbs:g} GB/s'}: {t1 * 1e3:.2f} ms per token, verify of {g + 1} "
             f"{tk * 1e3:.2f} ms",
             f"draft {dft.name} ({dft.params_b:g}B) {where or f'at {hw.draft_bw_gbs:g} GB/s'}: "
             f"{per_token * 1e3:.2f} ms per drafted token"
             + (f" ({hw.draft_tokens_per_forward:g} tokens per forward)" if hw.draft_tokens_per_forward != 1 else ""),
             "SD drafts on the same draft device",
             ("forward times as measured, each lane on a device of its own (two H200s); "
              if measured_h200 else f"{bpw:g} bytes per weight; {hw.launch_ms:g} ms launch per forward; ")
             + f"{hw.comm_ms:g} ms per message; {hw.host_ms:g} ms host per step"]
    return lm.Calibration(
        target_layers=tgt.layers, exit_layer=max(1, min(tgt.layers - 1, round(hw.exit_fraction * tgt.layers))),
        gamma=g, gamma_measured=g, branch_budget=hw.branch_budget, kappa=hw.kappa,
        t_target_1=t1, t_target_k=tk, head_share=head_share,
        t_exit_head=head_bytes / (hw.target_bw_gbs * 1e9), t_accept=0.0,
        t_draft_token=per_token, t_fallback_token=per_token, t_extend=t_draft(1),
        t_branch_1=per_token, t_branch_row=max(0.0, t_draft(rows) - t_draft(1)) / max(1, rows - 1) / hw.draft_tokens_per_forward,
        branch_forwards=1.0, branch_rows=float(rows), contention=1.0, schedule="paper",
        draft_device="separate", t_comm_ee=hw.comm_ms / 1e3, t_comm_verify=hw.comm_ms / 1e3,
        alpha_sd=alpha, alpha_mirror=alpha, hit_rate=hit,
        source=("projection: forward times measured on an NVIDIA H200 (measured.json h200_eager_forward_ms)"
                if measured_h200 else "projection: weight bytes over memory bandwidth (whatif_hardware.py)"),
        notes=notes)


DEFAULT_GAMMA = 7  # the window of a profile (c) with neither a window set nor a run


def window_of(hw: Accelerators, run: lm.Calibration | None = None, run_gamma: int | None = None) -> int:
    """The window profile (c) prices: the one set in its inputs, else the run's."""
    return int(hw.gamma or run_gamma or (run.gamma if run is not None else None) or DEFAULT_GAMMA)


def accelerator_profile(hw: Accelerators, run: lm.Calibration | None = None,
                        run_gamma: int | None = None) -> Profile:
    """Profile (c). The recorded steps are replayed (their windows priced again with the
    pair's costs) when it keeps the run's acceptance; a hit rate set by hand re-weights every
    drafted step at it (whatif_hits.with_source), the run's windows and acceptance kept. Only
    a tau set by hand falls back to the expected number of steps from tau and the hit rate
    (alpha fitted to tau)."""
    hw = replace(hw, gamma=window_of(hw, run, run_gamma))
    cal = accelerator_calibration(hw, run)
    from_run = hw.tau is None and run_gamma == hw.gamma
    host = hw.host_ms / 1e3
    prof = Profile("c", PROFILE_NAMES["c"], cal, {m: host for m in ("ar", "sd", "mirror")},
                   list(cal.notes) + list(hw.notes), acceptance_from_run=from_run,
                   reprice_windows=hw.tau is None)
    if hw.hit_rate is not None:
        prof = replace(prof, hit_rate=float(hw.hit_rate), reweight=True)
    return prof


def hit_sources(recorded: list, settings: dict | None, pair: dict | None, hw: Accelerators) -> dict:
    """{profile key: whatif_hits.HitSource} for (b), (c) and (d): the rule's rate; in (c) a
    rate set in its inputs wins."""
    own = wh.hit_source(recorded, settings, pair)
    by_hand = wh.hit_source(recorded, settings, pair, hw.hit_rate) if hw.hit_rate is not None else own
    return {"b": own, "c": by_hand, "d": own}


def _sourced(profiles: dict, sources: dict) -> dict:
    """The profiles (b), (c), (d) pricing their expected overlapped steps by `sources`."""
    return {k: (wh.with_source(p, sources[k]) if p is not None and k in sources else p)
            for k, p in profiles.items()}


def project_all(records: list[dict], *, target_layers: int, gamma: int, exit_layer: int | None = None,
                branch_budget: int = 2, kappa: int = 8, accelerators=None, source: str = "",
                settings: dict | None = None, precision: str | None = None, pair: dict | None = None) -> dict:
    """Profiles (a), (b), (c) and, where the thread scaling grounds it, (d) for `records`
    (record dicts, see recorded_steps): measured speedups, per-profile projections, the
    profiles, the recorded steps, the two costs of sharing the CPU (`costs`,
    whatif_costs.split_costs), each method's window lengths (`windows`), and per profile
    (b), (c), (d) the settings it would pick among those the run can replay (`choices`,
    whatif_choice). Variants (`mirror:...`) enter the choices only. `accelerators`:
    Accelerators (None: its defaults); `settings`: the run's settings (gamma, window,
    branch_extend, ...); `precision`: the run's (for the core split); `pair`: {target, draft}
    names, for the measured hit rate (whatif_hits.py). (b), (c) and (d) price the steps the
    run ran with its lanes in turn at the hit rate that rule gives (`hit_sources`); per profile
    (b) and (c) `hit_series` is Mirror-SD over SD against the hit rate at the settings it
    picks, with the break-even rate."""
    main = [r for r in records if r["method"] in wi.METHODS] or list(records)
    recorded = [r for r in (wi.recorded_steps(rec, gamma) for rec in main) if r is not None]
    kw = dict(target_layers=target_layers, exit_layer=exit_layer, branch_budget=branch_budget,
              kappa=kappa, source=source)
    profiles = wi.this_machine(main, gamma=gamma, **kw)
    cal = profiles["a"].calibration
    hw = accelerators if accelerators is not None else Accelerators()
    profiles["c"] = accelerator_profile(hw, cal, gamma)
    costs = split_costs(profiles, precision)
    many = many_cores_profile(profiles, costs)
    if many is not None:
        profiles["d"] = many
    sources = hit_sources(recorded, settings, pair, hw)
    profiles = _sourced(profiles, sources)
    base = {"gamma": gamma, "branch_budget": branch_budget, "exit_layer": exit_layer, "kappa": kappa,
            "window": None, "branch_extend": None, **(settings or {})}
    series: dict = {}
    choices = profile_choices(records, base, hw, precision, target_layers, source, settings, pair, series)
    return {"projection": True, "note": lm.PROJECTION_NOTE, "calibration": cal,
            "measured_speedup": wi.measured_speedups(recorded), "recorded": recorded,
            "profiles": profiles, "projected": {k: wi.project(recorded, p) for k, p in profiles.items()},
            "costs": costs, "windows": window_summary(records), "choices": choices,
            "hit_source": sources, "hit_series": series}


def window_summary(records: list[dict]) -> dict:
    """{method name: {count, min, median, max, mean}} of the windows each method verified."""
    lengths: dict = {}
    for r in records:
        lengths.setdefault(r["method"], []).extend((r.get("stats") or {}).get("window_lengths") or [])
    out = {}
    for m, xs in lengths.items():
        if xs:
            xs = sorted(xs)
            mid = len(xs) // 2
            median = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
            out[m] = {"count": len(xs), "min": xs[0], "median": median, "max": xs[-1],
                      "mean": sum(xs) / len(xs)}
    return out


def profile_choices(records: list[dict], base: dict, hw: Accelerators, precision: str | None,
                    target_layers: int, source: str = "", settings: dict | None = None,
                    pair: dict | None = None, series: dict | None = None) -> dict:
    """{profile key: whatif_choice.choose(...)} for (b), (c) and (d): per method, the recorded
    variant and branch budget that profile projects fastest, each variant's in-turn steps at
    the hit rate the rule gives it (whatif_hits.py: its own overlapped steps, or the measured
    rate where its settings are the measured ones). `series` (a dict) gets (b)'s and (c)'s
    Mirror-SD over SD against the hit rate at the picked settings."""
    usable = [r for r in records if not r.get("error")]
    names = sorted({r["method"] for r in usable if wi.base_method(r["method"]) in ("sd", "mirror")})
    ar = [r for r in usable if r["method"] == "ar"]
    sd_cal = [r for r in usable if r["method"] == "sd"] or [r for r in usable if wi.base_method(r["method"]) == "sd"]
    if not ar or not names:
        return {}
    settings_of = {n: wc.variant_settings(n, base, [r["stats"] for r in usable if r["method"] == n])
                   for n in names}
    run_budget = int(base.get("branch_budget") or 2)
    groups, built = {}, {}
    for n in names:
        mine = [r for r in usable if r["method"] == n]
        g = int(settings_of[n].get("gamma") or base["gamma"])
        calib = ar + mine + ([r for r in sd_cal if r["method"] != n] if n.startswith("mirror") else [])
        le = settings_of[n].get("exit_layer") or base.get("exit_layer")
        profiles = wi.this_machine(calib, target_layers=target_layers, gamma=g, exit_layer=le,
                                   branch_budget=run_budget, kappa=int(base.get("kappa") or 8), source=source)
        fraction = (le / target_layers) if le else hw.exit_fraction
        profiles["c"] = accelerator_profile(replace(hw, gamma=g, exit_fraction=fraction, branch_budget=run_budget),
                                            profiles["a"].calibration, g)
        profiles["d"] = many_cores_profile(profiles, split_costs(profiles, precision))
        if n.startswith("sd"):  # SD never runs two lanes at once: more cores change nothing for it
            profiles["d"] = replace(profiles["b"], key="d", name=PROFILE_D)
        groups[n] = [r for r in (wi.recorded_steps(rec, g) for rec in ar + mine) if r is not None]
        built[n] = _sourced(profiles, hit_sources(groups[n], wh.variant_settings(n, settings), pair, hw))
    out = {}
    for key in ("b", "c", "d"):
        if key == "c" and hw.tau is not None:
            continue  # the profile's acceptance is set by hand: nothing of the run to replay
        cands = wc.search(groups, lambda n, k=key: built[n].get(k), settings_of, run_budget)
        if not cands["mirror"]:
            continue  # (d) without the thread scaling: not grounded
        name = next(p[key].name for p in built.values() if p.get(key) is not None)
        notes = wc.not_replayable(settings_of, cands["budgets_replayed"], run_budget, cands["budgets_held"])
        notes += [f"{n}: not priced (this run's spans could not calibrate it)" for n in cands["unpriced"]]
        out[key] = wc.choose(cands, key, name, notes)
        picked = out[key]["mirror"]
        if picked is not None:
            prof = built[picked["method"]][key]
            source = _picked_source(groups[picked["method"]], prof, picked, run_budget)
            out[key]["hit_source"] = source.words() if source is not None else None
            if series is not None and key in ("b", "c") and out[key]["sd"] is not None:
                series[key] = _series(groups[picked["method"]], prof, picked, out[key]["sd"]["speedup"],
                                      run_budget, source)
    return out


def _picked_source(recorded: list, profile: Profile, picked: dict, run_budget: int):
    """The hit-rate source of the pick: where it is the run's own, its hits at the picked budget
    (the verdict ranks replayed), which is the rate the pick was projected at."""
    source = profile.hit_source
    budget = int(picked["settings"].get("branch_budget") or run_budget)
    if source is None or source.kind != "run" or budget == run_budget:
        return source
    _, steps = wc.mirror_at_budget(recorded, profile, budget, run_budget, picked["settings"].get("gamma"))
    mine = [r for r in steps if r.method == "mirror"]
    overlapped = sum(r.overlapped for r in mine)
    if not overlapped:
        return source
    return replace(source, rate=sum(r.hits for r in mine) / overlapped,
                   note=f"at budget {budget}, from the verdict ranks")


def _series(recorded: list, profile: Profile, picked: dict, sd_speedup: float, run_budget: int,
            source) -> dict:
    """Mirror-SD over SD against the hit rate on `profile`, at the picked variant's settings
    (every drafted step at each rate; SD does not change with it); at `source`'s own rate the
    pick itself."""
    budget = int(picked["settings"].get("branch_budget") or run_budget)
    gamma = picked["settings"].get("gamma")

    def project_at(h):
        at = replace(profile, hit_rate=h, reweight=True)
        row, _ = wc.mirror_at_budget(recorded, at, budget, run_budget, gamma)
        return sd_speedup, (row or {}).get("speedup")

    return wh.hit_rate_series(project_at, source, own=picked["speedup"] / sd_speedup if sd_speedup else None)
