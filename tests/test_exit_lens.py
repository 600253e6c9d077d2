"""The trained exit lens on tiny float64 models: shapes, training, the file round trip, which
lens a run uses (metadata must match), the exit-layer rule, and losslessness with the lens on
(greedy output is transformers' own generate(), token for token)."""
import pytest
import torch

from mirror_sd.proposals import exit_lens as el
from mirror_sd.training import exit_lens as tel
from mirror_sd.engine.mirror.early_exit import exit_head
from mirror_sd.models.pair import exit_parts
from mirror_sd.engine.events import DraftBranch, EarlyExit, Error, Notice
from mirror_sd.engine.mirror.decoder import MirrorSpeculative

import tiny
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LAYERS = [1, 2, 3]
RANK = 8
N_NEW = 16


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


def toy_corpus(n_docs=24, length=40):
    """(held_out, ids, start): random token documents, every 6th held out."""
    return [(i % 6 == 0, tiny.prompt(100 + i, length), 1) for i in range(n_docs)]


@pytest.fixture(scope="module")
def trained():
    """A lens trained on target seed 0 (float64), with its metadata and held-out report."""
    model = tiny.cached_pair("perturbed", 0).target
    train, held = tel.collect(model, toy_corpus(), LAYERS)
    _, norm, head = exit_parts(model)
    lens = el.ExitLens(model.config.hidden_size, LAYERS, RANK).double()
    losses = {L: tel.fit_layer(lens, L, train, norm, head.weight.detach(), steps=60, batch=64, lr=1e-2)
              for L in LAYERS}
    table = tel.hit_table(lens, held, norm, head)
    lens.meta.update({**el.target_meta(model), "report": {"layers": {str(L): v for L, v in table.items()}}})
    return lens.float(), losses, table


@pytest.fixture
def lens_file(trained, tmp_path):
    path = tmp_path / "exit_lens_tiny.safetensors"
    trained[0].save(path, {"command": "test"})
    return path


def test_lens_shapes_and_identity_start():
    lens = el.ExitLens(32, [3, 1], 4)
    assert lens.layers == [1, 3]
    assert lens.U["1"].shape == (32, 4) and lens.V["3"].shape == (32, 4) and lens.b["1"].shape == (32,)
    h = torch.randn(5, 32)
    assert torch.equal(lens(1, h), h)  # U = 0, b = 0: the raw exit until trained
    assert lens.apply(3, h.double()).dtype == torch.float64


def test_training_lowers_the_kl(trained):
    _, losses, table = trained
    for L, ls in losses.items():
        assert sum(ls[-10:]) / 10 < ls[0], (L, ls[0], ls[-10:])
    assert set(table) == set(LAYERS)
    assert all(0.0 <= v <= 1.0 for row in table.values() for v in row.values())


def test_ridge_start_maps_towards_the_final_state():
    torch.manual_seed(0)
    h = torch.randn(400, 16, dtype=torch.float64)
    M = torch.randn(16, 16, dtype=torch.float64) * 0.3
    final = h + h @ M.T  # an exactly linear relation (unit scale)
    U, V, b = tel.ridge_start(h, final, rank=16, ridge=1e-9)
    s = h.pow(2).mean(-1, keepdim=True).sqrt() / final.pow(2).mean(-1, keepdim=True).sqrt()
    fit = h + (h @ V.double()) @ U.double().T + b.double()
    assert torch.nn.functional.cosine_similarity(fit, s * final, dim=-1).min() > 0.95


def test_save_load_round_trip(trained, lens_file):
    lens = trained[0]
    back = el.load_lens(lens_file)
    assert back.layers == LAYERS and back.rank == RANK and back.hidden_size == lens.hidden_size
    for L in LAYERS:
        for a, b in ((lens.U, back.U), (lens.V, back.V), (lens.b, back.b)):
            torch.testing.assert_close(b[str(L)], a[str(L)].half().float())
    meta = el.read_meta(lens_file)
    assert meta["format"] == el.FORMAT and meta["command"] == "test"
    assert meta["fingerprint"] == el.target_meta(tiny.cached_pair("perturbed", 0).target)["fingerprint"]
    assert back.hit_rates() == {L: trained[2][L]["lens_top8"] for L in LAYERS}
    assert lens_file.stat().st_size < 100_000


def test_lens_changes_the_proposals():
    model = tiny.cached_pair("perturbed", 0).target
    lens = el.ExitLens(model.config.hidden_size, [2], 4)
    with torch.no_grad():
        lens.U["2"].normal_(0, 1.0)
    h = torch.randn(5, model.config.hidden_size, dtype=torch.float64)
    raw = exit_head(model, "exact").proposals(h, 8)
    lensed = exit_head(model, "exact", lens, 2).proposals(h, 8)
    assert raw[0] != lensed[0]


def test_greedy_with_the_lens_equals_generate(lens_file):
    pair = tiny.cached_pair("perturbed", 0)
    for p in (tiny.prompt(0, 1), tiny.prompt(0, 9)):
        events = tiny.run(MirrorSpeculative, pair, p, max_new_tokens=N_NEW, exit_lens=str(lens_file))
        fin = tiny.finish(events)
        assert not of(events, Error) and not of(events, Notice)
        assert fin.token_ids == tiny.cached_reference(0, "qwen", tuple(p), N_NEW)
        assert fin.stats["exit_lens"] == str(lens_file)
        assert fin.stats["exit_layer"] in LAYERS  # chosen by the rule among the lens's layers
        exits = of(events, EarlyExit)
        assert exits and all(e.layer == fin.stats["exit_layer"] and e.lens for e in exits)
        rolled = [b for b in of(events, DraftBranch) if b.status in ("taken", "cancelled")]
        assert rolled and all(b.score > 0 for b in rolled)  # each root's score is in the event


@pytest.mark.parametrize("exit_layer", [1, 3])
def test_greedy_with_the_lens_at_a_given_layer(lens_file, exit_layer):
    pair = tiny.cached_pair("perturbed", 0)
    p = tiny.prompt(0, 5)
    events = tiny.run(MirrorSpeculative, pair, p, max_new_tokens=N_NEW, exit_lens=str(lens_file),
                      exit_layer=exit_layer, gamma=3, branch_budget=3)
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.cached_reference(0, "qwen", tuple(p), N_NEW)
    assert fin.stats["exit_layer"] == exit_layer and fin.stats["exit_layer_rule"] == "given"


def test_metadata_mismatch_means_no_lens_with_a_message(lens_file):
    other = tiny.cached_pair("perturbed", 1)  # a different target: other weights
    p = tiny.prompt(1, 6)
    events = tiny.run(MirrorSpeculative, other, p, max_new_tokens=N_NEW, exit_lens=str(lens_file))
    notes = of(events, Notice)
    assert len(notes) == 1 and "not used" in notes[0].message and "weights" in notes[0].message
    fin = tiny.finish(events)
    assert fin.stats["exit_lens"] is None and fin.stats["exit_layer_rule"] == "N/2 (no exit lens)"
    assert not any(e.lens for e in of(events, EarlyExit))
    assert fin.token_ids == tiny.cached_reference(1, "qwen", tuple(p), N_NEW)


def test_shape_mismatch_is_named(trained, tmp_path):
    path = tmp_path / "lens.safetensors"
    trained[0].save(path, {"num_layers": 9})
    choice = el.find_lens(tiny.cached_pair("perturbed", 0).target, str(path))
    assert choice.lens is None and choice.notify and "num layers (9 vs 4)" in choice.message


def test_auto_finds_a_shipped_lens_and_off_ignores_it(trained, tmp_path):
    model = tiny.cached_pair("perturbed", 0).target
    trained[0].save(tmp_path / "exit_lens_tiny.safetensors")
    found = el.find_lens(model, "auto", assets=tmp_path)
    assert found.lens is not None and found.path.endswith("exit_lens_tiny.safetensors")
    assert el.find_lens(model, "off", assets=tmp_path).lens is None
    other = el.find_lens(tiny.cached_pair("perturbed", 2).target, "auto", assets=tmp_path)
    assert other.lens is None and not other.notify  # no lens for this target: quietly raw


def test_auto_without_a_lens_is_raw_and_quiet():
    pair = tiny.cached_pair("perturbed", 2)
    p = tiny.prompt(2, 4)
    events = tiny.run(MirrorSpeculative, pair, p, max_new_tokens=8)
    fin = tiny.finish(events)
    assert not of(events, Notice) and fin.stats["exit_lens"] is None
    assert fin.stats["exit_layer"] == pair.target_layers // 2


def test_a_given_layer_outside_the_lens_is_raw_with_a_notice(lens_file):
    lens = el.ExitLens(32, [2], 4, el.target_meta(tiny.cached_pair("perturbed", 0).target))
    path = lens_file.with_name("only2.safetensors")
    lens.save(path)
    events = tiny.run(MirrorSpeculative, tiny.cached_pair("perturbed", 0), tiny.prompt(0, 3),
                      max_new_tokens=4, exit_lens=str(path), exit_layer=3)
    assert any("not 3" in n.message for n in of(events, Notice))
    assert tiny.finish(events).stats["exit_lens"] is None


def test_bad_exit_lens_setting_is_an_error():
    events = tiny.run(MirrorSpeculative, tiny.cached_pair("perturbed", 0), [1, 2], exit_lens="on")
    assert len(of(events, Error)) == 1 and "exit lens" in of(events, Error)[0].message


def test_exit_layer_rule():
    rates = {14: 0.5, 18: 0.7, 21: 0.85, 24: 0.95}
    # a fast draft hides behind even a short suffix: the best proposer wins
    assert el.choose_exit_layer(rates, 28, t_verify=2.0, t_rollout=0.1) == 24
    # a slow draft needs the target's time: an earlier layer
    assert el.choose_exit_layer(rates, 28, t_verify=2.0, t_rollout=1.0) in (14, 18)
    assert el.choose_exit_layer({27: 1.0}, 28, 1.0, 0.1) == 27
    t = el.expected_step_time(21, 28, 0.85, 2.0, 0.4)
    assert t == pytest.approx(2.0 + 0.15 * 0.4)


def test_train_command_end_to_end(tmp_path, capsys):
    """The CLI on a tiny saved model with a byte tokenizer, on the offline corpus."""
    model = tiny.target(0, vocab_size=259).float()
    folder = tmp_path / "tiny-target"
    model.save_pretrained(folder)
    tiny.tiny_tokenizer().save_pretrained(folder)
    out = tmp_path / "lens.safetensors"
    assert tel.main(["--target", str(folder), "--layers", "1,3", "--out", str(out), "--tokens", "600",
                     "--steps", "15", "--rank", "4"]) == 0
    table = capsys.readouterr().out
    assert "| raw top-8 |" in table and "| lens top-8 |" in table
    meta = el.read_meta(out)
    assert meta["layers"] == "1,3" and "mirror_sd.training.exit_lens" in meta["command"]
    assert set(meta["report"]["layers"]) == {"1", "3"} and meta["report"]["held_out_positions"] > 0
    assert el.find_lens(model, str(out)).lens is not None


def test_the_shipped_lens_is_small_and_fits_the_default_target():
    """What can be checked without the model: the format, the size, the default target's shape,
    and a training command whose arguments are the ones recorded (`--layers`, `--tokens`, `--seed`)."""
    shipped = sorted(el.ASSETS.glob(el.SHIPPED_GLOB))
    assert shipped, "no lens in assets/"
    for path in shipped:
        meta = el.read_meta(path)
        assert meta["format"] == el.FORMAT and path.stat().st_size < 5_000_000
        assert (meta["hidden_size"], meta["num_layers"], meta["vocab_size"]) == (1536, 28, 151936)
        args = meta["command"].split()
        for flag, key in (("--layers", "layers"), ("--tokens", "tokens"), ("--seed", "seed")):
            assert str(meta[key]) == args[args.index(flag) + 1], flag
        lens = el.load_lens(path)
        assert lens.layers == [int(x) for x in meta["layers"].split(",")]


@pytest.mark.real_pair
def test_the_shipped_lens_beats_the_raw_exit_on_held_out_text():
    """Measured here, not read from the file: on held-out documents of the training corpus
    (every 10th: none was trained on), the default target's final token is more often the
    exit's top-1 and in its top-8 with the shipped lens than without it, at every lens layer."""
    from mirror_sd.models.loading import load_model
    loaded = load_model("default", "target")
    path = sorted(el.ASSETS.glob(el.SHIPPED_GLOB))[0]
    lens = el.find_lens(loaded.model, str(path)).lens
    assert lens is not None
    held = [(ids, start) for held_out, ids, start in tel.sequences(loaded.tokenizer, 0, 3000)
            if held_out]
    data = tel.Collected.cat([tel.collect_one(loaded.model, ids, lens.layers, start=start)
                              for ids, start in held], lens.layers)
    assert data.n >= 200
    _, norm, head = exit_parts(loaded.model)
    with torch.inference_mode():
        table = tel.hit_table(lens, data, norm, head)
    for layer, row in table.items():
        assert row["lens_top8"] > row["raw_top8"] and row["lens_top1"] > row["raw_top1"], (layer, row)


def test_exit_lens_flags():
    from mirror_sd import cli
    from mirror_sd.bench import cli as bench_cli
    args = cli.build_parser().parse_args(["generate", "--prompt", "x", "--exit-lens", "off"])
    assert args.exit_lens == "off"
    assert cli.build_parser().parse_args(["generate", "--prompt", "x"]).exit_lens == "auto"
    assert bench_cli.build_parser().parse_args(["--exit-lens", "off", "--out", "o"]).exit_lens == "off"
    line = cli.summary_line({"method": "mirror", "new_tokens": 4, "wall_s": 1.0, "tokens_per_s": 4.0,
                             "target_forwards": 2, "mean_accepted": 2.0, "hit_rate": 0.5,
                             "draft_hidden_fraction": 0.5, "exit_layer": 21,
                             "exit_lens": "/x/assets/exit_lens_q.safetensors"})
    assert line.endswith("exit layer 21 (lens exit_lens_q.safetensors)")
