"""fast_layers (two C++ calls a layer) against lean_layers (transformers' arithmetic) on one
model of the default pair, interleaved: median ms of a forward at a 100-token context for 1
new token, a batch of 4 rows and 4 tokens of one row, at 1 and 2 threads, the order
alternating by round; and the largest logit difference between the two
(docs/performance.md, "Kernels").

    python research/fast_layers_ab.py --model draft --precision int4
    python research/fast_layers_ab.py --model target --precision int8
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
from mirror_sd.cpu import fast_layers  # noqa: E402
from mirror_sd.cpu import lean_layers  # noqa: E402
from script_timing import SHAPES, default_model, interleaved, lean_copy, model_args  # noqa: E402


def main():
    args = model_args(precision="int4", rounds=4)
    fast = default_model(args.model, args.precision)
    lean = lean_copy(fast)
    print(f"fast layers: {fast_layers.installed(fast)}; lean copy: {lean_layers.installed(lean)}")
    times, logits = interleaved({"lean": lean, "fast": fast}, args.rounds)
    print(f"| {args.model} {args.precision} | threads | lean ms | fast ms | lean / fast | max logit difference |")
    print("|---|---|---|---|---|---|")
    for threads in (1, 2):
        for label, _, _ in SHAPES:
            a, b = (times[(threads, label, n)] for n in ("lean", "fast"))
            diff = float((logits[(threads, label, "lean")] - logits[(threads, label, "fast")]).abs().max())
            print(f"| {label} | {threads} | {a:.1f} | {b:.1f} | {a / b:.2f} | {diff:.2g} |")


if __name__ == "__main__":
    main()
