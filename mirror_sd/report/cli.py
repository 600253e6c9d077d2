"""`python -m mirror_sd pair-report`: the pair report from the command line.

    python -m mirror_sd pair-report --target T --draft D [--draft D2 ...] [--precision P]
        [--questions FILE] [--per-category K] [--max-new-tokens N] [--out DIR] [--json]

Every pair is checked before anything loads (checks.py); one that cannot work gets its
reason in one line (and in the report), the others are measured one after another.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys

from mirror_sd.errors import MirrorSDError
from mirror_sd.report.figures import DEFAULT_PER_CATEGORY, DEFAULT_TOKENS

DEFAULT_PRECISION = "int8"  # the app's default: the fastest exact-rows precision on a CPU


def add_pair_report(sub) -> argparse.ArgumentParser:
    """The `pair-report` subcommand on `python -m mirror_sd`'s subparsers."""
    from mirror_sd.options import add_decoding_options
    from mirror_sd.models.precision import PRECISIONS

    p = sub.add_parser("pair-report", help="is this draft any good for this target: acceptance, "
                                           "costs, measured and projected speedups, settings",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="default", help="as for generate ('default': the bundled "
                                                        "Qwen2.5-Coder 1.5B)")
    p.add_argument("--draft", action="append", default=None,
                   help="a draft to report on; repeat to compare drafts side by side "
                        "(default: the bundled 0.5B; gemma-3-270m: another tokenizer)")
    p.add_argument("--precision", default=DEFAULT_PRECISION,
                   help=f"both models (default {DEFAULT_PRECISION}): " + ", ".join(PRECISIONS))
    p.add_argument("--draft-precision", default=None, help="overrides --precision for the drafts")
    p.add_argument("--target-device", default="auto")
    p.add_argument("--draft-device", default="auto")
    p.add_argument("--questions", default=None, help="Spec-Bench-format .jsonl (default: the built-in set)")
    p.add_argument("--per-category", type=int, default=DEFAULT_PER_CATEGORY,
                   help=f"questions per task group (default {DEFAULT_PER_CATEGORY})")
    p.add_argument("--out", default=None, help="folder for report.json, report.md, report.html "
                                               "and each pair's benchmark files")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    add_decoding_options(p)
    p.set_defaults(max_new_tokens=DEFAULT_TOKENS, run=run)
    return p


def _progress(fraction, message) -> None:
    print(f"[report] {fraction:4.0%} {message}", file=sys.stderr, flush=True)


def run(args, argv=None) -> int:
    from mirror_sd.questions import load_questions, per_category
    from mirror_sd.options import settings_from_args
    from mirror_sd.report.checks import check_pairs
    from mirror_sd.report.render import one_line, report_markdown, write_report
    from mirror_sd.report.run import run_pair_report

    drafts = list(dict.fromkeys(args.draft or ["default"]))
    settings, gamma_auto, budget_auto = settings_from_args(args, None)
    if gamma_auto or budget_auto:
        raise MirrorSDError("The pair report recommends gamma and the branch budget itself: "
                            "pass numbers (or leave the defaults).")
    questions = per_category(load_questions(args.questions), args.per_category)
    kw = dict(precision=args.precision, draft_precision=args.draft_precision,
              target_device=args.target_device, draft_device=args.draft_device)
    verdicts = check_pairs(args.target, drafts, **kw)
    for v in verdicts:
        if not v.ok:
            print(f"error: {v.draft}: {v.reason}", file=sys.stderr)
    if not any(v.ok for v in verdicts):
        raise MirrorSDError("no pair can be measured (reasons above).")

    def load(draft, progress):
        from mirror_sd.models.loading import load_pair
        return load_pair(args.target, draft, progress=progress, **kw)

    command = "python -m mirror_sd " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    report = run_pair_report(args.target, drafts, load=load, questions=questions, settings=settings,
                             verdicts=verdicts, out_dir=args.out, progress=_progress,
                             meta={"command": command, "precision": args.precision})
    if args.out:
        files = write_report(report, args.out)
        print(f"written to {args.out}: {', '.join(files)}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(report_markdown(report))
    for p in report["pairs"]:
        print(one_line(p), file=sys.stderr)
    return 0 if any(p["status"] == "measured" for p in report["pairs"]) else 2
