"""The pair report's files: report.json (the figures, named as in the text), report.md and
report.html (plotly: acceptance per window position, the histogram of accepted counts, the
measured and projected speedups; several drafts share each plot)."""
from __future__ import annotations

import json
from pathlib import Path

from mirror_sd.bench import label
from mirror_sd.formats import number, percent, times

PROFILE_LABELS = {"a": "(a) this machine", "b": "(b) draft on its own device",
                  "c": "(c) accelerator pair"}
SPEED_METHODS = ("sd", "mirror", "hf-assisted")
FAR_BELOW_AR = 0.5  # a measured speed over AR under this gets its likely causes in the summary
ERROR_CHARS = 120  # a method's error in the summary line is cut to this length


def measured(report: dict) -> list[dict]:
    return [p for p in report["pairs"] if p["status"] == "measured"]


def _ms(seconds) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _pair_lines(p: dict) -> list[str]:
    """One measured pair in markdown."""
    acc, cost, speed = p["acceptance"], p["costs"], p["speed"]
    sd = acc["by_method"].get("sd", {})
    lines = [f"### Draft {p['draft']}", "",
             f"{p['questions']} questions ({', '.join(p['task_groups'])}), "
             f"{p['settings']['max_new_tokens']} new tokens, {p['precision']}, gamma "
             f"{p['settings']['gamma']} ({p['settings']['window']} windows), branch budget "
             f"{p['settings']['branch_budget']}; loaded in {p['load_s']:.0f} s, measured in "
             f"{p['measure_s']:.0f} s.", ""]
    lines += [f"- warning: {w}" for w in p.get("warnings") or []]
    lines += ["**Acceptance** (tau: tokens per target forward, the target's own token included)", "",
              "| | " + " | ".join(label(m) for m in p["methods"]) + " |",
              "|---|" + "---|" * len(p["methods"]),
              "| tau, all | " + " | ".join(number(acc["tau"][m]) for m in p["methods"]) + " |"]
    for cat, g in acc["by_task_group"].items():
        lines.append(f"| tau, {cat} | " + " | ".join(number(g["tau"][m]) for m in p["methods"]) + " |")
    rates = ", ".join(f"{r['position']}: {percent(r['rate'])} of {r['reached']}" for r in sd.get("position_rates", []))
    lines += ["", f"SD's acceptance rate per window position (accepted given all before it accepted): "
                  f"{rates or 'n/a'}.",
              f"Windows that accepted 0, 1, 2, ... drafts (SD): {sd.get('accepted_histogram', [])}; "
              f"overall {percent(sd.get('acceptance_rate'))} of {sd.get('drafted', 0)} drafted tokens.", ""]
    lines += ["**Costs measured on this machine**", "",
              f"- one target forward {_ms(cost['target_forward_s'])}, one draft forward "
              f"{_ms(cost['draft_forward_s'])}: the draft costs {percent(cost['draft_share_of_target'])} "
              f"of the target;",
              f"- a verify of {cost['verify_tokens']} tokens {_ms(cost['verify_s'])} = "
              f"{number(cost['verify_over_decode'])} decodes.", ""]
    lines += ["**Speed over AR, measured** (median of per-question tokens/s ratios, methods interleaved)", "",
              "| method | speedup | tokens/s | tau | mismatches |", "|---|---|---|---|---|"]
    for m in p["methods"]:
        s = speed[m]
        lines.append(f"| {label(m)} | {times(s['speedup_over_ar'])} | {number(s['tokens_per_s'])} | "
                     f"{number(s['tau'])} | {s['mismatches']}/{s['checked']} |")
    lines += [f"\n{label(m)} failed on {speed[m]['errors']} question(s): {speed[m]['error']}"
              for m in p["methods"] if speed[m]["error"]]
    mi = speed.get("mirror")
    if mi:
        lines += ["", f"Mirror-SD: hit rate {percent(mi['hit_rate'])}, draft hidden {percent(mi['draft_hidden'])}, "
                      f"the target's token in the early exit's top-kappa {percent(mi['exit_top_kappa_coverage'])} "
                      f"of steps."]
    lines += ["", *_projection_lines(p), *_recommendation_lines(p), *_cross_lines(p), ""]
    return lines


def _projection_lines(p: dict) -> list[str]:
    pr = p["projections"]
    if pr.get("error"):
        return [f"**Projections**: not available ({pr['error']}).", ""]
    lines = ["**Projections** (PROJECTIONS from the latency model, not measurements)", "",
             "| profile | SD, run settings | Mirror-SD, run settings | best SD (gamma) | "
             "best Mirror-SD (gamma, budget) |", "|---|---|---|---|---|"]
    for key, prof in pr["profiles"].items():
        run, best = prof["speedup_at_run_settings"], prof["best_settings"]
        bs, bm = best.get("sd") or {}, best.get("mirror") or {}
        lines.append(f"| {PROFILE_LABELS.get(key, key)} | {times(run.get('sd'))} | {times(run.get('mirror'))} | "
                     f"{times(bs.get('projected_speedup'))} ({bs.get('gamma', 'n/a')}) | "
                     f"{times(bm.get('projected_speedup'))} ({bm.get('gamma', 'n/a')}, "
                     f"{bm.get('branch_budget', 'n/a')}) |")
    sources = [f"{PROFILE_LABELS.get(k, k)}: {prof['hit_source']}" for k, prof in pr["profiles"].items()
               if prof.get("hit_source")]
    if sources:
        lines += ["", "Mirror-SD's hit rate where its lanes would overlap: " + "; ".join(sources) + "."]
    return lines + ["", pr["settings_note"] + ".", ""]


def _recommendation_lines(p: dict) -> list[str]:
    r = p.get("recommendation")
    if not r:
        return []
    lines = ["**Recommended for this machine** (projected gains are the latency model's)", "",
             _method_line(r["method"]),
             f"- precision: {r['precision']['value']} ({r['precision']['why']})"]
    if "gamma_sd" in r:
        g = r["gamma_sd"]
        lines.append(f"- SD gamma {g['value']} (ran {g['run']}): projected {times(g['projected_speedup'])}, "
                     f"gain {times(g['projected_gain'])} over the run's setting as replayed")
    if "branch_budget" in r:
        g, b = r["gamma_mirror"], r["branch_budget"]
        lines.append(f"- Mirror-SD gamma {g['value']} (ran {g['run']}), branch budget {b['value']} "
                     f"(ran {b['run']}): projected {times(b['projected_speedup'])}, gain "
                     f"{times(b['projected_gain'])} over the run's settings as replayed"
                     + ("; no setting is projected to beat AR here" if _below_ar(b) else ""))
    w = r["window"]
    length = w.get("length")
    head = (f"- window: {w['value']}" + ("" if length is None else
            " (decode: drafting does not pay here)" if length == 0 else f", about {length} tokens"))
    gain = f", projected {times(w['projected_speedup'])}" if w.get("projected_speedup") else ""
    lines.append(f"{head}{gain} ({w['why']})")
    return lines + [""]


def _below_ar(rec: dict) -> bool:
    """The best setting found is still projected slower than AR."""
    speed = rec.get("projected_speedup")
    return speed is not None and speed < 1.0


def recommended_setting(p: dict) -> str:
    """Mirror-SD's recommended window and branch budget for this machine in a few words:
    "γ 3, budget 2: 1.20x", or, where no setting is projected to beat AR, "none beats AR here
    (best: γ 1, budget 1, 0.59x)"; "n/a" without a recommendation."""
    r = p.get("recommendation") or {}
    g, b = r.get("gamma_mirror"), r.get("branch_budget")
    if not (g and b):
        return "n/a"
    setting = f"γ {g['value']}, budget {b['value']}"
    if _below_ar(b):
        return f"none beats AR here (best: {setting}, {times(b['projected_speedup'])})"
    return f"{setting}: {times(b['projected_speedup'])}"


def _method_line(m: dict) -> str:
    fastest = label(m.get("fastest"))
    if m["value"] == "ar":
        return (f"- method: AR, the target alone: no speculative method beat it here (the fastest, "
                f"{fastest}, ran at {times(m['measured_speedup'])})")
    return f"- method: {fastest} (measured {times(m['measured_speedup'])} over AR)"


def _cross_lines(p: dict) -> list[str]:
    c = p.get("cross_tokenizer")
    if not c:
        return []
    return [f"**Cross-tokenizer pair**: {c['shared_tokens']:,} shared tokens ({percent(c['shared_share'])} "
            f"of the target's {c['target_tokens']:,}); they cover {percent(c['output_coverage'])} of the "
            f"target's own output on these questions (lowest question {percent(c['output_coverage_min'])}).", ""]


def report_markdown(report: dict) -> str:
    lines = [f"# Pair report: target {report['target']}", "",
             f"Drafts: {', '.join(report['drafts'])}. Wall time {report['wall_s']:.0f} s "
             f"(checks, loading and measuring) on {report['machine']['platform']}. Speedups are "
             f"this machine's: measure your own.", ""]
    if report.get("command"):
        lines += [f"Command: `{report['command']}`", ""]
    for p in report["pairs"]:
        if p["status"] != "measured":
            lines += [f"### Draft {p['draft']}: {p['status']}", "", p["reason"], ""]
        else:
            lines += _pair_lines(p)
    return "\n".join(lines).rstrip() + "\n"


def short_error(text) -> str:
    """A method's error for one line: its first line, cut to ERROR_CHARS."""
    text = str(text or "").strip()
    first = text.splitlines()[0] if text else "unknown error"
    return first if len(first) <= ERROR_CHARS else first[:ERROR_CHARS - 1].rstrip() + "…"


def slow_reasons(p: dict, method: str) -> list[str]:
    """What the measured figures say slowed `method` down, in plain words (may be empty)."""
    s, cost = p["speed"][method], p.get("costs") or {}
    out = []
    contention = cost.get("contention")
    if method == "mirror" and contention and contention >= 1.3:
        out.append(f"the target ran {contention:.1f}x slower beside the draft (both share this "
                   f"machine's cores)")
    tau = s.get("tau")
    if tau is not None and tau < 1.3:
        out.append(f"the target kept few drafted tokens (tau {tau:.2f})")
    share = cost.get("draft_share_of_target")
    if share is not None and share >= 0.3:
        out.append(f"a draft forward costs {percent(share)} of a target forward")
    verify = cost.get("verify_over_decode")
    if verify is not None and verify >= 1.5:
        out.append(f"checking a window costs {verify:.1f} decodes")
    hit = s.get("hit_rate")
    if method == "mirror" and hit is not None and hit < 0.3:
        out.append(f"few steps were hits ({percent(hit)})")
    return out


def speed_words(p: dict, method: str) -> str:
    """One method's measured speed over AR for the summary line, with why where it failed
    ("HF assisted failed: <error>") or ran far below AR."""
    s = p["speed"][method]
    value, name = s["speedup_over_ar"], label(method)
    if s["error"] and value is None:
        return f"{name} failed: {short_error(s['error'])}"
    notes = []
    if s["error"]:
        notes.append(f"failed on {s['errors']} question(s): {short_error(s['error'])}")
    if value is not None and value < FAR_BELOW_AR:
        reasons = slow_reasons(p, method)
        if reasons:
            notes.append("slow because " + ", ".join(reasons))
    return f"{name} {times(value)}" + (f", {'; '.join(notes)}" if notes else "")


def one_line(p: dict) -> str:
    """A pair's result in one line (the CLI's closing lines, the app's status): tau, then each
    method's measured speed over AR, with the reason where one failed or ran far below AR."""
    if p["status"] != "measured":
        return f"{p['draft']}: {p['status']}: {p['reason']}"
    s = p["speed"]
    return (f"{p['draft']}: tau SD {number(s['sd']['tau'])}, Mirror-SD {number(s['mirror']['tau'])}; "
            "measured over AR: " + "; ".join(speed_words(p, m) for m in SPEED_METHODS if m in s))


MEASURED_NOTE = "measured: median over the questions of tokens/s over AR's"
PROJECTED_NOTE = "projected by the latency model at the run's settings"


def speed_bars(p: dict) -> tuple[list[str], list, list[str]]:
    """The speed chart's bars for one pair: (labels, speeds over AR, what each is). The
    measured ones are the table's "over AR" columns, the projected Mirror-SD (b) and (c) its
    projected columns (the same numbers)."""
    labels, values, kinds = [], [], []
    for m in SPEED_METHODS:
        if m in p["speed"]:
            labels.append(f"{label(m)} (measured)")
            values.append(p["speed"][m]["speedup_over_ar"])
            kinds.append(MEASURED_NOTE)
    for key, prof in (p["projections"].get("profiles") or {}).items():
        for m in ("sd", "mirror"):
            labels.append(f"{label(m)} {PROFILE_LABELS.get(key, key)} (projected)")
            values.append(prof["speedup_at_run_settings"].get(m))
            kinds.append(PROJECTED_NOTE)
    return labels, values, kinds


def make_figures(report: dict) -> dict:
    """plotly figures over every measured pair: one trace per draft."""
    import plotly.graph_objects as go

    pairs = measured(report)
    curve, hist, speed = go.Figure(), go.Figure(), go.Figure()
    top = 1.0  # the speed chart's highest bar (the AR line at least)
    for p in pairs:
        for m, dash in (("sd", "solid"), ("mirror", "dot")):
            rows = p["acceptance"]["by_method"].get(m, {}).get("position_rates", [])
            curve.add_scatter(x=[r["position"] for r in rows], y=[r["rate"] for r in rows],
                              mode="lines+markers", line_dash=dash, name=f"{p['draft']}, {label(m)}",
                              customdata=[r["reached"] for r in rows],
                              hovertemplate="position %{x}: %{y:.0%} of %{customdata} windows<extra></extra>")
        counts = p["acceptance"]["by_method"].get("sd", {}).get("accepted_histogram", [])
        total = sum(counts) or 1
        hist.add_bar(x=list(range(len(counts))), y=[c / total for c in counts], name=p["draft"],
                     customdata=counts, hovertemplate="%{x} accepted: %{customdata} windows<extra></extra>")
        labels, values, kinds = speed_bars(p)
        speed.add_bar(x=labels, y=values, name=p["draft"], text=[times(v) for v in values],
                      textposition="auto", textangle=0, cliponaxis=False, customdata=kinds,
                      hovertemplate=f"{p['draft']}, %{{x}}: %{{text}} over AR (%{{customdata}})<extra></extra>")
        top = max([top, *(v for v in values if v is not None)])
    curve.update_layout(title="Acceptance per window position (accepted given all before it accepted)",
                        xaxis_title="position in the window", yaxis_title="acceptance rate",
                        yaxis_range=[0, 1.05], xaxis_dtick=1)
    hist.update_layout(title="Accepted drafts per window (SD)", xaxis_title="accepted drafts",
                       yaxis_title="share of windows", barmode="group", xaxis_dtick=1)
    # the AR line under the bars, named in the right margin: no bar label sits on it
    speed.add_hline(y=1.0, line_dash="dash", line_color="#6b7280", layer="below")
    speed.add_annotation(x=1.0, xref="paper", xanchor="left", y=1.0, yref="y", text="AR", showarrow=False)
    speed.update_layout(title="Speed over AR: measured here, and projected (a projection is a model)",
                        yaxis_title="speed over AR (x)", barmode="group", yaxis_range=[0, top * 1.2],
                        uniformtext_minsize=11, uniformtext_mode="show", margin_r=40)
    return {"acceptance": curve, "histogram": hist, "speedups": speed}


def report_html(report: dict, figs: dict, plotly_src: str | None = "plotly.min.js") -> str:
    """The page; `plotly_src` None puts plotly.js inside it (one file to download)."""
    from html import escape

    import plotly.offline

    script = (f"<script src='{plotly_src}'></script>" if plotly_src else
              f"<script>{plotly.offline.get_plotlyjs()}</script>")
    parts = [fig.to_html(full_html=False, include_plotlyjs=False) for fig in figs.values()]
    body = "".join(f"<pre>{escape(one_line(p))}</pre>" for p in report["pairs"])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Pair report</title>"
            f"{script}</head><body><h1>Pair report: target "
            f"{escape(report['target'])}</h1>{body}{''.join(parts)}</body></html>")


def write_report(report: dict, out_dir, self_contained: bool = False) -> list[str]:
    """report.json, report.md and report.html in out_dir; plotly.min.js beside the page, or
    inside it when `self_contained`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(report_markdown(report))
    files = ["report.json", "report.md"]
    try:
        import plotly.offline
        figs = make_figures(report)
        (out / "report.html").write_text(report_html(report, figs, None if self_contained else "plotly.min.js"))
        files.append("report.html")
        if not self_contained:
            (out / "plotly.min.js").write_text(plotly.offline.get_plotlyjs())
            files.append("plotly.min.js")
    except ImportError:  # plotly missing: the numbers are all in the JSON and markdown
        pass
    return files
