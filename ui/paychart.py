"""Where Mirror-SD would pay: one small chart of Mirror-SD's speed over SD's against the hit
rate, on the hardware the What-if fold projects (the last run's steps replayed: a projection),
with what this machine measured beside it.

The lines are the What-if fold's hit-rate series (mirror_sd/latency/whatif_hits.py) for
profiles (b), this pair with the draft on a device of its own, and (c), the accelerator pair;
each line's dot is the figure its row of the fold's "own settings" table gives (at the hit
rate that row uses). The measured points are this machine's, both lanes on the same cores:
each Mirror-SD run's decode speed over SD's in the last run, at the share of its verdicts that
hit. Pure HTML/SVG from figures: no torch, nothing measured here.
"""
from __future__ import annotations

import html
import math

from .figures import Card
from .runs import colour, label, variant_of

esc = html.escape

W, H = 600, 230  # the SVG's viewBox
X0, X1, Y0, Y1 = 52, 585, 14, 196  # the plot area in it
LINES = {  # profile key -> (what the line is, its colour)
    "b": ("this pair, the draft on a device of its own", "#7c3aed"),
    "c": ("an accelerator pair (target GPU, draft NPU)", "#0f766e"),
}


def _points(series: dict | None) -> list[tuple[float, float]]:
    return sorted((p["hit_rate"], p["mirror_over_sd"]) for p in (series or {}).get("points", [])
                  if p.get("mirror_over_sd") is not None)


def measured_points(c: dict[str, Card]) -> list[dict]:
    """This machine's Mirror-SD runs (last run): decode speed over SD's at the share of their
    verdicts that hit; a run that raced fewer than half its verdicts (the gate ran the rest in
    turn, as SD) is left out: its speed is mostly SD's, not the overlap's."""
    sd = c.get("sd")
    if sd is None or not sd.decode_tps:
        return []
    out = []
    for m, x in c.items():
        base, changes = variant_of(m)
        if base != "mirror" or changes.get("early_exit") == "off" or not x.decode_tps:
            continue
        raced = (x.hits or 0) + (x.misses or 0)
        if raced and 2 * raced >= (x.verify_steps or raced):
            out.append({"method": m, "hit_rate": (x.hits or 0) / raced, "over_sd": x.decode_tps / sd.decode_tps,
                        "verdicts": raced})
    return out


def _scale(values: list[float]) -> tuple[float, float, float]:
    """(low, high, tick step) of the y axis: 1× always inside, round ends."""
    lo, hi = min(values + [0.8]), max(values + [1.2])
    step = 0.25 if hi - lo <= 1.5 else 0.5
    return math.floor(lo / step) * step, math.ceil(hi / step) * step, step


def render_pay_chart(projection: dict | None, c: dict[str, Card]) -> str:
    """The chart with its legend, or '' without a projection with a hit-rate series."""
    p = projection or {}
    series = {k: _points((p.get("hit_series") or {}).get(k)) for k in LINES}
    series = {k: v for k, v in series.items() if len(v) > 1}
    if not series:
        return ""
    dots = {k: (((p.get("hit_sources") or {}).get(k) or {}).get("used"), (p.get("over_sd") or {}).get(k))
            for k in series}
    dots = {k: v for k, v in dots.items() if None not in v}
    here = measured_points(c)
    ys = [y for pts in series.values() for _, y in pts] + [y for _, y in dots.values()] + [m["over_sd"] for m in here]
    lo, hi, step = _scale(ys)

    def px(h: float) -> float:
        return X0 + (X1 - X0) * h

    def py(r: float) -> float:
        return Y1 - (Y1 - Y0) * (r - lo) / (hi - lo)

    parts = [f'<rect x="{X0}" y="{Y0}" width="{X1 - X0}" height="{py(1) - Y0:.1f}" class="pc-above"/>',
             f'<rect x="{X0}" y="{py(1):.1f}" width="{X1 - X0}" height="{Y1 - py(1):.1f}" class="pc-below"/>']
    t = lo
    while t <= hi + 1e-9:
        parts.append(f'<line x1="{X0}" x2="{X1}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="pc-grid"/>'
                     f'<text x="{X0 - 6}" y="{py(t) + 4:.1f}" class="pc-tick" text-anchor="end">{t:g}×</text>')
        t += step
    for h in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{px(h):.1f}" y="{Y1 + 16}" class="pc-tick" text-anchor="middle">{h:.0%}</text>')
    parts.append(f'<line x1="{X0}" x2="{X1}" y1="{py(1):.1f}" y2="{py(1):.1f}" class="pc-one"/>'
                 f'<text x="{X1 - 4}" y="{py(1) - 5:.1f}" class="pc-note" text-anchor="end">SD\'s speed</text>'
                 f'<text x="{X0 + 6}" y="{Y0 + 14}" class="pc-note">Mirror-SD faster than SD</text>'
                 f'<text x="{X1 - 6}" y="{Y1 - 6}" class="pc-note" text-anchor="end">Mirror-SD slower than SD</text>')
    for i, (k, pts) in enumerate(series.items()):
        path = " ".join(f"{px(h):.1f},{py(r):.1f}" for h, r in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{LINES[k][1]}" class="pc-line"/>')
        if k in dots:
            h, r = dots[k]
            parts.append(f'<circle cx="{px(h):.1f}" cy="{py(r):.1f}" r="5" fill="{LINES[k][1]}"/>'
                         f'<text x="{px(h) + 8:.1f}" y="{py(r) + (17 if i else -7):.1f}" class="pc-val" fill="{LINES[k][1]}">'
                         f'{r:.2f}×</text>')
    for m in here:
        x, y = px(m["hit_rate"]), py(m["over_sd"])
        parts.append(f'<rect x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{colour(m["method"])}" '
                     f'class="pc-measured"/><text x="{x + 8:.1f}" y="{y + 4:.1f}" class="pc-val" '
                     f'fill="{colour(m["method"])}">{m["over_sd"]:.2f}×</text>')
    svg = (f'<svg class="msd-paychart-svg" viewBox="0 0 {W} {H}" role="img" aria-label="Mirror-SD over SD '
           f'against the hit rate">{"".join(parts)}<text x="{(X0 + X1) / 2}" y="{H - 2}" class="pc-axis" '
           f'text-anchor="middle">hit rate: the share of steps whose next window was already drafted</text></svg>')
    legend = []
    for k in series:
        words, col = LINES[k]
        share = ((p.get("draft_share") or {}).get(k))
        cost = f", a draft forward {share:.0%} of a target forward" if share is not None else ""
        legend.append(f'<span><i style="background:{col}"></i>projected: {esc(words)}{esc(cost)} '
                      f'(What if, row ({k}))</span>')
    for m in here:
        legend.append(f'<span><i class="pc-sq" style="background:{colour(m["method"])}"></i>measured here, both '
                      f'models on the same cores: {esc(label(m["method"]))}, last run, decode '
                      f'({m["verdicts"]} verdict{"" if m["verdicts"] == 1 else "s"} raced)</span>')
    return (f'<div class="msd-paychart"><div class="msd-sub">Where Mirror-SD would pay: its speed over SD\'s '
            f'against the hit rate <span class="msd-proj-tag">projection, not a measurement</span> (the '
            f'last run\'s steps replayed; squares: measured)</div>{svg}'
            f'<div class="msd-paychart-legend">{"".join(legend)}</div></div>')
