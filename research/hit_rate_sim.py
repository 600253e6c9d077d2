"""Branch hit rate of Mirror-SD vs branch budget, re-scored offline with other scoring parameters.

Record (real models, a few minutes):

    python research/hit_rate_sim.py record --split choose \
        --prompts 6 --max-new-tokens 64 --gamma 3 --out out/hitrate/choose.jsonl

runs greedy Mirror-SD (int8 target, int8-dyn draft, the exit lens, by default exit layer 24 as
the int8 benchmark's rule chose) on built-in questions and writes, per step, what
branch_scoring.score_roots needs: the drafted window, the top-K of every draft distribution
(q_rows, q_bonus), the early-exit proposals, whether a root was admitted on the draft's own
guess before the exit arrived, the verdict (A, c) and the engine's own verdict rank.
Splits of assets/questions.jsonl by index: `choose` = index % 3 == 0, `report` = index % 3 == 1
(one question per category each; the parameters are chosen on one, reported on the other).

Simulate (no models, seconds):

    python research/hit_rate_sim.py grid out/hitrate/choose.jsonl       # search w, u, kappa
    python research/hit_rate_sim.py table out/hitrate/report.jsonl      # the recorded weights vs the shipped lens defaults

In greedy decoding the windows do not depend on which branches were precomputed (a hit only
saves time), so one recording replays any scoring. Simulated hit rate at budget b = share of
steps whose verdict root is among the first b of the scored list (the engine admits exactly
those once the exit has arrived). An estimate: it ignores how long each rollout takes (a late
hit still waits for its rollout) and, for the "draft-first admission" rows, replays an admission that keeps
the draft's own best guess first (when it was admitted before the exit in the recording).
Top-K truncation: tokens outside the draft's recorded top-K get draft probability 0.

End to end (real models):

    python research/hit_rate_sim.py timing --split report --prompts 3 --budgets 1,2,4

the auto-tuner's probe (its estimated hit rate per budget and its choice), then Mirror-SD at
each budget (and the choice), interleaved per question: tok/s and measured hit rate.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.engine.mirror import scoring as branch_scoring  # noqa: E402

TOP_K = 32  # draft probabilities kept per distribution
BUDGETS = range(1, 9)
RAW = {"exit_weight": 0.5, "accept_weight": 0.0, "kappa": 8}  # the raw exit's scoring weights, the comparison row


def split_questions(questions, split):
    keep = {"choose": 0, "report": 1, "rest": 2}[split]
    return [q for i, q in enumerate(questions) if i % 3 == keep]


# ---------------------------------------------------------------------------------------------
# recording (real models)


def _top(row: torch.Tensor, k: int) -> list:
    top = row.topk(min(k, row.numel()))
    return [top.indices.tolist(), [float(x) for x in top.values]]


def record(args) -> None:
    import warnings
    warnings.filterwarnings("ignore")
    from mirror_sd.engine.mirror.decoder import MirrorSpeculative
    from mirror_sd.engine.settings import Settings
    from mirror_sd.engine.events import DraftBranch, Error, Finish, Verify
    from scoring_record import watch_scoring
    from mirror_sd.models.loading import load_pair
    from mirror_sd.questions import load_questions

    t0 = time.perf_counter()
    pair = load_pair("default", "default", precision=args.precision, draft_precision=args.draft_precision)
    print(f"loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    scored: dict = {}

    def recording_score(step, drafted, q_rows, q_bonus, proposals, kappa, *rest, **kw):
        rec = scored.setdefault(step, {"early": False})
        if proposals is None:
            rec["early"] = True  # a root admitted on the draft's own guess, before the exit
        else:
            rec.update(drafted=list(drafted), q_rows=[_top(r, TOP_K) for r in q_rows],
                       q_drafted=[float(q_rows[i, t]) for i, t in enumerate(drafted)],
                       q_bonus=_top(q_bonus, TOP_K), proposals=[proposals[0], proposals[1]],
                       kappa=kappa, args=[list(rest), kw])

    qs = split_questions(load_questions(None), args.split)[:args.prompts]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    n_steps = 0
    with open(args.out, "w") as f:
        for q in qs:
            ids = pair.encode_prompt(q.turns[0])
            s = Settings(max_new_tokens=args.max_new_tokens, gamma=args.gamma, kappa=args.kappa,
                         branch_budget=args.branch_budget, exit_layer=args.exit_layer)
            scored.clear()
            with watch_scoring(recording_score):
                events = list(MirrorSpeculative(pair, s).generate(ids))
            errors = [e.message for e in events if isinstance(e, Error)]
            assert not errors, errors
            fin = next(e for e in events if isinstance(e, Finish))
            ranks = {b.step: getattr(b, "rank", None) for b in events if isinstance(b, DraftBranch)
                     and b.status in ("taken", "serial") and getattr(b, "rank", None) is not None}
            for v in (e for e in events if isinstance(e, Verify)):
                rec = scored.get(v.step)
                if rec is None or "drafted" not in rec or rec["drafted"] != list(v.drafted):
                    continue  # the lane was cancelled (last step) before it scored
                rec.update(question_id=q.question_id, category=q.category, step=v.step,
                           verdict=[v.accepted, v.token], engine_rank=ranks.get(v.step),
                           exit_layer=fin.stats.get("exit_layer"), lens=bool(fin.stats.get("exit_lens")))
                f.write(json.dumps(rec) + "\n")
                n_steps += 1
            st = fin.stats
            print(f"q{q.question_id} {q.category:15s} {st['new_tokens']} tokens {st['tokens_per_s']:.2f} tok/s "
                  f"hit {st['hit_rate']:.0%} of {st['steps']} steps, exit layer {st['exit_layer']}, "
                  f"lens {bool(st['exit_lens'])}", flush=True)
    print(f"{n_steps} steps -> {args.out} ({time.perf_counter() - t0:.0f} s)")


def timing(args) -> None:
    """The auto-tuner's probe on the first question of the split, then Mirror-SD at each budget
    of --budgets (the probe's choice added), interleaved per question, order rotating."""
    import statistics
    import warnings
    warnings.filterwarnings("ignore")
    from mirror_sd.engine.settings import Settings
    from mirror_sd.engine.events import Error, Finish
    from mirror_sd.models.loading import load_pair
    from mirror_sd.engine.mirror.decoder import MirrorSpeculative
    from mirror_sd.questions import load_questions
    from mirror_sd.engine.tuning import choose, probe

    pair = load_pair("default", "default", precision=args.precision, draft_precision=args.draft_precision)
    qs = split_questions(load_questions(None), args.split)[:args.prompts]
    base = Settings(max_new_tokens=args.max_new_tokens, gamma=args.gamma, branch_budget=2,
                    exit_layer=args.exit_layer)
    t0 = time.perf_counter()
    cal = probe(pair, pair.encode_prompt(qs[0].turns[0]), base)
    _, chosen, speedup, table = choose(cal, fixed_gamma=args.gamma)
    print(f"probe {time.perf_counter() - t0:.1f} s: branch forward {cal.t_branch_1 * 1e3:.1f} ms + "
          f"{cal.t_branch_row * 1e3:.1f} ms/extra row, contention {cal.contention:.2f}, hit rate at "
          f"budget 2 {cal.hit_rate:.0%}; estimated hit rate at budget 1-8 from {cal.rank_steps} steps: "
          + " / ".join(f"{h:.0%}" for h in cal.hit_rates[:8]))
    print(f"auto: budget {chosen} (projected Mirror-SD {speedup:.2f}x AR: a projection); by budget: "
          + ", ".join(f"{r['branch_budget']}: {r['speedup']:.3f}" for r in table))
    budgets = sorted({int(b) for b in args.budgets.split(",")} | {chosen})
    tps = {b: [] for b in budgets}
    hits = {b: [0, 0] for b in budgets}
    for qi, q in enumerate(qs):
        ids = pair.encode_prompt(q.turns[0])
        order = budgets[qi % len(budgets):] + budgets[:qi % len(budgets)]
        for b in order:
            events = list(MirrorSpeculative(pair, Settings(**{**base.__dict__, "branch_budget": b})).generate(ids))
            assert not [e for e in events if isinstance(e, Error)]
            st = next(e for e in events if isinstance(e, Finish)).stats
            tps[b].append(st["tokens_per_s"])
            hits[b][0] += st["hits"]
            hits[b][1] += st["hits"] + st["fallbacks"]
            print(f"q{q.question_id} budget {b}: {st['tokens_per_s']:.2f} tok/s, hit {st['hit_rate']:.0%}", flush=True)
    for b in budgets:
        print(f"budget {b}: median {statistics.median(tps[b]):.2f} tok/s, hit rate {hits[b][0] / hits[b][1]:.1%} "
              f"({hits[b][1]} steps)")


# ---------------------------------------------------------------------------------------------
# simulation (no models)


def load_steps(paths) -> list[dict]:
    steps = []
    for p in paths:
        with open(p) as f:
            steps += [json.loads(line) for line in f if line.strip()]
    out = []
    for st in steps:  # compact vocabulary: every id the step mentions
        ids = set(st["drafted"]) | {st["verdict"][1]} | set(st["q_bonus"][0])
        for r in st["q_rows"]:
            ids |= set(r[0])
        for r in st["proposals"][0]:
            ids |= set(r)
        vocab = sorted(ids)
        index = {t: i for i, t in enumerate(vocab)}
        gamma = len(st["drafted"])

        def dense(top):
            row = torch.zeros(len(vocab), dtype=torch.float64)
            row[[index[t] for t in top[0]]] = torch.tensor(top[1], dtype=torch.float64)
            return row

        q_rows = torch.stack([dense(r) for r in st["q_rows"]])
        for i, t in enumerate(st["drafted"]):
            q_rows[i, index[t]] = st["q_drafted"][i]
        out.append({**st, "vocab": vocab, "index": index, "gamma": gamma, "t_q_rows": q_rows,
                    "t_q_bonus": dense(st["q_bonus"]),
                    "c_drafted": [index[t] for t in st["drafted"]],
                    "c_verdict": (st["verdict"][0], index[st["verdict"][1]]),
                    "c_props": [[[index[t] for t in r] for r in st["proposals"][0]], st["proposals"][1]]})
    return out


def scored(st, exit_weight, accept_weight, kappa, with_exit=True):
    props = None
    if with_exit:
        props = ([r[:kappa] for r in st["c_props"][0]], [r[:kappa] for r in st["c_props"][1]])
    return branch_scoring.score_roots(st["c_drafted"], st["t_q_rows"], st["t_q_bonus"], props, kappa,
                                      exit_weight, accept_weight)


def verdict_rank(st, **p) -> int:
    """The verdict root's place in the final scored list (-1: not in it)."""
    for i, r in enumerate(scored(st, **p)):
        if (r.depth, r.token) == st["c_verdict"]:
            return i
    return -1


def recorded(st) -> dict:
    """The scoring parameters the engine used in the recording."""
    (w, u), _ = st["args"]
    return {"exit_weight": w, "accept_weight": u, "kappa": st["kappa"]}


def curve_from_ranks(ranks) -> list[float]:
    return [sum(0 <= r < b for r in ranks) / len(ranks) for b in BUDGETS]


def hit_curve(steps, **p) -> list[float]:
    return curve_from_ranks([verdict_rank(st, **p) for st in steps])


def draft_only_curve(steps) -> list[float]:
    ranks = []
    for st in steps:
        roots = [(r.depth, r.token) for r in scored(st, 0.0, 0.0, RAW["kappa"], with_exit=False)]
        ranks.append(roots.index(st["c_verdict"]) if st["c_verdict"] in roots else -1)
    return curve_from_ranks(ranks)


def draft_first_curve(steps, **p) -> list[float]:
    """An admission that keeps the draft's own best root first (when it was admitted
    before the exit in the recording), then the final list up to the budget."""
    out = []
    for b in BUDGETS:
        hits = 0
        for st in steps:
            got = []
            if st["early"]:
                got = [(r.depth, r.token) for r in scored(st, p["exit_weight"], p["accept_weight"], p["kappa"],
                                                          with_exit=False)[:1]]
            for r in scored(st, **p):
                if len(got) >= b:
                    break
                if (r.depth, r.token) not in got:
                    got.append((r.depth, r.token))
            hits += st["c_verdict"] in got
        out.append(hits / len(steps))
    return out


def objective(curve) -> float:
    return sum(curve[:4]) / 4  # mean simulated hit rate over budgets 1..4 (tuning.BUDGETS)


def _row(label, curve) -> str:
    return f"| {label} | " + " | ".join(f"{h:.1%}" for h in curve) + " |"


def header(first="scoring") -> str:
    return (f"| {first} | " + " | ".join(f"b={b}" for b in BUDGETS) + " |\n|---|"
            + "---|" * len(BUDGETS))


def describe(steps) -> str:
    qs = sorted({st["question_id"] for st in steps})
    layers = sorted({st["exit_layer"] for st in steps})
    lens = sorted({st["lens"] for st in steps})
    depth = [st["verdict"][0] for st in steps]
    early = sum(st["early"] for st in steps)
    return (f"{len(steps)} steps from questions {qs}, exit layer {layers}, lens {lens}; verdict depth "
            f"histogram {[depth.count(j) for j in range(max(depth) + 1)]}; a root started before the "
            f"exit arrived on {early} steps")


def grid(args) -> None:
    steps = load_steps(args.files)
    print(describe(steps))
    agree = [st["engine_rank"] == verdict_rank(st, **recorded(st)) for st in steps if st.get("engine_rank") is not None]
    if agree:
        print(f"the engine's ranks reproduced offline (its own weights) on {sum(agree)}/{len(agree)} steps")
    ws = [round(x * 0.1, 1) for x in range(11)]
    us = [round(x * 0.1, 1) for x in range(11)]
    kappas = [k for k in (4, 6, 8) if k <= min(len(r) for st in steps for r in st["proposals"][0])]
    results = []
    for w, u, k in itertools.product(ws, us, kappas):
        c = hit_curve(steps, exit_weight=w, accept_weight=u, kappa=k)
        results.append((objective(c), w, u, k, c))
    results.sort(key=lambda r: -r[0])
    print("\nbest by mean simulated hit rate over budgets 1..4 (policy: final list, best first)")
    print(header("w, u, kappa"))
    for obj, w, u, k, c in results[:args.top]:
        print(_row(f"{w}, {u}, {k}", c))
    print("\nslices (kappa 8): hit rate at budget 1 / 2 / 4 by w (rows) and u (columns)")
    print("| w \\ u | " + " | ".join(str(u) for u in us[::2]) + " |\n|---|" + "---|" * len(us[::2]))
    for w in ws[::2]:
        cells = []
        for u in us[::2]:
            c = next(r[4] for r in results if r[1] == w and r[2] == u and r[3] == 8)
            cells.append(f"{c[0]:.0%}/{c[1]:.0%}/{c[3]:.0%}")
        print(f"| {w} | " + " | ".join(cells) + " |")


def parse_params(text: str) -> dict:
    d = dict(RAW)
    for item in text.split(","):
        k, v = item.split("=")
        d[{"w": "exit_weight", "u": "accept_weight", "kappa": "kappa"}[k.strip()]] = (
            int(v) if k.strip() == "kappa" else float(v))
    return d


def table(args) -> None:
    steps = load_steps(args.files)
    print(describe(steps))
    new = {"exit_weight": branch_scoring.EXIT_WEIGHT_LENS, "accept_weight": branch_scoring.ACCEPT_WEIGHT_LENS,
           "kappa": RAW["kappa"]} if args.new is None else parse_params(args.new)
    print(header())
    print(_row("draft-first admission: the draft's own guess first, then w 0.5 u 0", draft_first_curve(steps, **RAW)))
    print(_row("draft only (no exit)", draft_only_curve(steps)))
    print(_row("w 0.5 u 0 (raw-exit weights)", hit_curve(steps, **RAW)))
    print(_row(f"w {new['exit_weight']} u {new['accept_weight']} (shipped lens defaults)" if args.new is None
               else f"w {new['exit_weight']} u {new['accept_weight']} kappa {new['kappa']}", hit_curve(steps, **new)))
    ranks = [st["engine_rank"] for st in steps if st.get("engine_rank") is not None]
    if ranks:
        print(_row(f"engine's recorded ranks ({len(ranks)} steps)", curve_from_ranks(ranks)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="run Mirror-SD on real prompts and dump the scoring inputs")
    r.add_argument("--split", choices=("choose", "report", "rest"), default="choose")
    r.add_argument("--prompts", type=int, default=6)
    r.add_argument("--max-new-tokens", type=int, default=64)
    r.add_argument("--gamma", type=int, default=3)
    r.add_argument("--kappa", type=int, default=8)
    r.add_argument("--branch-budget", type=int, default=2)
    r.add_argument("--exit-layer", type=int, default=24, help="24: the int8 benchmark's rule choice; 0: the rule")
    r.add_argument("--precision", default="int8")
    r.add_argument("--draft-precision", default="int8-dyn")
    r.add_argument("--out", required=True)
    m = sub.add_parser("timing", help="auto budget probe, then Mirror-SD per budget, interleaved")
    m.add_argument("--split", choices=("choose", "report", "rest"), default="report")
    m.add_argument("--prompts", type=int, default=3)
    m.add_argument("--max-new-tokens", type=int, default=64)
    m.add_argument("--gamma", type=int, default=3)
    m.add_argument("--budgets", default="1,2")
    m.add_argument("--exit-layer", type=int, default=24)
    m.add_argument("--precision", default="int8")
    m.add_argument("--draft-precision", default="int8-dyn")
    g = sub.add_parser("grid", help="search exit_weight, accept_weight and kappa on a recording")
    g.add_argument("files", nargs="+")
    g.add_argument("--top", type=int, default=12)
    t = sub.add_parser("table", help="simulated hit rate vs budget: raw-exit weights vs the shipped lens defaults")
    t.add_argument("files", nargs="+")
    t.add_argument("--new", default=None, help="e.g. w=0.8,u=0.6,kappa=8 (default: the shipped lens defaults)")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        args.exit_layer = args.exit_layer or None
        torch.manual_seed(0)
        record(args)
    elif args.cmd == "timing":
        args.exit_layer = args.exit_layer or None
        timing(args)
    elif args.cmd == "grid":
        grid(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
