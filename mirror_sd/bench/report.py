"""The benchmark's output files: summary.md, plotly figures and results.json."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from mirror_sd.formats import number, percent, times
from mirror_sd.latency import latency_model as lm
from mirror_sd.bench.runners import label
from mirror_sd.bench.summary import COMPONENTS, HIDDEN

PARTIAL = "questions.partial.jsonl"  # per-question entries while a run is in progress



def _hits(c: dict) -> str:
    """Hit rate of the overlapped steps, and the exit check's of the steps in turn."""
    text = percent(c["hit_rate"])
    if c.get("checked_steps"):
        text += f" (in turn, checked after the run: {percent(c['checked_hit_rate'])} of {c['checked_steps']})"
    return text

def _mismatch(c: dict) -> str:
    if not c["checked"]:
        return "n/a"
    s = f"{c['mismatches']}/{c['checked']}"
    fm = c["first_mismatch"]
    if fm:
        s += f" (first: q {fm['question_id']} token {fm['position']})"
    return s


def window_lines(overall: dict, methods: list[str]) -> list[str]:
    """The draft windows per method: their lengths' distribution and why they stopped."""
    rows = [(m, overall[m]) for m in methods if overall[m].get("windows")]
    if not rows:
        return []
    out = ["", "## Draft windows", "",
           "Drafted tokens per verified window (engine/windows.py: fixed = gamma every step; "
           "adaptive = grows after a fully accepted window, shrinks after a rejection, stops where "
           "the draft's own probability of its token falls below the threshold, at a drafted eos, "
           "or at the tokens left to generate; priced = the length with the most expected tokens "
           "per second at the run's measured costs, 0 when drafting does not pay: the step "
           "decodes).", "",
           "| method | windows | mean length | length: share | stop reasons |", "|---|---|---|---|---|"]
    for m, c in rows:
        n = c["windows"]
        hist = ", ".join(f"{k}: {v / n:.0%}" for k, v in c["window_hist"].items())
        stops = ", ".join(f"{k} {v}" for k, v in sorted(c["window_stops"].items(), key=lambda kv: -kv[1]))
        out.append(f"| {label(m)} | {n} | {number(c['window_mean'])} | {hist} | {stops} |")
    return out


def summary_markdown(results: dict, files: list[str] | None = None, notes: list[str] | None = None) -> str:
    meta = results["meta"]
    methods = meta["methods"]
    lines = (_run_lines(results) + _speed_lines(results["summary"], methods)
             + _time_lines(results["breakdown"], methods)
             + _latency_lines(results["latency_model"], methods)
             + _note_lines(meta, methods, files, notes))
    return "\n".join(lines) + "\n"


def _run_lines(results: dict) -> list[str]:
    """The heading and what was run: pair, decoding settings, questions, command, versions."""
    meta = results["meta"]
    methods = meta["methods"]
    settings = meta["settings"]
    mode = "greedy (temperature 0)" if meta["greedy"] else f"sampling (temperature {settings['temperature']})"
    lines = [
        "# Benchmark: " + ", ".join(label(m) for m in methods), "",
        f"- Pair: target `{meta['target']}` ({meta['target_layers']} layers), draft "
        f"`{meta['draft']}`; precision target {meta['precision']}, draft "
        f"{meta.get('draft_precision', meta['precision'])} ({meta['dtype']}); devices target "
        f"{meta['devices']['target']}, draft {meta['devices']['draft']}; torch threads per lane "
        f"{meta['torch_threads']}; {meta['machine']['cpu_cores']} cores",
        f"- Decoding: {mode}, max new tokens {settings['max_new_tokens']}, gamma {settings['gamma']}, kappa "
        f"{settings['kappa']}, exit layer {meta['exit_layer']}, branch budget {settings['branch_budget']}, "
        f"windows {settings.get('window', 'fixed')}"
        + (f" (threshold {settings.get('window_threshold')}, {settings.get('window_min')}-{settings.get('window_max')} tokens)"
           if settings.get("window") in ("adaptive", "priced") else "")
        + (f", proposer {settings['proposer']}" if settings.get("proposer", "draft") != "draft" else ""),
        f"- Questions: {meta['questions']} ({', '.join(meta['categories'])}) from "
        f"`{meta.get('questions_file', 'the given list')}`; one warm-up run per method; "
        f"{meta['order']}",
    ]
    cross = meta.get("cross_tokenizer")
    if cross:
        covered = sorted(q["shared_coverage"] for q in results["questions"] if "shared_coverage" in q)
        lines.append(
            f"- Tokenizers: the draft has its own; {cross['shared_tokens']:,} tokens are shared "
            f"({cross['shared_share']:.0%} of the target's {cross['target_tokens']:,}) and the draft proposes only "
            f"those (token-level intersection)"
            + (f"; they cover {covered[len(covered) // 2]:.0%} of AR's output (median per question, "
               f"{covered[0]:.0%}-{covered[-1]:.0%})" if covered else ""))
    if meta.get("command"):
        lines.append(f"- Command: `{meta['command']}`")
    lines.append(f"- Run: {meta['started']} to {meta['finished']} (UTC); engine source "
                 f"{meta.get('source') or 'unknown'}; "
                 f"torch {meta['versions'].get('torch')}, transformers {meta['versions'].get('transformers')}")
    return lines


def _speed_lines(summ: dict, methods: list[str]) -> list[str]:
    """Speedup over AR per category; per method; per category and method; windows."""
    others = [m for m in methods if m != "ar"]
    lines = []
    lines += ["", "## Speedup over AR", "",
              "Per-question speedup = method tokens/s over AR tokens/s on the same question "
              "(turns pooled); cells give median / mean over the questions.", "",
              "| category | questions | AR tok/s | " + " | ".join(label(m) for m in others) + " |",
              "|---|---|---|" + "---|" * len(others)]
    rows = list(summ["by_category"].items()) + [("**overall**", summ["overall"])]
    for cat, cells in rows:
        lines.append(f"| {cat} | {cells['ar']['questions']} | {number(cells['ar']['tokens_per_s'])} | "
                     + " | ".join(f"{times(cells[m]['speedup_median'])} / {times(cells[m]['speedup_mean'])}"
                                  for m in others) + " |")
    lines += ["", "## Per method, all questions", "",
              "| method | tok/s | prefill s (mean) | decode tok/s | speedup median | speedup mean | "
              "mean accepted | hit rate | draft hidden | identical to AR (mismatches) | errors |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in methods:
        c = summ["overall"][m]
        lines.append(f"| {label(m)} | {number(c['tokens_per_s'])} | {number(c.get('prefill_s_mean'))} | "
                     f"{number(c.get('decode_tokens_per_s'))} | {times(c['speedup_median'])} | "
                     f"{times(c['speedup_mean'])} | {number(c['mean_accepted'])} | {_hits(c)} | "
                     f"{percent(c['draft_hidden_fraction'])} | {_mismatch(c)} | {c['errors']} |")
    lines += ["", "Prefill = time to a run's first committed tokens (the prompt's prefill; SD and "
              "Mirror-SD also draft and verify their first window in it, HF assisted its first "
              "candidates); decode tok/s = the tokens "
              "after those over the time after them. Mean accepted = generated tokens per target "
              "forward (the target's own token counts, so AR is 1.00). Mismatches: questions "
              "whose tokens differ from AR's (greedy runs only), with the first differing "
              "position.", "",
              "## Per category and method", "",
              "| category | method | questions | tok/s | speedup median | speedup mean | "
              "mean accepted | hit rate | mismatches |", "|---|---|---|---|---|---|---|---|---|"]
    for cat, cells in summ["by_category"].items():
        for m in methods:
            c = cells[m]
            lines.append(f"| {cat} | {label(m)} | {c['questions']} | {number(c['tokens_per_s'])} | "
                         f"{times(c['speedup_median'])} | {times(c['speedup_mean'])} | "
                         f"{number(c['mean_accepted'])} | {percent(c['hit_rate'])} | {_mismatch(c)} |")
    lines += window_lines(summ["overall"], methods)
    return lines


def _time_lines(bd: dict, methods: list[str]) -> list[str]:
    """Where the time goes, per method, from the spans."""
    lines = []
    lines += ["", "## Where the time goes (ms per generated token, from the spans)", "",
              "Each instant of wall time goes to the busiest lane by priority: target, then "
              "verify, then draft; what no span covers is overhead (Python, events, the "
              "harness). 'Draft hidden' ran while the target lane was busy: it costs no wall time.", "",
              "| method | " + " | ".join(COMPONENTS) + " | total | draft hidden |",
              "|---|" + "---|" * (len(COMPONENTS) + 2)]
    for m in methods:
        ms = bd[m]["ms_per_token"]
        total = sum(v for k, v in ms.items() if k != HIDDEN and v is not None) if bd[m]["new_tokens"] else None
        lines.append(f"| {label(m)} | " + " | ".join(number(ms[c], ".1f") for c in COMPONENTS)
                     + f" | {number(total, '.1f')} | {number(ms[HIDDEN], '.1f')} |")
    return lines


def _latency_lines(lat: dict, methods: list[str]) -> list[str]:
    """The latency model against the measured step times, its calibration, what-ifs."""
    lines = []
    cal = lat["calibration"]
    lines += ["", "## Latency model: predicted vs measured step time", "",
              "The paper's step-time model (mirror_sd/latency/latency_model.py) with costs calibrated from "
              "this run's spans; measured = (wall - prefill) / steps of the decode phase. The "
              "error is what the model leaves out (Python overhead between spans, scheduling).", "",
              "| method | measured step ms | predicted step ms | error | tokens/step | "
              "measured speedup (decode) | predicted speedup |", "|---|---|---|---|---|---|---|"]
    missing = []
    for m in methods:
        r = lat["predicted_vs_measured"][m]
        lines.append(f"| {label(m)} | {number(_ms(r.get('measured_step_s')), '.1f')} | "
                     f"{number(_ms(r.get('predicted_step_s')), '.1f')} | {number(r.get('error'), '+.0%')} | "
                     f"{number(r.get('measured_tokens_per_step'))} | {times(r.get('measured_decode_speedup'))} | "
                     f"{times(r.get('predicted_speedup'))} |")
        reasons = dict.fromkeys(r.get("why_not", {}).values())  # each reason once, in order
        missing += [f"- {label(m)}: n/a because {why}." for why in reasons]
    if missing:
        lines += ["", *missing]
    lines += ["", "Calibration: " + ", ".join(
        f"{k} {v}" for k, v in [
            ("T_target(1)", number(_ms(cal["t_target_1"]), ".1f") + " ms"),
            (f"T_target({cal['gamma'] + 1})", number(_ms(cal["t_target_k"]), ".1f") + " ms"),
            ("head share", percent(cal["head_share"])),
            ("early-exit head", number(_ms(cal["t_exit_head"]), ".1f") + " ms"),
            ("draft token", number(_ms(cal["t_draft_token"]), ".1f") + " ms"),
            ("branch forward", number(_ms(cal["t_branch_1"]), ".1f") + " ms + "
             + number(_ms(cal["t_branch_row"]), ".1f") + " ms/extra row"),
            ("contention", number(cal["contention"])),
            ("alpha (SD/Mirror)", f"{number(cal['alpha_sd'])}/{number(cal['alpha_mirror'])}"),
            ("hit rate", percent(cal["hit_rate"]))])]
    if cal.get("hit_rates"):
        lines[-1] += (f"; estimated hit rate at budget 1-8 (share of {cal.get('rank_steps')} steps whose "
                      "verdict root was among the first b scored roots; ignores rollout timing): "
                      + " / ".join(percent(h) for h in cal["hit_rates"][:8]))
    if cal.get("notes"):
        lines.append("Calibration notes: " + "; ".join(cal["notes"]))
    lines += ["", "## What if (projections from the latency model, not measurements)", "",
              "| scenario | SD speedup | Mirror-SD speedup |", "|---|---|---|",
              f"| as measured (model) | {times(lat['predicted_vs_measured'].get('sd', {}).get('predicted_speedup'))} | "
              f"{times(lat['predicted_vs_measured'].get('mirror', {}).get('predicted_speedup'))} |"]
    for w in lat["what_if"]:
        lines.append(f"| {', '.join(f'{k}={v}' for k, v in w['changes'].items())} | "
                     f"{times(w.get('sd'))} | {times(w.get('mirror'))} |")
    lines += ["", "More: `python -m mirror_sd.bench --what-if \"target_scale=10,draft_device=separate\" "
              "--calibration results.json`; keys: " + ", ".join(lm.WHAT_IF_KEYS) + "."]
    return lines


def _note_lines(meta: dict, methods: list[str], files, notes) -> list[str]:
    lines = []
    hf = meta.get("hf_assisted")
    extra = list(meta.get("run_notes") or []) + list(notes or [])
    if hf:
        extra.insert(0, "HF assisted = transformers' own `target.generate(assistant_model=draft)` "
                        f"with num_assistant_tokens {hf.get('num_assistant_tokens')}, schedule "
                        f"{hf.get('num_assistant_tokens_schedule')}, confidence threshold "
                        f"{hf.get('assistant_confidence_threshold')}; its forwards are timed by "
                        "hooks and its commits by a streamer (its first token comes with its first "
                        "verify, as SD's); drafted/accepted counts and hit rate are not observable (n/a).")
    if meta.get("resumed_questions"):
        extra.append("Resumed run: question(s) " + ", ".join(map(str, meta["resumed_questions"]))
                     + " were measured by an earlier process of this run that was interrupted.")
    if "mirror" in methods:
        extra.append("Mirror-SD runs two lanes (target and draft threads, one torch thread each) "
                     "at once, where the lanes share the CPU's cores only in the steps its measured "
                     "step times favour (engine/mirror/gate.py; `mirror:lane_overlap=always`: every "
                     "step, the Finish stats' `lane_split` says how many); AR, SD and HF assisted run "
                     "one model at a time on every core the two lanes use (placement.method_threads).")
    if files:
        extra.append("Files: " + ", ".join(f"`{f}`" for f in files))
    if extra:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in extra]
    return lines


def _ms(x):
    return None if x is None else 1000 * x


def make_figures(results: dict) -> dict:
    """plotly figures: speedup by category and method, time breakdown per method, and the
    latency model (predicted vs measured; projected speedup against target scale)."""
    return {"speedup": _speedup_figure(results), "time_breakdown": _breakdown_figure(results),
            "latency_model": _latency_figure(results)}


def _speedup_figure(results: dict):
    import plotly.graph_objects as go

    meta, summ = results["meta"], results["summary"]
    methods = meta["methods"]
    others = [m for m in methods if m != "ar"]
    cats = list(summ["by_category"]) + ["overall"]
    cells = {**summ["by_category"], "overall": summ["overall"]}
    fig1 = go.Figure()
    for m in others:
        med = [cells[c][m]["speedup_median"] for c in cats]
        mean = [cells[c][m]["speedup_mean"] for c in cats]
        fig1.add_bar(name=label(m), x=cats, y=med,
                     text=[times(v) for v in med], textposition="outside",
                     customdata=[[times(a), cells[c][m]["questions"]] for a, c in zip(mean, cats)],
                     hovertemplate="%{x}: median %{y:.2f}x, mean %{customdata[0]}, "
                                   "%{customdata[1]} questions<extra>" + label(m) + "</extra>")
    fig1.add_hline(y=1.0, line_dash="dash", annotation_text="AR")
    mode = "greedy" if meta["greedy"] else f"T={meta['settings']['temperature']}"
    fig1.update_layout(barmode="group", yaxis_title="speedup over AR (median tokens/s ratio)",
                       title=f"Speedup over AR by category ({meta['target']} / {meta['draft']}, "
                             f"{mode}, {meta['settings']['max_new_tokens']} new tokens)")
    return fig1


def _breakdown_figure(results: dict):
    import plotly.graph_objects as go

    methods = results["meta"]["methods"]
    bd = results["breakdown"]
    fig2 = go.Figure()
    names = [label(m) for m in methods]
    for comp in COMPONENTS:
        ys = [bd[m]["ms_per_token"][comp] for m in methods]
        if all(not y for y in ys):
            continue
        fig2.add_bar(name=comp, x=names, y=ys, offsetgroup="wall",
                     hovertemplate="%{x}: " + comp + " %{y:.1f} ms/token<extra></extra>")
    fig2.add_bar(name=HIDDEN + ", behind the target", x=names,
                 y=[bd[m]["ms_per_token"][HIDDEN] for m in methods], offsetgroup="hidden",
                 marker_pattern_shape="/", opacity=0.6,
                 hovertemplate="%{x}: draft hidden %{y:.1f} ms/token<extra></extra>")
    fig2.update_layout(barmode="stack", yaxis_title="ms per generated token",
                       title="Where the time goes (wall time per token by lane, from spans)")
    return fig2


def _latency_figure(results: dict):
    from plotly.subplots import make_subplots

    methods = results["meta"]["methods"]
    lat = results["latency_model"]
    cal = lat["calibration"]
    fig3 = make_subplots(rows=1, cols=2, subplot_titles=(
        "step time: measured vs latency model", "projected speedup vs target cost (projection)"))
    rows = lat["predicted_vs_measured"]
    ms = [m for m in methods if "measured_step_s" in rows[m]]
    fig3.add_bar(name="measured", x=[label(m) for m in ms],
                 y=[_ms(rows[m]["measured_step_s"]) for m in ms], row=1, col=1)
    fig3.add_bar(name="predicted", x=[label(m) for m in ms],
                 y=[_ms(rows[m].get("predicted_step_s")) for m in ms], row=1, col=1)
    scales = [1, 2, 3, 5, 10, 20, 50, 100]
    try:
        for dev, dash in (("shared", "solid"), ("separate", "dash")):
            curve = lm.speedup_curve(cal, "target_scale", scales, draft_device=dev)
            for m in ("sd", "mirror"):
                if m == "sd" and dev == "separate":
                    continue  # SD's lanes never overlap: the device choice does not move it
                fig3.add_scatter(x=scales, y=[p[m] for p in curve], mode="lines+markers",
                                 line_dash=dash, name=f"{label(m)} (projected, draft {dev})",
                                 row=1, col=2)
    except (ValueError, TypeError):
        pass
    fig3.update_xaxes(type="log", title_text="target cost x (projection)", row=1, col=2)
    fig3.update_yaxes(title_text="ms per step", row=1, col=1)
    fig3.update_yaxes(title_text="speedup over AR (projected)", row=1, col=2)
    fig3.update_layout(title="Latency model (projections are a model, not measurements)",
                       barmode="group")
    return fig3


def write_outputs(results: dict, out_dir: str | Path) -> list[str]:
    """results.json, summary.md and plots in out_dir; returns the file names written.
    results.json is written first, so a failing plot never loses the measurements."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = results.setdefault("meta", {})
    files, notes = ["results.json", "summary.md"], []
    meta["files"], meta["notes"] = files, notes
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    try:
        figs = make_figures(results)
    except Exception as e:  # plotly missing or a figure failing: the tables still get written
        figs = {}
        notes.append(f"plots skipped: {type(e).__name__}: {e}")
    for name, fig in figs.items():
        fig.write_html(out / f"{name}.html", include_plotlyjs="directory")
        files.append(f"{name}.html")
    if figs:
        files.append("plotly.min.js")
        if importlib.util.find_spec("kaleido") is None:
            notes.append("PNG plots skipped: plotly needs the kaleido package to write images "
                         "offline, and it is not installed (the HTML plots hold the same data).")
        else:
            try:
                for name, fig in figs.items():
                    fig.write_image(out / f"{name}.png")
                    files.append(f"{name}.png")
            except Exception as e:  # kaleido present but unable (e.g. no browser): HTML only
                first = str(e).splitlines()[0] if str(e) else ""
                notes.append(f"PNG plots skipped: {type(e).__name__}: {first}")
    (out / "summary.md").write_text(summary_markdown(results, files, notes))
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    partial = out / PARTIAL
    if partial.exists():
        partial.unlink()
    return files


