"""Reduced-precision linear layers for the CPU, chosen by measurement (docs/performance.md).

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

import functools
import warnings
from contextlib import contextmanager

import torch

_PIN = 1.0 / 0.99  # the +-pinning columns; rows are scaled to peak 1, a little inside, so
# the zero point's rounding never clips a row (the pins multiply zero weights: their clipping
# changes nothing)


@contextmanager
def _quiet():
    """torch.ao prints deprecation notices on every quantized call; the kernels are current."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class RowInt8Linear(torch.nn.Module):
    """y = x W^T + b with int8 weights (one scale per output channel) and int8 activations
    (one scale per row), on fbgemm; rows never affect one another (module docstring).

    The wrapper is kept to a few tensor ops: at one decode row the kernel's fixed cost and the
    wrapper's ops are a good part of a layer's time (docs/performance.md)."""

    def __init__(self, linear: torch.nn.Linear | None, reduce_range: bool = True, *, _q=None,
                 _bias=None):
        super().__init__()
        if linear is not None:
            weight = linear.weight.detach().float()
            out_f = weight.shape[0]
            padded = torch.cat([weight, weight.new_zeros(out_f, 2)], dim=1)
            # the per-channel peak without an abs() copy of the weight (the LM head's is 0.9 GB)
            scale = (torch.linalg.vector_norm(weight, float("inf"), dim=1) / 127.0).clamp_min(1e-12).double()
            with _quiet():
                _q = torch.quantize_per_channel(padded, scale, torch.zeros(out_f, dtype=torch.long),
                                                0, torch.qint8)
            _bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        with _quiet():
            self._packed = torch.ops.quantized.linear_prepack(_q, None)
        self.out_features, self.in_features = _q.shape[0], _q.shape[1] - 2
        self.reduce_range = reduce_range  # 7-bit activations: no int16 saturation in AVX2 fbgemm
        self.register_buffer("bias", _bias, persistent=False)
        self.register_buffer("_pins", torch.tensor([[_PIN, -_PIN]]), persistent=False)

    def rows(self, ids: torch.Tensor) -> "RowInt8Linear":
        """The layer restricted to output channels `ids`: the same int8 weights and scales, so
        each kept column computes the same bits."""
        with _quiet():
            q, _ = torch.ops.quantized.linear_unpack(self._packed)
        bias = self.bias[ids].clone() if self.bias is not None else None
        return RowInt8Linear(None, self.reduce_range, _q=_channel_rows(q, ids), _bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        rows = x.reshape(-1, self.in_features)
        if dtype != torch.float32:
            rows = rows.float()
        peak = rows.abs().amax(dim=-1, keepdim=True).clamp_min_(1e-30)
        scaled = torch.cat([rows / peak, self._pins.expand(rows.shape[0], 2)], dim=-1)
        y = _linear_dynamic(scaled, self._packed, self.reduce_range)
        y = torch.addcmul(self.bias, y, peak) if self.bias is not None else y.mul_(peak)
        y = y.view(*shape[:-1], self.out_features)
        return y if dtype == torch.float32 else y.to(dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


_linear_dynamic = torch.ops.quantized.linear_dynamic.default
_onednn_linear = getattr(torch.ops.mkldnn, "_linear_pointwise", None)


class _FusedInput:
    """Projections that read the same input (q/k/v; gate/up) as one layer over their stacked
    weights (`make` converts it; RowInt8Linear by default): one kernel call instead of several.
    With RowInt8Linear, per-channel weight scales and per-row activation scales make every
    output column the same bits as its own layer's (tested); with dynamic int8 the activation
    scale is the shared input's either way."""

    def __init__(self, linears: list[torch.nn.Linear], make=None, *, _kernel=None):
        if _kernel is None:
            stacked = torch.nn.Linear(linears[0].in_features, sum(l.out_features for l in linears),
                                      bias=linears[0].bias is not None)
            with torch.no_grad():
                stacked.weight.copy_(torch.cat([l.weight.detach().float() for l in linears]))
                if stacked.bias is not None:
                    stacked.bias.copy_(torch.cat([l.bias.detach().float() for l in linears]))
            _kernel = (make or RowInt8Linear)(stacked)
        self.linear = _kernel
        self.sizes = [l.out_features for l in linears]
        self._x, self._parts, self._unread = None, None, set()

    def part(self, x: torch.Tensor, index: int) -> torch.Tensor:
        # The input is held until every member has read its part, so `is` cannot be fooled by
        # a new tensor at a recycled address.
        if x is not self._x or index not in self._unread:
            self._x, self._unread = x, set(range(len(self.sizes)))
            self._parts = self.linear(x).split(self.sizes, dim=-1)
        self._unread.discard(index)
        out = self._parts[index]
        if not self._unread:
            self._x, self._parts = None, None
        return out


class FusedPart(torch.nn.Module):
    """One member of a `_FusedInput` group, in its layer's place."""

    def __init__(self, group: _FusedInput, index: int):
        super().__init__()
        self._group, self.index = group, index  # a plain attribute: not a submodule
        self.in_features, self.out_features = group.linear.in_features, group.sizes[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._group.part(x, self.index)

    def extra_repr(self) -> str:
        return f"part {self.index} of {len(self._group.sizes)} of {type(self._group.linear).__name__}"


FUSED = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # Llama/Qwen2/Mistral names


def fusable(model: torch.nn.Module) -> list[tuple[str, tuple[str, ...]]]:
    """(module name, projection names) of every group of `FUSED` projections the conversions
    fuse: all nn.Linear, one input size, all with a bias or none."""
    groups = []
    for prefix, module in model.named_modules():
        for names in FUSED:
            parts = [getattr(module, n, None) for n in names]
            if all(isinstance(p, torch.nn.Linear) for p in parts) and \
                    len({(p.in_features, p.bias is None) for p in parts}) == 1:
                groups.append((prefix, names))
    return groups


def install_fused(module: torch.nn.Module, names: tuple[str, ...], kernel: torch.nn.Module) -> None:
    """Put a kernel made for the stacked weights of `module`'s projections `names` (row
    concatenation, in order) in their place as FusedParts."""
    group = _FusedInput([getattr(module, n) for n in names], _kernel=kernel)
    for i, n in enumerate(names):
        setattr(module, n, FusedPart(group, i))


def _fuse(model: torch.nn.Module, make=None) -> None:
    for prefix, names in fusable(model):
        module = model.get_submodule(prefix)
        group = _FusedInput([getattr(module, n) for n in names], make)
        for i, n in enumerate(names):
            setattr(module, n, FusedPart(group, i))


def _replace_linears(model: torch.nn.Module, make) -> torch.nn.Module:
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, make(child))
        else:
            _replace_linears(child, make)
    return model


def row_kernel(native: bool | None = None):
    """The row-exact int8 layer class: the AVX2 kernel of native_int8 where it builds (faster
    at one row and at a few: docs/performance.md), else fbgemm's RowInt8Linear.
    native=None picks by availability, False forces fbgemm."""
    from mirror_sd.cpu import int8 as native_int8
    if native is not False and native_int8.available():
        return native_int8.NativeInt8Linear
    return RowInt8Linear


def row_int8(model: torch.nn.Module, fuse: bool = True, native: bool | None = None) -> torch.nn.Module:
    """Every nn.Linear (the LM head too) -> a row-exact int8 layer (`row_kernel`), in place;
    projections that read the same input (`FUSED`) share one kernel call."""
    make = row_kernel(native)
    if fuse:
        _fuse(model, make)
    return _replace_linears(model, make)


class OneDNNLinear(torch.nn.Module):
    """y = x W^T + b in fp32 on oneDNN, with the weight reordered once into oneDNN's blocked
    layout (what torch's own compiler does for a frozen CPU model).

    torch's stock fp32 linear packs the weight again on every call with more than one row, so
    a verify of a few rows costs two to three decode rows here, and some row counts cost more
    than larger ones (2 rows 0.92 s, 3 rows 1.32 s, 8 rows 0.80 s for the 1.5B target;
    docs/performance.md). With the weight packed once, a target forward over 13 rows costs
    about 1.2x one row (405 against 342 ms), and one row is faster too. Numerics: fp32 products and sums in another
    order (outputs differ from torch's in the low bits, like torch's own results for different
    row counts); rows are not bit-independent, as with torch's linear."""

    def __init__(self, linear: torch.nn.Linear | None, *, _weight=None, _bias=None):
        super().__init__()
        if linear is not None:
            _weight, _bias = linear.weight.detach(), linear.bias
        self.out_features, self.in_features = _weight.shape
        self._packed = torch.ops.mkldnn._reorder_linear_weight(_weight.float().contiguous(), None)
        self.register_buffer("bias", _bias.detach().float().clone() if _bias is not None else None,
                             persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        """The weight as a dense [out, in] fp32 tensor (a copy: for setup, not for decoding)."""
        return self._packed.to_dense()

    def rows(self, ids: torch.Tensor) -> "OneDNNLinear":
        """The layer restricted to output channels `ids` (the same fp32 weights)."""
        bias = self.bias[ids] if self.bias is not None else None
        return OneDNNLinear(None, _weight=self.weight[ids], _bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise TypeError(f"OneDNNLinear takes fp32 CPU input, not {x.dtype} on {x.device}")
        rows = x.reshape(-1, self.in_features)
        y = _onednn_linear(rows, self._packed, self.bias, "none", [], "")
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp32 oneDNN"


@functools.cache
def onednn_available() -> bool:
    """Whether this torch runs OneDNNLinear (a CPU build with oneDNN and its linear ops); tried
    once per process."""
    try:
        layer = OneDNNLinear(torch.nn.Linear(8, 4))
        out = layer(torch.ones(2, 8))
        return out.shape == (2, 4) and bool(torch.isfinite(out).all())
    except (AttributeError, RuntimeError, TypeError):
        return False


def onednn_fp32(model: torch.nn.Module, fuse: bool = True) -> torch.nn.Module:
    """Every nn.Linear of an fp32 CPU model -> OneDNNLinear, in place, projections that read
    the same input (`FUSED`) as one call. A model with any linear layer that is not fp32 on the
    CPU (a float64 test model, a GPU or split model), or a torch without oneDNN, is left as
    it is."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears or not onednn_available() or any(
            m.weight.dtype != torch.float32 or m.weight.device.type != "cpu" for m in linears):
        return model
    if fuse:
        _fuse(model, OneDNNLinear)
    return _replace_linears(model, OneDNNLinear)


def _int4_or_int8(linear: torch.nn.Linear) -> torch.nn.Module:
    from mirror_sd.cpu.int4 import MAX_IN_FEATURES, NativeInt4Linear
    from mirror_sd.cpu.int8 import NativeInt8Linear
    return NativeInt4Linear(linear) if linear.in_features <= MAX_IN_FEATURES else NativeInt8Linear(linear)


def row_int4(model: torch.nn.Module, fuse: bool = True) -> torch.nn.Module:
    """Every nn.Linear -> 4-bit weights in groups of 32 (native_int4, row-exact), in place,
    except the LM head, which gets the row-exact int8 kernel: the output projection decides
    every token, and GGUF's Q4_K_M keeps it at 6 bits too. Needs the AVX2 extension."""
    from mirror_sd.cpu import int8 as native_int8
    if not native_int8.available():
        raise RuntimeError(f"int4 needs the AVX2 kernel: {native_int8.unavailable_reason()}")
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if isinstance(head, torch.nn.Linear):
        model.set_output_embeddings(native_int8.NativeInt8Linear(head))
    if fuse:
        _fuse(model, _int4_or_int8)
    return _replace_linears(model, _int4_or_int8)


def _quantize_dynamic(model: torch.nn.Module, dtype, fuse: bool) -> torch.nn.Module:
    with _quiet():
        from torch.ao.quantization import (float16_dynamic_qconfig, per_channel_dynamic_qconfig,
                                           quantize_dynamic)
        # a stacked q/k/v: int8 weights get per-channel scales, so each projection keeps its own
        # range (per-tensor would give k and v the scale of q)
        spec = {torch.nn.Linear: per_channel_dynamic_qconfig if dtype == torch.qint8
                else float16_dynamic_qconfig}

        def one(linear):
            return quantize_dynamic(torch.nn.Sequential(linear), spec, dtype=dtype)[0]

        if fuse:
            _fuse(model, one)
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=dtype, inplace=True)


def dynamic_int8(model: torch.nn.Module, fuse: bool = True) -> torch.nn.Module:
    """fbgemm dynamic int8 (one activation scale per batch: rows couple). Fastest; fine for a
    draft, since a draft only proposes and q is what its tokens were drawn from."""
    return _quantize_dynamic(model, torch.qint8, fuse)


def fp16_weights(model: torch.nn.Module, fuse: bool = True) -> torch.nn.Module:
    """fbgemm fp16 weights with fp32 activations and accumulation: like fp32, rows differ from
    their one-row result only in the low bits."""
    return _quantize_dynamic(model, torch.float16, fuse)


def _channel_rows(q: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of a per-channel (axis 0) quantized weight, with their own scales."""
    return torch._make_per_channel_quantized_tensor(
        q.int_repr()[ids], q.q_per_channel_scales()[ids], q.q_per_channel_zero_points()[ids], 0)


def output_rows(layer: torch.nn.Module, ids: torch.Tensor) -> torch.nn.Module | None:
    """`layer` (nn.Linear or one of the kernels above) restricted to output channels `ids`, in
    the same kernel and precision: the kept outputs are what the whole layer gives them (int8
    weights are sliced, not quantized again). None for a layer kind not handled here."""
    ids = ids.to(torch.long)
    if callable(getattr(layer, "rows", None)):  # the row-exact int8 kernels slice themselves
        return layer.rows(ids)
    if isinstance(layer, torch.nn.Linear):
        out = torch.nn.Linear(layer.in_features, len(ids), bias=layer.bias is not None,
                              device=layer.weight.device, dtype=layer.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(layer.weight[ids.to(layer.weight.device)])
            if layer.bias is not None:
                out.bias.copy_(layer.bias[ids.to(layer.bias.device)])
        return out.requires_grad_(False)
    with _quiet():
        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
        if not isinstance(layer, DynamicLinear):
            return None
        weight, bias = layer.weight(), layer.bias()
        dtype = layer._packed_params.dtype
        if weight.is_quantized and weight.qscheme() not in (torch.per_channel_affine,
                                                             torch.per_channel_symmetric):
            weight = torch._make_per_tensor_quantized_tensor(  # a per-tensor scale: kept as is
                weight.int_repr()[ids], weight.q_scale(), weight.q_zero_point())
        elif weight.is_quantized:
            weight = _channel_rows(weight, ids)
        else:  # fp16 weights: unpacked as float, exact in fp16
            weight = weight[ids]
        out = DynamicLinear(layer.in_features, len(ids), bias_=bias is not None, dtype=dtype)
        out.set_weight_bias(weight, bias[ids] if bias is not None else None)
        return out
