"""The app's "Pair report" tab: is this draft any good for this target, on this machine?

`build_pair_report_tab(pairs)` builds the tab's components inside an open gr.Blocks / gr.Tab
and wires its own events. It runs mirror_sd.report (the benchmark's harness on a small
Spec-Bench-format set, one pair after another) with a progress bar, and shows the acceptance
per window position (one curve per draft), the histogram of accepted drafts per window, the
measured and projected speedups, a table of the figures and the recommendation; the report's
files can be downloaded. `pairs`: the app's pair cache (session.PairCache: pairs are loaded
and locked as a Run loads them), or a function (draft name, progress) -> ModelPair.

`demo()` is the tab alone on the tiny test pairs (tests, screenshots).
"""
from __future__ import annotations

import logging
import tempfile
import time
from html import escape as esc
from pathlib import Path

import gradio as gr

from mirror_sd.errors import MirrorSDError
from mirror_sd.formats import number, percent, times

log = logging.getLogger(__name__)

TABLE_HEADERS = ["draft", "status", "tau SD", "tau Mirror-SD", "tau HF assisted", "SD over AR",
                 "Mirror-SD over AR", "HF assisted over AR", "hit rate", "exit top-κ coverage",
                 "draft / target forward", "verify / decode", "Mirror-SD (b) projected",
                 "Mirror-SD (c) projected", "recommended γ, budget (projected)"]
# The key under the table: (term as the headers write it, what it means), one line each.
TABLE_KEY = [
    ("AR", "the target alone, one token per forward: the baseline every speed is divided by."),
    ("SD", "speculative decoding: the draft writes a window of tokens, then the target checks "
           "them in one forward."),
    ("Mirror-SD", "the draft writes its next windows beside the target while the target checks "
                  "the current one, starting from the target's early-exit guesses."),
    ("HF assisted", "transformers' assisted generation (generate with the draft as assistant "
                    "model) on the same pair: the outside peer."),
    ("tau", "tokens committed per target forward, the target's own token included (AR: 1; "
            "higher: more drafted tokens kept)."),
    ("over AR", "speed measured here over AR's: the median over the questions of tokens/s over "
                "AR's, the methods run interleaved; above 1.00x is faster than AR."),
    ("hit rate", "share of Mirror-SD steps where the target's verdict matched a branch the draft "
                 "had already written, so the next window was ready early."),
    ("exit top-κ coverage", "share of Mirror-SD steps where the target's own next token (where it "
                            "stopped accepting) was among the early exit's top κ guesses."),
    ("draft / target forward", "the time of one draft forward (one drafted token) as a share of "
                               "one target forward (one token), measured here."),
    ("verify / decode", "the time of one target forward checking a window (γ + 1 tokens) over "
                        "that of a one-token target forward, measured here."),
    ("(b) projected", "Mirror-SD over AR projected by the latency model for this pair with the "
                      "draft on a device of its own (each lane at its measured speed alone), at "
                      "the run's settings."),
    ("(c) projected", "the same for an accelerator pair, not this one: a 14B target on an "
                      "H100-class GPU and a 0.6B draft on an NPU, their costs from memory "
                      "bandwidth, with this run's acceptance."),
    ("γ", "the window: tokens the draft writes per step before the target checks them."),
    ("budget", "the branch budget: how many branches the draft rolls out beside the target "
               "while it checks a window."),
    ("recommended", "the latency model's best γ and budget for Mirror-SD on this machine, with "
                    "its projected speed over AR; “none beats AR here” when no setting is "
                    "projected above 1.00x."),
]
# column widths: every header word fits on one line (headers wrap only at spaces); wider than
# the page, the table scrolls sideways
CHAR_PX, CELL_PAD_PX, MIN_COLUMN_PX = 9, 36, 84
WIDE_COLUMNS = {"draft": 170, "status": 150, TABLE_HEADERS[-1]: 240}


def column_widths(headers=TABLE_HEADERS) -> list[str]:
    """The table's column widths in px: each header's longest word and the cell's padding."""
    def width(h):
        return max(WIDE_COLUMNS.get(h, 0), MIN_COLUMN_PX, CELL_PAD_PX + CHAR_PX * max(map(len, h.split())))
    return [f"{width(h)}px" for h in headers]


def key_html(key=TABLE_KEY) -> str:
    """The key under the table, one line per term."""
    items = "".join(f"<li><b>{esc(term)}</b>: {esc(words)}</li>" for term, words in key)
    return f'<div class="msd-report-key"><b>Key</b><ul>{items}</ul></div>'


INTRO = ("Runs AR, SD, Mirror-SD and transformers' assisted generation on one built-in question "
         "per task group (interleaved, as the benchmark does) and reads off how well the draft "
         "matches the target and what it buys **on this machine**; projections to other hardware "
         "are labelled. About four minutes per draft for the default pair at int8 on 2 CPU cores shared with other work. "
         "Several drafts (comma-separated) are measured one after another and compared side by side.")


def table_row(p: dict) -> list[str]:
    """A pair's figures as one table row (strings, as shown); a refused pair gets its reason."""
    from mirror_sd.report.render import recommended_setting
    if p["status"] != "measured":
        return [p["draft"], f"{p['status']}: {p['reason']}"] + [""] * (len(TABLE_HEADERS) - 2)
    sp, cost, proj = p["speed"], p["costs"], p["projections"].get("profiles") or {}

    def over(m):
        if m not in sp:
            return "n/a"
        if sp[m]["error"] and sp[m]["speedup_over_ar"] is None:
            return "failed"  # the status line above the table says why
        return times(sp[m]["speedup_over_ar"])

    def projected(key):
        return times(proj[key]["speedup_at_run_settings"].get("mirror")) if key in proj else "n/a"

    mirror = sp.get("mirror") or {}
    return [p["draft"], "measured", *(number(sp[m]["tau"]) if m in sp else "n/a"
                                      for m in ("sd", "mirror", "hf-assisted")),
            over("sd"), over("mirror"), over("hf-assisted"), percent(mirror.get("hit_rate")),
            percent(mirror.get("exit_top_kappa_coverage")), percent(cost["draft_share_of_target"]),
            number(cost["verify_over_decode"]), projected("b"), projected("c"), recommended_setting(p)]


def status_html(report: dict | None, error: str | None = None) -> str:
    """One line per pair (or the one line that stopped the report)."""
    if error:
        return f'<div class="msd-report-status l-error">⚠ {esc(error)}</div>'
    if report is None:
        return '<div class="msd-report-status">Pick the drafts and press “Run pair report”.</div>'
    from mirror_sd.report.render import one_line
    items = "".join(f'<li class="{"" if p["status"] == "measured" else "l-error"}">{esc(one_line(p))}</li>'
                    for p in report["pairs"])
    return (f'<div class="msd-report-status"><b>Pair report</b> · target {esc(report["target"])} · '
            f'{report["wall_s"]:.0f} s<ul>{items}</ul></div>')


def page_precision(choices) -> str:
    """The precision the main page starts with (ui/frames.py DEFAULT_PRECISION, or the GPU's
    where runs get one) when `choices` offers it, else the first of `choices`."""
    from .frames import DEFAULT_PRECISION
    from .zerogpu import default_precision
    value = default_precision(DEFAULT_PRECISION)
    return value if value in choices else list(choices)[0]


def _loader(pairs, target: str, precision: str):
    """load(draft, progress) for run_pair_report: from the app's pair cache (a LoadedPair, run
    under its lock) or the function given."""
    if not hasattr(pairs, "get"):
        return pairs
    from .session import PairSpec
    return lambda draft, progress: pairs.get(PairSpec(target=target, draft=draft, precision=precision),
                                             progress)


def _checks(pairs, target: str, drafts: list[str], precision: str):
    """checks.check_pairs for named models; None for test pairs (nothing to look up)."""
    if not hasattr(pairs, "get") or getattr(pairs, "is_tiny", False):
        return None
    from mirror_sd.report.checks import check_pairs
    return check_pairs(target, drafts, precision=precision)


def parse_drafts(text: str) -> list[str]:
    drafts = list(dict.fromkeys(d.strip() for d in (text or "").replace("\n", ",").split(",") if d.strip()))
    if not drafts:
        raise MirrorSDError("Name at least one draft (comma-separated for several).")
    return drafts


def run_report(pairs, out_root, target, drafts_text, precision, per_category, max_new_tokens,
               progress=None):
    """The report for the tab: (report dict, folder of its files). Raises MirrorSDError."""
    from mirror_sd.questions import load_questions, per_category as first_k
    from mirror_sd.engine.settings import Settings
    from mirror_sd.engine.windows import DEFAULT_PROPOSER, DEFAULT_WINDOW, drafting_every_step
    from mirror_sd.report.render import write_report
    from mirror_sd.report.run import run_pair_report

    target = (target or "").strip() or "default"
    drafts = parse_drafts(drafts_text)
    # the report judges the draft model: it drafts every step (priced windows may decode
    # throughout on a pair whose costs the earlier runs measured, leaving no acceptance to report)
    settings = drafting_every_step(Settings(max_new_tokens=int(max_new_tokens), window=DEFAULT_WINDOW,
                                            proposer=DEFAULT_PROPOSER))
    settings.check()
    questions = first_k(load_questions(), int(per_category))
    verdicts = _checks(pairs, target, drafts, precision)
    out = Path(tempfile.mkdtemp(prefix="pair-report-", dir=out_root))
    report = run_pair_report(target, drafts, load=_loader(pairs, target, precision), questions=questions, settings=settings,
                             verdicts=verdicts, out_dir=out, progress=progress,
                             meta={"command": "the app's Pair report tab", "precision": precision})
    write_report(report, out, self_contained=True)
    return report, out


def build_pair_report_tab(pairs, *, target=None, precision=None, out_root=None,
                          precisions=None, default_drafts="default"):
    """The tab's components and events, inside an open gr.Blocks / gr.Tab. `pairs`: the app's
    pair cache (AppState.pairs) or a function (draft, progress) -> pair.
    `target` / `precision`: the page's own components to read them from (else the tab has its
    own). `precisions`: the precision menu (default: the main page's), starting where the main
    page starts (page_precision). Returns the components by name."""
    if precisions is None:  # the main page's menu, from the precision registry
        from .texts import TARGET_PRECISIONS
        precisions = TARGET_PRECISIONS
    with gr.Column(elem_id="pair-report"):
        gr.Markdown(INTRO)
        with gr.Row():
            own_target = gr.Textbox("default", label="Target model", elem_id="pair-report-target",
                                    visible=target is None)
            drafts = gr.Textbox(default_drafts, label="Drafts (comma-separated)", elem_id="pair-report-drafts",
                                info="e.g. “default, gemma-3-270m”: each is measured with this target.")
            own_precision = gr.Dropdown(list(precisions), value=page_precision(precisions), label="Precision",
                                        visible=precision is None, elem_id="pair-report-precision")
        with gr.Row():
            per_category = gr.Number(1, precision=0, minimum=1, maximum=3, label="Questions per task group")
            tokens = gr.Slider(8, 128, value=32, step=8, label="New tokens per question",
                               elem_id="pair-report-tokens")
            run_btn = gr.Button("Run pair report", variant="primary", elem_id="pair-report-run")
        status = gr.HTML(status_html(None), elem_id="pair-report-status")
        table = gr.Dataframe(headers=TABLE_HEADERS, value=None, interactive=False, wrap=True,
                             column_widths=column_widths(), elem_id="pair-report-table")
        gr.HTML(key_html(), elem_id="pair-report-key")
        with gr.Row():
            curve = gr.Plot(label="Acceptance per window position", elem_id="pair-report-curve")
            hist = gr.Plot(label="Accepted drafts per window", elem_id="pair-report-hist")
        speed = gr.Plot(label="Speed over AR: measured and projected", elem_id="pair-report-speed")
        text = gr.Markdown(elem_id="pair-report-text")
        files = gr.File(label="Download the report", file_count="multiple", interactive=False,
                        elem_id="pair-report-files")

    def on_run(target_value, drafts_text, precision_value, k, n, progress=gr.Progress()):
        from mirror_sd.report.render import make_figures, report_markdown
        t0 = time.perf_counter()
        try:
            report, out = run_report(pairs, out_root, target_value, drafts_text, precision_value, k, n,
                                     progress=lambda frac, msg: progress(frac, desc=msg))
        except MirrorSDError as e:
            return status_html(None, str(e)), None, None, None, None, "", None
        except Exception as e:  # a bug: one line here, the traceback in the log
            log.exception("pair report failed")
            return status_html(None, f"The report failed: {type(e).__name__}: {e}"), None, None, None, None, "", None
        log.info("pair report in %.1f s", time.perf_counter() - t0)
        figs = make_figures(report)
        rows = [table_row(p) for p in report["pairs"]]
        names = [out / n for n in ("report.html", "report.md", "report.json")]
        return (status_html(report), rows, figs["acceptance"], figs["histogram"], figs["speedups"],
                report_markdown(report), [str(f) for f in names if f.exists()])

    run_btn.click(on_run, [target if target is not None else own_target, drafts,
                           precision if precision is not None else own_precision, per_category, tokens],
                  [status, table, curve, hist, speed, text, files], concurrency_limit=1)
    return {"drafts": drafts, "run": run_btn, "status": status, "table": table, "curve": curve,
            "histogram": hist, "speed": speed, "text": text, "files": files}


def demo(out_root=None) -> gr.Blocks:
    """The tab alone on the tiny test pairs: a draft named like a bundled model of another
    tokenizer (gemma-3-270m, tiny-cross) gets the tiny cross-tokenizer pair."""
    from .session import PairCache
    with gr.Blocks(title="Pair report") as blocks:
        with gr.Tab("Pair report"):
            build_pair_report_tab(PairCache.tiny(), out_root=out_root)
    return blocks

