"""The web app: pure renders from hand-written events, then the app itself through
gradio_client, launched in-process in test mode (build_demo(tiny=True): the tiny random pair
of mirror_sd.models.tiny, no downloads)."""
from __future__ import annotations

import json
import re
import socket
from html import unescape
from pathlib import Path

import pytest

from mirror_sd.engine.events import Commit, DraftBranch, EarlyExit, Finish, Span, StepStart, Verify
from ui.inspector import render_inspector
from ui.render import render_legend, render_pane, shown, token_spans
from ui.results import render_cards, render_checks, render_statistics, render_verdict
from ui.runs import RunRecord, analyse, compare_tokens, label
from ui.texts import LEGEND, LEGEND_MARKS, parse_prompt
from ui.timeline import GROUP_OF, build_timeline, lanes_for
from ui.traces import TraceError, export_trace, parse_trace

T0 = 1_000_000_000

JOB_WAIT_S = 600  # a hang guard, not a speed bound: a busy machine may be slow


def stats(method, n, wall, **extra):
    d = {"method": method, "new_tokens": n, "wall_s": wall, "tokens_per_s": n / wall,
         "target_forwards": n, "mean_accepted": 1.0, "acceptance_rate": None, "hit_rate": None,
         "fallbacks": 0, "draft_hidden_fraction": None, "cancelled": False}
    d.update(extra)
    return d


def record(method, events, texts=None, id_texts=None):
    rec = RunRecord(method, t0_ns=T0, token_texts=list(texts or []), id_texts=dict(id_texts or {}))
    for i, ev in enumerate(events):
        rec.add(ev, (i + 1) * 10_000_000)
    return rec


def ar_record(tokens, texts=None):
    events = []
    for i, t in enumerate(tokens):
        events += [StepStart(i, i), Span("target", "decode", T0 + i * 10**7, T0 + (i + 1) * 10**7, i),
                   Commit(i, [t], ["plain"], "")]
    events.append(Finish(stats("ar", len(tokens), 0.1 * len(tokens)), list(tokens), ""))
    return record("ar", events, texts or [f"t{t}" for t in tokens])


def mirror_record(tokens=(1, 2, 3, 4, 5, 6, 7)):
    """Three steps: initial serial window (2 accepted + correction), a hit (all accepted +
    bonus: 3 tokens), then a miss and a fallback window (1 accepted)."""
    a, b, c, d, e, f, g = tokens
    events = [
        Span("draft", "prefill+draft", T0, T0 + 5 * 10**6, 0),
        DraftBranch(0, 0, 99, 1.0, [a, b, 50], [0.9, 0.8, 0.3], "serial"),
        StepStart(0, 0, [a, b, 50]),
        Span("target", "prefix", T0 + 5 * 10**6, T0 + 8 * 10**6, 0),
        Span("target", "exit_head", T0 + 8 * 10**6, T0 + 9 * 10**6, 0),
        Span("target", "suffix", T0 + 9 * 10**6, T0 + 12 * 10**6, 0),
        Span("draft", "branches", T0 + 9 * 10**6, T0 + 11 * 10**6, 0),
        EarlyExit(0, 2, [0, 1, 2, 3], [[a, 40], [b, 41], [c, 42], [43, 44]],
                  [[-0.1, -2.0], [-0.2, -2.5], [-0.3, -1.5], [-1.0, -1.2]]),
        Verify(0, [a, b, 50], 2, [0.9, 0.7, 0.1], [0.9, 0.8, 0.3], c, "correction"),
        Commit(0, [a, b, c], ["accepted", "accepted", "correction"], ""),
        DraftBranch(0, 2, c, 0.5, [d, e], [0.9, 0.9], "taken"),
        DraftBranch(0, 1, 41, 0.2, [60, 61], [0.5, 0.5], "cancelled"),
        StepStart(1, 3, [d, e]),
        Verify(1, [d, e], 2, [0.95, 0.9], [0.9, 0.9], f, "bonus"),
        Commit(1, [d, e, f], ["accepted", "accepted", "bonus"], ""),
        DraftBranch(1, 0, 70, 0.3, [71, 72], [0.5, 0.5], "cancelled"),
        DraftBranch(1, 2, f, 0.0, [g, 80], [0.9, 0.2], "serial"),
        StepStart(2, 6, [g, 80]),
        Verify(2, [g, 80], 1, [0.9, 0.1], [0.9, 0.2], 81, "correction"),
        Commit(2, [g], ["accepted"], ""),
        Finish(stats("mirror", 7, 0.35, target_forwards=3, steps=3, mean_accepted=7 / 3, hit_rate=0.5,
                     fallbacks=1, draft_hidden_fraction=0.4, acceptance_rate=5 / 7),
               [a, b, c, d, e, f, g], ""),
    ]
    return record("mirror", events, [f"t{t}" for t in tokens],
                  {t: f"w{t}" for t in range(100)})


# ----------------------------------------------------------------------------- pure renders

def test_token_text_is_escaped_and_whitespace_kept():
    evil = "<script>alert('x')</script>"
    rec = ar_record([5, 6], texts=[evil, "\n    return  x & y"])
    html = render_pane("ar", rec, "done")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "    return  x &amp; y" in html  # indentation kept verbatim, inside a <pre>
    assert '<pre class="msd-tokens">' in html
    assert html.count('class="msd-tok k-plain"') == 2  # the second token cut at its line break:
    assert html.count('class="msd-tok k-plain is-cont"') == 1  # its second piece on the next line
    text = re.sub(r"<[^>]+>", "", html.split('<pre class="msd-tokens">')[1].split("</pre>")[0])
    assert unescape(text) == shown(evil) + "\n    return  x & y"  # the text itself unchanged


def test_legend_lists_every_kind_with_a_tooltip():
    from html import escape
    html = render_legend()
    from ui.texts import LEGEND_GROUPS
    shown = {kind: short for _, kinds in LEGEND_GROUPS for kind, short in kinds}
    assert set(shown) == set(LEGEND)  # every kind once, in one of the groups
    for kind, (label, tip) in LEGEND.items():
        assert escape(shown[kind]) in html and escape(tip) in html and f"k-{kind}" in html
    for label, tip in LEGEND_MARKS.values():
        assert escape(label) in html and escape(tip) in html
    assert html.count("title=") == len(LEGEND) + len(LEGEND_MARKS) <= 8  # a short legend
    assert html.count('class="msd-legend-group"') == len(LEGEND_GROUPS)
    assert {"accepted", "hit", "late", "fallback", "correction", "bonus", "plain"} <= set(LEGEND)


def test_analyse_colours_hits_fallbacks_bonus_and_corrections():
    a = analyse(mirror_record())
    assert [t.kind for t in a.tokens] == ["accepted", "accepted", "correction",
                                          "hit", "hit", "bonus", "fallback"]
    assert a.steps[1].origin == "hit" and a.steps[2].origin == "fallback"
    assert [b.status for b in a.steps[0].rollouts] == ["taken", "cancelled"]
    assert a.steps[1].fallback is not None
    html = render_pane("mirror", mirror_record(), "done")
    for kind in ("accepted", "hit", "fallback", "correction", "bonus"):
        assert f"k-{kind}" in html


def test_timeline_has_a_lane_per_run_and_model():
    records = {"ar": ar_record([1, 2, 3]), "mirror": mirror_record()}
    lanes = lanes_for(records)
    assert lanes == ["AR · target", "Mirror-SD · target", "Mirror-SD · draft"]
    fig = build_timeline(records)
    names = {t.name for t in fig.data}
    assert {GROUP_OF[k][0] for k in ("prefix", "suffix", "exit_head", "branches", "decode")} <= names
    assert {"AR: tokens committed", "Mirror-SD: tokens committed"} <= names
    ys = {y for t in fig.data if t.type == "bar" for y in t.y}
    assert ys == set(lanes)
    prefix = next(t for t in fig.data if t.type == "bar" and " · prefix" in t.hovertext[0])
    assert prefix.base[0] == pytest.approx(0.005)  # seconds from the run's own start
    assert "<br>step " in prefix.hovertext[0]


def test_inspector_shows_exit_candidates_branches_and_verification():
    html = render_inspector(mirror_record(), 0)
    assert "msd-ee" in html and "msd-tree" in html and "msd-verify" in html
    assert "90%" in html  # exp(-0.1) of the first candidate
    assert "taken" in html and "cancelled" in html
    assert "rejected" in html and "accepted" in html
    assert "kept <b>2</b> of 3 drafted tokens" in html
    assert "<script>" not in render_inspector(
        record("mirror", mirror_record().events, id_texts={1: "<script>"}), 0)


def test_cards_speedups_and_identical_check():
    ar = ar_record([1, 2, 3, 4, 5, 6, 7])
    records = {"ar": ar, "mirror": mirror_record()}
    html = render_cards(records, {}, None, {"temperature": 0.0})
    # decode: AR's first token arrives at 0.03 s, then 6 tokens in 0.67 s; Mirror-SD's first 3
    # at 0.10 s, then 4 in 0.25 s: (4 / 0.25) / (6 / 0.67) = 1.79; end to end 20 / 10 = 2.00
    assert "<b>1.79×</b> / <b>2.00×</b>" in html
    assert "0.03 s" in html and "0.10 s" in html  # time to first token, both
    assert "identical to the baseline" in html and "7 of 7" in html
    verdict = render_verdict(records, {})
    assert "Mirror-SD won end to end: Mirror-SD 2.00× AR." in verdict
    assert "Mirror-SD 1.79× AR." in render_statistics(records, {}, {})  # decode alone: in Statistics


def test_summary_counts_mismatches_and_never_hides_them():
    ar = ar_record([1, 2, 9, 4, 5, 6, 8])
    html = render_checks({"ar": ar, "mirror": mirror_record()}, {"temperature": 0.0}, {})
    assert "identical" not in html
    assert "<b>2</b> of 7 positions" in html and "first at token 2" in html
    assert compare_tokens([1, 2, 3], [1, 2]) == {"compared": 3, "mismatches": 1, "first": 2,
                                                 "identical": False}


def test_trace_round_trip_and_bad_files():
    records = {"ar": ar_record([1, 2]), "mirror": mirror_record()}
    data = json.loads(json.dumps(export_trace(records, "hi", {"gamma": 4}, {"target": "t"})))
    back, prompt, settings, meta = parse_trace(data)
    assert prompt == "hi" and settings == {"gamma": 4} and meta == {"target": "t"}
    for m in records:
        assert render_pane(m, back[m], "done") == render_pane(m, records[m], "done")
    assert back["mirror"].id_texts[5] == "w5"
    with pytest.raises(TraceError, match="not a mirror-sd trace"):
        parse_trace({"events": []})
    with pytest.raises(TraceError, match="damaged"):
        parse_trace({"format": "mirror-sd-trace", "version": 1, "runs": {"ar": {"events": [{"type": "Nope"}]}}})


def test_parse_prompt_multi_turn():
    assert parse_prompt("  hello ") == "hello"
    msgs = parse_prompt("User: hi\nAssistant: hello\nthere\nUser: bye")
    assert msgs == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello\nthere"},
                    {"role": "user", "content": "bye"}]


# ----------------------------------------------------------------------------- the app

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    from ui.layout import build_demo, launch
    demo = build_demo(tiny=True)
    port = free_port()
    launch(demo, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture()
def client(app_url):
    from gradio_client import Client
    return Client(app_url, verbose=False)


def run_app(client, **kw):
    job = client.submit(api_name="/run", **{"prompt": "def hello ( x ) :", "max_new_tokens": 16,
                                            "use_cache": False, **kw})
    updates = list(job)
    return updates, job.outputs()[-1]


def test_app_imports_without_launching():
    import app
    assert app.demo is not None and not getattr(app.demo, "is_running", False)


def test_run_endpoint_streams_three_panes_by_default_and_ends_with_the_summary(client, drafting_pays):
    updates, final = run_app(client)
    assert len(updates) >= 2  # the first frame streams before the runs end
    (status, ar, sd, mirror, noexit, gated, fixed, verdict, cards, zoom, how, statistics, timeline, which, step,
     inspector, live, trace) = final
    assert "Done" in status and gated.get("visible") is False  # the gated Mirror-SD runs only when ticked
    for pane in (ar, mirror, sd):
        assert 'data-state="done"' in pane and "<b>16</b> tokens" in pane
    assert "k-plain" in ar
    # Mirror-SD, its lanes at once in every step, races each verdict: hits or misses show
    assert any(f"k-{k}" in mirror for k in ("hit", "late", "fallback"))
    assert (" won" in verdict or "cannot tell" in verdict) and "CPU cores" in verdict
    assert noexit.get("visible") is False  # the variant without the early exit runs only when ticked
    # the inspector offers the runs that drafted, not the variant that did not run
    assert [v for _, v in which["choices"]] == ["sd", "mirror"]
    # it opens on the Mirror-SD run the zoom draws
    shown = dict((v, n) for n, v in which["choices"])[which["value"]]
    assert which["value"] == "mirror" and f"One {shown} step" in zoom
    assert "time to first token" in cards and "baseline" in cards and "Mirror-SD" in cards
    for name in (">AR<", ">SD<", ">Mirror-SD<"):  # the three panes' titles
        assert sum(name in pane for pane in (ar, mirror, sd)) == 1
    assert timeline["type"] == "plotly" and "Mirror-SD · draft" in timeline["plot"]
    assert "msd-ee" in inspector and "msd-verify" in inspector
    # the zoom draws a step whose lanes were at once, of the run it names; How it works says
    # which run its figure is from, and why two Mirror-SD runs
    zoomed = re.search(r"One (Mirror-SD) step, measured", zoom)
    assert zoomed, zoom
    assert "Mirror-SD (gated)" in how and "overlap gate" in how
    # the page's words, each defined in a line of its own that shows without a hover
    from ui.how import WORDS
    assert "Words on this page" in how and all(f"<dt>{w}</dt>" in how for w, _ in WORDS)
    assert "hit can keep 0" in how  # a branch hit is not the tokens kept
    if "left the draft of" in how:
        assert f"left the draft of {zoomed.group(1)} about" in how
    data = json.load(open(trace))
    ran = {"ar", "mirror", "sd"}
    assert set(data["runs"]) == ran and data["prompt"] == "def hello ( x ) :"
    race = json.loads(live)  # the race the page plays: every run, its tokens as in its pane
    assert race["op"] == "race" and race["autoplay"] and set(race["runs"]) == ran
    assert sum(len(it["x"]) for it in race["runs"]["mirror"]["items"] if it["k"] == "c") == 16


def test_cached_result_and_trace_replay(client):
    _, first = run_app(client, use_cache=True, seed=7)
    _, second = run_app(client, use_cache=True, seed=7)
    assert "Cached result" in second[0]
    assert 'data-state="cached"' in second[2]
    from gradio_client import handle_file
    replay = client.predict(handle_file(first[-1]), api_name="/load_trace")
    assert "Loaded a trace" in replay[0] and "no model" in replay[0]
    assert replay[2].split("</div>", 2)[2] == first[2].split("</div>", 2)[2]  # same tokens
    assert replay[-1] == "def hello ( x ) :"


def test_auto_gamma_and_budget(client):
    _, final = run_app(client, auto_tune=True, gamma=1, branch_budget=1)
    from ui.frames import RESULT_OUTPUTS, method_names
    # the statistics fold says the settings (after the status and every pane)
    status, summary = final[0], final[1 + len(method_names()) + RESULT_OUTPUTS.index("statistics")]
    assert "Done" in status and "chosen automatically" in summary and "projection" in summary
    data = json.load(open(final[-1]))
    auto = data["pair"]["auto"]
    assert f"window setting</abbr> {auto['gamma']} tokens" in summary and f"branch budget {auto['branch_budget']}" in summary
    assert data["settings"]["gamma"] == auto["gamma"]


def test_bad_settings_show_a_message_not_a_traceback(client):
    _, final = run_app(client, exit_layer=40)
    assert "exit layer must be between 1 and 3" in final[0]
    assert "Traceback" not in "".join(str(x) for x in final)
    _, final = run_app(client, prompt="   ")
    assert "prompt is empty" in final[0]


def test_stop_cancels_within_a_step(client):
    import time
    job = client.submit(api_name="/run", prompt="def hello ( x ) :", max_new_tokens=512,
                        use_cache=False)
    deadline = time.time() + 60
    while time.time() < deadline and not any(" running, " in str(u[0]) for u in job.outputs()):
        time.sleep(0.1)
    client.predict(api_name="/stop")
    for _ in job:
        pass
    final = job.outputs()[-1]
    assert "Stopped" in final[0]
    # the run in progress stopped within a step, or the stop landed between two runs: either
    # way not every method ran to its end
    assert any('data-state="stopped"' in p or 'data-state="skipped"' in p for p in final[1:4])


def test_a_bad_model_name_is_a_message():
    """Through the real loader's name handling (a named model is checked before anything
    loads or the default pair is built): one clear message, no run."""
    import threading

    from mirror_sd.engine.settings import Settings
    from ui.session import Job, PairCache, PairSpec, RunRequest

    job = Job(RunRequest("hi", PairSpec(target="./nope", precision="fp32"), Settings()),
              PairCache(), threading.Event())
    job.start()
    assert job.finished.wait(JOB_WAIT_S)
    assert job.error is not None and "./nope" in job.error and "Traceback" not in job.error
    assert job.records == {}


def test_cancels_are_per_session():
    from ui.session import Cancels
    c = Cancels()
    a, b = c.arm("a"), c.current("b")
    assert c.stop("a") and a.is_set() and not b.is_set()
    c.release("a", a)
    assert not c.stop("a")  # nothing running there any more
    assert c.current("a") is not a


def test_streams_setting_runs_and_says_when_the_draft_has_no_heads(client):
    _, final = run_app(client, streams="auto")
    assert "Done" in final[0] and 'data-state="done"' in final[3]
    assert "No trained stream heads" in final[3]  # the Mirror-SD pane says so


def test_the_done_message_points_an_fp32_cpu_run_to_int8():
    """After a run in fp32 on a CPU the status says where the faster precision is; not after
    int8, nor on a GPU; the measured speed stays first."""
    from ui.frames import done_message as _done_message
    from ui.texts import CPU_PRECISION_TIP

    records = {"ar": ar_record([1, 2, 3, 4]), "mirror": ar_record([1, 2, 3, 4])}
    fp32_cpu = _done_message(records, {"precision": "fp32", "target_device": "cpu"})
    assert fp32_cpu.startswith("Done, measured on ") and "(one run of each method). Every method wrote exactly AR's 4 tokens" in fp32_cpu
    records["mirror"] = ar_record([1, 2, 5, 4])
    assert "Mirror-SD differs from AR in 1 of 4 tokens (first at token 2" in _done_message(records, {})
    assert fp32_cpu.endswith(CPU_PRECISION_TIP) and "int8" in CPU_PRECISION_TIP
    assert CPU_PRECISION_TIP not in _done_message(records, {"precision": "int8", "target_device": "cpu"})
    assert CPU_PRECISION_TIP not in _done_message(records, {"precision": "fp32", "target_device": "cuda:0"})
    assert _done_message({}, {}) == "Done."


def test_exit_layer_slider_follows_the_target(tmp_path, monkeypatch):
    """The slider spans 1..N-1 of the target (0 = automatic), from a loaded pair, a local
    config or the tiny pair; unknown (a hub id not loaded yet): the wide range, checked at run."""
    import json

    from mirror_sd.models.tiny import LAYERS, tiny_pair
    from ui import frames, session
    from ui.handlers import Handlers
    from ui.state import AppState

    handlers = Handlers(AppState(pairs=session.PairCache()))  # nothing loaded
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 24}))
    up = handlers.exit_layer_range(str(folder), 30)
    assert up["maximum"] == 23 and up["value"] == 0 and "24 layers: 1 to 23" in up["info"]
    assert handlers.exit_layer_range(str(folder), 12)["value"] == 12
    assert handlers.exit_layer_range("some-org/not-loaded", 30)["maximum"] == frames.EXIT_LAYER_CEILING
    from mirror_sd.models.bundled import DEFAULT_TARGET
    monkeypatch.setenv("MIRROR_SD_CACHE", str(tmp_path))
    assert handlers.exit_layer_range("default", 0)["maximum"] == frames.EXIT_LAYER_CEILING  # not built
    (tmp_path / f"{DEFAULT_TARGET.stem}-hf").mkdir()
    (tmp_path / f"{DEFAULT_TARGET.stem}-hf" / "config.json").write_text('{"num_hidden_layers": 28}')
    assert handlers.exit_layer_range("default", 0)["maximum"] == 27
    # a loaded pair answers for its target, whatever the precision
    pairs = session.PairCache(loader=lambda spec, progress: tiny_pair())
    pairs.get(session.PairSpec(target="some-org/loaded", precision="bf16"), lambda *a: None)
    handlers.app.pairs = pairs
    assert handlers.exit_layer_range("some-org/loaded", 0)["maximum"] == LAYERS - 1
    handlers.app.pairs = session.PairCache.tiny()  # test mode: any name
    assert handlers.exit_layer_range("anything", 2)["maximum"] == LAYERS - 1


def test_an_out_of_range_exit_layer_is_one_message_before_any_run():
    import threading

    from mirror_sd.engine.settings import Settings
    from mirror_sd.models.tiny import LAYERS
    from ui.session import Job, PairCache, PairSpec, RunRequest

    job = Job(RunRequest("def x", PairSpec(), Settings(max_new_tokens=4, exit_layer=LAYERS)),
              PairCache.tiny(), threading.Event())
    job.start()
    assert job.finished.wait(JOB_WAIT_S)
    assert job.error == (f"exit layer must be between 1 and {LAYERS - 1} for this "
                         f"{LAYERS}-layer target (got {LAYERS}).")
    assert job.records == {}  # AR (which has no exit layer) did not run and fail


# ----------------------------------------------------------------------------- fair timing and the why

def test_every_timed_run_is_warm_and_its_clock_starts_at_its_first_timed_event():
    """The job warms each method up (untimed) before the timed runs, once per loaded pair;
    each run's time zero is its first timed event, so no event or span sits before it and
    its spans end by its reported wall time."""
    import threading
    import time

    from mirror_sd.engine.settings import Settings
    from ui.runs import measured
    from ui.session import Job, PairCache, PairSpec, RunRequest

    pairs = PairCache.tiny()
    request = RunRequest("def hello ( x ) :", PairSpec(), Settings(max_new_tokens=12))
    job = Job(request, pairs, threading.Event())
    job.start()
    assert job.finished.wait(JOB_WAIT_S) and job.error is None
    finished_ns = time.perf_counter_ns()
    assert job.meta["warmup_s"] > 0
    assert list(job.records) == ["ar", "sd", "mirror"]
    for rec in job.records.values():
        wall_ns = measured(rec)["wall_s"] * 1e9
        assert min(rec.times_ns) >= 0
        assert min(s.start_ns for s in rec.spans) >= rec.t0_ns
        assert max(s.end_ns for s in rec.spans) - rec.t0_ns <= wall_ns
        # Finish arrives after the engine's end, and before the job was seen finished (how
        # much later depends on the machine's load: no bound on that)
        assert wall_ns - 1e3 <= rec.duration_ns <= finished_ns - rec.t0_ns
    again = Job(request, pairs, threading.Event())
    again.start()
    assert again.finished.wait(JOB_WAIT_S) and again.meta["warmup_s"] == 0.0  # warm already


def test_the_timeline_of_each_run_ends_at_its_reported_wall_time(client):
    _, final = run_app(client)
    records, *_ = parse_trace(json.load(open(final[-1])))
    fig = build_timeline(records)
    for m, rec in records.items():
        wall = rec.finish.stats["wall_s"]
        tokens = next(t for t in fig.data if t.name == f"{label(m)}: tokens committed")
        assert max(tokens.x) <= wall * 1.02 + 0.002 and min(tokens.x) >= 0
        ends = [b + x for t in fig.data if t.type == "bar" and t.y is not None
                for b, x, y in zip(t.base, t.x, t.y) if str(y).startswith(f"{label(m)} ·")]
        assert ends and max(ends) <= wall + 1e-9


def test_breakdown_adds_up_to_the_wall_time_and_the_why_is_said():
    from ui.why import PARTS, breakdown, early_exit_share

    records = {"ar": ar_record([1, 2, 3, 4, 5, 6, 7]), "mirror": mirror_record()}
    for rec in records.values():
        parts = breakdown(rec)
        assert sum(parts[k] for k in PARTS) == pytest.approx(rec.finish.stats["wall_s"])
    mirror = breakdown(records["mirror"])
    # everything before the first commit (0.10 s: the prompt, the first window and its verify,
    # here every span) is time to first token, as the card says; the rest has no span: idle
    assert mirror["first_token"] == pytest.approx(0.10)
    assert mirror["verify"] == 0 and mirror["draft_hidden"] == 0
    assert mirror["idle"] == pytest.approx(0.25)
    ee = early_exit_share(records["mirror"])
    # step 0: the verdict (A=2, c) was in the early exit's row 2, and the taken branch's root too
    assert ee == {"hits": 1, "hits_from_exit": 1, "hits_from_draft": 0, "steps": 1,
                  "exit_held": 1, "exit_top1": 1, "kappa": 2, "layer": 2, "lens": False}
    meta = {"precision": "int8", "warmup_s": 1.5, "target_device": "cpu", "draft_device": "cpu"}
    html = render_cards(records, meta, None, {"temperature": 0.0})
    assert "Where the time went" in html and "msd-bk b-first_token" in html
    assert "Precision <b>int8</b>" in html and "same weights" in html and "1.5 s warm-up" in html
    assert "held the target's token in <b>1 of 1</b> steps" in render_statistics(records, {}, meta)
    verdict = render_verdict(records, meta)
    assert "Mirror-SD won" in verdict and "msd-hardware" in verdict and "share" in verdict
    on_gpu = render_verdict(records, dict(meta, target_device="cuda:0"))
    assert "msd-hardware" not in on_gpu  # said only where both lanes share one device


def test_cjk_is_kept_undrawable_characters_are_escaped_and_whitespace_is_quiet():
    rec = ar_record([5, 6, 7, 8], texts=["回文", "\x07", "\ue000x", "    "])
    html = render_pane("ar", rec, "done")
    assert "回文" in html  # drawn by the CJK fonts of the stack
    assert "U+0007" in html and "U+E000x" in html and "\x07" not in html
    assert 'class="msd-tok k-plain ws"' in html and ">    </span>" in html  # kept, marked quietly
    css = (Path(__file__).parents[1] / "ui" / "panes.css").read_text()
    assert '"Noto Sans CJK SC"' in css


def test_whitespace_tokens_carry_marks_and_each_line_is_a_box():
    """A token of whitespace alone: its spaces in a msd-sp span (a faint dot each), its line
    breaks in a msd-nl span (↵), the characters themselves kept; the text in one msd-ln box per
    line, a token with a line break inside cut there."""
    texts = ["def f():", "\n", "    ", "return", " ", "1\n\n", "x"]
    html = token_spans(ar_record(list(range(len(texts))), texts=texts))
    assert re.sub(r"<[^>]+>", "", html) == "".join(texts)  # what a copy gets: unchanged
    assert '<span class="msd-tok k-plain ws" data-step="1"' in html and '<span class="msd-nl">\n</span>' in html
    assert '<span class="msd-sp">    </span>' in html and '<span class="msd-sp"> </span>' in html
    assert "msd-sp" not in html.split('data-step="5"')[1]  # "1\n\n" has a digit: no dots
    lines = re.findall(r'<span class="msd-ln">(.*?)</span>(?=<span class="msd-ln">|$)', html, re.S)
    assert [re.sub(r"<[^>]+>", "", ln) for ln in lines] == ["def f():\n", "    return 1\n", "\n", "x"]
    assert 'k-plain is-cont" data-step="5"' in html  # "1\n\n": its second line break a piece of its own
    css = (Path(__file__).parents[1] / "ui" / "style.css").read_text()
    assert '.ws .msd-nl::before' in css and 'content: "↵"' in css and ".msd-sp {" in css
    legend = render_legend()  # the legend's whitespace entry: the same marks
    assert '<span class="msd-sp">  </span><span class="msd-nl"></span>' in legend


def test_the_background_preparation_loads_and_warms_so_the_first_run_starts_warm(monkeypatch):
    """launch() starts it (not an import, not test mode); it loads the pair and warms every
    method, so the first Run neither loads nor warms up; the status line follows it."""
    import threading

    from mirror_sd.engine.settings import Settings
    from ui import handlers as handlers_module
    from ui.handlers import Handlers
    from ui.preparing import Preparer
    from ui.session import Job, PairCache, PairSpec, RunRequest
    from ui.state import AppState

    pairs = PairCache.tiny()
    handlers = Handlers(AppState(pairs=pairs))
    handlers.start_preparing()  # test mode: nothing starts
    assert handlers.app.preparer is None and handlers.ready_message() == handlers_module.READY
    prep = Preparer(pairs, PairSpec(), "def hello ( x ) :", Settings(max_new_tokens=8))
    prep.start()
    assert prep.done.wait(JOB_WAIT_S) and prep.error is None and prep.describe() == ""
    assert pairs.loaded(PairSpec())
    job = Job(RunRequest("def x", PairSpec(), Settings(max_new_tokens=4)), pairs, threading.Event())
    job.start()
    assert job.finished.wait(JOB_WAIT_S) and job.error is None and job.meta["warmup_s"] == 0.0
    step = "Preparing the models, once per machine: step 1 of 3, quantizing the draft to int8"
    job._progress(step, 0.1)  # the loader's words reach the page as they are (one estimate)
    assert job.message == step and job.fraction == 0.1


# ----------------------------------------------------------------------------- a registered method

def test_a_method_added_to_the_registry_gets_a_pane_a_card_and_a_timeline_lane():
    """The app reads its methods from the engine's registry: a toy method (AR's decoder under
    another name) shows as a pane in the built page, a choice under “Methods”, and runs."""
    from toy_method import registered

    from mirror_sd.engine.registry import REGISTRY
    from ui.layout import build_demo

    with registered():  # the engine's registration: the registry is the one method table
        _toy_pane_card_and_lane(REGISTRY, build_demo)


def _toy_pane_card_and_lane(REGISTRY, build_demo):
    demo = build_demo(tiny=True)
    c = demo.msd_components
    from ui.runs import VARIANTS
    assert [p.elem_id for p in c["panes"]] == [f"pane-{m}" for m in (*REGISTRY, *VARIANTS)]
    assert "pane-toy" in [p.elem_id for p in c["panes"]]
    assert ("Toy", "toy") in [tuple(x) for x in c["methods"].choices]
    frames = list(demo.msd_handlers.run(prompt="def hello ( x ) :", max_new_tokens=6,
                                        methods=["ar", "toy"], use_cache=False))
    final = frames[-1]
    names = [*REGISTRY, *VARIANTS]  # the panes: the registry's methods, then the variants
    toy_pane = final[1 + names.index("toy")]
    assert 'data-state="done"' in toy_pane and ">Toy<" in toy_pane
    cards = final[1 + len(names) + 1]
    assert 'data-method="toy"' in cards and "time to first token" in cards
    timeline = final[1 + len(names) + 5]
    assert any(str(y).startswith("Toy · ") for t in timeline.data if t.type == "bar" for y in t.y)


def test_mirror_sd_without_its_early_exit_runs_when_ticked_and_the_verdict_says_what_the_exit_bought(client,
                                                                                                   drafting_pays):
    _, final = run_app(client, methods=["ar", "sd", "mirror", "mirror-noexit"], repeat=1)
    status, ar, sd, mirror, noexit, gated, fixed, verdict, *_ = final
    assert "Done" in status
    assert noexit["visible"] is True  # its pane shows when it ran
    noexit = noexit["value"]
    assert 'data-state="done"' in noexit and "Mirror-SD (no exit)" in noexit and "<b>16</b> tokens" in noexit
    assert ">early exit off</span>" in noexit and ">early exit off</span>" not in mirror  # says the exit is off
    assert "What the early exit bought" in verdict and "tok/s with it against" in verdict
    assert re.search(r"\d+ hits of \d+ verdicts with it.* against \d+ of \d+ without", verdict), verdict
    assert gated["visible"] is False  # not ticked: no pane


def test_the_gated_mirror_sd_runs_when_ticked_beside_the_page_s_own(client):
    _, final = run_app(client, methods=["ar", "sd", "mirror", "mirror-gated"], repeat=1)
    status, ar, sd, mirror, noexit, gated, fixed, verdict, *_ = final
    assert "Done" in status and gated["visible"] is True and noexit["visible"] is False
    gated = gated["value"]
    assert 'data-state="done"' in gated and "Mirror-SD (gated)" in gated
    assert ">gated: overlaps only where it pays</span>" in gated


def test_the_running_status_says_the_round_the_method_and_one_timer():
    """'Round 1 of 3: SD running, job 2 s so far.': no doubled counts or timers, the timer named
    the job's (each pane's clock is its own run's); while loading, the loader's own timer when
    it has one, else one."""
    import time
    from types import SimpleNamespace

    from ui.frames import live_status
    from ui.session import PairCache
    methods = ("ar", "sd", "mirror")
    job = SimpleNamespace(current="sd", message="", records={}, fraction=None)
    text = live_status(job, methods, time.monotonic() - 2.2, 1, 3)
    assert "Round 1 of 3: SD running, job 2 s so far." in text and "of 3," not in text
    assert "take turns, each timed alone" in text
    one = live_status(job, methods, time.monotonic(), 1, 1)
    assert "SD running, job 0 s so far." in one and "Round" not in one
    # from round 2 on, the time left at the pace so far: AR of round 2 begins after 3 of 9 runs in 30 s
    job.current = "ar"
    assert "Round 2 of 3: AR running, job 30 s so far, about 60 s left." in live_status(
        job, methods, time.monotonic() - 30.2, 2, 3)
    job.current = "sd"
    job = SimpleNamespace(current=None, records={}, fraction=0.1,
                          message="Loading the models: waiting for the CPU kernels to compile (3 s so far, once per machine)")
    assert live_status(job, methods, time.monotonic() - 9, 1, 3).count("so far") == 1
    job.message = "Loading the models: the target"
    assert live_status(job, methods, time.monotonic() - 9, 1, 3).count("so far") == 1
    pairs = PairCache.tiny()
    pairs.loading = {"message": job.message.replace("the target", "compiling (4 s so far)"), "since": time.monotonic() - 7}
    assert pairs.describe().count("so far") == 1
    pairs.loading["message"] = "Loading the models: the target"
    assert pairs.describe().count("so far") == 1 and "7 s so far" in pairs.describe()


def test_sd_with_fixed_windows_runs_when_ticked_and_the_verdict_says_what_priced_windows_bought(client):
    _, final = run_app(client, methods=["ar", "sd", "mirror", "sd-fixed"], repeat=1)
    status, ar, sd, mirror, noexit, gated, fixed, verdict, *_ = final
    assert "Done" in status and fixed["visible"] is True and gated["visible"] is False
    fixed = fixed["value"]
    assert 'data-state="done"' in fixed and "SD (fixed windows)" in fixed and "<b>16</b> tokens" in fixed
    assert ">fixed windows, the draft model only</span>" in fixed
    said = re.search(r"<b>What SD&#x27;s priced windows and prompt lookup bought, this run:</b> "
                     r"[\d.]+ tok/s against [\d.]+ tok/s with windows of a fixed length drafted by the draft "
                     r"model \([\d.]+×", verdict)
    assert said, verdict
    # the fixed run drafted the page's gamma (4) in every window but the last ones, cut by the token budget
    assert re.search(r"a median [\d.]+ drafted tokens per window against 4", verdict), verdict
