"""The pair report: acceptance per window position and the histogram against hand-built
verdicts, the checks that refuse a pair before anything loads, and `python -m mirror_sd
pair-report` end to end on tiny local model folders (no downloads)."""
import json

import pytest
import torch
from test_loading import make_model_dir

import tiny
from mirror_sd import cli
from mirror_sd.bench.runners import engine_runner
from mirror_sd.engine.acceptance import verify_greedy
from mirror_sd.engine.events import EarlyExit, Verify
from mirror_sd.engine.settings import Settings
from mirror_sd.bench import window_acceptance as acc
from mirror_sd.report.checks import check_pairs, size_reason
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# windows [drafted, accepted]: a full accept, a reject at once, two partial, a plain step
WINDOWS = [[4, 4], [4, 0], [4, 2], [2, 1], [0, 0]]


# ---------------------------------------------------------------------------------------------
# acceptance from hand-built verdicts


def logits_choosing(tokens, vocab=10):
    """[len(tokens), vocab] logits whose row i has its argmax at tokens[i]."""
    out = torch.zeros(len(tokens), vocab)
    for i, t in enumerate(tokens):
        out[i, t] = 1.0
    return out


def test_position_rates_by_hand():
    rows = acc.position_rates(WINDOWS)
    # position i: windows that drafted >= i and accepted the i-1 before it; of those, accepted i
    assert [(r["position"], r["reached"], r["accepted"]) for r in rows] == [
        (1, 4, 3), (2, 3, 2), (3, 2, 1), (4, 1, 1)]
    assert [r["rate"] for r in rows] == pytest.approx([3 / 4, 2 / 3, 1 / 2, 1.0])


def test_histogram_and_tau_by_hand():
    assert acc.accepted_histogram(WINDOWS) == [1, 1, 1, 0, 1]  # the plain step drafted nothing
    assert acc.tau(WINDOWS) == pytest.approx((5 + 1 + 3 + 2 + 1) / 5)
    s = acc.summarize_windows(WINDOWS, [1, 0, 1])
    assert s["windows"] == 4 and s["drafted"] == 14 and s["accepted_drafts"] == 7
    assert s["acceptance_rate"] == pytest.approx(0.5)
    assert s["exit_top_kappa_coverage"] == pytest.approx(2 / 3)


def test_from_engine_verdicts():
    drafted = [3, 5, 7, 2]
    verdicts = [verify_greedy(drafted, logits_choosing([3, 5, 7, 2, 9])),  # all 4 and a bonus
                verify_greedy(drafted, logits_choosing([3, 5, 1, 2, 9])),  # rejected at the 3rd
                verify_greedy(drafted, logits_choosing([4, 5, 7, 2, 9]))]  # rejected at the 1st
    assert [v.accepted for v in verdicts] == [4, 2, 0] and verdicts[0].bonus
    windows = acc.from_verdicts(verdicts, 4)
    assert acc.accepted_histogram(windows) == [1, 0, 1, 0, 1]
    assert [r["rate"] for r in acc.position_rates(windows)] == pytest.approx([2 / 3, 1.0, 1 / 2, 1.0])


def test_an_impossible_window_is_refused():
    with pytest.raises(ValueError):
        acc.position_rates([[2, 3]])


def test_window_facts_from_verify_and_early_exit_events():
    events = [EarlyExit(0, 2, [0, 1, 2], [[5, 6], [7, 8], [9, 1]], [[0.0] * 2] * 3),
              Verify(0, [4, 7], 1, [0.9, 0.1], [0.8, 0.5], 8, "correction"),  # 8 in position 1's top-k
              EarlyExit(1, 2, [0, 1, 2], [[5, 6], [7, 8], [9, 1]], [[0.0] * 2] * 3),
              Verify(1, [5, 6], 0, [0.1, 0.1], [0.8, 0.5], 3, "correction"),  # 3 not in position 0's
              Verify(2, [1, 2], 2, [0.9, 0.9], [0.8, 0.8], 4, "bonus")]  # no early exit (SD)
    facts = acc.window_facts(events)
    assert facts == {"window_verdicts": [[2, 1], [2, 0], [2, 2]], "exit_cover": [1, 0]}


@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_the_engine_runner_records_every_window(method):
    """The benchmark's runner keeps each window's counts: they add up to the run's own."""
    pair = tiny.cached_pair("perturbed", 0)
    run = engine_runner(method)(pair, tiny.prompt(0, 6), Settings(max_new_tokens=20, gamma=3))
    windows = run.stats["window_verdicts"]
    assert len(windows) == run.stats["target_forwards"]
    assert sum(a for _, a in windows) == run.stats["accepted_drafts"]
    assert sum(n for n, _ in windows) == run.stats["drafted"]
    if method == "mirror":
        assert 0 < len(run.stats["exit_cover"]) <= len(windows)
    else:
        assert run.stats["exit_cover"] == []


# ---------------------------------------------------------------------------------------------
# checks before anything loads


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    alien = make_model_dir(root / "alien", layers=1, tokenizer=False)
    alien_tokenizer().save_pretrained(alien)
    return {"target": make_model_dir(root / "t", layers=3), "draft": make_model_dir(root / "d", layers=1),
            "big": make_model_dir(root / "big", layers=4), "alien": alien}


def alien_tokenizer():
    """A tokenizer with no token spelled like any of the tiny byte-level one's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {f"\u4e00{i:03d}\u4e01": i for i in range(300)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=next(iter(vocab))))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=next(iter(vocab)))


def test_size_reason():
    assert size_reason(1_000_000, 2_000_000).startswith("the draft (2M parameters) is not smaller")
    assert size_reason(2_000_000, 1_000_000) is None


def test_checks_refuse_each_pair_that_cannot_work(dirs):
    verdicts = check_pairs(dirs["target"], [dirs["draft"], dirs["big"], dirs["alien"]], precision="fp32")
    ok, big, alien = verdicts
    assert ok.ok and ok.draft_params < ok.target_params
    assert "not smaller than the target" in big.reason
    assert "share only 0 of" in alien.reason
    assert all("\n" not in v.reason for v in (big, alien))  # one line each


def test_checks_refuse_a_pair_that_does_not_fit(dirs):
    (v,) = check_pairs(dirs["target"], [dirs["draft"]], precision="fp32", memory_limit_bytes=1000)
    assert "GiB" in v.reason and "available" in v.reason


# ---------------------------------------------------------------------------------------------
# the command line on tiny local folders


def report_cli(capsys, dirs, *drafts, extra=()):
    args = ["pair-report", "--target", dirs["target"], "--precision", "fp32", "--max-new-tokens", "8",
            "--gamma", "3", "--window", "fixed", "--json"]
    for d in drafts:
        args += ["--draft", d]
    rc = cli.main(args + list(extra))
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip().startswith("{") else None), out.err


@pytest.fixture(scope="module")
def cli_run(dirs, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("report-out")
    capture = pytest.MonkeyPatch()
    import io
    import sys
    stdout, stderr = io.StringIO(), io.StringIO()
    capture.setattr(sys, "stdout", stdout)
    capture.setattr(sys, "stderr", stderr)
    try:
        rc = cli.main(["pair-report", "--target", dirs["target"], "--draft", dirs["draft"],
                       "--draft", dirs["alien"], "--precision", "fp32", "--max-new-tokens", "8",
                       "--gamma", "3", "--window", "fixed", "--lane-overlap", "always", "--json",
                       "--out", str(out_dir)])
    finally:
        capture.undo()
    return rc, json.loads(stdout.getvalue()), stderr.getvalue(), out_dir


def test_cli_report_fields(cli_run, dirs):
    rc, report, err, out_dir = cli_run
    assert rc == 0, err
    good, alien = report["pairs"]
    assert good["status"] == "measured" and good["draft"] == dirs["draft"]
    assert good["questions"] == 6 and len(good["task_groups"]) == 6  # one per task group
    assert good["settings"]["max_new_tokens"] == 8 and good["precision"] == "fp32"
    assert {"acceptance", "costs", "speed", "projections", "recommendation"} <= set(good)
    for m in ("ar", "sd", "mirror", "hf-assisted"):
        assert good["speed"][m]["tau"] >= 1.0 and good["speed"][m]["speedup_over_ar"] > 0
        assert good["speed"][m]["mismatches"] == 0
    assert good["speed"]["ar"]["tau"] == 1.0
    assert 0 <= good["speed"]["mirror"]["hit_rate"] <= 1  # every step overlapped: hits or misses
    costs = good["costs"]
    assert costs["target_forward_s"] > 0 and costs["draft_forward_s"] > 0
    assert costs["draft_share_of_target"] == pytest.approx(costs["draft_forward_s"] / costs["target_forward_s"])
    assert costs["verify_tokens"] == 4
    for key in ("a", "b", "c"):
        prof = good["projections"]["profiles"][key]
        assert prof["projection"] is True and prof["speedup_at_run_settings"]["ar"] == pytest.approx(1.0)
    rec = good["recommendation"]
    assert rec["projection"] is True and rec["precision"]["value"] == "fp32"
    assert 1 <= rec["branch_budget"]["value"] <= 8 and 1 <= rec["gamma_sd"]["value"] <= 8
    window = rec["window"]  # the priced windows' own pricing on the run's costs and acceptance
    assert window["value"] == "priced" and 0 <= window["length"] <= 4
    assert window["projected_speedup"] > 0 and window["why"].startswith("priced on this run's costs")


def test_priced_window_recommendation_by_hand():
    from mirror_sd.report.figures import priced_window
    costs = {"target_forward_s": 0.1, "draft_forward_s": 0.01, "verify_s": 0.12, "verify_tokens": 5}
    rates = [{"rate": 0.95}, {"rate": None}, {"rate": 0.9}]
    cheap = priced_window(costs, {"position_rates": rates}, "adaptive")
    assert cheap["length"] == 3 and cheap["projected_speedup"] > 1 and cheap["ran"] == "adaptive"
    dear = priced_window({**costs, "draft_forward_s": 0.2}, {"position_rates": rates}, "adaptive")
    assert dear["length"] == 0 and "decoded instead" in dear["why"]
    assert dear["projected_speedup"] == pytest.approx(1.0)
    assert priced_window(costs, None, "fixed")["length"] is None


def test_cli_acceptance_agrees_with_the_benchmark_files(cli_run):
    """The figures are the benchmark's: tau is its mean accepted, the windows add up to its
    accepted drafts, and the histogram and the position rates describe the same windows."""
    _, report, _, out_dir = cli_run
    good = report["pairs"][0]
    results = json.loads((out_dir / "bench-d" / "results.json").read_text())
    overall = results["summary"]["overall"]
    for m in ("sd", "mirror"):
        a = good["acceptance"]["by_method"][m]
        assert good["acceptance"]["tau"][m] == pytest.approx(overall[m]["mean_accepted"])
        drafted = sum(q["methods"][m]["drafted"] for q in results["questions"])
        accepted = sum(q["methods"][m]["accepted_drafts"] for q in results["questions"])
        assert (a["drafted"], a["accepted_drafts"]) == (drafted, accepted)
        hist, rates = a["accepted_histogram"], a["position_rates"]
        assert sum(hist) == a["windows"] and sum(k * c for k, c in enumerate(hist)) == accepted
        assert rates[0]["reached"] == a["windows"]
        assert rates[0]["accepted"] == a["windows"] - hist[0]
    for cat, group in good["acceptance"]["by_task_group"].items():
        assert group["tau"]["sd"] == pytest.approx(results["summary"]["by_category"][cat]["sd"]["mean_accepted"])


def test_cli_refused_pair_has_its_reason_not_zeros(cli_run):
    rc, report, err, out_dir = cli_run
    alien = report["pairs"][1]
    assert alien["status"] == "cannot work" and "share only 0" in alien["reason"]
    assert set(alien) == {"draft", "status", "reason"}  # no figures at all
    assert f"error: {alien['draft']}: " in err and "Traceback" not in err
    md = (out_dir / "report.md").read_text()
    assert "cannot work" in md and "PROJECTIONS" in md
    assert {"report.json", "report.md", "report.html", "plotly.min.js"} <= {p.name for p in out_dir.iterdir()}
    assert not (out_dir / "bench-alien").exists()  # never loaded


def test_cli_only_bad_pairs_is_one_line_and_status_2(capsys, dirs):
    rc, report, err = report_cli(capsys, dirs, dirs["big"])
    assert rc == 2 and report is None
    assert "not smaller than the target" in err and "Traceback" not in err
    rc, _, err = report_cli(capsys, dirs, dirs["draft"], extra=["--gamma", "auto"])
    assert rc == 2 and err.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# the app's tab: the table, its key, the summary line, the speed chart, the precision menu


def measured_pair(mirror=0.09, best=0.59, hf_error="ValueError: the assistant model needs a\nsecond line"):
    """A measured pair's report entry by hand: SD above AR, Mirror-SD far below it, HF assisted
    failed on every question; `best`: the recommended setting's projected speed over AR."""
    def speed(value, tau, error=None):
        return {"speedup_over_ar": value, "tau": tau, "error": error, "errors": 6 if error else 0}

    profiles = {k: {"speedup_at_run_settings": {"ar": 1.0, "sd": sd, "mirror": mi}}
                for k, sd, mi in (("a", 0.92, 0.4), ("b", 1.05, 1.11), ("c", 2.1, 2.6))}
    rates = [{"position": 1, "rate": 0.8, "reached": 10}, {"position": 2, "rate": 0.5, "reached": 8}]
    return {"draft": "d", "status": "measured", "reason": None,
            "speed": {"ar": speed(1.0, 1.0), "sd": speed(1.2, 1.8),
                      "mirror": {**speed(mirror, 1.7), "hit_rate": 0.08, "exit_top_kappa_coverage": 0.6},
                      "hf-assisted": speed(None, None, hf_error)},
            "costs": {"draft_share_of_target": 0.12, "verify_over_decode": 1.1, "contention": 2.5},
            "projections": {"profiles": profiles},
            "recommendation": {"gamma_mirror": {"value": 1, "run": 4, "projected_speedup": best},
                               "branch_budget": {"value": 1, "run": 2, "projected_gain": 1.5,
                                                 "projected_speedup": best}},
            "acceptance": {"by_method": {"sd": {"position_rates": rates, "accepted_histogram": [2, 3, 5]},
                                         "mirror": {"position_rates": rates}}}}


def test_the_key_defines_every_term_of_the_table():
    from ui.pair_report import TABLE_HEADERS, TABLE_KEY, key_html
    terms = [term for term, _ in TABLE_KEY]
    for header in TABLE_HEADERS[2:]:  # after the draft and its status
        assert any(term in header for term in terms), f"{header!r} has no line in the key"
    for term in terms:  # and nothing in the key that the table does not show
        assert any(term in header for header in TABLE_HEADERS), term
    for term in ("tau", "γ", "budget", "exit top-κ coverage", "HF assisted", "(b) projected", "(c) projected"):
        assert f"<b>{term}</b>: " in key_html()
    words = dict(TABLE_KEY)
    assert "per target forward" in words["tau"] and "device of its own" in words["(b) projected"]
    assert "assisted generation" in words["HF assisted"] and "branches" in words["budget"]


def test_headers_wrap_only_at_spaces_and_the_table_scrolls():
    from pathlib import Path

    from ui.pair_report import CELL_PAD_PX, CHAR_PX, TABLE_HEADERS, column_widths
    widths = column_widths()
    assert len(widths) == len(TABLE_HEADERS) and all(w.endswith("px") for w in widths)
    for header, width in zip(TABLE_HEADERS, widths):  # its longest word fits on one line
        assert int(width[:-2]) >= CELL_PAD_PX + CHAR_PX * max(len(w) for w in header.split())
    css = (Path(__file__).resolve().parents[1] / "ui" / "panes.css").read_text()
    rule = next(line for line in css.splitlines() if line.startswith("#pair-report-table th"))
    assert all(d in rule for d in ("word-break: normal", "overflow-wrap: normal", "hyphens: none"))
    assert "#pair-report-table .virtual-table-viewport { overflow-x: auto; }" in css


def test_the_recommendation_says_when_no_setting_beats_ar():
    from mirror_sd.report import render
    from ui.pair_report import table_row
    slow, fast = measured_pair(best=0.59), measured_pair(best=1.2)
    assert render.recommended_setting(slow) == "none beats AR here (best: γ 1, budget 1, 0.59x)"
    assert render.recommended_setting(fast) == "γ 1, budget 1: 1.20x"
    assert table_row(slow)[-1] == render.recommended_setting(slow)
    assert render.recommended_setting({**slow, "recommendation": None}) == "n/a"
    # the report's markdown says it too
    rest = {"precision": {"value": "int8", "why": "measured"}, "window": {"value": "fixed", "why": "too little"},
            "method": {"value": "sd", "fastest": "sd", "measured_speedup": 1.2}}
    beats = "no setting is projected to beat AR here"
    for p, said in ((slow, True), (fast, False)):
        lines = render._recommendation_lines({**p, "recommendation": {**p["recommendation"], **rest}})
        assert any(beats in line for line in lines) is said


def test_the_summary_line_says_why_a_method_failed_or_ran_far_below_ar():
    from mirror_sd.report.render import ERROR_CHARS, one_line
    from ui.pair_report import status_html, table_row
    line = one_line(measured_pair())
    assert "SD 1.20x; " in line  # above AR: no reason given
    assert "Mirror-SD 0.09x, slow because the target ran 2.5x slower beside the draft" in line
    assert "few steps were hits (8%)" in line
    assert line.endswith("HF assisted failed: ValueError: the assistant model needs a")  # its first line
    assert "second line" not in line
    long = one_line(measured_pair(hf_error="RuntimeError: " + "x" * 500))
    assert long.endswith("…") and len(long.split("HF assisted failed: ")[1]) == ERROR_CHARS
    assert "slow because" not in one_line(measured_pair(mirror=0.9))  # below AR, not far below
    row = table_row(measured_pair())
    assert row[7] == "failed" and row[6] == "0.09x"
    assert "HF assisted failed: ValueError" in status_html({"target": "t", "wall_s": 1, "pairs": [measured_pair()]})


def test_the_speed_chart_shows_the_table_numbers_readably():
    from mirror_sd.report.render import MEASURED_NOTE, PROJECTED_NOTE, make_figures
    from ui.pair_report import TABLE_HEADERS, table_row
    p = measured_pair(mirror=1.11)
    fig = make_figures({"pairs": [p]})["speedups"]
    (bars,) = fig.data
    shown = dict(zip(bars.x, bars.text))
    row = dict(zip(TABLE_HEADERS, table_row(p)))
    assert shown["SD (measured)"] == row["SD over AR"] == "1.20x"
    assert shown["Mirror-SD (measured)"] == row["Mirror-SD over AR"] == "1.11x"
    assert shown["Mirror-SD (b) draft on its own device (projected)"] == row["Mirror-SD (b) projected"]
    assert shown["Mirror-SD (c) accelerator pair (projected)"] == row["Mirror-SD (c) projected"]
    kinds = dict(zip(bars.x, bars.customdata))
    assert kinds["SD (measured)"] == MEASURED_NOTE and kinds["SD (a) this machine (projected)"] == PROJECTED_NOTE
    # readable labels: never clipped, headroom above the highest bar, the AR line under the bars
    assert bars.cliponaxis is False and bars.textposition == "auto"
    assert fig.layout.yaxis.range[1] >= 1.15 * max(v for v in bars.y if v is not None)
    (line,) = fig.layout.shapes
    assert line.layer == "below" and line.y0 == line.y1 == 1.0
    assert [a.text for a in fig.layout.annotations] == ["AR"] and fig.layout.annotations[0].xref == "paper"


def test_the_precision_menu_starts_where_the_main_page_does(monkeypatch):
    import gradio as gr

    from ui import frames, pair_report
    from ui.texts import TARGET_PRECISIONS
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    assert frames.DEFAULT_PRECISION == "int8"
    assert pair_report.page_precision(TARGET_PRECISIONS) == "int8"
    assert pair_report.page_precision(("fp32",)) == "fp32"  # a menu without it: its first
    monkeypatch.setattr(frames, "DEFAULT_PRECISION", "fp32")  # one source: the main page's
    assert pair_report.page_precision(TARGET_PRECISIONS) == "fp32"
    monkeypatch.setattr(frames, "DEFAULT_PRECISION", "int8")
    with gr.Blocks() as blocks:
        pair_report.build_pair_report_tab(lambda draft, progress: None)
    (menu,) = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "pair-report-precision"]
    assert menu.value == "int8" and [c[0] for c in menu.choices] == list(TARGET_PRECISIONS)
