"""How fast could SD and Mirror-SD be on this machine at all? A bound from weight bytes and
measured memory bandwidth (docs/performance.md, "The bandwidth bound"). A projection, not a run.

    python research/bandwidth_bound.py --results out/bench-gamma/results.json

At one decode row every weight of a model is read once per forward, and the AVX2 kernels are
bound by how fast those bytes stream in. This measures, with the engine's own kernels on the
default pair's weights (1 row, every linear layer of the model back to back, so nothing stays
in cache):
  - BW2: one model alone on 2 threads (AR, SD: one lane at a time on both cores);
  - BW1: one model alone on 1 thread;
  - BWpair: target and draft at once, 1 thread each (Mirror-SD's two lanes), summed.
Then, with B_t and B_d the bytes of a target and a draft forward (LM heads included), B_x those
of the early-exit head, gamma drafted tokens and a(gamma) tokens committed per target forward
(measured, from a benchmark's results.json):
  AR   >= B_t / BW2 per token
  SD   >= (gamma B_d + B_t) / BW2 per step (a verify of gamma + 1 rows reads B_t once)
  Mirror-SD, every step a hit: the lanes overlap, but both stream from one memory system:
       >= max((B_t + B_x) / BWpair_target, gamma B_d / BWpair_draft)
     (each lane at the rate it got while the other ran), and a miss adds a serial rollout
     (gamma B_d / BW2) after the verdict.
The speedup bounds are AR's bound over these, times a(gamma). Everything the bound leaves out
(compute-bound multi-row verifies, attention, Python, events) only lowers the real figures.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402

from script_timing import default_model, kernel_bytes, kernel_layers  # noqa: E402


def kernels(model):
    """(callables running each of the model's kernel layers on one random row, total bytes of
    their parameters)."""
    layers = kernel_layers(model)
    calls = [lambda m=m, x=torch.randn(1, m.in_features): m(x) for m in layers]
    return calls, sum(kernel_bytes(m) for m in layers)


def sweep(calls):
    for c in calls:
        c()


def alone_gbs(calls, nbytes, threads, rounds):
    torch.set_num_threads(threads)
    sweep(calls)
    times = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        sweep(calls)
        times.append(time.perf_counter_ns() - t)
    return nbytes / statistics.median(times)  # bytes per ns = GB/s


def pair_gbs(target, draft, seconds):
    """Both models' kernels at once, one thread each, for `seconds`: summed GB/s."""
    done = {}
    start = threading.Barrier(2)

    def lane(name, calls, nbytes):
        torch.set_num_threads(1)
        sweep(calls)
        start.wait()
        t0, n = time.perf_counter_ns(), 0
        while time.perf_counter_ns() - t0 < seconds * 1e9:
            sweep(calls)
            n += 1
        done[name] = (n * nbytes, time.perf_counter_ns() - t0)

    threads = [threading.Thread(target=lane, args=("target", *target)),
               threading.Thread(target=lane, args=("draft", *draft))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {k: b / ns for k, (b, ns) in done.items()}, sum(b for b, _ in done.values()) / max(ns for _, ns in done.values())


def from_results(path):
    """{gamma: (tokens per target forward, measured SD speedup, measured Mirror-SD speedup and
    hit rate or None)} of the sd / sd:gamma=N / mirror / mirror:gamma=N methods of a bench
    results.json (median speedups over AR)."""
    if not path:
        return {}
    with open(path) as f:
        data = json.load(f)
    rows = data["summary"]["overall"]
    base = data["meta"]["settings"]["gamma"]
    out = {}
    for name, row in rows.items():
        if name == "sd" or name.startswith("sd:gamma="):
            gamma = int(name.split("=")[1]) if "=" in name else base
            mirror = rows.get("mirror" if gamma == base else f"mirror:gamma={gamma}")
            out[gamma] = (row["mean_accepted"], row["speedup_median"],
                          (mirror["speedup_median"], mirror["hit_rate"]) if mirror else None)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="int8", help="target precision (int8 or int4)")
    ap.add_argument("--draft-precision", default=None, help="default: --precision")
    ap.add_argument("--results", default=None, help="a bench results.json with sd / sd:gamma=N methods")
    ap.add_argument("--accepted", default=None,
                    help="gamma:a pairs instead of --results, e.g. 3:3.29,4:3.70,5:4.20")
    ap.add_argument("--hit-rates", default="1.0,0.8,0.61")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    target = default_model("target", args.precision)
    draft = default_model("draft", args.draft_precision or args.precision)
    t_calls, b_t = kernels(target)
    d_calls, b_d = kernels(draft)
    head = target.get_output_embeddings()
    b_x = kernel_bytes(head)  # the exit head reads the LM head
    bw2 = {n: alone_gbs(c, b, 2, args.rounds) for n, (c, b) in (("target", (t_calls, b_t)), ("draft", (d_calls, b_d)))}
    bw1 = {n: alone_gbs(c, b, 1, args.rounds) for n, (c, b) in (("target", (t_calls, b_t)), ("draft", (d_calls, b_d)))}
    each, bw_pair = pair_gbs((t_calls, b_t), (d_calls, b_d), args.seconds)
    print(f"bytes per forward: target {b_t / 1e9:.3f} GB, draft {b_d / 1e9:.3f} GB, early-exit head {b_x / 1e9:.3f} GB")
    print(f"measured GB/s, 1 row, all layers back to back: target alone 2 threads {bw2['target']:.1f}, "
          f"1 thread {bw1['target']:.1f}; draft alone 2 threads {bw2['draft']:.1f}, 1 thread {bw1['draft']:.1f}; "
          f"both at once, 1 thread each: target {each['target']:.1f} + draft {each['draft']:.1f} = {bw_pair:.1f}")
    if args.accepted:
        acc = {int(g): (float(a), None, None) for g, a in (p.split(":") for p in args.accepted.split(","))}
    else:
        acc = from_results(args.results)
    if not acc:
        print("no tokens-per-forward figures (--results or --accepted): bounds not computed")
        return
    ar = b_t / bw2["target"]  # ns per token
    hits = [float(h) for h in args.hit_rates.split(",")]
    print("\nBOUNDS (projection from bytes and measured bandwidth, not a run): speedup over AR at most")
    print("| gamma | tokens per target forward | AR ms/token bound | SD | " + " | ".join(f"Mirror-SD, hit rate {h:.0%}" for h in hits)
          + " | measured SD | measured Mirror-SD (hit rate) |")
    print("|---|---|---|---|" + "---|" * len(hits) + "---|---|")
    for gamma, (a, sd_measured, mirror_measured) in sorted(acc.items()):
        sd = (gamma * b_d / bw2["draft"] + b_t / bw2["target"])
        overlap = max((b_t + b_x) / each["target"], gamma * b_d / each["draft"])
        cells = []
        for h in hits:
            mirror = overlap + (1 - h) * gamma * b_d / bw2["draft"]
            cells.append(f"{a * ar / mirror:.2f}x")
        measured = [f"{sd_measured:.2f}x" if sd_measured else "-",
                    f"{mirror_measured[0]:.2f}x ({mirror_measured[1]:.0%})" if mirror_measured else "-"]
        print(f"| {gamma} | {a:.2f} | {ar / 1e6:.1f} | {a * ar / sd:.2f}x | " + " | ".join(cells + measured) + " |")


if __name__ == "__main__":
    main()
