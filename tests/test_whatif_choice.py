"""The What-if's per-profile settings (latency/whatif_choice.py), the two costs of sharing the CPU
and profile (d) (latency/whatif_costs.py), the window summary: tiny runs and synthetic numbers."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mirror_sd.latency import latency_model as lm
from mirror_sd.latency import whatif as wi
from mirror_sd.latency import whatif_choice as wc
from mirror_sd.latency import whatif_costs as costs
from mirror_sd.latency.step_model import MAX_BUDGET
from mirror_sd.latency.whatif_hardware import Accelerators, project_all, window_summary
from mirror_sd.engine.registry import METHODS as DECODERS
from mirror_sd.engine.settings import Settings
from mirror_sd.models.tiny import LAYERS, tiny_pair

GAMMA = 3
PROMPTS = ["def hello ( x ) :", "print the sum of a list"]
VARIANTS = {"ar": {}, "sd": {}, "mirror": {}, "mirror:branch_extend=off": {"branch_extend": "off"}}


@pytest.fixture(scope="module")
def records():
    """Record dicts of two prompts, each run by AR, SD, Mirror-SD and its gamma-deep variant."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    pair = tiny_pair()
    out = []
    for p in PROMPTS:
        ids = pair.encode_prompt([{"role": "user", "content": p}])
        for name, over in VARIANTS.items():
            s = Settings(max_new_tokens=40, gamma=GAMMA, window="adaptive", window_threshold=0.0, **over)
            events = list(DECODERS[wi.base_method(name)](pair, s).generate(ids))
            out.append({"method": name, "stats": dict(events[-1].stats),
                        "spans": [e for e in events if type(e).__name__ == "Span"], "events": events})
    torch.set_num_threads(before)
    return out


def project(records, **kw):
    return project_all(records, target_layers=LAYERS, gamma=GAMMA, exit_layer=LAYERS // 2,
                       settings={"window": "adaptive", "branch_extend": "on"}, **kw)


def test_each_profile_picks_its_fastest_replayable_settings(records):
    out = project(records, precision="int8")
    assert set(out["choices"]) >= {"b", "c"}
    for key, choice in out["choices"].items():
        assert choice["projection"] and choice["profile"] == key
        mirror = [c for c in choice["candidates"] if c["method"].startswith("mirror")]
        # each recorded variant is either searched, every budget replayed from the ranks, or
        # named as not priced (a busy machine can leave a variant's spans unusable)
        searched = {c["method"] for c in mirror}
        assert searched  # at least one variant priced: the choice stands on measured steps
        for variant in ("mirror", "mirror:branch_extend=off"):
            if variant in searched:
                budgets = {c["settings"]["branch_budget"] for c in mirror if c["method"] == variant}
                assert budgets == set(range(1, MAX_BUDGET + 1))
            else:
                assert any(note.startswith(f"{variant}: not priced") for note in choice["not_replayable"])
        assert choice["mirror"]["speedup"] == max(c["speedup"] for c in mirror)
        assert choice["sd"]["method"] == "sd"
        assert choice["mirror_over_sd"] == pytest.approx(choice["mirror"]["speedup"] / choice["sd"]["speedup"])
        chosen = choice["mirror"]["settings"]
        assert chosen["window"] == "adaptive" and chosen["gamma"] == GAMMA
        assert chosen["exit_layer"] == next(r["stats"]["exit_layer"] for r in records if r["method"] == "mirror")
        said = " ".join(choice["not_replayable"])
        assert "gamma: only 3" in said and "exit layer" in said and "window policy" in said
        # more hits with more branches, whatever they cost (per priced variant)
        for variant in searched:
            hits = {c["settings"]["branch_budget"]: c["hits"] for c in mirror if c["method"] == variant}
            assert all(hits[b] <= hits[b + 1] for b in range(1, MAX_BUDGET))
    # the main table pools no variant: its Mirror-SD is the plain one
    plain = [r for r in out["recorded"] if r.method == "mirror"]
    assert len(plain) == len(PROMPTS)


def test_paper_acceptance_set_by_hand_is_not_searched(records):
    out = project(records, accelerators=Accelerators(tau=5.0, hit_rate=0.9))
    assert "c" not in out["choices"] and "b" in out["choices"]


def test_at_budget_replays_hits_from_the_ranks():
    rec = wi.RecordedSteps("mirror", 4, [True, True, False, True, False], 20, 1.0,
                           windows=[4] * 5, ranks=[0, 1, -1, None, 3])
    assert wi.at_budget(rec, 1).outcomes == [True, False, False, True, False]
    assert wi.at_budget(rec, 2).outcomes == [True, True, False, True, False]
    assert wi.at_budget(rec, 4).outcomes == [True, True, False, True, True]
    assert wi.at_budget(replace(rec, ranks=[0, 1]), 2) is None  # ranks missing for some steps
    assert wi.at_budget(replace(rec, method="sd"), 2) is None


def test_tail_grows_with_the_rows_of_each_batched_forward():
    cal = replace(lm.default_calibration(), t_branch_1=0.1, t_branch_row=0.05, branch_rows=2.0)
    prof = wi.Profile("b", "x", cal, {}, mirror=cal, tail=(0.2, 0.05))
    assert wc.tail_at_budget(prof, 2, 2, 6.0) == (0.2, 0.05)
    more, fewer = wc.tail_at_budget(prof, 8, 2, 6.0), wc.tail_at_budget(prof, 1, 2, 6.0)
    assert more[0] > 0.2 > fewer[0] >= 0.0 and more[1] == fewer[1] == 0.05
    assert wc.tail_at_budget(replace(prof, tail=None), 8, 2, 6.0) is None


def test_variant_settings_read_the_method_name():
    base = {"gamma": 4, "window": "adaptive", "branch_extend": "on", "exit_layer": None, "branch_budget": 2}
    s = wc.variant_settings("mirror:branch_extend=off:gamma=6", base, [{"exit_layer": 24}])
    assert s == {"gamma": 6, "window": "adaptive", "branch_extend": "off", "exit_layer": 24, "branch_budget": 2}
    assert wc.variant_settings("sd", base, [{}]) == {"gamma": 4, "window": "adaptive"}


def _profiles(contention: float, rows: int = 5):
    pooled = replace(lm.default_calibration(), t_target_k=0.2, gamma=int(rows) - 1, gamma_measured=rows - 1)
    mirror = replace(pooled, t_target_k=0.2 * contention)
    return wi.machine_profiles(pooled, {m: 0.0 for m in wi.METHODS}, mirror, (0.05, 0.01))


def test_contention_is_named_as_core_split_times_interference(monkeypatch):
    monkeypatch.setitem(costs.CORE_SPLIT, "int8", {1: 1.5, 5: 1.6, 8: 1.7})
    c = costs.split_costs(_profiles(2.0), "int8")
    assert c["contention"] == pytest.approx(2.0) and c["core_split"] == 1.6 and c["rows"] == 5
    assert c["interference"] == pytest.approx(2.0 / 1.6)
    assert "core split" in c["note"] and "interference" in c["note"]
    unknown = costs.split_costs(_profiles(2.0), "int4")
    assert unknown["interference"] is None and "not split" in unknown["note"]
    assert costs.many_cores_profile(_profiles(2.0), unknown) is None  # not grounded: no profile
    busy = costs.split_costs(_profiles(1.2), "int8")  # less than the split alone: not readable
    assert busy["interference"] is None and "did not show the whole split" in busy["note"]
    assert costs.many_cores_profile(_profiles(1.2), busy) is None
    mean = costs.split_costs(_profiles(2.0, rows=1 + 10 / 3), "int8")  # a mean window: one decimal
    assert "4.3 rows" in mean["note"] and "4.333" not in mean["note"]
    assert "(one thread instead of two, 5 rows)" in c["note"]


def test_profile_d_sits_between_this_machine_and_a_device_of_its_own(monkeypatch):
    monkeypatch.setitem(costs.CORE_SPLIT, "int8", {5: 1.6})
    profiles = _profiles(2.0)
    d = costs.many_cores_profile(profiles, costs.split_costs(profiles, "int8"))
    assert d.key == "d" and "8 vCPU" in d.name
    a, b = (wi.step_seconds(profiles[k].mirror, "mirror", True, profiles[k].tail) for k in "ab")
    mid = wi.step_seconds(d.mirror, "mirror", True, d.tail)
    assert b < mid < a
    assert d.mirror.t_target_k == pytest.approx(profiles["b"].mirror.t_target_k * 2.0 / 1.6)
    assert d.calibration is profiles["b"].calibration  # AR and SD as measured


def test_window_summary_by_hand():
    recs = [{"method": "sd", "stats": {"window_lengths": [4, 6, 8]}},
            {"method": "sd", "stats": {"window_lengths": [2]}},
            {"method": "ar", "stats": {"window_lengths": []}}]
    assert window_summary(recs) == {"sd": {"count": 4, "min": 2, "median": 5.0, "max": 8, "mean": 5.0}}


def test_report_of_a_benchmark_run(tmp_path, capsys):
    """`python -m mirror_sd.bench.whatif_report OUT`: the benchmark's variants are searched
    per profile, the table says projection, whatif.json carries the fields the page shows."""
    import json

    from mirror_sd.bench import harness as bench
    from mirror_sd.bench import whatif_report
    from mirror_sd.questions import load_questions
    from test_bench import NEW, SAMPLE
    from test_bench import tiny_pair as bench_pair

    methods = ["ar", "sd", "mirror", "mirror:branch_extend=off"]
    bench.run_benchmark(bench_pair(), load_questions(SAMPLE)[:2], methods,
                        Settings(max_new_tokens=NEW, gamma=GAMMA, window="adaptive", window_threshold=0.0),
                        out_dir=tmp_path, progress=False)
    assert whatif_report.main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("PROJECTIONS") and "its own settings" in text and "not searched" in text
    saved = json.loads((tmp_path / "whatif.json").read_text())
    assert saved["projection"] and {"b", "c"} <= set(saved["choices"])
    assert set(saved["windows"]) == {"sd", "mirror", "mirror:branch_extend=off"}
    assert saved["windows"]["mirror:branch_extend=off"]["max"] <= GAMMA
    assert {"contention", "core_split", "interference"} <= set(saved["costs"])
    assert whatif_report.main([str(tmp_path / "missing")]) == 2


def test_sd_s_windows_priced_again_take_every_variant_s_acceptance():
    """An SD run whose pricing drafted nothing here (a dear draft) says nothing of the draft's
    acceptance; priced again on a profile with a cheap draft, its windows take the acceptance
    of every variant's drafted steps (one draft), not a plain decode's 1.00×."""
    cal = replace(lm.default_calibration(), gamma=4, gamma_measured=4, t_target_1=0.1, t_target_k=0.11,
                  t_draft_token=0.01)  # a cheap draft, a verify forward about one token's
    prof = wi.Profile("c", "x", cal, {"ar": 0.0, "sd": 0.0, "mirror": 0.0}, acceptance_from_run=False,
                      reprice_windows=True)
    ar = wi.RecordedSteps("ar", 4, [None] * 20, 20, 1.0)
    sd = wi.RecordedSteps("sd", 4, [None] * 20, 20, 1.0, windows=[0] * 20, accepted=[0] * 20)
    mirror = wi.RecordedSteps("mirror", 4, [True] * 8, 20, 1.0, windows=[2] * 8, accepted=[2, 2, 1, 2, 2, 2, 2, 2])
    assert sd.drafted_alpha() is None
    alone = wi.project([ar, sd], prof)["sd"]["speedup"]  # nothing to price windows with
    found = wc.search({"sd": [ar, sd], "mirror": [ar, mirror]}, lambda n: prof,
                      {"sd": {"gamma": 4}, "mirror": {"gamma": 4}}, 2)
    pooled = wi.shared_alpha([ar, sd, ar, mirror])
    assert found["sd"][0]["speedup"] == pytest.approx(wi.project([ar, sd], prof, pooled)["sd"]["speedup"])
    assert found["sd"][0]["speedup"] > max(1.2, alone)
