"""Mirror-SD against SD, measured here and projected elsewhere: one small bar chart.

Each bar is Mirror-SD's speed over SD's. Measured here (both models on the same cores): each
Mirror-SD run's end-to-end median over SD's, the tiles' figures. Projected (the What-if fold's
rows (b), a device of its own for the draft, and (c), the accelerator pair): the bar at the
runs shown's steps replayed (each method's middle run, `whatif.over_sd_figure`, the What-if
tables' figure), a dot per interleaved round's own projection and a whisker over their range,
so that how far one run's projection swings shows beside it; from one run, that run's. Pure HTML from figures: nothing
is measured here.
"""
from __future__ import annotations

import html

from .figures import Card, runs_of, shown_run, speeds
from .whatif import over_sd_figure, range_values, round_span
from .runs import colour, exit_mirrors, label

esc = html.escape

PROJECTED = {  # What-if profile key -> what its bar is (the What-if fold replays Mirror-SD's steps)
    "b": "projected: this pair, the draft on a device of its own (Mirror-SD's steps)",
    "c": "projected: an accelerator pair, target GPU, draft NPU (Mirror-SD's steps)",
}
PROJECTED_COLOUR = "#7c3aed"


def bars(c: dict[str, Card], spreads: dict | None, projection: dict | None) -> list[dict]:
    """[{label, value, low, high, kind: measured | projected, colour, note}] in drawing order."""
    sp = speeds(c, spreads)
    out = []
    if "sd" in c and sp["sd"][0]:
        runs = runs_of(spreads)
        scope = f"medians of {runs} runs" if runs > 1 else "this run"
        for m in exit_mirrors(c):
            if not sp[m][0]:
                continue
            out.append({"label": f"measured here: {label(m)}", "value": sp[m][0] / sp["sd"][0], "low": None,
                        "high": None, "kind": "measured", "colour": colour(m),
                        "note": f"end to end, {scope}, both models on the same cores"})
    p = projection or {}
    for key, words in PROJECTED.items():
        value = over_sd_figure(p, key)  # the runs shown's replay (the What-if tables' figure)
        if value is None:
            continue
        rounds = range_values(p, key)  # each round's projection and the runs shown's
        share = (p.get("draft_share") or {}).get(key)
        cost = "" if share is None or key == "b" else f"; that pair's draft forward {share:.0%} of its target's"
        how = (f"the runs shown's steps replayed (What if, row ({key})); a dot per run's own projection, the whisker their range"
               if rounds else f"the steps of {shown_run(spreads)} replayed (What if, row ({key}))")
        out.append({"label": words, "value": value, "low": min(rounds) if rounds else None, "key": key,
                    "runs": round_span(p, key),  # each run's own projection: a dot on the bar
                    "high": max(rounds) if rounds else None, "kind": "projected",
                    "colour": PROJECTED_COLOUR, "note": f"decode, {how}{cost}"})
    return out


def render_pay_chart(projection: dict | None, c: dict[str, Card], spreads: dict | None = None) -> str:
    """The chart, or '' without both a measured and a projected bar."""
    rows = bars(c, spreads, projection)
    if not any(r["kind"] == "projected" for r in rows) or not any(r["kind"] == "measured" for r in rows):
        return ""
    top = max([2.0] + [r["value"] for r in rows] + [r["high"] for r in rows if r["high"] is not None]) * 1.08

    def pct(v: float) -> float:
        return 100.0 * v / top

    lines = []
    for r in rows:
        whisker = ""
        if r["low"] is not None:
            whisker = (f'<span class="pc-whisker" style="left:{pct(r["low"]):.1f}%;'
                       f'width:{pct(r["high"]) - pct(r["low"]):.1f}%" title="{r["low"]:.2f}–{r["high"]:.2f}×"></span>')
        whisker += "".join(f'<span class="pc-dot" style="left:{pct(v):.1f}%" title="one run: {v:.2f}×"></span>'
                           for v in r.get("runs") or [])
        tag = '<span class="msd-proj-tag">projection</span> ' if r["kind"] == "projected" else ""
        lines.append(
            f'<div class="pc-row pc-{r["kind"]}{" pc-" + r["key"] if "key" in r else ""}"><div class="pc-label">{tag}{esc(r["label"])}'
            f'<small>{esc(r["note"])}</small></div><div class="pc-track">'
            f'<span class="pc-bar" style="width:{pct(r["value"]):.1f}%;background:{r["colour"]}"></span>{whisker}'
            f'<span class="pc-one" style="left:{pct(1.0):.1f}%"></span></div>'
            # the value in a column of its own, past the track: never over a bar or a whisker
            f'<div class="pc-val">{r["value"]:.2f}×'
            + (f' <small>({r["low"]:.2f}–{r["high"]:.2f}×)</small>' if r["low"] is not None else
               ' <small>(one run)</small>' if r["kind"] == "projected" else "")
            # the runs on both sides of 1× as printed (whatif.rounds_span_one): said on the bar itself
            + (' <small class="pc-unsure">inconclusive</small>'
               if r["low"] is not None and round(r["low"], 2) < 1 < round(r["high"], 2) else "")
            + '</div></div>')
    return (f'<div class="msd-paychart"><div class="msd-sub">Mirror-SD\'s speed over SD\'s: measured here, '
            f'and projected with the two models on devices of their own (dashed line: SD; right of it, '
            f'Mirror-SD is faster)</div>{"".join(lines)}{_below_note(rows, projection, _decode_over_sd(c))}</div>')


def _decode_over_sd(c: dict[str, Card]) -> float | None:
    """Mirror-SD's decode speed over SD's in the runs shown: what a projection (decode only) is
    set beside, not the bars' end-to-end ratio."""
    sd, mirror = c.get("sd"), c.get("mirror")
    return mirror.decode_tps / sd.decode_tps if sd and mirror and sd.decode_tps and mirror.decode_tps else None


def _below_note(rows: list[dict], projection: dict | None, decode: float | None = None) -> str:
    """Where a projected bar (or its whisker) falls below a bar measured here: a projection is
    a model of the steps, not a rerun, and what the same model makes of this machine (What if,
    row (a)) shows how far it strays here, against the measured decode ratio (`decode`: the
    projections price decode only; else the first bar's) ('' otherwise)."""
    measured = [r["value"] for r in rows if r["kind"] == "measured"]
    projected = [min(r["value"], r["low"] if r["low"] is not None else r["value"])
                 for r in rows if r["kind"] == "projected"]
    if not measured or not projected or min(projected) >= min(measured):
        return ""
    own = ((projection or {}).get("over_sd_run_settings") or {}).get("a")
    # Mirror-SD's own run, the one the projections replay: its decode ratio, as they price decode
    gated, kind = (decode, " in decode") if decode else (measured[0], "")
    gap = ("that gap is the model's error here" if own is not None and abs(own - gated) >= 0.005 else
           "the model matches it here")
    here = (f" Replayed the same way on this machine (What if, row (a)), Mirror-SD is {own:.2f}× SD against "
            f"{gated:.2f}× measured{kind}: {gap}." if own else "")
    return (f'<p class="pc-note">Why a projection can fall below a bar measured here: it is a model, not a '
            f'rerun. It prices both methods\' steps from the median forward costs measured here, decode only, at the '
            f'settings each would pick there.{esc(here)}</p>')
