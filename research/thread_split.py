"""The core split: each model's decode and verify forwards on one thread against two.

    python research/thread_split.py [--precisions int8,fp32] [--rows 1,5,8,13] [--out FILE]

On a 2-core CPU Mirror-SD's two lanes get one core each while both work; SD and AR give
each forward both cores. Part of what Mirror-SD's target lane loses beside the draft is that
split (a forward on one thread instead of two), the rest is the interference of two jobs on
one memory bus. This measures the first part alone: the default pair loaded as the engine
loads it (mirror_sd.models.loading.load_pair, the same kernels), each model alone, median ms of
a forward over `rows` new tokens after a 100-token context at 1 and 2 torch threads (the two
thread counts interleaved per repetition), and the ratio 1-thread / 2-thread per row count. The What-if
(mirror_sd/latency/whatif_costs.py) divides the run's measured contention by this ratio to
name the interference.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.engine.lanes import Lane  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402

CONTEXT = 100


def forward_ms(model, rows: int) -> float:
    """One forward over `rows` new tokens after CONTEXT tokens of context (ms)."""
    lane = Lane(model, "probe")
    lane.feed(list(range(1000, 1000 + CONTEXT)), logits_to_keep=1)
    ids = list(range(2000, 2000 + rows))
    t = time.perf_counter_ns()
    lane.feed(ids)
    return (time.perf_counter_ns() - t) / 1e6


def measure(model, rows_list, reps: int) -> dict:
    times = {(r, t): [] for r in rows_list for t in (1, 2)}
    with torch.inference_mode():
        for threads in (1, 2):  # warm-up at both thread counts
            torch.set_num_threads(threads)
            forward_ms(model, 1)
        for _ in range(reps):
            for rows in rows_list:
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    times[(rows, threads)].append(forward_ms(model, rows))
    torch.set_num_threads(2)
    out = {}
    for rows in rows_list:
        one, two = (statistics.median(times[(rows, t)]) for t in (1, 2))
        out[str(rows)] = {"ms_1t": round(one, 1), "ms_2t": round(two, 1), "split": round(one / two, 3)}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precisions", default="int8,fp32")
    ap.add_argument("--rows", default="1,5,8,13")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default="research/thread_split.json")
    args = ap.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    results = {"command": "python research/thread_split.py " + " ".join(sys.argv[1:]),
               "cpu_count": os.cpu_count(), "context": CONTEXT, "rows": {}}
    for precision in args.precisions.split(","):
        pair = load_pair(precision=precision)
        for role, model in (("target", pair.target), ("draft", pair.draft)):
            row = measure(model, rows_list if role == "target" else [1], args.reps)
            results["rows"][f"{role}-{precision}"] = row
            print(role, precision, json.dumps(row), flush=True)
        del pair
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
