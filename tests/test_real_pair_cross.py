"""The bundled cross-tokenizer pair (Qwen2.5-Coder 1.5B target, Gemma 3 270M draft: another
tokenizer), fp32, greedy: SD and Mirror-SD reproduce transformers' own generate(), and the pair
check reports a real shared vocabulary."""
import pytest

import tiny
from mirror_sd.engine.pair_check import check_pair
from test_real_pair import PROMPTS

pytestmark = pytest.mark.real_pair

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


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_cross_sd_and_mirror_equal_generate(pair, prompt):
    for finish in tiny.assert_equal_generate(pair, prompt, NEW_TOKENS).values():
        assert finish.stats["accepted_drafts"] > 0  # the bridged draft proposes what the target keeps
