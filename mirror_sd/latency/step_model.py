"""Where the time of a decoding step goes: the paper's step-time model and its what-if projections.

The model (Bhendawade et al. 2025, eq. 10; docs/algorithm.md section 5), per step:

    T_AR     = T_target(1)                                               one token per step
    T_SD     = gamma * t_draft + T_target(gamma+1) + t_accept
    T_mirror = c * (T_prefix + T_ee) + t_comm_ee
             + max(c * T_suffix, c * T_rollouts)         on a hit   (the draft hides behind the suffix)
             + t_comm_verify + t_accept
             (a miss:  c * (T_prefix + T_ee + T_suffix) + t_comm + t_accept + gamma * t_draft_fallback)
    speedup  = tau * T_AR / T_step                    tau: tokens committed per step

That is the paper's schedule (schedule="paper"): the draft starts its rollouts when the
early exit arrives. This engine's draft lane starts at the beginning of the step (feeds
d_gamma, rolls out its own best guess) and admits the early exit's candidates when they come,
so its default schedule="engine" lets the draft work overlap the prefix as well:

    hit = c * (T_prefix + T_ee + T_suffix)                    the target lane, then
        + max(0, gamma * t_batch - T_suffix,                   rows admitted at the early exit
                 T_rollouts - (T_prefix + T_ee + T_suffix))    all the draft lane's work
    (while the target lane runs, the draft works at 1/c of its speed; what is left when the
    verdict comes runs alone, uncontended: the target lane waits for the next window)

with
    T_target(k) = t_target_1 + (k - 1) * (t_target_k - t_target_1) / gamma    (linear in the window)
    T_prefix    = (1 - head_share) * T_target(gamma+1) * exit_layer / N        layers 1..le
    T_suffix    = (1 - head_share) * T_target(gamma+1) * (N - le) / N + head_share * T_target(gamma+1)
    T_ee        = t_exit_head                 the early-exit head (final norm + LM head + top-kappa)
    T_rollouts  = t_extend + F * gamma * (t_branch_1 + (R - 1) * t_branch_row)
                  F: branch forwards per step over gamma (rows join mid-rollout: F >= 1),
                  R: rows per batched branch forward (<= branch budget)
    tau(gamma)  = (1 - alpha^(gamma+1)) / (1 - alpha)     alpha solved from the measured tau
    t_batch     = t_branch_1 + (R - 1) * t_branch_row      one batched branch forward
    c           = contention: how much slower each lane runs while the other one runs (1 = none)
                  (draft_device="separate": c = 1; "serial": one device, the lanes take turns)

Hit rate and branch budget: a step hits when the target's verdict root (A, c) is one of
the roots rolled out, i.e. among the first `branch_budget` of the roots scored once the early
exit arrived. Runs record each step's verdict rank (Finish.stats["verdict_ranks"]), so the
calibration carries an estimated hit rate per budget, `hit_rates`, and `what_if(...,
branch_budget=b)` uses hit_rate_at(b) (more branches cost rows and buy hits); without ranks
the hit rate is held. The estimate ignores whether a rollout finishes in time.

All times are seconds and "uncontended" (a lane running alone); `c` puts the measured
two-lanes-at-once slow-down back. `calibrate()` fills these from measured spans (the engine's
`Span` events) and `Finish.stats` (latency_model.py); `predict()` gives step time, tokens per step, tokens/s and
speedup per method; `what_if()` and `speedup_curve()` move a setting and project. Projections
are a model, not measurements: every dict they return says so.

Pure Python: no torch, no models. Spans may be `events.Span` objects or their dicts.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace

PROJECTION_NOTE = ("Projection from the latency model (mirror_sd/latency/latency_model.py), calibrated "
                   "from measured spans: a model, not a measurement.")

DRAFT_DEVICES = {
    "shared": "both lanes on the same cores, slowing each other as measured (contention c)",
    "separate": "the draft on its own device: no contention, lanes fully parallel",
    "serial": "one device running one lane at a time: no overlap at all",
}


@dataclass
class Calibration:
    target_layers: int
    exit_layer: int
    gamma: int
    gamma_measured: int | None = None  # window of the measured t_target_k (None: gamma)
    branch_budget: int = 2
    kappa: int = 8
    # target lane (seconds, running alone)
    t_target_1: float | None = None  # a 1-token target forward (AR decode)
    t_target_k: float | None = None  # a (gamma+1)-token target forward (verify)
    head_share: float = 0.0  # share of a verify forward spent in final norm + LM head
    t_exit_head: float = 0.0  # Mirror's early-exit head on the target lane
    t_accept: float = 0.0  # the acceptance rule, per step
    # draft lane (seconds, running alone)
    t_draft_token: float | None = None  # one token of a serial draft rollout (SD window)
    t_fallback_token: float | None = None  # one token of Mirror's serial fallback (None: t_draft_token)
    t_extend: float | None = None  # Mirror: feeding d_gamma before the branches
    t_branch_1: float | None = None  # one batched branch forward with one row
    t_branch_row: float = 0.0  # each extra row of a batched branch forward
    branch_forwards: float = 1.0  # F: branch forwards per step / gamma
    branch_rows: float = 1.0  # R: mean rows per branch forward
    # two lanes at once
    contention: float = 1.0
    schedule: str = "engine"  # "engine" (draft starts with the step) or "paper" (at the exit)
    draft_device: str = "shared"
    t_comm_ee: float = 0.0  # early-exit tokens target -> draft
    t_comm_verify: float = 0.0  # verdict target -> draft
    # acceptance
    alpha_sd: float | None = None
    alpha_mirror: float | None = None
    hit_rate: float | None = None  # measured at branch_budget
    # estimated hit rate at budget b = hit_rates[b - 1]: the share of measured Mirror steps
    # whose verdict root (A, c) was among the first b roots scored once the early exit arrived
    # (the roots the draft lane rolls out at budget b; see events.DraftBranch.rank). None: the
    # runs carried no ranks, and the hit rate is held when the budget changes.
    hit_rates: list[float] | None = None
    rank_steps: int = 0  # steps the hit_rates come from
    # where the numbers came from
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def hit_rate_at(self, budget: int) -> float | None:
        """Estimated hit rate with `budget` branches, from the verdict ranks (None: no ranks).
        An estimate: it counts a root as a hit whenever it is rolled out, however late its
        rollout finishes (the step-time model prices the time)."""
        if not self.hit_rates:
            return None
        return self.hit_rates[min(max(1, budget), len(self.hit_rates)) - 1]


MAX_BUDGET = 16  # engine.settings.MAX_BRANCH_BUDGET (a test keeps them equal; no torch imported here)


def hit_rates_from_ranks(ranks) -> list[float] | None:
    """[share of steps with 0 <= rank < b for b = 1..MAX_BUDGET] (ranks: -1 = not scored
    among the roots at all; None entries are skipped); None without ranks."""
    ranks = [r for r in ranks if r is not None]
    if not ranks:
        return None
    return [sum(0 <= r < b for r in ranks) / len(ranks) for b in range(1, MAX_BUDGET + 1)]


# ---------------------------------------------------------------------------------------------
# acceptance statistics


def tau_from_alpha(alpha: float, gamma: int) -> float:
    """Expected tokens per step with i.i.d. per-token acceptance alpha (Leviathan et al.)."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def alpha_from_tau(tau: float, gamma: int) -> float:
    """The per-token acceptance alpha whose expected tokens per step is tau (bisection)."""
    if tau <= 1.0:
        return 0.0
    if tau >= gamma + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if tau_from_alpha(mid, gamma) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ---------------------------------------------------------------------------------------------
# the model


def target_k(cal: Calibration, k: int) -> float:
    """One target forward over k rows: linear between one row and the measured verify."""
    t1, tk = cal.t_target_1, cal.t_target_k
    if tk is None:
        return t1
    if t1 is None:
        return tk
    return t1 + (k - 1) * (tk - t1) / max(1, cal.gamma_measured or cal.gamma)


def _prefix_suffix(cal: Calibration, t_fwd: float) -> tuple[float, float]:
    n, le = cal.target_layers, cal.exit_layer
    layers = (1.0 - cal.head_share) * t_fwd
    return layers * le / n, layers * (n - le) / n + cal.head_share * t_fwd


def step_terms(cal: Calibration) -> dict:
    """Every term of the model for the calibration's settings (seconds; None when unknown)."""
    g = cal.gamma
    t_fwd = target_k(cal, g + 1) if (cal.t_target_1 or cal.t_target_k) else None
    terms = {"T_AR": cal.t_target_1, "T_target(gamma+1)": t_fwd}
    draft = cal.t_draft_token
    terms["T_draft(gamma)"] = g * draft if draft is not None else None
    if t_fwd is not None:
        terms["T_prefix"], terms["T_suffix"] = _prefix_suffix(cal, t_fwd)
    else:
        terms["T_prefix"] = terms["T_suffix"] = None
    terms["T_ee"] = cal.t_exit_head
    if cal.t_branch_1 is not None:
        rows = max(1.0, cal.branch_rows)
        per = cal.t_branch_1 + (rows - 1.0) * cal.t_branch_row
        terms["T_rollouts"] = (cal.t_extend or 0.0) + cal.branch_forwards * g * per
        terms["T_rollouts_after_exit"] = g * per
    else:
        terms["T_rollouts"] = terms["T_rollouts_after_exit"] = None
    fb = cal.t_fallback_token if cal.t_fallback_token is not None else draft
    terms["T_fallback"] = g * fb if fb is not None else None
    return terms


def step_time(cal: Calibration, method: str) -> float | None:
    """Predicted seconds per step (per token for AR)."""
    t = step_terms(cal)
    if method == "ar":
        return t["T_AR"]
    if method == "sd":
        if t["T_draft(gamma)"] is None or t["T_target(gamma+1)"] is None:
            return None
        return t["T_draft(gamma)"] + t["T_target(gamma+1)"] + cal.t_accept
    if method == "mirror":
        need = ("T_prefix", "T_suffix", "T_rollouts", "T_fallback")
        if any(t[k] is None for k in need) or cal.hit_rate is None:
            return None
        mode = cal.draft_device
        c = cal.contention if mode == "shared" else 1.0
        comm = cal.t_comm_ee + cal.t_comm_verify
        head = t["T_prefix"] + t["T_ee"]
        if mode == "serial":  # one device: the lanes take turns
            hit = head + t["T_suffix"] + t["T_rollouts"]
        elif cal.schedule == "paper":
            hit = c * head + max(c * t["T_suffix"], c * t["T_rollouts"])
        else:  # the draft's work left at the verdict runs alone (the target lane waits)
            hit = c * (head + t["T_suffix"]) + max(0.0, t["T_rollouts_after_exit"] - t["T_suffix"],
                                                   t["T_rollouts"] - head - t["T_suffix"])
        miss = c * (t["T_prefix"] + t["T_ee"] + t["T_suffix"]) + t["T_fallback"]
        h = cal.hit_rate
        return h * hit + (1.0 - h) * miss + comm + cal.t_accept
    raise ValueError(f"no step-time model for method {method!r}")


def tokens_per_step(cal: Calibration, method: str) -> float | None:
    if method == "ar":
        return 1.0
    alpha = cal.alpha_sd if method == "sd" else cal.alpha_mirror
    if alpha is None:  # either method's acceptance stands for the other (same drafts)
        alpha = cal.alpha_mirror if method == "sd" else cal.alpha_sd
    return None if alpha is None else tau_from_alpha(alpha, cal.gamma)


def predict(cal: Calibration, methods=("ar", "sd", "mirror")) -> dict:
    """{method: {step_s, tokens_per_step, tokens_per_s, speedup}} (None where unknown)."""
    out = {}
    t_ar = step_time(cal, "ar")
    for m in methods:
        step, tau = step_time(cal, m), tokens_per_step(cal, m)
        tps = tau / step if step and tau is not None else None
        speedup = tau * t_ar / step if step and tau is not None and t_ar else None
        out[m] = {"step_s": step, "tokens_per_step": tau, "tokens_per_s": tps, "speedup": speedup}
    return out


# ---------------------------------------------------------------------------------------------
# what if

WHAT_IF_KEYS = {
    "target_scale": "multiply every target-lane cost (e.g. 10 = a target 10x slower per token)",
    "draft_scale": "multiply every draft-lane cost",
    "gamma": "drafted tokens per window (tau follows the fitted acceptance alpha)",
    "exit_layer": "early-exit layer (the prefix/suffix split; the hit rate is held unless set)",
    "branch_budget": "branch rollouts per step (rows per batched draft forward scale with it; the "
                     "hit rate follows the calibration's verdict ranks when it has them, else held)",
    "kappa": "early-exit candidates (no cost term: held hit rate unless hit_rate is set)",
    "hit_rate": "share of Mirror steps whose next window was precomputed",
    "alpha": "per-token acceptance probability, both methods",
    "draft_device": "shared | separate | serial (see DRAFT_DEVICES)",
    "contention": "slow-down of each lane while both run (1 = none)",
    "comm_ms": "transfer time per message between the lanes (two messages per step), ms",
    "schedule": "engine (draft starts with the step) | paper (rollouts start at the early exit)",
}


def apply_changes(cal: Calibration, **changes) -> Calibration:
    """A new calibration with `changes` applied (see WHAT_IF_KEYS)."""
    unknown = set(changes) - set(WHAT_IF_KEYS)
    if unknown:
        raise ValueError(f"unknown what-if setting(s) {sorted(unknown)}; "
                         f"known: {', '.join(WHAT_IF_KEYS)}")
    new = replace(cal, notes=list(cal.notes), gamma_measured=cal.gamma_measured or cal.gamma)
    _scale_costs(new, float(changes.get("target_scale", 1.0)), float(changes.get("draft_scale", 1.0)))
    _apply_settings(new, cal, changes)
    _apply_rates(new, changes)
    return new


def _scale_costs(new: Calibration, ts: float, ds: float) -> None:
    """The target's and the draft's costs times `ts` and `ds` (target_scale, draft_scale)."""
    if ts <= 0 or ds <= 0:
        raise ValueError("scales must be positive")
    for name in ("t_target_1", "t_target_k", "t_exit_head"):
        v = getattr(new, name)
        setattr(new, name, None if v is None else v * ts)
    for name in ("t_draft_token", "t_fallback_token", "t_extend", "t_branch_1", "t_branch_row"):
        v = getattr(new, name)
        setattr(new, name, None if v is None else v * ds)


def _apply_settings(new: Calibration, cal: Calibration, changes: dict) -> None:
    """gamma, exit_layer, branch_budget and kappa, checked."""
    if "gamma" in changes:
        g = int(changes["gamma"])
        if g < 1:
            raise ValueError("gamma must be at least 1")
        new.gamma = g
    if "exit_layer" in changes:
        le = int(changes["exit_layer"])
        if not 1 <= le <= cal.target_layers - 1:
            raise ValueError(f"exit_layer must be between 1 and {cal.target_layers - 1}")
        new.exit_layer = le
    if "branch_budget" in changes:
        b = int(changes["branch_budget"])
        if b < 1:
            raise ValueError("branch_budget must be at least 1")
        new.branch_rows = min(float(b), cal.branch_rows * b / max(1, cal.branch_budget))
        new.branch_budget = b
        if cal.hit_rates:  # what b branches buy: the share of verdicts ranked below b
            new.hit_rate = cal.hit_rate_at(b)
    if "kappa" in changes:
        new.kappa = int(changes["kappa"])


def _apply_rates(new: Calibration, changes: dict) -> None:
    """hit_rate, alpha, draft_device, contention, schedule and comm_ms, checked."""
    if "hit_rate" in changes:
        h = float(changes["hit_rate"])
        if not 0.0 <= h <= 1.0:
            raise ValueError("hit_rate must be in [0, 1]")
        new.hit_rate = h
    if "alpha" in changes:
        a = float(changes["alpha"])
        if not 0.0 <= a <= 1.0:
            raise ValueError("alpha must be in [0, 1]")
        new.alpha_sd = new.alpha_mirror = a
    if "draft_device" in changes:
        d = str(changes["draft_device"])
        if d not in DRAFT_DEVICES:
            raise ValueError(f"draft_device must be one of {', '.join(DRAFT_DEVICES)}")
        new.draft_device = d
    if "contention" in changes:
        new.contention = float(changes["contention"])
    if "schedule" in changes:
        if changes["schedule"] not in ("engine", "paper"):
            raise ValueError("schedule must be engine or paper")
        new.schedule = str(changes["schedule"])
    if "comm_ms" in changes:
        new.t_comm_ee = new.t_comm_verify = float(changes["comm_ms"]) / 1000.0


def what_if(calibration: Calibration | dict, **changes) -> dict:
    """Projected step time, tokens per step, tokens/s and speedup per method after `changes`,
    next to the calibration's own (baseline) projection. Labelled as a projection."""
    cal = calibration if isinstance(calibration, Calibration) else Calibration.from_dict(calibration)
    new = apply_changes(cal, **changes)
    held = []
    if "hit_rate" not in changes:
        moved = [k for k in ("exit_layer", "kappa", "branch_budget") if k in changes]
        if "branch_budget" in changes and cal.hit_rates:
            b = int(changes["branch_budget"])
            note = (f"hit rate at budget {b} estimated at {cal.hit_rate_at(b):.0%}: the share of "
                    f"{cal.rank_steps} measured steps whose verdict root was among the first {b} "
                    f"scored roots (ignores whether a rollout finishes in time)")
            if int(changes.get("gamma", cal.gamma)) != cal.gamma:
                note += f"; the ranks were measured at gamma {cal.gamma}"
            held.append(note)
            moved.remove("branch_budget")
        if moved:
            held.append(f"hit rate held at the calibrated {cal.hit_rate:.0%} for {', '.join(moved)}"
                        if cal.hit_rate is not None else "hit rate unknown")
    return {
        "projection": True,
        "note": PROJECTION_NOTE,
        "source": cal.source,
        "changes": dict(changes),
        "assumptions": held,
        "baseline": predict(cal),
        "projected": predict(new),
    }


def speedup_curve(calibration: Calibration | dict, param: str, values, **fixed) -> list[dict]:
    """Projected speedup over AR per method as `param` takes each of `values` (a plot's data):
    [{"param", "value", "ar", "sd", "mirror", "projection": True}, ...]."""
    out = []
    for v in values:
        p = what_if(calibration, **{**fixed, param: v})["projected"]
        out.append({"param": param, "value": v, "projection": True,
                    **{m: p[m]["speedup"] for m in p}})
    return out


def parse_what_if(text: str) -> list[dict]:
    """'target_scale=10,draft_device=separate;gamma=6' -> [{...}, {...}] (values typed)."""
    scenarios = []
    for chunk in text.split(";"):
        chunk = chunk.strip()
        if not chunk:
            continue
        d = {}
        for item in chunk.split(","):
            if "=" not in item:
                raise ValueError(f"what-if item {item!r} is not key=value")
            k, v = (s.strip() for s in item.split("=", 1))
            if k not in WHAT_IF_KEYS:
                raise ValueError(f"unknown what-if setting {k!r}; known: {', '.join(WHAT_IF_KEYS)}")
            try:
                d[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v)
            except ValueError:
                d[k] = v
        scenarios.append(d)
    return scenarios
