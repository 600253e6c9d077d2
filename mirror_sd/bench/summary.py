"""Summaries of a benchmark's results (pure functions of plain values): the time breakdown
of a run from its spans, per category and method cells, and the latency model's predicted
against measured step times."""
from __future__ import annotations

import statistics

from mirror_sd.latency import latency_model as lm
from mirror_sd.bench.runners import HF_ASSISTED, _is_ar
from mirror_sd.engine.registry import having

# Time breakdown: each instant of a run's wall time goes to the highest-priority busy lane.
COMPONENTS = ["target prefill", "target forward", "target prefix", "early-exit head",
              "target suffix", "verify", "draft (exposed)", "overhead"]
HIDDEN = "draft (hidden)"  # draft work that ran while the target lane was busy: not on the wall
_TARGET_LABELS = {"prefill": "target prefill", "prefix": "target prefix",
                  "exit_head": "early-exit head", "suffix": "target suffix"}
_PRIORITY = {c: i for i, c in enumerate(["target prefill", "target forward", "target prefix",
                                         "early-exit head", "target suffix", "verify",
                                         "draft (exposed)"])}
WHAT_IF_SCENARIOS = [
    {"draft_device": "separate"},
    {"target_scale": 10},
    {"target_scale": 10, "draft_device": "separate"},
    {"target_scale": 10, "draft_device": "separate", "hit_rate": 0.9},
    {"draft_device": "serial"},
]




def _sum(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def pooled_prefill(stats: list[dict]) -> dict:
    """prefill_s (summed) and decode_tokens_per_s (decode tokens over decode time) of runs'
    stats (engine.stats.split_prefill); None where no run reports them."""
    dec = [(s.get("decode_tokens"), s.get("decode_s")) for s in stats]
    dec = [(n, t) for n, t in dec if n is not None and t is not None]
    tokens, secs = sum(n for n, _ in dec), sum(t for _, t in dec)
    return {"prefill_s": _sum(s.get("prefill_s") for s in stats),
            "decode_tokens_per_s": tokens / secs if dec and tokens > 0 and secs > 0 else None}


def time_breakdown(spans, start_ns: int, end_ns: int) -> dict[str, float]:
    """Seconds of [start_ns, end_ns] per component: each instant goes to the busy lane of
    highest priority (target, then verify, then draft), idle time to overhead. Also
    HIDDEN: draft time that overlapped target or verify work (off the critical path)."""
    out = {c: 0.0 for c in COMPONENTS}
    out[HIDDEN] = 0.0
    points = []
    for span in spans:
        if span.lane == "target":
            comp = _TARGET_LABELS.get(span.label, "target forward")
        elif span.lane == "verify":
            comp = "verify"
        elif span.lane == "draft":
            comp = "draft (exposed)"
        else:
            continue
        a, b = max(span.start_ns, start_ns), min(span.end_ns, end_ns)
        if b > a:
            points += [(a, 1, comp), (b, -1, comp)]
    points.sort(key=lambda p: (p[0], p[1]))
    active = {c: 0 for c in _PRIORITY}
    prev = start_ns
    for t, delta, comp in points + [(end_ns, 0, None)]:
        if t > prev:
            busy = [c for c, n in active.items() if n > 0]
            top = min(busy, key=_PRIORITY.get) if busy else "overhead"
            out[top] += (t - prev) / 1e9
            if active["draft (exposed)"] > 0 and top != "draft (exposed)":
                out[HIDDEN] += (t - prev) / 1e9
            prev = t
        if comp is not None:
            active[comp] += delta
    return out



def _cell(entries, method: str) -> dict:
    recs = [(e, e["methods"].get(method)) for e in entries]
    recs = [(e, r) for e, r in recs if r is not None]
    ok = [(e, r) for e, r in recs if not r["error"]]
    speedups = []
    for e, r in ok:
        ar = e["methods"].get("ar")
        if ar and not ar["error"] and ar["tokens_per_s"] > 0 and r["tokens_per_s"] > 0:
            speedups.append(r["tokens_per_s"] / ar["tokens_per_s"])
    new = sum(r["new_tokens"] for _, r in ok)
    wall = sum(r["wall_s"] for _, r in ok)
    fw = _sum(r["target_forwards"] for _, r in ok)
    hits = _sum(r["hits"] for _, r in ok)
    fbs = _sum(r["fallbacks"] for _, r in ok)
    hidden = [r["draft_hidden_fraction"] for _, r in ok if r["draft_hidden_fraction"] is not None]
    checked = [(e, r) for e, r in ok if r["identical_to_ar"] is not None]
    bad = [(e, r) for e, r in checked if not r["identical_to_ar"]]
    turns = [t["stats"] for _, r in ok for t in r.get("turns", []) if t.get("stats")]
    prefills = [st["prefill_s"] for st in turns if st.get("prefill_s") is not None]
    checks = [st["exit_check"] for st in turns if st.get("exit_check")]  # Mirror-SD's exit check (steps in turn)
    checked_steps = sum(c.get("in_turn", 0) for c in checks)
    return {
        **window_cell(turns),
        "questions": len(ok),
        "errors": len(recs) - len(ok),
        "new_tokens": new,
        "wall_s": wall,
        "tokens_per_s": new / wall if wall > 0 else None,
        "prefill_s_mean": statistics.fmean(prefills) if prefills else None,  # per run (turn)
        "decode_tokens_per_s": pooled_prefill(turns)["decode_tokens_per_s"],
        "speedup_median": statistics.median(speedups) if speedups else None,
        "speedup_mean": statistics.fmean(speedups) if speedups else None,
        "mean_accepted": _ratio(new, fw),
        "hit_rate": _ratio(hits, (hits or 0) + (fbs or 0)) if hits is not None else None,
        "draft_hidden_fraction": statistics.fmean(hidden) if hidden else None,
        "checked_steps": checked_steps,
        "checked_hit_rate": _ratio(sum(c.get("would_hit", 0) for c in checks), checked_steps) if checked_steps else None,
        "checked": len(checked),
        "mismatches": len(bad),
        "first_mismatch": ({"question_id": bad[0][0]["question_id"], **bad[0][1]["first_mismatch"]}
                           if bad else None),
    }


def window_cell(turns: list[dict]) -> dict:
    """The draft windows of runs (their stats): how many, mean length, {length: count} and
    {stop reason: count}; None where the runs record no windows (AR, HF assisted)."""
    lengths = [n for st in turns for n in st.get("window_lengths") or []]
    stops: dict[str, int] = {}
    for st in turns:
        for why, k in (st.get("window_stops") or {}).items():
            stops[why] = stops.get(why, 0) + k
    hist = {str(n): lengths.count(n) for n in sorted(set(lengths))}  # str keys: as results.json has them
    return {"windows": len(lengths), "window_mean": statistics.fmean(lengths) if lengths else None,
            "window_hist": hist, "window_stops": stops}


def summarize(results: dict) -> dict:
    """Per category and overall, per method: speedup (median and mean of per-question
    tokens/s over AR's), pooled tokens/s, mean accepted, hit rate, mismatches."""
    entries = results["questions"]
    methods = results["meta"]["methods"]
    cats = list(dict.fromkeys(e["category"] for e in entries))
    return {
        "by_category": {c: {m: _cell([e for e in entries if e["category"] == c], m)
                            for m in methods} for c in cats},
        "overall": {m: _cell(entries, m) for m in methods},
    }


def breakdown_summary(results: dict) -> dict:
    """Per method: seconds and ms per generated token of each time component (all questions)."""
    out = {}
    for m in results["meta"]["methods"]:
        tot = {c: 0.0 for c in COMPONENTS + [HIDDEN]}
        tokens = 0
        for e in results["questions"]:
            r = e["methods"].get(m)
            if r is None or r["error"]:
                continue
            tokens += r["new_tokens"]
            for k, v in r["breakdown_s"].items():
                tot[k] = tot.get(k, 0.0) + v
        out[m] = {"seconds": tot, "new_tokens": tokens,
                  "ms_per_token": {k: 1000 * v / tokens if tokens else None for k, v in tot.items()}}
    return out


_STARTUP = {("target", "prefill"), ("draft", "prefill+draft")}


def measured_steps(records, method: str) -> dict | None:
    """Measured decode-phase step time: (wall - prefill) / steps, pooled over runs.
    AR: a step is one decode forward after the prefill; SD/Mirror: Finish.stats steps (the
    draft's prefill+first window counts as startup); hf-assisted: target forwards after the
    first (which prefills the prompt and verifies the first candidates)."""
    time_s = steps = tokens = 0.0
    for r in records:
        if r["method"] != method or r["error"]:
            continue
        st, spans = r["stats"], r["spans"]
        startup = sum((s.end_ns - s.start_ns) / 1e9 for s in spans if (s.lane, s.label) in _STARTUP)
        n = st.get("new_tokens", 0) or 0
        if _is_ar(method) or method == HF_ASSISTED:
            k = max(0, (st.get("target_forwards") or 0) - 1)
            t = n - 1 if _is_ar(method) else n * k / max(1, k + 1)
        else:
            k, t = st.get("steps") or 0, n
        if k <= 0:
            continue
        time_s += r["wall_s"] - startup
        steps += k
        tokens += t
    if not steps:
        return None
    return {"step_s": time_s / steps, "tokens_per_step": tokens / steps, "steps": int(steps)}


FIGURES = ("measured_step_s", "measured_tokens_per_step", "measured_steps", "predicted_step_s",
           "predicted_tokens_per_step", "predicted_speedup", "error", "measured_decode_speedup")


def _row(figures: dict[str, tuple]) -> dict:
    """{figure: number} for the figures that could be computed, and `why_not`: {figure:
    reason} for the others, so that no table holds a None in place of a number."""
    row, why_not = {}, {}
    for key, (value, reason) in figures.items():
        if isinstance(value, (int, float)) and value == value:  # a number, not NaN
            row[key] = value
        else:
            why_not[key] = reason
    row["why_not"] = why_not
    return row


def _unknown_terms(cal: lm.Calibration) -> str:
    missing = [k for k, v in lm.step_terms(cal).items() if v is None]
    return ("the calibration has no " + ", ".join(missing) + " (no such spans in this run)"
            if missing else "the latency model gives no step time for it with this calibration")


def latency_report(cal: lm.Calibration, records, methods) -> dict:
    pred = lm.predict(cal)
    measured = {m: measured_steps(records, m) for m in methods}
    ar = measured.get("ar")
    rows = {}
    for m in methods:
        me, pr = measured.get(m), pred.get(m)
        no_me = "no decode step of it was measured (each run errored or stopped at its first token)"
        no_pr = (_unknown_terms(cal) if pr is not None else
                 "the latency model does not model this method (it models AR, SD and Mirror-SD)")
        me, pr = me or {}, pr or {}
        step_me, step_pr = me.get("step_s"), pr.get("step_s")
        rows[m] = _row({
            "measured_step_s": (step_me, no_me),
            "measured_tokens_per_step": (me.get("tokens_per_step"), no_me),
            "measured_steps": (me.get("steps"), no_me),
            "predicted_step_s": (step_pr, no_pr),
            "predicted_tokens_per_step": (pr.get("tokens_per_step"), no_pr),
            "predicted_speedup": (pr.get("speedup"), no_pr if step_pr is None else
                                  "the calibration has no AR step time or tokens per step"),
            "error": (step_pr / step_me - 1 if step_pr and step_me else None,
                      "needs both a measured and a predicted step time"),
            "measured_decode_speedup": (me["tokens_per_step"] / step_me * ar["step_s"]
                                        if step_me and ar else None,
                                        "needs measured decode steps of this method and of AR"),
        })
    what = []
    for sc in WHAT_IF_SCENARIOS:
        try:
            w = lm.what_if(cal, **sc)
            what.append({"changes": sc, **{m: w["projected"][m]["speedup"] for m in having(modelled=True)}})
        except (ValueError, TypeError):
            continue
    return {"calibration": cal.to_dict(), "terms_s": lm.step_terms(cal),
            "predicted_vs_measured": rows, "what_if": what, "note": lm.PROJECTION_NOTE}


