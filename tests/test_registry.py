"""The registry is the one method table: a method registered there is run by the benchmark
(its --methods accept it, its results have a row for it) and checked by its own settings."""
import json

import pytest
from test_loading import make_model_dir
from toy_method import NAME, TOY, registered

from mirror_sd.engine import registry
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_register_adds_the_method_everywhere_and_unregister_takes_it_out():
    before = list(registry.NAMES)
    with registered():
        assert registry.NAMES == before + [NAME]  # last in display order
        assert registry.REGISTRY[NAME] is TOY and registry.METHODS[NAME] is TOY.decoder
        assert registry.LABELS[NAME] == "Toy" and registry.COLOURS[NAME] == TOY.colour
        assert not TOY.drafts and TOY.uses == registry.REGISTRY["ar"].uses
        Settings(gamma=0).check(NAME)  # it reads no gamma
        with pytest.raises(MirrorSDError, match="already registered"):
            registry.register(TOY)
    assert registry.NAMES == before and NAME not in registry.LABELS
    with pytest.raises(MirrorSDError, match="Unknown method"):
        Settings().check(NAME)


def test_a_method_must_read_settings_that_exist():
    bad = registry.Method("odd", TOY.decoder, "Odd", "Odd", "#000000", ("gamma", "no_such_setting"))
    with pytest.raises(MirrorSDError, match="no_such_setting"):
        registry.register(bad)
    assert "odd" not in registry.REGISTRY


def test_the_benchmark_runs_a_registered_method_as_a_row(tmp_path):
    from mirror_sd.bench import cli as bench_cli
    target, draft = make_model_dir(tmp_path / "t", layers=2), make_model_dir(tmp_path / "d", layers=1)
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "code", "turns": ["def f"]}) + "\n")
    out = tmp_path / "o"
    with registered():
        rc = bench_cli.main(["--target", target, "--draft", draft, "--questions", str(questions),
                             "--max-new-tokens", "6", "--methods", f"ar,sd,{NAME}", "--out", str(out),
                             "--no-progress"])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    assert results["meta"]["methods"] == ["ar", "sd", NAME]
    row = results["questions"][0]["methods"][NAME]
    assert row["error"] is None and row["new_tokens"] > 0
    assert row["identical_to_ar"] is True  # greedy: the toy is the target alone
    assert row["target_forwards"] == row["new_tokens"]  # one forward per token, as AR
    assert "| Toy |" in (out / "summary.md").read_text()


def test_the_benchmark_refuses_a_method_that_is_not_registered(tmp_path, capsys):
    from mirror_sd.bench import cli as bench_cli
    rc = bench_cli.main(["--methods", f"ar,{NAME}", "--out", str(tmp_path), "--no-progress"])
    assert rc == 2 and f"Unknown method '{NAME}'" in capsys.readouterr().err


def test_method_facts_are_registry_attributes():
    assert registry.baseline() == "ar"
    assert registry.having(modelled=True) == ("ar", "sd", "mirror")
    assert registry.having(early_exit=True) == ("mirror",)
    assert registry.having(drafts=True, early_exit=False)[:1] == ("sd",)
    with registered():  # a toy method: no fact unless it says so
        assert NAME not in registry.having(modelled=True) + registry.having(early_exit=True)
        assert NAME in registry.having(drafts=False, baseline=False)


def test_the_settings_schema_is_settings():
    """The benchmark's `:key=value` settings and the app's inputs come from `Settings`."""
    from dataclasses import fields

    from mirror_sd.bench.runners import TUNABLE, variant
    from mirror_sd.engine.settings import DEFAULTS, DRAFTING_FIELDS, MIRROR_FIELDS
    from mirror_sd.engine.windows import DEFAULT_PROPOSER, DEFAULT_WINDOW
    from ui.frames import SETTING_INPUTS, RunInputs
    assert list(TUNABLE) == list(DRAFTING_FIELDS + MIRROR_FIELDS)
    assert TUNABLE["exit_layer"] is int and TUNABLE["window_threshold"] is float and TUNABLE["exit_lens"] is str
    assert variant("mirror:window_threshold=0.25:exit_layer=3") == ("mirror", {"window_threshold": 0.25,
                                                                                "exit_layer": 3})
    inputs = RunInputs()
    for name in SETTING_INPUTS:
        if name not in ("max_new_tokens", "exit_layer", "proposer"):  # the page's shorter run,
            assert getattr(inputs, name) == getattr(DEFAULTS, name), name  # 0 = automatic
    assert inputs.proposer == DEFAULT_PROPOSER  # the app's default proposer, as the CLI's
    assert set(SETTING_INPUTS) <= {f.name for f in fields(Settings)}
    assert inputs.settings() == Settings(max_new_tokens=inputs.max_new_tokens, window=DEFAULT_WINDOW,
                                         proposer=DEFAULT_PROPOSER)
    custom = RunInputs(gamma=6.0, exit_layer=2, streams="", temperature="0.5").settings()
    assert (custom.gamma, custom.exit_layer, custom.streams, custom.temperature) == (6, 2, "off", 0.5)
