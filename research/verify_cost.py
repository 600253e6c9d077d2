"""Cost of one target forward over k new tokens at fp32, after a 100-token context: median ms of
5 forwards for k = 1, 2, 3, 5, 8 at 1 and 2 threads (docs/performance.md, "Speculative decoding
on this CPU"). fp32 as load_pair converts it: on a CPU, linears on oneDNN;
`MIRROR_SD_ONEDNN=0` measures torch's own linears.

    python research/verify_cost.py
"""
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from script_timing import default_model  # noqa: E402


def run(model, ids, threads, rows, reps=5):
    torch.set_num_threads(threads)
    times = []
    with torch.inference_mode():
        for _ in range(reps):
            cache = DynamicCache(config=model.config)
            model(ids, cache=cache, use_cache=True, logits_to_keep=1)
            x = torch.randint(0, 1000, (1, rows))
            t = time.perf_counter_ns()
            model(x, cache=cache, use_cache=True)
            times.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(times)


def main():
    model = default_model("target", "fp32")
    ids = torch.randint(0, 1000, (1, 100))
    for threads in (1, 2):
        print(threads, "threads:", {r: round(run(model, ids, threads, r)) for r in (1, 2, 3, 5, 8)}, flush=True)


if __name__ == "__main__":
    main()
