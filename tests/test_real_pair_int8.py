"""The default pair at the fast CPU precision: an int8 target (row-exact: per-row int8
activations and row-exact attention) with an int8-dyn draft. Greedy SD and Mirror-SD must give
exactly what transformers' own generate() gives on that same int8 target, and the int8
target's verify forward must equal one-by-one decoding bit for bit."""
import pytest
import torch
from transformers import DynamicCache

import tiny
from mirror_sd.engine.decoding import Settings
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
    ids = pair.encode_prompt(PROMPTS[0])
    model = pair.target
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(torch.tensor([ids[:-6]]), cache=cache)
        window = model(torch.tensor([ids[-6:]]), cache=cache).logits[0]
        cache = DynamicCache(config=model.config)
        whole = model(torch.tensor([ids]), cache=cache).logits[0, -6:]
    assert torch.equal(window, whole)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_sd_and_mirror_equal_generate_at_int8(pair, prompt):
    ids = pair.encode_prompt(prompt)
    reference = tiny.reference_greedy(pair.target, ids, NEW_TOKENS)  # transformers' generate()
    for method in ("ar", "sd", "mirror"):
        events = list(METHODS[method](pair, Settings(max_new_tokens=NEW_TOKENS, gamma=5)).generate(ids))
        assert not [e for e in events if isinstance(e, Error)]
        assert events[-1].token_ids == reference, method
