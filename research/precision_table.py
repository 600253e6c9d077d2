"""Whole-model speed and exactness of each CPU precision (docs/performance.md, "Precisions").

    python research/precision_table.py [--models target,draft]

For each model and precision: median ms of one decode step and of one 8-token verify forward
(100-token context) at 1 and 2 threads; "row-exact": the logits of an 8-token verify forward
against 8 one-token decode steps over the same tokens (max abs difference, argmax agreement);
and the greedy continuation of two prompts against fp32's (tokens until the first difference).
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402

from mirror_sd.models.loading import apply_precision, default_cache_dir  # noqa: E402

PATHS = {"target": "qwen2.5-coder-1.5b-instruct-q4_k_m-hf", "draft": "qwen2.5-coder-0.5b-instruct-q4_k_m-hf"}
PROMPTS = ["Write a Python function that returns the n-th Fibonacci number, with a docstring.",
           "Explain in three sentences why the sky is blue."]


def prefill(model, ids):
    cache = DynamicCache(config=model.config)
    out = model(ids, cache=cache, use_cache=True)
    return cache, out.logits[0]


def timed(model, ctx_ids, rows, reps):
    times = []
    for _ in range(reps):
        cache, _ = prefill(model, ctx_ids)
        x = torch.randint(0, 1000, (1, rows))
        t = time.perf_counter_ns()
        model(x, cache=cache, use_cache=True)
        times.append((time.perf_counter_ns() - t) / 1e6)
    return round(statistics.median(times), 1)


def row_check(model, ctx_ids, new_ids):
    cache, _ = prefill(model, ctx_ids)
    batch = model(new_ids, cache=cache, use_cache=True).logits[0]
    cache, _ = prefill(model, ctx_ids)
    single = torch.cat([model(new_ids[:, i:i + 1], cache=cache, use_cache=True).logits[0]
                        for i in range(new_ids.shape[1])])
    return (batch - single).abs().max().item(), int((batch.argmax(-1) == single.argmax(-1)).sum())


def greedy(model, ids, n):
    cache, logits = prefill(model, ids)
    out = [int(logits[-1].argmax())]
    for _ in range(n - 1):
        logits = model(torch.tensor([[out[-1]]]), cache=cache, use_cache=True).logits[0]
        out.append(int(logits[-1].argmax()))
    return out


def agree(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="target,draft")
    ap.add_argument("--precisions", default="fp32,fp16w,int8,int8-dyn")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--out", default="research/precision_table.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    results = []
    for role in args.models.split(","):
        path = default_cache_dir() / PATHS[role]
        tok = AutoTokenizer.from_pretrained(path)
        prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)["input_ids"] for p in PROMPTS]
        ctx = torch.randint(0, 1000, (1, 100))
        new = torch.randint(0, 1000, (1, 8))
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        reference = None
        for name in args.precisions.split(","):
            model = copy.deepcopy(base) if name != "fp32" else base
            model = apply_precision(model, name, role)
            row = {"model": role, "precision": name}
            with torch.inference_mode():
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    timed(model, ctx, 1, 1)  # warm-up
                    row[f"decode_ms_{threads}t"] = timed(model, ctx, 1, 7)
                    row[f"verify8_ms_{threads}t"] = timed(model, ctx, 8, 5)
                torch.set_num_threads(2)
                diff, same = row_check(model, ctx, new)
                row["verify_vs_decode_max_abs_logit_diff"] = diff
                row["verify_vs_decode_argmax_same_of_8"] = same
                outs = [greedy(model, p, args.tokens) for p in prompts]
            if reference is None:
                reference = outs
            row["greedy_tokens_equal_to_fp32_before_first_difference"] = [agree(a, b) for a, b in zip(outs, reference)]
            print(json.dumps(row), flush=True)
            results.append(row)
            del model
        del base
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
