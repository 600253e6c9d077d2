"""A row-exact linear layer with 4-bit weights for AVX2 CPUs (kernels/row_int4.cpp).

Weights: 16 levels per group of 32 inputs, `w = D * sc_g * (q - z_g)` (q and the zero point
z_g in 0..15, sc_g an integer step in 1..255, D one float per output channel): asymmetric
4-bit groups of 32, the grain of GGUF's Q4_K sub-blocks. Activations: 8-bit, one scale per
row. Both sums are exact int32, so, as with the int8
kernel, a row's output is bit-identical whatever other rows share the call. Per layer it is
1.3-1.7x the int8 kernel's speed at one row (0.59 of the bytes) and 1.04-1.2x at four rows
(compute-bound); AR on the default target 1.3x int8 (docs/performance.md).

Built into the same extension as the int8 kernel (`native_int8.load()`); where that cannot be
built, the int4 precision is not offered (`native_int8.unavailable_reason()` says why).
"""
from __future__ import annotations

import torch

from mirror_sd.cpu import int8 as native_int8

MAX_IN_FEATURES = 32768  # int32 sums stay exact up to here (kernels/row_int4.cpp)


class NativeInt4Linear(torch.nn.Module):
    """y = x W^T + b: 4-bit weights in groups of 32, 8-bit activations per row (AVX2)."""

    def __init__(self, linear: torch.nn.Linear | None, *, _parts=None, _bias=None):
        super().__init__()
        ext = native_int8.load()  # held by the loader, not the layer: layers deep-copy
        if ext is None:
            raise RuntimeError(native_int8.unavailable_reason())
        if linear is not None:
            if linear.in_features > MAX_IN_FEATURES:
                raise ValueError(f"4-bit weights take at most {MAX_IN_FEATURES} inputs")
            _parts = ext.quantize_weight4(linear.weight.detach().float())
            _bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.in_features = linear.in_features if linear is not None else None
        self.out_features = _parts[0].shape[0]
        for name, t in zip(("qweight", "gscale", "gzero", "scale"), _parts):
            self.register_buffer(name, t, persistent=False)
        self.register_buffer("bias", _bias, persistent=False)
        self._empty = torch.empty(0)

    def parts(self) -> tuple[torch.Tensor, ...]:
        return self.qweight, self.gscale, self.gzero, self.scale

    def rows(self, ids: torch.Tensor) -> "NativeInt4Linear":
        """The layer restricted to output channels `ids`: the same weights, scales and bits."""
        bias = self.bias[ids].clone() if self.bias is not None else None
        out = NativeInt4Linear(None, _parts=[t[ids].contiguous() for t in self.parts()], _bias=bias)
        out.in_features = self.in_features
        return out

    def kernel_args(self) -> list[torch.Tensor]:
        """What the extension's int4 kernel takes after the input (fast_layers passes it on)."""
        return [*self.parts(), self.bias if self.bias is not None else self._empty]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return native_int8.over_rows(x, self.out_features,
                                     lambda rows: native_int8.load().row_int4_linear(rows, *self.kernel_args()))

    def dequantized(self) -> torch.Tensor:
        """The float weights the kernel multiplies by, [out_features, in_features] (tests, docs)."""
        w, sc, z, d = self.parts()
        n, kp = w.shape[0], w.shape[1] * 2
        blocks = w.view(n, kp // 64, 32)  # byte j: weight j (low nibble), weight 32 + j (high)
        q = torch.stack([blocks & 0x0F, blocks >> 4], dim=2).reshape(n, kp).float()
        groups = kp // 32
        step = (d[:, None] * sc[:, :groups].float()).repeat_interleave(32, dim=1)
        zero = z[:, :groups].float().repeat_interleave(32, dim=1)
        return (step * (q - zero))[:, :self.in_features]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, 4-bit groups of 32 (AVX2)"
