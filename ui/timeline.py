"""The latency timeline: every measured span of every run on one time axis (plotly).

Top: one lane per (run, model lane) — the AR baseline's target, each speculative run's
target / draft / verify lanes — with bars coloured by what ran (prefix = layers 1..l_e,
exit head, suffix = layers l_e+1..N, draft rollouts...). Overlap between a run's target and
draft lanes is the draft time Mirror-SD hides. Bottom: tokens committed over time, per run.
Times are seconds from each run's own start, so the runs line up as if they raced.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .runs import SHORT_NAMES, RunRecord, analyse

# span label -> (legend name, colour)
LABELS = {
    "prefill": ("prefill", "#94a3b8"),
    "decode": ("target decode (1 token)", "#64748b"),
    "verify_forward": ("target verify forward", "#2563eb"),
    "prefix": ("target prefix (layers 1..ℓₑ)", "#1d4ed8"),
    "exit_head": ("early exit + hand-off (top-κ ids)", "#f59e0b"),
    "suffix": ("target suffix (layers ℓₑ+1..N)", "#60a5fa"),
    "draft": ("draft window (serial)", "#16a34a"),
    "prefill+draft": ("draft prefill + first window", "#86efac"),
    "extend": ("draft extend (d_γ)", "#4ade80"),
    "branches": ("draft branch rollouts (batched)", "#15803d"),
    "fallback": ("draft fallback (serial, on the critical path)", "#dc2626"),
    "accept": ("verify (acceptance rule)", "#a855f7"),
}
LANE_ORDER = ["target", "draft", "verify", "transfer"]
METHOD_ORDER = ["ar", "sd", "mirror"]


def lane_name(method: str, lane: str) -> str:
    return f"{SHORT_NAMES.get(method, method)} · {lane}"


def lanes_for(records: dict[str, RunRecord]) -> list[str]:
    """Lane names, top to bottom."""
    names = []
    for m in METHOD_ORDER:
        rec = records.get(m)
        if rec is None:
            continue
        present = {s.lane for s in rec.spans}
        for lane in LANE_ORDER + sorted(present - set(LANE_ORDER)):
            if lane in present:
                names.append(lane_name(m, lane))
    return names


def build_timeline(records: dict[str, RunRecord]) -> go.Figure:
    records = {m: r for m, r in records.items() if r is not None}
    lanes = lanes_for(records)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[0.68, 0.32])
    bars: dict[str, dict[str, list]] = {}
    for m in METHOD_ORDER:
        rec = records.get(m)
        if rec is None:
            continue
        for s in rec.spans:
            start = (s.start_ns - rec.t0_ns) / 1e9
            dur = max(s.end_ns - s.start_ns, 0) / 1e9
            b = bars.setdefault(s.label, {"x": [], "base": [], "y": [], "text": []})
            b["x"].append(dur)
            b["base"].append(start)
            b["y"].append(lane_name(m, s.lane))
            detail = f"<br>{s.detail}" if s.detail else ""
            b["text"].append(f"<b>{SHORT_NAMES.get(m, m)}</b> · {s.label}{detail}<br>step {s.step}"
                             f"<br>{start * 1e3:.1f} → {(start + dur) * 1e3:.1f} ms "
                             f"({dur * 1e3:.1f} ms)")
    for label in list(LABELS) + sorted(set(bars) - set(LABELS)):
        if label not in bars:
            continue
        name, colour = LABELS.get(label, (label, "#888888"))
        b = bars[label]
        fig.add_trace(go.Bar(x=b["x"], base=b["base"], y=b["y"], orientation="h", name=name,
                             marker_color=colour, marker_line_width=0, hovertext=b["text"],
                             hoverinfo="text", width=0.7), row=1, col=1)
    colours = {"ar": "#64748b", "sd": "#16a34a", "mirror": "#2563eb"}
    for m in METHOD_ORDER:
        rec = records.get(m)
        if rec is None:
            continue
        xs, ys, n = [0.0], [0], 0
        for t in analyse(rec).tokens:
            n += 1
            xs.append(t.t_ns / 1e9)
            ys.append(n)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv",
                                 name=f"{SHORT_NAMES.get(m, m)}: tokens committed",
                                 line=dict(color=colours.get(m, "#888"), width=2),
                                 hovertemplate="%{y} tokens at %{x:.2f} s<extra>" + SHORT_NAMES.get(m, m) + "</extra>",
                                 ), row=2, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=2, col=1)
    fig.update_xaxes(title_text="seconds from each run's start", row=2, col=1)
    fig.update_layout(barmode="overlay", height=300 + 28 * len(lanes), bargap=0.25,
                      margin=dict(l=10, r=10, t=30, b=40), hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=11)),
                      template="plotly_white", uirevision="timeline")
    if not lanes:
        fig.add_annotation(text="The timeline appears when a run has finished.", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.7)
    return fig
