"""Reduced-precision linear layers for the CPU, chosen by measurement (docs/measurements.md).

Speculative decoding verifies k tokens in one target forward and compares the result with what
one-token decoding would have chosen. A kernel whose result for one row depends on the other
rows of the call makes the two disagree by more than rounding. fbgemm's dynamic int8 linear
does that: it quantizes the activations with one scale for the whole batch (max over all rows).

`RowInt8Linear` keeps fbgemm's fast int8 kernel but makes every row independent: each row is
scaled to the same peak C, and two constant columns (+C, -C, against zero weights) pin the
batch's min and max to (-C, C). The kernel's per-batch scale is then the same for every call,
each row is quantized on its own (per-token int8), the int32 accumulation is exact, and the
row's scale is undone afterwards. A row's output is bit-identical whatever else is in the batch.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

_PEAK = 1.0  # the +-C pinning columns
_ROW_PEAK = 0.99  # rows are scaled a little inside (-C, C) so the zero point's nudge never clips


@contextmanager
def _quiet():
    """torch.ao prints deprecation notices on every quantized call; the kernels are current."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class RowInt8Linear(torch.nn.Module):
    """y = x W^T + b with int8 weights (one scale per output channel) and int8 activations
    (one scale per row), on fbgemm; rows never affect one another (module docstring)."""

    def __init__(self, linear: torch.nn.Linear, reduce_range: bool = True):
        super().__init__()
        weight = linear.weight.detach().float()
        out_f, in_f = weight.shape
        padded = torch.cat([weight, weight.new_zeros(out_f, 2)], dim=1)
        scale = (padded.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        with _quiet():
            q = torch.quantize_per_channel(padded, scale, torch.zeros(out_f, dtype=torch.long), 0,
                                           torch.qint8)
            self._packed = torch.ops.quantized.linear_prepack(q, None)
        self.in_features, self.out_features = in_f, out_f
        self.reduce_range = reduce_range  # 7-bit activations: no int16 saturation in AVX2 fbgemm
        bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias, persistent=False)
        self.register_buffer("_pins", torch.tensor([_PEAK, -_PEAK]), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        rows = x.reshape(-1, self.in_features).float()
        peak = rows.abs().amax(dim=-1, keepdim=True).clamp_min(1e-30)
        scaled = torch.cat([rows * (_PEAK * _ROW_PEAK / peak),
                            self._pins.expand(rows.shape[0], 2)], dim=-1)
        y = torch.ops.quantized.linear_dynamic(scaled, self._packed, self.reduce_range)
        y = y * (peak / (_PEAK * _ROW_PEAK))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features).to(dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


def _replace_linears(model: torch.nn.Module, make) -> torch.nn.Module:
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, make(child))
        else:
            _replace_linears(child, make)
    return model


def row_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Every nn.Linear (the LM head too) -> RowInt8Linear, in place."""
    return _replace_linears(model, RowInt8Linear)


def dynamic_int8(model: torch.nn.Module) -> torch.nn.Module:
    """fbgemm dynamic int8 (one activation scale per batch: rows couple). Fastest; fine for a
    draft, since a draft only proposes and q is what its tokens were drawn from."""
    with _quiet():
        from torch.ao.quantization import quantize_dynamic
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)


def fp16_weights(model: torch.nn.Module) -> torch.nn.Module:
    """fbgemm fp16 weights with fp32 activations and accumulation: like fp32, rows differ from
    their one-row result only in the low bits."""
    with _quiet():
        from torch.ao.quantization import quantize_dynamic
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.float16, inplace=True)
