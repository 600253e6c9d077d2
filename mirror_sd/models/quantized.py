"""Model caches built straight from a GGUF, tensor by tensor, and int8 / int4 models loaded from
them without an fp32 copy of the model ever existing.

`build_cache(gguf, out_dir, kind)` dequantizes one tensor (or block of rows) at a time with
transformers' values (gguf_read.py) and keeps, per kind:
- "int8": every linear weight as the AVX2 kernel's int8 layout (`cpu.int8.quantize_weight`,
  bit for bit the extension's own quantization, so no build is waited for), the embeddings as
  their GGUF blocks' integers and group scales where those give their values exactly
  (`gguf_read.grouped`: a quarter of the float32 bytes; float32 values otherwise), norms and
  biases in float32;
- "int4": linear weights in the int4 kernel's layout (the extension quantizes them: the build is
  waited for), the LM head in int8, as `cpu.linears.row_int4` makes them;
- "fp32": every tensor in float32, a folder `from_pretrained` loads (what fp32 and the other
  precisions start from).
A tied LM head (no output.weight in the file) is quantized from the embedding, as the
conversions of a loaded model do. The config comes from the GGUF metadata, the tokenizer files
from transformers' GGUF tokenizer (built once per tokenizer, `<cache>/tokenizers/`).

`load_cache(folder, precision, role, kernels)` builds the model's skeleton on the meta device,
puts the cached kernels in the linears' place (the projections that read one input fused, as
`linears.row_int8` fuses them: per-row quantization makes the stacked weights' layout the rows
of each part's), assigns the float tensors, and finishes as `precision.apply_precision` does:
the same layers and the same bits as quantizing an fp32 load (tested on the real pair).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable

import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.models.gguf_read import GgufFile, grouped, hf_names, iter_tensors, ungroup

log = logging.getLogger(__name__)

KINDS = ("fp32", "int8", "int4")
LAYOUT = 1  # the cache's format; a folder of another layout is rebuilt
INFO = "mirror_sd.json"  # kind, layout, parameter count
SHARD_BYTES = 1 << 30  # fp32 folders come in shards of about this size (bounded memory)
ROW_BLOCK = 16384  # rows dequantized at once: a 151,936-row embedding in ten pieces
GROUPED = ".grouped_"  # <name>.grouped_q / _scale / _offset: a float tensor kept as its blocks

# (done fraction 0..1) -> None, called as a conversion goes
Tick = Callable[[float], None]


def _meta_model(config):
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _config(gguf: GgufFile):
    from transformers import AutoConfig
    d = gguf.config_dict()
    return AutoConfig.for_model(d.pop("model_type"), **d)


def _head_name(model) -> str | None:
    head = model.get_output_embeddings()
    return next((n for n, m in model.named_modules() if m is head), None)


def _linear_kinds(model, kind: str) -> dict[str, str]:
    """{linear module name: "int8" | "int4" | "fp32"}: how each linear's weight is kept."""
    from mirror_sd.cpu.int4 import MAX_IN_FEATURES
    head = _head_name(model)
    kinds = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            if kind == "int4" and name != head and m.in_features <= MAX_IN_FEATURES:
                kinds[name] = "int4"
            else:
                kinds[name] = kind if kind != "int4" else "int8"
    return kinds


def _quantizer(kind: str):
    from mirror_sd.cpu import int8 as native_int8
    if kind == "int8":
        return native_int8.quantize_weight, ("qweight", "scale", "wsum")
    ext = native_int8.load()
    if ext is None:
        raise MirrorSDError(f"int4 needs the AVX2 kernel: {native_int8.unavailable_reason()}")
    return ext.quantize_weight4, ("qweight4", "gscale", "gzero", "dscale")


class _Shards:
    """safetensors files of about SHARD_BYTES each, named as transformers names them, with an
    index when there is more than one."""

    def __init__(self, folder: Path):
        self.folder, self.pending, self.size, self.files, self.where = folder, {}, 0, [], {}

    def add(self, name: str, tensor: torch.Tensor) -> None:
        self.pending[name] = tensor.contiguous()
        self.size += tensor.numel() * tensor.element_size()
        if self.size >= SHARD_BYTES:
            self.flush()

    def flush(self) -> None:
        from safetensors.torch import save_file
        if not self.pending:
            return
        path = self.folder / f"part-{len(self.files)}.safetensors"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.files.append(path)
        self.where.update({k: path for k in self.pending})
        self.pending, self.size = {}, 0

    def close(self) -> None:
        self.flush()
        if len(self.files) == 1:
            self.files[0].rename(self.folder / "model.safetensors")
            return
        n = len(self.files)
        names = {p: f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i, p in enumerate(self.files)}
        for p, new in names.items():
            p.rename(self.folder / new)
        index = {"metadata": {}, "weight_map": {k: names[p] for k, p in self.where.items()}}
        (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def _convert_tensors(gguf: GgufFile, model, kind: str, shards: _Shards, tick: Tick) -> int:
    """Every tensor of the file into `shards`, as `kind` keeps it; the parameter count."""
    names, processor = hf_names(gguf, model)
    linears = _linear_kinds(model, kind) if kind != "fp32" else {}
    tied_head = _head_name(model) if model.config.tie_word_embeddings else None
    quantize = {k: _quantizer(k) for k in set(linears.values())}
    total = sum(t.nbytes for t in gguf.tensors)
    done, params, full, filled = 0, 0, {}, {}
    for t, name, values in iter_tensors(gguf, names, processor, ROW_BLOCK):
        if name is None:
            log.info("%s: %s has no place in the model, skipped", gguf.path.name, t.name)
            continue
        if name not in full:  # row blocks of one tensor fill one float32 tensor
            full[name], filled[name] = torch.empty(t.shape, dtype=torch.float32), 0
        full[name][filled[name]:filled[name] + values.shape[0]] = values
        filled[name] += values.shape[0]
        done += t.nbytes * values.shape[0] // t.rows
        tick(done / total)
        if filled[name] < t.shape[0]:
            continue
        tensor = full.pop(name)
        params += tensor.numel()
        module = name.rsplit(".", 1)[0]
        how = linears.get(module) if name.endswith(".weight") else None
        parts = grouped(gguf, t, tensor) if kind != "fp32" and how is None else None
        if how in quantize:
            _add_quantized(shards, module, tensor, quantize[how])
        elif parts is not None:  # an embedding: its blocks' integers, a quarter of the bytes
            for key, part in parts.items():
                shards.add(f"{name}{GROUPED}{key}", part)
        else:
            shards.add(name, tensor)
        if tied_head and name == names.get("token_embd.weight") and tied_head in linears:
            _add_quantized(shards, tied_head, tensor, quantize[linears[tied_head]])
        del tensor
    return params


def _add_quantized(shards: _Shards, module: str, weight: torch.Tensor, quantizer) -> None:
    fn, keys = quantizer
    for key, part in zip(keys, fn(weight)):
        shards.add(f"{module}.{key}", part)


def build_cache(gguf_path: Path, out_dir: Path, kind: str, tokenizer_dir: Path,
                tick: Tick = lambda f: None) -> Path:
    """Build `out_dir` (config, tokenizer files, weights as `kind` keeps them) from a GGUF, one
    tensor at a time; `tokenizer_dir` holds the tokenizer files of this file's tokenizer, made
    here if it has none. Written beside and renamed when complete."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    gguf = GgufFile(gguf_path)
    config = _config(gguf)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted build
    tmp.mkdir(parents=True)
    ensure_tokenizer(gguf, tokenizer_dir)
    for f in tokenizer_dir.iterdir():
        shutil.copyfile(f, tmp / f.name)
    model = _meta_model(config)
    shards = _Shards(tmp)
    params = _convert_tensors(gguf, model, kind, shards, tick)
    shards.close()
    config.architectures = [type(model).__name__]  # as save_pretrained writes it
    config.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    (tmp / INFO).write_text(json.dumps({"kind": kind, "layout": LAYOUT, "params": params}))
    shutil.rmtree(out_dir, ignore_errors=True)  # another layout's
    os.replace(tmp, out_dir)  # atomic: a half-written folder never looks like a cache
    return out_dir


def ensure_tokenizer(gguf: GgufFile, folder: Path) -> Path:
    """The tokenizer files of a GGUF's tokenizer in `folder`, made from the file (transformers'
    GGUF tokenizer) if not there yet."""
    if (folder / "tokenizer_config.json").is_file():
        return folder
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(gguf.path.parent), gguf_file=gguf.path.name)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok.save_pretrained(tmp)
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def cache_info(folder: Path) -> dict | None:
    """The cache's kind, layout and parameter count, or None when `folder` is not a complete
    cache of this layout."""
    try:
        info = json.loads((folder / INFO).read_text())
    except (OSError, ValueError):
        return None
    return info if info.get("layout") == LAYOUT and (folder / "config.json").is_file() else None


def _load_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    tensors = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return tensors


def _kernel(tensors: dict, names: list[str], bias: bool):
    """The AVX2 kernel layer for the row-stacked weights of linears `names`."""
    from mirror_sd.cpu.int4 import NativeInt4Linear
    from mirror_sd.cpu.int8 import NativeInt8Linear

    def cat(key):
        return torch.cat([tensors.pop(f"{n}.{key}") for n in names]) if len(names) > 1 \
            else tensors.pop(f"{names[0]}.{key}")
    b = cat("bias") if bias else None
    if f"{names[0]}.qweight" in tensors:
        return NativeInt8Linear(None, _q=cat("qweight"), _scale=cat("scale"), _sum=cat("wsum"),
                                _bias=b)
    return NativeInt4Linear(None, _parts=[cat(k) for k in ("qweight4", "gscale", "gzero", "dscale")],
                            _bias=b)


def _install_kernels(model, tensors: dict) -> None:
    """Every nn.Linear of the meta model -> its cached kernel; `FUSED` groups as one."""
    from mirror_sd.cpu import linears
    for prefix, names in linears.fusable(model):
        module = model.get_submodule(prefix)
        full = [f"{prefix}.{n}" if prefix else n for n in names]
        kernel = _kernel(tensors, full, getattr(module, names[0]).bias is not None)
        kernel.in_features = getattr(module, names[0]).in_features
        linears.install_fused(module, names, kernel)
    for name, m in list(model.named_modules()):
        if isinstance(m, torch.nn.Linear):
            kernel = _kernel(tensors, [name], m.bias is not None)
            kernel.in_features = m.in_features
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, kernel)


def _materialize_buffers(model) -> None:
    """Buffers no file holds (rotary frequencies, Gemma's embedding scale) are computed as
    from_pretrained computes them: the model's own _init_weights on the modules holding them,
    with every loaded tensor marked initialized (transformers' init functions skip those)."""
    for t in (*model.parameters(), *model.buffers()):
        if not t.is_meta:
            t._is_hf_initialized = True
    for module in model.modules():
        meta = [(n, b) for n, b in module.named_buffers(recurse=False) if b is not None and b.is_meta]
        for name, buf in meta:
            module.register_buffer(name, torch.empty_like(buf, device="cpu"),
                                   persistent=name not in module._non_persistent_buffers_set)
        if meta:
            with torch.no_grad():
                model._init_weights(module)
    left = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if left:
        raise MirrorSDError(f"The cache has no values for {', '.join(left[:3])}...: delete it "
                            f"and it is built again.")


def _ungroup_all(tensors: dict) -> None:
    """Float tensors kept as their GGUF blocks (`GROUPED` keys) back to float32, in place."""
    for key in [k for k in tensors if k.endswith(f"{GROUPED}q")]:
        name = key[:-len(f"{GROUPED}q")]
        parts = {p: tensors.pop(f"{name}{GROUPED}{p}") for p in ("q", "scale", "offset")
                 if f"{name}{GROUPED}{p}" in tensors}
        tensors[name] = ungroup(parts)


def load_cache(folder: Path, precision: str, role: str, kernels=None):
    """An int8 / int4 model (eval mode, CPU) from a cache `build_cache` made, converted as
    `precision.apply_precision(model loaded in fp32, precision, role, kernels)` converts it."""
    from transformers import AutoConfig

    from mirror_sd.models.precision import KernelChoice, finish_precision
    kernels = kernels or KernelChoice()
    config = AutoConfig.from_pretrained(str(folder))
    model = _meta_model(config)
    tensors = _load_tensors(folder)
    _ungroup_all(tensors)
    _install_kernels(model, tensors)
    missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    if unexpected:
        raise MirrorSDError(f"The cache {folder.name} holds tensors the model does not have "
                            f"({', '.join(unexpected[:3])}): delete it and it is built again.")
    _materialize_buffers(model)
    model.eval()
    return finish_precision(model, precision, role, kernels)
