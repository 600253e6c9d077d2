"""Tiny in-memory model pairs for the engine tests (no downloads, float64 for exactness).

- `qwen_config()` / `llama_config()`: 4-layer, 97-token configs (overridable).
- `build(config, seed)`: a seeded random model, `.double().eval()`.
- `pair_same(seed)`: draft == target (an exact copy; `shared=True` uses the same object).
- `pair_random(seed)`: an unrelated random draft (little or nothing accepted).
- `pair_perturbed(seed)`: the draft is the target plus small weight noise (partial acceptance).
- `reference_greedy(model, prompt, n)`: transformers' own `generate(do_sample=False)`, the
  independent reference every losslessness test compares against.
- `eos_target(seed)`: a target whose config has an eos token that its greedy output reaches
  after a few tokens, so generation stops early.
- `cached_pair(kind, seed, arch)` / `cached_reference(...)`: built once per session.
- `sharpen(model, factor)`: a peaked LM head (same argmax), for confident drafts.
- `run(decoder_cls, pair, prompt, **settings)`: all events of one run, as a list.
- `chi_square(counts, probs)` + `CHI2_CRIT_001`: Pearson's test without scipy.
- `one_torch_thread`: a module fixture (import it into a test module to use it).
"""
from __future__ import annotations

import copy
import functools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from mirror_sd.engine.decoding import Settings
from mirror_sd.engine.events import Finish
from mirror_sd.models.pair import ModelPair

VOCAB = 97
LAYERS = 4
CONTEXT = 256

# Larger than the default 0.02 (which gives near-uniform outputs over 97 tokens): the tiny
# models get input-dependent distributions, argmax margins well above float64 rounding, and
# draft/target disagreements that matter.
INIT_RANGE = 0.2


def qwen_config(**over) -> Qwen2Config:
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
              tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None,
              initializer_range=INIT_RANGE)
    kw.update(over)
    return Qwen2Config(**kw)


def llama_config(**over) -> LlamaConfig:
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
              tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None,
              initializer_range=INIT_RANGE)
    kw.update(over)
    return LlamaConfig(**kw)


@pytest.fixture(scope="module", autouse=False)
def one_torch_thread():
    """One torch CPU thread while a test module runs (as placement.configure_cpu_threads does
    for two CPU lanes): on a small shared machine two intra-op threads per lane fight over
    the cores and a tiny forward takes 100x longer. Import it into a test module to use it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


CONFIGS = {"qwen": qwen_config, "llama": llama_config}
MODELS = {"qwen": Qwen2ForCausalLM, "llama": LlamaForCausalLM}


def build(config, seed: int, kind: str | None = None):
    """A seeded random causal LM in float64, eval mode."""
    kind = kind or ("llama" if isinstance(config, LlamaConfig) else "qwen")
    torch.manual_seed(seed)
    model = MODELS[kind](config).double().eval()
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


@functools.lru_cache(maxsize=None)
def cached_pair(pair_kind: str, seed: int, arch: str = "qwen") -> ModelPair:
    """One pair per (kind, seed, architecture) for a whole test session (the decoders never
    change weights; Mirror removes its hook when a run ends)."""
    return PAIRS[pair_kind](seed, arch)


@functools.lru_cache(maxsize=None)
def cached_reference(seed: int, arch: str, prompt_ids: tuple, n: int) -> list[int]:
    """reference_greedy of the seed's target (the same target for every pair kind)."""
    return reference_greedy(cached_pair("same", seed, arch).target, list(prompt_ids), n)


def prompt(seed: int, length: int, vocab: int = VOCAB) -> list[int]:
    g = torch.Generator().manual_seed(1_000 + 7 * seed + length)
    return torch.randint(0, vocab, (length,), generator=g).tolist()


@torch.inference_mode()
def reference_greedy(model, prompt_ids: list[int], n: int) -> list[int]:
    """transformers' own greedy decoding: the new tokens (eos included when it stops early)."""
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                         do_sample=False)
    return out[0, len(prompt_ids):].tolist()


def eos_target(seed: int, prompt_ids: list[int], kind: str = "qwen", at_least: int = 4,
               n: int = 40):
    """A target whose greedy output (after `prompt_ids`) reaches its eos token at index
    >= at_least and < n - 5; returns (model, eos_id, index of the eos in the new tokens).

    The eos is chosen from the plain model's own greedy output (its first occurrence), then
    set on the config and the generation config: the weights, hence the greedy text up to the
    eos, are unchanged."""
    model = target(seed, kind)
    free = reference_greedy(model, prompt_ids, n)
    for i, tok in enumerate(free):
        if at_least <= i < n - 5 and tok not in free[:i]:
            model.config.eos_token_id = tok
            _plain_generation_config(model)
            return model, tok, i
    raise AssertionError(f"no usable eos token in {free}")


def run(decoder_cls, pair: ModelPair, prompt_ids: list[int], cancel=None, **settings) -> list:
    """All events of one run."""
    return list(decoder_cls(pair, Settings(**settings)).generate(prompt_ids, cancel))


def finish(events) -> Finish:
    assert isinstance(events[-1], Finish), f"last event is {type(events[-1]).__name__}, not Finish"
    return events[-1]


# chi-square critical values at alpha = 0.001, by degrees of freedom
CHI2_CRIT_001 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322,
                 8: 26.124, 9: 27.877, 10: 29.588, 11: 31.264, 12: 32.909, 13: 34.528,
                 14: 36.123, 15: 37.697}


def chi_square(counts: list[int], probs: list[float]) -> tuple[float, int]:
    """Pearson statistic and dof (bins with expected < 5 pooled; zero-probability bins must be
    empty, which is asserted)."""
    n = sum(counts)
    for c, p in zip(counts, probs):
        if p == 0:
            assert c == 0, f"a token of probability 0 was emitted {c} times"
    bins, pooled_c, pooled_e = [], 0, 0.0
    for c, p in zip(counts, probs):
        if p == 0:
            continue
        if n * p < 5:
            pooled_c, pooled_e = pooled_c + c, pooled_e + n * p
        else:
            bins.append((c, n * p))
    if pooled_e >= 5 or (pooled_e > 0 and not bins):
        bins.append((pooled_c, pooled_e))
    elif pooled_e > 0:  # still too small on its own: merge into the smallest bin
        i = min(range(len(bins)), key=lambda j: bins[j][1])
        bins[i] = (bins[i][0] + pooled_c, bins[i][1] + pooled_e)
    assert len(bins) >= 2, "need at least two bins"
    stat = sum((c - e) ** 2 / e for c, e in bins)
    return stat, len(bins) - 1


@torch.inference_mode()
def exact_marginals(model, prompt_ids: list[int], temperature: float, vocab: int):
    """The target's exact distributions of the 1st and 2nd sampled tokens (warped softmax)."""
    def warp(logits):
        return torch.softmax(logits.double() / temperature, dim=-1)
    p1 = warp(model(torch.tensor([prompt_ids])).logits[0, -1])
    ctx = torch.tensor([prompt_ids + [v] for v in range(vocab)])
    return p1.tolist(), (p1[:, None] * warp(model(ctx).logits[:, -1])).sum(0).tolist()


def assert_first_two_follow_the_target(decoder_cls, pair, prompt_ids: list[int], vocab: int,
                                       runs: int, temperature: float, **settings) -> None:
    """Sample 2 tokens `runs` times (seeds 0..runs-1) and chi-square both against the target."""
    p1, p2 = exact_marginals(pair.target, prompt_ids, temperature, vocab)
    first, second = [0] * vocab, [0] * vocab
    for seed in range(runs):
        s = Settings(max_new_tokens=2, temperature=temperature, seed=seed, **settings)
        tokens = finish(list(decoder_cls(pair, s).generate(prompt_ids))).token_ids
        first[tokens[0]] += 1
        second[tokens[1]] += 1
    for name, counts, probs in (("1st", first, p1), ("2nd", second, p2)):
        stat, dof = chi_square(counts, probs)
        assert stat < CHI2_CRIT_001[dof], (name, counts, [round(runs * q, 1) for q in probs], stat)


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
