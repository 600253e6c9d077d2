"""The what-if projection: recorded steps, profiles (a)/(b)/(c), the step layout, the panel.

Tiny random models built in code (ui.tiny) and synthetic spans; no downloads, a few seconds.
The real pair's fidelity (profile (a) against a benchmark run) is research/whatif_fidelity.py's.
"""
from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest
import torch

from mirror_sd.latency import latency_model as lm
from mirror_sd.latency import whatif as wi
from mirror_sd.latency.step_model import target_k
from mirror_sd.latency.whatif_hardware import (Accelerators, accelerator_calibration, accelerator_profile,
                                             project_all)
from mirror_sd.engine.events import Finish, Span
from mirror_sd.engine.registry import METHODS as DECODERS
from mirror_sd.engine.settings import Settings
from ui import whatif as panel
from ui.runs import RunRecord
from mirror_sd.models.tiny import LAYERS, tiny_pair
from ui.traces import export_trace, parse_trace

GAMMA = 3
PROMPTS = ["def hello ( x ) :", "print the sum of a list", "if x == 1 : return True"]


@pytest.fixture(scope="module")
def pair():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny forwards: threads only fight over the cores
    yield tiny_pair()
    torch.set_num_threads(before)


def record(pair, method: str, prompt: str, tokens: int = 40, **over) -> RunRecord:
    """One run as the app records it: every event with its arrival time."""
    rec = RunRecord(method)
    ids = pair.encode_prompt([{"role": "user", "content": prompt}])
    decoder = DECODERS[method](pair, Settings(max_new_tokens=tokens, gamma=GAMMA, branch_budget=2,
                                              **over))
    rec.t0_ns = time.perf_counter_ns()
    for ev in decoder.generate(ids):
        rec.add(ev, time.perf_counter_ns() - rec.t0_ns)
    return rec


@pytest.fixture(scope="module")
def runs(pair):
    """{prompt index: {method: RunRecord}}: three prompts, each run by AR, SD and Mirror-SD."""
    for m in wi.METHODS:  # warm-up: the first forward after a build is slow
        record(pair, m, PROMPTS[0], 8)
    return {i: {m: record(pair, m, p) for m in wi.METHODS} for i, p in enumerate(PROMPTS)}


def state_of(records) -> dict:
    return {"records": records, "settings": {"gamma": GAMMA, "kappa": 8, "branch_budget": 2},
            "meta": {"target_layers": LAYERS, "exit_layer": LAYERS // 2}, "prompt": "x"}


def project_prompt(records, hw=None) -> dict:
    return project_all([wi.record_from_run(r) for r in records.values()], target_layers=LAYERS,
                          gamma=GAMMA, exit_layer=LAYERS // 2, accelerators=hw)


# ---------------------------------------------------------------------------------------------
# the recorded steps


def test_recorded_steps_follow_the_runs_counts(runs):
    for records in runs.values():
        for m, rec in records.items():
            st = rec.finish.stats
            steps = wi.recorded_steps(wi.record_from_run(rec), GAMMA)
            assert steps.tokens == st["decode_tokens"] > 0
            assert steps.decode_s == pytest.approx(st["decode_s"])
            if m == "ar":
                assert steps.steps == st["target_forwards"] - 1
            elif m == "sd":
                assert steps.steps == st["steps"] - 1
                assert steps.windows == [GAMMA] * steps.steps
                assert sum(steps.accepted) + steps.steps == steps.tokens
            else:  # an outcome for every step whose draft lane finished: the stats' hits and misses
                assert (steps.hits, steps.misses) == (st["hits"], st["fallbacks"])
                # the spans say the same as the events: a fallback span is a miss
                spans_only = dict(wi.record_from_run(rec), events=None)
                assert wi.recorded_steps(spans_only, GAMMA).outcomes == steps.outcomes


def _ar_record(decode_ms, gap_ms, steps):
    """A synthetic AR run: a prefill forward, then `steps` decode forwards `gap_ms` apart."""
    spans, t = [Span("target", "prefill", 0, 50_000_000, 0)], 50_000_000
    for s in range(1, steps + 1):
        t += gap_ms * 1_000_000
        spans.append(Span("target", "decode", t, t + decode_ms * 1_000_000, s))
        t += decode_ms * 1_000_000
    decode_s = (t - 50_000_000) / 1e9
    stats = {"method": "ar", "target_forwards": steps + 1, "decode_s": decode_s,
             "decode_tokens": steps, "new_tokens": steps + 1}
    return {"method": "ar", "stats": stats, "spans": spans}


def test_host_time_is_what_no_span_covers():
    steps = wi.recorded_steps(_ar_record(100, 10, 5), 4)
    assert steps.steps == 5 and steps.host_s == pytest.approx(0.010)
    cal = wi.calibrate_machine([_ar_record(100, 10, 5)], target_layers=4, gamma=4)
    profile = wi.machine_profiles(cal, wi.host_times([steps]))["a"]
    assert wi.project_run(steps, profile)["decode_s"] == pytest.approx(0.55)


# ---------------------------------------------------------------------------------------------
# profile (a): fidelity


def test_profile_a_reproduces_each_methods_decode_time(runs):
    """Costs from each prompt's own spans (as the app calibrates), three prompts: every
    method's projected decode time within 10% of the measured one. (The real pair's fidelity
    on a benchmark run is research/whatif_fidelity.py's.)"""
    projected = {m: 0.0 for m in wi.METHODS}
    measured = {m: 0.0 for m in wi.METHODS}
    for records in runs.values():
        result = project_prompt(records)
        for m, row in result["projected"]["a"].items():
            projected[m] += row["decode_s"]
            measured[m] += row["measured_decode_s"]
    bounds = {"ar": 0.10, "sd": 0.10, "mirror": 0.10}
    for m in wi.METHODS:
        assert projected[m] / measured[m] == pytest.approx(1.0, abs=bounds[m]), (m, projected, measured)


def test_profile_a_reproduces_adaptive_windows(pair):
    """Adaptive windows vary from step to step: the replay pays for the tokens each window
    really drafted, and stays within 10% of the measured decode time (three prompts pooled,
    as above: a tiny run's decode phase is a fraction of a second)."""
    # no confidence stop (the tiny draft is never sure): lengths follow the verdicts
    runs = [{m: record(pair, m, p, window="adaptive", window_threshold=0.0) for m in wi.METHODS}
            for p in PROMPTS]
    sd = wi.recorded_steps(wi.record_from_run(runs[0]["sd"]), GAMMA)
    assert len(set(sd.windows)) > 1, sd.windows  # the windows did vary
    projected = {m: 0.0 for m in wi.METHODS}
    measured = {m: 0.0 for m in wi.METHODS}
    for records in runs:
        for m, row in project_prompt(records)["projected"]["a"].items():
            projected[m] += row["decode_s"]
            measured[m] += row["measured_decode_s"]
    for m in wi.METHODS:
        assert projected[m] / measured[m] == pytest.approx(1.0, abs=0.10), (m, projected, measured)
    # Mirror-SD's target lane is priced at the mean window its split forwards verified, not at
    # the window setting (adaptive windows grow past it)
    mirror = project_prompt(runs[0])["profiles"]["a"].mirror
    rec = wi.recorded_steps(wi.record_from_run(runs[0]["mirror"]), GAMMA)
    assert mirror.gamma_measured != GAMMA
    assert min(rec.windows) <= mirror.gamma_measured <= max(rec.windows)


def test_calibration_leaves_out_the_prefill_phase(runs):
    """SD's first draft span also prefills the draft on the prompt, and the first verify
    forward comes before the first commit: the costs come from the decode phase only."""
    sd = wi.decode_spans_only(wi.record_from_run(runs[0]["sd"]))
    assert sd["spans"] and all(s.step > 0 for s in sd["spans"])
    mirror = wi.record_from_run(runs[0]["mirror"])
    kept = wi.decode_spans_only(mirror)["spans"]
    assert not [s for s in kept if s.step == 0 and s.lane in ("target", "verify")]
    assert [s for s in kept if s.step == 0 and s.lane == "draft"] == [
        s for s in mirror["spans"] if s.step == 0 and s.lane == "draft"]


# ---------------------------------------------------------------------------------------------
# profile (b), the step layout


def test_profile_b_removes_contention_and_is_never_slower(runs):
    for records in runs.values():
        result = project_prompt(records)
        a, b = result["projected"]["a"], result["projected"]["b"]
        assert result["profiles"]["b"].calibration.draft_device == "separate"
        for m in wi.METHODS:
            assert b[m]["decode_s"] <= a[m]["decode_s"] + 1e-12, m
        assert b["ar"]["decode_s"] == pytest.approx(a["ar"]["decode_s"])
        assert b["sd"]["decode_s"] == pytest.approx(a["sd"]["decode_s"])
    # with contention, Mirror-SD gets strictly faster on its own device
    cal = replace(lm.default_calibration(), contention=1.5)
    profiles = wi.machine_profiles(cal, {m: 0.0 for m in wi.METHODS})
    for hit in (True, False):
        assert (wi.step_seconds(profiles["b"].calibration, "mirror", hit)
                < wi.step_seconds(profiles["a"].calibration, "mirror", hit))


@pytest.mark.parametrize("schedule,tail", [("engine", None), ("paper", None), ("engine", (0.05, 0.02))])
def test_step_bars_lay_out_the_models_step_time(schedule, tail):
    cal = replace(lm.default_calibration(), schedule=schedule, t_comm_ee=0.002, t_comm_verify=0.003)
    for method, hit in (("ar", None), ("sd", None), ("mirror", True), ("mirror", False)):
        bars, end = wi.step_bars(cal, method, hit, host=0.01, tail=tail)
        assert end == pytest.approx(wi.step_seconds(cal, method, hit, tail) + 0.01)
        assert max(b[3] for b in bars) == pytest.approx(end)
        assert all(b[2] <= b[3] for b in bars)
    bars, _ = wi.step_bars(cal, "mirror", False)
    assert "fallback" in {b[1] for b in bars}


# ---------------------------------------------------------------------------------------------
# profile (c)


def test_profile_c_scales_with_bandwidth(runs):
    base = Accelerators(launch_ms=0.0, host_ms=0.0, comm_ms=0.0, gamma=GAMMA)
    cal = project_prompt(runs[0])["calibration"]
    one = accelerator_calibration(base, cal)
    # memory-bound: a verify of gamma+1 tokens costs one forward; time = bytes / bandwidth
    assert one.t_target_k == pytest.approx(one.t_target_1)
    assert one.t_target_1 == pytest.approx(14.77e9 * 0.9 * 2 / 2680e9, rel=0.1)
    both = accelerator_calibration(replace(base, target_bw_gbs=2 * base.target_bw_gbs,
                                           draft_bw_gbs=2 * base.draft_bw_gbs), cal)
    recorded = project_prompt(runs[0])["recorded"]
    p1 = wi.project(recorded, wi.Profile("c", "x", one, {}))
    p2 = wi.project(recorded, wi.Profile("c", "x", both, {}))
    for m in wi.METHODS:  # twice the bandwidth on both devices: half the time, same speedups
        assert p2[m]["decode_s"] == pytest.approx(p1[m]["decode_s"] / 2)
        assert p2[m]["speedup"] == pytest.approx(p1[m]["speedup"])
    # a faster target alone makes the draft relatively dearer: less speedup for SD
    fast_target = accelerator_calibration(replace(base, target_bw_gbs=4 * base.target_bw_gbs), cal)
    p3 = wi.project(recorded, wi.Profile("c", "x", fast_target, {}))
    assert p3["ar"]["decode_s"] == pytest.approx(p1["ar"]["decode_s"] / 4)
    assert p3["sd"]["speedup"] < p1["sd"]["speedup"]


def test_profile_c_takes_the_papers_acceptance_when_given(runs):
    cal = project_prompt(runs[0])["calibration"]
    hw = Accelerators(target="32B", draft="0.6B", gamma=7, kappa=8, exit_fraction=0.5, tau=5.0, hit_rate=0.9)
    prof = accelerator_profile(hw, cal, GAMMA)
    assert not prof.acceptance_from_run
    assert prof.calibration.exit_layer == 32 and prof.calibration.target_layers == 64
    assert lm.tokens_per_step(prof.calibration, "mirror") == pytest.approx(5.0, rel=1e-6)
    recorded = project_prompt(runs[0])["recorded"]
    proj = wi.project(recorded, prof)
    # expected steps: the decode tokens over tau
    assert proj["sd"]["steps"] == pytest.approx(sum(r.tokens for r in recorded if r.method == "sd") / 5.0)
    assert proj["mirror"]["speedup"] > proj["sd"]["speedup"] > 1.0
    with pytest.raises(ValueError):
        accelerator_calibration(replace(hw, target="70B"))


# ---------------------------------------------------------------------------------------------
# the panel


def _labels(html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", x) for x in re.findall(r"<(?:caption|th scope=\"row\")[^>]*>(.*?)</(?:caption|th)>", html)]


def test_every_label_in_the_panel_says_projection(runs):
    html, fig = panel.update(state_of(runs[0]), "c", *panel.input_defaults().values())
    labels = _labels(html)
    # the caption, the measured row, profiles (a), (b), (c); then the per-profile settings table
    assert len(labels) >= 1 + 1 + 3
    for label in labels:
        assert "projection" in label, label
    assert "measured on this machine" in html
    titles = [fig.layout.title.text] + [a.text for a in fig.layout.annotations]
    titles += [fig.layout[ax].title.text for ax in ("xaxis", "xaxis2")]
    assert len(titles) == 5
    for title in titles:
        assert "projection" in title, title
    lanes = {y for tr in fig.data for y in tr.y}
    assert any("(projection)" in y for y in lanes) and any("(projection)" not in y for y in lanes)


def test_row_a_is_labelled_the_models_estimate_and_the_measured_row_names_its_run(runs):
    """Two "this machine" rows must not read as two measurements: row (a) is the latency
    model's estimate (its gap from the measured row named as the model's error), and over
    interleaved runs the measured row says it is the runs shown (each method's middle run, the race's)."""
    state = dict(state_of(runs[0]), rounds=[{}, {}, {}])
    html, _ = panel.update(state, "c", *panel.input_defaults().values())
    row_a = html.split("projection (a): ")[1].split("</tr>")[0]
    assert row_a.startswith("this machine, the latency model&#x27;s estimate (not a measurement)")
    assert "a check of the model, whose gap from the measured row is its error" in row_a
    result = panel.project_state(state)[0]
    gaps = {m: result["projected"]["a"][m]["ratio"] for m in wi.METHODS if result["projected"]["a"][m].get("ratio")}
    worst = max(gaps, key=lambda m: abs(gaps[m] - 1))
    if abs(gaps[worst] - 1) >= 0.05:
        assert f"decode time is {gaps[worst]:.2f}× its measured one" in row_a
    assert ("measured on this machine, the runs shown only (each method's middle run, the race's; their steps "
            "replayed below; the cards give the medians of 3)") in html
    assert "the runs shown only" not in panel.update(state_of(runs[0]), "c", *panel.input_defaults().values())[0]


def test_panel_renders_for_a_loaded_trace(runs):
    data = export_trace(runs[1], "print the sum", state_of(runs[1])["settings"],
                        state_of(runs[1])["meta"])
    records, prompt, settings, meta = parse_trace(data)
    state = {"records": records, "settings": settings, "meta": meta, "prompt": prompt}
    html, fig = panel.update(state, "a", *panel.input_defaults().values())
    assert "projection (a)" in html and "projection (c)" in html and "×" in html
    assert len(fig.data) > 0
    # the loaded trace projects exactly as the live records do
    live = project_prompt(runs[1])["projected"]["a"]
    loaded = panel.project_state(state)[0]["projected"]["a"]
    for m in wi.METHODS:
        assert loaded[m]["decode_s"] == pytest.approx(live[m]["decode_s"])


def test_panel_without_a_run_and_with_a_bad_input(runs):
    for state in (None, {"records": {"ar": RunRecord("ar", [Finish({}, [], "")], [0])}}):
        html, fig = panel.update(state, "c", *panel.input_defaults().values())
        assert "appears when a run has finished" in html and "projection" in html
    values = dict(panel.input_defaults(), target="70B")
    html, _ = panel.update(state_of(runs[0]), "c", *values.values())
    assert "target size must be one of" in html and "projection" in html
    no_layers = dict(state_of(runs[0]), meta={})  # e.g. a trace that does not say
    html, _ = panel.update(no_layers, "c", *panel.input_defaults().values())
    assert "how many layers" in html


def test_inputs_map_onto_the_accelerators():
    d = panel.input_defaults()
    values = [d[k] for k in panel.INPUTS]
    hw = panel.accelerators_from(values)
    assert (hw.target, hw.draft, hw.gamma, hw.tau, hw.hit_rate) == ("14B", "0.6B", None, None, None)
    hw = panel.accelerators_from(["32B", "0.5B", 1000, 100, 5, 4, 0.25, 4.5, 0.8, 2])
    assert (hw.target, hw.draft, hw.target_bw_gbs, hw.gamma, hw.exit_fraction, hw.tau, hw.hit_rate,
            hw.draft_tokens_per_forward) == ("32B", "0.5B", 1000.0, 5, 0.25, 4.5, 0.8, 2.0)
    assert hw.costs == "roofline" and d["costs"] == "roofline"
    hw = panel.accelerators_from(["14B", "0.6B", 0, 0, 4, 8, 0.5, 0, 0, 1, "measured-h200"])
    assert hw.costs == "measured-h200" and "H200" in accelerator_calibration(hw).source


def test_a_hits_draft_work_is_split_at_its_verdict():
    ms = 1_000_000
    spans = [Span(lane="target", label="prefix", start_ns=0, end_ns=80 * ms, step=0),
             Span(lane="verify", label="accept", start_ns=80 * ms, end_ns=100 * ms, step=0),
             Span(lane="draft", label="extend", start_ns=0, end_ns=20 * ms, step=0),
             Span(lane="draft", label="branches", start_ns=20 * ms, end_ns=60 * ms, step=0, detail="1 rows"),
             Span(lane="draft", label="branches", start_ns=60 * ms, end_ns=120 * ms, step=0, detail="1 rows")]
    hit, miss, work = wi.mirror_tails([True], spans)
    assert hit == [pytest.approx(0.020)] and miss == []
    assert work == [pytest.approx((0.100, 0.020, 0.100))]  # before the verdict, after, the lane
    assert wi.mirror_tails([False], spans)[2] == []  # a miss has no branch to finish


def test_profile_b_re_times_the_draft_work_a_hit_leaves():
    work = [(0.10, 0.05, 0.12)]  # a hit: 0.10 s of draft work before the verdict, 0.05 s after
    # both lanes twice as fast: the verdict at 0.06 s, the draft done at 0.05 + 0.05 = 0.10 s
    assert wi.tail_alone(work, 0.5, 2.0, 0.05) == pytest.approx(0.04)
    # only the target faster: more of the branch is left after the earlier verdict
    assert wi.tail_alone(work, 0.5, None, 0.05) == pytest.approx(0.09)
    assert wi.tail_alone([(0.05, 0.0, 0.12)], 1.0, 1.0, 0.0) == 0.0  # done before the verdict
    assert wi.tail_alone([], 0.5, 2.0, 0.07) == 0.07  # no per-hit work recorded: as measured


def test_the_draft_lanes_slowdown_beside_the_target_is_read_from_its_own_forwards():
    spans = [Span(lane="verify", label="accept", start_ns=0, end_ns=100, step=0),
             Span(lane="draft", label="branches", start_ns=0, end_ns=30, step=0, detail="1 rows"),
             Span(lane="draft", label="branches", start_ns=30, end_ns=60, step=0, detail="1 rows"),
             Span(lane="draft", label="branches", start_ns=90, end_ns=110, step=0, detail="1 rows"),  # across
             Span(lane="draft", label="branches", start_ns=60, end_ns=95, step=0, detail="2 rows"),
             Span(lane="draft", label="branches", start_ns=100, end_ns=120, step=0, detail="1 rows")]
    assert wi.draft_beside_factor([{"method": "mirror", "spans": spans}]) == pytest.approx(1.5)
    assert wi.draft_beside_factor([{"method": "sd", "spans": spans}]) is None
    assert wi.draft_beside_factor([{"method": "mirror", "spans": spans[:3]}]) is None  # none after


def test_profile_c_prices_sds_windows_with_its_own_costs():
    """A run whose priced windows decoded most steps on this machine (drafting did not pay
    here) is not replayed step for step on an accelerator where drafting is cheap: SD's
    windows are priced again with the profile's costs at the acceptance its drafted steps
    showed (decode-only steps say nothing about acceptance)."""
    hw = Accelerators(target="14B", draft="0.6B", gamma=4, launch_ms=0.0, host_ms=0.0, comm_ms=0.0)
    cal = accelerator_calibration(hw)
    ar = wi.RecordedSteps("ar", 4, [None] * 80, 80, 1.0)
    windows, accepted = [0] * 60 + [4] * 5, [0] * 60 + [3] * 5
    sd = wi.RecordedSteps("sd", 4, [None] * 65, 80, 1.0, windows=windows, accepted=accepted)
    assert sd.drafted_alpha() == pytest.approx(15 / 20)
    replayed = wi.project([ar, sd], wi.Profile("c", "x", cal, {}))["sd"]
    priced = wi.project([ar, sd], wi.Profile("c", "x", cal, {}, reprice_windows=True))["sd"]
    # replayed, the 60 decode-only steps cost a target forward for one token each
    assert priced["windows"][0] >= 2 and not priced["replayed"] and replayed["replayed"]
    assert priced["speedup"] > 1.3 * replayed["speedup"] and priced["speedup"] > 1.4
    steps, k, seconds = wi.priced_sd_steps(sd, cal)
    # the chosen window is the best of all k, decoding (k = 0) included
    alpha = 0.75
    rate = lambda j: ((1 - alpha ** (j + 1)) / (1 - alpha)) / (  # noqa: E731
        j * cal.t_draft_token + target_k(cal, j + 1) if j else cal.t_target_1)
    assert all(rate(k) >= rate(j) - 1e-9 for j in range(13))
    # with a draft as dear as the target, the profile decodes, as this machine did
    dear = replace(cal, t_draft_token=cal.t_target_1, t_fallback_token=cal.t_target_1)
    assert wi.priced_sd_steps(sd, dear)[1] == 0
    # no per-step acceptance (a benchmark record keeps only the windows): replayed as before
    assert wi.priced_sd_steps(replace(sd, accepted=[]), cal) is None


def test_profile_c_can_take_the_forward_times_measured_on_an_h200():
    """costs measured-h200: the forward times are the GPU check's (measured.json), linear
    between the measured row counts; the notes and the source say so; a bad choice is refused."""
    from mirror_sd import measured
    from mirror_sd.latency.whatif_hardware import measured_forward
    table = measured.values("h200_eager_forward_ms")
    hw = Accelerators(target="14B", draft="0.6B", gamma=3, costs="measured-h200")
    cal = accelerator_calibration(hw)
    assert cal.t_target_1 == pytest.approx(table["14B"]["1"] / 1e3)
    assert cal.t_target_k == pytest.approx(table["14B"]["4"] / 1e3)  # gamma + 1 rows
    assert cal.t_draft_token == pytest.approx(table["0.6B"]["1"] / 1e3)
    assert measured_forward("8B", 3) == pytest.approx((table["8B"]["2"] + table["8B"]["4"]) / 2e3)
    assert measured_forward("8B", 20) == pytest.approx(table["8B"]["8"] / 1e3)
    assert "H200" in cal.source and any("H200" in n for n in cal.notes)
    roof = accelerator_calibration(replace(hw, costs="roofline"))
    # launch-bound on the GPU: the draft's share of a target forward is far above the roofline's
    assert cal.t_draft_token / cal.t_target_1 > 3 * roof.t_draft_token / roof.t_target_1
    with pytest.raises(ValueError, match="costs must be one of"):
        accelerator_calibration(replace(hw, costs="guess"))


def test_an_sd_run_that_decoded_every_step_replays_at_decode_cost():
    """Priced windows may decode every step: no draft span, no draft cost. The replay prices
    those steps as plain decodes (T_target(1)) instead of giving up."""
    cal = lm.Calibration(target_layers=4, exit_layer=2, gamma=4, gamma_measured=4,
                         t_target_1=0.03, t_target_k=0.04, t_accept=0.001)
    ar = wi.RecordedSteps("ar", 4, [None] * 10, 10, 0.3)
    sd = wi.RecordedSteps("sd", 4, [None] * 10, 10, 0.31, windows=[0] * 10, accepted=[0] * 10)
    proj = wi.project([ar, sd], wi.Profile("a", "x", cal, {}))
    assert proj["sd"]["decode_s"] == pytest.approx(10 * (0.03 + 0.001))
    mixed = replace(sd, windows=[0] * 8 + [4, 4], accepted=[0] * 8 + [4, 4], tokens=18)
    with_draft = replace(cal, t_draft_token=0.01)
    got = wi.project([ar, mixed], wi.Profile("a", "x", with_draft, {}))["sd"]["decode_s"]
    assert got == pytest.approx(8 * 0.03 + 2 * 0.04 + 8 * 0.01 + 10 * 0.001)


def test_profile_c_prices_mirrors_windows_with_its_own_costs_at_the_runs_hit_rate():
    """Mirror-SD's windows, priced on this machine (short here), are priced again with the
    accelerator's costs: a longer window where drafting is cheap, each step a hit at the run's
    hit rate; faster than replaying the short windows."""
    hw = Accelerators(target="14B", draft="0.6B", gamma=2, launch_ms=0.0, host_ms=0.0, comm_ms=0.0)
    cal = accelerator_calibration(hw)
    ar = wi.RecordedSteps("ar", 2, [None] * 60, 60, 1.0)
    outcomes = [True, False] * 15
    mirror = wi.RecordedSteps("mirror", 2, outcomes, 60, 1.0, windows=[1] * 30, accepted=[1] * 27 + [0] * 3)
    replayed = wi.project([ar, mirror], wi.Profile("c", "x", cal, {}))["mirror"]
    priced = wi.project([ar, mirror], wi.Profile("c", "x", cal, {}, reprice_windows=True))["mirror"]
    assert priced["windows"][0] > 1 and priced["speedup"] > replayed["speedup"]
    steps, k, seconds, hit = wi.priced_steps(mirror, cal)
    assert hit == pytest.approx(0.5) and k == priced["windows"][0]
    # a hit rate set by hand keeps the run's windows and acceptance (priced again), every
    # drafted step at that rate: not the tau fit, which decode-only steps would drag down
    hw_hits = accelerator_profile(replace(hw, hit_rate=0.9), cal, 2)
    assert hw_hits.reprice_windows and hw_hits.acceptance_from_run and hw_hits.reweight
    at_hand = wi.project([ar, mirror], hw_hits)["mirror"]
    assert at_hand["hit_rate"] == pytest.approx(0.9) and at_hand["speedup"] > priced["speedup"]
    assert accelerator_profile(replace(hw, tau=2.5), cal, 2).reprice_windows is False


# ---------------------------------------------------------------------------------------------
# Mirror-SD's steps with the lanes in turn, and the hit rate's source


def record_in_turn(pair, prompt: str, tokens: int = 40, **over) -> RunRecord:
    """A Mirror-SD run whose overlap gate favours the lanes in turn (measured before: serial
    wins), as on a 2-core CPU: every PROBE_EVERY-th step overlaps, the others run in turn."""
    rec = RunRecord("mirror")
    ids = pair.encode_prompt([{"role": "user", "content": prompt}])
    decoder = DECODERS["mirror"](pair, Settings(max_new_tokens=tokens, gamma=GAMMA, branch_budget=2, **over))
    decoder._prepare()
    costs = decoder._lane_costs(decoder.settings)
    costs.clear()  # the gap between tries starts at PROBE_EVERY in every run
    costs.update(overlap=50.0, serial=10.0)
    rec.t0_ns = time.perf_counter_ns()
    for ev in decoder.generate(ids):
        rec.add(ev, time.perf_counter_ns() - rec.t0_ns)
    return rec


@pytest.fixture
def in_turn_runs(pair, monkeypatch):
    from mirror_sd.engine.mirror import decoder as mirror_decoder
    monkeypatch.setattr(mirror_decoder, "lanes_share_a_device", lambda _pair: True)
    over = dict(window="adaptive", window_threshold=0.0)
    return [{"ar": record(pair, "ar", p), "sd": record(pair, "sd", p, **over),
             "mirror": record_in_turn(pair, p, **over)} for p in PROMPTS]


def test_steps_with_the_lanes_in_turn_have_their_own_outcome_and_replay_within_10_percent(in_turn_runs):
    """The steps the gate ran with the lanes in turn are neither hits nor misses: the counts
    match the run's stats (hits and misses of the overlapped steps only), the spans say the same
    as the events, and profile (a) prices them as what they were (an SD step at the costs their
    own spans measured): Mirror-SD's projected decode time within 10% of the measured one."""
    projected = measured = 0.0
    for records in in_turn_runs:
        st = records["mirror"].finish.stats
        steps = wi.recorded_steps(wi.record_from_run(records["mirror"]), GAMMA)
        assert steps.in_turn > steps.overlapped > 0, steps.outcomes
        assert (steps.hits, steps.misses) == (st["hits"], st["fallbacks"])
        spans_only = dict(wi.record_from_run(records["mirror"]), events=None)
        assert wi.recorded_steps(spans_only, GAMMA).outcomes == steps.outcomes
        result = project_prompt(records)
        turn = result["profiles"]["a"].in_turn
        assert turn is not None and turn.t_draft_token and turn.t_target_k
        assert any("lanes in turn" in n for n in result["profiles"]["a"].notes)
        row = result["projected"]["a"]["mirror"]
        projected += row["decode_s"]
        measured += row["measured_decode_s"]
    assert projected / measured == pytest.approx(1.0, abs=0.10), (projected, measured)


def _in_turn_steps():
    outcomes = [True, wi.IN_TURN, False, wi.IN_TURN, wi.IN_TURN, True]
    return wi.RecordedSteps("mirror", 3, outcomes, 24, 1.0, windows=[3, 3, 2, 0, 3, 3], accepted=[3] * 6)


def test_an_in_turn_step_is_an_sd_step_here_and_an_expected_overlapped_step_elsewhere():
    cal = replace(lm.default_calibration(), gamma=3, gamma_measured=3)
    rec = _in_turn_steps()
    turn = replace(cal, t_target_k=0.3, t_target_1=0.1, gamma_measured=3, t_draft_token=0.05, t_accept=0.01)
    here = wi.Profile("a", "x", cal, {}, in_turn=turn)
    # this machine: the verify alone + the serial draft of the next window (and a plain decode)
    expected = (wi.step_seconds(replace(cal, gamma=3), "mirror", True) * 2
                + wi.step_seconds(replace(cal, gamma=2), "mirror", False)
                + 2 * (target_k(turn, 4) + 0.01 + 3 * 0.05) + turn.t_target_1 + cal.t_accept)
    assert wi.project_run(rec, here)["decode_s"] == pytest.approx(expected)
    assert wi.in_turn_seconds(turn, 3) == pytest.approx(0.3 + 0.01 + 0.15)
    # lanes on devices of their own: the in-turn steps as expected overlapped ones at the rate
    for h in (0.0, 0.4, 1.0):
        there = wi.Profile("b", "x", cal, {}, hit_rate=h)
        hit, miss = (wi.step_seconds(replace(cal, gamma=3), "mirror", x) for x in (True, False))
        expected = (2 * hit + wi.step_seconds(replace(cal, gamma=2), "mirror", False)
                    + 2 * (h * min(hit, miss) + (1 - h) * miss) + cal.t_target_1 + cal.t_accept)
        assert wi.project_run(rec, there)["decode_s"] == pytest.approx(expected)
    # without a rate of its own the profile takes the recorded overlapped steps' (2 of 3 hits)
    pooled = wi.project([rec], wi.Profile("b", "x", cal, {}))["mirror"]
    assert pooled["hit_rate"] == pytest.approx(2 / 3)
    # reweighted: every drafted step at the rate, the recorded hits and misses aside
    all_hits = wi.project_run(rec, wi.Profile("b", "x", cal, {}, hit_rate=1.0, reweight=True))["decode_s"]
    none = wi.project_run(rec, wi.Profile("b", "x", cal, {}, hit_rate=0.0, reweight=True))["decode_s"]
    assert all_hits < wi.project_run(rec, wi.Profile("b", "x", cal, {}, hit_rate=1.0))["decode_s"] < none


def test_the_ranks_of_the_overlapped_steps_tell_a_miss_without_a_fallback():
    """A benchmark record keeps spans and stats, no events. A miss whose next window was
    priced empty leaves no fallback span: the verdict ranks (one per overlapped step) tell it,
    at the budget that gives the counted hits; the in-turn steps have no rank."""
    ms = 1_000_000
    spans = []
    for step in range(5):
        t = step * 100 * ms
        if step in (0, 2, 3):  # overlapped: the split verify and the draft lane beside it
            spans += [Span("target", "prefix", t, t + 40 * ms, step), Span("target", "suffix", t + 40 * ms, t + 80 * ms, step),
                      Span("draft", "branches", t, t + 30 * ms, step, "1 rows")]
        else:  # in turn: the verify, then the serial draft of the next window
            spans += [Span("target", "verify_forward", t, t + 50 * ms, step, "4 tokens"),
                      Span("draft", "draft", t + 60 * ms, t + 90 * ms, step, "3 tokens, serial")]
        spans.append(Span("verify", "accept", t + 80 * ms, t + 81 * ms, step))
    stats = {"steps": 6, "hits": 1, "fallbacks": 2, "verdict_ranks": [0, 5, 2], "decode_tokens": 12, "decode_s": 0.5}
    rec = wi.recorded_steps({"method": "mirror", "stats": stats, "spans": spans}, 3)
    assert rec.outcomes == [True, wi.IN_TURN, False, False, wi.IN_TURN]
    # without the ranks the spans alone cannot tell (no fallback span): three hits
    bare = wi.recorded_steps({"method": "mirror", "stats": dict(stats, verdict_ranks=None), "spans": spans}, 3)
    assert bare.hits == 3
    # another budget replays the overlapped steps from their ranks, the in-turn ones kept
    assert wi.at_budget(rec, 3).outcomes == [True, wi.IN_TURN, False, True, wi.IN_TURN]


def test_a_benchmark_records_accepted_lengths_and_looked_up_windows():
    """A benchmark record has no events: the accepted lengths come from the stats' window
    verdicts (SD's priced windows then reprice on another profile), and SD's windows from a
    prompt lookup cost no draft forward in the replay."""
    ms = 1_000_000
    spans = [Span("target", "prefill", 0, 10 * ms, 0)]
    for step in range(1, 5):
        t = step * 100 * ms
        if step % 2:
            spans.append(Span("draft", "draft", t, t + 40 * ms, step, "2 tokens, serial"))
        else:
            spans.append(Span("draft", "lookup", t, t + 1 * ms, step, "3 tokens, lookup"))
        spans += [Span("target", "verify_forward", t + 40 * ms, t + 70 * ms, step, "4 tokens"),
                  Span("verify", "accept", t + 70 * ms, t + 71 * ms, step)]
    stats = {"steps": 5, "window_lengths": [0, 2, 3, 2, 3], "window_verdicts": [[0, 0], [2, 2], [3, 1], [2, 0], [3, 3]],
             "decode_s": 0.4, "decode_tokens": 10}
    rec = wi.recorded_steps({"method": "sd", "stats": stats, "spans": spans}, 3)
    assert rec.accepted == [2, 1, 0, 3] and rec.looked_up == 6
    cal = lm.Calibration(target_layers=4, exit_layer=2, gamma=3, gamma_measured=3, t_target_1=0.02,
                         t_target_k=0.03, t_draft_token=0.02)
    got = wi.project([rec], wi.Profile("a", "x", cal, {}))["sd"]["decode_s"]
    assert got == pytest.approx(4 * 0.03 + (10 - 6) * 0.02)  # 4 model-drafted tokens, 6 looked up


def test_the_hit_rate_comes_from_the_run_the_measured_pair_or_is_unknown():
    from mirror_sd import measured
    from mirror_sd.latency import whatif_hits as wh
    entry = measured.values(wh.MEASURED)
    pair = {k: entry["applies_to"][k] for k in ("target", "draft")}
    settings = dict(entry["applies_to"]["settings"], lane_overlap="auto", seed=0)
    few = wi.RecordedSteps("mirror", 4, [True, wi.IN_TURN, False] + [wi.IN_TURN] * 10, 30, 1.0)
    many = replace(few, outcomes=[True] * 6 + [False] * 3 + [wi.IN_TURN] * 4)
    assert many.overlapped == 9 >= wh.MIN_OVERLAPPED > few.overlapped
    own = wh.hit_source([many], settings, pair)
    assert (own.kind, own.rate, own.steps) == ("run", pytest.approx(6 / 9), 9) and not own.reweight
    assert "this run's 9 overlapped steps" in own.words()
    got = wh.hit_source([few], settings, pair)  # too few: the pair's measured rate
    assert got.kind == "measured" and got.rate == pytest.approx(entry["hits"] / entry["overlapped_steps"])
    assert got.reweight and f"over {entry['overlapped_steps']} overlapped steps in a benchmark" in got.words()
    assert "(lanes always overlapped; this run: 2, fewer than 8)" in got.words()
    # another setting, another pair, or a setting the run does not say: unknown
    for s, p in ((dict(settings, branch_budget=4), pair), (dict(settings, exit_layer=21), pair),
                 (settings, dict(pair, draft="tiny-draft")), ({"gamma": 4}, pair)):
        src = wh.hit_source([few], s, p)
        assert src.kind == "unknown" and src.rate is None and src.used == wh.UNKNOWN_RATE
        assert "hit rate unknown" in src.words()
    assert wh.hit_source([few], settings, pair, by_hand=0.9).words() == "hit rate 90%, set by hand"
    # the exit check's steps in turn, read after the run, count in before the benchmark's rate
    checked = replace(few, checked=10, checked_hits=7)
    src = wh.hit_source([checked], settings, pair)
    assert (src.kind, src.steps, src.rate) == ("checked", 12, pytest.approx((1 + 7) / 12)) and not src.reweight
    assert "2 with the lanes overlapped, 10 in turn checked after the run" in src.words()
    from ui.whatif import short_source  # in short, whose steps the rate counts
    assert short_source(src.words()) == "hit rate 67% (Mirror-SD's steps in this run, those in turn checked after it)"
    assert wh.with_source(wi.Profile("c", "x", lm.Calibration(target_layers=4, exit_layer=2, gamma=4), {}), src).hit_rate == src.rate
    assert wh.hit_source([replace(few, checked=5, checked_hits=5)], settings, pair).kind == "measured"  # 2 + 5 < 8
    stats = {"steps": 3, "exit_check": {"in_turn": 10, "would_hit": 7}}
    rec = wi.recorded_steps({"method": "mirror", "stats": stats, "spans": []}, 4)
    assert (rec.checked, rec.checked_hits) == (10, 7)
    assert wh.variant_settings("mirror:branch_budget=4", settings)["branch_budget"] == "4"
    assert not wh.measured_applies(wh.variant_settings("mirror:branch_budget=4", settings), pair)


def test_mirror_over_sd_against_the_hit_rate_and_its_break_even():
    from mirror_sd.latency import whatif_hits as wh
    source = wh.HitSource("measured", 0.6, 68, 2, 1)
    line = lambda h: (1.5, 1.5 * (0.9 + 0.25 * h))  # noqa: E731  Mirror-SD passes SD at h = 0.4
    series = wh.hit_rate_series(line, source)
    rates = [p["hit_rate"] for p in series["points"]]
    assert rates == [0.0, 0.25, 0.5, 0.6, 0.75, 1.0] and series["projection"]
    assert [p["hit_rate"] for p in series["points"] if p["source"]] == [0.6]
    assert series["break_even"] == pytest.approx(0.4, abs=0.01)
    words = wh.series_words(series, "On the accelerator pair")
    assert words.startswith("On the accelerator pair Mirror-SD passes SD above a 40% hit rate")
    assert "this pair's measured 60% (68 overlapped steps in a benchmark" in words and "gives 1.05× SD" in words
    assert wh.break_even(lambda h: (1.0, 0.8)) is None and wh.break_even(lambda h: (1.0, 1.2)) == 0.0
    unknown = wh.hit_rate_series(line, wh.HitSource("unknown", None, 0, 1, 0))
    said = wh.series_words(unknown, "On the accelerator pair")
    assert "an unknown hit rate (this run: 1 overlapped step) it projects 0.90-1.15× SD over 0-100%" in said


def test_the_series_line_says_mirror_sd_passes_sd_only_beside_figures_that_do():
    """Whether the line says Mirror-SD passes SD agrees with every figure it prints, as printed
    (2 decimals): the source's own figure (the run's steps as priced) can lie off the side of
    1x that every drafted step priced at one rate gives, and a figure can round across 1.00."""
    from mirror_sd.latency import whatif_hits as wh
    where = "On the accelerator pair"
    run = wh.HitSource("run", 0.6, 12, 12, 7)
    # at one rate for every step Mirror-SD passes SD at 0-100%, this run's own steps give 0.98x
    said = wh.series_words(wh.hit_rate_series(lambda h: (1.0, 1.01 + 0.02 * h), run, own=0.98), where)
    assert "passes" not in said and "0.98× SD at this run's 60%" in said and "1.01-1.03× SD" in said, said
    # one flat figure that prints 1.00: not "does not pass" nor "passes": it matches
    flat = wh.hit_rate_series(lambda h: (1.0, 0.9955 + 0.001 * h), run, own=0.996)
    assert flat["break_even"] is None
    said = wh.series_words(flat, where)
    assert "about 1.00× SD" in said and "does not pass" not in said and "matches SD at any hit rate" in said
    # over many lines and own figures: the claim and the printed figures never disagree
    for lo in (0.95, 0.99, 0.996, 1.0, 1.004, 1.02):
        for slope in (0.0, 0.004, 0.02, 0.1):
            for own in (None, 0.97, 0.996, 1.0, 1.03):
                for src in (run, wh.HitSource("unknown", None, 0, 1, 0)):
                    series = wh.hit_rate_series(lambda h: (1.5, 1.5 * (lo + slope * h)), src, own=own)
                    said = wh.series_words(series, where)
                    figures = [float(x) for x in re.findall(r"(\d\.\d\d)× SD", said)]
                    figures += [float(x) for x in re.findall(r"(\d\.\d\d)-\d\.\d\d× SD", said)]
                    assert figures, said
                    if "passes SD at any hit rate" in said:
                        assert min(figures) >= 1.0, said
                    if "does not pass" in said:
                        assert max(figures) < 1.0, said
                    if "matches SD at any hit rate" in said:
                        assert set(figures) == {1.0}, said
                    m = re.search(r"above a (\d+)% hit rate; .* gives (\d\.\d\d)× SD", said)
                    if m:
                        assert (float(m[2]) >= 1.0) == (src.used * 100 >= int(m[1])), said


def test_the_projection_names_its_hit_rate_source_and_the_series(runs):
    """The verdict's projection (projection_of) and its line: the hit rate's source with the
    steps behind it, and one line of Mirror-SD over SD against the hit rate, a projection."""
    result, _ = panel.project_state(state_of(runs[0]))
    for key in ("b", "c"):
        series = result["hit_series"][key]
        assert [p["hit_rate"] for p in series["points"]][:1] == [0.0] and series["projection"]
        # every drafted step at each rate: more hits never make Mirror-SD slower (the source's own
        # point is the pick as projected, the run's recorded hits and misses where the rate is its own)
        ratios = [p["mirror_over_sd"] for p in series["points"] if not p["source"]]
        assert all(b >= a - 1e-9 for a, b in zip(ratios, ratios[1:])), ratios
        own = next((p for p in series["points"] if p["source"]), None)
        if own is not None:
            assert own["mirror_over_sd"] == pytest.approx(result["choices"][key]["mirror_over_sd"])
    p = panel.projection_of(result, Accelerators())
    assert {"key", "row", "speedups", "rows", "over_sd", "inputs"} <= set(p)  # the keys it had
    assert p["hit_source"] == result["choices"]["c"]["hit_source"] and p["hit_source"] in p["inputs"]
    assert re.search(r"\d+ (overlapped )?steps?", p["hit_source"])
    html = panel.projection_line(p)
    text = re.sub(r"<[^>]+>", "", html)
    assert "From the runs shown, on the accelerator pair Mirror-SD" in text and text.count("projection") >= 2
    assert html.count('<p class="msd-projection') == 2
    # rows (b) and (c) are the chart's lines, each named by its row
    from ui.figures import cards
    from ui.paychart import render_pay_chart
    chart = render_pay_chart(p, cards(runs[0]))
    assert "(What if, row (b))" in chart and "(What if, row (c))" in chart


def test_the_timeline_draws_an_in_turn_step_as_it_ran_here_and_a_rate_elsewhere_holds_the_budget():
    from mirror_sd.latency import whatif_choice as wc
    cal = replace(lm.default_calibration(), gamma=3, gamma_measured=3)
    turn = replace(cal, t_target_k=0.3, t_draft_token=0.05)
    rec = _in_turn_steps()
    here = wi.projected_timeline(rec, wi.Profile("a", "x", cal, {}, in_turn=turn), 3)
    step1 = [b for b in here["bars"] if b[4] == 1]
    assert [b[1] for b in step1] == ["verify_forward", "accept", "draft"]  # the verify, then the draft
    assert step1[0][2] < step1[0][3] <= step1[2][2]
    there = wi.projected_timeline(rec, wi.Profile("b", "x", cal, {}, hit_rate=0.8), 3)
    assert "verify_forward" not in {b[1] for b in there["bars"]}  # drawn as the likelier outcome, a hit
    # a rate from elsewhere than the run was measured or set at its budget: no other budget searched
    ranked = replace(rec, ranks=[0, 3, 1])
    prof = wi.Profile("b", "x", cal, {"ar": 0.0, "mirror": 0.0}, hit_rate=0.6, reweight=True)
    ar = wi.RecordedSteps("ar", 3, [None] * 24, 24, 1.0)
    cands, searched = wc._mirror_candidates([ar, ranked], prof, {"gamma": 3}, 2, "mirror")
    assert [c["settings"]["branch_budget"] for c in cands] == [2] and not searched
    cands, searched = wc._mirror_candidates([ar, ranked], replace(prof, hit_rate=None, reweight=False),
                                            {"gamma": 3}, 2, "mirror")
    assert len(cands) == lm.MAX_BUDGET and searched


def test_windows_priced_again_take_sd_and_mirror_sds_pooled_acceptance():
    """One draft, one window policy: SD's and Mirror-SD's drafted steps pool into one acceptance
    (a run whose Mirror-SD drafted little does not price its windows from a handful of steps)."""
    sd = wi.RecordedSteps("sd", 4, [None] * 4, 12, 1.0, windows=[2, 2, 2, 2], accepted=[2, 2, 2, 1])
    mirror = wi.RecordedSteps("mirror", 4, [wi.IN_TURN] * 4, 6, 1.0, windows=[0, 0, 2, 0], accepted=[0, 0, 0, 0])
    assert mirror.drafted_alpha() == pytest.approx(0.0) and sd.drafted_alpha() == pytest.approx(7 / 8)
    assert wi.shared_alpha([sd, mirror]) == pytest.approx(7 / 9)  # 7 taken of 9 tested
    assert wi.shared_alpha([wi.RecordedSteps("ar", 4, [], 1, 1.0)]) is None


def test_the_hit_rates_source_is_said_in_full_once_in_the_fold_and_in_short_elsewhere(runs):
    """The source of the hit rate (its steps, how they were counted) in full once, at the top
    of the What-if fold; the fold's rows and notes and the verdict's line name the rate in short.
    The fold's row (c) tells the window setting picked in its inputs from this run's."""
    import html as h
    from ui.results import render_verdict
    state = state_of(runs[0])
    result, _ = panel.project_state(state)
    page = panel.render_panel(result)
    sources = {p.hit_source.words() for p in result["profiles"].values() if p.hit_source is not None}
    sources |= {ch["hit_source"] for ch in result["choices"].values() if ch.get("hit_source")}
    assert sources
    for words in sources:
        assert page.count(h.escape(words)) <= 1, words
    p = panel.projection_of(result, Accelerators())
    assert page.count(h.escape(p["hit_source"])) == 1
    verdict = render_verdict(runs[0], state["meta"], p)
    assert h.escape(p["hit_source"]) not in verdict
    assert h.escape(panel.short_source(p["hit_source"]) + " (its source: the What-if fold)") in verdict
    # (c) at the inputs' defaults: this run's own window setting and steps, as the verdict's row
    table = panel.render_table(result)
    row_c = table.split("projection (c)")[1].split("</tr>")[0]
    assert result["profiles"]["c"].calibration.gamma == GAMMA
    assert "this run&#x27;s own steps and windows, replayed" in row_c and "w-other" not in table
    # in the fold at its default inputs that row gives no second set of (c) figures: it points
    # to the verdict's (the first table's row (c))
    replay = page.split("projection profile")[1]
    row_c = replay.split("projection (c)")[1].split("</tr>")[0]
    assert "the first table, row (c)" in row_c and "×" not in row_c
    # a window set in the inputs: that window, beside this run's, and not the verdict's figures
    other = GAMMA + 2
    result5, _ = panel.project_state(state, Accelerators(gamma=other))
    row_c = panel.render_table(result5).split("projection (c)")[1].split("</tr>")[0]
    assert f"at the window setting picked in the inputs below, {other}," in row_c
    assert f"this run&#x27;s window setting: {GAMMA}" in row_c and "not the verdict&#x27;s figures" in row_c
    assert "the settings it picks there" in panel.render_choices(result)


def test_each_tables_rows_b_and_c_say_whose_settings_and_a_line_says_when_their_figures_differ(runs):
    """The first table's rows run each method at the settings it picks there; the next table's
    rows (b) and (c) replay this run's settings as recorded; where the two print other figures
    for a row, one line under the first table says so."""
    result, _ = panel.project_state(state_of(runs[0]))
    first = panel.render_choices(result, own_c=True)
    for key in ("b", "c"):
        assert f"projection ({key}), at the settings it picks there: " in first
    row_b = panel.render_table(result, own_c=True).split("projection (b)")[1].split("</tr>")[0]
    assert "replayed: its settings as recorded, not the first table&#x27;s picks" in row_b
    if not result["profiles"]["b"].acceptance_from_run:
        return
    note = "row (b) replays this run&#x27;s settings as recorded, not these picks, so its figures differ"
    row = panel.choice_row(result["choices"]["b"])
    for m in ("sd", "mirror"):  # the second table's row (b) printing the first's figures
        result["projected"]["b"][m]["speedup"] = float(row[m].rstrip("×"))
    assert "figures differ" not in panel.render_choices(result, own_c=True)
    result["projected"]["b"]["mirror"]["speedup"] += 0.25
    assert note in panel.render_choices(result, own_c=True)
    # at its default inputs row (c) of the next table points to the first's: no line for it
    result["projected"]["c"]["sd"]["speedup"] += 0.25
    assert "rows (b) and (c)" not in panel.render_choices(result, own_c=True)
    if result["profiles"]["c"].acceptance_from_run:
        assert "rows (b) and (c) replay this run&#x27;s settings" in panel.render_choices(result)


def test_sd_s_projected_timeline_draws_its_recorded_windows_and_sums_to_its_decode_time():
    """SD's timeline steps are the steps its projected decode time prices: a step that drafted
    nothing is one plain target forward, a drafted one pays for its own window, so the timeline
    of every step ends where the table's decode time does (less nothing, at host 0)."""
    cal = replace(lm.default_calibration(), gamma=4, gamma_measured=4)
    rec = wi.RecordedSteps("sd", 4, [None] * 4, 9, 1.0, windows=[0, 4, 2, 0], accepted=[0, 3, 2, 0])
    prof = wi.Profile("c", "x", cal, {})
    drawn = wi.projected_timeline(rec, prof, 4)
    assert drawn["end_s"] == pytest.approx(wi.sd_replay_seconds(rec, cal, 4))
    first = [b[1] for b in drawn["bars"] if b[4] == 0]
    assert first == ["decode", "accept"] or first == ["decode"]  # no window: no draft bar
    drafts = {b[4]: b[3] - b[2] for b in drawn["bars"] if b[1] == "draft"}
    assert set(drafts) == {1, 2} and drafts[1] == pytest.approx(2 * drafts[2])  # 4 tokens against 2


def test_a_flat_hit_rate_series_gives_one_figure():
    """Where the hit rate moves Mirror-SD over SD by less than half a hundredth, the line gives
    one figure, the source's own, never a second that rounds differently."""
    from mirror_sd.latency.whatif_hits import series_words
    series = {"break_even": None, "source_short": "the 94% hit rate",
              "points": [{"hit_rate": 0.0, "mirror_over_sd": 0.9720, "source": False},
                         {"hit_rate": 0.94, "mirror_over_sd": 0.9760, "source": True},
                         {"hit_rate": 1.0, "mirror_over_sd": 0.9722, "source": False}]}
    line = series_words(series, "On the accelerator pair")
    assert "about 0.98× SD whatever the hit rate" in line and "0.97" not in line and "gives" not in line, line
    even = {**series, "points": [dict(p, mirror_over_sd=p["mirror_over_sd"] + 0.0268) for p in series["points"]]}
    line = series_words(even, "On the accelerator pair")  # 0.9988-1.0028: printed 1.00× everywhere
    assert line.startswith("On the accelerator pair Mirror-SD matches SD at any hit rate (about 1.00× SD") and \
        "passes" not in line, line


def test_the_model_s_contention_factor_is_named_apart_from_the_verdict_s_verify_figure():
    """The fold's factor is the model's (means over all verify steps, as a total needs): named
    'the model's contention factor', never in the verdict's words for its median."""
    import html
    split = {"contention": 1.11, "core_split": 1.05, "interference": 1.11 / 1.05, "note": ""}
    text = html.unescape(re.sub(r"<[^>]+>", "", panel.render_split({"costs": split})))
    assert text.startswith("Row (a) prices sharing this CPU with the model's contention factor, 1.11×")
    assert "A total needs means, so it is not the verdict's median at one window length." in text
    assert "The factor is 1.05× core split" in text and "1.06× interference" in text
    assert "beside the draft" not in text and "a verify alone" not in text and "time alone" not in text
    unsplit = panel.render_split({"costs": {**split, "core_split": None, "interference": None,
                                            "note": "no one- against two-thread measurement"}})
    assert "No one- against two-thread measurement." in unsplit
    assert panel.render_split({"costs": {**split, "contention": 1.001}}) == ""  # lanes in turn: nothing shared


def test_the_measured_chart_draws_branches_after_their_verdict_as_drafting_the_target_waits_for():
    """What if's measured chart colours a branch forward begun after its step's verdict as the
    latency timeline does (the target waits for it), not as drafting beside the target; a step
    whose target bars fall before the chart's start (the first commit) had its verdict before it."""
    from ui.runs import LATE_BRANCHES
    from ui.timeline import GROUP_OF
    from ui.whatif import _group, late_marked
    bars = [("draft", "branches", 0.00, 0.05, 0),  # step 0: its verdict came before the first commit
            ("target", "prefix", 0.06, 0.20, 1), ("draft", "extend", 0.06, 0.10, 1),
            ("draft", "branches", 0.10, 0.18, 1),  # beside the target's layers
            ("target", "suffix", 0.20, 0.25, 1), ("verify", "accept", 0.25, 0.26, 1),
            ("draft", "branches", 0.26, 0.30, 1)]  # begun at the verdict: the target waits
    marked = [b[1] for b in late_marked(bars)]
    assert marked == [LATE_BRANCHES, "prefix", "extend", "branches", "suffix", "accept", LATE_BRANCHES]
    assert _group(LATE_BRANCHES)[0] == "draft, the target waits" == GROUP_OF["draft"][0]
    assert _group("branches")[0] == "draft beside the target"
