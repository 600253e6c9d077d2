"""The int8 target with the AVX2 row kernel (native_int8) against fbgemm's RowInt8Linear,
interleaved in one process (docs/performance.md, "Kernels").

    python research/native_int8_ab.py [--rounds 6]

Median ms of 10 forwards (after 2 warm-up ones) at a 100-token context: decode 1 token and
verify 4, and of 3 prefills of the 100-token prompt, at 2 threads and at 1 (Mirror-SD's target lane), the order alternating by round.
Then, on the native target: the logits of a 4-token verify forward against 4 one-token
decode steps over the same tokens (bit for bit), and the top-1 of both kernels over 64
greedy tokens of the first built-in question.
"""
import argparse
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from mirror_sd.models.loading import load_pair  # noqa: E402
from script_timing import forward_ms, median_ms  # noqa: E402


@torch.inference_mode()
def prefill_ms(model, ids, n=3):
    return median_ms(lambda: model(ids[:, :100], past_key_values=DynamicCache(config=model.config),
                                   use_cache=True, logits_to_keep=1), n)


@torch.inference_mode()
def verify_equals_decode(model, ids):
    cache = DynamicCache(config=model.config)
    model(ids[:, :100], past_key_values=cache, use_cache=True)
    steps = torch.cat([model(ids[:, 100 + i:101 + i], past_key_values=cache, use_cache=True).logits
                       for i in range(4)], 1)
    cache.crop(-4)
    window = model(ids[:, 100:104], past_key_values=cache, use_cache=True).logits
    return torch.equal(steps, window)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    ids = torch.randint(0, 20000, (1, 108), generator=torch.Generator().manual_seed(0))
    native = load_pair(precision="int8", draft_precision="int8-dyn", kernels="auto").target
    fbgemm = load_pair(precision="int8", draft_precision="int8-dyn", kernels="fbgemm").target
    print("kernels:", type(native.lm_head).__name__, "/", type(fbgemm.lm_head).__name__)
    models = {"native AVX2": native, "fbgemm rows": fbgemm}
    results = {}
    for r in range(args.rounds):
        for threads in (2, 1):
            torch.set_num_threads(threads)
            for rows in (1, 4):
                for name in (list(models) if r % 2 else list(models)[::-1]):
                    results.setdefault((name, threads, rows), []).append(
                        forward_ms(models[name], ids, rows)[0])
            for name in (list(models) if r % 2 else list(models)[::-1]):
                results.setdefault((name, threads, "prefill"), []).append(
                    prefill_ms(models[name], ids))
    torch.set_num_threads(2)
    print("| kernel | threads | decode 1 ms | verify 4 ms | verify 4 / decode 1 | prefill 100 ms |")
    print("|---|---|---|---|---|---|")
    for threads in (2, 1):
        for name in models:
            d = statistics.median(results[(name, threads, 1)])
            v = statistics.median(results[(name, threads, 4)])
            p = statistics.median(results[(name, threads, "prefill")])
            print(f"| {name} | {threads} | {d:.1f} | {v:.1f} | {v / d:.2f} | {p:.0f} |")
    print("native: verify 4 == 4 decode steps, bit for bit:", verify_equals_decode(native, ids))
    print("fbgemm: verify 4 == 4 decode steps, bit for bit:", verify_equals_decode(fbgemm, ids))


if __name__ == "__main__":
    main()
