"""One draft token in the two ways a step drafts it, each alone: the serial rollout that SD and
a Mirror-SD miss use (Lane.feed of one token, then its probabilities) against one forward of
a one-row branch batch (engine/mirror/branches.py: Mirror-SD's branches, a 2D attention mask
over the base cache and the rollout slots, the row's cache copied in at admission and cut out
when it finishes). The default pair's draft at `--precision`, `--context` tokens of context
plus a 4-token window, 1 and 2 torch threads; the two paths interleaved per repetition; median
ms per drafted token over 4-token rollouts.

    python research/branch_forward_cost.py [--precision int8] [--context 150] [--reps 9]

docs/performance.md ("What if", the draft lane per hit) quotes it: the branch path's extra
cost per token is part of why Mirror-SD's draft lane does more work per step than SD's.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.engine.acceptance import Sampling  # noqa: E402
from mirror_sd.engine.drafting import choose, to_probs  # noqa: E402
from mirror_sd.engine.lanes import Lane  # noqa: E402
from mirror_sd.engine.mirror.branches import BranchBatch  # noqa: E402
from mirror_sd.engine.mirror.scoring import Root  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402

WINDOW = [3000, 3001, 3002, 3003]  # the verified window d_1..d_4 in the base cache
TOKENS = 4  # tokens each rollout drafts


def serial_ms(model, context: list[int], sampling: Sampling) -> list[float]:
    lane = Lane(model, "draft")
    lane.feed(context + WINDOW, logits_to_keep=1)
    token, times = 555, []
    for _ in range(TOKENS):
        t = time.perf_counter_ns()
        logits = lane.feed([token], logits_to_keep=1)
        probs = to_probs(logits[-1:], sampling)[0]
        token = choose(probs, logits[-1], sampling, None)
        times.append((time.perf_counter_ns() - t) / 1e6)
    return times


def branch_ms(model, context: list[int], sampling: Sampling) -> list[float]:
    lane = Lane(model, "draft")
    lane.feed(context + WINDOW, logits_to_keep=1)
    t = time.perf_counter_ns()
    batch = BranchBatch(model, lane.cache, len(context), len(WINDOW), sampling)
    batch.admit(Root(2, 555, 0.5), None, TOKENS)  # rooted after d_2: "2 accepted, then 555"
    admit = (time.perf_counter_ns() - t) / 1e6
    times = []
    while batch.live:
        t = time.perf_counter_ns()
        batch.forward()
        times.append((time.perf_counter_ns() - t) / 1e6)
    times[0] += admit  # the admission's copy of the base cache belongs to the row's first token
    return times


@torch.inference_mode()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--context", type=int, default=150)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    model = load_pair(precision=args.precision).draft
    context = list(range(1000, 1000 + args.context))
    sampling = Sampling()
    times = {(path, n): [] for path in ("serial", "branch") for n in (1, 2)}
    for rep in range(args.reps + 1):  # the first repetition warms up, untimed
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for path, f in (("serial", serial_ms), ("branch", branch_ms)):
                got = f(model, context, sampling)
                if rep:
                    times[(path, threads)] += got
    out = {"command": "python research/branch_forward_cost.py " + " ".join(sys.argv[1:]),
           "precision": args.precision, "context": args.context, "ms_per_token": {}}
    for threads in (1, 2):
        serial, branch = (statistics.median(times[(p, threads)]) for p in ("serial", "branch"))
        out["ms_per_token"][f"{threads} threads"] = {"serial": round(serial, 2), "branch": round(branch, 2),
                                                     "branch / serial": round(branch / serial, 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
