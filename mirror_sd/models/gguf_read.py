"""A GGUF file read tensor by tensor, in transformers' names and with transformers' values.

transformers loads a GGUF by dequantizing every tensor into one fp32 state dict, and reads
the metadata with gguf's GGUFReader, which takes half a minute on a 150k-token vocabulary here
(it builds an object for every string). This module reads the header with transformers' own
fast metadata reader, maps GGUF tensor names to the model's parameter names with transformers'
own mapping and tensor processors, and dequantizes one tensor at a time with gguf's
`dequantize`: the same function, on the same bytes, as transformers' loader, so every value is
bit for bit what `from_pretrained(gguf_file=...)` gives (tested).

The config is rebuilt from the metadata with transformers' GGUF key mapping, as its loader
does; the tokenizer with transformers' GGUF tokenizer conversion.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from mirror_sd.errors import MirrorSDError

# the model types transformers' GGUF loader renames (the rest keep the file's architecture)
_MODEL_TYPES = {"gemma3": "gemma3_text"}


@dataclass(frozen=True)
class GgufTensor:
    name: str  # the GGUF name ("blk.0.attn_q.weight")
    shape: tuple[int, ...]  # torch order (slowest dimension first)
    ggml_type: int
    start: int  # absolute byte offset of its data in the file
    nbytes: int

    @property
    def rows(self) -> int:
        return int(np.prod(self.shape[:-1])) if len(self.shape) > 1 else 1


class GgufFile:
    """A GGUF's metadata and tensor table, and its tensors one at a time."""

    def __init__(self, path: str | Path):
        from transformers.integrations.gguf.reader import read_gguf_metadata
        self.path = Path(path)
        try:
            # tokenizer strings are skipped (counted): the tokenizer is built separately
            self.metadata, _ = read_gguf_metadata(str(self.path))
        except (ValueError, struct.error, OSError) as e:
            raise MirrorSDError(f"Could not read the GGUF file {self.path.name}: {e}") from e
        self.architecture = self.metadata["general.architecture"]
        self.tensors = _tensor_table(self.path, self.metadata.get("general.alignment", 32))
        self._blob = np.memmap(self.path, mode="r", dtype=np.uint8)

    def raw(self, tensor: GgufTensor, rows: slice | None = None) -> np.ndarray:
        """The tensor's stored bytes as [rows, bytes per row] (a view of the mapped file)."""
        data = self._blob[tensor.start:tensor.start + tensor.nbytes].reshape(tensor.rows, -1)
        return data if rows is None else data[rows]

    def dequantized(self, tensor: GgufTensor, rows: slice | None = None) -> np.ndarray:
        """float32 values of the tensor (or of some of its rows), as transformers' loader
        computes them before its tensor processor (gguf's dequantize on the same bytes; a
        row's values do not depend on the other rows)."""
        from gguf import GGMLQuantizationType, dequantize
        values = dequantize(self.raw(tensor, rows), GGMLQuantizationType(tensor.ggml_type))
        if tensor.ggml_type == 0:  # F32: dequantize returns a view of the read-only map
            values = np.array(values)
        return values.reshape(-1, *tensor.shape[1:]) if len(tensor.shape) > 1 else values.reshape(-1)

    def config_dict(self) -> dict:
        """The transformers config dict, as transformers' GGUF loader builds it from the metadata
        (its key mapping; tied embeddings when the file has no output.weight)."""
        from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING
        arch = self.architecture
        if arch not in GGUF_CONFIG_MAPPING:
            raise MirrorSDError(f"GGUF architecture {arch!r} is not supported by transformers.")
        config = {"tie_word_embeddings": all(t.name != "output.weight" for t in self.tensors)}
        for key, value in GGUF_CONFIG_DEFAULTS_MAPPING.get(arch, {}).items():
            config.setdefault(key, value)
        for key, value in self.metadata.items():
            prefix, _, rest = key.partition(".")
            renamed = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest)
            if renamed is not None and renamed != -1:
                config[renamed] = value
        config["model_type"] = _MODEL_TYPES.get(config["model_type"], config["model_type"])
        if "vocab_size" not in config and isinstance(self.metadata.get("tokenizer.ggml.tokens"), int):
            config["vocab_size"] = self.metadata["tokenizer.ggml.tokens"]  # the token count
        return config

    def tokenizer_digest(self) -> str:
        """A digest of the tokenizer's metadata bytes: two files with the same one have the same
        tokenizer (the default pair's do), so it is built once."""
        blob = np.memmap(self.path, mode="r", dtype=np.uint8)
        spans: dict = {}
        _skip_metadata(blob, spans)
        h = hashlib.sha256()
        for key in sorted(spans):
            a, b = spans[key]
            h.update(key.encode() + b"\0" + bytes(blob[a:b]))
        return h.hexdigest()[:16]


def _tensor_table(path: Path, alignment: int) -> list[GgufTensor]:
    """The tensor table after the metadata (names, shapes, types, absolute data offsets)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    with open(path, "rb") as f:
        blob = np.memmap(f, mode="r", dtype=np.uint8)
        count = struct.unpack_from("<Q", blob, 8)[0]
        pos = _skip_metadata(blob)
        entries = []
        for _ in range(count):
            n = struct.unpack_from("<Q", blob, pos)[0]
            name = bytes(blob[pos + 8:pos + 8 + n]).decode()
            pos += 8 + n
            dims = struct.unpack_from("<I", blob, pos)[0]
            shape = tuple(reversed(struct.unpack_from(f"<{dims}Q", blob, pos + 4)))
            ggml_type, offset = struct.unpack_from("<IQ", blob, pos + 4 + 8 * dims)
            pos += 4 + 8 * dims + 12
            entries.append((name, shape, ggml_type, offset))
        data_start = (pos + alignment - 1) // alignment * alignment
    tensors = []
    for name, shape, ggml_type, offset in entries:
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            raise MirrorSDError(f"{path.name}: tensor {name} has ggml type {ggml_type}, which "
                                f"gguf cannot read.") from None
        tensors.append(GgufTensor(name, shape, ggml_type, data_start + offset,
                                  int(np.prod(shape)) // block * size))
    return tensors


_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value bytes


def _skip_value(blob, pos: int, vtype: int) -> int:
    if vtype == 8:  # string: u64 length + bytes
        return pos + 8 + struct.unpack_from("<Q", blob, pos)[0]
    if vtype == 9:  # array: u32 item type, u64 count, items
        itype, count = struct.unpack_from("<IQ", blob, pos)
        pos += 12
        if itype in _FIXED:
            return pos + count * _FIXED[itype]
        for _ in range(count):
            pos = _skip_value(blob, pos, itype)
        return pos
    return pos + _FIXED[vtype]


def _skip_metadata(blob, tokenizer_spans: dict | None = None) -> int:
    """The offset after the metadata; the byte spans of the tokenizer's values (keys
    "tokenizer.*") go into `tokenizer_spans`."""
    pos = 24
    for _ in range(struct.unpack_from("<Q", blob, 16)[0]):
        n = struct.unpack_from("<Q", blob, pos)[0]
        key = bytes(blob[pos + 8:pos + 8 + n]).decode()
        vtype = struct.unpack_from("<I", blob, pos + 8 + n)[0]
        start = pos + 12 + n
        pos = _skip_value(blob, start, vtype)
        if tokenizer_spans is not None and key.startswith("tokenizer."):
            tokenizer_spans[key] = (start, pos)
    return pos


def hf_names(gguf: GgufFile, meta_model) -> tuple[dict[str, str], object]:
    """({gguf name: model parameter name}, transformers' tensor processor for the file), with
    transformers' own mapping (`get_gguf_hf_weights_map`) on a model built on the meta device."""
    from transformers.modeling_gguf_pytorch_utils import (TENSOR_PROCESSORS, TensorProcessor,
                                                          get_gguf_hf_weights_map)
    processor = TENSOR_PROCESSORS.get(gguf.architecture, TensorProcessor)(
        config=gguf.config_dict())
    return get_gguf_hf_weights_map(meta_model, processor), processor


def processed(processor, tensor: GgufTensor, values: np.ndarray,
              names: dict[str, str]) -> tuple[str | None, torch.Tensor]:
    """(model parameter name or None when the model has no such tensor, float32 tensor) after
    transformers' tensor processor (Llama's q/k permutation, Gemma's norm offset...)."""
    result = processor.process(weights=values, name=tensor.name, tensor_key_mapping=names,
                               parsed_parameters={"tensors": {}})
    return names.get(result.name), torch.from_numpy(np.ascontiguousarray(result.weights))


def iter_tensors(gguf: GgufFile, names: dict[str, str], processor, max_rows: int | None = None
                 ) -> Iterator[tuple[GgufTensor, str | None, torch.Tensor]]:
    """(tensor, parameter name, float32 values) for each tensor of the file, in file order;
    with `max_rows`, a tensor of more rows comes in several row blocks (same name) when its
    processor leaves rows alone (transformers' processors for the bundled architectures do)."""
    for t in gguf.tensors:
        step = max_rows if max_rows and len(t.shape) == 2 and t.rows > max_rows and \
            _row_wise(processor) else t.rows
        for lo in range(0, t.rows, step):
            values = gguf.dequantized(t, slice(lo, lo + step))
            name, tensor = processed(processor, t, values, names)
            yield t, name, tensor


def _row_wise(processor) -> bool:
    """Whether transformers' processor treats every value on its own (none, or Gemma's norm
    offset), so a tensor may be processed in row blocks; others (Llama's q/k permutation) need
    the whole tensor."""
    from transformers.modeling_gguf_pytorch_utils import Gemma2TensorProcessor, TensorProcessor
    return type(processor) in (TensorProcessor, Gemma2TensorProcessor)


def _q8_0(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    return blocks[:, 2:].copy().view(np.int8), d, None


def _q5_0(blocks: np.ndarray):
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    qh = blocks[:, 2:6].copy().view(np.uint32) >> np.arange(32, dtype=np.uint32)[None, :]
    ql = blocks[:, 6:22]
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=1)
    q = (low | (((qh & 1).astype(np.uint8)) << 4)).astype(np.int8) - np.int8(16)
    return q, d, None


def _q4_k(blocks: np.ndarray):
    from gguf.quants import Q4_K
    n = blocks.shape[0]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16].copy())
    qs = blocks[:, 16:].reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    q = (qs & 0x0F).reshape(n * 8, 32)
    return q, (d * sc.astype(np.float32)).reshape(-1, 1), (dmin * m.astype(np.float32)).reshape(-1, 1)


# ggml type -> (values per group, [blocks] -> (q per value, scale and offset per group))
_GROUPED = {8: (32, _q8_0), 6: (32, _q5_0), 12: (32, _q4_k)}


def grouped(gguf: GgufFile, tensor: GgufTensor, values: torch.Tensor) -> dict | None:
    """A 2-D tensor stored as GGUF Q8_0, Q5_0 or Q4_K, kept as its blocks' integers and group
    scales ({"q": int8/uint8 [N, K], "scale": [N, K/32], "offset": [N, K/32] or absent}), when
    `ungroup` of them gives exactly `values` (checked here, so a processor that changed the
    values, or any difference, keeps the float tensor: None). About a quarter of the float32
    bytes (the default pair's embeddings: 1.5 GB -> 0.45 GB)."""
    if tensor.ggml_type not in _GROUPED or values.dim() != 2:
        return None
    size, split = _GROUPED[tensor.ggml_type]
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(tensor.ggml_type)][1]
    q, scale, offset = split(np.asarray(gguf.raw(tensor)).reshape(-1, block_bytes))
    rows = values.shape[0]
    parts = {"q": torch.from_numpy(np.ascontiguousarray(q)).reshape(rows, -1),
             "scale": torch.from_numpy(np.ascontiguousarray(scale)).reshape(rows, -1)}
    if offset is not None:
        parts["offset"] = torch.from_numpy(np.ascontiguousarray(offset)).reshape(rows, -1)
    return parts if torch.equal(ungroup(parts), values) else None


def ungroup(parts: dict) -> torch.Tensor:
    """The float32 values of `grouped`'s parts, computed as gguf's dequantize computes them
    (scale * q, minus the offset where there is one)."""
    q, scale = parts["q"], parts["scale"]
    rows, k = q.shape
    out = q.view(rows, scale.shape[1], -1).to(torch.float32).mul_(scale[:, :, None])
    if "offset" in parts:
        out.sub_(parts["offset"][:, :, None])
    return out.view(rows, k)
