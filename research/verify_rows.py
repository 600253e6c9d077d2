"""What one more verify row costs: the default pair's target (as the engine loads it) over
k = 1..8 new tokens after a 100-token context, 2 threads, median ms of 10 forwards (two
warm-up forwards first), logits of the last row only and of every row. Priced windows read
these costs as the run measures them (engine/pricing.py); this prints them alone.

    python research/verify_rows.py [--precision int8] [--rows 8]
"""
import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from mirror_sd.engine.lanes import Lane  # noqa: E402
from mirror_sd.engine.run_path import RunPath  # noqa: E402
from mirror_sd.engine.settings import Settings  # noqa: E402
from script_timing import median_ms  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    pair = RunPath(["ar"], Settings(max_new_tokens=8)).load("default", "default", precision=args.precision)
    torch.set_num_threads(2)
    context = list(range(1000, 1100))
    print(f"target at {args.precision}, 100-token context, 2 threads; ms per forward (median of 10)")
    print("rows | last row's logits | every row's logits")
    with torch.inference_mode():
        for rows in range(1, args.rows + 1):
            cells = []
            for keep in (1, 0):
                lane = Lane(pair.target, "target")
                lane.feed(context, logits_to_keep=1)

                def forward():
                    lane.feed([2000 + j for j in range(rows)], logits_to_keep=keep)
                    lane.cache.crop(-rows)
                    del lane.ids[-rows:]

                cells.append(f"{median_ms(forward, 10, warmup=2):.1f}")
            print(f"{rows} | {cells[0]} | {cells[1]}")


if __name__ == "__main__":
    main()
