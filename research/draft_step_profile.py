"""Where a draft forward goes (docs/performance.md, "Kernels").

    python research/draft_step_profile.py --threads 1
    python research/draft_step_profile.py --threads 2

The int8-dyn default draft after a 100-token context: median ms of a whole forward, of the body
alone (no LM head) and of the LM head, full and cut to 32,768 rows, at 1 and 4 rows; then the
body's linears called back to back, and a torch.profiler table of 5 decode steps.
"""
import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

from mirror_sd.cpu import linears as cpu_kernels  # noqa: E402
from script_timing import median_ms  # noqa: E402
from mirror_sd.models.loading import DEFAULT_DRAFT, default_cache_dir  # noqa: E402


def ms(f, n=15):
    return median_ms(f, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    path = default_cache_dir() / f"{DEFAULT_DRAFT.stem}-hf"
    m = cpu_kernels.dynamic_int8(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval())
    hidden = m.config.hidden_size
    cut = cpu_kernels.output_rows(m.lm_head, torch.arange(32768))
    with torch.inference_mode():
        cache = DynamicCache(config=m.config)
        m(torch.randint(0, 1000, (1, 100)), past_key_values=cache, use_cache=True)
        base = cache.get_seq_length()

        def forward(module, rows):
            extra = cache.get_seq_length() - base
            if extra:
                cache.crop(-extra)
            module(torch.randint(0, 1000, (1, rows)), past_key_values=cache, use_cache=True)

        for rows in (1, 4):
            h = torch.randn(rows, hidden)
            print(f"{args.threads} thread(s), {rows} row(s): whole forward {ms(lambda: forward(m, rows)):.1f} ms, "
                  f"body {ms(lambda: forward(m.model, rows)):.1f}, LM head {ms(lambda: m.lm_head(h)):.1f}, "
                  f"LM head cut to 32768 rows {ms(lambda: cut(h)):.1f}")
        linears = []
        for layer in m.model.layers:
            a, f = layer.self_attn, layer.mlp
            linears += [a.q_proj._group.linear, a.o_proj, f.gate_proj._group.linear, f.down_proj]
        xs = {n: torch.randn(1, n) for n in {l.in_features for l in linears}}
        print(f"the body's {len(linears)} linears back to back: "
              f"{ms(lambda: [l(xs[l.in_features]) for l in linears]):.1f} ms")
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                forward(m, 1)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()
