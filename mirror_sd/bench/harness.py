"""Benchmark AR, plain SD, Mirror-SD and transformers' assisted generation side by side.

    python -m mirror_sd.bench [--questions FILE.jsonl] [--methods ar,sd,mirror,hf-assisted]
        [--per-category K] [--max-new-tokens N] [--temperature X] [--target T --draft D]
        [--gamma G --kappa K --exit-layer L --branch-budget B --precision P]
        [--exit-lens {auto,off,FILE}] --out DIR

    python -m mirror_sd.bench --what-if "target_scale=10,draft_device=separate;gamma=6"
        [--calibration DIR/results.json]        (latency-model projections, no models loaded)

Questions are in Spec-Bench's format (see questions.py; the built-in set is
assets/questions.jsonl). Fairness: one warm-up run per method; for each question the methods
run back to back in an order rotated by one per question; one pair (same weights, dtype and
torch thread budget) for all; greedy runs compare every method's tokens with AR's and report
any mismatch (count and first position).

Output in DIR: results.json (per question and method; summary; latency-model calibration and
predicted vs measured step time), summary.md, speedup.html, time_breakdown.html,
latency_model.html (plotly; PNG next to them only where kaleido can write them offline).

Python API: `run_benchmark(pair, questions, methods, settings, out_dir=...)` on an already
built `ModelPair` (tests use tiny in-memory models); `runners=` adds or replaces methods.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from mirror_sd.bench import latency_model as lm
from mirror_sd.errors import MirrorSDError, run_cli
from mirror_sd.paths import REPO_ROOT
from mirror_sd.bench.questions import BUILTIN_QUESTIONS, Question, categories, load_questions, per_category

ENGINE_METHODS = ("ar", "sd", "mirror")
HF_ASSISTED = "hf-assisted"
DEFAULT_METHODS = ENGINE_METHODS + (HF_ASSISTED,)
LABELS = {"ar": "AR", "sd": "SD", "mirror": "Mirror-SD", HF_ASSISTED: "HF assisted"}
# the engine's methods with one setting changed, to compare in the same interleaved run:
# the draft's stream heads on (streams.py), or Mirror-SD without the exit lens (the raw early
# exit at the paper's N/2 unless --exit-layer is given; exit_lens.py), or the draft's LM head cut
# to the shipped frequent-token vocabulary (draft_vocab.py)
VARIANTS = {"sd-streams": ("sd", {"streams": "auto"}), "mirror-streams": ("mirror", {"streams": "auto"}),
            "mirror-nolens": ("mirror", {"exit_lens": "off"}),
            "sd-vocab": ("sd", {"draft_vocab": "auto"}),
            "mirror-vocab": ("mirror", {"draft_vocab": "auto"})}
LABELS.update({"sd-streams": "SD+streams", "mirror-streams": "Mirror-SD+streams",
               "mirror-nolens": "Mirror-SD, no lens", "sd-vocab": "SD, cut draft vocab",
               "mirror-vocab": "Mirror-SD, cut draft vocab"})
WARMUP_TOKENS = 16
PARTIAL = "questions.partial.jsonl"  # per-question entries while a run is in progress

# Time breakdown: each instant of a run's wall time goes to the highest-priority busy lane.
COMPONENTS = ["target prefill", "target forward", "target prefix", "early-exit head",
              "target suffix", "verify", "draft (exposed)", "overhead"]
HIDDEN = "draft (hidden)"  # draft work that ran while the target lane was busy: not on the wall
_TARGET_LABELS = {"prefill": "target prefill", "prefix": "target prefix",
                  "exit_head": "early-exit head", "suffix": "target suffix"}
_PRIORITY = {c: i for i, c in enumerate(["target prefill", "target forward", "target prefix",
                                         "early-exit head", "target suffix", "verify",
                                         "draft (exposed)"])}
WHAT_IF_SCENARIOS = [
    {"draft_device": "separate"},
    {"target_scale": 10},
    {"target_scale": 10, "draft_device": "separate"},
    {"target_scale": 10, "draft_device": "separate", "hit_rate": 0.9},
    {"draft_device": "serial"},
]


@dataclass
class MethodRun:
    """One generation by one method: what the harness needs from any runner."""
    token_ids: list[int]
    text: str
    stats: dict
    spans: list  # events.Span (or objects with lane, label, start_ns, end_ns, step, detail)
    wall_s: float
    start_ns: int = 0
    end_ns: int = 0
    error: str | None = None
    notices: list[str] = field(default_factory=list)


Runner = Callable[..., MethodRun]  # runner(pair, prompt_ids, settings) -> MethodRun


# ---------------------------------------------------------------------------------------------
# runners


# settings a method name may change after a colon: "mirror:exit_layer=21:branch_budget=3"
TUNABLE = {"gamma": int, "kappa": int, "exit_layer": int, "branch_budget": int, "exit_lens": str,
           "exit_head": str, "streams": str, "draft_vocab": str}


def variant(method: str) -> tuple[str, dict]:
    """(engine method, setting changes) of a method name: ar / sd / mirror, a named variant
    (VARIANTS), or either followed by ":key=value" pairs from TUNABLE. Raises MirrorSDError."""
    name, *pairs = method.split(":")
    if name in VARIANTS:
        base, changes = VARIANTS[name][0], dict(VARIANTS[name][1])
    elif name in ENGINE_METHODS:
        base, changes = name, {}
    else:
        raise MirrorSDError(f"Unknown method {method!r}: choose from "
                            f"{', '.join(DEFAULT_METHODS + tuple(VARIANTS))}, optionally with "
                            f":key=value settings ({', '.join(TUNABLE)}).")
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in TUNABLE:
            raise MirrorSDError(f"Bad setting {pair!r} in method {method!r}: use key=value with a key "
                                f"from {', '.join(TUNABLE)}.")
        try:
            changes[key] = TUNABLE[key](value)
        except ValueError:
            raise MirrorSDError(f"Bad value in {pair!r} (method {method!r}): {key} takes "
                                f"{TUNABLE[key].__name__}.") from None
    return base, changes


def engine_runner(method: str) -> Runner:
    """A runner for one of the engine's decoders (methods.METHODS)."""

    def run(pair, prompt_ids, settings) -> MethodRun:
        from mirror_sd.engine.events import Error, Finish, Notice, Span
        from mirror_sd.engine.registry import METHODS

        spans, finish, error, notices = [], None, None, []
        base, changes = variant(method)
        if changes:
            from dataclasses import replace
            settings = replace(settings, **changes)
        decoder = METHODS[base](pair, settings)
        t0 = time.perf_counter_ns()
        for ev in decoder.generate(prompt_ids):
            if isinstance(ev, Span):
                spans.append(ev)
            elif isinstance(ev, Error):
                error = ev.message
            elif isinstance(ev, Notice):
                notices.append(ev.message)
            elif isinstance(ev, Finish):
                finish = ev
        t1 = time.perf_counter_ns()
        stats = dict(finish.stats) if finish else {"method": method, "new_tokens": 0}
        stats["method"] = method
        return MethodRun(list(finish.token_ids) if finish else [], finish.text if finish else "",
                         stats, spans, (t1 - t0) / 1e9, t0, t1, error, notices)

    run.method = method
    return run


def _timing_hooks(model, lane: str, spans: list, first_label: str, label: str):
    """Forward hooks that record a Span per call of `model` (HF generate's own forwards)."""
    from mirror_sd.engine.events import Span
    from mirror_sd.models.pair import model_device
    from mirror_sd.placement import lane_sync

    device = model_device(model)
    state = {}

    def pre(module, args, kwargs):
        lane_sync(device)
        state["t"] = time.perf_counter_ns()

    def post(module, args, kwargs, output):
        lane_sync(device)
        end = time.perf_counter_ns()
        ids = kwargs.get("input_ids", args[0] if args else None)
        n = int(ids.shape[-1]) if hasattr(ids, "shape") else 0
        first = not any(s.lane == lane for s in spans)
        spans.append(Span(lane, first_label if first else label, state.pop("t", end), end,
                          sum(s.lane == lane for s in spans), f"{n} tokens"))

    return [model.register_forward_pre_hook(pre, with_kwargs=True),
            model.register_forward_hook(post, with_kwargs=True)]


def hf_assisted_generation_config(pair, settings, assistant_tokens: int | None = None):
    from transformers import GenerationConfig

    eos = sorted(pair.eos_token_ids)
    kw = dict(max_new_tokens=settings.max_new_tokens, do_sample=settings.temperature > 0,
              eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0,
              repetition_penalty=1.0)
    if settings.temperature > 0:
        kw.update(temperature=settings.temperature, top_p=settings.top_p,
                  top_k=settings.top_k if settings.top_k > 0 else None)
    else:
        kw.update(temperature=None, top_p=None, top_k=None)
    if assistant_tokens:
        kw.update(num_assistant_tokens=assistant_tokens, num_assistant_tokens_schedule="constant")
    return GenerationConfig(**kw)


def hf_assisted_runner(assistant_tokens: int | None = None) -> Runner:
    """transformers' own `target.generate(assistant_model=draft)`, timed with perf_counter_ns.

    Its target and draft forwards are timed with forward hooks, so target forwards, mean
    accepted and the time breakdown are reported; drafted/accepted counts and hit rate are
    not observable there (null)."""

    def run(pair, prompt_ids, settings) -> MethodRun:
        import torch

        from mirror_sd.models.pair import model_device
        from mirror_sd.placement import method_threads
        from mirror_sd.engine.stats import draft_hidden_fraction

        gc = hf_assisted_generation_config(pair, settings, assistant_tokens)
        device = model_device(pair.target)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        spans: list = []
        hooks = (_timing_hooks(pair.target, "target", spans, "prefill", "verify_forward")
                 + _timing_hooks(pair.draft, "draft", spans, "draft", "draft"))
        error = None
        torch.manual_seed(settings.seed)
        t0 = time.perf_counter_ns()
        try:
            with torch.inference_mode(), method_threads(pair, 1):  # one model at a time
                out = pair.target.generate(ids, attention_mask=torch.ones_like(ids),
                                           generation_config=gc, assistant_model=pair.draft)
            new = out[0, len(prompt_ids):].tolist()
        except Exception as e:  # reported in the results, the benchmark goes on
            error, new = f"{type(e).__name__}: {e}", []
        finally:
            t1 = time.perf_counter_ns()
            for h in hooks:
                h.remove()
        wall = (t1 - t0) / 1e9
        forwards = sum(s.lane == "target" for s in spans)
        stats = {
            "method": HF_ASSISTED, "new_tokens": len(new), "wall_s": wall,
            "tokens_per_s": len(new) / wall if wall > 0 else 0.0,
            "target_forwards": forwards,
            "mean_accepted": len(new) / forwards if forwards else 0.0,
            "steps": forwards, "drafted": None, "accepted_drafts": None,
            "acceptance_rate": None, "hit_rate": None, "hits": None, "fallbacks": None,
            "draft_hidden_fraction": draft_hidden_fraction(spans), "cancelled": False,
            "prompt_tokens": len(prompt_ids),
            "draft_forwards": sum(s.lane == "draft" for s in spans),
        }
        return MethodRun(new, pair.decode(new), stats, spans, wall, t0, t1, error)

    run.method = HF_ASSISTED
    return run


def baseline_runner(base_pair, name: str) -> Runner:
    """AR on another copy of the target (e.g. fp32 next to an int8 run): the precision's own
    speedup, measured in the same interleaved run."""
    inner = engine_runner("ar")

    def run(pair, prompt_ids, settings) -> MethodRun:
        return inner(base_pair, prompt_ids, settings)

    run.method = name
    return run


def baseline_name(precision: str) -> str:
    return f"ar-{precision}"


def _is_ar(method: str) -> bool:
    return method == "ar" or method.startswith("ar-")


def default_runners(hf_assistant_tokens: int | None = None) -> dict[str, Runner]:
    runners = {m: engine_runner(m) for m in ENGINE_METHODS + tuple(VARIANTS)}
    runners[HF_ASSISTED] = hf_assisted_runner(hf_assistant_tokens)
    return runners


# ---------------------------------------------------------------------------------------------
# fairness helpers (pure)


def rotated_order(methods, index: int) -> list[str]:
    """The methods for question `index`: the list rotated left by index (mod its length)."""
    methods = list(methods)
    k = index % len(methods) if methods else 0
    return methods[k:] + methods[:k]


def first_mismatch(reference_turns: list[list[int]], turns: list[list[int]]) -> dict | None:
    """None when the token lists are equal turn by turn; else where they first differ:
    {"position" (in all turns concatenated), "turn", "position_in_turn"}."""
    offset = 0
    for t in range(max(len(reference_turns), len(turns))):
        a = reference_turns[t] if t < len(reference_turns) else []
        b = turns[t] if t < len(turns) else []
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return {"position": offset + i, "turn": t, "position_in_turn": i}
        offset += len(a)
    return None


def time_breakdown(spans, start_ns: int, end_ns: int) -> dict[str, float]:
    """Seconds of [start_ns, end_ns] per component: each instant goes to the busy lane of
    highest priority (target, then verify, then draft), idle time to overhead. Also
    HIDDEN: draft time that overlapped target or verify work (off the critical path)."""
    out = {c: 0.0 for c in COMPONENTS}
    out[HIDDEN] = 0.0
    points = []
    for s in spans:
        if s.lane == "target":
            comp = _TARGET_LABELS.get(s.label, "target forward")
        elif s.lane == "verify":
            comp = "verify"
        elif s.lane == "draft":
            comp = "draft (exposed)"
        else:
            continue
        a, b = max(s.start_ns, start_ns), min(s.end_ns, end_ns)
        if b > a:
            points += [(a, 1, comp), (b, -1, comp)]
    points.sort(key=lambda p: (p[0], p[1]))
    active = {c: 0 for c in _PRIORITY}
    prev = start_ns
    for t, delta, comp in points + [(end_ns, 0, None)]:
        if t > prev:
            busy = [c for c, n in active.items() if n > 0]
            top = min(busy, key=_PRIORITY.get) if busy else "overhead"
            out[top] += (t - prev) / 1e9
            if active["draft (exposed)"] > 0 and top != "draft (exposed)":
                out[HIDDEN] += (t - prev) / 1e9
            prev = t
        if comp is not None:
            active[comp] += delta
    return out


def _answer_text(pair, ids: list[int]) -> str:
    """The answer fed back as the assistant turn: special tokens (eos) dropped."""
    eos = pair.eos_token_ids
    while ids and ids[-1] in eos:
        ids = ids[:-1]
    if pair.tokenizer is None:
        return ""
    return pair.tokenizer.decode(ids, skip_special_tokens=True).strip()


def _sum(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def answer_question(pair, question: Question, runner: Runner, settings) -> tuple[list[MethodRun], list[int]]:
    """Answer every turn with one method, each answer fed back with the chat template."""
    messages, runs, prompt_lens = [], [], []
    for turn in question.turns:
        messages.append({"role": "user", "content": turn})
        ids = pair.encode_prompt(list(messages))
        prompt_lens.append(len(ids))
        try:
            r = runner(pair, ids, settings)
        except MirrorSDError as e:
            r = MethodRun([], "", {"new_tokens": 0}, [], 0.0, error=str(e))
        runs.append(r)
        if r.error:
            break
        messages.append({"role": "assistant", "content": _answer_text(pair, r.token_ids)})
    return runs, prompt_lens


def method_record(method: str, runs: list[MethodRun], prompt_lens: list[int]) -> dict:
    """The per question and method entry of results.json (turns pooled)."""
    from mirror_sd.engine.stats import draft_hidden_fraction

    st = [r.stats for r in runs]
    new = sum(s.get("new_tokens", 0) or 0 for s in st)
    wall = sum(r.wall_s for r in runs)
    fw = _sum(s.get("target_forwards") for s in st)
    hits, fbs = _sum(s.get("hits") for s in st), _sum(s.get("fallbacks") for s in st)
    drafted, acc = _sum(s.get("drafted") for s in st), _sum(s.get("accepted_drafts") for s in st)
    bd: dict[str, float] = {}
    for r in runs:
        for k, v in time_breakdown(r.spans, r.start_ns, r.end_ns).items():
            bd[k] = bd.get(k, 0.0) + v
    all_spans = [s for r in runs for s in r.spans]
    errors = [r.error for r in runs if r.error]
    return {
        "method": method,
        "new_tokens": new,
        "wall_s": wall,
        "tokens_per_s": new / wall if wall > 0 else 0.0,
        "target_forwards": fw,
        "mean_accepted": _ratio(new, fw),
        "steps": _sum(s.get("steps") for s in st),
        "drafted": drafted,
        "accepted_drafts": acc,
        "acceptance_rate": _ratio(acc, drafted),
        "hits": hits,
        "fallbacks": fbs,
        "hit_rate": _ratio(hits, (hits or 0) + (fbs or 0)) if hits is not None else None,
        "draft_hidden_fraction": draft_hidden_fraction(all_spans) if all_spans else None,
        "identical_to_ar": None,
        "first_mismatch": None,
        "prompt_tokens": prompt_lens,
        "error": "; ".join(errors) if errors else None,
        "notices": [n for r in runs for n in r.notices],
        "breakdown_s": bd,
        "turns": [{"prompt_tokens": p, "new_tokens": r.stats.get("new_tokens", 0),
                   "wall_s": r.wall_s, "tokens_per_s": r.stats.get("new_tokens", 0) / r.wall_s
                   if r.wall_s > 0 else 0.0, "text": r.text, "token_ids": r.token_ids,
                   "stats": r.stats, "error": r.error, "spans": compact_spans(r)}
                  for p, r in zip(prompt_lens, runs)],
    }


def compact_spans(run: MethodRun) -> list[list]:
    """[lane, label, start ms, end ms, step, detail] relative to the run's start (results.json)."""
    return [[s.lane, s.label, round((s.start_ns - run.start_ns) / 1e6, 3),
             round((s.end_ns - run.start_ns) / 1e6, 3), s.step, s.detail] for s in run.spans]


def records_from_results(results: dict) -> list[dict]:
    """The per-run records (method, stats, spans as Span, wall) saved in a results dict."""
    from mirror_sd.engine.events import Span

    out = []
    for q in results["questions"]:
        for m, rec in q["methods"].items():
            for t in rec["turns"]:
                spans = [Span(lane, label, int(a * 1e6), int(b * 1e6), step, detail)
                         for lane, label, a, b, step, detail in t.get("spans", [])]
                out.append({"method": m, "stats": t["stats"], "spans": spans, "wall_s": t["wall_s"],
                            "question_id": q["question_id"], "error": t["error"]})
    return out


# ---------------------------------------------------------------------------------------------
# the harness


def _settings_dict(settings) -> dict:
    from dataclasses import asdict
    return asdict(settings)


def run_benchmark(pair, questions: list[Question], methods=DEFAULT_METHODS, settings=None, *,
                  out_dir: str | Path | None = None, runners: dict[str, Runner] | None = None,
                  warmup: bool = True, progress: bool = True, meta: dict | None = None,
                  hf_assistant_tokens: int | None = None, resume: bool = False) -> dict:
    """Run `methods` on `questions` with an already built ModelPair; return the results dict
    (and write results.json, summary.md and plots to `out_dir` when given).

    AR is always run (first in the list) since every speedup is over AR on the same question.
    `runners` maps extra or replacement method names to runner(pair, prompt_ids, settings).
    `resume`: keep the questions already finished in out_dir's questions.partial.jsonl (a run
    that was killed) and run the rest; each question's methods still run back to back."""
    import torch
    from tqdm import tqdm

    from mirror_sd.engine.settings import Settings
    from mirror_sd.engine.mirror.exit_layer import choose_exit_layer_for, ran_at
    from mirror_sd.placement import configure_cpu_threads

    settings = settings or Settings()
    methods = list(dict.fromkeys(["ar"] + [m for m in methods if m != "ar"]))
    table = {**default_runners(hf_assistant_tokens), **(runners or {})}
    table.update({m: engine_runner(m) for m in methods if ":" in m and m not in table})
    unknown = [m for m in methods if m not in table]
    if unknown:
        raise MirrorSDError(f"Unknown method(s) {', '.join(unknown)}: choose from "
                            f"{', '.join(table)}.")
    if not questions:
        raise MirrorSDError("No questions to run.")
    if pair.tokenizer is None:
        raise MirrorSDError("The benchmark needs a pair with a tokenizer (chat template).")
    placement = (pair.info or {}).get("placement")
    if placement is not None:
        configure_cpu_threads(placement)  # the same thread budget for every method
    greedy = settings.temperature == 0
    started = datetime.now(timezone.utc)

    warm_s = None
    if warmup:
        from dataclasses import replace
        t0 = time.perf_counter()
        wsettings = replace(settings, max_new_tokens=min(WARMUP_TOKENS, settings.max_new_tokens))
        ids = pair.encode_prompt(questions[0].turns[0])
        for m in methods:
            table[m](pair, ids, wsettings)
        warm_s = time.perf_counter() - t0

    entries, records = [], []
    partial = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        partial = Path(out_dir) / PARTIAL
        if resume and partial.exists():
            wanted = {q.question_id for q in questions}
            for line in partial.read_text().splitlines():
                e = json.loads(line) if line.strip() else None
                if e and e["question_id"] in wanted and list(e["methods"]) == methods:
                    entries.append(e)
            records += records_from_results({"questions": entries})
            partial.write_text("".join(json.dumps(e, default=str) + "\n" for e in entries))
        else:
            partial.write_text("")
    done = {e["question_id"] for e in entries}
    todo = [(qi, q) for qi, q in enumerate(questions) if q.question_id not in done]
    total = sum(len(q.turns) for _, q in todo) * len(methods)
    bar = tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=not progress,
               dynamic_ncols=True)
    try:
        for qi, q in todo:
            order = rotated_order(methods, qi)
            runs_by: dict[str, tuple] = {}
            for m in order:
                bar.set_postfix_str(f"q {q.question_id} ({q.category}) {m}")
                runs, plens = answer_question(pair, q, table[m], settings)
                runs_by[m] = (runs, plens)
                bar.update(len(q.turns))
            entry = {"question_id": q.question_id, "category": q.category,
                     "turns": len(q.turns), "order": order, "methods": {}}
            ar_turns = [r.token_ids for r in runs_by["ar"][0]]
            ar_ok = not any(r.error for r in runs_by["ar"][0])
            for m in methods:
                runs, plens = runs_by[m]
                rec = method_record(m, runs, plens)
                if greedy and ar_ok and not rec["error"]:
                    fm = first_mismatch(ar_turns, [r.token_ids for r in runs])
                    rec["identical_to_ar"] = fm is None
                    rec["first_mismatch"] = fm
                entry["methods"][m] = rec
                for r in runs:
                    records.append({"method": m, "stats": r.stats, "spans": r.spans,
                                    "wall_s": r.wall_s, "question_id": q.question_id,
                                    "error": r.error})
            entries.append(entry)
            if partial is not None:  # a crash later on keeps what was measured
                with partial.open("a") as f:
                    f.write(json.dumps(entry, default=str) + "\n")
    finally:
        bar.close()

    exit_layer = (ran_at(r["stats"] for r in records if r["method"] == "mirror")
                  or choose_exit_layer_for(pair, settings).layer)
    cal = lm.calibrate([r for r in records if r["method"] in ENGINE_METHODS and not r["error"]],
                       target_layers=pair.target_layers, gamma=settings.gamma,
                       exit_layer=exit_layer, branch_budget=settings.branch_budget,
                       kappa=settings.kappa,
                       source=f"this benchmark run ({started:%Y-%m-%d %H:%M} UTC)")
    info = pair.info or {}
    results = {
        "meta": {
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "target": pair.target_name, "draft": pair.draft_name,
            "target_layers": pair.target_layers, "exit_layer": exit_layer,
            "precision": pair.precision,
            "draft_precision": info.get("draft_precision", pair.precision), "dtype": str(next(pair.target.parameters()).dtype),
            "draft_dtype": str(next(pair.draft.parameters()).dtype),
            "source": _source_version(),
            "devices": {"target": str(info.get("target", {}).get("device", "cpu")),
                        "draft": str(info.get("draft", {}).get("device", "cpu"))},
            "torch_threads": torch.get_num_threads(),
            "methods": methods, "greedy": greedy,
            "settings": _settings_dict(settings),
            "questions": len(questions),
            "categories": categories(questions),
            "warmup": {"runs_per_method": 1 if warmup else 0,
                       "max_new_tokens": min(WARMUP_TOKENS, settings.max_new_tokens),
                       "seconds": warm_s},
            "order": "methods back to back per question, rotated by one per question",
            "resumed_questions": sorted(done, key=str),
            "hf_assisted": _hf_config(pair, settings, hf_assistant_tokens) if HF_ASSISTED in methods else None,
            "versions": _versions(),
            "machine": {"platform": platform.platform(), "processor": platform.processor(),
                        "cpu_cores": _cores()},
            **(meta or {}),
        },
        "questions": entries,
    }
    order = {q.question_id: i for i, q in enumerate(questions)}
    results["questions"].sort(key=lambda e: order[e["question_id"]])
    results["summary"] = summarize(results)
    results["breakdown"] = breakdown_summary(results)
    results["latency_model"] = latency_report(cal, records, methods)
    if out_dir is not None:
        write_outputs(results, out_dir)
    return results


def rerender(out_dir: str | Path) -> dict:
    """Recompute summaries, the latency model and the plots from a saved results.json (for a
    changed model or report, without running the models again)."""
    from mirror_sd.engine.mirror.exit_layer import ran_at

    path = Path(out_dir) / "results.json"
    results = json.loads(path.read_text())
    meta = results["meta"]
    records = records_from_results(results)
    for q in results["questions"]:
        for m, rec in q["methods"].items():
            bd: dict[str, float] = {}
            for t, r in zip(rec["turns"], [x for x in records if x["question_id"] == q["question_id"]
                                           and x["method"] == m]):
                for k, v in time_breakdown(r["spans"], 0, int(t["wall_s"] * 1e9)).items():
                    bd[k] = bd.get(k, 0.0) + v
            rec["breakdown_s"] = bd
    s = meta["settings"]
    exit_layer = ran_at(r["stats"] for r in records if r["method"] == "mirror") or meta["exit_layer"]
    cal = lm.calibrate([r for r in records if r["method"] in ENGINE_METHODS and not r["error"]],
                       target_layers=meta["target_layers"], gamma=s["gamma"],
                       exit_layer=exit_layer, branch_budget=s["branch_budget"],
                       kappa=s["kappa"], source=results["latency_model"]["calibration"].get("source", ""))
    results["summary"] = summarize(results)
    results["breakdown"] = breakdown_summary(results)
    results["latency_model"] = latency_report(cal, records, meta["methods"])
    write_outputs(results, out_dir)
    return results


def _hf_config(pair, settings, assistant_tokens):
    try:
        gc = hf_assisted_generation_config(pair, settings, assistant_tokens)
        d = {k: getattr(gc, k) for k in ("do_sample", "max_new_tokens", "temperature", "top_p",
                                          "top_k", "eos_token_id")}
    except Exception:  # transformers missing or changed: the config is informational
        d = {}
    dg = getattr(pair.draft, "generation_config", None)
    n = assistant_tokens or getattr(dg, "num_assistant_tokens", None)
    d["num_assistant_tokens"] = n if n else "transformers default (20)"
    d["num_assistant_tokens_schedule"] = ("constant" if assistant_tokens else
                                          getattr(dg, "num_assistant_tokens_schedule", None)
                                          or "transformers default (constant)")
    d["assistant_confidence_threshold"] = (getattr(dg, "assistant_confidence_threshold", None)
                                           or "transformers default (0.4)")
    return d


def _source_version() -> str | None:
    """The engine's git commit (plus '+dirty' when mirror_sd/ has local changes), or the
    SOURCE_COMMIT file of a copied source tree; None when neither is there."""
    import subprocess

    root = REPO_ROOT
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                    "--untracked-files=no", "--", "mirror_sd"],
                                   capture_output=True, text=True, timeout=10)
            return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    f = root / "SOURCE_COMMIT"
    return f.read_text().strip() if f.is_file() else None


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except Exception:
            out[name] = None
    return out


def _cores() -> int:
    from mirror_sd.placement import cpu_cores
    return cpu_cores()


# ---------------------------------------------------------------------------------------------
# summaries (pure functions of the results dict)


def _cell(entries, method: str) -> dict:
    recs = [(e, e["methods"].get(method)) for e in entries]
    recs = [(e, r) for e, r in recs if r is not None]
    ok = [(e, r) for e, r in recs if not r["error"]]
    speedups = []
    for e, r in ok:
        ar = e["methods"].get("ar")
        if ar and not ar["error"] and ar["tokens_per_s"] > 0 and r["tokens_per_s"] > 0:
            speedups.append(r["tokens_per_s"] / ar["tokens_per_s"])
    new = sum(r["new_tokens"] for _, r in ok)
    wall = sum(r["wall_s"] for _, r in ok)
    fw = _sum(r["target_forwards"] for _, r in ok)
    hits = _sum(r["hits"] for _, r in ok)
    fbs = _sum(r["fallbacks"] for _, r in ok)
    hidden = [r["draft_hidden_fraction"] for _, r in ok if r["draft_hidden_fraction"] is not None]
    checked = [(e, r) for e, r in ok if r["identical_to_ar"] is not None]
    bad = [(e, r) for e, r in checked if not r["identical_to_ar"]]
    return {
        "questions": len(ok),
        "errors": len(recs) - len(ok),
        "new_tokens": new,
        "wall_s": wall,
        "tokens_per_s": new / wall if wall > 0 else None,
        "speedup_median": statistics.median(speedups) if speedups else None,
        "speedup_mean": statistics.fmean(speedups) if speedups else None,
        "mean_accepted": _ratio(new, fw),
        "hit_rate": _ratio(hits, (hits or 0) + (fbs or 0)) if hits is not None else None,
        "draft_hidden_fraction": statistics.fmean(hidden) if hidden else None,
        "checked": len(checked),
        "mismatches": len(bad),
        "first_mismatch": ({"question_id": bad[0][0]["question_id"], **bad[0][1]["first_mismatch"]}
                           if bad else None),
    }


def summarize(results: dict) -> dict:
    """Per category and overall, per method: speedup (median and mean of per-question
    tokens/s over AR's), pooled tokens/s, mean accepted, hit rate, mismatches."""
    entries = results["questions"]
    methods = results["meta"]["methods"]
    cats = list(dict.fromkeys(e["category"] for e in entries))
    return {
        "by_category": {c: {m: _cell([e for e in entries if e["category"] == c], m)
                            for m in methods} for c in cats},
        "overall": {m: _cell(entries, m) for m in methods},
    }


def breakdown_summary(results: dict) -> dict:
    """Per method: seconds and ms per generated token of each time component (all questions)."""
    out = {}
    for m in results["meta"]["methods"]:
        tot = {c: 0.0 for c in COMPONENTS + [HIDDEN]}
        tokens = 0
        for e in results["questions"]:
            r = e["methods"].get(m)
            if r is None or r["error"]:
                continue
            tokens += r["new_tokens"]
            for k, v in r["breakdown_s"].items():
                tot[k] = tot.get(k, 0.0) + v
        out[m] = {"seconds": tot, "new_tokens": tokens,
                  "ms_per_token": {k: 1000 * v / tokens if tokens else None for k, v in tot.items()}}
    return out


_STARTUP = {("target", "prefill"), ("draft", "prefill+draft")}


def measured_steps(records, method: str) -> dict | None:
    """Measured decode-phase step time: (wall - prefill) / steps, pooled over runs.
    AR: a step is one decode forward after the prefill; SD/Mirror: Finish.stats steps (the
    draft's prefill+first window counts as startup); hf-assisted: target forwards after the
    first (which prefills the prompt and verifies the first candidates)."""
    time_s = steps = tokens = 0.0
    for r in records:
        if r["method"] != method or r["error"]:
            continue
        st, spans = r["stats"], r["spans"]
        startup = sum((s.end_ns - s.start_ns) / 1e9 for s in spans if (s.lane, s.label) in _STARTUP)
        n = st.get("new_tokens", 0) or 0
        if _is_ar(method) or method == HF_ASSISTED:
            k = max(0, (st.get("target_forwards") or 0) - 1)
            t = n - 1 if _is_ar(method) else n * k / max(1, k + 1)
        else:
            k, t = st.get("steps") or 0, n
        if k <= 0:
            continue
        time_s += r["wall_s"] - startup
        steps += k
        tokens += t
    if not steps:
        return None
    return {"step_s": time_s / steps, "tokens_per_step": tokens / steps, "steps": int(steps)}


def latency_report(cal: lm.Calibration, records, methods) -> dict:
    pred = lm.predict(cal)
    measured = {m: measured_steps(records, m) for m in methods}
    ar = measured.get("ar")
    rows = {}
    for m in methods:
        me, pr = measured.get(m), pred.get(m)
        row = {"measured_step_s": me and me["step_s"],
               "measured_tokens_per_step": me and me["tokens_per_step"],
               "measured_steps": me and me["steps"],
               "predicted_step_s": pr and pr["step_s"],
               "predicted_tokens_per_step": pr and pr["tokens_per_step"],
               "predicted_speedup": pr and pr["speedup"]}
        row["error"] = (row["predicted_step_s"] / row["measured_step_s"] - 1
                        if row["predicted_step_s"] and row["measured_step_s"] else None)
        row["measured_decode_speedup"] = (me["tokens_per_step"] / me["step_s"] * ar["step_s"]
                                          if me and ar and me["step_s"] > 0 else None)
        rows[m] = row
    what = []
    for sc in WHAT_IF_SCENARIOS:
        try:
            w = lm.what_if(cal, **sc)
            what.append({"changes": sc, **{m: w["projected"][m]["speedup"] for m in ENGINE_METHODS}})
        except (ValueError, TypeError):
            continue
    return {"calibration": cal.to_dict(), "terms_s": lm.step_terms(cal),
            "predicted_vs_measured": rows, "what_if": what, "note": lm.PROJECTION_NOTE}


# ---------------------------------------------------------------------------------------------
# output files


def _f(x, spec=".2f", none="n/a"):
    return none if x is None else format(x, spec)


def _x(x):
    return "n/a" if x is None else f"{x:.2f}x"


def _pct(x):
    return "n/a" if x is None else f"{x:.0%}"


def _mismatch(c: dict) -> str:
    if not c["checked"]:
        return "n/a"
    s = f"{c['mismatches']}/{c['checked']}"
    fm = c["first_mismatch"]
    if fm:
        s += f" (first: q {fm['question_id']} token {fm['position']})"
    return s


def summary_markdown(results: dict, files: list[str] | None = None, notes: list[str] | None = None) -> str:
    meta, summ = results["meta"], results["summary"]
    methods = meta["methods"]
    others = [m for m in methods if m != "ar"]
    s = meta["settings"]
    mode = "greedy (temperature 0)" if meta["greedy"] else f"sampling (temperature {s['temperature']})"
    lines = [
        "# Benchmark: " + ", ".join(LABELS.get(m, m) for m in methods), "",
        f"- Pair: target `{meta['target']}` ({meta['target_layers']} layers), draft "
        f"`{meta['draft']}`; precision target {meta['precision']}, draft "
        f"{meta.get('draft_precision', meta['precision'])} ({meta['dtype']}); devices target "
        f"{meta['devices']['target']}, draft {meta['devices']['draft']}; torch threads per lane "
        f"{meta['torch_threads']}; {meta['machine']['cpu_cores']} cores",
        f"- Decoding: {mode}, max new tokens {s['max_new_tokens']}, gamma {s['gamma']}, kappa "
        f"{s['kappa']}, exit layer {meta['exit_layer']}, branch budget {s['branch_budget']}",
        f"- Questions: {meta['questions']} ({', '.join(meta['categories'])}) from "
        f"`{meta.get('questions_file', 'the given list')}`; one warm-up run per method; "
        f"{meta['order']}",
    ]
    if meta.get("command"):
        lines.append(f"- Command: `{meta['command']}`")
    lines.append(f"- Run: {meta['started']} to {meta['finished']} (UTC); engine source "
                 f"{meta.get('source') or 'unknown'}; "
                 f"torch {meta['versions'].get('torch')}, transformers {meta['versions'].get('transformers')}")
    lines += ["", "## Speedup over AR", "",
              "Per-question speedup = method tokens/s over AR tokens/s on the same question "
              "(turns pooled); cells give median / mean over the questions.", "",
              "| category | questions | AR tok/s | " + " | ".join(LABELS.get(m, m) for m in others) + " |",
              "|---|---|---|" + "---|" * len(others)]
    rows = list(summ["by_category"].items()) + [("**overall**", summ["overall"])]
    for cat, cells in rows:
        lines.append(f"| {cat} | {cells['ar']['questions']} | {_f(cells['ar']['tokens_per_s'])} | "
                     + " | ".join(f"{_x(cells[m]['speedup_median'])} / {_x(cells[m]['speedup_mean'])}"
                                  for m in others) + " |")
    lines += ["", "## Per method, all questions", "",
              "| method | tok/s | speedup median | speedup mean | mean accepted | hit rate | "
              "draft hidden | identical to AR (mismatches) | errors |",
              "|---|---|---|---|---|---|---|---|---|"]
    for m in methods:
        c = summ["overall"][m]
        lines.append(f"| {LABELS.get(m, m)} | {_f(c['tokens_per_s'])} | {_x(c['speedup_median'])} | "
                     f"{_x(c['speedup_mean'])} | {_f(c['mean_accepted'])} | {_pct(c['hit_rate'])} | "
                     f"{_pct(c['draft_hidden_fraction'])} | {_mismatch(c)} | {c['errors']} |")
    lines += ["", "Mean accepted = generated tokens per target forward (the target's own token "
              "counts, so AR is 1.00). Mismatches: questions whose tokens differ from AR's "
              "(greedy runs only), with the first differing position.", "",
              "## Per category and method", "",
              "| category | method | questions | tok/s | speedup median | speedup mean | "
              "mean accepted | hit rate | mismatches |", "|---|---|---|---|---|---|---|---|---|"]
    for cat, cells in summ["by_category"].items():
        for m in methods:
            c = cells[m]
            lines.append(f"| {cat} | {LABELS.get(m, m)} | {c['questions']} | {_f(c['tokens_per_s'])} | "
                         f"{_x(c['speedup_median'])} | {_x(c['speedup_mean'])} | "
                         f"{_f(c['mean_accepted'])} | {_pct(c['hit_rate'])} | {_mismatch(c)} |")
    bd = results["breakdown"]
    lines += ["", "## Where the time goes (ms per generated token, from the spans)", "",
              "Each instant of wall time goes to the busiest lane by priority: target, then "
              "verify, then draft; what no span covers is overhead (Python, events, the "
              "harness). 'Draft hidden' ran while the target lane was busy: it costs no wall time.", "",
              "| method | " + " | ".join(COMPONENTS) + " | total | draft hidden |",
              "|---|" + "---|" * (len(COMPONENTS) + 2)]
    for m in methods:
        ms = bd[m]["ms_per_token"]
        total = sum(v for k, v in ms.items() if k != HIDDEN and v is not None) if bd[m]["new_tokens"] else None
        lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(_f(ms[c], ".1f") for c in COMPONENTS)
                     + f" | {_f(total, '.1f')} | {_f(ms[HIDDEN], '.1f')} |")
    lat = results["latency_model"]
    cal = lat["calibration"]
    lines += ["", "## Latency model: predicted vs measured step time", "",
              "The paper's step-time model (mirror_sd/bench/latency_model.py) with costs calibrated from "
              "this run's spans; measured = (wall - prefill) / steps of the decode phase. The "
              "error is what the model leaves out (Python overhead between spans, scheduling).", "",
              "| method | measured step ms | predicted step ms | error | tokens/step | "
              "measured speedup (decode) | predicted speedup |", "|---|---|---|---|---|---|---|"]
    for m in methods:
        r = lat["predicted_vs_measured"][m]
        lines.append(f"| {LABELS.get(m, m)} | {_f(_ms(r['measured_step_s']), '.1f')} | "
                     f"{_f(_ms(r['predicted_step_s']), '.1f')} | {_f(r['error'], '+.0%')} | "
                     f"{_f(r['measured_tokens_per_step'])} | {_x(r['measured_decode_speedup'])} | "
                     f"{_x(r['predicted_speedup'])} |")
    lines += ["", "Calibration: " + ", ".join(
        f"{k} {v}" for k, v in [
            ("T_target(1)", _f(_ms(cal["t_target_1"]), ".1f") + " ms"),
            (f"T_target({cal['gamma'] + 1})", _f(_ms(cal["t_target_k"]), ".1f") + " ms"),
            ("head share", _pct(cal["head_share"])),
            ("early-exit head", _f(_ms(cal["t_exit_head"]), ".1f") + " ms"),
            ("draft token", _f(_ms(cal["t_draft_token"]), ".1f") + " ms"),
            ("branch forward", _f(_ms(cal["t_branch_1"]), ".1f") + " ms + "
             + _f(_ms(cal["t_branch_row"]), ".1f") + " ms/extra row"),
            ("contention", _f(cal["contention"])),
            ("alpha (SD/Mirror)", f"{_f(cal['alpha_sd'])}/{_f(cal['alpha_mirror'])}"),
            ("hit rate", _pct(cal["hit_rate"]))])]
    if cal.get("hit_rates"):
        lines[-1] += (f"; estimated hit rate at budget 1-8 (share of {cal.get('rank_steps')} steps whose "
                      "verdict root was among the first b scored roots; ignores rollout timing): "
                      + " / ".join(_pct(h) for h in cal["hit_rates"][:8]))
    if cal.get("notes"):
        lines.append("Calibration notes: " + "; ".join(cal["notes"]))
    lines += ["", "## What if (projections from the latency model, not measurements)", "",
              "| scenario | SD speedup | Mirror-SD speedup |", "|---|---|---|",
              f"| as measured (model) | {_x(lat['predicted_vs_measured'].get('sd', {}).get('predicted_speedup'))} | "
              f"{_x(lat['predicted_vs_measured'].get('mirror', {}).get('predicted_speedup'))} |"]
    for w in lat["what_if"]:
        lines.append(f"| {', '.join(f'{k}={v}' for k, v in w['changes'].items())} | "
                     f"{_x(w.get('sd'))} | {_x(w.get('mirror'))} |")
    lines += ["", "More: `python -m mirror_sd.bench --what-if \"target_scale=10,draft_device=separate\" "
              "--calibration results.json`; keys: " + ", ".join(lm.WHAT_IF_KEYS) + "."]
    hf = meta.get("hf_assisted")
    extra = list(meta.get("run_notes") or []) + list(notes or [])
    if hf:
        extra.insert(0, "HF assisted = transformers' own `target.generate(assistant_model=draft)` "
                        f"with num_assistant_tokens {hf.get('num_assistant_tokens')}, schedule "
                        f"{hf.get('num_assistant_tokens_schedule')}, confidence threshold "
                        f"{hf.get('assistant_confidence_threshold')}; its forwards are timed by "
                        "hooks; drafted/accepted counts and hit rate are not observable (n/a).")
    if meta.get("resumed_questions"):
        extra.append("Resumed run: question(s) " + ", ".join(map(str, meta["resumed_questions"]))
                     + " were measured by an earlier process of this run that was interrupted.")
    if "mirror" in methods:
        extra.append("Mirror-SD runs two lanes (target and draft threads, one torch thread each) "
                     "at once; AR, SD and HF assisted run one model at a time on every core the "
                     "two lanes use (placement.method_threads).")
    if files:
        extra.append("Files: " + ", ".join(f"`{f}`" for f in files))
    if extra:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in extra]
    return "\n".join(lines) + "\n"


def _ms(x):
    return None if x is None else 1000 * x


def make_figures(results: dict) -> dict:
    """plotly figures: speedup by category and method, time breakdown per method, and the
    latency model (predicted vs measured; projected speedup against target scale)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    meta, summ = results["meta"], results["summary"]
    methods = meta["methods"]
    others = [m for m in methods if m != "ar"]
    cats = list(summ["by_category"]) + ["overall"]
    cells = {**summ["by_category"], "overall": summ["overall"]}
    fig1 = go.Figure()
    for m in others:
        med = [cells[c][m]["speedup_median"] for c in cats]
        mean = [cells[c][m]["speedup_mean"] for c in cats]
        fig1.add_bar(name=LABELS.get(m, m), x=cats, y=med,
                     text=[_x(v) for v in med], textposition="outside",
                     customdata=[[_x(a), cells[c][m]["questions"]] for a, c in zip(mean, cats)],
                     hovertemplate="%{x}: median %{y:.2f}x, mean %{customdata[0]}, "
                                   "%{customdata[1]} questions<extra>" + LABELS.get(m, m) + "</extra>")
    fig1.add_hline(y=1.0, line_dash="dash", annotation_text="AR")
    mode = "greedy" if meta["greedy"] else f"T={meta['settings']['temperature']}"
    fig1.update_layout(barmode="group", yaxis_title="speedup over AR (median tokens/s ratio)",
                       title=f"Speedup over AR by category ({meta['target']} / {meta['draft']}, "
                             f"{mode}, {meta['settings']['max_new_tokens']} new tokens)")

    bd = results["breakdown"]
    fig2 = go.Figure()
    names = [LABELS.get(m, m) for m in methods]
    for comp in COMPONENTS:
        ys = [bd[m]["ms_per_token"][comp] for m in methods]
        if all(not y for y in ys):
            continue
        fig2.add_bar(name=comp, x=names, y=ys, offsetgroup="wall",
                     hovertemplate="%{x}: " + comp + " %{y:.1f} ms/token<extra></extra>")
    fig2.add_bar(name=HIDDEN + ", behind the target", x=names,
                 y=[bd[m]["ms_per_token"][HIDDEN] for m in methods], offsetgroup="hidden",
                 marker_pattern_shape="/", opacity=0.6,
                 hovertemplate="%{x}: draft hidden %{y:.1f} ms/token<extra></extra>")
    fig2.update_layout(barmode="stack", yaxis_title="ms per generated token",
                       title="Where the time goes (wall time per token by lane, from spans)")

    lat = results["latency_model"]
    cal = lat["calibration"]
    fig3 = make_subplots(rows=1, cols=2, subplot_titles=(
        "step time: measured vs latency model", "projected speedup vs target cost (projection)"))
    rows = lat["predicted_vs_measured"]
    ms = [m for m in methods if rows[m]["measured_step_s"] is not None]
    fig3.add_bar(name="measured", x=[LABELS.get(m, m) for m in ms],
                 y=[_ms(rows[m]["measured_step_s"]) for m in ms], row=1, col=1)
    fig3.add_bar(name="predicted", x=[LABELS.get(m, m) for m in ms],
                 y=[_ms(rows[m]["predicted_step_s"]) for m in ms], row=1, col=1)
    scales = [1, 2, 3, 5, 10, 20, 50, 100]
    try:
        for dev, dash in (("shared", "solid"), ("separate", "dash")):
            curve = lm.speedup_curve(cal, "target_scale", scales, draft_device=dev)
            for m in ("sd", "mirror"):
                if m == "sd" and dev == "separate":
                    continue  # SD's lanes never overlap: the device choice does not move it
                fig3.add_scatter(x=scales, y=[p[m] for p in curve], mode="lines+markers",
                                 line_dash=dash, name=f"{LABELS[m]} (projected, draft {dev})",
                                 row=1, col=2)
    except (ValueError, TypeError):
        pass
    fig3.update_xaxes(type="log", title_text="target cost x (projection)", row=1, col=2)
    fig3.update_yaxes(title_text="ms per step", row=1, col=1)
    fig3.update_yaxes(title_text="speedup over AR (projected)", row=1, col=2)
    fig3.update_layout(title="Latency model (projections are a model, not measurements)",
                       barmode="group")
    return {"speedup": fig1, "time_breakdown": fig2, "latency_model": fig3}


def write_outputs(results: dict, out_dir: str | Path) -> list[str]:
    """results.json, summary.md and plots in out_dir; returns the file names written.
    results.json is written first, so a failing plot never loses the measurements."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = results.setdefault("meta", {})
    files, notes = ["results.json", "summary.md"], []
    meta["files"], meta["notes"] = files, notes
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    try:
        figs = make_figures(results)
    except Exception as e:  # plotly missing or a figure failing: the tables still get written
        figs = {}
        notes.append(f"plots skipped: {type(e).__name__}: {e}")
    for name, fig in figs.items():
        fig.write_html(out / f"{name}.html", include_plotlyjs="directory")
        files.append(f"{name}.html")
    if figs:
        files.append("plotly.min.js")
        if importlib.util.find_spec("kaleido") is None:
            notes.append("PNG plots skipped: plotly needs the kaleido package to write images "
                         "offline, and it is not installed (the HTML plots hold the same data).")
        else:
            try:
                for name, fig in figs.items():
                    fig.write_image(out / f"{name}.png")
                    files.append(f"{name}.png")
            except Exception as e:  # kaleido present but unable (e.g. no browser): HTML only
                first = str(e).splitlines()[0] if str(e) else ""
                notes.append(f"PNG plots skipped: {type(e).__name__}: {first}")
    (out / "summary.md").write_text(summary_markdown(results, files, notes))
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    partial = out / PARTIAL
    if partial.exists():
        partial.unlink()
    return files


# ---------------------------------------------------------------------------------------------
# command line


def build_parser() -> argparse.ArgumentParser:
    from mirror_sd.bench.tuning import int_or_auto

    p = argparse.ArgumentParser(prog="python -m mirror_sd.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", default=None, help="Spec-Bench-format .jsonl (default: the "
                                                     "built-in assets/questions.jsonl)")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated, from " + ", ".join(DEFAULT_METHODS + tuple(VARIANTS))
                        + "; an engine method may change settings after colons, e.g. "
                          "mirror:exit_layer=21:branch_budget=3 (AR always runs)")
    p.add_argument("--per-category", type=int, default=None, help="first K questions per category")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (outputs checked against AR)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="default")
    p.add_argument("--draft", default="default")
    p.add_argument("--gamma", type=int_or_auto, default=4,
                   help="drafted tokens per window, or auto (a short probe on the first question "
                        "picks it; see tuning.py)")
    p.add_argument("--kappa", type=int, default=8)
    p.add_argument("--exit-layer", type=int, default=None)
    p.add_argument("--branch-budget", type=int_or_auto, default=2, help="or auto")
    p.add_argument("--precision", default="fp32", help="both models (see load_pair)")
    p.add_argument("--target-precision", default=None, help="overrides --precision for the target")
    p.add_argument("--draft-precision", default=None, help="overrides --precision for the draft")
    p.add_argument("--baseline-precision", default=None, metavar="P",
                   help="also run AR on the target loaded at P (method ar-P, e.g. ar-fp32): the "
                        "precision's own speedup, interleaved with the rest")
    p.add_argument("--exit-head", default="auto",
                   help="Mirror-SD's early-exit LM head: auto | exact | int8 (see early_exit.py)")
    p.add_argument("--exit-lens", default="auto",
                   help="Mirror-SD's trained exit lens: auto (the shipped lens of the target, if "
                        "any) | off | a lens .safetensors file (see exit_lens.py)")
    p.add_argument("--target-device", default="auto")
    p.add_argument("--draft-device", default="auto")
    p.add_argument("--streams", default="off", choices=["auto", "off"],
                   help="draft stream heads for sd/mirror (sd-streams and mirror-streams always "
                        "use them): auto = the pair's trained file in assets/, if any")
    p.add_argument("--draft-vocab", default="full",
                   help="the draft's proposal vocabulary for sd/mirror: full | auto (the shipped "
                        "file for the tokenizer, if any) | a .safetensors file (draft_vocab.py)")
    p.add_argument("--hf-assistant-tokens", type=int, default=None,
                   help="num_assistant_tokens for hf-assisted (default: transformers' own)")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="keep the questions finished in OUT/questions.partial.jsonl by an "
                        "interrupted run, run the rest")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default=None, help="output folder (required unless --what-if)")
    p.add_argument("--what-if", default=None, metavar="SCENARIOS",
                   help="print latency-model projections: 'key=value,...' scenarios separated "
                        "by ';' (keys: " + ", ".join(lm.WHAT_IF_KEYS) + ")")
    p.add_argument("--rerender", default=None, metavar="DIR",
                   help="recompute summary.md, the latency model and plots from DIR/results.json")
    p.add_argument("--calibration", default=None,
                   help="results.json of a benchmark run (or a calibration JSON) for --what-if; "
                        "default: the built-in calibration of the default pair")
    return p


def load_calibration(path: str | None) -> lm.Calibration:
    if path is None:
        return lm.default_calibration()
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise MirrorSDError(f"Could not read a calibration from {p}: {e}") from e
    d = d.get("latency_model", {}).get("calibration", d)
    try:
        return lm.Calibration.from_dict(d)
    except TypeError as e:
        raise MirrorSDError(f"{p} holds no latency-model calibration.") from e


def what_if_table(cal: lm.Calibration, scenarios: list[dict]) -> str:
    header = (f"PROJECTIONS from the latency model (a model, not measurements).\n"
              f"Calibration: {cal.source or 'unnamed'}\n")
    rows = [("as calibrated", lm.predict(cal))]
    for sc in scenarios:
        rows.append((",".join(f"{k}={v}" for k, v in sc.items()), lm.what_if(cal, **sc)["projected"]))
    width = max(len(r[0]) for r in rows)
    lines = [header, f"{'scenario':<{width}}  {'AR tok/s':>8}  {'SD tok/s':>8}  {'SD speedup':>10}  "
                     f"{'Mirror tok/s':>12}  {'Mirror speedup':>14}"]
    for name, p in rows:
        lines.append(f"{name:<{width}}  {_f(p['ar']['tokens_per_s']):>8}  {_f(p['sd']['tokens_per_s']):>8}  "
                     f"{_x(p['sd']['speedup']):>10}  {_f(p['mirror']['tokens_per_s']):>12}  "
                     f"{_x(p['mirror']['speedup']):>14}")
    return "\n".join(lines)


def _progress(message: str, fraction=None) -> None:
    pct = f" {fraction:.0%}" if fraction is not None else ""
    print(f"[load]{pct} {message}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    return run_cli(_main, build_parser().parse_args(argv), argv)


def _main(args, argv) -> int:
    if args.what_if is not None:
        try:
            scenarios = lm.parse_what_if(args.what_if)
            print(what_if_table(load_calibration(args.calibration), scenarios))
        except ValueError as e:
            raise MirrorSDError(str(e)) from e
        return 0
    if args.rerender:
        try:
            results = rerender(args.rerender)
        except (OSError, json.JSONDecodeError, KeyError) as e:
            raise MirrorSDError(f"Could not re-render {args.rerender}: {e}") from e
        print(summary_markdown(results, results["meta"].get("files"), results["meta"].get("notes")))
        return 0
    if not args.out:
        raise MirrorSDError("--out DIR is required (or --what-if for projections only).")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m != HF_ASSISTED:
            variant(m)  # a clear message for an unknown method or a bad setting
    questions = per_category(load_questions(args.questions), args.per_category)

    import transformers

    from mirror_sd.engine.settings import Settings
    from mirror_sd.models.loading import load_pair, load_target

    transformers.logging.set_verbosity_error()
    gamma_auto, budget_auto = args.gamma == "auto", args.branch_budget == "auto"
    knobs = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                 top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                 gamma=4 if gamma_auto else args.gamma, kappa=args.kappa,
                 exit_layer=args.exit_layer,
                 branch_budget=2 if budget_auto else args.branch_budget)
    knobs.update(exit_head=args.exit_head, exit_lens=args.exit_lens, streams=args.streams,
                 draft_vocab=args.draft_vocab)
    settings = Settings(**knobs)
    extra = {k: v for k, v in (("target_precision", args.target_precision),
                               ("draft_precision", args.draft_precision)) if v}
    pair = load_pair(args.target, args.draft, precision=args.precision, **extra,
                     target_device=args.target_device, draft_device=args.draft_device,
                     progress=_progress)
    runners, notes, auto = {}, [], None
    if gamma_auto or budget_auto:
        from mirror_sd.bench.tuning import auto_settings
        ids = pair.encode_prompt(questions[0].turns[0])
        settings.validate(pair, len(ids))
        settings, choice = auto_settings(pair, ids, settings, gamma_auto, budget_auto)
        auto = choice.to_dict()
        notes.append(f"auto: gamma {settings.gamma}, branch budget {settings.branch_budget}, "
                     f"chosen by the latency model from a {choice.probe_s:.1f} s probe on "
                     f"question {questions[0].question_id} (projected Mirror-SD speedup "
                     f"{_f(choice.projected_speedup)}x; a projection, not a measurement)")
    if args.baseline_precision:
        name = baseline_name(args.baseline_precision)
        ref = load_target(args.target, precision=args.baseline_precision,
                          target_device=args.target_device, draft_device=args.draft_device,
                          progress=_progress)  # the target alone: no second draft
        runners[name] = baseline_runner(replace(pair, target=ref), name)
        methods.append(name)
        notes.append(f"{name} = AR with the target at {args.baseline_precision}; its "
                     "mismatches are tokens changed by the precision, not by speculation.")
    command = "python -m mirror_sd.bench " + " ".join(shlex.quote(a) for a in
                                                      (sys.argv[1:] if argv is None else argv))
    results = run_benchmark(
        pair, questions, methods, settings, out_dir=args.out, warmup=not args.no_warmup,
        progress=not args.no_progress, hf_assistant_tokens=args.hf_assistant_tokens,
        resume=args.resume, runners=runners,
        meta={"command": command, "run_notes": notes, "auto": auto,
              "questions_file": args.questions or str(BUILTIN_QUESTIONS.relative_to(REPO_ROOT)),
              "per_category": args.per_category})
    print(summary_markdown(results, results["meta"].get("files"), results["meta"].get("notes")))
    print(f"written to {Path(args.out).resolve()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
