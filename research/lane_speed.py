"""Each lane's speed beside the other against alone, under OpenMP wait policies.

    python research/lane_speed.py [--rounds 12] [--policies default,spin20k,passive]

For each policy a fresh child process (the OpenMP variables must be set before torch loads)
loads the default pair at int8 and repeats, interleaved, a Mirror-SD step's pattern on the
real models:
  - beside: the main thread verifies a 4-token window on the target (1 torch thread) while a
    worker thread runs one-row draft forwards (1 torch thread); the draft forwards that ran
    wholly inside the verify are timed;
  - after the verdict, 3 draft forwards with both cores, in the worker thread (where the draft
    lane's post-verdict work ran) and in the main thread (a hand-off to the waiting target lane);
  - alone: the same draft forward on the main thread with 1 and 2 threads, nothing beside it;
  - AR: a target decode step on the main thread with 2 threads (plain AR and SD's speed).
Medians in ms. The first round warms up and is not counted.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

POLICIES = {  # name -> environment set before torch loads
    "default": {},
    "spin20k": {"GOMP_SPINCOUNT": "20000"},
    "spin2k": {"GOMP_SPINCOUNT": "2000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}


def child(rounds: int, affinity: bool) -> dict:
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from mirror_sd.engine.lanes import Lane
    from mirror_sd.models.loading import load_pair
    pair = load_pair(precision="int8")
    context = list(range(1000, 1150))
    target, draft = Lane(pair.target, "target"), Lane(pair.draft, "draft")
    torch.set_num_threads(2)
    target.feed(context, logits_to_keep=1)
    draft.feed(context, logits_to_keep=1)
    t_base, d_base = len(target.ids), len(draft.ids)
    times = {k: [] for k in ("draft alone 1t", "draft alone 2t", "draft beside target",
                             "target verify 4 beside draft", "target verify 4 alone 1t",
                             "draft after verdict, worker 2t", "draft after verdict, main 2t",
                             "AR target decode 2t")}

    def fwd(lane, tokens):
        t = time.perf_counter_ns()
        lane.feed(tokens, logits_to_keep=1)
        return (time.perf_counter_ns() - t) / 1e6

    def cut(lane, base):
        lane.sync(lane.ids[:base] + [7])

    def pin(core):
        if affinity:
            os.sched_setaffinity(threading.get_native_id(), {core})

    def worker_body(stop, out, after, ready):
        torch.set_num_threads(1)
        pin(1)
        while True:
            ready.wait()
            ready.clear()
            if stop.is_set():
                return
            inside = []
            while not out["verdict"].is_set():
                ms = fwd(draft, [11])
                if not out["verdict"].is_set():
                    inside.append(ms)
            out["beside"] = inside
            if after:
                torch.set_num_threads(2)
                out["after"] = [fwd(draft, [12]) for _ in range(3)]
                torch.set_num_threads(1)
            out["done"].set()

    with torch.inference_mode():
        for r in range(rounds + 1):
            for where in ("worker", "main"):
                cut(draft, d_base)
                cut(target, t_base)
                stop, ready = threading.Event(), threading.Event()
                out = {"verdict": threading.Event(), "done": threading.Event()}
                w = threading.Thread(target=worker_body, args=(stop, out, where == "worker", ready))
                w.start()
                torch.set_num_threads(1)
                pin(0)
                ready.set()
                v = fwd(target, [20, 21, 22, 23, 24])
                out["verdict"].set()
                out["done"].wait()
                if affinity:
                    os.sched_setaffinity(threading.get_native_id(), {0, 1})
                torch.set_num_threads(2)
                after = out.get("after") or [fwd(draft, [12]) for _ in range(3)]
                stop.set()
                ready.set()
                w.join()
                if r:
                    times["draft beside target"] += out["beside"]
                    times["target verify 4 beside draft"].append(v)
                    times[f"draft after verdict, {where} 2t"] += after
            cut(draft, d_base)
            cut(target, t_base)
            if r:
                for n in (1, 2):
                    torch.set_num_threads(n)
                    times[f"draft alone {n}t"] += [fwd(draft, [13]) for _ in range(3)]
                torch.set_num_threads(1)
                times["target verify 4 alone 1t"].append(fwd(target, [20, 21, 22, 23, 24]))
                cut(target, t_base)
                torch.set_num_threads(2)
                times["AR target decode 2t"] += [fwd(target, [30 + i]) for i in range(3)]
    med = {k: round(statistics.median(v), 2) for k, v in times.items() if v}
    med["beside / alone 1t"] = round(med["draft beside target"] / med["draft alone 1t"], 3)
    med["after-verdict worker / main"] = round(med["draft after verdict, worker 2t"]
                                               / med["draft after verdict, main 2t"], 3)
    return med


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--policies", default="default,spin20k,passive")
    ap.add_argument("--affinity", action="store_true", help="pin the lanes to one core each")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.rounds, args.affinity)))
        return
    out = {"command": "python research/lane_speed.py " + " ".join(sys.argv[1:]), "policies": {}}
    for name in args.policies.split(","):
        env = {**os.environ, **POLICIES[name]}
        for var in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
            if var not in POLICIES[name]:
                env.pop(var, None)
        cmd = [sys.executable, __file__, "--child", "--rounds", str(args.rounds)]
        if args.affinity:
            cmd.append("--affinity")
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode:
            sys.exit(res.stderr[-3000:])
        out["policies"][name] = json.loads(res.stdout.strip().splitlines()[-1])
        print(name, json.dumps(out["policies"][name]), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
