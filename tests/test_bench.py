"""The benchmark harness end to end on tiny in-memory models, the latency model against
hand-computed cases, the rotating order and the mismatch check. No downloads, a few seconds."""
import copy
import json
from pathlib import Path

import pytest
import torch
from tiny import tiny_tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

from mirror_sd.bench import harness as bench
from mirror_sd.bench import report, runners, summary
from mirror_sd.latency import latency_model as lm
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError
from mirror_sd.engine.events import Span
from mirror_sd.models.pair import ModelPair
from mirror_sd.questions import BUILTIN_QUESTIONS, load_questions, per_category

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
    for m, row in rows.items():  # each figure is a number, or missing with its reason
        assert set(row) - {"why_not"} | set(row["why_not"]) == set(summary.FIGURES), m
        assert all(isinstance(v, (int, float)) for k, v in row.items() if k != "why_not"), m
        assert all(isinstance(why, str) and why for why in row["why_not"].values()), m
    for m in ("ar", "sd", "mirror"):
        assert rows[m]["measured_step_s"] > 0, m
        # a prediction needs the calibration's terms, which this run's spans may lack
        assert rows[m].get("predicted_step_s", 1) > 0, m
        assert ("error" in rows[m]) == ("predicted_step_s" in rows[m]), m
    assert "predicted_step_s" not in rows["hf-assisted"]
    assert "does not model" in rows["hf-assisted"]["why_not"]["predicted_step_s"]
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


def test_rerender_reproduces_the_report(full_run):
    results, out = full_run
    before = json.loads((out / "results.json").read_text())
    again = bench.rerender(out)
    assert again["summary"] == json.loads(json.dumps(before["summary"]))
    for m in before["breakdown"]:
        for k, v in before["breakdown"][m]["seconds"].items():
            assert again["breakdown"][m]["seconds"][k] == pytest.approx(v, abs=1e-4)
    for m, row in before["latency_model"]["predicted_vs_measured"].items():
        redone = again["latency_model"]["predicted_vs_measured"][m]
        # the same figures are computed, and the same ones are missing for the same reasons
        assert set(redone) == set(row) and redone["why_not"] == row["why_not"], m
        for k, v in row.items():
            if k == "why_not":
                continue
            # results.json keeps span times to the microsecond: a relative error (a difference
            # of two ratios near 1) moves with that rounding, by a few 1e-4 on a tiny model's
            # sub-millisecond spans
            tol = 1e-3 if k == "error" else 1e-6
            assert redone[k] == pytest.approx(v, rel=1e-3, abs=tol), (m, k)


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
    from mirror_sd.engine import tuning
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
            # every runner's figures by the same rule, transformers' assisted generation too
            # (its commits timed by a streamer)
            tokens, secs = sum(t["decode_tokens"] for t in turns), sum(t["decode_s"] for t in turns)
            assert r["decode_tokens_per_s"] == pytest.approx(tokens / secs)
    overall = results["summary"]["overall"]
    assert overall["ar"]["prefill_s_mean"] > 0 and overall["mirror"]["decode_tokens_per_s"] > 0
    md = (out / "summary.md").read_text()
    assert "| prefill s (mean) | decode tok/s |" in md


def test_the_report_gives_the_exit_checks_hit_rate_beside_the_lanes_own():
    from mirror_sd.bench.report import _hits
    assert _hits({"hit_rate": 0.5, "checked_steps": 0, "checked_hit_rate": None}) == "50%"
    got = _hits({"hit_rate": 0.78, "checked_steps": 99, "checked_hit_rate": 67 / 99})
    assert got.startswith("78%") and "68% of 99" in got


def test_hf_assisted_says_plainly_when_transformers_cannot_pair_two_tokenizers():
    """transformers tells a cross-tokenizer assistant by its vocabulary size: two tokenizers of
    one size cannot run its universal assisted generation, and the peer says so in words
    instead of raising transformers' own error."""
    from mirror_sd.bench.runners import hf_assisted_runner
    from mirror_sd.engine.settings import Settings
    from mirror_sd.models.tiny import stand_in
    pair = stand_in("tiny-cross")
    assert pair.target.config.vocab_size == pair.draft.config.vocab_size  # the tiny cross pair: one size
    run = hf_assisted_runner()(pair, pair.encode_prompt("hello", chat=False), Settings(max_new_tokens=4, gamma=2))
    assert run.error.startswith("not run: transformers tells a draft with another tokenizer") and not run.token_ids
