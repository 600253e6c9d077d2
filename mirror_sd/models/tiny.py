"""Tiny random model pairs built in code: the one fixture of the tests and of the app's test
mode (no downloads, no files; each builds in well under a second).

- `qwen_config()` / `llama_config()`: 4-layer, 97-token configs (overridable).
- `build(config, seed, dtype=float64)`: a seeded random model in eval mode.
- `pair_same(seed)`: draft == target (an exact copy; `shared=True` uses the same object).
- `pair_random(seed)`: an unrelated random draft (little or nothing accepted).
- `pair_perturbed(seed)`: the draft is the target plus small weight noise (partial acceptance).
- `sharpen(model, factor)`: a peaked LM head (same argmax), for confident drafts.
- `tiny_tokenizer()`: a byte-level tokenizer with Qwen's special tokens (no merges).
- `tiny_pair(seed)`: the app's test pair: a word-level tokenizer with a chat template, a float32
  target and a draft that is the target plus weight noise, so some drafts are accepted and some
  rejected (the text is noise; the mechanics are real).
"""
from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from mirror_sd.models.pair import ModelPair

VOCAB = 97
LAYERS = 4
CONTEXT = 256

# Larger than the default 0.02 (which gives near-uniform outputs over 97 tokens): the tiny
# models get input-dependent distributions, argmax margins well above float64 rounding, and
# draft/target disagreements that matter.
INIT_RANGE = 0.2


def _config(cls, over: dict):
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
              tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None,
              initializer_range=INIT_RANGE)
    return cls(**{**kw, **over})


def qwen_config(**over) -> Qwen2Config:
    return _config(Qwen2Config, over)


def llama_config(**over) -> LlamaConfig:
    return _config(LlamaConfig, over)


CONFIGS = {"qwen": qwen_config, "llama": llama_config}
MODELS = {"qwen": Qwen2ForCausalLM, "llama": LlamaForCausalLM}


def build(config, seed: int, kind: str | None = None, dtype: torch.dtype = torch.float64):
    """A seeded random causal LM in `dtype` (float64: near-ties practically impossible), eval mode."""
    kind = kind or ("llama" if isinstance(config, LlamaConfig) else "qwen")
    torch.manual_seed(seed)
    model = MODELS[kind](config).to(dtype).eval()
    _plain_generation_config(model)
    return model


def _plain_generation_config(model) -> None:
    """Greedy, no sampling defaults, eos taken from the config (None: never stops early)."""
    gc = model.generation_config
    gc.do_sample = False
    gc.temperature = None
    gc.top_k = None
    gc.top_p = None
    gc.eos_token_id = model.config.eos_token_id
    gc.pad_token_id = model.config.eos_token_id if model.config.eos_token_id is not None else 0
    gc.bos_token_id = None


def target(seed: int, kind: str = "qwen", **over):
    return build(CONFIGS[kind](**over), seed, kind)


def perturb(model, scale: float, seed: int):
    """A copy of `model` with relative Gaussian noise of size `scale` on every weight."""
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            p.add_(noise * scale * p.detach().abs().mean())
    return out


def sharpen(model, factor: float):
    """Scale the LM head in place: same argmax everywhere, peaked distributions (the draft's
    own acceptance estimates become confident, so Mirror's bonus-depth branches are taken)."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


def pair_same(seed: int, kind: str = "qwen", shared: bool = False, sharp: float = 1.0,
              **over) -> ModelPair:
    t = target(seed, kind, **over)
    if sharp != 1.0:
        sharpen(t, sharp)
    return ModelPair(t, t if shared else copy.deepcopy(t))


def pair_random(seed: int, kind: str = "qwen", draft_layers: int = 2, **over) -> ModelPair:
    t = target(seed, kind, **over)
    d = build(CONFIGS[kind](**{**over, "num_hidden_layers": draft_layers}), seed + 10_000, kind)
    return ModelPair(t, d)


PERTURB_SCALE = 0.05


def pair_perturbed(seed: int, kind: str = "qwen", scale: float = PERTURB_SCALE, **over) -> ModelPair:
    t = target(seed, kind, **over)
    return ModelPair(t, perturb(t, scale, seed + 20_000))


PAIRS = {"same": pair_same, "random": pair_random, "perturbed": pair_perturbed}


CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer():
    """A byte-level BPE with no merges: 256 byte symbols plus Qwen's special tokens.

    A Qwen2Tokenizer on purpose: transformers 5 reloads any tokenizer saved next to a qwen2
    config as a Qwen2Tokenizer, whatever class wrote it."""
    from tokenizers import AddedToken
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import Qwen2Tokenizer
    vocab = {ch: i for i, ch in enumerate(sorted(ByteLevel.alphabet()))}
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        vocab[special] = len(vocab)  # 256, 257, 258
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], eos_token="<|im_end|>",
                         pad_token="<|endoftext|>", unk_token=None)
    tok.add_tokens([AddedToken("<|im_start|>", special=True)])
    tok.chat_template = CHAT
    return tok


# The app's test pair: words, so that its text reads as tokens in the panes.
WORDS = (
    ["<unk>", "<|im_start|>", "<|im_end|>", "user", "assistant", "\n", "    "]
    + "def return if else for in while ( ) : , . = + - * / == < > [ ] print x y n i "
      "the a of to is and it that <script> & \" ' result value list sum count True False "
      "None 0 1 2 hello world fast slow draft target token mirror".split()
)
WORD_CHAT = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} "
             "<|im_end|> \n {% endfor %}{% if add_generation_prompt %}<|im_start|> "
             "assistant \n {% endif %}")
DEMO_NOISE = 0.02  # relative weight noise of the test pair's draft: some drafts rejected


def word_tokenizer():
    """Word-level tokenizer over WORDS with a chat template and no eos token (a random model
    would stop at once: the app shows max_new_tokens tokens)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.chat_template = WORD_CHAT
    return fast


def tiny_pair(seed: int = 0) -> ModelPair:
    """The app's test pair: two tiny float32 Qwen2 models sharing the word tokenizer."""
    config = qwen_config(vocab_size=len(WORDS), hidden_size=64, intermediate_size=128,
                         max_position_embeddings=1024)
    target = build(config, seed, "qwen", torch.float32)
    draft = perturb(target, DEMO_NOISE, seed + 1)
    info = {"precision": "fp32", "dtype": "float32",
            "target": {"source": "tiny (random, built in code)", "device": "cpu", "layers": LAYERS},
            "draft": {"source": "tiny (target + noise)", "device": "cpu", "layers": LAYERS}}
    return ModelPair(target, draft, word_tokenizer(), target_name="tiny-target",
                     draft_name="tiny-draft", info=info)


# Cross-tokenizer pairs: two tokenizers trained here on a small text (the `tokenizers` library).
CROSS_TEXT = (
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i * i)\n"
    "The draft proposes tokens and the target verifies them. Speculative decoding is lossless.\n"
    "if x > 0:\n    y = x / 2\nelse:\n    y = -x\nresult = [n for n in numbers if n % 2 == 0]\n"
    "Hello world! Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u00fcber. 42 + 17 = 59.\n"
) * 4


def _bytelevel_bpe(vocab_size: int):
    """A byte-level BPE (Qwen's scheme) trained on CROSS_TEXT, with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([CROSS_TEXT], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT
    return fast


def _sentencepiece_bpe(vocab_size: int):
    """A SentencePiece-style BPE (Gemma's scheme: U+2581 for spaces, <0xNN> byte fallback,
    a BOS token, no chat template) trained on CROSS_TEXT."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"] + byte_tokens,
                                  show_progress=False)
    tok.train_from_iterator([CROSS_TEXT], trainer)
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>", unk_token="<unk>")


def _permuted_twin(target_tok, seed: int):
    """The target's byte-level vocabulary under other ids (and a few extra tokens): every
    target token has a twin, at a different id."""
    import json
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    spec = json.loads(target_tok.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(vocab), generator=g).tolist()
    names = sorted(vocab, key=vocab.get)
    spec["model"]["vocab"] = {names[i]: order[i] for i in range(len(names))}
    spec["added_tokens"] = [dict(t, id=spec["model"]["vocab"][t["content"]]) for t in spec["added_tokens"]]
    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                   eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT  # the same conversation text: the draft reads what the target reads
    return fast, {vocab[n]: spec["model"]["vocab"][n] for n in names}


TWIN_SHARPEN = 4.0


def cross_pair(seed: int = 0, kind: str = "twin", dtype: torch.dtype = torch.float64,
               draft_noise: float = 0.05, sharp: float = 1.0) -> ModelPair:
    """A tiny target and a draft with another tokenizer.

    kind "twin": the draft's vocabulary is the target's under permuted ids (same chat template),
    and the draft is the target with its embedding and head rows permuted the same way plus
    weight noise: most drafts are accepted.
    kind "foreign": the draft has its own SentencePiece-style BPE (spaces as U+2581, byte
    fallback) and its own random weights: part of the vocabulary is shared, many target tokens
    are spelled with several draft tokens, and little is accepted.
    sharp: both LM heads scaled by this factor (peaked distributions, for sampling tests)."""
    target_tok = _bytelevel_bpe(320)
    t_model = build(qwen_config(vocab_size=len(target_tok)), seed, "qwen", dtype)
    if kind == "twin":
        sharpen(t_model, TWIN_SHARPEN)  # peaked distributions: the noisy twin agrees on most argmaxes
        draft_tok, perm = _permuted_twin(target_tok, seed + 1)
        d_model = perturb(t_model, draft_noise, seed + 2)
        src = torch.tensor(sorted(perm), dtype=torch.long)
        dst = torch.tensor([perm[i] for i in sorted(perm)], dtype=torch.long)
        with torch.no_grad():
            for w in (d_model.get_input_embeddings().weight, d_model.get_output_embeddings().weight):
                rows = w[src].clone()
                w[dst] = rows
    elif kind == "foreign":
        draft_tok = _sentencepiece_bpe(420)
        d_model = build(llama_config(vocab_size=len(draft_tok), num_hidden_layers=2), seed + 3, "llama", dtype)
    else:
        raise ValueError(f"unknown cross pair kind {kind!r}")
    if sharp != 1.0:  # both heads scaled alike (the pair wraps the draft's head: sharpen first)
        sharpen(t_model, sharp)
        sharpen(d_model, sharp)
    return ModelPair(t_model, d_model, target_tok, target_name=f"tiny-target ({kind})",
                     draft_name=f"tiny-draft ({kind})", draft_tokenizer=draft_tok)


def stand_in(draft: str = "default") -> ModelPair:
    """The tiny pair that stands in for a named pair in the app's test mode (no downloads): the
    tiny cross-tokenizer pair for a draft with another tokenizer than the default target's (a
    bundled one such as gemma-3-270m, or "tiny-cross"), else the tiny same-tokenizer pair."""
    from mirror_sd.models.bundled import DEFAULTS, bundled_model
    name = (draft or "").strip().lower()
    model = bundled_model(name)
    if not (name == "tiny-cross" or (model is not None and model not in DEFAULTS.values())):
        return tiny_pair()
    pair = cross_pair(0, "twin", dtype=torch.float32)
    pair.info = {"precision": "fp32", "dtype": "float32", **(pair.info or {}),
                 **{role: {"source": f"tiny (random, {how})", "device": "cpu"}
                    for role, how in (("target", "built in code"), ("draft", "another tokenizer"))}}
    return pair

