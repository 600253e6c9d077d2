"""The proposal vocabulary (draft_vocab.py, cpu_kernels.output_rows): a cut LM head gives the
kept ids the full head's values in every kernel; decoding with it stays lossless (greedy
output equals transformers' generate(), sampled tokens follow the target, tokens outside the
set included); files round trip and a file for another vocabulary is refused."""
import json

import pytest
import torch

from mirror_sd.cpu import linears as cpu_kernels
from mirror_sd.proposals import draft_vocab
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.events import Notice
from mirror_sd.errors import MirrorSDError
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.engine.speculative import Speculative

import tiny
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DECODERS = {"sd": Speculative, "mirror": MirrorSpeculative}


# ---------------------------------------------------------------- cut heads, every kernel

def _linear(out_f=300, in_f=64, bias=False, seed=0):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(in_f, out_f, bias=bias)
    return lin.requires_grad_(False)


KERNELS = {
    "fp32": lambda lin: lin,
    "int8": cpu_kernels.row_kernel(),
    "int8-fbgemm": cpu_kernels.RowInt8Linear,
    "int8-dyn": lambda lin: cpu_kernels.dynamic_int8(torch.nn.Sequential(lin), fuse=False)[0],
    "fp16w": lambda lin: cpu_kernels.fp16_weights(torch.nn.Sequential(lin), fuse=False)[0],
}


@pytest.mark.parametrize("kind", list(KERNELS))
@pytest.mark.parametrize("bias", [False, True])
def test_cut_layer_keeps_the_full_layers_values(kind, bias):
    layer = KERNELS[kind](_linear(bias=bias))
    ids = torch.tensor([0, 3, 17, 150, 299])
    cut = cpu_kernels.output_rows(layer, ids)
    assert cut is not None and type(cut) is type(layer)
    x = torch.randn(4, 64)
    with torch.inference_mode():
        full, part = layer(x), cut(x)
    assert part.shape == (4, 5)
    if kind.startswith("int8"):  # int32 accumulation: the same bits whatever the width
        assert torch.equal(part, full[:, ids])
    else:  # float GEMMs block by the output width: low bits may move with it
        torch.testing.assert_close(part, full[:, ids], rtol=1e-5, atol=1e-5)


def test_per_tensor_dynamic_int8_is_cut_too():
    from torch.ao.quantization import quantize_dynamic
    layer = quantize_dynamic(torch.nn.Sequential(_linear()), {torch.nn.Linear}, dtype=torch.qint8)[0]
    ids = torch.tensor([1, 2, 250])
    x = torch.randn(2, 64)
    assert torch.equal(cpu_kernels.output_rows(layer, ids)(x), layer(x)[:, ids])


def test_unknown_layer_kind_is_not_cut():
    assert cpu_kernels.output_rows(torch.nn.Identity(), torch.tensor([0])) is None
    assert draft_vocab.cut_head(torch.nn.Identity(), torch.tensor([0]), 10) is None


def test_proposal_head_switches_between_full_and_cut():
    lin = _linear(out_f=50)
    ids = torch.tensor([2, 5, 49])
    head = draft_vocab.cut_head(lin, ids, 50)
    x = torch.randn(3, 64)
    assert torch.equal(head(x), lin(x))  # inactive: the full head
    head.active = True
    out = head(x)
    assert out.shape == (3, 50)
    torch.testing.assert_close(out[:, ids], lin(x)[:, ids], rtol=1e-5, atol=1e-5)
    outside = torch.ones(50, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(out[:, outside]).all()
    torch.testing.assert_close(torch.softmax(out, -1)[:, ids], torch.softmax(lin(x)[:, ids], -1))


# ---------------------------------------------------------------- files

def _file(tmp_path, ids, **meta):
    path = tmp_path / "vocab.safetensors"
    draft_vocab.save(path, torch.tensor(ids), {"vocab_size": tiny.VOCAB, "report": {"x": 1}, **meta})
    return path


def test_file_round_trip(tmp_path):
    path = _file(tmp_path, [9, 3, 3, 40], fingerprint="abc")
    vf = draft_vocab.load(path)
    assert vf.ids.tolist() == [3, 9, 40]  # sorted, no repeats
    assert vf.meta["fingerprint"] == "abc" and vf.meta["report"] == {"x": 1}
    assert draft_vocab.find(str(path), None, tiny.VOCAB)[0].size == 3


def test_files_that_do_not_fit_are_refused(tmp_path):
    tok = tiny.tiny_tokenizer()
    path = _file(tmp_path, [1, 2, 3], fingerprint="another tokenizer")
    vf, line = draft_vocab.find(str(path), tok, tiny.VOCAB)
    assert vf is None and "another tokenizer" in line
    right = _file(tmp_path, [1, 2, 3], fingerprint=draft_vocab.tokenizer_fingerprint(tok))
    assert draft_vocab.find(str(right), tok, tiny.VOCAB)[0] is not None
    big = _file(tmp_path, [1, tiny.VOCAB + 5])  # an id the model's head does not have
    assert draft_vocab.find(str(big), None, tiny.VOCAB)[0] is None
    missing = draft_vocab.find(str(tmp_path / "none.safetensors"), None, tiny.VOCAB)
    assert missing[0] is None and "not used" in missing[1]
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a file")
    assert draft_vocab.find(str(bad), None, tiny.VOCAB)[0] is None
    assert draft_vocab.find("auto", None, tiny.VOCAB)[0] is None  # no tokenizer: no shipped file


def test_a_file_that_does_not_fit_runs_with_the_full_head_and_says_so(tmp_path):
    seed = 3
    pair = tiny.pair_perturbed(seed)
    p = tiny.prompt(seed, 6)
    path = _file(tmp_path, [1, tiny.VOCAB + 5])
    events = tiny.run(Speculative, pair, p, max_new_tokens=10, gamma=3, draft_vocab=str(path))
    assert any(isinstance(e, Notice) and "full LM head" in e.message for e in events)
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 10)
    assert fin.stats["draft_vocab"] is None


def test_settings_refuse_an_unknown_choice():
    pair = tiny.pair_perturbed(0)
    with pytest.raises(MirrorSDError, match="draft vocab"):
        Settings(draft_vocab="half").validate(pair, 4)


# ---------------------------------------------------------------- losslessness

def subset(seed: int, keep: float = 0.5) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(tiny.VOCAB, generator=g)[:int(keep * tiny.VOCAB)].tolist())


@pytest.mark.parametrize("method", ["sd", "mirror"])
@pytest.mark.parametrize("seed,gamma", [(0, 4), (1, 3), (2, 2)])
def test_greedy_with_a_cut_draft_head_equals_generate(tmp_path, method, seed, gamma):
    pair = tiny.pair_perturbed(seed)
    ids = subset(seed)
    path = _file(tmp_path, ids)
    p = tiny.prompt(seed, 5 + seed)
    ref = tiny.reference_greedy(pair.target, p, 24)
    assert set(ref) - set(ids), "the target must write tokens the draft cannot propose"
    events = tiny.run(DECODERS[method], pair, p, max_new_tokens=24, gamma=gamma, branch_budget=2,
                      draft_vocab=str(path))
    fin = tiny.finish(events)
    assert fin.token_ids == ref
    assert fin.stats["draft_vocab"] == len(ids)
    drafted = [t for e in events if type(e).__name__ == "Verify" for t in e.drafted]
    assert drafted and set(drafted) <= set(ids)  # proposals come from the set only
    # the head is back to the full one after the run
    assert not pair.draft.get_output_embeddings().active


def test_the_mirror_exit_head_proposes_from_the_set(tmp_path):
    seed = 1
    pair = tiny.pair_perturbed(seed)
    ids = subset(seed, 0.3)
    path = _file(tmp_path, ids)
    events = tiny.run(MirrorSpeculative, pair, tiny.prompt(seed, 6), max_new_tokens=16, gamma=3,
                      kappa=4, draft_vocab=str(path))
    exits = [e for e in events if type(e).__name__ == "EarlyExit"]
    assert exits
    proposed = {t for e in exits for row in e.token_ids for t in row}
    assert proposed <= set(ids)


def test_draft_that_is_the_target_keeps_its_full_head(tmp_path):
    seed = 2
    pair = tiny.pair_same(seed, shared=True)
    path = _file(tmp_path, subset(seed))
    p = tiny.prompt(seed, 5)
    fin = tiny.finish(tiny.run(Speculative, pair, p, max_new_tokens=12, gamma=3, draft_vocab=str(path)))
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 12)
    assert fin.stats["draft_vocab"] is None
    assert not isinstance(pair.target.get_output_embeddings(), draft_vocab.ProposalHead)


V = 12
SEED = 6
PROMPT = tiny.prompt(SEED, 4, vocab=V)
KEEP = [0, 2, 3, 5, 8, 9, 11]  # 5 of 12 ids the draft can never propose


@pytest.mark.parametrize("method,temperature,gamma,runs", [
    ("sd", 1.0, 3, 400), ("mirror", 0.8, 2, 300)])
def test_sampled_tokens_follow_the_target_with_a_cut_draft_head(tmp_path, method, temperature, gamma, runs):
    pair = tiny.pair_perturbed(SEED, scale=0.2, vocab_size=V, initializer_range=0.3)
    path = tmp_path / "v.safetensors"
    draft_vocab.save(path, torch.tensor(KEEP), {"vocab_size": V})
    p1, _ = tiny.exact_marginals(pair.target, PROMPT, temperature, V)
    outside = [t for t in range(V) if t not in KEEP]
    assert sum(p1[t] for t in outside) > 0.2  # tokens the draft cannot propose carry real mass
    tiny.assert_first_two_follow_the_target(DECODERS[method], pair, PROMPT, V, runs, temperature,
                                            gamma=gamma, branch_budget=2, kappa=4,
                                            draft_vocab=str(path))


def test_build_command_writes_a_file_that_fits(tmp_path, monkeypatch):
    from mirror_sd.training import draft_vocab as build_draft_vocab
    tok = tiny.tiny_tokenizer()
    monkeypatch.setattr(build_draft_vocab, "load_tokenizer", lambda name: (tok, "tiny"))
    out = tmp_path / "v.safetensors"
    assert build_draft_vocab.main(["--size", "60", "--base", "10", "--code-bytes", "200000",
                                   "--languages", "", "--out", str(out)]) == 0
    vf = draft_vocab.load(out)
    assert vf.size == 60 and vf.ids.tolist() == sorted(set(vf.ids.tolist()))
    assert set(range(10)) <= set(vf.ids.tolist())
    assert set(tok.all_special_ids) <= set(vf.ids.tolist())
    assert draft_vocab.find(str(out), tok, len(tok))[0] is not None
    report = vf.meta["report"]
    assert 0 < report["coverage"]["code"] <= 1 and "mirror_sd.training.draft_vocab" in vf.meta["command"]
    json.dumps(report)


def test_exit_head_auto_uses_the_shipped_set_and_the_draft_keeps_its_full_head(tmp_path, monkeypatch):
    """Defaults: draft_vocab full, exit head auto. A shipped file that fits the tokenizer cuts
    the exit head (proposals only), not the draft's head; output stays the target's own."""
    seed = 5
    pair = tiny.pair_perturbed(seed)
    pair.tokenizer = tiny.tiny_tokenizer()
    ids = subset(seed, 0.4)
    monkeypatch.setattr(draft_vocab, "ASSETS", tmp_path)
    draft_vocab._found.clear()
    draft_vocab.save(tmp_path / "draft_vocab_tiny.safetensors", torch.tensor(ids),
                     {"vocab_size": len(pair.tokenizer),
                      "fingerprint": draft_vocab.tokenizer_fingerprint(pair.tokenizer)})
    assert Settings().draft_vocab == "full" and Settings().exit_head == "auto"
    p = tiny.prompt(seed, 6)
    events = tiny.run(MirrorSpeculative, pair, p, max_new_tokens=20, gamma=3, kappa=4)
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 20)
    assert fin.stats["draft_vocab"] is None  # the draft's own head: full
    exits = {t for e in events if type(e).__name__ == "EarlyExit" for row in e.token_ids for t in row}
    assert exits and exits <= set(ids)
    drafted = {t for e in events if type(e).__name__ == "Verify" for t in e.drafted}
    assert drafted - set(ids), "the draft still proposes from every id"
    draft_vocab._found.clear()
