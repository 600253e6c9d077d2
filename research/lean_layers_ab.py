"""Decode and verify forwards through lean_layers against transformers' own layers,
interleaved in one process (docs/performance.md, "Kernels").

    python research/lean_layers_ab.py [--rounds 5]

The default pair at int8 (target) / int8-dyn (draft), and the fp32 target: median ms of 10
forwards (after 2 warm-up ones) at a 100-token context, 2 threads (the draft also at 1 thread, as in Mirror-SD's
lane), each round switching the layers between the two forwards; logits compared bit for bit.
"""
import argparse
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402

from mirror_sd.cpu import lean_layers  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402
from script_timing import forward_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ids = torch.randint(0, 20000, (1, 108), generator=torch.Generator().manual_seed(0))
    int8 = load_pair(precision="int8", draft_precision="int8-dyn")
    fp32 = load_pair(precision="fp32", draft="default")
    cases = [("target int8", int8.target, 2), ("draft int8-dyn", int8.draft, 2),
             ("draft int8-dyn", int8.draft, 1), ("target fp32", fp32.target, 2)]
    results = {}
    for r in range(args.rounds):
        for name, model, threads in cases:
            torch.set_num_threads(threads)
            for rows in (1, 4):
                logits = {}
                for lean in ((True, False) if r % 2 else (False, True)):  # order alternates
                    if lean:
                        lean_layers.install(model)
                    else:
                        lean_layers.uninstall(model)
                    ms, logits[lean] = forward_ms(model, ids, rows)
                    results.setdefault((name, threads, rows, lean), []).append(ms)
                assert torch.equal(logits[True], logits[False]), name
                lean_layers.install(model)
    print("| model | threads | rows | transformers' layers ms | lean layers ms | ratio |")
    print("|---|---|---|---|---|---|")
    for name, _, threads in cases:
        for rows in (1, 4):
            stock = statistics.median(results[(name, threads, rows, False)])
            lean = statistics.median(results[(name, threads, rows, True)])
            print(f"| {name} | {threads} | {rows} | {stock:.1f} | {lean:.1f} | {stock / lean:.3f} |")
    print("logits bit-identical in every forward compared")


if __name__ == "__main__":
    main()
