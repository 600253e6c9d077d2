"""Test helpers over the tiny in-memory models of `mirror_sd.models.tiny` (re-exported here,
so tests `import tiny` for both).

- `reference_greedy(model, prompt, n)`: transformers' own `generate(do_sample=False)`, the
  independent reference every losslessness test compares against.
- `eos_target(seed)`: a target whose config has an eos token that its greedy output reaches
  after a few tokens, so generation stops early.
- `cached_pair(kind, seed, arch)` / `cached_reference(...)`: built once per session.
- `run(decoder_cls, pair, prompt, **settings)`: all events of one run, as a list.
- `chi_square(counts, probs)` + `CHI2_CRIT_001`: Pearson's test without scipy.
- `one_torch_thread`: a module fixture (import it into a test module to use it).
"""
from __future__ import annotations

import functools
import threading
import time

import pytest
import torch

from mirror_sd.engine.events import Finish
from mirror_sd.engine.settings import Settings
from mirror_sd.models.tiny import (CONFIGS, CONTEXT, INIT_RANGE, LAYERS, MODELS, PAIRS,  # noqa: F401
                                   PERTURB_SCALE, VOCAB, _plain_generation_config, build,
                                   llama_config, pair_perturbed, pair_random, pair_same, perturb,
                                   qwen_config, sharpen, target, tiny_pair, tiny_tokenizer)


@pytest.fixture(scope="module", autouse=False)
def one_torch_thread():
    """One torch CPU thread while a test module runs (as placement.configure_cpu_threads does
    for two CPU lanes): on a small shared machine two intra-op threads per lane fight over
    the cores and a tiny forward takes 100x longer. Import it into a test module to use it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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


def assert_equal_generate(pair, prompt: str, n: int, methods=("sd", "mirror"), **settings) -> dict:
    """Greedy runs of `methods` on `prompt` (with `settings`) give transformers' own generate()
    output token for token (the first difference is shown); returns each method's Finish."""
    from mirror_sd.engine.events import Error
    from mirror_sd.engine.registry import METHODS
    ids = pair.encode_prompt(prompt)
    reference = reference_greedy(pair.target, ids, n)
    out = {}
    for method in methods:
        events = list(METHODS[method](pair, Settings(max_new_tokens=n, **settings)).generate(ids))
        assert not [e for e in events if isinstance(e, Error)]
        got = finish(events).token_ids
        i = next((i for i, (x, y) in enumerate(zip(got, reference)) if x != y), min(len(got), len(reference)))
        assert got == reference, (f"{method}: first mismatch at token {i}: "
                                  f"{pair.decode(got[i:i + 5])!r} vs {pair.decode(reference[i:i + 5])!r}")
        out[method] = events[-1]
    return out


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


def draft_lane_threads():
    """Mirror-SD draft-lane threads still alive (a finished or cancelled run leaves none)."""
    return [t for t in threading.enumerate() if t.name == "mirror-draft-lane" and t.is_alive()]


def wait_no_draft_lane(timeout=3.0):
    deadline = time.monotonic() + timeout
    while draft_lane_threads() and time.monotonic() < deadline:
        for t in draft_lane_threads():
            t.join(0.1)
    return draft_lane_threads()
