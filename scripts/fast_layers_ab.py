"""fast_layers (two C++ calls a layer) against lean_layers (transformers' arithmetic) on one
model of the default pair, interleaved: median ms of a forward at a 100-token context for 1
new token, a batch of 4 rows and 4 tokens of one row, at 1 and 2 threads, the order
alternating by round; and the largest logit difference between the two (docs/measurements.md
section 13).

    flock /tmp/mirror-sd-cpu.lock python scripts/fast_layers_ab.py --model draft --precision int4
    flock /tmp/mirror-sd-cpu.lock python scripts/fast_layers_ab.py --model target --precision int8
"""
import argparse
import copy
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402

from mirror_sd import fast_layers, lean_layers  # noqa: E402
from script_timing import SHAPES, default_model, forward_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["draft", "target"], default="draft")
    ap.add_argument("--precision", default="int4")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    fast = default_model(args.model, args.precision)
    lean = copy.deepcopy(fast)
    for module in lean.modules():
        vars(module).pop("forward", None)
    lean_layers.install(lean)
    print(f"fast layers: {fast_layers.installed(fast)}; lean copy: {lean_layers.installed(lean)}")
    models = {"lean": lean, "fast": fast}
    ids = torch.randint(0, 20000, (4, 108), generator=torch.Generator().manual_seed(0))
    res, diff = {}, {}
    for rnd in range(args.rounds):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for label, rows, batch in SHAPES:
                outs = {}
                for name in (("lean", "fast") if rnd % 2 == 0 else ("fast", "lean")):
                    ms, outs[name] = forward_ms(models[name], ids[:batch], rows)
                    res.setdefault((threads, label, name), []).append(ms)
                diff[(threads, label)] = float((outs["lean"] - outs["fast"]).abs().max())
    print(f"| {args.model} {args.precision} | threads | lean ms | fast ms | lean / fast | max logit difference |")
    print("|---|---|---|---|---|---|")
    for threads in (1, 2):
        for label, _, _ in SHAPES:
            a, b = (statistics.median(res[(threads, label, n)]) for n in ("lean", "fast"))
            print(f"| {label} | {threads} | {a:.1f} | {b:.1f} | {a / b:.2f} | {diff[(threads, label)]:.2g} |")


if __name__ == "__main__":
    main()
