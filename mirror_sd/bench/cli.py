"""`python -m mirror_sd.bench`: the command line of the benchmark (see harness.py)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from mirror_sd.latency import latency_model as lm
from mirror_sd.bench.harness import __doc__ as harness_doc
from mirror_sd.bench.harness import rerender, run_benchmark
from mirror_sd.questions import BUILTIN_QUESTIONS, load_questions, per_category
from mirror_sd.bench.report import summary_markdown
from mirror_sd.bench.runners import (DEFAULT_METHODS, HF_ASSISTED, baseline_name, baseline_runner,
                                     label, method_choices, variant)
from mirror_sd.engine.registry import REGISTRY
from mirror_sd.engine.run_path import RunPath
from mirror_sd.errors import MirrorSDError, run_cli
from mirror_sd.formats import number, times
from mirror_sd.options import (add_decoding_options, add_model_options, model_kwargs, progress,
                               settings_from_args)
from mirror_sd.paths import REPO_ROOT


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mirror_sd.bench", description=harness_doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--questions", default=None, help="Spec-Bench-format .jsonl (default: the "
                                                     "built-in assets/questions.jsonl)")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated, from " + ", ".join(method_choices())
                        + "; an engine method may change settings after colons, e.g. "
                          "mirror:exit_layer=21:branch_budget=3 (AR always runs)")
    p.add_argument("--per-category", type=int, default=None, help="first K questions per category")
    add_decoding_options(p)
    add_model_options(p)
    p.add_argument("--baseline-precision", default=None, metavar="P",
                   help="also run AR on the target loaded at P (method ar-P, e.g. ar-fp32): the "
                        "precision's own speedup, interleaved with the rest")
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
        lines.append(f"{name:<{width}}  {number(p['ar']['tokens_per_s']):>8}  {number(p['sd']['tokens_per_s']):>8}  "
                     f"{times(p['sd']['speedup']):>10}  {number(p['mirror']['tokens_per_s']):>12}  "
                     f"{times(p['mirror']['speedup']):>14}")
    return "\n".join(lines)


def main(argv=None) -> int:
    return run_cli(_main, build_parser().parse_args(argv), argv)


def _main(args, argv) -> int:
    if args.what_if is not None:
        return _what_if(args)
    if args.rerender:
        return _rerender(args)
    if not args.out:
        raise MirrorSDError("--out DIR is required (or --what-if for projections only).")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    path = _run_path(args, methods)  # every check that needs no model: before loading
    questions = per_category(load_questions(args.questions), args.per_category)

    import transformers
    transformers.logging.set_verbosity_error()
    pair = path.load(args.target, args.draft, **model_kwargs(args), progress=progress)
    notes, auto = [], None
    if path.auto:  # the probe runs on the first question; the harness warms its runners up
        run = path.prepare(pair, questions[0].turns[0], warm=False, pair_check=lambda pair: None)
        path.settings, auto = run.settings, run.auto.to_dict()
        notes.append(f"auto: gamma {run.settings.gamma}, branch budget {run.settings.branch_budget}, "
                     f"chosen by the latency model from a {run.auto.probe_s:.1f} s probe on "
                     f"question {questions[0].question_id} (projected {label(path.tune_for)} speedup "
                     f"{number(run.auto.projected_speedup)}x; a projection, not a measurement)")
    runners = _baseline(args, pair, methods, notes)
    command = "python -m mirror_sd.bench " + " ".join(shlex.quote(a) for a in
                                                      (sys.argv[1:] if argv is None else argv))
    results = run_benchmark(
        pair, questions, methods, path.settings, out_dir=args.out, warmup=not args.no_warmup,
        progress=not args.no_progress, hf_assistant_tokens=args.hf_assistant_tokens,
        resume=args.resume, runners=runners,
        meta={"command": command, "run_notes": notes, "auto": auto,
              "questions_file": args.questions or str(BUILTIN_QUESTIONS.relative_to(REPO_ROOT)),
              "per_category": args.per_category})
    print(summary_markdown(results, results["meta"].get("files"), results["meta"].get("notes")))
    print(f"written to {Path(args.out).resolve()}", file=sys.stderr)
    return 0


def _run_path(args, methods: list[str]) -> RunPath:
    """The run path of the engine methods (AR always runs), each method name and its settings
    checked first (a variant's changed settings too)."""
    settings, gamma_auto, budget_auto = settings_from_args(args, "ar")
    engine = ["ar"]
    for m in methods:
        if m != HF_ASSISTED:
            base, changes = variant(m)  # a clear message for an unknown method or a bad setting
            replace(settings, **changes).check(REGISTRY[base])
            engine.append(base)
    return RunPath(list(dict.fromkeys(engine)), settings, gamma_auto=gamma_auto,
                   budget_auto=budget_auto)


def _baseline(args, pair, methods: list[str], notes: list[str]) -> dict:
    """--baseline-precision: AR on a second copy of the target, as one more method."""
    if not args.baseline_precision:
        return {}
    from mirror_sd.models import loading
    name = baseline_name(args.baseline_precision)
    ref = loading.load_target(args.target, precision=args.baseline_precision,
                              target_device=args.target_device, draft_device=args.draft_device,
                              progress=progress)  # the target alone: no second draft
    methods.append(name)
    notes.append(f"{name} = AR with the target at {args.baseline_precision}; its "
                 "mismatches are tokens changed by the precision, not by speculation.")
    return {name: baseline_runner(replace(pair, target=ref), name)}


def _what_if(args) -> int:
    try:
        scenarios = lm.parse_what_if(args.what_if)
        print(what_if_table(load_calibration(args.calibration), scenarios))
    except ValueError as e:
        raise MirrorSDError(str(e)) from e
    return 0


def _rerender(args) -> int:
    try:
        results = rerender(args.rerender)
    except (OSError, json.JSONDecodeError, KeyError) as e:
        raise MirrorSDError(f"Could not re-render {args.rerender}: {e}") from e
    print(summary_markdown(results, results["meta"].get("files"), results["meta"].get("notes")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
