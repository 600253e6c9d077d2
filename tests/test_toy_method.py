"""Adding a method is one file and one registry line: the toy method (tests/toy_method.py: a
Decoder subclass and its `Method(...)`) is picked up, with no other change, by the command
line, the app (a pane, a card, the verdict, a timeline lane) and the benchmark."""
import json

import pytest
from test_loading import make_model_dir
from toy_method import NAME, registered

import tiny
from mirror_sd import cli
from mirror_sd.models.loading import load_pair
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    return make_model_dir(root / "t", layers=3), make_model_dir(root / "d", layers=1)


def test_the_command_line_runs_the_toy(capsys, dirs):
    with registered():
        rc = cli.main(["generate", "--method", NAME, "--target", dirs[0], "--draft", dirs[1],
                       "--prompt", "hi there", "--max-new-tokens", "8", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["method"] == NAME and out["stats"]["method"] == NAME
    assert out["token_ids"] == tiny.reference_greedy(load_pair(*dirs).target, out["prompt_ids"], 8)
    assert out["stats"]["prefill_s"] is not None and out["spans"]
    with pytest.raises(SystemExit):  # unregistered again: not a choice any more
        cli.main(["generate", "--method", NAME, "--prompt", "x"])


def test_the_app_gives_the_toy_a_pane_a_card_a_verdict_and_a_lane():
    from mirror_sd.engine.registry import REGISTRY
    from ui.frames import RESULT_OUTPUTS
    from ui.layout import build_demo

    with registered():
        demo = build_demo(tiny=True)
        names = list(REGISTRY)
        assert f"pane-{NAME}" in [p.elem_id for p in demo.msd_components["panes"]]
        frames = list(demo.msd_handlers.run(prompt="def hello ( x ) :", max_new_tokens=6,
                                            methods=["ar", NAME], use_cache=False))
    final = frames[-1]
    from ui.runs import VARIANTS
    out = dict(zip(RESULT_OUTPUTS, final[1 + len(names) + len(VARIANTS):]))  # status, panes, results
    pane = final[1 + names.index(NAME)]
    assert 'data-state="done"' in pane and ">Toy<" in pane
    assert f'data-method="{NAME}"' in out["cards"] and "time to first token" in out["cards"]
    assert "Toy" in out["verdict"] and "AR" in out["verdict"]
    assert any(str(y).startswith("Toy · ") for t in out["timeline"].data if t.type == "bar" for y in t.y)


def test_the_benchmark_runs_the_toy_as_a_row(dirs, tmp_path):
    from mirror_sd.bench import cli as bench_cli
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 1, "category": "code", "turns": ["def f"]}) + "\n")
    with registered():
        rc = bench_cli.main(["--target", dirs[0], "--draft", dirs[1], "--questions", str(questions),
                             "--max-new-tokens", "6", "--methods", f"ar,{NAME}", "--out", str(tmp_path / "o"),
                             "--no-progress"])
    assert rc == 0
    row = json.loads((tmp_path / "o" / "results.json").read_text())["questions"][0]["methods"][NAME]
    assert row["error"] is None and row["identical_to_ar"] is True and row["prefill_s"] > 0
