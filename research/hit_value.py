"""What is one Mirror-SD hit worth on this machine? (docs/performance.md, "The exit lens")

    python research/hit_value.py --questions out/heldout-questions.jsonl

A hit saves the draft work that already ran while the target finished its forward: after the
verdict the target waits for the next window, and on a hit that window is partly or wholly
rolled out already. The script runs Mirror-SD variants interleaved (question by question, the
order rotated) and reads every step's spans:

    gap(s)  = start of step s's target forward - end of step s-1's target forward / verify
              (the target lane idle, waiting for window s)
    step(s) = start of step s+1's target forward - start of step s's

and splits the gaps by whether window s was a hit (Commit.hit). The measured difference of the
mean gaps, miss minus hit, is what one more hit saves; times the lens's measured gain in hit
rate, over the mean step, is the most the lens can speed the run up (a projection from
measured parts, labelled so). Prints also each variant's measured speed against the first.
"""
import argparse
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

from mirror_sd.bench import harness as bench  # noqa: E402
from mirror_sd.bench.runners import MethodRun, variant  # noqa: E402
from mirror_sd.engine.settings import Settings  # noqa: E402
from mirror_sd.engine.events import Commit, Finish, Span  # noqa: E402
from mirror_sd.models.loading import load_pair  # noqa: E402
from mirror_sd.engine.registry import METHODS  # noqa: E402
from mirror_sd.questions import load_questions, per_category  # noqa: E402


def gap_runner(method, rows):
    """A bench runner for `method` that also appends every step's (hit, gap, step) to rows."""
    from dataclasses import replace
    base, changes = variant(method)

    def run(pair, ids, settings):
        decoder = METHODS[base](pair, replace(settings, **changes))
        spans, hits, finish = [], {}, None
        for ev in decoder.generate(ids):
            if isinstance(ev, Span):
                spans.append(ev)
            elif isinstance(ev, Commit) and ev.hit is not None:
                hits[ev.step] = ev.hit
            elif isinstance(ev, Finish):
                finish = ev
        rows.extend(step_gaps(spans, hits))
        return MethodRun(list(finish.token_ids), finish.text, dict(finish.stats), spans,
                               finish.stats["wall_s"])

    return run


def step_gaps(spans, hits):
    """[(hit, gap_ns, step_ns)] for every step after the first that has a next step."""
    start, end = {}, {}
    for s in spans:
        if s.lane == "target" and s.label == "prefix":
            start[s.step] = s.start_ns
        if s.lane in ("target", "verify") and s.step >= 0 and s.label != "prefill":
            end[s.step] = max(end.get(s.step, 0), s.end_ns)
    out = []
    for s in sorted(start):
        if s - 1 in end and s + 1 in start and s in hits:
            out.append((hits[s], start[s] - end[s - 1], start[s + 1] - start[s]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", default=None)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--methods", default="mirror,mirror:exit_lens=off,mirror:exit_layer=14")
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--gamma", type=int, default=3)
    args = ap.parse_args()
    methods = args.methods.split(",")
    pair = load_pair("default", "default", precision=args.precision, progress=lambda m, f=None: None)
    questions = per_category(load_questions(args.questions), args.per_category)
    settings = Settings(max_new_tokens=args.max_new_tokens, gamma=args.gamma, branch_budget=1)
    rows = {m: [] for m in methods}
    runners = {m: gap_runner(m, rows[m]) for m in methods}
    # warm-up: one short decode per method, not counted
    warm = pair.encode_prompt([{"role": "user", "content": "Say hello."}])
    for m in methods:
        gap_runner(m, [])(pair, warm, Settings(max_new_tokens=8, gamma=args.gamma, branch_budget=1))
    wall = {m: {} for m in methods}
    layer = {}
    for qi, q in enumerate(questions):
        for m in bench.rotated_order(methods, qi):
            runs, _ = bench.answer_question(pair, q, runners[m], settings)
            wall[m][q.question_id] = sum(r.wall_s for r in runs)
            layer[m] = runs[-1].stats.get("exit_layer")
            print(f"question {q.question_id} {m}: {wall[m][q.question_id]:.1f} s", file=sys.stderr, flush=True)
    ms = 1e-6
    first = methods[0]
    print(f"| method | exit layer | steps | hit rate | mean gap, hit (ms) | mean gap, miss (ms) | "
          f"saved per hit (ms) | mean step (ms) | speed over {first}, per question median |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for m in methods:
        r = rows[m]
        gh = [g for h, g, _ in r if h]
        gm = [g for h, g, _ in r if not h]
        step = statistics.fmean(s for _, _, s in r)
        hit_rate = len(gh) / len(r)
        saved = (statistics.fmean(gm) - statistics.fmean(gh)) if gh and gm else float("nan")
        ratios = [wall[first][k] / wall[m][k] for k in wall[m] if wall[m][k] > 0]
        summary[m] = (hit_rate, saved, step)
        print(f"| {m} | {layer[m]} | {len(r)} | {hit_rate:.0%} | {statistics.fmean(gh) * ms if gh else float('nan'):.1f} | "
              f"{statistics.fmean(gm) * ms if gm else float('nan'):.1f} | {saved * ms:.1f} | {step * ms:.1f} | "
              f"{statistics.median(ratios):.3f}x |")
    print("\nProjection (measured parts, not a run): the most a hit-rate gain dh can speed a variant up "
          "is dh x saved per hit / mean step.")
    for m in methods[1:]:
        dh = summary[first][0] - summary[m][0]
        hr, saved, step = summary[m]
        print(f"  {first} over {m}: hit rate {dh:+.0%} -> at most {dh * saved / step:+.1%} "
              f"({saved * ms:.1f} ms saved per hit, {step * ms:.0f} ms per step)")
    print("\nMeasured, per question: wall of each variant over the first's (above 1: the first is faster)")
    for m in methods[1:]:
        r = [wall[m][k] / wall[first][k] for k in wall[m] if wall[first][k] > 0]
        half = 2 * statistics.stdev(r) / len(r) ** 0.5 if len(r) > 1 else float("nan")
        print(f"  {m} / {first}: median {statistics.median(r):.3f}, mean {statistics.fmean(r):.3f} "
              f"+- {half:.3f} (2 standard errors, {len(r)} questions); "
              + " ".join(f"{x:.3f}" for x in r))


if __name__ == "__main__":
    main()
