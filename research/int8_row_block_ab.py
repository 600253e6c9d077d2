"""The int8 kernel of a git revision against the working tree's, per layer and row count
(how the kernel's row blocking was chosen; docs/performance.md, "Kernels").

    python research/int8_row_block_ab.py --base REVISION

Builds both versions of mirror_sd/cpu/kernels/row_int8.cpp as two small extensions (in a temporary
folder), asserts that they give bit-identical outputs, then times them interleaved (order
alternating by round), 2 threads, weights cycled through enough copies to leave the caches.
Prints median ms per call, base / working tree.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils import cpp_extension

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "mirror_sd/cpu/kernels/row_int8.cpp"
BINDING = """#include <torch/extension.h>
torch::Tensor row_int8_linear(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                              torch::Tensor wsum, torch::Tensor bias);
std::vector<torch::Tensor> quantize_weight(torch::Tensor weight);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("row_int8_linear", &row_int8_linear, py::call_guard<py::gil_scoped_release>());
  m.def("quantize_weight", &quantize_weight, py::call_guard<py::gil_scoped_release>());
}
"""
SHAPES = ((17920, 1536, 6), (1536, 8960, 12), (9728, 896, 20))
ROWS = (1, 2, 4, 5, 6, 8, 16, 64)


def build(name: str, source_text: str, folder: Path):
    src = folder / f"{name}.cpp"
    src.write_text(source_text)
    binding = folder / f"{name}_binding.cpp"
    binding.write_text(BINDING)
    out = folder / f"build_{name}"
    out.mkdir(exist_ok=True)
    return cpp_extension.load(name=f"row_int8_{name}", sources=[str(src), str(binding)],
                              build_directory=str(out), extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp"],
                              extra_ldflags=["-fopenmp"], verbose=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="git revision of the other kernel")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    base_text = subprocess.run(["git", "show", f"{args.base}:{SOURCE}"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        mods = {"base": build("base", base_text, Path(tmp)),
                "tree": build("tree", (ROOT / SOURCE).read_text(), Path(tmp))}
        torch.set_num_threads(2)
        empty = torch.empty(0)
        print("| layer (out x in) | " + " | ".join(f"{r} rows" for r in ROWS) + " |")
        print("|---" * (len(ROWS) + 1) + "|")
        for n, k, copies in SHAPES:
            weights = [mods["base"].quantize_weight(torch.randn(n, k) * 0.02) for _ in range(copies)]
            times = {}
            for rnd in range(args.rounds):
                for rows in ROWS:
                    x = torch.randn(rows, k)
                    assert torch.equal(mods["base"].row_int8_linear(x, *weights[0], empty),
                                       mods["tree"].row_int8_linear(x, *weights[0], empty))
                    for name in (("base", "tree") if rnd % 2 == 0 else ("tree", "base")):
                        for _ in range(2):
                            for w in weights:
                                t = time.perf_counter_ns()
                                mods[name].row_int8_linear(x, *w, empty)
                                times.setdefault((name, rows), []).append((time.perf_counter_ns() - t) / 1e6)
            cells = [f"{statistics.median(times[('base', r)]):.3f} / {statistics.median(times[('tree', r)]):.3f}"
                     for r in ROWS]
            print(f"| {n} x {k} | " + " | ".join(cells) + " |", flush=True)
    print("\ncells: median ms per call, base / working tree (outputs asserted bit-identical)")


if __name__ == "__main__":
    sys.exit(main())
