"""The latency model (the paper's step-time model, calibrated from spans) and the tuning that
builds on it, against hand-computed cases; the what-if command line. No models."""
import json

import pytest

from mirror_sd.bench import cli as bench_cli
from mirror_sd.latency import latency_model as lm
from mirror_sd.engine.events import Span


def hand_cal(**over):
    kw = dict(target_layers=4, exit_layer=2, gamma=2, t_target_1=0.010, t_target_k=0.016,
              head_share=0.25, t_exit_head=0.002, t_accept=0.001, t_draft_token=0.003,
              t_extend=0.003, t_branch_1=0.004, t_branch_row=0.001, branch_forwards=1.0,
              branch_rows=2.0, contention=1.0, alpha_sd=0.5, alpha_mirror=0.5, hit_rate=1.0,
              schedule="paper")
    kw.update(over)
    return lm.Calibration(**kw)


def test_tau_and_alpha():
    assert lm.tau_from_alpha(0.5, 3) == pytest.approx(1.875)
    assert lm.tau_from_alpha(1.0, 4) == 5
    assert lm.alpha_from_tau(1.875, 3) == pytest.approx(0.5, abs=1e-9)
    assert lm.alpha_from_tau(1.0, 4) == 0.0 and lm.alpha_from_tau(5.0, 4) == 1.0


def test_step_times_by_hand():
    c = hand_cal()
    # AR: one 1-token forward. SD: 2 draft tokens + a 3-token forward + the acceptance rule.
    assert lm.step_time(c, "ar") == pytest.approx(0.010)
    assert lm.step_time(c, "sd") == pytest.approx(2 * 0.003 + 0.016 + 0.001)
    # Mirror: layers 0.75 * 16 ms = 12 ms, prefix 2/4 of them = 6 ms; suffix 6 ms + head 4 ms;
    # rollouts 3 + 2 * (4 + 1) = 13 ms > suffix: step = 6 + 2 + 13 + 1 = 22 ms
    t = lm.step_terms(c)
    assert (t["T_prefix"], t["T_suffix"], t["T_rollouts"]) == pytest.approx((0.006, 0.010, 0.013))
    assert lm.step_time(c, "mirror") == pytest.approx(0.022)
    # half the steps miss: 6 + 2 + 10 + serial fallback 2 * 3 = 24 ms
    assert lm.step_time(hand_cal(hit_rate=0.5), "mirror") == pytest.approx(0.5 * 0.021 + 0.5 * 0.024 + 0.001)
    # contention 1.5 on both lanes while they overlap
    assert lm.step_time(hand_cal(contention=1.5), "mirror") == pytest.approx(1.5 * 0.008 + 1.5 * 0.013 + 0.001)
    # this engine's schedule: the draft starts with the step, so its 13 ms of work overlap the
    # prefix too; the rows admitted at the exit need 2 * 5 ms after it: max(18, 8 + 10, 13) + 1
    assert lm.step_time(hand_cal(schedule="engine"), "mirror") == pytest.approx(0.019)
    assert lm.step_time(hand_cal(schedule="engine", t_extend=0.020), "mirror") == pytest.approx(0.031)
    # with contention 1.5 the draft works at 2/3 speed while the target lane runs (1.5 * 18 =
    # 27 ms, 18 ms of its 30 done); the 12 ms left run alone after the verdict: 27 + 12 + 1
    assert lm.step_time(hand_cal(schedule="engine", t_extend=0.020, contention=1.5), "mirror") == pytest.approx(0.040)
    p = lm.predict(c)
    assert p["sd"]["tokens_per_step"] == pytest.approx(1.75)
    assert p["sd"]["speedup"] == pytest.approx(1.75 * 0.010 / 0.023)
    assert p["mirror"]["speedup"] == pytest.approx(1.75 * 0.010 / 0.022)
    assert p["ar"]["speedup"] == 1.0


def test_what_if_by_hand():
    c = hand_cal(contention=1.5)
    w = lm.what_if(c, draft_device="separate")
    assert w["projection"] is True and "not a measurement" in w["note"]
    assert w["projected"]["mirror"]["step_s"] == pytest.approx(0.022)  # contention gone
    assert lm.what_if(c, draft_device="serial")["projected"]["mirror"]["step_s"] == pytest.approx(0.032)
    assert lm.what_if(c, draft_device="separate", comm_ms=1)["projected"]["mirror"]["step_s"] == pytest.approx(0.024)
    big = lm.what_if(c, target_scale=10)["projected"]
    assert big["ar"]["step_s"] == pytest.approx(0.1)
    assert big["sd"]["step_s"] == pytest.approx(0.006 + 0.16 + 0.001)
    g4 = lm.what_if(c, gamma=4)["projected"]["sd"]
    assert g4["step_s"] == pytest.approx(4 * 0.003 + (0.010 + 4 * 0.003) + 0.001)
    assert g4["tokens_per_step"] == pytest.approx(1.9375)
    assert lm.what_if(c, exit_layer=1)["assumptions"]  # hit rate held: said so
    curve = lm.speedup_curve(c, "target_scale", [1, 10])
    assert [p["value"] for p in curve] == [1, 10] and all(p["projection"] for p in curve)
    assert curve[1]["sd"] > curve[0]["sd"]
    with pytest.raises(ValueError, match="unknown what-if"):
        lm.what_if(c, warp_drive=1)
    assert lm.parse_what_if("target_scale=10,draft_device=separate;gamma=6") == [
        {"target_scale": 10, "draft_device": "separate"}, {"gamma": 6}]


def test_what_if_budget_follows_the_hit_rate_per_budget():
    """With verdict ranks the budget buys hits: what_if(branch_budget=b) projects the step
    time at hit_rate_at(b) (and b rows); without ranks the hit rate is held, as before."""
    from dataclasses import replace
    c = hand_cal(hit_rate=0.5, hit_rates=[0.5, 0.8, 0.9], rank_steps=10, branch_budget=2,
                 branch_rows=2.0)
    for b, h in ((1, 0.5), (2, 0.8), (3, 0.9), (6, 0.9)):
        w = lm.what_if(c, branch_budget=b)
        expect = lm.step_time(replace(c, hit_rate=h, branch_budget=b, branch_rows=float(b)), "mirror")
        assert w["projected"]["mirror"]["step_s"] == pytest.approx(expect), b
        assert f"estimated at {h:.0%}" in " ".join(w["assumptions"]) and w["projection"] is True
    assert lm.what_if(c, branch_budget=3)["projected"]["mirror"]["step_s"] < lm.what_if(
        replace(c, hit_rates=None), branch_budget=3)["projected"]["mirror"]["step_s"]
    held = lm.what_if(replace(c, hit_rates=None), branch_budget=3)
    assert "held" in " ".join(held["assumptions"])
    expect = lm.step_time(replace(c, branch_budget=3, branch_rows=3.0), "mirror")  # hit rate 0.5
    assert held["projected"]["mirror"]["step_s"] == pytest.approx(expect)
    assert lm.what_if(c, hit_rate=0.1, branch_budget=3)["projected"]["mirror"]["step_s"] == pytest.approx(
        lm.step_time(replace(c, hit_rate=0.1, branch_budget=3, branch_rows=3.0), "mirror"))
    assert "gamma 2" in " ".join(lm.what_if(c, branch_budget=2, gamma=4)["assumptions"])


def int8_like_cal(**over):
    """Roughly the int8 benchmark's calibration (docs/performance.md, "Speculative decoding on this CPU"), gamma 3."""
    kw = dict(target_layers=28, exit_layer=24, gamma=3, gamma_measured=3, branch_budget=2,
              t_target_1=0.199, t_target_k=0.202, head_share=0.07, t_exit_head=0.018,
              t_accept=0.002, t_draft_token=0.079, t_fallback_token=0.079, t_extend=0.06,
              t_branch_1=0.063, t_branch_row=0.004, branch_forwards=1.2, branch_rows=2.0,
              contention=1.8, alpha_sd=0.76, alpha_mirror=0.76, hit_rate=0.6, schedule="engine")
    kw.update(over)
    return lm.Calibration(**kw)


def test_tuning_buys_branches_only_when_the_hits_pay():
    from mirror_sd.engine import tuning
    rising = [0.45, 0.6, 0.7, 0.78, 0.82, 0.84, 0.85, 0.85]
    g, b, s, table = tuning.choose(int8_like_cal(hit_rates=rising), fixed_gamma=3)
    assert b > 1 and s == max(r["speedup"] for r in table if r["speedup"] is not None)
    one = next(r["speedup"] for r in table if r["branch_budget"] == 1)
    assert s > one  # the extra rows cost less than the hits they buy
    # the same costs, no hit-rate gain: more branches only cost
    assert tuning.choose(int8_like_cal(hit_rates=[0.45] * 8), fixed_gamma=3)[1] == 1
    # no ranks at all (the old behaviour): held hit rate, budget 1
    assert tuning.choose(int8_like_cal(), fixed_gamma=3)[1] == 1
    # rows as dear as a whole forward (fp32-like): the gain does not pay for them
    dear = int8_like_cal(hit_rates=rising, t_branch_row=0.063)
    assert tuning.choose(dear, fixed_gamma=3)[1] < b


def test_calibrate_from_spans_by_hand():
    ms = 1_000_000

    def spans(*items):
        out, t = [], 0
        for lane, label, dur, detail in items:
            out.append(Span(lane, label, t, t + int(dur * ms), 0, detail))
            t += int(dur * ms) + ms
        return out

    records = [
        {"method": "ar", "stats": {"new_tokens": 3, "target_forwards": 3},
         "spans": spans(("target", "prefill", 50, ""), ("target", "decode", 10, ""), ("target", "decode", 10, ""))},
        {"method": "sd", "stats": {"new_tokens": 7, "target_forwards": 4, "steps": 4},
         "spans": spans(("draft", "draft", 6, "2 tokens, serial"), ("target", "verify_forward", 16, "3 tokens"),
                        ("verify", "accept", 1, ""))},
        {"method": "mirror", "stats": {"new_tokens": 7, "target_forwards": 4, "steps": 2, "hits": 3,
                                       "fallbacks": 1, "verdict_ranks": [0, 2, -1, 1, None]},
         "spans": spans(("target", "prefix", 9, ""), ("target", "exit_head", 3, ""), ("target", "suffix", 15, ""),
                        ("draft", "extend", 4.5, ""), ("draft", "branches", 6, "1 rows"),
                        ("draft", "branches", 7.5, "2 rows"), ("draft", "fallback", 8, ""),
                        ("verify", "accept", 1, ""))},
    ]
    c = lm.calibrate(records, target_layers=4, gamma=2)
    assert c.exit_layer == 2
    assert c.t_target_1 == pytest.approx(0.010)
    assert c.t_target_k == pytest.approx(0.016)
    assert c.t_draft_token == pytest.approx(0.003)
    assert c.t_accept == pytest.approx(0.001)
    assert c.contention == pytest.approx(24 / 16)  # Mirror's forward (exit head excluded) over SD's
    assert c.head_share == pytest.approx(0.25)  # 24 ms - 4 layers * 4.5 ms = 6 ms of head
    assert c.t_exit_head == pytest.approx(0.002)
    assert c.t_extend == pytest.approx(0.003)
    assert (c.t_branch_1, c.t_branch_row) == pytest.approx((0.004, 0.001))
    assert c.branch_rows == pytest.approx(1.5) and c.branch_forwards == pytest.approx(1.0)
    assert c.t_fallback_token == pytest.approx(0.004)
    assert c.hit_rate == pytest.approx(0.75)
    # ranks 0, 2, -1 (not scored), 1; None (no list) skipped
    assert c.rank_steps == 4
    assert c.hit_rates[:4] == pytest.approx([0.25, 0.5, 0.75, 0.75])
    assert c.hit_rate_at(1) == 0.25 and c.hit_rate_at(99) == pytest.approx(0.75)
    assert c.alpha_sd == pytest.approx(0.5, abs=1e-9)
    # the same from a flat event stream (Span ... Finish per run)
    from mirror_sd.engine.events import Finish
    events = [e for r in records for e in r["spans"] + [Finish({"method": r["method"], **r["stats"]}, [], "")]]
    assert lm.calibrate(events, target_layers=4, gamma=2).to_dict() == c.to_dict()


def test_what_if_cli(capsys, tmp_path):
    assert bench_cli.main(["--what-if", "target_scale=10;draft_device=separate"]) == 0
    out = capsys.readouterr().out
    assert "PROJECTIONS" in out and "target_scale=10" in out and "draft_device=separate" in out
    (tmp_path / "results.json").write_text(json.dumps({"latency_model": {"calibration": hand_cal().to_dict()}}))
    assert bench_cli.main(["--what-if", "gamma=4", "--calibration", str(tmp_path)]) == 0
    assert "1.94" not in capsys.readouterr().err
    assert bench_cli.main(["--what-if", "warp=1"]) == 2
    assert bench_cli.main([]) == 2  # --out missing


def test_the_latency_model_knows_the_engines_largest_budget():
    from mirror_sd.engine.settings import MAX_BRANCH_BUDGET
    assert lm.MAX_BUDGET == MAX_BRANCH_BUDGET
