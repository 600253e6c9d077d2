"""lean_layers: the same bits as transformers' own decoder layer, with fewer ops.

The reference is transformers' forward itself (the lean forward uninstalled) on the same
converted model: logits of a prefill, of decode steps and of a multi-token verify forward must
be equal bit for bit, for every CPU precision and both architectures the module knows."""
import copy

import pytest
import torch
from transformers import DynamicCache

import tiny
from mirror_sd.cpu import lean_layers
from mirror_sd.models.precision import KernelChoice
from mirror_sd.models.precision import apply_precision as convert


def apply_precision(model, kind, role):
    """These tests are about the lean forward: fast_layers (installed over it on the AVX2
    kernels' layers) stays off."""
    return convert(model, kind, role, KernelChoice(fast_layers=False))


def fp32_model(arch, seed, **over):
    config = (tiny.qwen_config if arch == "qwen" else tiny.llama_config)(**over)
    return tiny.build(config, seed).float()


@torch.inference_mode()
def logits_of_a_run(model, ids):
    """Prefill 7 tokens, decode 3 one at a time, verify 4 in one forward."""
    cache = DynamicCache(config=model.config)
    out = [model(ids[:, :7], past_key_values=cache, use_cache=True).logits]
    out += [model(ids[:, 7 + i:8 + i], past_key_values=cache, use_cache=True).logits
            for i in range(3)]
    out.append(model(ids[:, 10:14], past_key_values=cache, use_cache=True).logits)
    return out


@pytest.mark.parametrize("arch", ["qwen", "llama"])
@pytest.mark.parametrize("kind", ["fp32", "fp16w", "int8", "int8-dyn"])
def test_lean_layers_give_transformers_bits(arch, kind):
    model = apply_precision(fp32_model(arch, seed=3), kind, "target")
    assert lean_layers.installed(model) == tiny.LAYERS
    ids = torch.randint(0, tiny.VOCAB, (1, 14), generator=torch.Generator().manual_seed(5))
    lean = logits_of_a_run(model, ids)
    lean_layers.uninstall(model)
    assert lean_layers.installed(model) == 0
    stock = logits_of_a_run(model, ids)
    for a, b in zip(lean, stock):
        assert torch.equal(a, b), (a - b).abs().max()
    # a sanity check that the comparison can fail: another model's logits differ
    other = apply_precision(fp32_model(arch, seed=4), kind, "target")
    assert not torch.equal(logits_of_a_run(other, ids)[0], stock[0])


def test_greedy_generate_and_batches_match():
    """generate() (its own masks and position ids) and a padded batch of two give the same
    tokens and logits through the lean layers as through transformers' layers."""
    model = apply_precision(fp32_model("qwen", seed=6), "int8", "draft")
    ids = torch.randint(0, tiny.VOCAB, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding in the second row
    with torch.inference_mode():
        lean_gen = model.generate(ids[:1], max_new_tokens=12, do_sample=False)
        lean_batch = model(ids, attention_mask=mask).logits
        lean_layers.uninstall(model)
        stock_gen = model.generate(ids[:1], max_new_tokens=12, do_sample=False)
        stock_batch = model(ids, attention_mask=mask).logits
    assert torch.equal(lean_gen, stock_gen)
    assert torch.equal(lean_batch, stock_batch)


def test_hooks_on_layers_still_fire_and_training_falls_back():
    model = apply_precision(fp32_model("llama", seed=7), "fp32", "target")
    seen = []
    model.model.layers[1].register_forward_hook(lambda m, a, out: seen.append(out.shape))
    ids = torch.randint(0, tiny.VOCAB, (1, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        eval_logits = model(ids).logits
        model.train()  # dropout 0 in these configs: the stock forward gives the same values
        train_logits = model(ids).logits
    assert len(seen) == 2 and seen[0][:2] == (1, 5)
    assert torch.equal(eval_logits, train_logits)


def test_what_it_leaves_alone():
    """float64 models (tiny tests), sliding-window layers and other layer types keep
    transformers' forward."""
    assert lean_layers.install(tiny.build(tiny.qwen_config(), 0)) == 0  # float64
    sliding = fp32_model("qwen", 0, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    assert lean_layers.install(copy.deepcopy(sliding)) == 0
    assert lean_layers.install(torch.nn.Sequential(torch.nn.Linear(2, 2))) == 0
