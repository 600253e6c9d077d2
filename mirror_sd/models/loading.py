"""Turn model names into a checked `ModelPair`, or one model.

`load_pair` loads a (target, draft) pair with both tokenizers (ModelPair decides from them
whether the pair shares a vocabulary or needs a bridge); `load_target` a second target alone;
`load_model` one model (and its tokenizer) by name, as the trainers use it. Every path goes
through the same steps: names to sources (names.py; "default" and the names of `BUNDLED` are
bundled models, bundled.py), the checks that can fail before any weights are read (precision
and device, memory), loading on the devices `placement.resolve_placement()` picks, and the
precision's conversion (precision.py). Decoding lives elsewhere.

A bundled model at int8 or int4 on a CPU loads from its quantized cache (quantized.py; the AVX2
kernels compile in the background meanwhile), otherwise from its fp32 folder, each built from
the GGUF the first time it is needed. The loaders' `progress(message, fraction)` says, in user
terms, "Loading the models: <what>", or, while a cache is built (once per machine), "Preparing
the models, once per machine: step k of m, <what> (about N s left on this machine)": the
estimate is measured as the step goes (bundled.Steps); the last step is the loading.

Build the default pair's cache ahead of time: `python -m mirror_sd.models --prepare-default`
(`--prepare gemma-3-270m` for a bundled model by name; this module's own
`python -m mirror_sd.models.loading` takes the same flags).
"""
from __future__ import annotations

import logging
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror_sd.errors import MirrorSDError
from mirror_sd.models.bundled import (BUNDLED, DEFAULT_DRAFT, DEFAULT_TARGET, DEFAULTS,
                                      PREPARING, Progress, Steps, bundled_model, bundled_name,
                                      default_cache_dir, ensure_bundled, ensure_default_pair,
                                      is_built, report)
from mirror_sd.models.memory import check_memory, pool
from mirror_sd.models.names import Source, inspect, load_error, resolve
from mirror_sd.models.pair import ModelPair, model_device
from mirror_sd.models.precision import (PRECISIONS, KernelChoice, Precision, apply_precision,
                                        check_precisions, convert_lean, kernel_choice,
                                        row_exact_attention_fits)
from mirror_sd.placement import Placement, configure_cpu_threads, resolve_placement

# What callers take from here: the loaders, and the names they are usually imported with.
__all__ = ["load_pair", "load_target", "load_model", "LoadedModel", "apply_precision",
           "PRECISIONS", "BUNDLED", "DEFAULT_TARGET", "DEFAULT_DRAFT", "default_cache_dir",
           "ensure_default_pair"]

log = logging.getLogger(__name__)


def _load_model(src: Source, role: str, prec: Precision, device_map, max_memory,
                trust_remote_code: bool):
    """from_pretrained for `src` at the precision's dtype; errors become MirrorSDErrors."""
    from transformers import AutoModelForCausalLM
    kwargs = dict(dtype=prec.dtype, device_map=device_map, trust_remote_code=trust_remote_code,
                  **src.kwargs())
    if max_memory:
        kwargs["max_memory"] = max_memory
    try:
        model = AutoModelForCausalLM.from_pretrained(src.path, **kwargs)
    except Exception as e:
        raise load_error(src, role, e) from e
    return model


def _bundled(name: str, role: str):
    """The bundled model `name` stands for in `role` ("default": the default pair's), or None."""
    return DEFAULTS[role] if name == "default" else bundled_model(name)


def cache_kind(prec_name: str | None, device: str, kernels: KernelChoice) -> str:
    """Which cache of a bundled model a role loads: its precision's own where the AVX2 kernels
    take it straight from the cache (int8, int4 on a CPU), else the fp32 folder."""
    if prec_name in ("int8", "int4") and device == "cpu" and kernels.kernels == "auto":
        return prec_name
    return "fp32"


@dataclass
class _Resolved:
    srcs: dict[str, Source]
    quantized: dict[str, str]  # role -> "int8" / "int4": a bundled model's quantized cache
    steps: Steps | None  # the one-time preparation's progress, when there was any


def resolve_sources(names: dict[str, str], trust_remote_code: bool, cache_dir,
             progress: Progress | None, kinds: dict[str, str] | None = None) -> _Resolved:
    """The Source of each role; bundled models built first where their cache (`kinds[role]`:
    "int8", "int4" or, the default, "fp32") is missing."""
    # Named models first: a typo must not wait for a bundled model's first-time build.
    srcs = {role: resolve(name, role, trust_remote_code, cache_dir)
            for role, name in names.items() if _bundled(name, role) is None}
    kinds = kinds or {}
    todo = {(_bundled(names[r], r), kinds.get(r, "fp32")) for r in names if r not in srcs}
    todo = [t for t in todo if not is_built(*t, cache_dir)]
    steps = Steps(progress, len(todo) + 1, 0.0, 0.9) if todo else None  # +1: the loading
    quantized = {}
    for role in ("draft", "target"):  # the smaller first: its rate estimates the other's time
        if role in names and role not in srcs:
            kind = kinds.get(role, "fp32")
            path = ensure_bundled(_bundled(names[role], role), cache_dir, progress, kind,
                                  f"the {role}", steps)
            label = f"default {role}" if names[role] == "default" else bundled_name(names[role])
            srcs[role] = Source(f"{label} ({path.name})", str(path))
            if kind != "fp32":
                quantized[role] = kind
    return _Resolved(srcs, quantized, steps)


QUANTIZED_BYTES_PER_PARAM = 1.5  # an int8 cache's weights, its float32 embeddings, slack


def _bytes(resolved: _Resolved, role: str, precs: dict[str, Precision]) -> float:
    """Bytes a parameter takes while loading: a quantized cache's, else the precision's."""
    return QUANTIZED_BYTES_PER_PARAM if role in resolved.quantized else precs[role].bytes_per_param


def _resolve(names: dict[str, str], names_prec: dict[str, str | None], placement: Placement,
             kernels: KernelChoice, trust_remote_code: bool, cache_dir,
             progress: Progress | None, weights: bool = True) -> _Resolved:
    """The sources of `names` at their precisions: the kernel build started in the background,
    bundled models' caches built where missing (the kind each precision loads from), and,
    where a quantized cache is to be loaded, the kernels waited for. weights=False: for the
    tokenizer only, any cache (the int8 one, the quickest to build, if there is none)."""
    devices = {r: _devices(placement)[r] for r in names}
    if not weights:
        kinds = {r: "fp32" if _bundled(n, r) and is_built(_bundled(n, r), "fp32", cache_dir)
                 else "int8" for r, n in names.items()}
        resolved = resolve_sources(names, trust_remote_code, cache_dir, progress, kinds)
        resolved.quantized.clear()  # nothing is loaded from it
        return resolved
    _start_kernel_build({r: names_prec[r] for r in names}, devices, kernels)
    kinds = {r: cache_kind(names_prec[r], devices[r], kernels) for r in names}
    resolved = resolve_sources(names, trust_remote_code, cache_dir, progress, kinds)
    _kernels_ready(resolved, names, cache_dir, progress)
    return resolved


def _say_loading(resolved: _Resolved, progress: Progress | None, what: str,
                 fraction: float) -> None:
    """"Loading the models: <what>", or, after a one-time preparation, its last step."""
    steps = resolved.steps
    if steps is None:
        report(progress, f"Loading the models: {what}", fraction)
    else:
        report(progress, f"{PREPARING}: step {steps.total} of {steps.total}, loading {what}",
               steps.end + (1 - steps.end) * fraction)


def _devices(placement: Placement) -> dict[str, str]:
    return {"target": placement.target_device, "draft": placement.draft_device}


def _load_role(role: str, src: Source, prec_name: str | None, placement: Placement,
               trust_remote_code: bool, kernels: KernelChoice,
               quantized: str | None = None) -> tuple[object, dict]:
    """One model, loaded on its placement and converted to its precision; and its info.
    prec_name None: fp32 as stored, on transformers' own layers (no conversion). `quantized`:
    src is a bundled model's int8 / int4 cache (quantized.py), loaded without an fp32 copy."""
    t0 = time.perf_counter()
    if quantized:
        from mirror_sd.models.quantized import cache_info, load_cache
        model = load_cache(Path(src.path), prec_name, role, kernels)
        params = cache_info(Path(src.path))["params"]
    else:
        model = _load_model(src, role, PRECISIONS[prec_name or "fp32"],
                            placement.target_device_map if role == "target"
                            else placement.draft_device,
                            placement.max_memory if role == "target" else None, trust_remote_code)
        params = sum(p.numel() for p in model.parameters())
        if prec_name is not None:
            model = convert_lean(model, prec_name, role, kernels)
    return model, {
        "source": src.name, "path": str(Path(src.path) / (src.gguf_file or "")),
        "load_s": round(time.perf_counter() - t0, 2),
        "device": str(model_device(model)),
        "device_map": getattr(model, "hf_device_map", None),
        "params": params,
        "precision": prec_name or "fp32",
        "layers": int(model.config.num_hidden_layers),
    }


def _start_kernel_build(precs: dict[str, str | None], devices: dict[str, str],
                        kernels: KernelChoice) -> None:
    """Start compiling the AVX2 kernels in the background (one compiler job, beside a model
    conversion) when a role will run on them and they are not built in this process yet."""
    if kernels.kernels == "auto" and any(p in ("int8", "int4") and devices[r] == "cpu"
                                         for r, p in precs.items()):
        from mirror_sd.cpu import int8 as native_int8
        native_int8.start_build(jobs=1)


def _kernels_ready(resolved: _Resolved, names: dict[str, str], cache_dir,
                   progress: Progress | None) -> None:
    """Wait for the kernel build the quantized caches need, saying so; where it could not be
    built, those roles load the fp32 folder instead (int8 then runs on fbgemm)."""
    if not resolved.quantized:
        return
    from mirror_sd.cpu import int8 as native_int8
    t0 = time.perf_counter()
    while not native_int8.built():
        thread = native_int8.start_build(jobs=None)  # none running (a failed start): build now
        step = resolved.steps
        so_far = native_int8.build_seconds_so_far() or 0
        message = f"waiting for the CPU kernels to compile ({so_far:.0f} s so far; about a minute, once per machine)"
        report(progress, f"{PREPARING}: step {step.total} of {step.total}, {message}"
               if step else f"Loading the models: {message}", step.end if step else 0.1)
        if thread is not None:
            thread.join(2.0)
    if time.perf_counter() - t0 > 0.5:
        log.info("waited %.1f s for the kernel build", time.perf_counter() - t0)
    if native_int8.available():
        return
    for role, kind in list(resolved.quantized.items()):  # fbgemm loads the fp32 folder
        _warn_log(f"the AVX2 kernels are not available ({native_int8.unavailable_reason()}): "
                  f"the {role} loads from its fp32 folder for fbgemm's int8")
        path = ensure_bundled(_bundled(names[role], role), cache_dir, progress, "fp32",
                              f"the {role}", resolved.steps)
        resolved.srcs[role] = Source(f"{resolved.srcs[role].name.split(' (')[0]} ({path.name})",
                                     str(path))
        del resolved.quantized[role]


def _warn_log(message: str) -> None:
    log.warning(message)


def load_tokenizer(src: Source, trust_remote_code: bool, whose: str = "the target"):
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(src.path, trust_remote_code=trust_remote_code,
                                             **src.kwargs())
    except Exception as e:
        raise MirrorSDError(f"Could not load a tokenizer from {whose} {src.name!r}: "
                            f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r}") from e


def _warn(info: dict, progress: Progress | None, warning: str) -> None:
    """A warning for the caller to show: in info["warnings"], the log and the progress."""
    info["warnings"].append(warning)
    log.warning(warning)
    report(progress, f"warning: {warning}")


def load_pair(target: str = "default", draft: str = "default", *, precision: str = "fp32",
              target_device: str = "auto", draft_device: str = "auto",
              max_memory: dict | None = None, trust_remote_code: bool = False,
              progress: Progress | None = None, cache_dir: str | os.PathLike | None = None,
              memory_limit_bytes: int | None = None, target_precision: str | None = None,
              draft_precision: str | None = None, kernels: str | None = None,
              fast_layers: bool | None = None, onednn: bool | None = None) -> ModelPair:
    """Load a (target, draft) pair with the target's tokenizer (chat template, token ids) and
    the draft's (info["draft_tokenizer_load_s"]); a draft with another vocabulary is allowed.

    `target`/`draft`: "default" (the bundled Qwen2.5-Coder 1.5B / 0.5B pair), a bundled model's
    name (`BUNDLED`: "gemma-3-270m"...), a Hugging Face hub id, a local model folder, or a .gguf
    file. info["warnings"] lists what the caller should show (a draft larger than its target; a
    sliding-window target at a row-exact precision, whose verification then is not row-exact).
    `progress(message, fraction)` is called at each phase, in user terms (the module
    docstring; fraction in [0, 1], never going back). `cache_dir` holds the bundled models (and
    hub downloads under `hub/`); one at int8 or int4 on a CPU loads from its quantized cache.
    `memory_limit_bytes` replaces the free memory of each pool (RAM, each GPU) in the check
    made before loading: for tests, or to cap what the pair may use.
    `precision` applies to both models unless `target_precision` / `draft_precision` say
    otherwise; the baseline (AR) always runs the target exactly as the other methods do.
    `kernels` ("auto": the AVX2 extension where it builds, else fbgemm; "fbgemm") and
    `fast_layers` (decoder layers on the extension in two C++ calls) choose the CPU kernels of
    the reduced precisions, `onednn` whether fp32 linears on a CPU run on oneDNN with their
    weights packed once (else torch's own); left None, the environment decides
    (`MIRROR_SD_NATIVE_INT8=0`: fbgemm; `MIRROR_SD_FAST_LAYERS=0`: no fast layers;
    `MIRROR_SD_ONEDNN=0`: torch's linears), else "auto", True and True."""
    choice = kernel_choice(kernels, fast_layers, onednn)
    placement = resolve_placement(target_device, draft_device, max_memory)
    names_prec = {"target": target_precision or precision, "draft": draft_precision or precision}
    precs = check_precisions(names_prec, _devices(placement), choice)

    report(progress, "Loading the models: checking them", 0.0)
    names = {"target": target, "draft": draft}
    resolved = _resolve(names, names_prec, placement, choice, trust_remote_code, cache_dir,
                        progress)
    srcs = resolved.srcs
    t_params, d_params = _check_pair_memory(resolved, names_prec, precs, placement, trust_remote_code,
                                            memory_limit_bytes)
    info: dict = {"precision": names_prec["target"], "draft_precision": names_prec["draft"],
                  "dtype": str(precs["target"].dtype).replace("torch.", ""), "placement": placement,
                  "warnings": []}
    if d_params > t_params:
        _warn(info, progress, f"the draft ({d_params:,} params) is larger than the target "
                              f"({t_params:,}): speculative decoding cannot be faster than the "
                              f"target alone")
    models = _load_models(resolved, names_prec, precs, placement, trust_remote_code, choice, info,
                          progress)
    toks = _load_tokenizers(srcs, trust_remote_code, info)
    pair = ModelPair(models["target"], models["draft"], toks["target"],
                     target_name=srcs["target"].name, draft_name=srcs["draft"].name,
                     precision=names_prec["target"], info=info, draft_tokenizer=toks["draft"])
    # every method (AR included) then runs with the same thread budget: a fair comparison
    configure_cpu_threads(info["placement"])
    report(progress, "Loading the models: done", 1.0)
    return pair


def _check_pair_memory(resolved, names_prec, precs, placement, trust_remote_code,
                       memory_limit_bytes) -> tuple[int, int]:
    """The two models' parameter counts, after checking that both fit where they go."""
    srcs = resolved.srcs
    (t_params, _), (d_params, _) = (inspect(srcs[r], r, trust_remote_code)
                                    for r in ("target", "draft"))
    # Vocabularies are compared by ModelPair from the two tokenizers: the same one makes a
    # plain pair, different ones a cross-tokenizer pair (or a clear error without overlap).
    needs = defaultdict(float)
    needs[pool(placement.target_device_map)] += t_params * _bytes(resolved, "target", precs)
    needs[pool(placement.draft_device)] += d_params * _bytes(resolved, "draft", precs)
    label = "/".join(dict.fromkeys(names_prec.values()))
    check_memory(needs, memory_limit_bytes, f"The pair in {label} needs", placement)
    return t_params, d_params


def _load_models(resolved, names_prec, precs, placement, trust_remote_code, choice, info: dict,
                 progress) -> dict:
    """{"target": model, "draft": model}, each one's load facts in info[role]."""
    srcs, models = resolved.srcs, {}
    for role, frac in (("target", 0.3), ("draft", 0.8)):
        _say_loading(resolved, progress, f"the {role} ({names_prec[role]}, {srcs[role].name})",
                     frac)
        models[role], info[role] = _load_role(role, srcs[role], names_prec[role], placement,
                                              trust_remote_code, choice,
                                              resolved.quantized.get(role))
    if precs["target"].exact_rows and not row_exact_attention_fits(models["target"].config):
        _warn(info, progress, f"the target has sliding-window attention: at {names_prec['target']} "
                              f"its verification is not row-exact (greedy output matches "
                              f"decoding token by token in practice, as in fp32, not by "
                              f"construction)")
    return models


def _load_tokenizers(srcs, trust_remote_code: bool, info: dict) -> dict:
    """Both tokenizers, timed into info: the target's gives the chat template and the token
    ids; the draft's, the bridge."""
    toks = {}
    for role, whose in (("target", "the target"), ("draft", "the draft")):
        t0 = time.perf_counter()
        toks[role] = load_tokenizer(srcs[role], trust_remote_code, whose)
        info["tokenizer_load_s" if role == "target" else "draft_tokenizer_load_s"] = \
            round(time.perf_counter() - t0, 2)
    return toks


def load_target(target: str = "default", *, precision: str = "fp32",
                target_device: str = "auto", draft_device: str = "auto",
                max_memory: dict | None = None, trust_remote_code: bool = False,
                progress: Progress | None = None, cache_dir: str | os.PathLike | None = None,
                memory_limit_bytes: int | None = None, kernels: str | None = None,
                fast_layers: bool | None = None, onednn: bool | None = None):
    """The target of `load_pair(target, ..., target_precision=precision)` alone: no draft, no
    tokenizer, threads left as they are. For a second copy of a pair's target at another
    precision (bench --baseline-precision); `draft_device` only matters where "auto" places
    the target next to a draft, as it does in load_pair. `kernels`, `fast_layers`, `onednn`: as
    in load_pair."""
    choice = kernel_choice(kernels, fast_layers, onednn)
    placement = resolve_placement(target_device, draft_device, max_memory)
    precs = check_precisions({"target": precision}, _devices(placement), choice)
    resolved = _resolve({"target": target}, {"target": precision}, placement, choice,
                        trust_remote_code, cache_dir, progress)
    src = resolved.srcs["target"]
    params, _ = inspect(src, "target", trust_remote_code)
    check_memory({pool(placement.target_device_map): params * _bytes(resolved, "target", precs)},
                 memory_limit_bytes, f"The target in {precision} needs", placement)
    _say_loading(resolved, progress, f"the target ({precision}, {src.name})", 0.2)
    model, _ = _load_role("target", src, precision, placement, trust_remote_code, choice,
                          resolved.quantized.get("target"))
    report(progress, "Loading the models: done", 1.0)
    return model


@dataclass
class LoadedModel:
    model: Any  # None when only the tokenizer was asked for
    tokenizer: Any  # None when not asked for
    source: Source  # source.name for messages; source.path the folder (or hub id)


def load_model(name: str = "default", role: str = "target", *, precision: str | None = None,
               device: str = "cpu", weights: bool = True, tokenizer: bool = True,
               trust_remote_code: bool = False, cache_dir: str | os.PathLike | None = None,
               progress: Progress | None = None, kernels: str | None = None,
               fast_layers: bool | None = None, onednn: bool | None = None) -> LoadedModel:
    """One model by name ("default": the bundled pair's model for `role`; a `BUNDLED` name),
    in eval mode, on `device`, with the same name handling and checks as load_pair. `precision`
    None: float32 as stored, on transformers' own layers (what the trainers fit on); a
    precision name: converted as load_pair converts. `weights=False`: the tokenizer only."""
    choice = kernel_choice(kernels, fast_layers, onednn)
    placement = resolve_placement(device, device)
    if weights:
        precs = check_precisions({role: precision or "fp32"}, _devices(placement), choice)
    resolved = _resolve({role: name}, {role: precision}, placement, choice, trust_remote_code,
                        cache_dir, progress, weights)
    src = resolved.srcs[role]
    model = None
    if weights:
        params, _ = inspect(src, role, trust_remote_code)
        where = placement.target_device_map if role == "target" else placement.draft_device
        check_memory({pool(where): params * _bytes(resolved, role, precs)}, None,
                     f"The {role} in {precision or 'fp32'} needs", placement)
        _say_loading(resolved, progress, f"the {role} ({precision or 'fp32'}, {src.name})", 0.2)
        model, _ = _load_role(role, src, precision, placement, trust_remote_code, choice,
                              resolved.quantized.get(role))
        model.eval()
    tok = load_tokenizer(src, trust_remote_code, f"the {role}") if tokenizer else None
    return LoadedModel(model, tok, src)


def main(argv=None) -> int:
    from mirror_sd.models.bundled import main as prepare
    return prepare(argv, prog="python -m mirror_sd.models.loading")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    raise SystemExit(main())
