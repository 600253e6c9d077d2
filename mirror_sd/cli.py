"""Command line: `python -m mirror_sd generate --method {ar,sd,mirror} --prompt TEXT ...`."""
from __future__ import annotations

import argparse
import json
import sys

from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError, run_cli
from mirror_sd.engine.events import Commit, Error, Finish, Notice
from mirror_sd.engine.registry import METHODS
from mirror_sd.bench.tuning import int_or_auto


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mirror_sd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt with one method")
    g.add_argument("--method", choices=sorted(METHODS), default="mirror")
    g.add_argument("--target", default="default", help="hub id, local folder, .gguf file or 'default'")
    g.add_argument("--draft", default="default")
    g.add_argument("--prompt", required=True)
    g.add_argument("--no-chat", action="store_true", help="feed the prompt as raw text, no chat template")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--gamma", type=int_or_auto, default=4,
                   help="drafted tokens per window, or auto: chosen by a short probe (tuning.py)")
    g.add_argument("--kappa", type=int, default=8)
    g.add_argument("--exit-layer", type=int, default=None)
    g.add_argument("--branch-budget", type=int_or_auto, default=2,
                   help="branch rollouts per Mirror-SD step, or auto (with --gamma auto: both)")
    g.add_argument("--exit-head", default="auto", choices=["auto", "exact", "int8"],
                   help="early-exit LM head: auto = int8 copy on CPU for large heads, cut to the shipped "
                        "frequent-token set of the tokenizer when there is one (proposals only)")
    g.add_argument("--exit-lens", default="auto",
                   help="trained exit lens: auto (the shipped lens of the target, when there is "
                        "one), off (raw early exit), or a lens .safetensors file")
    g.add_argument("--streams", default="off", choices=["auto", "off"],
                   help="draft stream heads (several draft tokens per draft forward): auto = the "
                        "pair's trained file in assets/, plain drafting when there is none")
    g.add_argument("--draft-vocab", default="full",
                   help="the draft's proposal vocabulary: full (default), auto (the shipped "
                        "frequent-token set for the pair's tokenizer, when there is one), or a "
                        ".safetensors file (draft_vocab.py; proposals only, output unchanged)")
    g.add_argument("--precision", default="fp32", help="both models: fp32, bf16, fp16 (GPU); fp16w, int8, int4, int8-dyn (CPU; see loading.PRECISION_NOTES)")
    g.add_argument("--target-precision", default=None, help="overrides --precision for the target")
    g.add_argument("--draft-precision", default=None, help="overrides --precision for the draft")
    g.add_argument("--target-device", default="auto")
    g.add_argument("--draft-device", default="auto")
    g.add_argument("--trust-remote-code", action="store_true")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    return parser


def _progress(message: str, fraction=None) -> None:
    pct = f" {fraction:.0%}" if fraction is not None else ""
    print(f"[load]{pct} {message}", file=sys.stderr, flush=True)


def run_generate(args) -> int:
    from mirror_sd.models.loading import load_pair  # heavy imports only when needed

    gamma_auto, budget_auto = args.gamma == "auto", args.branch_budget == "auto"
    settings = Settings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                        gamma=4 if gamma_auto else args.gamma, kappa=args.kappa,
                        exit_layer=args.exit_layer,
                        branch_budget=2 if budget_auto else args.branch_budget,
                        exit_head=args.exit_head, exit_lens=args.exit_lens,
                        streams=args.streams, draft_vocab=args.draft_vocab)
    if not args.prompt.strip():
        raise MirrorSDError("The prompt is empty: pass some text with --prompt.")
    pair = load_pair(args.target, args.draft, precision=args.precision,
                     target_precision=args.target_precision, draft_precision=args.draft_precision,
                     target_device=args.target_device, draft_device=args.draft_device,
                     trust_remote_code=args.trust_remote_code, progress=_progress)
    prompt_ids = pair.encode_prompt(args.prompt, chat=not args.no_chat)
    auto = None
    if gamma_auto or budget_auto:
        from mirror_sd.bench.tuning import auto_settings
        settings.validate(pair, len(prompt_ids))
        try:
            settings, auto = auto_settings(pair, prompt_ids, settings, gamma_auto, budget_auto,
                                           method="sd" if args.method == "sd" else "mirror")
        except ValueError as e:
            raise MirrorSDError(f"auto tuning failed: {e}") from e
        print(f"auto: gamma {settings.gamma}, branch budget {settings.branch_budget} (projected "
              f"{_fmt(auto.projected_speedup, '.2f')}x over AR by the latency model, probe "
              f"{auto.probe_s:.1f} s)", file=sys.stderr)
    decoder = METHODS[args.method](pair, settings)
    spans, finish = [], None
    for event in decoder.generate(prompt_ids):
        if isinstance(event, Error):
            raise MirrorSDError(event.message)
        if isinstance(event, Notice):
            print(f"note: {event.message}", file=sys.stderr)
        elif isinstance(event, Commit) and not args.json:
            print(event.text, end="", flush=True)
        elif event.to_dict()["type"] == "Span":
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
            "spans": [{"lane": s.lane, "label": s.label, "step": s.step, "detail": s.detail,
                       "start_ms": (s.start_ns - t0) / 1e6, "end_ms": (s.end_ns - t0) / 1e6}
                      for s in spans],
        }))
    else:
        print()
        print(summary_line(stats))
    return 0


def _fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def summary_line(stats: dict) -> str:
    return (f"[{stats['method']}] {stats['new_tokens']} tokens in {stats['wall_s']:.2f} s "
            f"({stats['tokens_per_s']:.2f} tok/s), {stats['target_forwards']} target forwards, "
            f"mean accepted {stats['mean_accepted']:.2f}, hit rate {_fmt(stats['hit_rate'], '.0%')}, "
            f"draft hidden {_fmt(stats['draft_hidden_fraction'], '.0%')}" + _exit_info(stats))


def _exit_info(stats: dict) -> str:
    if "exit_layer" not in stats:
        return ""
    lens = stats.get("exit_lens")
    return f", exit layer {stats['exit_layer']} ({'lens ' + lens.rsplit('/', 1)[-1] if lens else 'raw'})"


def main(argv=None) -> int:
    return run_cli(run_generate, build_parser().parse_args(argv))
