"""Cost of one target forward over k new tokens (the table in docs/measurements.md, section 1).

    python scripts/verify_cost.py
"""
import time, torch, statistics, warnings
warnings.filterwarnings("ignore")
from transformers import AutoModelForCausalLM, DynamicCache
import os
path = os.path.expanduser("~/.cache/mirror-sd/qwen2.5-coder-1.5b-instruct-q4_k_m-hf")
m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
ids = torch.randint(0, 1000, (1, 100))
def run(threads, rows, reps=5):
    torch.set_num_threads(threads)
    ts = []
    with torch.inference_mode():
        for _ in range(reps):
            c = DynamicCache(config=m.config)
            m(ids, cache=c, use_cache=True, logits_to_keep=1)
            x = torch.randint(0, 1000, (1, rows))
            t = time.perf_counter(); m(x, cache=c, use_cache=True); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1000
for th in (1, 2):
    print(th, "threads:", {r: round(run(th, r)) for r in (1, 2, 3, 5, 8)}, flush=True)
