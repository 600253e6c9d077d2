"""Cross-tokenizer pairs: the vocabulary bridge, the draft's lane, the pair check and settings.

The tiny cross pairs of `mirror_sd.models.tiny.cross_pair`: "twin" (the draft's vocabulary is
the target's byte-level BPE under permuted ids, the draft the permuted target plus noise),
"foreign" (a SentencePiece-style BPE with U+2581 spaces, <0xNN> byte fallback and a BOS, and
random draft weights) and "sliding" (the foreign vocabularies with a tiny Gemma 3 draft whose
local layers see 4 positions). Tokenizers for the byte-string cases are built here from
explicit vocabularies with the `tokenizers` library. Losslessness (greedy and sampled) is in
test_cross_lossless.py.
"""
from __future__ import annotations

import functools

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from mirror_sd.engine.cross import CrossLane, lane_for
from mirror_sd.models.bridged_draft import BridgedDraft
from mirror_sd.engine.events import Error, Finish
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.pair_check import check_pair, describe
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError
from mirror_sd.models.pair import ModelPair
from mirror_sd.models.tiny import cross_pair
from mirror_sd.models.vocab_bridge import (SPM_SPACE, VocabBridge, byte_token_ids, encode_draft_prompt,
                                           token_bytes)

import tiny
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

KINDS = ("twin", "foreign")
SLIDING_WINDOW = 4  # positions a sliding-window draft layer sees (Gemma 3 alternates such layers)


def sliding_cross_pair(seed: int) -> ModelPair:
    """The foreign pair with a tiny Gemma 3 draft whose local layers see 4 positions: the
    draft's caches are cut back far beyond its window."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    foreign = cross_pair(seed, "foreign")
    config = Gemma3TextConfig(vocab_size=len(foreign.draft_tokenizer), hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                              sliding_window=SLIDING_WINDOW, layer_types=["sliding_attention", "full_attention"],
                              max_position_embeddings=tiny.CONTEXT, initializer_range=tiny.INIT_RANGE)
    torch.manual_seed(seed + 30_000)
    draft = Gemma3ForCausalLM(config).to(torch.float64).eval()
    return ModelPair(foreign.target, draft, foreign.tokenizer, target_name="tiny-target (sliding)",
                     draft_name="tiny Gemma 3 draft (sliding window)", draft_tokenizer=foreign.draft_tokenizer)


@functools.lru_cache(maxsize=None)
def cached_cross(kind: str, seed: int = 0) -> ModelPair:
    """The tiny cross pairs by kind: "twin", "foreign" (tiny.cross_pair) or "sliding"."""
    return sliding_cross_pair(seed) if kind == "sliding" else cross_pair(seed, kind)


def fast(model, decoder=None, normalizer=None, pre_tokenizer=None, **special) -> PreTrainedTokenizerFast:
    tok = Tokenizer(model)
    for name, part in (("decoder", decoder), ("normalizer", normalizer), ("pre_tokenizer", pre_tokenizer)):
        if part is not None:
            setattr(tok, name, part)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **special)


def bytelevel_tokenizer() -> PreTrainedTokenizerFast:
    """GPT-2's byte alphabet, one merge ("Ġ" + "a") and a special token."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab["Ġa"] = len(vocab)
    tok = fast(models.BPE(vocab, [("Ġ", "a")]), decoders.ByteLevel(),
               pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=False))
    tok.add_special_tokens({"additional_special_tokens": ["<|special|>"]})
    return tok


def sentencepiece_tokenizer(decoder) -> PreTrainedTokenizerFast:
    """U+2581 for spaces, <0xNN> byte fallback (as Gemma's vocabulary holds them), BOS/EOS."""
    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece in ("a", "b", SPM_SPACE, SPM_SPACE + "a"):
        vocab[piece] = len(vocab)
    return fast(models.BPE(vocab, [(SPM_SPACE, "a")], byte_fallback=True, unk_token="<unk>"), decoder,
                normalizer=normalizers.Replace(" ", SPM_SPACE),
                unk_token="<unk>", bos_token="<bos>", eos_token="<eos>")


SPM_DECODERS = {
    "replace+bytefallback": decoders.Sequence([decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(),
                                               decoders.Fuse()]),
    "metaspace": decoders.Metaspace(),
}


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    return fast(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]),
                pre_tokenizer=pre_tokenizers.WhitespaceSplit(), unk_token=words[0])


# ---------------------------------------------------------------- token_bytes
def test_token_bytes_of_a_byte_level_vocabulary():
    tok = bytelevel_tokenizer()
    by = token_bytes(tok)
    vocab = tok.get_vocab()
    assert by[vocab["Ġa"]] == b" a"
    assert by[vocab["Ċ"]] == b"\n"
    assert by[vocab["a"]] == b"a"
    assert by[vocab["<|special|>"]] is None
    assert len(by) == len(vocab)
    assert sorted(b for b in by[:256]) == [bytes([i]) for i in range(256)]  # the whole alphabet, once


@pytest.mark.parametrize("decoder", list(SPM_DECODERS))
def test_token_bytes_of_a_sentencepiece_vocabulary(decoder):
    tok = sentencepiece_tokenizer(SPM_DECODERS[decoder])
    by = token_bytes(tok)
    vocab = tok.get_vocab()
    assert by[vocab[SPM_SPACE + "a"]] == b" a"
    assert by[vocab[SPM_SPACE]] == b" "
    assert by[vocab["<0x0A>"]] == b"\n"
    assert by[vocab["<0xE2>"]] == b"\xe2"
    for special in ("<unk>", "<bos>", "<eos>"):
        assert by[vocab[special]] is None, special
    assert byte_token_ids(tok) == {vocab[f"<0x{b:02X}>"] for b in range(256)}


def test_token_bytes_of_another_scheme_is_the_decoded_text():
    tok = word_tokenizer(["<unk>", "hello", "world"])
    assert token_bytes(tok) == [None, b"hello", b"world"]


# ---------------------------------------------------------------- VocabBridge
def expected_bytes(bridge, t: int) -> bytes:
    """What a target token is, as text: its bytes, or a special token's own text."""
    b = bridge.target_bytes[t]
    return b if b is not None else bridge.special_text[t].encode("utf-8")


@pytest.mark.parametrize("kind", KINDS)
def test_shared_tokens_map_one_to_one_on_equal_bytes(kind):
    b = cached_cross(kind).bridge
    ts, ds = b.shared_target.tolist(), b.shared_draft.tolist()
    assert len(ts) == len(ds) == b.n_shared > 0
    assert len(set(ds)) == len(ds), "a draft id is the twin of two target ids"
    assert ts == sorted(set(ts))
    assert all(0 <= d < b.draft_vocab for d in ds)
    for t, d in zip(ts, ds):
        assert b.target_bytes[t] == b.draft_bytes[d] is not None, (t, d)
        assert b.expand(t) == [d] and b.is_shared(t)
    unshared = [t for t in range(b.target_vocab) if t not in set(ts)]
    assert (b.t2d[unshared] == -1).all() and not any(b.is_shared(t) for t in unshared)
    assert not b.is_shared(-1) and not b.is_shared(b.target_vocab)


def test_bridge_of_byte_lists():
    """Duplicate byte strings, a byte token beside a regular one, and target ids past the
    tokenizer (a padded LM head)."""
    target = [b"a", b"a", b"\n", b"ab", None]  # id 1 repeats id 0; id 4 special; ids 5-6 padding
    draft = [b"\n", b"b", b"a", b"\n", b" "]  # id 0 a <0x0A> byte token, id 3 the regular "\n"
    b = VocabBridge(target, draft, target_vocab=7, draft_vocab=5, draft_byte_tokens={0})
    assert b.shared_target.tolist() == [0, 2] and b.shared_draft.tolist() == [2, 3]
    assert b.t2d.tolist() == [2, -1, 3, -1, -1, -1, -1]
    assert b.expand(1) == [2] and b.expand(3) == [2, 1]  # spelled: "a" + "b"
    assert b.expand(6) == [4]  # nothing to spell: one blank, never no position at all
    assert b.target_tokens == 4 and b.shared_share == 0.5
    assert b.spell(b"ba\nz") == [1, 2, 3]  # a byte the draft cannot write is skipped


@pytest.mark.parametrize("kind", ["twin", "foreign"])
def test_every_target_token_is_spelled_exactly_in_draft_tokens(kind):
    """The draft reads what the target committed: both tiny draft vocabularies can write any
    byte (the twin holds all of them, the foreign one has <0xNN> byte fallback). A special
    token the draft also has (same text) is that token."""
    b = cached_cross(kind).bridge
    same_special = getattr(b, "draft_specials", {})
    wrong = {}
    for t in range(b.target_vocab):
        if b.target_bytes[t] is None and b.special_text.get(t) in same_special:
            if b.expand(t) != [same_special[b.special_text[t]]]:
                wrong[t] = (b.special_text[t], b.expand(t))
            continue
        spelled = b"".join(b.draft_bytes[d] or b"?" for d in b.expand(t))
        if spelled != expected_bytes(b, t):
            wrong[t] = (expected_bytes(b, t), spelled)
    assert not wrong, f"{len(wrong)} of {b.target_vocab} target tokens misspelled, e.g. {list(wrong.items())[:5]}"


def test_the_foreign_draft_spells_some_target_tokens_with_several_tokens():
    b = cached_cross("foreign").bridge
    several = [t for t in range(b.target_vocab) if b.target_bytes[t] and len(b.expand(t)) > 1]
    assert several, "no regular target token needs several draft tokens: the lane's bookkeeping is untested"
    assert 0.05 <= b.shared_share < 1.0
    assert b.draft_bos == [cached_cross("foreign").draft_tokenizer.bos_token_id]


def test_the_twin_shares_every_regular_token():
    pair = cached_cross("twin")
    b = pair.bridge
    specials = set(pair.tokenizer.all_special_ids) | set(pair.tokenizer.added_tokens_decoder)
    assert b.target_tokens == b.target_vocab - len(specials)
    assert b.n_shared == b.target_tokens and b.shared_share == 1.0
    assert b.draft_bos == []
    assert (b.shared_target != b.shared_draft).any(), "the twin's ids are permuted: the map is not the identity"


@pytest.mark.parametrize("kind", KINDS)
def test_coverage(kind):
    b = cached_cross(kind).bridge
    shared, unshared = b.shared_target.tolist(), [t for t in range(b.target_vocab) if not b.is_shared(t)]
    assert b.coverage(shared) == 1.0
    assert b.coverage(unshared) == 0.0
    assert b.coverage([]) == 0.0 and b.coverage([-5, b.target_vocab]) == 0.0
    assert b.coverage(shared[:3] + unshared[:1]) == pytest.approx(0.75)


@pytest.mark.parametrize("kind", KINDS)
def test_draft_prompt_is_the_remembered_rendering(kind):
    pair = cross_pair(1, kind)  # a fresh bridge: nothing remembered yet
    b = pair.bridge
    text = "Hello world! Caf\u00e9 \u2014 \u00fcber."
    ids = pair.encode_prompt(text)
    own, how = encode_draft_prompt(pair.draft_tokenizer, [{"role": "user", "content": text}])
    assert b.draft_prompt(ids) == own
    shown = pair.draft_tokenizer.decode(own)
    if kind == "twin":  # the same chat template: the draft reads the target's text
        assert "chat template" in how and shown == pair.tokenizer.decode(ids)
    else:  # no chat template: the user's text and a blank line, after the draft's BOS
        assert "no chat template" in how and own[0] == pair.draft_tokenizer.bos_token_id
        assert shown.endswith(text + "\n\n")
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"},
             {"role": "user", "content": "more"}]
    assert b.draft_prompt(pair.encode_prompt(turns)) == encode_draft_prompt(pair.draft_tokenizer, turns)[0]
    assert b.draft_prompt(ids) == own  # still remembered
    other = pair.tokenizer("def add(a, b):")["input_ids"]  # never rendered: spelled after the BOS
    assert b.draft_prompt(other) == b.draft_bos + [d for t in other for d in b.expand(t)]


def swapped_foreign() -> ModelPair:
    """The foreign pair the other way round: a target without a chat template (a base model's
    SentencePiece vocabulary) and a draft that has one."""
    f = cached_cross("foreign")
    return ModelPair(f.draft_model, f.target, f.draft_tokenizer, draft_tokenizer=f.tokenizer)


@pytest.mark.parametrize("case", ["chat=False", "target without a chat template"])
def test_a_target_reading_plain_text_has_a_draft_reading_the_same_text(case):
    """When the target reads the user's plain text (encode_prompt(chat=False), or a target
    without a chat template), the draft must read that text too, not a chat rendering the
    target never saw."""
    pair, chat = (cross_pair(2, "twin"), False) if case == "chat=False" else (swapped_foreign(), True)
    ids = pair.encode_prompt("def add(a, b):", chat=chat)
    draft_text = pair.draft_tokenizer.decode(pair.bridge.draft_prompt(ids), skip_special_tokens=True)
    assert draft_text == pair.tokenizer.decode(ids, skip_special_tokens=True) == "def add(a, b):"


def test_check_says_what_a_target_without_a_chat_template_reads():
    report = check_pair(swapped_foreign(), sample_tokens=0)
    assert "the target reads its own chat template" not in report["prompt"], report["prompt"]


# ---------------------------------------------------------------- refused pairs
def word_model(vocab: int, seed: int):
    return tiny.build(tiny.qwen_config(vocab_size=vocab), seed)


def test_a_pair_that_shares_almost_nothing_is_refused():
    target_words = ["<unk>"] + [f"t{i}" for i in range(39)] + ["shared"]
    draft_words = ["<unk>"] + [f"d{i}" for i in range(29)] + ["shared"]
    with pytest.raises(MirrorSDError) as err:
        ModelPair(word_model(len(target_words), 0), word_model(len(draft_words), 1), word_tokenizer(target_words),
                  draft_tokenizer=word_tokenizer(draft_words))
    message = str(err.value)
    assert "share only 1 of 40 tokens" in message and "2.5%" in message


def test_a_draft_of_another_size_without_its_tokenizer_is_refused():
    words = ["<unk>", "a", "b", "c"]
    with pytest.raises(MirrorSDError, match="share one vocabulary"):
        ModelPair(word_model(4, 0), word_model(6, 1), word_tokenizer(words))


def test_the_same_tokenizer_twice_is_not_a_cross_pair():
    words = ["<unk>", "a", "b", "c"]
    pair = ModelPair(word_model(4, 0), word_model(4, 1), word_tokenizer(words), draft_tokenizer=word_tokenizer(words))
    assert not pair.cross and pair.bridge is None and pair.draft is pair.draft_model
    assert type(lane_for(pair.draft, "draft", [1, 2])) is Lane


# ---------------------------------------------------------------- CrossLane
def continuation(pair) -> list[int]:
    """Target tokens after the prompt, with unshared ones (several draft positions) when the
    draft's vocabulary lacks some."""
    ids = pair.tokenizer("    return [n for n in numbers if n % 2 == 0]\nCaf\u00e9 \u2014 \u00fcber.")["input_ids"]
    if pair.bridge.n_shared < pair.bridge.target_tokens:
        assert any(len(pair.bridge.expand(t)) > 1 for t in ids)
    return ids


def last_logits(lane: CrossLane, tokens: list[int]) -> torch.Tensor:
    return lane.feed(tokens)[-1]


@torch.inference_mode()
def raw_draft_logits(pair, prompt: list[int], seq: list[int]) -> torch.Tensor:
    """The draft model itself on its prompt and the spelled tokens, mapped to target ids."""
    flat = pair.bridge.draft_prompt(prompt) + [d for t in seq[len(prompt):] for d in pair.bridge.expand(t)]
    return pair.draft.to_target(pair.draft_model(torch.tensor([flat])).logits[:, -1])[0]


@pytest.mark.parametrize("kind", KINDS + ("sliding",))
def test_cross_lane_fed_in_pieces_and_cut_back_matches_a_fresh_lane(kind):
    pair = cached_cross(kind)
    assert isinstance(pair.draft, BridgedDraft)
    prompt = pair.encode_prompt("def add(a, b):")
    seq = prompt + continuation(pair)
    P = len(prompt)

    def fresh(upto: int) -> torch.Tensor:
        return last_logits(CrossLane(pair.draft, "fresh", prompt), seq[:upto])

    lane = lane_for(pair.draft, "draft", prompt)
    assert isinstance(lane, CrossLane)
    for cut in (P + 2, P + 5, len(seq) - 3, len(seq)):  # committed text arriving in pieces
        logits = last_logits(lane, lane.sync(seq[:cut]))
        assert lane.ids == seq[:cut] and lane.entries(len(lane.ids)) == lane.cache.get_seq_length()
    whole = fresh(len(seq))
    assert torch.allclose(logits, whole)
    assert torch.allclose(whole, raw_draft_logits(pair, prompt, seq))
    assert torch.isinf(whole[[t for t in range(pair.bridge.target_vocab) if not pair.bridge.is_shared(t)]]).all()
    for back in (P + 4, P + 1, P):  # cut back to shorter prefixes (P: the prompt alone)
        todo = lane.sync(seq[:back])
        assert torch.allclose(last_logits(lane, todo), fresh(back)), back
        assert lane.entries(len(lane.ids)) == lane.cache.get_seq_length()
    # a different continuation after a cut, then back to the committed text
    other = seq[:P + 1] + [int(pair.bridge.shared_target[7])]
    assert torch.allclose(last_logits(lane, lane.sync(other)),
                          last_logits(CrossLane(pair.draft, "fresh", prompt), other))
    assert torch.allclose(last_logits(lane, lane.sync(seq)), whole)


@torch.inference_mode()
def test_bridged_draft_one_row_gives_logits_after_each_target_token():
    pair = cached_cross("foreign")
    seq = pair.tokenizer("Caf\u00e9 \u2014 \u00fcber. if x > 0:")["input_ids"]
    every = pair.draft(torch.tensor([seq])).logits[0]  # [len(seq), target vocab]
    assert every.shape == (len(seq), pair.bridge.target_vocab)
    for k in (0, 3, len(seq) - 1):
        assert torch.allclose(every[k], pair.draft(torch.tensor([seq[:k + 1]])).logits[0, -1]), k
    assert torch.allclose(pair.draft(torch.tensor([seq]), logits_to_keep=3).logits[0], every[-3:])


@torch.inference_mode()
def test_bridged_draft_batched_rows_take_shared_tokens_only():
    pair = cached_cross("foreign")
    b = pair.bridge
    rows = b.shared_target[:6].view(2, 3)
    mask = torch.ones_like(rows)
    out = pair.draft(rows, attention_mask=mask).logits
    raw = pair.draft_model(b.t2d[rows], attention_mask=mask).logits
    # the wrapper's head holds the shared rows only: another GEMM shape, so low bits may differ
    expected = pair.draft.to_target(raw)
    assert torch.equal(torch.isinf(out), torch.isinf(expected))
    assert torch.allclose(out[~torch.isinf(out)], expected[~torch.isinf(expected)], rtol=0, atol=1e-12)
    assert torch.allclose(torch.softmax(out, -1)[..., b.shared_target].sum(-1), torch.ones(2, 3, dtype=out.dtype))
    unshared = next(t for t in range(b.target_vocab) if not b.is_shared(t))
    with pytest.raises(MirrorSDError, match="shared vocabulary"):
        pair.draft(torch.tensor([[unshared], [int(b.shared_target[0])]]), attention_mask=torch.ones(2, 1))


# ---------------------------------------------------------------- pair check
@pytest.mark.parametrize("kind", KINDS)
def test_check_of_a_cross_pair(kind):
    pair = cached_cross(kind)
    report = check_pair(pair, sample_tokens=12)
    assert report["cross"] is True
    assert report["shared_tokens"] == pair.bridge.n_shared and report["target_tokens"] == pair.bridge.target_tokens
    assert 0.0 <= report["coverage"] <= 1.0 and report["sample_tokens"] == 12
    # the twin's draft is the target's size: not smaller, so it cannot be faster
    assert len(report["warnings"]) == (kind == "twin")
    if kind == "twin":
        assert "chat template" in report["prompt"] and report["coverage"] == 1.0
    else:
        assert "user's text" in report["prompt"]
    assert "Fibonacci" in report["draft_prompt_text"]
    lines = describe(report)
    assert f"{pair.bridge.n_shared:,} tokens" in lines[0] and any(line.startswith("Prompt:") for line in lines)


def test_check_of_a_same_tokenizer_pair():
    report = check_pair(tiny.pair_random(0))  # a 2-layer draft: no size warning
    assert report["cross"] is False and "shared_tokens" not in report and report["warnings"] == []
    assert describe(report) == [f"Prompt: {report['prompt']}."]


def test_check_warns_of_a_draft_larger_than_the_target():
    small = tiny.pair_random(0)  # a 2-layer draft
    report = check_pair(ModelPair(small.draft, small.target))
    assert report["draft_params"] > report["target_params"]
    assert len(report["warnings"]) == 1 and "not smaller than the target" in report["warnings"][0]
    assert report["warnings"][0] in describe(report)


# ---------------------------------------------------------------- settings
@pytest.mark.parametrize("setting", [{"streams": "auto"}, {"draft_vocab": "auto"}])
@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_auto_settings_still_decode_a_cross_pair(method, setting):
    pair = cached_cross("foreign")
    prompt = pair.encode_prompt("def add(a, b):")
    events = list(METHODS[method](pair, Settings(max_new_tokens=8, gamma=3, **setting)).generate(prompt))
    assert not [e for e in events if isinstance(e, Error)]
    fin = tiny.finish(events)
    assert isinstance(fin, Finish) and len(fin.token_ids) == 8
