"""One model of the default pair at several precisions, interleaved: median ms of a forward
at a 100-token context for 1 new token (decode), a batch of 4 rows of 1 token (branch
rollouts) and 4 tokens of one row (a verify window), at 1 and 2 threads; the order of the
precisions alternates by round (docs/measurements.md section 13).

    flock /tmp/mirror-sd-cpu.lock python scripts/precision_ab.py --model draft --precisions int8,int4
    flock /tmp/mirror-sd-cpu.lock python scripts/precision_ab.py --model target --precisions int8,int4
"""
import argparse
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402

from script_timing import SHAPES, default_model, forward_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["draft", "target"], default="draft")
    ap.add_argument("--precisions", default="int8,int4")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    names = args.precisions.split(",")
    models = {name: default_model(args.model, name) for name in names}
    ids = torch.randint(0, 20000, (4, 108), generator=torch.Generator().manual_seed(0))
    res = {}
    for rnd in range(args.rounds):
        for threads in map(int, args.threads.split(",")):
            torch.set_num_threads(threads)
            for label, rows, batch in SHAPES:
                order = names if rnd % 2 == 0 else names[::-1]
                for name in order:
                    ms, _ = forward_ms(models[name], ids[:batch], rows)
                    res.setdefault((threads, label, name), []).append(ms)
    print(f"| forward ({args.model}) | threads | " + " | ".join(f"{n} ms" for n in names)
          + f" | {names[0]} / {names[-1]} |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for threads in map(int, args.threads.split(",")):
        for label, _, _ in SHAPES:
            meds = [statistics.median(res[(threads, label, n)]) for n in names]
            print(f"| {label} | {threads} | " + " | ".join(f"{m:.1f}" for m in meds)
                  + f" | {meds[0] / meds[-1]:.2f} |")


if __name__ == "__main__":
    main()
