"""Which draft window policy pays on this machine: fixed gamma, or stop when the draft is unsure.

    python research/window_policy_sim.py --precision int8

For each built-in question (first per category) the target's greedy answer is decoded (AR),
then the draft runs once over prompt + answer: at every answer position that gives the draft's
own greedy token with the true prefix and its probability (int8/int4 rows are computed alone,
so these are the bits a rollout would see). Greedy SD accepts d_1..d_A up to the first d that
differs from the answer, so the tokens per window of any policy follow from these two lists.

Costs are measured here, at 2 threads: a draft decode token, and a target forward over k new
tokens (k = 1..9) after the prompt. Predicted decode time of a policy = sum over its windows of
(k draft tokens + target forward over k + 1 + a fixed step overhead). This is a projection
from measured costs, not a measurement of the engine: check it against a benchmark run.

One gap: after a draft token that the target rejects, the draft's later confidences (on its
own, wrong path) are not known here. The policy "stop below tau" is then charged as if it
kept drafting to its maximum (pessimistic); fixed gamma is exact.
"""
import argparse
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402

from mirror_sd.engine.settings import Settings  # noqa: E402
from mirror_sd.engine.lanes import Lane  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402
from mirror_sd.engine.registry import METHODS  # noqa: E402
from mirror_sd.questions import load_questions, per_category  # noqa: E402


def answer_and_confidence(pair, prompt_ids, new_tokens):
    """(the target's greedy answer, per answer position: draft's token, its probability)."""
    finish = list(METHODS["ar"](pair, Settings(max_new_tokens=new_tokens)).generate(prompt_ids))[-1]
    answer = finish.token_ids
    lane = Lane(pair.draft, "draft")
    with torch.inference_mode():
        logits = lane.feed(prompt_ids + answer[:-1])[len(prompt_ids) - 1:]  # row i predicts answer[i]
        probs = torch.softmax(logits.double(), -1)
        conf, top = probs.max(-1)
    return answer, top.tolist(), conf.tolist()


@torch.inference_mode()
def measured_costs(pair, prompt_ids, max_rows, reps=7):
    """(ms of one draft decode token, {k: ms of a target forward over k new tokens})."""
    def median_forward(model, rows):
        lane = Lane(model, "x")
        lane.feed(prompt_ids, logits_to_keep=1)
        times = []
        for _ in range(reps + 1):
            t = time.perf_counter_ns()
            lane.feed(list(range(100, 100 + rows)))
            times.append((time.perf_counter_ns() - t) / 1e6)
            lane.cache.crop(-rows)
            lane.ids = lane.ids[:-rows]
        return statistics.median(times[1:])
    draft = median_forward(pair.draft, 1)
    target = {k: median_forward(pair.target, k) for k in range(1, max_rows + 1)}
    return draft, target


def simulate(agree, conf, policy, draft_ms, target_ms, overhead_ms):
    """(predicted decode ms, target forwards) for one answer under a window policy
    (gmax, tau): draft until gmax tokens or a token with probability below tau."""
    gmax, tau = policy
    n, j, total, forwards = len(agree), 0, 0.0, 0
    while j < n:
        k, accepted, rejected = 0, 0, False
        while k < gmax:
            pos = j + k
            k += 1
            if pos >= n:
                break
            if not rejected:
                if agree[pos]:
                    accepted += 1
                else:
                    rejected = True
                if conf[pos] < tau:
                    break
        total += k * draft_ms + target_ms[k + 1] + overhead_ms
        forwards += 1
        j += accepted + 1
    return total, forwards


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--draft-precision", default=None)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--overhead-ms", type=float, default=3.0, help="per step, outside the forwards")
    args = ap.parse_args()
    pair = load_pair("default", "default", target_precision=args.precision,
                     draft_precision=args.draft_precision or args.precision,
                     progress=lambda m, f=None: None)
    torch.set_num_threads(2)
    questions = per_category(load_questions(), args.per_category)
    rows = []
    for q in questions:
        ids = pair.encode_prompt(q.turns[0])
        answer, top, conf = answer_and_confidence(pair, ids, args.max_new_tokens)
        agree = [t == a for t, a in zip(top, answer)]
        rows.append((q.category, ids, agree, conf))
        print(f"{q.category}: {len(answer)} tokens, draft top-1 = target {sum(agree) / len(agree):.1%}", flush=True)
    gmaxes = (2, 3, 4, 5, 6, 8)
    taus = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
    draft_ms, target_ms = measured_costs(pair, rows[0][1], max(gmaxes) + 1)
    print(f"\nmeasured at 2 threads: draft token {draft_ms:.1f} ms; target forward over k tokens:",
          ", ".join(f"{k}: {v:.1f}" for k, v in target_ms.items()), "ms")
    print(f"\npredicted decode speedup over AR (median over {len(rows)} questions; a projection)")
    print("| gmax \\ tau | " + " | ".join(f"{t:.1f}" for t in taus) + " |")
    print("|---" * (len(taus) + 1) + "|")
    for g in gmaxes:
        cells = []
        for t in taus:
            ratios, tokens = [], []
            for _, _, agree, conf in rows:
                ms, forwards = simulate(agree, conf, (g, t), draft_ms, target_ms, args.overhead_ms)
                ratios.append(len(agree) * target_ms[1] / ms)
                tokens.append(len(agree) / forwards)
            cells.append(f"{statistics.median(ratios):.2f}x ({statistics.mean(tokens):.2f})")
        print(f"| {g} | " + " | ".join(cells) + " |")
    print("\ncells: speedup (tokens per target forward); tau 0.0 is fixed gamma = gmax")


if __name__ == "__main__":
    main()
