"""Two torch threads in the draft lane's worker thread against two in the main thread.

    python research/worker_threads.py [--reps 300]

Mirror-SD's draft lane is a Python worker thread; where it works alone (after the target's
verdict) placement.lane_alone gives it two torch threads. This times one small int8 linear
(896 -> 4864, the draft's MLP shape, one row) and one whole forward of the default draft at
1 and 2 threads, first in the main thread, then in a worker thread after the main thread has
used two threads (as in the engine: AR, SD and Mirror-SD's prefill run there). Medians, in
microseconds for the linear and milliseconds for the forward.

What it shows on a 2-core machine: the worker's two threads do not pay. libgomp spins its
idle team threads between parallel regions only while the process has no more OpenMP
threads than CPUs; with the main thread's team and the worker's team both alive it
throttles the spin, so each parallel region of the worker waits for a sleeping thread to
wake up. The draft's forward is a few hundred small regions, so the worker gains nothing
from a second thread.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.cpu.int8 import NativeInt8Linear  # noqa: E402
from mirror_sd.engine.lanes import Lane  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402


def linear_us(layer, x, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        layer(x)
        times.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(times[reps // 10:])


def forward_ms(model, reps: int) -> float:
    lane = Lane(model, "draft")
    lane.feed(list(range(1000, 1150)), logits_to_keep=1)
    times = []
    for i in range(reps):
        t = time.perf_counter_ns()
        lane.feed([5 + i], logits_to_keep=1)
        times.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(times[1:])


def measure(layer, x, model, reps: int) -> dict:
    out = {}
    with torch.inference_mode():
        for n in (1, 2):
            torch.set_num_threads(n)
            out[f"{n} threads"] = {"linear_us": round(linear_us(layer, x, reps), 1),
                                   "draft_forward_ms": round(forward_ms(model, 12), 2)}
    torch.set_num_threads(1)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    model = load_pair(precision="int8").draft
    layer = NativeInt8Linear(torch.nn.Linear(896, 4864))
    x = torch.randn(1, 896)
    result = {"command": "python research/worker_threads.py " + " ".join(sys.argv[1:]),
              "cpus": os.cpu_count(), "main": measure(layer, x, model, args.reps)}
    box = {}
    worker = threading.Thread(target=lambda: box.update(worker=measure(layer, x, model, args.reps)))
    worker.start()
    worker.join()
    result.update(box)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
