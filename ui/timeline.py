"""The latency timeline: every measured span of every run on one time axis (plotly).

Top: one lane per (run, model lane) — the AR baseline's target, each speculative run's
target / draft / verify lanes — with bars coloured by what ran, in six groups (GROUPS: the
target, its layers after the early exit, the early exit, the draft beside the target, the
draft while the target waits, the verdict; each bar's hover names its own span). Overlap between a run's target and
draft lanes is the draft time Mirror-SD hides. Bottom: tokens committed over time, per run.

Each run is drawn from its own start (t = 0: the engine's timed start, never later than its
first span) to its reported wall time, where a dashed mark closes its lanes; anything before
t = 0 (loading, a kernel build, the warm-up) is not part of a run and is not drawn. So the
runs line up as if they had raced, and each run's last x is the wall time the table reports.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .palette import LANES
from .runs import LATE_BRANCHES, RunRecord, Verdicts, analyse, colour, label, method_names, step_marks

# span label -> (legend name, colour), in the lane colours of ui/palette.py (hue families the
# token colours never use): the target in greys, its early exit pink, the draft cyan, dark while
# the target waits for it and light while it works beside the target.
LABELS = {
    "prefill": ("target prefill (prompt)", LANES["first_token"]),
    "decode": ("target decode (1 token)", LANES["ar_target"]),
    "verify_forward": ("target verify forward", LANES["target"]),
    "prefix": ("target: layers before the early exit", LANES["target"]),
    "exit_head": ("early exit: its guesses go to the draft", LANES["exit"]),
    "suffix": ("target: layers after the early exit", LANES["target_after"]),
    "draft": ("draft window (the target waits)", LANES["draft_waits"]),
    "prefill+draft": ("draft: prompt and first window", LANES["draft_waits"]),
    "extend": ("draft: reads its last drafted token", LANES["draft_beside"]),
    "branches": ("draft branch rollouts (batched)", LANES["draft_beside"]),
    LATE_BRANCHES: ("draft branch rollouts after the verdict (the target waits)", LANES["draft_waits"]),
    "fallback": ("draft: next window after a miss (target waits)", LANES["draft_waits"]),
    "accept": ("verdict (acceptance rule)", LANES["verdict"]),
}
# the legend: the span labels in six groups, one colour each, so that it stays short and its
# colours tell apart; a bar's hover still names its own span
GROUPS = {"target": (LANES["target"], ("prefill", "decode", "verify_forward", "prefix")),
          "target after the early exit": (LANES["target_after"], ("suffix",)),
          "early exit (its guesses go to the draft)": (LANES["exit"], ("exit_head",)),
          "draft beside the target": (LANES["draft_beside"], ("extend", "branches")),
          "draft, the target waits": (LANES["draft_waits"], ("draft", "prefill+draft", "fallback", LATE_BRANCHES)),
          "verdict": (LANES["verdict"], ("accept",))}
GROUP_OF = {span: (name, c) for name, (c, spans) in GROUPS.items() for span in spans}
LANE_ORDER = ["target", "draft", "verify", "transfer"]
AXIS_TITLE = "seconds from each run's own start (set-up and warm-up before it are not drawn)"


def lane_name(method: str, lane: str) -> str:
    return f"{label(method)} · {lane}"


def _ordered(records: dict) -> list[str]:
    """The records' methods in the registry's order, then any a trace names that it lacks."""
    known = [m for m in method_names() if m in records]
    return known + sorted(set(records) - set(known))


def lanes_for(records: dict[str, RunRecord]) -> list[str]:
    """Lane names, top to bottom."""
    names = []
    for m in _ordered(records):
        rec = records.get(m)
        if rec is None:
            continue
        present = {s.lane for s in rec.spans}
        for lane in LANE_ORDER + sorted(present - set(LANE_ORDER)):
            if lane in present:
                names.append(lane_name(m, lane))
    return names


def _engine_t0(rec: RunRecord) -> int | None:
    f = rec.finish
    return int(f.stats["t0_ns"]) if f is not None and f.stats.get("t0_ns") else None


def run_origin_ns(rec: RunRecord) -> int:
    """perf_counter_ns of the run's t = 0: the engine's own start when Finish reports it, else
    the first span (the prompt's prefill starts as the timed run starts), never after the
    first span; with no span yet, the record's own zero."""
    starts = [s.start_ns for s in rec.spans]
    candidates = [t for t in (_engine_t0(rec), min(starts) if starts else None) if t is not None]
    return min(candidates) if candidates else rec.t0_ns


def run_end_s(rec: RunRecord, origin_ns: int) -> float:
    """Where the run's drawing ends: its reported wall time (from the engine's start) when it
    finished, else its last span or event."""
    f = rec.finish
    if f is not None and "wall_s" in f.stats:
        engine = _engine_t0(rec)
        return ((engine if engine is not None else origin_ns) - origin_ns) / 1e9 + float(f.stats["wall_s"])
    ends = [s.end_ns for s in rec.spans] + [rec.t0_ns + rec.duration_ns]
    return (max(ends) - origin_ns) / 1e9


def committed_curve(rec: RunRecord, origin_ns: int) -> tuple[list[float], list[int]]:
    """(seconds, tokens committed) steps from (0, 0) to (end, the run's token count), each token
    at its step's verdict on the engine's clock (`step_marks`), never later than it arrived:
    Mirror-SD yields a step's tokens after the draft lane's work of the step, as the race knows."""
    xs, ys, n, floor = [0.0], [0], 0, 0.0
    marks = step_marks(rec)
    for t in analyse(rec).tokens:
        n += 1
        at_ms = min(t.t_ns / 1e6, marks.get(t.step, {}).get("verdict", float("inf")))
        floor = max(floor, (rec.t0_ns + at_ms * 1e6 - origin_ns) / 1e9)  # in order, as committed
        xs.append(max(0.0, floor))
        ys.append(n)
    f = rec.finish
    total = int(f.stats.get("new_tokens", n)) if f is not None else n
    xs.append(max(run_end_s(rec, origin_ns), xs[-1]))
    ys.append(total)
    return xs, ys


def _bars(records: dict[str, RunRecord], origins: dict[str, int]) -> dict[str, dict[str, list]]:
    bars: dict[str, dict[str, list]] = {}
    for m in _ordered(records):
        rec = records.get(m)
        if rec is None:
            continue
        verdicts = Verdicts()
        for s in rec.spans:
            start = (s.start_ns - origins[m]) / 1e9
            dur = max(s.end_ns - s.start_ns, 0) / 1e9
            b = bars.setdefault(verdicts.see(s), {"x": [], "base": [], "y": [], "text": []})
            b["x"].append(dur)
            b["base"].append(start)
            b["y"].append(lane_name(m, s.lane))
            detail = f"<br>{s.detail}" if s.detail else ""
            step = f"<br>step {s.step + 1}" if s.step >= 0 else ""
            b["text"].append(f"<b>{label(m)}</b> · {s.label}{detail}{step}"
                             f"<br>{start:.3f} → {start + dur:.3f} s ({dur * 1e3:.1f} ms)")
    return bars


def build_timeline(records: dict[str, RunRecord]) -> go.Figure:
    records = {m: r for m, r in records.items() if r is not None}
    lanes = lanes_for(records)
    origins = {m: run_origin_ns(r) for m, r in records.items()}
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[0.68, 0.32])
    bars = _bars(records, origins)
    named: set[str] = set()
    for span_label in list(LABELS) + sorted(set(bars) - set(LABELS)):
        if span_label not in bars:
            continue
        name, bar_colour = GROUP_OF.get(span_label) or LABELS.get(span_label, (span_label, "#888888"))
        b = bars[span_label]
        fig.add_trace(go.Bar(x=b["x"], base=b["base"], y=b["y"], orientation="h", name=name,
                             legendgroup=name, showlegend=name not in named,
                             marker_color=bar_colour, marker_line_width=0, hovertext=b["text"],
                             hoverinfo="text", width=0.7), row=1, col=1)
        named.add(name)
    for m in _ordered(records):
        rec = records.get(m)
        if rec is None:
            continue
        name, line = label(m), colour(m)
        end = run_end_s(rec, origins[m])
        own = [lane for lane in lanes if lane.startswith(f"{name} · ")]
        if own:  # a dashed mark closing the run's lanes at its reported wall time
            fig.add_trace(go.Scatter(x=[end] * len(own), y=own, mode="markers",
                                     marker=dict(symbol="line-ns", size=22, color=line,
                                                 line=dict(width=2, color=line)),
                                     name=f"{name}: end", showlegend=False,
                                     hovertemplate=f"{name} ends at {end:.2f} s (its wall time)"
                                                   "<extra></extra>"), row=1, col=1)
        xs, ys = committed_curve(rec, origins[m])
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv",
                                 name=f"{name}: tokens committed",
                                 line=dict(color=line, width=2),
                                 hovertemplate="%{y} tokens at %{x:.2f} s<extra>" + name + "</extra>",
                                 ), row=2, col=1)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)), row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=2, col=1)
    fig.update_xaxes(title_text=AXIS_TITLE, rangemode="tozero", row=2, col=1)
    fig.update_layout(barmode="overlay", height=300 + 28 * len(lanes), bargap=0.25,
                      margin=dict(l=10, r=10, t=30, b=40), hovermode="closest",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, font=dict(size=11)),
                      template="plotly_white", uirevision="timeline")
    if not lanes:
        fig.add_annotation(text="The timeline appears when a run has finished.", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.7)
    return fig
