"""The latency model calibrated from measured runs, and a built-in calibration to project from.

The model itself (the step-time terms, `predict`, `what_if`) is in step_model.py; every public
name of it is importable from here too, so `latency_model` is the one name to import.
`calibrate()` fits a `Calibration` from the engine's spans and `Finish.stats`;
`default_calibration()` is the default pair's, measured by `python -m mirror_sd.bench`
(mirror_sd/data/measured.json).

Pure Python: no torch, no models. Spans may be `events.Span` objects or their dicts.
"""
from __future__ import annotations

import re

from mirror_sd import measured

from mirror_sd.latency.step_model import (DRAFT_DEVICES, MAX_BUDGET, PROJECTION_NOTE,  # noqa: F401
                                        WHAT_IF_KEYS, Calibration, alpha_from_tau, apply_changes,
                                        hit_rates_from_ranks, parse_what_if, predict, speedup_curve,
                                        step_terms, step_time, tau_from_alpha, tokens_per_step,
                                        what_if)

def _get(s, name):
    return s[name] if isinstance(s, dict) else getattr(s, name)


def _dur(s) -> float:
    return (_get(s, "end_ns") - _get(s, "start_ns")) / 1e9


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def _drafted(span, gamma: int) -> int:
    """Tokens a draft span wrote ("N tokens, serial"; adaptive windows vary), else gamma."""
    return _detail_int(_get(span, "detail")) or gamma


def _detail_int(detail: str) -> int | None:
    m = re.match(r"\s*(\d+)", detail or "")
    return int(m.group(1)) if m else None


def _per_token(draft_spans, gamma: int) -> float | None:
    """Seconds per drafted token over draft spans: their time over their tokens (a mean of
    per-span ratios would weigh a one-token window, which also feeds the verdict's tokens, as
    much as a twelve-token one)."""
    tokens = sum(_drafted(s, gamma) for s in draft_spans)
    return sum(_dur(s) for s in draft_spans) / tokens if tokens else None


def _fit_line(xs, ys):
    """Least squares y = a + b*(x - 1); b = 0 when x never varies."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    return my - b * (mx - 1), max(0.0, b)


def runs_from_events(events, method: str | None = None) -> list[dict]:
    """Split a stream of events (one or more runs) into records {method, stats, spans}."""
    records, spans = [], []
    for e in events:
        kind = e.get("type") if isinstance(e, dict) else type(e).__name__
        if kind == "Span":
            spans.append(e)
        elif kind == "Finish":
            stats = _get(e, "stats")
            records.append({"method": method or stats.get("method"), "stats": stats, "spans": spans})
            spans = []
    return records


def calibrate(records, *, target_layers: int, gamma: int, exit_layer: int | None = None,
              branch_budget: int = 2, kappa: int = 8, source: str = "") -> Calibration:
    """Fit the model's costs from measured runs.

    `records`: dicts {method: "ar"|"sd"|"mirror"|..., stats: Finish.stats, spans: [Span]},
    or a flat list of events (Span and Finish, as objects or dicts) from one or more runs.
    Costs come from the spans: AR `decode` -> t_target_1; SD `verify_forward` (gamma+1
    tokens) -> t_target_k, `draft` -> t_draft_token; Mirror `prefix`/`exit_head`/`suffix` ->
    head share and contention (Mirror's forward over SD's), `extend`, `branches` (fit over
    their "N rows"), `fallback` and `draft` (a window drafted after the verdict, the lanes in
    turn); `accept` -> t_accept. Acceptance and hit rate from the stats.
    """
    records = list(records)
    if records and not (isinstance(records[0], dict) and "spans" in records[0]):
        records = runs_from_events(records)
    n, le = target_layers, exit_layer or max(1, target_layers // 2)
    by: dict[str, list[dict]] = {}
    for r in records:
        by.setdefault(r["method"], []).append(r)
    notes: list[str] = []

    t1 = _mean(_dur(s) for s in _spans(by, "ar", "target", "decode"))
    if t1 is None:
        notes.append("no AR decode spans: T_AR unknown, no speedups")
    tk, gamma_measured = _verify_cost(by, gamma)
    draft_sd = _per_token(_spans(by, "sd", "draft", "draft"), gamma)
    sd_verified = tk is not None
    contention, head_share, t_exit, tk, mirror_window = _mirror_split(by, tk, n, le, notes)
    if not sd_verified and mirror_window is not None:
        # Mirror-SD's own forwards (no SD verify to compare): at the mean window they verified,
        # so that a replay at each step's window adds up to what the run spent
        gamma_measured = mirror_window
    t_b1, t_brow, rows_mean, fwd_factor = _branch_costs(by, gamma, contention)
    ext = _mean(_dur(s) for s in _spans(by, "mirror", "draft", "extend"))
    # a serial window after the verdict: a miss's fallback, or a step whose lanes ran in turn
    fb = _per_token(_spans(by, "mirror", "draft", "fallback") + _spans(by, "mirror", "draft", "draft"), gamma)
    if draft_sd is None and fb is not None:
        draft_sd = fb
        notes.append("no SD draft spans: serial draft cost from Mirror's fallbacks")
    accepts = _spans(by, "sd", "verify", "accept") + _spans(by, "mirror", "verify", "accept")
    t_acc = _mean(_dur(s) for s in accepts) or 0.0

    tau_sd, tau_m = _pooled_tau(by, "sd"), _pooled_tau(by, "mirror")
    ranks = [x for r in by.get("mirror", []) for x in (r["stats"].get("verdict_ranks") or []) if x is not None]
    hits = sum(r["stats"].get("hits", 0) or 0 for r in by.get("mirror", []))
    misses = sum(r["stats"].get("fallbacks", 0) or 0 for r in by.get("mirror", []))
    return Calibration(
        target_layers=n, exit_layer=le, gamma=gamma, branch_budget=branch_budget, kappa=kappa,
        t_target_1=t1, t_target_k=tk, head_share=head_share, t_exit_head=t_exit,
        t_accept=t_acc, t_draft_token=draft_sd, t_fallback_token=fb,
        t_extend=None if ext is None else ext / contention, t_branch_1=t_b1, t_branch_row=t_brow,
        branch_forwards=max(1.0, fwd_factor), branch_rows=rows_mean, contention=contention,
        alpha_sd=None if tau_sd is None else alpha_from_tau(tau_sd, gamma),
        alpha_mirror=None if tau_m is None else alpha_from_tau(tau_m, gamma),
        hit_rate=hits / (hits + misses) if hits + misses else None,
        hit_rates=hit_rates_from_ranks(ranks), rank_steps=len(ranks),
        gamma_measured=gamma_measured, source=source, notes=notes)


def _spans(by: dict, method: str, lane: str, label: str) -> list:
    return [s for r in by.get(method, []) for s in r["spans"]
            if _get(s, "lane") == lane and _get(s, "label") == label]


def _pooled_tau(by: dict, method: str) -> float | None:
    """Tokens per target forward over every run of `method`."""
    rs = by.get(method, [])
    tok = sum(r["stats"].get("new_tokens", 0) for r in rs)
    fw = sum(r["stats"].get("target_forwards", 0) for r in rs)
    return tok / fw if fw else None


def _verify_cost(by: dict, gamma: int) -> tuple[float | None, int]:
    """SD's verify forward of gamma + 1 tokens, and the gamma it was measured at."""
    ver = _spans(by, "sd", "target", "verify_forward")
    ver_k = [s for s in ver if _detail_int(_get(s, "detail")) in (None, gamma + 1)] or ver
    rows = [_detail_int(_get(s, "detail")) for s in ver]
    gamma_measured = gamma
    if len(ver_k) < len(ver) and None not in rows:
        # windows of varying length (the adaptive policy): the mean verify forward over every
        # step, at the mean window, so that steps x T_target(gamma_measured + 1) is what the run spent
        ver_k, gamma_measured = ver, max(1, round(sum(rows) / len(rows)) - 1)
    return _mean(_dur(s) for s in ver_k), gamma_measured


def _mirror_split(by: dict, tk, n: int, le: int, notes: list[str]):
    """(contention, head share, exit head time, verify forward time, mean drafted tokens or
    None) from Mirror's split verify forward (prefix, exit head, suffix), step by step."""
    steps: dict = {}
    windows: dict = {}
    for r_i, r in enumerate(by.get("mirror", [])):
        lengths = (r.get("stats") or {}).get("window_lengths") or []
        for s in r["spans"]:
            if _get(s, "lane") == "target" and _get(s, "label") in ("prefix", "exit_head", "suffix"):
                key = (r_i, _get(s, "step"))
                steps.setdefault(key, {})[_get(s, "label")] = _dur(s)
                if 0 <= key[1] < len(lengths):
                    windows[key] = lengths[key[1]]
    full = [d for d in steps.values() if len(d) == 3]
    drafted = [windows[k] for k, d in steps.items() if len(d) == 3 and k in windows]
    window = sum(drafted) / len(drafted) if drafted and len(drafted) == len(full) else None
    contention, head_share, t_exit = 1.0, 0.0, 0.0
    if full:
        fwd_m = _mean(d["prefix"] + d["suffix"] for d in full)  # the forward, exit head excluded
        exit_m = _mean(d["exit_head"] for d in full)
        # the suffix carries the final norm + LM head; the layers split evenly across depth
        per_layer = _mean(d["prefix"] for d in full) / le
        head_share = min(0.9, max(0.0, (fwd_m - per_layer * n) / fwd_m)) if fwd_m else 0.0
        if tk is not None and tk > 0:
            contention = max(1.0, fwd_m / tk)
        else:
            tk = fwd_m
            notes.append("no SD verify spans: Mirror's forward taken as uncontended")
        t_exit = exit_m / contention
    elif by.get("mirror"):
        notes.append("no split Mirror forwards (prefix/exit_head/suffix) in the spans")
    return contention, head_share, t_exit, tk, (window if window else None)


def _branch_costs(by: dict, gamma: int, contention: float):
    """(first row's cost, each extra row's, mean rows, branch forwards per step and token) of
    Mirror's batched branch forwards, fitted over their "N rows"."""
    branches = _spans(by, "mirror", "draft", "branches")
    t_b1, t_brow, rows_mean, fwd_factor = None, 0.0, 1.0, 1.0
    if branches:
        rows = [_detail_int(_get(s, "detail")) or 1 for s in branches]
        a, b = _fit_line(rows, [_dur(s) for s in branches])
        t_b1, t_brow = max(a, 0.0) / contention, b / contention
        rows_mean = sum(rows) / len(rows)
        m_steps = sum(r["stats"].get("steps", 0) for r in by["mirror"])
        if m_steps:
            fwd_factor = len(branches) / m_steps / gamma
    return t_b1, t_brow, rows_mean, fwd_factor



# ---------------------------------------------------------------------------------------------
# a calibration to project from without running the benchmark first

# The default pair (Qwen2.5-Coder 1.5B target, 28 layers; 0.5B draft), fp32, on a shared 2-core
# CPU, gamma 4, kappa 8, exit layer 14, branch budget 2: mirror_sd/data/measured.json
# "default_calibration" holds the values and the benchmark command that measured them.
# Replace it with your own: `calibrate(...)`, or the "calibration" of a benchmark's results.json.
DEFAULT_CALIBRATION = measured.values("default_calibration")


def default_calibration() -> Calibration:
    return Calibration.from_dict(DEFAULT_CALIBRATION)
