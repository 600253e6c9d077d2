"""fp32 on a CPU: linears on oneDNN with the weights packed once (cpu/linears.OneDNNLinear).

The reference is torch's own fp32 linear on the same weights: outputs agree to fp32 rounding
(not bit for bit: the sums run in another order), for every row count a verify uses, and a
whole converted model gives transformers' greedy tokens."""
import pytest
import torch

import tiny
from mirror_sd.cpu import lean_layers
from mirror_sd.cpu.linears import FusedPart, OneDNNLinear, onednn_available, onednn_fp32
from mirror_sd.engine.mirror.early_exit import exit_head
from mirror_sd.models.precision import KernelChoice, apply_precision, float_head

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN linear")


def layer(n_in=96, n_out=40, bias=True, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out, bias=bias)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13])
def test_agrees_with_torchs_linear(rows, bias):
    ref = layer(bias=bias)
    fast = OneDNNLinear(ref)
    x = torch.randn(1, rows, 96, generator=torch.Generator().manual_seed(rows))
    with torch.inference_mode():
        want, got = ref(x), fast(x)
    assert got.shape == want.shape == (1, rows, 40)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the check can fail: another layer's output is far off
    assert not torch.allclose(OneDNNLinear(layer(seed=1))(x), want, atol=1e-3)


def test_weight_rows_and_refusals():
    ref = layer()
    fast = OneDNNLinear(ref)
    assert torch.equal(fast.weight, ref.weight.detach())  # packing loses nothing
    ids = torch.tensor([3, 0, 39])
    part = fast.rows(ids)
    x = torch.randn(4, 96)
    torch.testing.assert_close(part(x), ref(x)[:, ids].detach(), rtol=1e-5, atol=1e-5)
    assert (part.in_features, part.out_features) == (96, 3)
    with pytest.raises(TypeError, match="fp32 CPU"):
        fast(x.double())


def test_fp32_precision_converts_cpu_models_and_leaves_others():
    model = apply_precision(tiny.build(tiny.qwen_config(), 0).float(), "fp32", "target")
    kinds = {type(m).__name__ for m in model.modules()}
    assert "OneDNNLinear" in kinds and "Linear" not in kinds
    attn = model.model.layers[0].self_attn
    assert isinstance(attn.q_proj, FusedPart) and attn.q_proj._group is attn.v_proj._group
    assert lean_layers.installed(model) == tiny.LAYERS
    assert float_head(model.get_output_embeddings())
    # switched off, float64, and not a CPU model: torch's own layers
    off = apply_precision(tiny.build(tiny.qwen_config(), 0).float(), "fp32", "target",
                          KernelChoice(onednn=False))
    assert not any(isinstance(m, OneDNNLinear) for m in off.modules())
    f64 = tiny.build(tiny.qwen_config(), 0)
    assert onednn_fp32(f64) is f64 and not any(isinstance(m, OneDNNLinear) for m in f64.modules())


def test_a_converted_model_gives_transformers_greedy_tokens_and_close_logits():
    stock = tiny.build(tiny.llama_config(), 2).float()
    converted = onednn_fp32(tiny.build(tiny.llama_config(), 2).float())
    ids = torch.randint(0, tiny.VOCAB, (1, 9), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        torch.testing.assert_close(converted(ids).logits, stock(ids).logits, rtol=1e-4, atol=1e-4)
        want = stock.generate(ids, max_new_tokens=16, do_sample=False)
        got = converted.generate(ids, max_new_tokens=16, do_sample=False)
    assert torch.equal(got, want)


def test_the_early_exit_gets_an_int8_copy_of_a_oneDNN_head():
    model = apply_precision(tiny.build(tiny.qwen_config(), 5).float(), "fp32", "target")
    head = model.get_output_embeddings()
    assert isinstance(head, OneDNNLinear)
    exact, int8 = exit_head(model, "exact"), exit_head(model, "int8")
    assert (exact.kind, int8.kind) == ("exact", "int8")
    h = torch.randn(3, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want = head(h)
        got = int8.head(h)
    assert got.shape == want.shape
    assert (got - want).abs().max() < 0.05 * want.abs().max()  # int8: close, not equal
