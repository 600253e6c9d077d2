"""Cross-tokenizer pairs are lossless: SD and Mirror-SD with a draft of another tokenizer give
the target's own output.

Greedy: the token ids equal transformers' `generate(do_sample=False)` of the target (cut after
the first eos, where the decoders stop) for the tiny cross pairs ("twin": the target's
vocabulary under permuted ids, the draft close to the target; "foreign": a SentencePiece-style
vocabulary and a random draft; "sliding": the foreign vocabulary with a Gemma 3 draft whose
local layers see 4 positions), fixed and adaptive windows, several seeds and prompts. The twin
must also accept drafts, so that a bridge proposing nothing (or the wrong tokens) fails here
too, and greedy Mirror-SD must verify exactly SD's windows (its precomputed branches are the
draft's serial windows). Sampling: the first two tokens at temperature 1 follow the target's
exact marginals (chi-square at alpha = 0.001, tests/tiny.py).
"""
from __future__ import annotations

import functools

import pytest
import torch

from mirror_sd.engine.events import Verify
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings
from mirror_sd.models.tiny import cross_pair

import tiny
from test_cross_tokenizer import cached_cross
from tiny import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_NEW = 24
GAMMA = 4
SEEDS = (0, 1, 2)
PROMPTS = ("def add(a, b): return a + b", "Hello world! Caf\u00e9 \u2014 \u00fcber. 42 + 17 =")


@torch.inference_mode()
def target_greedy(pair, prompt_ids: list[int], n: int) -> list[int]:
    """The target's own generate(), n new tokens, cut after the first eos of the pair (the
    tiny targets have no eos of their own; the tokenizer's stops the decoders)."""
    ids = torch.tensor([prompt_ids])
    out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                               min_new_tokens=n, do_sample=False)[0, len(prompt_ids):].tolist()
    stops = [i for i, t in enumerate(out) if t in pair.eos_token_ids]
    return out[:stops[0] + 1] if stops else out


@functools.lru_cache(maxsize=None)
def case(kind: str, seed: int, text: str) -> tuple[list[int], list[int]]:
    pair = cached_cross(kind, seed)
    prompt_ids = pair.encode_prompt(text)
    return prompt_ids, target_greedy(pair, prompt_ids, N_NEW)


@functools.lru_cache(maxsize=None)
def greedy_runs(method: str, kind: str, window: str):
    """(mismatches, Finish of every run, drafted windows of every run) over all seeds and prompts."""
    mismatches, finishes, windows = [], [], []
    for seed in SEEDS:
        pair = cached_cross(kind, seed)
        for text in PROMPTS:
            prompt_ids, reference = case(kind, seed, text)
            s = Settings(max_new_tokens=N_NEW, gamma=GAMMA, window=window)
            events = list(METHODS[method](pair, s).generate(prompt_ids))
            fin = tiny.finish(events)
            finishes.append(fin)
            windows.append([v.drafted for v in events if isinstance(v, Verify)])
            if fin.token_ids != reference:
                mismatches.append((seed, text, fin.token_ids, reference))
    return mismatches, finishes, windows


@pytest.mark.parametrize("window", ["fixed", "adaptive"])
@pytest.mark.parametrize("kind", ["twin", "foreign", "sliding"])
@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_cross_greedy_is_the_targets_own_output(method, kind, window):
    mismatches, finishes, windows = greedy_runs(method, kind, window)
    assert not mismatches, "\n".join(f"seed {s} {t!r}:\n  got  {g}\n  want {w}" for s, t, g, w in mismatches)
    assert any(len(f.token_ids) == N_NEW for f in finishes)
    if kind == "twin":  # the draft is the target under other ids: most steps commit several tokens
        tokens = sum(f.stats["new_tokens"] for f in finishes)
        forwards = sum(f.stats["target_forwards"] for f in finishes)
        assert tokens / forwards > 1.4, (tokens, forwards)
        assert sum(f.stats["accepted_drafts"] for f in finishes) > 0
    if method == "mirror" and kind != "sliding":
        assert sum(f.stats["hits"] for f in finishes) > 0, "no Mirror-SD step reused a precomputed branch"
    if method == "mirror" and window == "fixed" and kind != "sliding":
        assert_mirror_verifies_sds_windows(kind)


def assert_mirror_verifies_sds_windows(kind: str) -> None:
    """A precomputed branch is the window the draft would have rolled out serially (hits
    change speed only): greedy Mirror-SD verifies exactly SD's windows."""
    mirror, sd = greedy_runs("mirror", kind, "fixed")[2], greedy_runs("sd", kind, "fixed")[2]
    steps = [(run, i) for run, (a, b) in enumerate(zip(mirror, sd)) for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert mirror == sd, f"Mirror-SD windows differ from SD's at (run, step) {steps}"


def test_mirror_branches_of_a_sliding_window_draft_are_its_serial_windows():
    """A draft with sliding-window layers (Gemma 3): a branch row's entries sit after the
    base cache, so its local layers must see the window by position, as the serial rollout does."""
    assert_mirror_verifies_sds_windows("sliding")


@pytest.mark.parametrize("method", ["sd", "mirror"])
def test_an_exact_twin_is_accepted_in_full(method):
    """A draft that is the target itself under permuted ids proposes the target's argmax
    (renormalising over the shared tokens keeps it): every drafted token is accepted."""
    pair = cross_pair(0, "twin", draft_noise=0.0)
    prompt_ids = pair.encode_prompt(PROMPTS[0])
    fin = tiny.finish(list(METHODS[method](pair, Settings(max_new_tokens=N_NEW, gamma=GAMMA)).generate(prompt_ids)))
    assert fin.token_ids == target_greedy(pair, prompt_ids, N_NEW)
    assert fin.stats["acceptance_rate"] == 1.0
    assert fin.stats["mean_accepted"] > GAMMA


SAMPLE_CASES = [  # method, kind, gamma, runs
    ("sd", "twin", 2, 400),
    ("mirror", "twin", 1, 400),
    ("sd", "foreign", 2, 400),
    ("mirror", "foreign", 1, 400),
]


SAMPLE_PROMPT = "def add(a"
PEAK = 0.3  # the target's most likely first token at least this likely: a chi-square with power


@functools.lru_cache(maxsize=None)
def peaked_cross(kind: str):
    """A cross pair whose target has a few likely next tokens (near-uniform outputs spread 400
    draws over hundreds of bins): target and draft heads sharpened alike until the target's
    first token reaches PEAK, whatever sharpness the pair was built with."""
    for k in range(8):
        pair = cross_pair(0, kind, sharp=1.5 ** k)
        prompt_ids = pair.tokenizer(SAMPLE_PROMPT)["input_ids"]
        with torch.inference_mode():
            top = float(torch.softmax(pair.target(torch.tensor([prompt_ids])).logits[0, -1], -1).max())
        if top >= PEAK:
            return pair, prompt_ids
    raise AssertionError(f"the target's first token stays flat (top probability {top:.3f})")


@pytest.mark.parametrize("method,kind,gamma,runs", SAMPLE_CASES, ids=[f"{c[0]}-{c[1]}" for c in SAMPLE_CASES])
def test_cross_sampling_follows_the_target(method, kind, gamma, runs):
    pair, prompt_ids = peaked_cross(kind)
    tiny.assert_first_two_follow_the_target(METHODS[method], pair, prompt_ids, pair.bridge.target_vocab, runs,
                                            1.0, gamma=gamma, branch_budget=3, kappa=4)
