"""Command line: `python -m mirror_sd generate --method {ar,sd,mirror} --prompt TEXT ...`."""
from __future__ import annotations

import argparse
import json
import sys

from mirror_sd.engine.events import Commit, Error, Finish, Notice, Span
from mirror_sd.engine.registry import NAMES, REGISTRY
from mirror_sd.errors import MirrorSDError, run_cli
from mirror_sd.options import add_decoding_options, add_model_options, model_kwargs, settings_from_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mirror_sd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt with one method")
    g.add_argument("--method", choices=NAMES, default="mirror")
    g.add_argument("--prompt", required=True)
    g.add_argument("--no-chat", action="store_true", help="feed the prompt as raw text, no chat template")
    add_decoding_options(g)
    add_model_options(g)
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    from mirror_sd.report.cli import add_pair_report  # its own flags and runner
    add_pair_report(sub)
    return parser


def progress(message: str, fraction=None) -> None:
    """Loading progress on stderr (load_pair's progress callback)."""
    pct = f" {fraction:.0%}" if fraction is not None else ""
    print(f"[load]{pct} {message}", file=sys.stderr, flush=True)


def run_generate(args) -> int:
    # every check that needs no model first: a bad value never waits for the models
    settings, gamma_auto, budget_auto = settings_from_args(args, args.method)
    if not args.prompt.strip():
        raise MirrorSDError("The prompt is empty: pass some text with --prompt.")
    from mirror_sd.engine.warmup import warm_up
    from mirror_sd.models.loading import load_pair  # heavy imports only when needed

    pair = load_pair(args.target, args.draft, **model_kwargs(args),
                     trust_remote_code=args.trust_remote_code, progress=progress)
    prompt_ids = pair.encode_prompt(args.prompt, chat=not args.no_chat)
    settings.validate(pair, len(prompt_ids), args.method)
    if pair.cross and args.method != "ar":
        from mirror_sd.engine.pair_check import check_pair, describe
        for line in describe(check_pair(pair, sample_tokens=0)):
            print(f"pair: {line}", file=sys.stderr)
    method = REGISTRY[args.method]
    warm_up(pair, drafts=method.drafts)  # untimed: the first forward after the load
    auto = None
    if gamma_auto or budget_auto:
        from mirror_sd.bench.tuning import auto_settings
        try:
            settings, auto = auto_settings(pair, prompt_ids, settings, gamma_auto, budget_auto,
                                           method="sd" if args.method == "sd" else "mirror")
        except ValueError as e:
            raise MirrorSDError(f"auto tuning failed: {e}") from e
        print(f"auto: gamma {settings.gamma}, branch budget {settings.branch_budget} (projected "
              f"{_fmt(auto.projected_speedup, '.2f')}x over AR by the latency model, probe "
              f"{auto.probe_s:.1f} s)", file=sys.stderr)
    spans, finish = [], None
    for event in method.decoder(pair, settings).generate(prompt_ids):
        if isinstance(event, Error):
            raise MirrorSDError(event.message)
        if isinstance(event, Notice):
            print(f"note: {event.message}", file=sys.stderr)
        elif isinstance(event, Commit) and not args.json:
            print(event.text, end="", flush=True)
        elif isinstance(event, Span):
            spans.append(event)
        elif isinstance(event, Finish):
            finish = event
    stats = finish.stats
    if args.json:
        t0 = min((s.start_ns for s in spans), default=0)
        print(json.dumps({
            "method": args.method,
            "text": finish.text,
            "prompt_ids": prompt_ids,
            "token_ids": finish.token_ids,
            "stats": stats,
            "auto": auto.to_dict() if auto else None,
            "pair": _pair_json(pair, finish.token_ids),
            "spans": [{"lane": s.lane, "label": s.label, "step": s.step, "detail": s.detail,
                       "start_ms": (s.start_ns - t0) / 1e6, "end_ms": (s.end_ns - t0) / 1e6}
                      for s in spans],
        }))
    else:
        print()
        print(summary_line(stats))
    return 0


def _pair_json(pair, token_ids: list[int]) -> dict:
    """The pair's tokenizers: shared vocabulary and how much of this output it covers."""
    if not pair.cross:
        return {"cross_tokenizer": False}
    b = pair.bridge
    return {"cross_tokenizer": True, "shared_tokens": b.n_shared, "shared_share": b.shared_share,
            "output_coverage": b.coverage(token_ids)}


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def summary_line(stats: dict) -> str:
    return (f"[{stats['method']}] {stats['new_tokens']} tokens in {stats['wall_s']:.2f} s "
            f"({stats['tokens_per_s']:.2f} tok/s; prefill {_fmt(stats.get('prefill_s'), '.2f')} s, "
            f"decode {_fmt(stats.get('decode_tokens_per_s'), '.2f')} tok/s), "
            f"{stats['target_forwards']} target forwards, "
            f"mean accepted {stats['mean_accepted']:.2f}, hit rate {_fmt(stats['hit_rate'], '.0%')}, "
            f"draft hidden {_fmt(stats['draft_hidden_fraction'], '.0%')}" + _exit_info(stats))


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
