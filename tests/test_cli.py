"""`python -m mirror_sd generate` on tiny local model folders: JSON fields, auto tuning, and
bad input as one clear line and exit status 2."""
import json

import pytest
from test_loading import make_model_dir

import tiny
from mirror_sd import cli
from mirror_sd.bench import tuning
from mirror_sd.bench import latency_model as lm
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
