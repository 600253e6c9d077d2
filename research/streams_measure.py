"""Stream heads on the default pair: draft time per rollout, per-position acceptance by the
target, and SD / Mirror-SD with and without streams against AR on one code prompt (greedy).

    python research/streams_measure.py [--max-new-tokens 128] [--question 1]

Prints a JSON object (and writes it to --out when given)."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from mirror_sd.engine.acceptance import Sampling
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.drafting import serial_rollout
from mirror_sd.engine.events import Finish, Notice, Span, Verify
from mirror_sd.engine.lanes import Lane
from mirror_sd.models.loading import load_pair
from mirror_sd.engine.registry import METHODS
from mirror_sd.questions import load_questions
from mirror_sd.engine.proposers import rollout_for


def rollout_times(pair, committed, gamma, reps=5):
    """ms per rollout of gamma tokens on a warm cache holding committed[:-1] (the pending
    token is the last committed one, as after a full acceptance)."""
    out = {}
    for name, streams in (("serial", "off"), ("streams", "auto")):
        rollout, _ = rollout_for(pair, streams)
        lane = Lane(pair.draft, "draft")
        lane.feed(committed[:-1])
        times = []
        for _ in range(reps + 1):  # the first is a warm-up
            t0 = time.perf_counter()
            rollout(lane, committed, gamma, Sampling(), None)
            times.append((time.perf_counter() - t0) * 1e3)
            lane.sync(committed[:-1] + [committed[-1]])  # drop the drafted tokens again
        out[name] = round(statistics.median(times[1:]), 1)
    return out


def one_run(pair, method, streams, settings, prompt_ids):
    s = replace(settings, streams=streams)
    events = list(METHODS[method](pair, s).generate(prompt_ids))
    fin = events[-1]
    assert isinstance(fin, Finish)
    verifies = [e for e in events if isinstance(e, Verify)]
    draft_spans = [(e.end_ns - e.start_ns) / 1e6 for e in events
                   if isinstance(e, Span) and e.lane == "draft" and e.label in ("draft", "fallback")]
    reached = [0] * settings.gamma
    accepted = [0] * settings.gamma
    for v in verifies:
        for i in range(len(v.drafted)):
            if v.accepted >= i:
                reached[i] += 1
                accepted[i] += v.accepted > i
    return {
        "method": method, "streams": streams, "tokens": fin.token_ids,
        "notices": [e.message for e in events if isinstance(e, Notice)],
        "tokens_per_s": round(fin.stats["tokens_per_s"], 3), "wall_s": round(fin.stats["wall_s"], 2),
        "new_tokens": fin.stats["new_tokens"], "mean_accepted": round(fin.stats["mean_accepted"], 2),
        "target_forwards": fin.stats["target_forwards"],
        "acceptance_rate": fin.stats["acceptance_rate"],
        "draft_ms_per_rollout_median": round(statistics.median(draft_spans), 1) if draft_spans else None,
        "position_acceptance": [round(a / r, 3) if r else None for a, r in zip(accepted, reached)],
        "position_reached": reached,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--question", type=int, default=1)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--methods", default="ar,sd,sd-streams,mirror,mirror-streams")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    pair = load_pair("default", "default")
    q = next(q for q in load_questions(None) if q.question_id == args.question)
    prompt_ids = pair.encode_prompt(q.turns[0])
    settings = Settings(max_new_tokens=args.max_new_tokens, gamma=args.gamma)
    result = {"question": q.question_id, "prompt_tokens": len(prompt_ids), "gamma": args.gamma,
              "threads": torch.get_num_threads()}
    heads = getattr(rollout_for(pair, "auto")[0], "heads", None)
    result["heads"] = None if heads is None else {"n_heads": heads.n_heads, "rank": heads.rank}
    # 1) draft time per rollout, on the prompt plus a short greedy answer
    ar_short = next(e for e in METHODS["ar"](pair, replace(settings, max_new_tokens=16)).generate(prompt_ids)
                    if isinstance(e, Finish)).token_ids
    committed = prompt_ids + ar_short
    result["rollout_ms"] = {g: rollout_times(pair, committed, g) for g in (args.gamma, 2 * args.gamma)}
    print(json.dumps(result["rollout_ms"]), flush=True)
    # 2) end to end, back to back on the same prompt
    runs = {}
    for name in args.methods.split(","):
        method, _, st = name.partition("-")
        runs[name] = one_run(pair, method, "auto" if st else "off", settings, prompt_ids)
        r = runs[name]
        print(name, {k: v for k, v in r.items() if k != "tokens"}, flush=True)
    ar = runs.get("ar")
    for name, r in runs.items():
        r["identical_to_ar"] = ar is not None and r["tokens"] == ar["tokens"]
        r["speedup"] = round(r["tokens_per_s"] / ar["tokens_per_s"], 3) if ar else None
    for r in runs.values():
        del r["tokens"]
    result["runs"] = runs
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        open(args.out, "w").write(text)


if __name__ == "__main__":
    main()
