"""Command line: `python -m mirror_sd generate --method {ar,sd,mirror} --prompt TEXT ...`."""
from __future__ import annotations

import argparse
import json
import sys

from mirror_sd.engine.events import Commit, Error, Finish, Notice, Span
from mirror_sd.engine.pair_check import describe
from mirror_sd.engine.registry import NAMES
from mirror_sd.engine.run_path import RunPath
from mirror_sd.errors import MirrorSDError, run_cli
from mirror_sd.formats import number
from mirror_sd.options import (add_decoding_options, add_model_options, model_kwargs, progress,
                               settings_from_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mirror_sd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt with one method")
    g.add_argument("--method", choices=list(NAMES), default="mirror")
    g.add_argument("--prompt", required=True)
    g.add_argument("--no-chat", action="store_true", help="feed the prompt as raw text, no chat template")
    add_decoding_options(g)
    add_model_options(g)
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    from mirror_sd.report.cli import add_pair_report  # its own flags and runner
    add_pair_report(sub)
    return parser


def run_generate(args) -> int:
    # every check that needs no model first: a bad value never waits for the models
    settings, gamma_auto, budget_auto = settings_from_args(args, args.method)
    if not args.prompt.strip():
        raise MirrorSDError("The prompt is empty: pass some text with --prompt.")
    path = RunPath([args.method], settings, gamma_auto=gamma_auto, budget_auto=budget_auto)
    pair = path.load(args.target, args.draft, **model_kwargs(args),
                     trust_remote_code=args.trust_remote_code, progress=progress)
    run = path.prepare(pair, args.prompt, chat=not args.no_chat)
    for line in describe(run.pair_check) if run.pair_check else ():
        print(f"pair: {line}", file=sys.stderr)
    if run.auto:
        print(f"auto: gamma {run.settings.gamma}, branch budget {run.settings.branch_budget} "
              f"(projected {number(run.auto.projected_speedup, '.2f')}x over AR by the latency "
              f"model, probe {run.auto.probe_s:.1f} s)", file=sys.stderr)
    spans, finish = decode(run, args.method, stream=not args.json)
    if args.json:
        print(json.dumps(result_json(run, args.method, finish, spans)))
    else:
        print()
        print(summary_line(finish.stats))
    return 0


def decode(run, method: str, stream: bool) -> tuple[list[Span], Finish]:
    """Run one method: notices to stderr, the text to stdout as it comes when `stream`."""
    def show(event, t_ns: int) -> None:
        if isinstance(event, Error):
            raise MirrorSDError(event.message)
        if isinstance(event, Notice):
            print(f"note: {event.message}", file=sys.stderr)
        elif isinstance(event, Commit) and stream:
            print(event.text, end="", flush=True)

    record = run.collect(method, listener=show)
    return record.spans, record.finish


def result_json(run, method: str, finish: Finish, spans: list[Span]) -> dict:
    """The --json object (its fields are documented in README's "Command line")."""
    t0 = min((span.start_ns for span in spans), default=0)
    return {
        "method": method,
        "text": finish.text,
        "prompt_ids": run.prompt_ids,
        "token_ids": finish.token_ids,
        "stats": finish.stats,
        "auto": run.auto.to_dict() if run.auto else None,
        "pair": _pair_json(run.pair, finish.token_ids),
        "spans": [{"lane": span.lane, "label": span.label, "step": span.step, "detail": span.detail,
                   "start_ms": (span.start_ns - t0) / 1e6, "end_ms": (span.end_ns - t0) / 1e6}
                  for span in spans],
    }


def _pair_json(pair, token_ids: list[int]) -> dict:
    """The pair's tokenizers: shared vocabulary and how much of this output it covers."""
    if not pair.cross:
        return {"cross_tokenizer": False}
    b = pair.bridge
    return {"cross_tokenizer": True, "shared_tokens": b.n_shared, "shared_share": b.shared_share,
            "output_coverage": b.coverage(token_ids)}


def summary_line(stats: dict) -> str:
    return (f"[{stats['method']}] {stats['new_tokens']} tokens in {stats['wall_s']:.2f} s "
            f"({stats['tokens_per_s']:.2f} tok/s; prefill {number(stats.get('prefill_s'), '.2f')} s, "
            f"decode {number(stats.get('decode_tokens_per_s'), '.2f')} tok/s), "
            f"{stats['target_forwards']} target forwards, "
            f"mean accepted {stats['mean_accepted']:.2f}, hit rate {number(stats['hit_rate'], '.0%')}, "
            f"draft hidden {number(stats['draft_hidden_fraction'], '.0%')}" + _exit_info(stats))


def _exit_info(stats: dict) -> str:
    if "exit_layer" not in stats:
        return ""
    lens = stats.get("exit_lens")
    return f", exit layer {stats['exit_layer']} ({'lens ' + lens.rsplit('/', 1)[-1] if lens else 'raw'})"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "pair-report":
        return run_cli(args.run, args, argv)
    return run_cli(run_generate, args)
