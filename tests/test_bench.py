"""The benchmark harness end to end on tiny in-memory models, the latency model against
hand-computed cases, the rotating order and the mismatch check. No downloads, a few seconds."""
import copy
import json
from pathlib import Path

import pytest
import torch
from tiny import tiny_tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

from mirror_sd.bench import cli as bench_cli
from mirror_sd.bench import harness as bench
from mirror_sd.bench import report, runners, summary
from mirror_sd.bench import latency_model as lm
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError
from mirror_sd.engine.events import Span
from mirror_sd.models.pair import ModelPair
from mirror_sd.bench.questions import BUILTIN_QUESTIONS, load_questions, per_category

SAMPLE = Path(__file__).parent / "data" / "spec_bench_sample.jsonl"
NEW = 12


# ---------------------------------------------------------------------------------------------
# a tiny pair built in code: byte-level tokenizer with a chat template, float64 Qwen2 models




def tiny_pair(seed=0, noise=0.03):
    config = Qwen2Config(vocab_size=260, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=False, eos_token_id=258, bos_token_id=None,
                         pad_token_id=256, initializer_range=0.2)
    torch.manual_seed(seed)
    target = Qwen2ForCausalLM(config).double().eval()  # float64: no near-ties between methods
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * noise * p.abs().mean())
    for m in (target, draft):
        gc = m.generation_config
        gc.do_sample, gc.temperature, gc.top_k, gc.top_p = False, None, None, None
    return ModelPair(target, draft, tiny_tokenizer(), target_name="tiny-target",
                     draft_name="tiny-draft")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny forwards on a shared 2-core machine: threads only fight
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair()


@pytest.fixture(scope="module")
def full_run(pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    results = bench.run_benchmark(pair, load_questions(SAMPLE), ["ar", "sd", "mirror", "hf-assisted"],
                                  Settings(max_new_tokens=NEW, gamma=3, branch_budget=2),
                                  out_dir=out, progress=False,
                                  meta={"command": "pytest", "questions_file": str(SAMPLE)})
    return results, out


# ---------------------------------------------------------------------------------------------
# the harness end to end


def test_outputs_written(full_run):
    results, out = full_run
    for name in ("results.json", "summary.md", "speedup.html", "time_breakdown.html",
                 "latency_model.html", "plotly.min.js"):
        assert (out / name).is_file(), name
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["meta"]["methods"] == ["ar", "sd", "mirror", "hf-assisted"]
    assert [q["question_id"] for q in on_disk["questions"]] == [81, 101, 201, 301, 401, 501]
    html = (out / "speedup.html").read_text()
    assert "plotly.min.js" in html and "Speedup over AR" in html


def test_per_question_fields(full_run):
    results, _ = full_run
    keys = {"new_tokens", "wall_s", "tokens_per_s", "target_forwards", "mean_accepted", "hit_rate",
            "draft_hidden_fraction", "identical_to_ar"}
    for q in results["questions"]:
        for m, r in q["methods"].items():
            assert keys <= set(r), (m, keys - set(r))
            assert r["error"] is None, (q["question_id"], m, r["error"])
            assert r["new_tokens"] > 0 and r["wall_s"] > 0 and r["tokens_per_s"] > 0
            assert r["identical_to_ar"] is True, (q["question_id"], m, r["first_mismatch"])
        ms = q["methods"]
        assert ms["ar"]["mean_accepted"] == 1.0
        assert ms["ar"]["hit_rate"] is None and ms["sd"]["hit_rate"] is None
        assert ms["mirror"]["hit_rate"] is not None
        assert ms["sd"]["mean_accepted"] > 1.0  # the draft is the target plus a little noise
        hf = ms["hf-assisted"]
        assert hf["target_forwards"] > 0 and hf["drafted"] is None and hf["hit_rate"] is None


def test_multi_turn_feeds_answers_back(full_run, pair):
    q = next(q for q in full_run[0]["questions"] if q["question_id"] == 81)
    assert q["turns"] == 2
    for m, r in q["methods"].items():
        assert len(r["turns"]) == 2
        first, second = r["turns"]
        # the second prompt holds the first exchange, the first answer and the new question
        answer = len(pair.tokenizer(bench._answer_text(pair, first["token_ids"]))["input_ids"])
        assert second["prompt_tokens"] >= first["prompt_tokens"] + answer
    assert q["methods"]["ar"]["new_tokens"] == sum(t["new_tokens"] for t in q["methods"]["ar"]["turns"])


def test_order_rotates_per_question(full_run):
    methods = ["ar", "sd", "mirror", "hf-assisted"]
    orders = [q["order"] for q in full_run[0]["questions"]]
    assert orders == [bench.rotated_order(methods, i) for i in range(6)]
    assert len({tuple(o) for o in orders[:4]}) == 4  # every method leads once in 4 questions


def test_summary_and_breakdown(full_run):
    results, out = full_run
    s = results["summary"]
    assert set(s["by_category"]) == {"writing", "coding", "translation", "summarization", "qa",
                                     "math_reasoning"}
    ov = s["overall"]
    assert ov["ar"]["speedup_median"] == pytest.approx(1.0)
    for m in ("sd", "mirror", "hf-assisted"):
        assert ov[m]["speedup_median"] > 0 and ov[m]["mismatches"] == 0 and ov[m]["checked"] == 6
    assert ov["mirror"]["hit_rate"] is not None
    for m, b in results["breakdown"].items():
        wall = sum(q["methods"][m]["wall_s"] for q in results["questions"])
        parts = sum(v for k, v in b["seconds"].items() if k != summary.HIDDEN)
        assert parts == pytest.approx(wall, rel=1e-6)
    assert results["breakdown"]["mirror"]["seconds"]["target suffix"] > 0
    assert results["breakdown"]["sd"]["seconds"]["draft (exposed)"] > 0
    md = (out / "summary.md").read_text()
    for text in ("## Speedup over AR", "| **overall** |", "Mirror-SD", "HF assisted",
                 "predicted vs measured", "What if", "0/6", "Command: `pytest`"):
        assert text in md, text


def test_latency_report(full_run):
    lat = full_run[0]["latency_model"]
    rows = lat["predicted_vs_measured"]
    for m in ("ar", "sd", "mirror"):
        assert rows[m]["measured_step_s"] > 0 and rows[m]["predicted_step_s"] > 0, m
        assert rows[m]["error"] is not None
    assert rows["hf-assisted"]["predicted_step_s"] is None
    cal = lm.Calibration.from_dict(lat["calibration"])
    assert cal.target_layers == 4 and cal.exit_layer == 2 and cal.gamma == 3
    assert cal.hit_rate is not None and cal.t_branch_1 is not None
    assert lat["what_if"] and all("mirror" in w for w in lat["what_if"])
    # the verdict ranks of every Mirror step: at the run's own budget (2) the estimate is the
    # measured hit rate, since a step hits exactly when its verdict ranks below the budget
    mirror_steps = sum(t["stats"]["hits"] + t["stats"]["fallbacks"] for q in full_run[0]["questions"]
                       for t in q["methods"]["mirror"]["turns"])
    assert cal.rank_steps == mirror_steps > 0
    assert cal.hit_rate_at(2) == pytest.approx(cal.hit_rate)
    assert cal.hit_rates == sorted(cal.hit_rates) and len(cal.hit_rates) == lm.MAX_BUDGET


# ---------------------------------------------------------------------------------------------
# fairness: rotating order and the mismatch check, with injected runners


def test_rotated_order():
    m = ["ar", "sd", "mirror"]
    assert bench.rotated_order(m, 0) == ["ar", "sd", "mirror"]
    assert bench.rotated_order(m, 1) == ["sd", "mirror", "ar"]
    assert bench.rotated_order(m, 2) == ["mirror", "ar", "sd"]
    assert bench.rotated_order(m, 3) == m


def test_first_mismatch():
    assert bench.first_mismatch([[1, 2, 3]], [[1, 2, 3]]) is None
    assert bench.first_mismatch([[1, 2, 3]], [[1, 9, 3]]) == {"position": 1, "turn": 0, "position_in_turn": 1}
    assert bench.first_mismatch([[1, 2], [5, 6, 7]], [[1, 2], [5, 6, 8]])["position"] == 4
    assert bench.first_mismatch([[1, 2, 3]], [[1, 2]]) == {"position": 2, "turn": 0, "position_in_turn": 2}
    assert bench.first_mismatch([[1], [2]], [[1]])["turn"] == 1


def test_mismatch_reported_and_order_followed(pair, tmp_path):
    calls = []
    ar = runners.engine_runner("ar")

    def logged(name, flip_at=None):
        def run(p, ids, settings):
            calls.append(name)
            r = ar(p, ids, settings)
            if flip_at is not None:
                r.token_ids = list(r.token_ids)
                r.token_ids[flip_at] = (r.token_ids[flip_at] + 1) % 256
            return r
        return run

    questions = per_category(load_questions(SAMPLE), 1)[1:4]  # three single-turn questions
    results = bench.run_benchmark(
        pair, questions, ["ar", "same", "bad"], Settings(max_new_tokens=8), out_dir=tmp_path,
        runners={"ar": logged("ar"), "same": logged("same"), "bad": logged("bad", flip_at=3)},
        warmup=False, progress=False)
    assert calls == ["ar", "same", "bad", "same", "bad", "ar", "bad", "ar", "same"]
    for q in results["questions"]:
        assert q["methods"]["same"]["identical_to_ar"] is True
        bad = q["methods"]["bad"]
        assert bad["identical_to_ar"] is False
        assert bad["first_mismatch"] == {"position": 3, "turn": 0, "position_in_turn": 3}
    ov = results["summary"]["overall"]["bad"]
    assert ov["mismatches"] == 3 and ov["checked"] == 3
    assert ov["first_mismatch"]["question_id"] == questions[0].question_id
    md = (tmp_path / "summary.md").read_text()
    assert f"3/3 (first: q {questions[0].question_id} token 3)" in md


def test_sampling_runs_are_not_checked(pair):
    results = bench.run_benchmark(pair, load_questions(SAMPLE)[1:2], ["ar", "sd"],
                                  Settings(max_new_tokens=6, temperature=1.0), warmup=False,
                                  progress=False)
    assert results["questions"][0]["methods"]["sd"]["identical_to_ar"] is None
    assert results["summary"]["overall"]["sd"]["checked"] == 0


def test_errors_are_recorded_not_raised(pair):
    def broken(p, ids, settings):
        raise MirrorSDError("lane exploded")

    results = bench.run_benchmark(pair, load_questions(SAMPLE)[1:2], ["ar", "broken"],
                                  Settings(max_new_tokens=4), runners={"broken": broken},
                                  warmup=False, progress=False)
    r = results["questions"][0]["methods"]["broken"]
    assert r["error"] == "lane exploded"
    assert results["summary"]["overall"]["broken"]["errors"] == 1
    with pytest.raises(MirrorSDError, match="Unknown method"):
        bench.run_benchmark(pair, load_questions(SAMPLE)[:1], ["nope"], progress=False)


def test_time_breakdown_by_hand():
    ms = 1_000_000
    spans = [Span("target", "verify_forward", 0, 10 * ms), Span("draft", "branches", 5 * ms, 15 * ms),
             Span("verify", "accept", 10 * ms, 12 * ms)]
    b = summary.time_breakdown(spans, 0, 20 * ms)
    assert b["target forward"] == pytest.approx(0.010)
    assert b["verify"] == pytest.approx(0.002)
    assert b["draft (exposed)"] == pytest.approx(0.003)
    assert b["overhead"] == pytest.approx(0.005)
    assert b[summary.HIDDEN] == pytest.approx(0.007)


# ---------------------------------------------------------------------------------------------
# questions


def test_questions(tmp_path):
    builtin = load_questions()
    assert BUILTIN_QUESTIONS.name == "questions.jsonl"
    cats = {q.category for q in builtin}
    assert {"coding", "math_reasoning", "summarization", "translation", "qa", "writing"} <= cats
    assert any(len(q.turns) > 1 for q in builtin)
    assert len(per_category(builtin, 2)) == 2 * len(cats)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa"}\n')
    with pytest.raises(MirrorSDError, match="line 1: missing field"):
        load_questions(bad)
    bad.write_text('{"question_id": 1, "category": "qa", "turns": []}\n')
    with pytest.raises(MirrorSDError, match="turns"):
        load_questions(bad)


# ---------------------------------------------------------------------------------------------
# the latency model against hand-computed cases


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
    from mirror_sd.bench import tuning
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


def test_rerender_reproduces_the_report(full_run):
    results, out = full_run
    before = json.loads((out / "results.json").read_text())
    again = bench.rerender(out)
    assert again["summary"] == json.loads(json.dumps(before["summary"]))
    for m in before["breakdown"]:
        for k, v in before["breakdown"][m]["seconds"].items():
            assert again["breakdown"][m]["seconds"][k] == pytest.approx(v, abs=1e-4)
    for m, row in before["latency_model"]["predicted_vs_measured"].items():
        for k, v in row.items():
            # results.json keeps span times to the microsecond: a relative error (a difference
            # of two ratios near 1) moves by up to about 1e-4 with that rounding
            tol = 1e-4 if k == "error" else 1e-6
            assert again["latency_model"]["predicted_vs_measured"][m][k] == pytest.approx(v, rel=1e-3, abs=tol), (m, k)


def test_resume_keeps_finished_questions(pair, tmp_path):
    calls = []
    ar = runners.engine_runner("ar")

    def logged(p, ids, settings):
        calls.append(len(ids))
        return ar(p, ids, settings)

    questions = load_questions(SAMPLE)[1:3]
    kw = dict(runners={"ar": logged}, warmup=False, progress=False, out_dir=tmp_path)
    first = bench.run_benchmark(pair, questions, ["ar"], Settings(max_new_tokens=4), **kw)
    assert len(calls) == 2 and not (tmp_path / report.PARTIAL).exists()
    # as if killed after the first question: only its entry is in the partial file
    (tmp_path / report.PARTIAL).write_text(json.dumps(first["questions"][0]) + "\n")
    again = bench.run_benchmark(pair, questions, ["ar"], Settings(max_new_tokens=4), resume=True, **kw)
    assert len(calls) == 3  # only the second question ran again
    assert [q["question_id"] for q in again["questions"]] == [q.question_id for q in questions]
    assert again["questions"][0] == json.loads(json.dumps(first["questions"][0]))
    assert again["meta"]["resumed_questions"] == [questions[0].question_id]
    assert "Resumed run" in (tmp_path / "summary.md").read_text()


def test_baseline_precision_method(pair, tmp_path):
    """ar-int8 runs AR on another copy of the target; its tokens are compared with AR's, and
    its steps count as AR steps in the latency table."""
    import copy

    from mirror_sd.cpu import linears as cpu_kernels
    from dataclasses import replace
    other = replace(pair, target=cpu_kernels.row_int8(copy.deepcopy(pair.target)))
    name = runners.baseline_name("int8")
    questions = load_questions(SAMPLE)[1:3]
    results = bench.run_benchmark(pair, questions, ["ar", name], Settings(max_new_tokens=8),
                                  runners={name: runners.baseline_runner(other, name)},
                                  out_dir=tmp_path, warmup=False, progress=False,
                                  meta={"run_notes": ["a note for the summary"]})
    for q in results["questions"]:
        rec = q["methods"][name]
        assert rec["new_tokens"] == 8 and rec["identical_to_ar"] is not None
    assert results["latency_model"]["predicted_vs_measured"][name]["measured_step_s"] > 0
    md = (tmp_path / "summary.md").read_text()
    assert "| ar-int8 |" in md and "a note for the summary" in md


def test_variant_methods_change_one_setting(pair):
    """`mirror-nolens` is Mirror-SD with the exit lens off, run by the same harness."""
    from mirror_sd.engine.settings import Settings
    ids = [5, 17, 42, 99, 7, 3]
    settings = Settings(max_new_tokens=6, gamma=2)
    plain = runners.engine_runner("mirror")(pair, ids, settings)
    nolens = runners.engine_runner("mirror-nolens")(pair, ids, settings)
    assert nolens.stats["exit_lens_note"] == "exit lens off: raw early exit"
    assert plain.stats["exit_lens_note"] != nolens.stats["exit_lens_note"]
    assert nolens.token_ids == plain.token_ids  # the lens only decides what is precomputed
    assert settings.exit_lens == "auto"  # the caller's settings are not touched


def test_method_names_can_change_settings(pair):
    base, changes = runners.variant("mirror-nolens:exit_layer=2:branch_budget=3")
    assert (base, changes) == ("mirror", {"exit_lens": "off", "exit_layer": 2, "branch_budget": 3})
    for bad in ("mirror:exit_layer", "mirror:temperature=1", "mirror:gamma=x", "medusa"):
        with pytest.raises(MirrorSDError):
            runners.variant(bad)
    from mirror_sd.engine.settings import Settings
    run = runners.engine_runner("mirror:exit_layer=1")(pair, [5, 17, 42, 99], Settings(max_new_tokens=4, gamma=2))
    assert run.error is None and run.stats["exit_layer"] == 1


def test_the_tuning_probe_splits_at_the_layer_mirror_runs_at(pair, tmp_path):
    """With an exit lens that covers layer 3 only, Mirror-SD runs at 3 (not the N/2 = 2
    default), and the auto-tuning probe's calibration splits prefix/suffix at that layer."""
    from mirror_sd.bench import tuning
    from mirror_sd.engine.mirror.decoder import MirrorSpeculative
    from mirror_sd.proposals.exit_lens import ExitLens, target_meta

    lens = ExitLens(pair.target.config.hidden_size, [3], rank=2,
                    meta={**target_meta(pair.target), "report": {"layers": {"3": {"lens_top8": 0.9}}}})
    path = tmp_path / "exit_lens_tiny.safetensors"
    lens.save(path)
    settings = Settings(max_new_tokens=6, gamma=2, exit_lens=str(path))
    ids = pair.encode_prompt("def f")
    fin = list(MirrorSpeculative(pair, settings).generate(ids))[-1]
    assert pair.target_layers // 2 == 2 and fin.stats["exit_layer"] == 3
    assert fin.stats["exit_lens"] == str(path)
    cal = tuning.probe(pair, ids, settings, tokens=6)
    assert cal.exit_layer == 3


def test_prefill_and_decode_speed_per_method(full_run):
    """Per question and method: prefill_s sums the turns' prefills, decode_tokens_per_s pools
    their decode tokens and time; the report shows both per method."""
    results, out = full_run
    for q in results["questions"]:
        for m, r in q["methods"].items():
            turns = [t["stats"] for t in r["turns"]]
            assert r["prefill_s"] == pytest.approx(sum(t["prefill_s"] for t in turns))
            assert 0 < r["prefill_s"] < r["wall_s"]
            if m == "hf-assisted":  # its tokens per forward are not observable
                assert r["decode_tokens_per_s"] is None
                continue
            tokens, secs = sum(t["decode_tokens"] for t in turns), sum(t["decode_s"] for t in turns)
            assert r["decode_tokens_per_s"] == pytest.approx(tokens / secs)
    overall = results["summary"]["overall"]
    assert overall["ar"]["prefill_s_mean"] > 0 and overall["mirror"]["decode_tokens_per_s"] > 0
    md = (out / "summary.md").read_text()
    assert "| prefill s (mean) | decode tok/s |" in md


def test_the_latency_model_knows_the_engines_largest_budget():
    from mirror_sd.engine.settings import MAX_BRANCH_BUDGET
    assert lm.MAX_BUDGET == MAX_BRANCH_BUDGET

