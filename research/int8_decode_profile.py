"""The int8 target's decode step (docs/performance.md, "Kernels").

    python research/int8_decode_profile.py

1) the int8 target alone, 2 threads, 200-token context: median decode and 4-token verify, the
   LM head, and a torch.profiler table of 5 decode steps;
2) the engine's AR decoder against a bare loop over the same model, interleaved, 3 rounds of
   64 tokens on the first built-in question (median decode span against median step).
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

from mirror_sd.engine.autoregressive import Autoregressive  # noqa: E402
from mirror_sd.engine.settings import Settings  # noqa: E402
from mirror_sd.engine.events import Span  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402
from mirror_sd.questions import load_questions  # noqa: E402
from script_timing import median_ms  # noqa: E402


def ms(f, n=20):
    return median_ms(f, n)


@torch.inference_mode()
def alone(model):
    torch.set_num_threads(2)
    cache = DynamicCache(config=model.config)
    model(torch.randint(0, 1000, (1, 200)), past_key_values=cache, use_cache=True, logits_to_keep=1)
    base = cache.get_seq_length()

    def step(rows):
        extra = cache.get_seq_length() - base
        if extra:
            cache.crop(-extra)
        model(torch.randint(0, 1000, (1, rows)), past_key_values=cache, use_cache=True,
              logits_to_keep=rows)

    h = torch.randn(1, model.config.hidden_size)
    print(f"decode {ms(lambda: step(1)):.1f} ms, verify 4 {ms(lambda: step(4)):.1f} ms, "
          f"LM head {ms(lambda: model.lm_head(h)):.1f} ms")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            step(1)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def engine(pair, ids):
    spans = [(e.end_ns - e.start_ns) / 1e6 for e in
             Autoregressive(pair, Settings(max_new_tokens=64)).generate(ids)
             if isinstance(e, Span) and e.label == "decode"]
    return statistics.median(spans)


@torch.inference_mode()
def bare(model, ids):
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    cache, r = DynamicCache(config=model.config), []
    tok = model(torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1).logits[0, -1].argmax()
    for _ in range(64):
        t = time.perf_counter_ns()
        tok = model(tok.view(1, 1), past_key_values=cache, use_cache=True, logits_to_keep=1).logits[0, -1].argmax()
        r.append((time.perf_counter_ns() - t) / 1e6)
    torch.set_num_threads(before)
    return statistics.median(r)


def main():
    pair = load_pair(precision="int8", draft_precision="int8-dyn")
    ids = pair.encode_prompt(load_questions(None)[0].turns[0])
    for _ in range(3):
        print(f"engine AR decode {engine(pair, ids):.1f} ms, bare loop {bare(pair.target, ids):.1f} ms", flush=True)
    alone(pair.target)


if __name__ == "__main__":
    main()
