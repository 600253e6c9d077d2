"""A truncated draft as the proposer of greedy speculative decoding: the default draft's first L
decoder layers, then its final norm and LM head (no training). For each L, on the built-in
questions (the first of each task group, the target's chat template):

- agreement: top-1 of the truncated draft, teacher-forced along the target's own greedy
  continuation (computed once with the target), against the target's next token. This is the
  per-token acceptance of greedy SD at window position 1; "window 2/3 accepted" is the share of
  start positions whose next 2 / 3 drafts all match (teacher-forcing is exact for greedy SD: a
  later draft sees only accepted, i.e. the target's, tokens).
- cost: one decode forward of the truncated draft (1 new token on a KV cache of a prompt plus its
  continuation, as while drafting), median ms, 2 threads, interleaved across L; the target's
  forward over r = 1..9 new tokens on the same kind of cache (r = 1: an AR step, r = k + 1: the
  verify of a window of k).
- projection (from the measured costs and acceptance, not a measured SD run): the speedup of
  greedy SD over AR with window k = E_k * t_verify(1) / (k * t_draft(L) + t_verify(k + 1)),
  E_k the expected tokens per step, either geometric 1 + a + ... + a^k (a: agreement) or
  empirical 1 + mean(min(run of matches, k)) over start positions; best k per L. The draft's
  catch-up after a fully accepted window and the lanes' interplay are left out.

Reference rows (given, not measured here): prompt lookup (0.2 ms per drafted token, 52% of
drafted tokens accepted) and the full draft as the benchmark saw it (12.5 ms a forward, 64%
accepted), each projected with this run's target costs and the geometric formula.

    python research/truncated_draft.py --layers 4,6,8,12,16,18,20,22,24 --max-new-tokens 48 \
        --out research/truncated_draft.json
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
warnings.filterwarnings("ignore")
import torch  # noqa: E402

from mirror_sd.engine.lanes import new_cache  # noqa: E402

REFERENCE = {"prompt lookup (given)": (0.2, 0.52), "full draft, benchmark (given)": (12.5, 0.64)}


@contextlib.contextmanager
def truncated(model, n_layers):
    """`model` running only its first n_layers decoder layers (then its final norm and head)."""
    body = model.model
    layers = body.layers
    body.layers = torch.nn.ModuleList(list(layers)[:n_layers])
    try:
        yield model
    finally:
        body.layers = layers


@torch.inference_mode()
def forward(model, ids, cache, keep=0):
    out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=keep)
    return out.logits[0]


@torch.inference_mode()
def greedy(model, prompt, n, eos):
    """The target's greedy continuation of `prompt`, decoded token by token (as AR does)."""
    cache = new_cache(model.config)
    logits = forward(model, prompt, cache, keep=1)
    out = []
    while len(out) < n:
        tok = int(logits[-1].argmax())
        out.append(tok)
        if tok in eos:
            break
        logits = forward(model, [tok], cache)
    return out


@torch.inference_mode()
def matches(model, prompt, cont):
    """Teacher-forced top-1 of `model` for each token of `cont` (a fresh cache): [bool]."""
    logits = forward(model, prompt + cont[:-1], new_cache(model.config), keep=len(cont))
    return [int(p) == t for p, t in zip(logits.argmax(-1).tolist(), cont)]


def runs(match_lists, k):
    """Per start position with k tokens ahead: the number of leading matches, capped at k."""
    out = []
    for m in match_lists:
        for i in range(len(m) - k + 1):
            r = 0
            while r < k and m[i + r]:
                r += 1
            out.append(r)
    return out


@torch.inference_mode()
def time_forwards(model, ctx, rows, reps):
    """[ms] of `reps` forwards of `rows` new tokens on a cache holding ctx (cropped back)."""
    cache = new_cache(model.config)
    forward(model, ctx, cache, keep=1)
    new = ctx[-rows:]
    times = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        forward(model, new, cache)
        times.append((time.perf_counter_ns() - t) / 1e6)
        cache.crop(-rows)
    return times


def project(a, t_draft, t_verify, run_by_k, kmax):
    """Best window for a proposer: [(k, geometric speedup, empirical speedup, E geo, E emp)]."""
    t_ar = t_verify[1]
    rows = []
    for k in range(1, kmax + 1):
        step = k * t_draft + t_verify[k + 1]
        e_geo = sum(a ** i for i in range(k + 1))
        e_emp = 1 + statistics.mean(run_by_k[k]) if run_by_k else None
        rows.append({"k": k, "step_ms": round(step, 2), "tokens_geo": round(e_geo, 3),
                     "speedup_geo": round(e_geo * t_ar / step, 3),
                     "tokens_emp": None if e_emp is None else round(e_emp, 3),
                     "speedup_emp": None if e_emp is None else round(e_emp * t_ar / step, 3)})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="4,6,8,12,16,18,20,22,24")
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--reps", type=int, default=12, help="timed forwards per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--kmax", type=int, default=8)
    ap.add_argument("--out", default="out/truncated_draft.json")
    args = ap.parse_args()

    from mirror_sd.models.loading import load_pair
    from mirror_sd.questions import load_questions, per_category
    t0 = time.perf_counter()
    pair = load_pair("default", "default", precision=args.precision)
    torch.set_num_threads(2)
    target, draft = pair.target, pair.draft
    n_all = int(draft.config.num_hidden_layers)
    layer_list = sorted({min(int(x), n_all) for x in args.layers.split(",")} | {n_all})
    print(f"loaded in {time.perf_counter() - t0:.0f} s; draft has {n_all} layers, "
          f"target {target.config.num_hidden_layers}", flush=True)

    questions = per_category(load_questions(), args.per_category)
    eos = pair.eos_token_ids
    data = []
    for q in questions:
        prompt = pair.encode_prompt(q.turns[0])
        cont = greedy(target, prompt, args.max_new_tokens, eos)
        data.append((q, prompt, cont))
        print(f"  {q.category}: prompt {len(prompt)} tokens, continuation {len(cont)}", flush=True)

    # acceptance, teacher-forced; the full model without slicing as a check of the slicing
    full_check = [matches(draft, p, c) for _, p, c in data]
    per_layer = {}
    for n in layer_list:
        with truncated(draft, n):
            m = [matches(draft, p, c) for _, p, c in data]
        if n == n_all:
            assert m == full_check, "slicing all layers changed the full draft's predictions"
        flat = [x for ml in m for x in ml]
        per_layer[n] = {"matches": m, "agreement": sum(flat) / len(flat),
                        "runs": {k: runs(m, k) for k in range(1, args.kmax + 1)},
                        "per_category": {q.category: round(sum(ml) / len(ml), 3)
                                         for (q, _, _), ml in zip(data, m)}}

    # costs: interleaved rounds, order alternating; one context (the longest prompt + its text)
    _, p, c = max(data, key=lambda d: len(d[1]) + len(d[2]))
    ctx = p + c
    draft_times = {n: [] for n in layer_list}
    verify_times = {r: [] for r in range(1, args.kmax + 2)}
    for rnd in range(args.rounds):
        order = layer_list if rnd % 2 == 0 else layer_list[::-1]
        for n in order:
            with truncated(draft, n):
                draft_times[n] += time_forwards(draft, ctx, 1, args.reps)
        for r in (verify_times if rnd % 2 == 0 else list(verify_times)[::-1]):
            verify_times[r] += time_forwards(target, ctx, r, max(4, args.reps // 2))
    t_draft = {n: statistics.median(v[2:]) for n, v in draft_times.items()}
    t_verify = {r: statistics.median(v[1:]) for r, v in verify_times.items()}

    results = {"setup": {"precision": args.precision, "threads": 2, "questions": len(data),
                         "max_new_tokens": args.max_new_tokens, "context_tokens": len(ctx),
                         "positions": sum(len(c) for _, _, c in data), "draft_layers": n_all},
               "target_ms": {r: round(v, 2) for r, v in t_verify.items()}, "layers": {},
               "reference": {}}
    print(f"\ntarget forward ms by new rows (2 threads, {len(ctx)}-token context): "
          + ", ".join(f"{r}: {v:.1f}" for r, v in t_verify.items()))
    print(f"{len(data)} questions, {results['setup']['positions']} positions; speedups are "
          f"PROJECTIONS from measured costs and acceptance (not a measured SD run)\n")
    head = (f"{'L':>3} {'agree@1':>8} {'win2':>6} {'win3':>6} {'ms/fwd':>7} | "
            f"{'best k':>6} {'geo x AR':>8} | {'best k':>6} {'emp x AR':>8}")
    print(head)
    print("-" * len(head))
    for n in layer_list:
        d = per_layer[n]
        rows = project(d["agreement"], t_draft[n], t_verify, d["runs"], args.kmax)
        bg = max(rows, key=lambda r: r["speedup_geo"])
        be = max(rows, key=lambda r: r["speedup_emp"])
        w2 = statistics.mean([r == 2 for r in d["runs"][2]])
        w3 = statistics.mean([r == 3 for r in d["runs"][3]])
        results["layers"][n] = {"agreement": round(d["agreement"], 4), "window2_all": round(w2, 4),
                                "window3_all": round(w3, 4), "draft_ms": round(t_draft[n], 2),
                                "best_geo": bg, "best_emp": be, "per_k": rows,
                                "per_category": d["per_category"], "matches": d["matches"]}
        print(f"{n:>3} {d['agreement']:>8.3f} {w2:>6.3f} {w3:>6.3f} {t_draft[n]:>7.2f} | "
              f"{bg['k']:>6} {bg['speedup_geo']:>8.3f} | {be['k']:>6} {be['speedup_emp']:>8.3f}")
    for name, (ms, a) in REFERENCE.items():
        rows = project(a, ms, t_verify, None, args.kmax)
        bg = max(rows, key=lambda r: r["speedup_geo"])
        results["reference"][name] = {"draft_ms": ms, "acceptance": a, "best_geo": bg, "per_k": rows}
        print(f"{name}: a={a:.2f}, {ms} ms/token -> best k {bg['k']}, {bg['speedup_geo']:.3f}x AR (geo)")
    print("\nagreement per task group:")
    for n in layer_list:
        print(f"  L={n:>2}: " + ", ".join(f"{c} {v:.2f}" for c, v in per_layer[n]["per_category"].items()))

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nwrote {args.out}; {time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
