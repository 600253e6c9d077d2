"""Timing helpers shared by the measurement scripts in this folder."""
import argparse
import statistics
import time

import torch
from transformers import DynamicCache


def median_ms(f, n, warmup=0):
    """Median wall time of n calls of f(), in ms, after `warmup` untimed calls."""
    for _ in range(warmup):
        f()
    times = []
    for _ in range(n):
        t = time.perf_counter_ns()
        f()
        times.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(times)


@torch.inference_mode()
def forward_ms(model, ids, rows, n=10):
    """(median ms, last logits) of n forwards of `rows` new tokens on a 100-token context
    (ids[:, :100]), after two warm-up forwards; the cache is cropped back, untimed, each time."""
    cache = DynamicCache(config=model.config)
    model(ids[:, :100], past_key_values=cache, use_cache=True, logits_to_keep=1)
    out, times = None, []
    for i in range(n + 2):
        t = time.perf_counter_ns()
        out = model(ids[:, 100:100 + rows], past_key_values=cache, use_cache=True).logits
        if i >= 2:
            times.append((time.perf_counter_ns() - t) / 1e6)
        cache.crop(-rows)
    return statistics.median(times), out


SHAPES = (("decode 1 token", 1, 1), ("batch of 4 rows", 1, 4), ("4 tokens of one row", 4, 1))


def model_args(**options) -> argparse.Namespace:
    """The parsed command line of a script that measures one model of the default pair:
    `--model` (draft or target), and `--NAME` for each keyword, its value the default (whose
    type the option takes)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["draft", "target"], default="draft")
    for name, default in options.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return ap.parse_args()


def default_model(role: str, precision: str):
    """The default pair's target or draft at `precision`, converted as load_pair converts it
    (the kernels as load_pair chooses them: MIRROR_SD_NATIVE_INT8 / MIRROR_SD_FAST_LAYERS /
    MIRROR_SD_ONEDNN apply)."""
    from transformers import AutoModelForCausalLM
    from mirror_sd.models.loading import (DEFAULT_DRAFT, DEFAULT_TARGET, apply_precision,
                                          default_cache_dir, ensure_default_pair)
    from mirror_sd.models.precision import kernel_choice
    ensure_default_pair()
    bundled = DEFAULT_DRAFT if role == "draft" else DEFAULT_TARGET
    path = default_cache_dir() / f"{bundled.stem}-hf"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return apply_precision(model, precision, role, kernel_choice())


def interleaved(models: dict, rounds: int, threads=(1, 2), shapes=SHAPES):
    """Forward times of each model over `shapes` and thread counts, interleaved (the models'
    order alternating by round). Returns ({(threads, label, name): median ms},
    {(threads, label, name): the last round's logits})."""
    ids = torch.randint(0, 20000, (4, 108), generator=torch.Generator().manual_seed(0))
    names = list(models)
    times, logits = {}, {}
    for rnd in range(rounds):
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            for label, rows, batch in shapes:
                for name in (names if rnd % 2 == 0 else names[::-1]):
                    ms, logits[(n_threads, label, name)] = forward_ms(models[name], ids[:batch], rows)
                    times.setdefault((n_threads, label, name), []).append(ms)
    return {k: statistics.median(v) for k, v in times.items()}, logits


def lean_copy(model):
    """A copy of `model` on lean_layers' forward (transformers' arithmetic) instead of fast_layers'."""
    import copy
    from mirror_sd.cpu import lean_layers
    other = copy.deepcopy(model)
    for module in other.modules():
        vars(module).pop("forward", None)
    lean_layers.install(other)
    return other


def kernel_layers(model) -> list:
    """The model's layers on the extension's kernels (native_int8 / native_int4), each once:
    the fused q/k/v and gate/up groups (cpu_kernels.FusedPart's shared layer) included."""
    from mirror_sd.cpu.linears import FusedPart
    layers = {}
    for m in model.modules():
        m = m._group.linear if isinstance(m, FusedPart) else m
        if callable(getattr(m, "kernel_args", None)):
            layers[id(m)] = m
    return list(layers.values())


def kernel_bytes(layer) -> int:
    """Bytes of a kernel layer's parameters: what one forward over it reads."""
    return sum(t.numel() * t.element_size() for t in layer.kernel_args())
