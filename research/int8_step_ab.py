"""The int8 target's forward step, A/B in one process (docs/performance.md, "Kernels").

    git show REVISION:mirror_sd/cpu/linears.py > out/old_linears.py
    python research/int8_step_ab.py kernels --old out/old_linears.py

kernels: the target converted by an older cpu_kernels.py (--old), by this one without fused
projections, and by this one; median ms of decode (1 token) and verify (4 tokens) after a
100-token context, interleaved, and whether fused and unfused logits are bit-identical.
"""
import argparse
import copy
import importlib.util
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

from mirror_sd.cpu import linears as cpu_kernels  # noqa: E402
from mirror_sd.cpu import exact_attention  # noqa: E402
from mirror_sd.models.loading import DEFAULT_TARGET, default_cache_dir  # noqa: E402


def fp32_target():
    path = default_cache_dir() / f"{DEFAULT_TARGET.stem}-hf"
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def timed(model, x, cache):
    t = time.perf_counter_ns()
    logits = model(x, cache=cache, use_cache=True).logits
    return (time.perf_counter_ns() - t) / 1e6, logits


def kernels(old_path):
    base = fp32_target()
    models = {}
    if old_path:
        spec = importlib.util.spec_from_file_location("old_kernels", old_path)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
        models["old"] = old.row_int8(copy.deepcopy(base))
    models["unfused"] = cpu_kernels.row_int8(copy.deepcopy(base), fuse=False)
    models["fused"] = cpu_kernels.row_int8(base)
    for m in models.values():
        exact_attention.install(m)
    ids = torch.randint(0, 1000, (1, 100))
    res = {k: {1: [], 4: []} for k in models}
    for _ in range(6):
        for k, m in models.items():
            cache = DynamicCache(config=m.config)
            m(ids, cache=cache, use_cache=True)
            for rows in (1, 4):
                for _ in range(3):
                    res[k][rows].append(timed(m, torch.randint(0, 1000, (1, rows)), cache)[0])
    for k in models:
        print(f"{k}: decode {statistics.median(res[k][1]):.1f} ms, verify 4 {statistics.median(res[k][4]):.1f} ms")
    a = models["fused"](ids, cache=DynamicCache(config=base.config)).logits
    b = models["unfused"](ids, cache=DynamicCache(config=base.config)).logits
    print("fused == unfused bit for bit:", torch.equal(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["kernels"])
    ap.add_argument("--old", help="an older cpu_kernels.py to compare against (kernels)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        kernels(args.old)


if __name__ == "__main__":
    main()
