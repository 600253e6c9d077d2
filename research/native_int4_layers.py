"""The int4 kernel against the int8 kernel per layer shape of the default pair, weights cold
(enough copies of each layer to overflow the L3 cache, cycled), 2 threads, 1/2/4 rows; median
ms and GB/s of weights read (docs/performance.md, "Kernels").

    python research/native_int4_layers.py
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch  # noqa: E402

from mirror_sd.cpu import int8 as native_int8  # noqa: E402

SHAPES = ((17920, 1536, 6), (1536, 8960, 12), (1536, 1536, 60), (9728, 896, 20), (896, 4864, 30))
INT4_BYTES = (16 + 2 + 1) / 32  # nibbles, a 16-bit step and an 8-bit zero point per 32 weights


def main():
    ext = native_int8.load()
    if ext is None:
        sys.exit(native_int8.unavailable_reason())
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    empty = torch.empty(0)
    print("| layer (out x in) | rows | int8 ms | int8 GB/s | int4 ms | int4 GB/s | int8 / int4 |")
    print("|---|---|---|---|---|---|---|")
    for n, k, copies in SHAPES:
        weights = [torch.randn(n, k) * 0.02 for _ in range(copies)]
        q4 = [ext.quantize_weight4(w) for w in weights]
        q8 = [ext.quantize_weight(w) for w in weights]
        del weights
        for rows in (1, 2, 4):
            x = torch.randn(rows, k)

            def cycle(layers, fn):
                times = []
                for _ in range(3):
                    for q in layers:
                        t = time.perf_counter_ns()
                        fn(x, *q, empty)
                        times.append((time.perf_counter_ns() - t) / 1e6)
                return statistics.median(times)

            r8, r4 = [], []
            for _ in range(3):  # interleaved
                r8.append(cycle(q8, ext.row_int8_linear))
                r4.append(cycle(q4, ext.row_int4_linear))
            a, b = statistics.median(r8), statistics.median(r4)
            print(f"| {n} x {k} | {rows} | {a:.3f} | {n * k / a / 1e6:.1f} | {b:.3f} | "
                  f"{n * k * INT4_BYTES / b / 1e6:.1f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
