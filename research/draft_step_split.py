"""Where one decode step of a default-pair model goes, 2 threads, 100-token context: the whole
forward, its decoder layers (forward hooks on the first and last layer), the LM head, and the
model's linear layers called back to back on random rows (docs/performance.md, "Kernels").

    env MIRROR_SD_FAST_LAYERS=0 python research/draft_step_split.py --precision int4
    python research/draft_step_split.py --precision int4
"""
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from mirror_sd.cpu import fast_layers  # noqa: E402
from script_timing import default_model, kernel_layers, median_ms, model_args  # noqa: E402


@torch.inference_mode()
def main():
    args = model_args(precision="int4")
    torch.set_num_threads(2)
    model = default_model(args.model, args.precision)
    layers = model.model.layers
    spans = []
    layers[0].register_forward_pre_hook(lambda *a: spans.append(-time.perf_counter_ns()))
    layers[-1].register_forward_hook(lambda *a: spans.__setitem__(-1, spans[-1] + time.perf_counter_ns()))
    ids = torch.randint(0, 20000, (1, 101), generator=torch.Generator().manual_seed(0))
    cache = DynamicCache(config=model.config)
    model(ids[:, :100], past_key_values=cache, use_cache=True, logits_to_keep=1)

    def step():
        model(ids[:, 100:101], past_key_values=cache, use_cache=True)
        cache.crop(-1)

    whole = median_ms(step, 20, warmup=3)
    in_layers = statistics.median(spans[-20:]) / 1e6
    kernels = kernel_layers(model)  # fused q/k/v and gate/up counted once each
    rows = [torch.randn(1, m.in_features) for m in kernels]
    back_to_back = median_ms(lambda: [m(x) for m, x in zip(kernels, rows)], 20, warmup=2)
    head = model.get_output_embeddings()
    head_ms = median_ms(lambda: head(torch.randn(1, head.in_features)), 20, warmup=2)
    print(f"{args.model} {args.precision}, fast layers {fast_layers.installed(model)}: forward "
          f"{whole:.1f} ms, decoder layers {in_layers:.1f} ms, {len(kernels)} linear layers back "
          f"to back {back_to_back:.1f} ms (LM head {head_ms:.1f} ms)")


if __name__ == "__main__":
    main()
