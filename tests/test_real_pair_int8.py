"""The default pair at the fast CPU precision: an int8 target (row-exact: per-row int8
activations and row-exact attention) with an int8-dyn draft. Greedy SD and Mirror-SD must give
exactly what transformers' own generate() gives on that same int8 target, and the int8
target's verify forward must equal one-token decoding bit for bit."""
import pytest
import torch
from transformers import DynamicCache

import tiny
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.events import Error
from mirror_sd.engine.registry import METHODS

pytestmark = pytest.mark.real_pair

PROMPTS = [
    "Write a Python function that merges two sorted lists.",
    "Summarize in two sentences what a hash table is.",
]
NEW_TOKENS = 48


@pytest.fixture(scope="module")
def pair():
    from mirror_sd.models.loading import load_pair
    return load_pair("default", "default", precision="int8", draft_precision="int8-dyn")


def test_verify_forward_equals_decoding_bit_for_bit(pair):
    """A 6-token verify forward after the prompt's prefill gives, bit for bit, the logits of
    decoding those 6 tokens one at a time on the same cache."""
    ids = pair.encode_prompt(PROMPTS[0])
    model = pair.target
    logits = {}
    with torch.inference_mode():
        for one_by_one in (False, True):
            cache = DynamicCache(config=model.config)
            model(torch.tensor([ids[:-6]]), cache=cache)
            window = torch.tensor([ids[-6:]])
            logits[one_by_one] = (torch.cat([model(window[:, i:i + 1], cache=cache).logits[0]
                                             for i in range(6)]) if one_by_one
                                  else model(window, cache=cache).logits[0])
    assert torch.equal(logits[False], logits[True])


@pytest.mark.parametrize("prompt", PROMPTS)
def test_sd_and_mirror_equal_generate_at_int8(pair, prompt):
    ids = pair.encode_prompt(prompt)
    reference = tiny.reference_greedy(pair.target, ids, NEW_TOKENS)  # transformers' generate()
    for method in ("ar", "sd", "mirror"):
        events = list(METHODS[method](pair, Settings(max_new_tokens=NEW_TOKENS, gamma=5)).generate(ids))
        assert not [e for e in events if isinstance(e, Error)]
        assert events[-1].token_ids == reference, method
