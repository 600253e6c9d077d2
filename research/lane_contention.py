"""Do the two lanes slow each other less as two processes than as two threads?
(docs/performance.md, "Speculative decoding on this CPU")

    python research/lane_contention.py

The int8 target verifies 4 tokens on one torch thread (median of 12 forwards, 100-token
context) alone, then while the int8-dyn draft decodes without pause on one thread in (a) a
Python thread of the same process, (b) a separate process. Prints the target's ms and the
draft's ms per token in each case.
"""
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..")); warnings.filterwarnings("ignore")
import torch
from transformers import AutoModelForCausalLM, DynamicCache
from mirror_sd.models.loading import apply_precision, default_cache_dir

def load(name, prec, role):
    m = AutoModelForCausalLM.from_pretrained(default_cache_dir() / name, dtype=torch.float32).eval()
    return apply_precision(m, prec, role) or m

def decode_loop(m, stop, counter):
    torch.set_num_threads(1)
    with torch.inference_mode():
        while not stop.is_set():
            c = DynamicCache(config=m.config)
            m(torch.randint(0, 1000, (1, 64)), past_key_values=c, use_cache=True)
            for _ in range(16):
                if stop.is_set(): break
                m(torch.randint(0, 1000, (1, 1)), past_key_values=c, use_cache=True)
                counter.value += 1

def proc_main(stop, counter, ready):
    d = load("qwen2.5-coder-0.5b-instruct-q4_k_m-hf", "int8-dyn", "draft")
    ready.set()
    decode_loop(d, stop, counter)

def target_steps(t, n=12, rows=4):
    torch.set_num_threads(1)
    ts = []
    with torch.inference_mode():
        c = DynamicCache(config=t.config)
        t(torch.randint(0, 1000, (1, 100)), past_key_values=c, use_cache=True)
        for _ in range(n):
            s = time.perf_counter_ns(); t(torch.randint(0, 1000, (1, rows)), past_key_values=c, use_cache=True)
            ts.append((time.perf_counter_ns() - s) / 1e6)
    return statistics.median(ts)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    t = load("qwen2.5-coder-1.5b-instruct-q4_k_m-hf", "int8", "target")
    d = load("qwen2.5-coder-0.5b-instruct-q4_k_m-hf", "int8-dyn", "draft")
    # draft alone speed
    stop = threading.Event(); cnt = mp.Value("i", 0)
    th = threading.Thread(target=decode_loop, args=(d, stop, cnt)); th.start(); time.sleep(1); c0 = cnt.value; time.sleep(5); c1 = cnt.value; stop.set(); th.join()
    print("draft alone (thread): ms/token", 5000 / (c1 - c0))
    print("target alone ms", target_steps(t))
    stop = threading.Event(); cnt = mp.Value("i", 0)
    th = threading.Thread(target=decode_loop, args=(d, stop, cnt)); th.start(); time.sleep(1)
    c0 = cnt.value; s = time.perf_counter(); a = target_steps(t); dt = time.perf_counter() - s; c1 = cnt.value
    stop.set(); th.join()
    print("with draft thread: target ms", a, "draft ms/token", dt * 1e3 / (c1 - c0))
    stop = ctx.Event(); cnt = ctx.Value("i", 0); ready = ctx.Event()
    p = ctx.Process(target=proc_main, args=(stop, cnt, ready)); p.start(); ready.wait(); time.sleep(2)
    c0 = cnt.value; s = time.perf_counter(); a = target_steps(t); dt = time.perf_counter() - s; c1 = cnt.value
    stop.set(); p.join()
    print("with draft process: target ms", a, "draft ms/token", dt * 1e3 / (c1 - c0))
