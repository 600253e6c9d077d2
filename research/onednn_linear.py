"""torch's fp32 linear against oneDNN with the weight packed once (cpu/linears.OneDNNLinear), by
row count, on the 1.5B target's layer shapes (docs/performance.md, "fp32 on oneDNN").

    python research/onednn_linear.py [--threads 2] [--reps 20]

Random weights of the target's shapes; six copies of each MLP-sized matrix are cycled so that
no call finds its weight in the cache (a decode reads every weight from memory); the LM head
(151936 x 1536, 0.93 GB) is one copy. Prints the median ms of each kernel per row count and the
largest difference between the two outputs."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from mirror_sd.cpu.linears import OneDNNLinear  # noqa: E402

SHAPES = {"gate or up (8960 x 1536)": (8960, 1536), "down (1536 x 8960)": (1536, 8960),
          "LM head (151936 x 1536)": (151936, 1536)}
ROWS = (1, 2, 3, 4, 5, 8, 13)


def median_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for name, (n_out, n_in) in SHAPES.items():
            copies = 1 if n_out > 100_000 else 6
            stock = []
            for _ in range(copies):
                layer = torch.nn.Linear(n_in, n_out)
                layer.weight.copy_(torch.randn(n_out, n_in, generator=gen) * 0.02)
                stock.append(layer)
            fast = [OneDNNLinear(layer) for layer in stock]
            print(f"{name}, {args.threads} threads: median ms (torch / oneDNN), max |difference|")
            for rows in ROWS:
                x = torch.randn(rows, n_in, generator=gen)
                turn = iter(range(10 ** 9))
                t_stock = median_ms(lambda: stock[next(turn) % copies](x), args.reps)
                t_fast = median_ms(lambda: fast[next(turn) % copies](x), args.reps)
                diff = (stock[0](x) - fast[0](x)).abs().max().item()
                print(f"  {rows:2d} rows: {t_stock:8.2f} / {t_fast:8.2f}   {diff:.1e}", flush=True)


if __name__ == "__main__":
    main()
