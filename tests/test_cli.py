"""`python -m mirror_sd generate` on tiny local model folders: JSON fields, auto tuning, and
bad input as one clear line and exit status 2."""
import json

import pytest
from test_loading import make_model_dir

import tiny
from mirror_sd import cli
from mirror_sd.engine import tuning
from mirror_sd.latency import latency_model as lm
from mirror_sd.models.loading import load_pair
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    return make_model_dir(root / "t", layers=3), make_model_dir(root / "d", layers=1)


def generate(capsys, dirs, *extra):
    rc = cli.main(["generate", "--target", dirs[0], "--draft", dirs[1], "--prompt", "hi there",
                   "--max-new-tokens", "10", "--json", *extra])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
def test_json_output_is_the_targets_greedy_output(capsys, dirs, method):
    rc, out, _ = generate(capsys, dirs, "--method", method)
    assert rc == 0
    assert {"method", "text", "prompt_ids", "token_ids", "stats", "spans", "auto"} <= set(out)
    assert out["method"] == method and out["auto"] is None
    pair = load_pair(*dirs)
    assert out["token_ids"] == tiny.reference_greedy(pair.target, out["prompt_ids"], 10)
    assert out["stats"]["new_tokens"] == len(out["token_ids"])


def test_gamma_and_budget_auto(capsys, dirs):
    rc, out, err = generate(capsys, dirs, "--method", "mirror", "--gamma", "auto",
                            "--branch-budget", "auto")
    assert rc == 0, err
    auto = out["auto"]
    assert auto["projection"] is True and "auto: gamma" in err
    assert auto["gamma"] in tuning.GAMMAS and auto["branch_budget"] in tuning.BUDGETS
    assert len(auto["table"]) == len(tuning.GAMMAS) * len(tuning.BUDGETS)
    best = max(r["speedup"] for r in auto["table"] if r["speedup"] is not None)
    assert auto["projected_speedup"] == pytest.approx(best)
    pair = load_pair(*dirs)
    assert out["token_ids"] == tiny.reference_greedy(pair.target, out["prompt_ids"], 10)


def test_auto_gamma_only_keeps_the_budget(capsys, dirs):
    rc, out, _ = generate(capsys, dirs, "--gamma", "auto", "--branch-budget", "3")
    assert rc == 0 and out["auto"]["branch_budget"] == 3
    assert {r["branch_budget"] for r in out["auto"]["table"]} == {3}


def test_choose_picks_the_best_projection():
    """On the default pair's built-in calibration: the choice is the table's best entry, and a
    faster draft (draft_scale) never makes the projected best speedup worse."""
    cal = lm.default_calibration()
    g, b, s, table = tuning.choose(cal)
    assert s == max(r["speedup"] for r in table if r["speedup"] is not None)
    fast = lm.apply_changes(cal, draft_scale=0.25)
    assert tuning.choose(fast)[2] >= s


@pytest.mark.parametrize("extra, message", [
    (["--prompt", "   "], "prompt is empty"),
    (["--prompt", "x", "--max-new-tokens", "8", "--gamma", "99"], "gamma must be between 1 and 32"),
    (["--prompt", "x", "--precision", "int3"], "Unknown precision"),
])
def test_bad_input_is_one_line(capsys, dirs, extra, message):
    rc = cli.main(["generate", "--target", dirs[0], "--draft", dirs[1], "--json", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_gamma_must_be_a_number_or_auto(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "--prompt", "x", "--gamma", "many"])
    assert e.value.code == 2 and "integer or auto" in capsys.readouterr().err


def test_bench_gamma_auto_and_fp32_baseline(dirs, tmp_path, monkeypatch):
    """`python -m mirror_sd.bench --gamma auto --baseline-precision fp32` end to end on tiny
    folders: the choice is recorded, ar-fp32 runs next to AR at int8, and the baseline loads
    a second target only (no second draft)."""
    from mirror_sd.bench import cli as bench_cli
    from mirror_sd.models import loading
    loads = []
    real_load = loading._load_model

    def load_model(src, role, prec, *args):
        loads.append((role, prec.dtype, src.path))
        return real_load(src, role, prec, *args)

    monkeypatch.setattr(loading, "_load_model", load_model)
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question_id": i, "category": c, "turns": [t]}) + "\n"
                                 for i, (c, t) in enumerate([("code", "def f"), ("qa", "why?")])))
    rc = bench_cli.main(["--target", dirs[0], "--draft", dirs[1], "--questions", str(questions),
                     "--max-new-tokens", "4", "--methods", "ar,mirror", "--gamma", "auto",
                     "--precision", "int8", "--baseline-precision", "fp32", "--out", str(tmp_path / "o"),
                     "--no-warmup", "--no-progress"])
    assert rc == 0
    assert [(role, path) for role, _, path in loads] == [("target", dirs[0]), ("draft", dirs[1]),
                                                         ("target", dirs[0])]
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    meta = results["meta"]
    assert meta["auto"]["gamma"] == meta["settings"]["gamma"] and meta["auto"]["projection"]
    assert meta["methods"] == ["ar", "mirror", "ar-fp32"] and meta["precision"] == "int8"
    assert all(q["methods"]["ar-fp32"]["new_tokens"] > 0 for q in results["questions"])
    md = (tmp_path / "o" / "summary.md").read_text()
    assert "auto: gamma" in md and "ar-fp32 = AR with the target at fp32" in md


BAD_BEFORE_LOADING = [
    (["--gamma", "0"], "gamma must be between 1 and 32"),
    (["--temperature", "-1"], "temperature must be between 0 and 10"),
    (["--top-p", "0"], "top-p must be in (0, 1]"),
    (["--max-new-tokens", "0"], "max new tokens must be at least 1"),
    (["--kappa", "0"], "kappa must be between 1 and 64"),
    (["--window", "adaptive", "--window-threshold", "1.5"], "window threshold must be in [0, 1)"),
    (["--window", "adaptive", "--window-min", "5", "--window-max", "3"], "window max must be between"),
]


@pytest.fixture
def no_loading(monkeypatch):
    """load_pair and load_target raise if called: a check must fail before any model loads."""
    from mirror_sd.models import loading

    def refuse(*args, **kwargs):
        raise AssertionError("the models were loaded before the settings were checked")

    monkeypatch.setattr(loading, "load_pair", refuse)
    monkeypatch.setattr(loading, "load_target", refuse)


@pytest.mark.parametrize("extra, message", BAD_BEFORE_LOADING)
def test_generate_checks_settings_before_loading(capsys, no_loading, extra, message):
    rc = cli.main(["generate", "--method", "mirror", "--prompt", "x", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize("extra, message", BAD_BEFORE_LOADING)
def test_bench_checks_settings_before_loading(capsys, no_loading, tmp_path, extra, message):
    from mirror_sd.bench import cli as bench_cli
    rc = bench_cli.main(["--methods", "ar,mirror", "--out", str(tmp_path), "--no-progress", *extra])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err


def test_settings_are_checked_per_method(capsys, no_loading):
    """AR reads neither gamma nor kappa: a bad one is no reason to refuse an AR run (the run
    then reaches the loader, which refuses here); Mirror-SD refuses it before loading."""
    with pytest.raises(AssertionError, match="models were loaded"):
        cli.main(["generate", "--method", "ar", "--prompt", "x", "--gamma", "0", "--kappa", "0"])
    assert cli.main(["generate", "--method", "mirror", "--prompt", "x", "--kappa", "0"]) == 2
    assert "kappa must be between" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
def test_generate_warms_each_model_it_uses_before_the_timed_run(capsys, dirs, monkeypatch, method):
    """One untimed warm-up run of the method (target, and draft when the method drafts) comes
    before the timed run: the first forward after the load is in no timed figure."""
    from mirror_sd.engine import warmup
    from mirror_sd.engine.decoder import Decoder
    order, warming = [], []
    real_warm_up, real_generate = warmup.warm_up, Decoder.generate

    def warm_up(pair, methods, settings, prompt_ids, **kw):
        forwards = {"target": 0, "draft": 0}
        hooks = [getattr(pair, role).register_forward_hook(
            lambda *a, role=role: forwards.__setitem__(role, forwards[role] + 1)) for role in forwards]
        warming.append(True)
        try:
            seconds = real_warm_up(pair, methods, settings, prompt_ids, **kw)
        finally:
            warming.pop()
            for h in hooks:
                h.remove()
        order.append(("warm-up", tuple(methods), forwards["target"] > 0, forwards["draft"] > 0))
        return seconds

    def decoder_generate(self, *args, **kw):
        if not warming:
            order.append(("decode",))
        return real_generate(self, *args, **kw)

    monkeypatch.setattr(warmup, "warm_up", warm_up)
    monkeypatch.setattr(Decoder, "generate", decoder_generate)
    rc, out, _ = generate(capsys, dirs, "--method", method)
    assert rc == 0
    assert order == [("warm-up", (method,), True, method != "ar"), ("decode",)]


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
def test_json_stats_split_prefill_and_decode(capsys, dirs, method):
    """prefill_s runs from the start to the first commit, decode_tokens_per_s counts the tokens
    after it over the time after it; both from the run's own clock, and the prompt's prefill
    span lies inside prefill_s."""
    rc, out, _ = generate(capsys, dirs, "--method", method)
    st = out["stats"]
    assert rc == 0 and st["new_tokens"] == 10
    assert 0 < st["prefill_s"] < st["wall_s"]
    assert st["prefill_s"] + st["decode_s"] == pytest.approx(st["wall_s"], rel=1e-6)
    assert 0 < st["decode_tokens"] < st["new_tokens"]
    assert st["decode_tokens_per_s"] == pytest.approx(st["decode_tokens"] / st["decode_s"])
    prefill = [s for s in out["spans"] if s["label"] == "prefill"]
    assert prefill and all(s["end_ms"] - s["start_ms"] <= st["prefill_s"] * 1e3 for s in prefill)


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
@pytest.mark.parametrize("window", ["fixed", "adaptive"])
def test_json_stats_give_each_window_and_why_it_stopped(capsys, dirs, method, window):
    """window_lengths: one per step; window_stops: reason -> count over the same windows;
    adaptive windows keep the target's greedy output."""
    rc, out, err = generate(capsys, dirs, "--method", method, "--gamma", "3", "--window", window,
                            "--window-threshold", "0.05")
    assert rc == 0, err
    st = out["stats"]
    lengths, stops = st["window_lengths"], st["window_stops"]
    assert out["token_ids"] == tiny.reference_greedy(load_pair(*dirs).target, out["prompt_ids"], 10)
    if method == "ar":
        assert lengths == [] and stops == {}
        return
    assert len(lengths) == st["steps"] == st["target_forwards"] and sum(lengths) == st["drafted"]
    assert sum(stops.values()) == len(lengths)
    assert set(stops) <= {"gamma", "confidence", "eos", "room"}
    if window == "fixed":
        assert set(lengths) == {3} and set(stops) == {"gamma"}
    else:
        assert all(1 <= n <= 12 for n in lengths)


def test_a_cross_tokenizer_pair_reports_its_shared_vocabulary(capsys, monkeypatch):
    """A draft with another tokenizer: the pair check on stderr, the JSON `pair` field, and the
    target's own greedy output."""
    from mirror_sd.models import loading
    from mirror_sd.models.tiny import cross_pair
    pair = cross_pair(0, "twin")
    monkeypatch.setattr(loading, "load_pair", lambda *a, **k: pair)
    rc = cli.main(["generate", "--method", "sd", "--prompt", "def add(a, b):", "--max-new-tokens", "8", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    data = json.loads(out.out)
    assert data["pair"]["cross_tokenizer"] and data["pair"]["shared_tokens"] == pair.bridge.n_shared
    assert data["pair"]["output_coverage"] == pair.bridge.coverage(data["token_ids"])
    assert "pair: Cross-tokenizer pair" in out.err and "Prompt: the draft reads" in out.err
    reference = tiny.reference_greedy(pair.target, data["prompt_ids"], 8)
    assert data["token_ids"] == reference[:len(data["token_ids"])]
    assert len(data["token_ids"]) == 8 or data["token_ids"][-1] in pair.eos_token_ids
