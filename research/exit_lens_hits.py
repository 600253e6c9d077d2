"""Exit lens on real decoding: exit top-8 and branch hit rates per layer, raw vs lens, and an
interleaved end-to-end timing of Mirror-SD without and with the lens.

    python research/exit_lens_hits.py [--prompts 4] [--max-new-tokens 48] [--gamma 7]
        [--branch-budget 3] [--draft-precision int8] [--layers 14,18,21,24]

Per prompt (the built-in questions, which the lens never saw), two greedy Mirror-SD runs back
to back, order alternating: A = raw exit at N/2 (exit_lens=off), B = the
defaults (exit_lens=auto: lens and rule-chosen layer). Run A is recorded: the hidden states
of every verify forward at each candidate layer, the draft's distributions and the verdicts.
In greedy decoding the windows do not depend on which branches were precomputed (a hit only
saves time), so run A's record lets us replay the branch admission offline for any exit
(layer, raw or lens) and scoring weights: hit = the verdict's root (A, c) is among the roots
admitted (one on the draft's own guess before the exit arrives when that happened in the
run, then the best by score up to the budget), exactly as DraftWorker admits them.
"""
import argparse
import copy
import os
import sys
import statistics
import threading
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")

from mirror_sd.engine.mirror.decoder import MirrorSpeculative  # noqa: E402
from mirror_sd.engine.mirror.scoring import score_roots  # noqa: E402
from mirror_sd.engine.settings import Settings  # noqa: E402
from mirror_sd.engine.mirror.early_exit import exit_head
from mirror_sd.models.pair import exit_parts  # noqa: E402
from mirror_sd.engine.events import Error, Verify  # noqa: E402
from mirror_sd.proposals.exit_lens import find_lens  # noqa: E402
from mirror_sd.models.loading import PRECISIONS, load_pair  # noqa: E402
from mirror_sd.models.pair import ModelPair  # noqa: E402
from mirror_sd.questions import load_questions, per_category  # noqa: E402
from scoring_record import watch_scoring  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--prompts", type=int, default=4)
ap.add_argument("--max-new-tokens", type=int, default=48)
ap.add_argument("--gamma", type=int, default=7)
ap.add_argument("--kappa", type=int, default=8)
ap.add_argument("--branch-budget", type=int, default=3)
ap.add_argument("--draft-precision", default="int8")
ap.add_argument("--layers", default="14,18,21,24")
ap.add_argument("--tiny", action="store_true", help="smoke test on tiny random models")
args = ap.parse_args()
layers = [int(x) for x in args.layers.split(",")]

if args.tiny:
    from mirror_sd.models import tiny
    t = tiny.target(0, vocab_size=259, max_position_embeddings=1024)
    pair = ModelPair(t, tiny.perturb(t, 0.05, 1), tiny.tiny_tokenizer())
    layers = [1, 2, 3]
else:
    pair = load_pair("default", "default", progress=lambda m, f=None: None)
if args.draft_precision == "int8" and not args.tiny:
    pair = ModelPair(pair.target, PRECISIONS["int8"].post_load(copy.deepcopy(pair.draft)), pair.tokenizer,
                     target_name=pair.target_name)
lens = find_lens(pair.target, "auto").lens
print("lens:", lens and lens.layers, "threads", torch.get_num_threads(), flush=True)
G = args.gamma

# --- recording (run A only) -------------------------------------------------------------
record = {"on": False, "scored": {}, "step": None}
target_thread = [None]


blocks = exit_parts(pair.target)[0]
step_hidden = {}


def make_hook(L):
    def hook(module, a, out):
        if record["on"] and threading.get_ident() == target_thread[0]:
            h = out[0] if isinstance(out, tuple) else out
            if h.shape[1] == G + 1:
                step_hidden.setdefault(L, []).append(h[0].detach().clone())
    return hook


hooks = [blocks[L - 1].register_forward_hook(make_hook(L)) for L in layers]


def recording_score(step, drafted, q_rows, q_bonus, proposals, kappa, *rest, **kw):
    if record["on"] and step not in record["scored"]:  # the first scoring of the step
        record["scored"][step] = {"drafted": tuple(drafted), "q_rows": q_rows.clone(),
                                  "q_bonus": q_bonus.clone(), "early": proposals is None}


def run(ids, **over):
    s = Settings(max_new_tokens=args.max_new_tokens, gamma=G, kappa=args.kappa,
                 branch_budget=args.branch_budget, **over)
    with watch_scoring(recording_score):
        events = list(MirrorSpeculative(pair, s).generate(ids))
    errs = [e.message for e in events if isinstance(e, Error)]
    assert not errs, errs
    return events


qs = per_category(load_questions(None), 1)[:args.prompts]
results = {"A": [], "B": []}
steps = []  # replay material: (drafted, q_rows, q_bonus, early, {L: h}, A, c)
for qi, q in enumerate(qs):
    ids = pair.encode_prompt(q.turns[0])
    order = ("A", "B") if qi % 2 == 0 else ("B", "A")
    outs = {}
    for name in order:
        if name == "A":
            record.update(on=True, scored={})
            step_hidden.clear()
            target_thread[0] = threading.get_ident()
            ev = run(ids, exit_lens="off", exit_layer=pair.target_layers // 2)
            record["on"] = False
            verifies = [e for e in ev if isinstance(e, Verify)]
            for v in verifies:  # step i: the i-th verify forward of the target
                sc, i = record["scored"].get(v.step), v.step
                if sc is None or tuple(v.drafted) != sc["drafted"] or i >= len(step_hidden[layers[0]]):
                    continue
                steps.append((list(sc["drafted"]), sc["q_rows"], sc["q_bonus"], sc["early"],
                              {L: step_hidden[L][i][-(G + 1):] for L in layers}, v.accepted, v.token))
        else:
            ev = run(ids)  # the defaults: exit_lens=auto, exit layer by the rule
        fin = ev[-1]
        outs[name] = fin
        results[name].append(fin.stats)
        st = fin.stats
        print(f"q{q.question_id} {q.category:15s} {name} tok/s {st['tokens_per_s']:.2f} hit "
              f"{st['hit_rate']:.2f} acc {st['mean_accepted']:.2f} layer {st['exit_layer']} "
              f"lens {bool(st['exit_lens'])}", flush=True)
    assert outs["A"].token_ids == outs["B"].token_ids, "outputs differ"

for name, label in (("A", "raw exit, N/2 (exit_lens=off)"), ("B", "defaults (lens, chosen layer)")):
    rs = results[name]
    print(f"{label}: tok/s median {statistics.median(r['tokens_per_s'] for r in rs):.3f}, "
          f"hit rate {sum(r['hits'] for r in rs) / max(1, sum(r['hits'] + r['fallbacks'] for r in rs)):.2%}, "
          f"layer {rs[0]['exit_layer']}, rule: {rs[0].get('exit_layer_rule')}")
ratio = [b["tokens_per_s"] / a["tokens_per_s"] for a, b in zip(results["A"], results["B"])]
print("B / A tok/s per prompt:", [round(x, 3) for x in ratio], "median", round(statistics.median(ratio), 3))

# --- replay ------------------------------------------------------------------------------
print(f"\nreplay over {len(steps)} steps (gamma {G}, budget {args.branch_budget}, kappa {args.kappa})")


def admitted(st, proposals, weight, accept):
    drafted, q_rows, q_bonus, early = st[:4]
    got = []
    if early:
        got = [(r.depth, r.token) for r in score_roots(drafted, q_rows, q_bonus, None, args.kappa)[:1]]
    if proposals is None:
        ranked = score_roots(drafted, q_rows, q_bonus, None, args.kappa)
    else:
        ranked = score_roots(drafted, q_rows, q_bonus, proposals, args.kappa, weight, accept)
    for r in ranked:
        if len(got) >= args.branch_budget:
            break
        if (r.depth, r.token) not in got:
            got.append((r.depth, r.token))
    return got


base = sum((st[5], st[6]) in admitted(st, None, 0, 0) for st in steps)
print(f"draft only (no exit): hit {base / len(steps):.1%}")
print("| layer | exit | top-1 at verdict | top-8 at verdict | hit w=0.5 | hit w=0.7 | hit w=0.7 u=0.5 | hit w=0.9 u=0.7 |")
print("|---|---|---|---|---|---|---|---|")
for L in layers:
    for use in ("raw", "lens"):
        if use == "lens" and (lens is None or L not in lens.layers):
            continue
        head = exit_head(pair.target, "auto", lens if use == "lens" else None, L)
        props = [head.proposals(st[4][L], args.kappa) for st in steps]
        top1 = sum(p[0][st[5]][0] == st[6] for p, st in zip(props, steps)) / len(steps)
        top8 = sum(st[6] in p[0][st[5]] for p, st in zip(props, steps)) / len(steps)
        hits = [sum((st[5], st[6]) in admitted(st, p, w, u) for p, st in zip(props, steps)) / len(steps)
                for w, u in ((0.5, 0), (0.7, 0), (0.7, 0.5), (0.9, 0.7))]
        print(f"| {L} | {use} | {top1:.1%} | {top8:.1%} | " + " | ".join(f"{h:.1%}" for h in hits) + " |",
              flush=True)
for h in hooks:
    h.remove()
