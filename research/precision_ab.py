"""One model of the default pair at several precisions, interleaved: median ms of a forward
at a 100-token context for 1 new token (decode), a batch of 4 rows of 1 token (branch
rollouts) and 4 tokens of one row (a verify window), at 1 and 2 threads; the order of the
precisions alternates by round (docs/performance.md, "Precisions").

    python research/precision_ab.py --model draft --precisions int8,int4
    python research/precision_ab.py --model target --precisions int8,int4
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
from script_timing import SHAPES, default_model, interleaved, model_args  # noqa: E402


def main():
    args = model_args(precisions="int8,int4", rounds=4, threads="1,2")
    names = args.precisions.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    times, _ = interleaved({name: default_model(args.model, name) for name in names},
                           args.rounds, threads)
    print(f"| forward ({args.model}) | threads | " + " | ".join(f"{n} ms" for n in names)
          + f" | {names[0]} / {names[-1]} |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for n_threads in threads:
        for label, _, _ in SHAPES:
            meds = [times[(n_threads, label, n)] for n in names]
            print(f"| {label} | {n_threads} | " + " | ".join(f"{m:.1f}" for m in meds)
                  + f" | {meds[0] / meds[-1]:.2f} |")


if __name__ == "__main__":
    main()
