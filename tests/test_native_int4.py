"""native_int4: 4-bit weights in groups of 32, 8-bit activations per row (AVX2 kernel)."""
import copy
import io

import pytest
import torch

from mirror_sd.cpu import linears as cpu_kernels
from mirror_sd.cpu import int8 as native_int8
from mirror_sd.cpu.int4 import MAX_IN_FEATURES, NativeInt4Linear

from test_native_int8 import assert_rows_independent, layer, needs_kernel

pytestmark = needs_kernel


@pytest.mark.parametrize("in_f", [7, 32, 64, 100, 896, 1000])  # K below, at and off 64
@pytest.mark.parametrize("bias", [False, True])
def test_each_row_has_its_own_bits_in_any_batch(in_f, bias):
    assert_rows_independent(NativeInt4Linear(layer(70, in_f, bias)), in_f)


def test_weights_on_a_16_level_grid_per_group():
    """What the kernel multiplies by (dequantized) is within a step of each weight (half a step
    but at a range's clipped end); each group of 32 holds at most 16 distinct values; and the
    output is those weights times the 8-bit activations, up to the activations' rounding."""
    lin = layer(300, 512, True)
    lin.weight.data[:, 7] *= 20  # an outlier input channel, as real layers have
    q = NativeInt4Linear(lin)
    w = q.dequantized()
    groups = w.view(300, 16, 32)
    assert max(len(torch.unique(g)) for g in groups.reshape(-1, 32)) <= 16
    orig = lin.weight.detach().view(300, 16, 32)
    step = (orig.amax(-1).clamp(min=0) - orig.amin(-1).clamp(max=0)) / 15
    err = (groups - orig).abs() / step[..., None]
    assert err.max() <= 1.05 and err.mean() < 0.3
    x = torch.randn(5, 512)
    with torch.no_grad():
        ref = lin(x)
        err = (q(x) - ref).norm() / ref.norm()
        kernel_vs_its_weights = (q(x) - (x @ w.T + lin.bias)).norm() / ref.norm()
    assert err < 0.1  # 4-bit weights: about 6% on Gaussian weights
    assert kernel_vs_its_weights < 0.01  # the 8-bit activations add little


def test_weights_already_on_the_grid_come_back_exactly():
    """Each group D * sc_g * (q - z_g) with q spanning 0..15 (sc_g, z_g small integers, D a power
    of two): quantizing gives the same weights back, bit for bit."""
    g = torch.Generator().manual_seed(3)
    n, k = 6, 128
    q = torch.randint(0, 16, (n, k), generator=g).float()
    q[:, ::32] = 0
    q[:, 1::32] = 15
    sc = torch.randint(1, 256, (n, k // 32), generator=g).float()
    sc[:, 0] = 255
    z = torch.randint(0, 16, (n, k // 32), generator=g).float()
    lin = torch.nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.copy_(2.0 ** -12 * sc.repeat_interleave(32, 1) * (q - z.repeat_interleave(32, 1)))
    assert torch.equal(NativeInt4Linear(lin).dequantized(), lin.weight.detach())


def test_zero_and_non_finite_rows():
    lin = NativeInt4Linear(layer(16, 40, True))
    x = torch.zeros(3, 40)
    x[1, 3] = float("nan")
    x[2, 5] = 2.0
    y = lin(x)
    assert torch.equal(y[0], lin.bias)
    assert torch.isnan(y[1]).all()
    assert torch.isfinite(y[2]).all()


def test_deep_copies_saves_and_slices_rows():
    lin = NativeInt4Linear(layer(200, 96, True))
    x = torch.randn(3, 96)
    assert torch.equal(copy.deepcopy(lin)(x), lin(x))
    torch.save(lin.state_dict(), io.BytesIO())
    ids = torch.tensor([0, 5, 77, 199])
    assert torch.equal(cpu_kernels.output_rows(lin, ids)(x), lin(x)[:, ids])
    assert "4-bit" in repr(lin) and lin.in_features == 96 and lin.out_features == 200


def test_model_conversion_keeps_the_lm_head_at_int8_and_wide_layers_too():
    import tiny
    model = cpu_kernels.row_int4(tiny.target(0).float())
    kinds = {type(m).__name__ for m in model.modules()}
    assert "Linear" not in kinds and "NativeInt4Linear" in kinds
    assert isinstance(model.get_output_embeddings(), native_int8.NativeInt8Linear)
    with pytest.raises(ValueError):
        NativeInt4Linear(torch.nn.Linear(MAX_IN_FEATURES + 64, 2))
    assert isinstance(cpu_kernels._int4_or_int8(torch.nn.Linear(MAX_IN_FEATURES + 64, 2)),
                      native_int8.NativeInt8Linear)


@pytest.mark.parametrize("kwargs,env", [({"kernels": "fbgemm"}, "1"), ({}, "0")])
def test_on_fbgemm_kernels_int4_is_refused_with_a_reason(monkeypatch, kwargs, env):
    """Asked for explicitly, or through the environment's override read by load_pair."""
    from mirror_sd.errors import MirrorSDError
    from mirror_sd.models.loading import load_pair
    monkeypatch.setenv("MIRROR_SD_NATIVE_INT8", env)
    with pytest.raises(MirrorSDError, match="int4 needs the AVX2 kernel.*fbgemm"):
        load_pair("no/such-target", "no/such-draft", precision="int4", **kwargs)
