"""The growing KV cache: the same logits as transformers' DynamicCache, bit for bit, through
appends, crops and external assignment; and it never writes into a tensor it was handed."""
import pytest
import torch
from transformers import DynamicCache

import tiny
from mirror_sd import kv_cache
from mirror_sd.kv_cache import GrowingCache, GrowingLayer


def drive(model, cache, ids):
    """Prefill, decode one by one, crop, verify a window: the lanes' pattern."""
    outs = []
    with torch.inference_mode():
        outs.append(model(torch.tensor([ids[:20]]), cache=cache, use_cache=True).logits)
        for t in ids[20:26]:
            outs.append(model(torch.tensor([[t]]), cache=cache, use_cache=True).logits)
        cache.crop(-4)
        outs.append(model(torch.tensor([ids[22:31]]), cache=cache, use_cache=True).logits)
        cache.crop(-1)
        outs.append(model(torch.tensor([ids[30:32]]), cache=cache, use_cache=True).logits)
    return outs


@pytest.mark.parametrize("kind", ["qwen", "llama"])
def test_growing_cache_gives_the_bits_of_dynamic_cache(kind, monkeypatch):
    monkeypatch.setattr(kv_cache, "MIN_ROOM", 8)  # force several regrowths
    model = tiny.target(0, kind=kind).float()
    ids = tiny.prompt(1, 40)
    ref_cache, cache = DynamicCache(config=model.config), GrowingCache(config=model.config)
    ref, got = drive(model, ref_cache, ids), drive(model, cache, ids)
    assert all(isinstance(layer, GrowingLayer) for layer in cache.layers)
    assert cache.get_seq_length() == ref_cache.get_seq_length() == 32
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
    for a, b in zip(ref_cache.layers, cache.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_a_tensor_handed_to_the_layer_is_never_written():
    layer = GrowingLayer()
    k = torch.randn(1, 2, 6, 4)
    layer.lazy_initialization(k, k)
    layer.keys, layer.values = k, k.clone()
    before = k.clone()
    layer.crop(-3)
    assert layer.get_seq_length() == 3
    new = torch.ones(1, 2, 1, 4)
    keys, _ = layer.update(new, new)
    assert torch.equal(k, before)  # the crop freed positions 3..5 of *its* copy only
    assert torch.equal(keys[..., :3, :], before[..., :3, :]) and torch.equal(keys[..., 3:, :], new)
