"""The bundled default pair (Qwen2.5-Coder 1.5B target, 0.5B draft), fp32, greedy:
plain SD and Mirror-SD must reproduce transformers' own generate() token for token."""
import pytest

import tiny
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.events import Error, Finish
from mirror_sd.engine.registry import METHODS

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


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("prompt", PROMPTS)
def test_sd_and_mirror_equal_generate(pair, prompt):
    ids = pair.encode_prompt(prompt)
    reference = tiny.reference_greedy(pair.target, ids, NEW_TOKENS)  # transformers' generate()
    for method in ("sd", "mirror"):
        events = list(METHODS[method](pair, Settings(max_new_tokens=NEW_TOKENS)).generate(ids))
        assert not [e for e in events if isinstance(e, Error)]
        finish = events[-1]
        assert isinstance(finish, Finish)
        got = finish.token_ids
        i = first_difference(got, reference)
        assert got == reference, (f"{method}: first mismatch at token {i}: "
                                  f"{pair.decode(got[i:i + 5])!r} vs {pair.decode(reference[i:i + 5])!r}")
        assert finish.stats["mean_accepted"] > 1.5  # the pair is well matched (measured: 3.6-4.6)
        if method == "mirror":
            assert finish.stats["draft_hidden_fraction"] > 0.2  # the lanes really overlap
