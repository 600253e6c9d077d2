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
    for method, finish in tiny.assert_equal_generate(pair, prompt, NEW_TOKENS).items():
        assert finish.stats["mean_accepted"] > 1.5  # the pair is well matched (measured: 3.6-4.6)
        if method == "mirror":
            assert finish.stats["draft_hidden_fraction"] > 0.2  # the lanes really overlap
