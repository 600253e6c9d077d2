"""Turn model names into a checked `ModelPair`, or one model.

`load_pair` loads a (target, draft) pair with both tokenizers (ModelPair decides from them
whether the pair shares a vocabulary or needs a bridge); `load_target` a second target alone;
`load_model` one model (and its tokenizer) by name, as the trainers use it. Every path goes
through the same steps: names to sources (names.py; "default" and the names of `BUNDLED` are
bundled models, bundled.py), the checks that can fail before any weights are read (precision
and device, memory), loading on the devices `placement.resolve_placement()` picks, and the
precision's conversion (precision.py). Decoding lives elsewhere.

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
                                      Progress, bundled_model, bundled_name, default_cache_dir,
                                      ensure_bundled, ensure_default_pair, report)
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


def _sources(names: dict[str, str], trust_remote_code: bool, cache_dir,
             progress: Progress | None) -> dict[str, Source]:
    # Named models first: a typo must not wait for a bundled model's first-time build.
    srcs = {role: resolve(name, role, trust_remote_code, cache_dir)
            for role, name in names.items() if _bundled(name, role) is None}
    for role in ("target", "draft"):
        if role in names and role not in srcs:
            path = ensure_bundled(_bundled(names[role], role), cache_dir, progress)
            label = f"default {role}" if names[role] == "default" else bundled_name(names[role])
            srcs[role] = Source(f"{label} ({path.name})", str(path))
    return srcs


def _devices(placement: Placement) -> dict[str, str]:
    return {"target": placement.target_device, "draft": placement.draft_device}


def _load_role(role: str, src: Source, prec_name: str | None, placement: Placement,
               trust_remote_code: bool, kernels: KernelChoice) -> tuple[object, dict]:
    """One model, loaded on its placement and converted to its precision; and its info.
    prec_name None: fp32 as stored, on transformers' own layers (no conversion)."""
    t0 = time.perf_counter()
    model = _load_model(src, role, PRECISIONS[prec_name or "fp32"],
                        placement.target_device_map if role == "target" else placement.draft_device,
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


def _tokenizer(src: Source, trust_remote_code: bool, whose: str = "the target"):
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
    `progress(message, fraction)` is called at each phase. `cache_dir` holds the bundled models
    (and hub downloads under `hub/`).
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

    report(progress, "checking the models", 0.0)
    names = {"target": target, "draft": draft}
    srcs = _sources(names, trust_remote_code, cache_dir, progress)
    (t_params, _), (d_params, _) = (inspect(srcs[r], r, trust_remote_code)
                                    for r in ("target", "draft"))
    # Vocabularies are compared by ModelPair from the two tokenizers: the same one makes a
    # plain pair, different ones a cross-tokenizer pair (or a clear error without overlap).
    needs = defaultdict(float)
    needs[pool(placement.target_device_map)] += t_params * precs["target"].bytes_per_param
    needs[pool(placement.draft_device)] += d_params * precs["draft"].bytes_per_param
    label = "/".join(dict.fromkeys(names_prec.values()))
    check_memory(needs, memory_limit_bytes, f"The pair in {label} needs", placement)

    info: dict = {"precision": names_prec["target"], "draft_precision": names_prec["draft"],
                  "dtype": str(precs["target"].dtype).replace("torch.", ""), "placement": placement,
                  "warnings": []}
    if d_params > t_params:
        _warn(info, progress, f"the draft ({d_params:,} params) is larger than the target "
                              f"({t_params:,}): speculative decoding cannot be faster than the "
                              f"target alone")
    models = {}
    for role, frac in (("target", 0.2), ("draft", 0.7)):
        report(progress, f"loading {role} {srcs[role].name}", frac)
        models[role], info[role] = _load_role(role, srcs[role], names_prec[role], placement,
                                              trust_remote_code, choice)
    if precs["target"].exact_rows and not row_exact_attention_fits(models["target"].config):
        _warn(info, progress, f"the target has sliding-window attention: at {names_prec['target']} "
                              f"its verification is not row-exact (greedy output matches "
                              f"decoding token by token in practice, as in fp32, not by "
                              f"construction)")
    toks = {}
    for role, whose in (("target", "the target"), ("draft", "the draft")):
        t0 = time.perf_counter()
        # the target's gives the chat template and the token ids; the draft's, the bridge
        toks[role] = _tokenizer(srcs[role], trust_remote_code, whose)
        info["tokenizer_load_s" if role == "target" else "draft_tokenizer_load_s"] = \
            round(time.perf_counter() - t0, 2)
    pair = ModelPair(models["target"], models["draft"], toks["target"],
                     target_name=srcs["target"].name, draft_name=srcs["draft"].name,
                     precision=names_prec["target"], info=info, draft_tokenizer=toks["draft"])
    # every method (AR included) then runs with the same thread budget: a fair comparison
    configure_cpu_threads(info["placement"])
    report(progress, "done", 1.0)
    return pair


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
    prec = check_precisions({"target": precision}, _devices(placement), choice)["target"]
    src = _sources({"target": target}, trust_remote_code, cache_dir, progress)["target"]
    params, _ = inspect(src, "target", trust_remote_code)
    check_memory({pool(placement.target_device_map): params * prec.bytes_per_param},
                 memory_limit_bytes, f"The target in {precision} needs", placement)
    report(progress, f"loading target {src.name} in {precision}", 0.2)
    model, _ = _load_role("target", src, precision, placement, trust_remote_code, choice)
    report(progress, "done", 1.0)
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
    src = _sources({role: name}, trust_remote_code, cache_dir, progress)[role]
    model = None
    if weights:
        choice = kernel_choice(kernels, fast_layers, onednn)
        placement = resolve_placement(device, device)
        prec = check_precisions({role: precision or "fp32"}, _devices(placement), choice)[role]
        params, _ = inspect(src, role, trust_remote_code)
        where = placement.target_device_map if role == "target" else placement.draft_device
        check_memory({pool(where): params * prec.bytes_per_param}, None,
                     f"The {role} in {precision or 'fp32'} needs", placement)
        report(progress, f"loading {role} {src.name}", 0.2)
        model, _ = _load_role(role, src, precision, placement, trust_remote_code, choice)
        model.eval()
    tok = _tokenizer(src, trust_remote_code, f"the {role}") if tokenizer else None
    return LoadedModel(model, tok, src)


def main(argv=None) -> int:
    from mirror_sd.models.bundled import main as prepare
    return prepare(argv, prog="python -m mirror_sd.models.loading")


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    raise SystemExit(main())
