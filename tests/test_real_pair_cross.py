"""The bundled cross-tokenizer pair (Qwen2.5-Coder 1.5B target, Gemma 3 270M draft: another
tokenizer), fp32, greedy: SD and Mirror-SD reproduce transformers' own generate(), and the pair
check reports a real shared vocabulary."""
import pytest

import tiny
from mirror_sd.engine.events import Error, Finish
from mirror_sd.engine.pair_check import check_pair
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings

pytestmark = pytest.mark.real_pair

PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in two sentences why the sky is blue.",
]
NEW_TOKENS = 32


@pytest.fixture(scope="module")
def pair():
    from mirror_sd.models.loading import load_pair
    return load_pair("default", "gemma-3-270m")


def test_the_pair_is_bridged(pair):
    assert pair.cross and pair.draft_tokenizer is not None
    report = check_pair(pair, sample_tokens=16)
    assert report["cross"] and report["shared_tokens"] > 20_000
    assert 0.5 < report["coverage"] <= 1.0  # most of the target's own output can be drafted
    assert "no chat template" in report["prompt"]  # the base draft reads the user's text


@pytest.mark.parametrize("prompt", PROMPTS)
def test_cross_sd_and_mirror_equal_generate(pair, prompt):
    ids = pair.encode_prompt(prompt)
    reference = tiny.reference_greedy(pair.target, ids, NEW_TOKENS)  # transformers' generate()
    for method in ("sd", "mirror"):
        events = list(METHODS[method](pair, Settings(max_new_tokens=NEW_TOKENS)).generate(ids))
        assert not [e for e in events if isinstance(e, Error)]
        finish = events[-1]
        assert isinstance(finish, Finish)
        assert finish.token_ids == reference, method
        assert finish.stats["accepted_drafts"] > 0  # the bridged draft proposes what the target keeps
