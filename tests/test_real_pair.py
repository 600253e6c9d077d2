"""The bundled default pair (Qwen2.5-Coder 1.5B target, 0.5B draft), fp32, greedy:
plain SD and Mirror-SD must reproduce transformers' own generate() token for token."""
import pytest

import tiny

pytestmark = pytest.mark.real_pair

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in two sentences why the sky is blue.",
    "Write a SQL query that returns the ten most recent orders with their customer names.",
]
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def pair():
    from mirror_sd.models.loading import load_pair
    return load_pair("default", "default")


@pytest.mark.parametrize("prompt", PROMPTS)
def test_sd_and_mirror_equal_generate(pair, prompt):
    # lane_overlap always: Mirror-SD overlaps every step (under auto, a 2-core machine runs
    # most steps one lane after the other, gate.py)
    for method, finish in tiny.assert_equal_generate(pair, prompt, NEW_TOKENS, lane_overlap="always").items():
        assert finish.stats["mean_accepted"] > 1.5  # the pair is well matched (measured: 3.6-4.6)
        if method == "mirror":
            assert finish.stats["draft_hidden_fraction"] > 0.2  # the lanes really overlap


def test_adaptive_windows_equal_generate_and_grow_past_gamma(pair):
    """The adaptive policy on the real pair: Mirror-SD's windows, branches included, grow past
    gamma as SD's do, and both still give generate()'s tokens."""
    out = tiny.assert_equal_generate(pair, PROMPTS[0], NEW_TOKENS, window="adaptive", lane_overlap="always")
    lengths = {m: f.stats["window_lengths"] for m, f in out.items()}
    assert max(lengths["mirror"]) > 4 and max(lengths["sd"]) > 4, lengths  # gamma 4
    assert out["mirror"].stats["hits"] > 0


def test_mirror_under_the_overlap_gate_equals_generate(pair):
    """Under lane_overlap auto (the default) on the real pair, steps overlapped and steps with
    the lanes one after the other give generate()'s tokens, and the stats say how the run went."""
    out = tiny.assert_equal_generate(pair, PROMPTS[0], NEW_TOKENS, methods=("mirror",), window="adaptive")
    assert "lanes overlapped in" in out["mirror"].stats["lane_split"]


def test_the_default_windows_and_proposer_equal_generate(pair):
    """The command line's, the benchmark's and the app's defaults (priced windows, prompt lookup
    beside the draft model, the overlap gate) on the real pair give generate()'s tokens."""
    from mirror_sd.engine.windows import DEFAULT_PROPOSER, DEFAULT_WINDOW
    tiny.assert_equal_generate(pair, PROMPTS[2], NEW_TOKENS, window=DEFAULT_WINDOW, proposer=DEFAULT_PROPOSER)
