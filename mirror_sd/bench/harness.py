"""Benchmark AR, plain SD, Mirror-SD and transformers' assisted generation side by side.

    python -m mirror_sd.bench [--questions FILE.jsonl] [--methods ar,sd,mirror,hf-assisted]
        [--per-category K] [--max-new-tokens N] [--temperature X] [--target T --draft D]
        [--gamma G --kappa K --exit-layer L --branch-budget B --precision P]
        [--exit-lens {auto,off,FILE}] --out DIR

    python -m mirror_sd.bench --what-if "target_scale=10,draft_device=separate;gamma=6"
        [--calibration DIR/results.json]        (latency-model projections, no models loaded)

Questions are in Spec-Bench's format (see questions.py; the built-in set is
assets/questions.jsonl). Fairness: one warm-up run per method (every model a method uses
runs before any timed run); for each question the methods run back to back in an order
rotated by one per question; one pair (same weights, dtype and torch thread budget) for all;
greedy runs compare every method's tokens with AR's and report any mismatch (count and
first position).

Output in DIR: results.json (per question and method; summary; latency-model calibration and
predicted vs measured step time), summary.md, speedup.html, time_breakdown.html,
latency_model.html (plotly; PNG next to them only where kaleido can write them offline).

The package: runners.py (one method on one prompt), this file (the interleaved loop and the
per-question records), summary.py (tables of numbers), report.py (files), cli.py (flags).

Python API: `run_benchmark(pair, questions, methods, settings, out_dir=...)` on an already
built `ModelPair` (tests use tiny in-memory models); `runners=` adds or replaces methods.
"""
from __future__ import annotations

import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from mirror_sd.latency import latency_model as lm
from mirror_sd.questions import Question, categories
from mirror_sd.bench.report import PARTIAL, write_outputs
from mirror_sd.bench.runners import (DEFAULT_METHODS, HF_ASSISTED, MethodRun, Runner,
                                     default_runners, engine_runner, hf_assisted_generation_config)
from mirror_sd.bench.summary import (_ratio, _sum, breakdown_summary, latency_report, pooled_prefill,
                                     summarize, time_breakdown)
from mirror_sd.engine import warmup as engine_warmup
from mirror_sd.engine.registry import having
from mirror_sd.errors import MirrorSDError
from mirror_sd.paths import REPO_ROOT


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


def _answer_text(pair, ids: list[int]) -> str:
    """The answer fed back as the assistant turn: special tokens (eos) dropped."""
    eos = pair.eos_token_ids
    while ids and ids[-1] in eos:
        ids = ids[:-1]
    if pair.tokenizer is None:
        return ""
    return pair.tokenizer.decode(ids, skip_special_tokens=True).strip()


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

    stats = [r.stats for r in runs]
    new = sum(s.get("new_tokens", 0) or 0 for s in stats)
    wall = sum(r.wall_s for r in runs)
    fw = _sum(s.get("target_forwards") for s in stats)
    hits, fbs = _sum(s.get("hits") for s in stats), _sum(s.get("fallbacks") for s in stats)
    drafted, acc = _sum(s.get("drafted") for s in stats), _sum(s.get("accepted_drafts") for s in stats)
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
        **pooled_prefill(stats),
        "target_forwards": fw,
        "mean_accepted": _ratio(new, fw),
        "steps": _sum(s.get("steps") for s in stats),
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
    from mirror_sd.engine.settings import Settings
    from mirror_sd.placement import configure_cpu_threads

    settings = settings or Settings()
    methods = list(dict.fromkeys(["ar"] + [m for m in methods if m != "ar"]))
    table = _runner_table(methods, runners, hf_assistant_tokens)
    if not questions:
        raise MirrorSDError("No questions to run.")
    if pair.tokenizer is None:
        raise MirrorSDError("The benchmark needs a pair with a tokenizer (chat template).")
    placement = (pair.info or {}).get("placement")
    if placement is not None:
        configure_cpu_threads(placement)  # the same thread budget for every method
    started = datetime.now(timezone.utc)
    warm_s = _warm_up_runners(pair, questions, methods, table, settings) if warmup else None
    partial = None
    entries: list[dict] = []
    if out_dir is not None:
        partial = Path(out_dir) / PARTIAL
        entries = _resumed_entries(partial, questions, methods, resume)
    done = {e["question_id"] for e in entries}
    records = records_from_results({"questions": entries})
    todo = [(qi, q) for qi, q in enumerate(questions) if q.question_id not in done]
    _run_questions(pair, todo, methods, table, settings, entries, records, partial, progress)
    results = {"meta": {**_run_meta(pair, questions, methods, settings, started, warmup, warm_s,
                                    done, hf_assistant_tokens),
                        **(meta or {})},
               "questions": entries}
    order = {q.question_id: i for i, q in enumerate(questions)}
    results["questions"].sort(key=lambda e: order[e["question_id"]])
    _add_reports(results, records, methods, _calibration(pair, settings, records, started))
    if out_dir is not None:
        write_outputs(results, out_dir)
    return results


def _runner_table(methods: list[str], runners, hf_assistant_tokens) -> dict[str, Runner]:
    table = {**default_runners(hf_assistant_tokens), **(runners or {})}
    table.update({m: engine_runner(m) for m in methods if ":" in m and m not in table})
    unknown = [m for m in methods if m not in table]
    if unknown:
        raise MirrorSDError(f"Unknown method(s) {', '.join(unknown)}: choose from "
                            f"{', '.join(table)}.")
    return table


def _warm_up_runners(pair, questions, methods, table, settings) -> float:
    """One untimed short run of every method's runner (hf-assisted and variants included) on
    the first question, of the engine's one warm-up size (engine/warmup.py); returns the
    seconds it took."""
    t0 = time.perf_counter()
    quick = engine_warmup.quick(settings)
    ids = engine_warmup.prompt(pair.encode_prompt(questions[0].turns[0]))
    for m in methods:
        table[m](pair, ids, quick)
    return time.perf_counter() - t0


def _resumed_entries(partial: Path, questions, methods, resume: bool) -> list[dict]:
    """The entries an interrupted run left in `partial` (with `resume`), which is rewritten to
    hold just those; else it starts empty."""
    partial.parent.mkdir(parents=True, exist_ok=True)
    entries = []
    if resume and partial.exists():
        wanted = {q.question_id for q in questions}
        for line in partial.read_text().splitlines():
            e = json.loads(line) if line.strip() else None
            if e and e["question_id"] in wanted and list(e["methods"]) == methods:
                entries.append(e)
    partial.write_text("".join(json.dumps(e, default=str) + "\n" for e in entries))
    return entries


def _run_questions(pair, todo, methods, table, settings, entries, records, partial, progress):
    """Each question: every method back to back (rotated order), then its entry and records."""
    from tqdm import tqdm

    total = sum(len(q.turns) for _, q in todo) * len(methods)
    bar = tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=not progress,
               dynamic_ncols=True)
    try:
        for qi, q in todo:
            order = rotated_order(methods, qi)
            runs_by: dict[str, tuple] = {}
            for m in order:
                bar.set_postfix_str(f"q {q.question_id} ({q.category}) {m}")
                runs_by[m] = answer_question(pair, q, table[m], settings)
                bar.update(len(q.turns))
            entry = question_entry(pair, q, order, methods, runs_by, settings.temperature == 0)
            entries.append(entry)
            records += [{"method": m, "stats": r.stats, "spans": r.spans, "wall_s": r.wall_s,
                         "question_id": q.question_id, "error": r.error}
                        for m in methods for r in runs_by[m][0]]
            if partial is not None:  # a crash later on keeps what was measured
                with partial.open("a") as f:
                    f.write(json.dumps(entry, default=str) + "\n")
    finally:
        bar.close()


def question_entry(pair, q: Question, order: list[str], methods: list[str], runs_by: dict,
                   greedy: bool) -> dict:
    """One question's entry of results.json: each method's record, checked against AR's
    tokens when greedy."""
    entry = {"question_id": q.question_id, "category": q.category, "turns": len(q.turns),
             "order": order, "methods": {}}
    ar_turns = [r.token_ids for r in runs_by["ar"][0]]
    if getattr(pair, "bridge", None) is not None:  # what the draft could have proposed at all
        entry["shared_coverage"] = pair.bridge.coverage([t for turn in ar_turns for t in turn])
    ar_ok = not any(r.error for r in runs_by["ar"][0])
    for m in methods:
        runs, plens = runs_by[m]
        rec = method_record(m, runs, plens)
        if greedy and ar_ok and not rec["error"]:
            fm = first_mismatch(ar_turns, [r.token_ids for r in runs])
            rec["identical_to_ar"] = fm is None
            rec["first_mismatch"] = fm
        entry["methods"][m] = rec
    return entry


def _calibration(pair, settings, records, started) -> lm.Calibration:
    from mirror_sd.engine.mirror.exit_layer import choose_exit_layer_for, ran_at
    modelled, early = having(modelled=True), having(modelled=True, early_exit=True)
    exit_layer = (ran_at(r["stats"] for r in records if r["method"] in early)
                  or choose_exit_layer_for(pair, settings).layer)
    return lm.calibrate([r for r in records if r["method"] in modelled and not r["error"]],
                        target_layers=pair.target_layers, gamma=settings.gamma,
                        exit_layer=exit_layer, branch_budget=settings.branch_budget,
                        kappa=settings.kappa,
                        source=f"this benchmark run ({started:%Y-%m-%d %H:%M} UTC)")


def _add_reports(results: dict, records, methods, cal: lm.Calibration) -> None:
    results["meta"]["exit_layer"] = cal.exit_layer
    results["summary"] = summarize(results)
    results["breakdown"] = breakdown_summary(results)
    results["latency_model"] = latency_report(cal, records, methods)


def _run_meta(pair, questions, methods, settings, started, warmup, warm_s, done,
              hf_assistant_tokens) -> dict:
    """results.json's meta: the pair, devices, settings, questions, versions, machine."""
    import torch

    info = pair.info or {}
    return {
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": pair.target_name, "draft": pair.draft_name,
        "target_layers": pair.target_layers, "exit_layer": None,
        "precision": pair.precision,
        "draft_precision": info.get("draft_precision", pair.precision),
        "dtype": str(next(pair.target.parameters()).dtype),
        "draft_dtype": str(next(pair.draft.parameters()).dtype),
        "source": _source_version(),
        "devices": {"target": str(info.get("target", {}).get("device", "cpu")),
                    "draft": str(info.get("draft", {}).get("device", "cpu"))},
        "torch_threads": torch.get_num_threads(),
        "methods": methods, "greedy": settings.temperature == 0,
        "settings": _settings_dict(settings),
        "questions": len(questions),
        "categories": categories(questions),
        "warmup": {"runs_per_method": 1 if warmup else 0,
                   "max_new_tokens": engine_warmup.quick(settings).max_new_tokens,
                   "seconds": warm_s},
        "order": "methods back to back per question, rotated by one per question",
        "resumed_questions": sorted(done, key=str),
        "hf_assisted": (_hf_config(pair, settings, hf_assistant_tokens)
                        if HF_ASSISTED in methods else None),
        "cross_tokenizer": _cross_meta(pair),
        "versions": _versions(),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_cores": _cores()},
    }


def _cross_meta(pair) -> dict | None:
    """A draft with another tokenizer: the shared vocabulary (models/vocab_bridge.py)."""
    b = getattr(pair, "bridge", None)
    if b is None:
        return None
    return {"shared_tokens": b.n_shared, "target_tokens": b.target_tokens, "shared_share": b.shared_share,
            "draft_vocab": b.draft_vocab}


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
    saved = meta["settings"]
    modelled, early = having(modelled=True), having(modelled=True, early_exit=True)
    exit_layer = ran_at(r["stats"] for r in records if r["method"] in early) or meta["exit_layer"]
    cal = lm.calibrate([r for r in records if r["method"] in modelled and not r["error"]],
                       target_layers=meta["target_layers"], gamma=saved["gamma"],
                       exit_layer=exit_layer, branch_budget=saved["branch_budget"],
                       kappa=saved["kappa"], source=results["latency_model"]["calibration"].get("source", ""))
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
