"""int4 weight-only kernels against fbgemm int8 at one row (docs/performance.md, "Kernels").

    python research/int4_vs_int8.py

Median ms of `_weight_int4pack_mm_for_cpu` (group 32, fp32 and bf16 input) and of fbgemm's
dynamic int8 linear, 1 thread, on the draft's and the target's layer shapes and the draft's LM head.
"""
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
from torch.ao.quantization import quantize_dynamic  # noqa: E402

from script_timing import median_ms  # noqa: E402


def ms(f, n=100):
    return median_ms(f, n)


def main():
    torch.set_num_threads(1)
    group = 32
    for out_f, in_f in [(9728, 896), (896, 4864), (13824, 1536), (151936, 896)]:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            torch.randint(0, 16, (out_f, in_f), dtype=torch.int32), 1)
        scales = torch.rand(in_f // group, out_f, 2)
        line = []
        for dtype in (torch.float32, torch.bfloat16):
            x, sz = torch.randn(1, in_f, dtype=dtype), scales.to(dtype)
            t = ms(lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, sz))
            line.append(f"int4 {str(dtype).replace('torch.', '')} input {t:.3f} ms")
        int8 = quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(in_f, out_f)), {torch.nn.Linear},
                                dtype=torch.qint8)[0]
        x = torch.randn(1, in_f)
        line.append(f"fbgemm int8 {ms(lambda: int8(x)):.3f} ms")
        print(f"{out_f}x{in_f}: " + ", ".join(line), flush=True)


if __name__ == "__main__":
    main()
