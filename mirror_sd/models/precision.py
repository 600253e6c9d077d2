"""The precision registry: every precision a model can be loaded at, where it runs, what it
means, and the conversion that makes it.

Add a precision to `PRECISIONS` and `load_pair`, the CLI and the app offer it. The CPU
precisions convert an fp32 load with the kernels of `mirror_sd.cpu`, which only this module
imports (lazily, when a model is converted): the engine never touches them. Their measured
speed and exactness: docs/performance.md.

The kernel switches are explicit (`KernelChoice`): `kernels` "auto" runs the AVX2 extension
where it builds (else fbgemm), "fbgemm" never builds it; `fast_layers` runs a decoder layer on
the extension's kernels as two C++ calls; `onednn` runs fp32 linears on a CPU on oneDNN with
weights packed once. `kernel_choice()` is the one place the environment may override them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.models import memory

KERNELS = ("auto", "fbgemm")


@dataclass(frozen=True)
class KernelChoice:
    """Which CPU kernels a conversion uses (both change the float path, not the guarantees)."""
    kernels: str = "auto"  # auto: the AVX2 extension where it builds, else fbgemm | fbgemm
    fast_layers: bool = True  # decoder layers on the extension's kernels in two C++ calls
    onednn: bool = True  # fp32 linears on a CPU: oneDNN, weights packed once (else torch's own)

    def __post_init__(self):
        if self.kernels not in KERNELS:
            raise MirrorSDError(f"Unknown CPU kernels {self.kernels!r}: use {' or '.join(KERNELS)}.")

    @property
    def native(self) -> bool | None:
        """For cpu.linears.row_kernel: None picks the extension where it builds; False: fbgemm."""
        return None if self.kernels == "auto" else False


def kernel_choice(kernels: str | None = None, fast_layers: bool | None = None,
                  onednn: bool | None = None) -> KernelChoice:
    """The kernels asked for; where an argument is None, the environment's override, else the
    default: `MIRROR_SD_NATIVE_INT8=0` means kernels="fbgemm", `MIRROR_SD_FAST_LAYERS=0` means
    fast_layers=False, `MIRROR_SD_ONEDNN=0` means onednn=False. The loaders (load_pair,
    load_target, load_model) call this; nothing below them reads the environment."""
    if kernels is None:
        kernels = "fbgemm" if os.environ.get("MIRROR_SD_NATIVE_INT8", "1") == "0" else "auto"
    if fast_layers is None:
        fast_layers = os.environ.get("MIRROR_SD_FAST_LAYERS", "1") != "0"
    if onednn is None:
        onednn = os.environ.get("MIRROR_SD_ONEDNN", "1") != "0"
    return KernelChoice(kernels, bool(fast_layers), bool(onednn))


def _cpu(name: str) -> Callable:
    """A conversion of mirror_sd.cpu.linears, imported when it first runs."""
    def convert(model, kernels: KernelChoice = KernelChoice()):
        from mirror_sd.cpu import linears
        if name == "row_int8":
            return linears.row_int8(model, native=kernels.native)
        if name == "onednn_fp32":
            return linears.onednn_fp32(model) if kernels.onednn else model
        return getattr(linears, name)(model)
    convert.__name__ = name
    return convert


def _int4_unavailable(kernels: KernelChoice) -> str | None:
    if kernels.kernels == "fbgemm":
        reason = "the CPU kernels are set to fbgemm (kernels=\"fbgemm\" or MIRROR_SD_NATIVE_INT8=0)"
    else:
        from mirror_sd.cpu import int8 as native_int8
        reason = native_int8.unavailable_reason()
    return (f"int4 needs the AVX2 kernel, which is not available here: {reason}. Use int8 instead "
            f"(it falls back to fbgemm).") if reason else None


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype  # passed to from_pretrained
    bytes_per_param: float  # for the memory check
    note: str  # what it is, in a line (CLI help, the app)
    cpu_ok: bool = True
    gpu_ok: bool = True
    draft_menu: bool = True  # offered as a draft precision in menus
    post_load: Callable | None = None  # (model, KernelChoice) -> model, run after loading
    exact_rows: bool = False  # the target also gets row-exact attention (cpu/exact_attention.py)
    unavailable: Callable[[KernelChoice], "str | None"] | None = None  # why it cannot run here

    def runs_on(self, device: str) -> bool:
        return self.cpu_ok if device == "cpu" else self.gpu_ok


# In menu order. The CPU conversions start from an fp32 load, so the memory check counts them at
# 4 bytes a parameter (the peak while converting).
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision(torch.float32, 4,
                      "reference weights (on a CPU, linears on oneDNN with the weights packed once: "
                      "a verify of a few tokens costs little more than one)",
                      post_load=_cpu("onednn_fp32")),
    "int8": Precision(torch.float32, 4,
                      "int8 weights per channel, int8 activations per row (AVX2 kernel, else "
                      "fbgemm), row-exact attention for a target (CPU): verifying k tokens gives "
                      "the bits of decoding them one by one",
                      gpu_ok=False, post_load=_cpu("row_int8"), exact_rows=True),
    "int4": Precision(torch.float32, 4,
                      "4-bit weights in groups of 32 with a zero point (Q4_K's grain), int8 LM "
                      "head, 8-bit activations per row (AVX2 kernel only; CPU): row-exact like "
                      "int8",
                      gpu_ok=False, post_load=_cpu("row_int4"), exact_rows=True,
                      unavailable=_int4_unavailable),
    "fp16w": Precision(torch.float32, 4, "fp16 weights, fp32 activations (CPU, fbgemm)",
                       gpu_ok=False, post_load=_cpu("fp16_weights")),
    "int8-dyn": Precision(torch.float32, 4,
                          "fbgemm int8 with one activation scale per batch (CPU; rows couple: "
                          "draft only)",
                          gpu_ok=False, post_load=_cpu("dynamic_int8")),
    "bf16": Precision(torch.bfloat16, 2, "bfloat16 weights and activations", draft_menu=False),
    "fp16": Precision(torch.float16, 2, "float16 weights and activations (GPU)",
                      cpu_ok=False, draft_menu=False),  # slow or unsupported matmuls on CPU
}


def target_precisions(device: str | None = None) -> list[str]:
    """Precision names for a target, in menu order; on `device` ("cpu", "cuda:0"...) only those
    that run there; None: all."""
    return [n for n, p in PRECISIONS.items() if device is None or p.runs_on(_kind(device))]


def draft_precisions(device: str | None = None) -> list[str]:
    """Precision names menus offer for a draft, as `target_precisions`."""
    return [n for n in target_precisions(device) if PRECISIONS[n].draft_menu]


def precision_note(name: str) -> str:
    return PRECISIONS[name].note


def _kind(device: str) -> str:
    return "cpu" if str(device) == "cpu" else "gpu"


def check_precisions(names: dict[str, str], devices: dict[str, str],
                     kernels: KernelChoice) -> dict[str, Precision]:
    """{role: Precision} for {role: name} on {role: device}, or a MirrorSDError saying why not."""
    precs = {}
    for role, name in names.items():
        if name not in PRECISIONS:
            raise MirrorSDError(f"Unknown precision {name!r}: choose one of {', '.join(PRECISIONS)}.")
        prec = precs[role] = PRECISIONS[name]
        on_cpu = devices[role] == "cpu"
        if not prec.runs_on(_kind(devices[role])):
            where = "the CPU" if on_cpu else "a GPU"
            ok = ", ".join(target_precisions(devices[role]))
            raise MirrorSDError(f"{name} is not supported for a {role} on {where}: use {ok}.")
        reason = prec.unavailable(kernels) if prec.unavailable else None
        if reason:
            raise MirrorSDError(reason)
    return precs


def row_exact_attention_fits(config) -> bool:
    """Whether cpu/exact_attention.py computes a model's attention: every layer attends to the
    whole context. A sliding-window layer (Gemma 3, Mistral) must not see keys past its window,
    which the row-by-row attention would show it."""
    types = getattr(config, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return getattr(config, "sliding_window", None) is None or \
        getattr(config, "use_sliding_window", True) is False


def apply_precision(model, name: str, role: str, kernels: KernelChoice = KernelChoice()):
    """The precision's conversion after loading; a target whose linears are row-independent
    also gets row-exact attention, so verifying k tokens equals decoding them one by one
    (where `row_exact_attention_fits`; otherwise transformers' attention, rows as in fp32).
    Decoder layers it knows run lean_layers' forward on a CPU (transformers' bits, fewer ops),
    and, with `kernels.fast_layers`, those on the AVX2 kernels run as two C++ calls."""
    prec = PRECISIONS[name]
    if prec.post_load:
        model = prec.post_load(model, kernels)
    return finish_precision(model, name, role, kernels)


def finish_precision(model, name: str, role: str, kernels: KernelChoice = KernelChoice()):
    """What apply_precision does after the linears' conversion (row-exact attention for a
    target at a row-exact precision, lean and fast layers): for a model whose linears were
    made otherwise (models/quantized.py builds them from a cache)."""
    from mirror_sd.cpu import exact_attention, fast_layers, lean_layers
    prec = PRECISIONS[name]
    if prec.exact_rows and role == "target" and row_exact_attention_fits(model.config):
        exact_attention.install(model)
    lean_layers.install(model)  # CPU fp32-activation layers it knows; same bits, fewer ops
    if kernels.fast_layers:
        fast_layers.install(model)  # layers on the AVX2 kernels: two C++ calls a layer
    return model


def _layer_list(model) -> torch.nn.ModuleList:
    """The decoder layers: the ModuleList holding the most parameters (empty if none)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return max(lists, key=lambda ml: sum(p.numel() for p in ml.parameters()),
               default=torch.nn.ModuleList())


def convert_lean(model, name: str, role: str, kernels: KernelChoice = KernelChoice()):
    """apply_precision(model, name, role, kernels), with the same result, holding less memory
    (memory.py). Precisions without a conversion, and models whose weights are not in a mapped
    file (GGUF, GPU), take apply_precision as it is."""
    post_load = PRECISIONS[name].post_load
    files = memory.mapped_files() if post_load else []
    if not files or not any(memory.in_files(memory.span(p), files) for p in model.parameters()
                            if p.device.type == "cpu"):
        return apply_precision(model, name, role, kernels)

    def linear_weights(module):
        return [memory.span(m.weight) for m in module.modules() if isinstance(m, torch.nn.Linear)]

    layers = _layer_list(model)
    for i, layer in enumerate(layers):
        dead = linear_weights(layer)
        layers[i] = post_load(layer, kernels)  # what apply_precision would convert
        memory.drop_pages(dead, model, files)
    dead = linear_weights(model)  # what the layers left (the LM head)
    model = apply_precision(model, name, role, kernels)
    memory.drop_pages(dead, model, files)
    return model


def head_rows(head: torch.nn.Module, ids: torch.Tensor) -> torch.nn.Module | None:
    """An LM head (nn.Linear or a reduced-precision kernel) restricted to output rows `ids`, in
    the same kernel and precision, or None for a kind of layer no precision here makes."""
    from mirror_sd.cpu import linears
    return linears.output_rows(head, ids)


def float_head(head: torch.nn.Module) -> bool:
    """Whether an LM head holds float weights (nn.Linear, or fp32's oneDNN layer on a CPU),
    as opposed to a reduced-precision kernel."""
    from mirror_sd.cpu.linears import OneDNNLinear
    return isinstance(head, (torch.nn.Linear, OneDNNLinear))


def int8_head_copy(head: torch.nn.Module) -> torch.nn.Module:
    """A CPU int8 copy of a float LM head (`float_head`; fbgemm dynamic int8: one activation
    scale per call), for heads that only propose (the early exit); the model's own head is
    left as it is."""
    from mirror_sd.cpu import linears
    copy = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
    with torch.no_grad():
        copy.weight.copy_(head.weight.detach().float())
        if head.bias is not None:
            copy.bias.copy_(head.bias.detach().float())
    return linears.dynamic_int8(torch.nn.Sequential(copy))
