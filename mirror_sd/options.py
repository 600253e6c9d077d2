"""The decoding and model options shared by `python -m mirror_sd generate` and
`python -m mirror_sd.bench`, declared once; their defaults come from `Settings`.

`add_decoding_options(parser)` and `add_model_options(parser)` add the flags;
`settings_from_args(args)` turns them into checked `Settings` (before any model loads) and
says whether gamma and the branch budget are to be tuned (`auto`); `progress` prints the
loader's progress on stderr.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from mirror_sd.engine.registry import REGISTRY
from mirror_sd.engine.settings import EXIT_HEAD_CHOICES, PROPOSER_CHOICES, Settings
from mirror_sd.engine.windows import DEFAULT_PROPOSER, DEFAULT_WINDOW, WINDOW_CHOICES
from mirror_sd.placement import CONFIGURATIONS, configuration_devices
from mirror_sd.proposals.streams import STREAMS_CHOICES

DEFAULTS = {f.name: f.default for f in fields(Settings)}


def int_or_auto(text: str):
    """argparse type: a whole number or the word auto."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or auto, got {text!r}") from None


def add_decoding_options(p: argparse.ArgumentParser) -> None:
    """The Settings flags (--max-new-tokens ... --draft-vocab)."""
    d = DEFAULTS
    p.add_argument("--max-new-tokens", type=int, default=d["max_new_tokens"])
    p.add_argument("--temperature", type=float, default=d["temperature"],
                   help="0 = greedy (the benchmark then checks every method's tokens against AR's)")
    p.add_argument("--top-p", type=float, default=d["top_p"])
    p.add_argument("--top-k", type=int, default=d["top_k"])
    p.add_argument("--seed", type=int, default=d["seed"])
    p.add_argument("--gamma", type=int_or_auto, default=d["gamma"],
                   help="drafted tokens per window, or auto: chosen by a short probe (engine/tuning.py)")
    p.add_argument("--kappa", type=int, default=d["kappa"], help="early-exit candidates per window position")
    p.add_argument("--exit-layer", type=int, default=d["exit_layer"],
                   help="Mirror-SD's early-exit layer (default: chosen by engine/mirror/exit_layer.py)")
    p.add_argument("--branch-budget", type=int_or_auto, default=d["branch_budget"],
                   help="branch rollouts per Mirror-SD step, or auto (with --gamma auto: both)")
    p.add_argument("--lane-overlap", default=d["lane_overlap"], choices=("auto", "always"),
                   help="Mirror-SD's two lanes: auto (where they share a CPU's cores, each step "
                        "overlaps them or runs them one after the other, as this pair's measured "
                        "steps favour; engine/mirror/gate.py) or always overlapped")
    p.add_argument("--early-exit", default=d["early_exit"], choices=("on", "off"),
                   help="Mirror-SD's early-exit channel: on (the target's exit layer proposes the "
                        "branches' roots) or off (the draft's own guesses alone: what the exit buys)")
    p.add_argument("--exit-head", default=d["exit_head"], choices=EXIT_HEAD_CHOICES,
                   help="early-exit LM head: auto = int8 copy on CPU for large heads, cut to the shipped "
                        "frequent-token set of the tokenizer when there is one (proposals only)")
    p.add_argument("--exit-lens", default=d["exit_lens"],
                   help="trained exit lens: auto (the shipped lens of the target, when there is "
                        "one), off (raw early exit), or a lens .safetensors file")
    p.add_argument("--streams", default=d["streams"], choices=STREAMS_CHOICES,
                   help="draft stream heads (several draft tokens per draft forward): auto = the "
                        "pair's trained file in assets/, plain drafting when there is none")
    p.add_argument("--draft-vocab", default=d["draft_vocab"],
                   help="the draft's proposal vocabulary: full, auto (the shipped frequent-token "
                        "set for the pair's tokenizer, when there is one), or a .safetensors file "
                        "(proposals/draft_vocab.py; proposals only, output unchanged)")
    p.add_argument("--window", default=DEFAULT_WINDOW, choices=WINDOW_CHOICES,
                   help="window length per step: fixed (gamma every step), adaptive (grows after a "
                        "fully accepted window, shrinks after a rejection, stops where the draft's "
                        "confidence drops) or priced (the length with the most expected tokens per "
                        "second at the costs the run measures, none when drafting does not pay: the "
                        f"step decodes; engine/windows.py); output unchanged (default {DEFAULT_WINDOW})")
    p.add_argument("--proposer", default=DEFAULT_PROPOSER, metavar="{" + ",".join(PROPOSER_CHOICES) + "}",
                   help="who drafts: draft (the draft model) or lookup (n-grams of the prompt and the "
                        "output so far, no model; the draft model where none recurs); output unchanged "
                        f"(default {DEFAULT_PROPOSER})")
    p.add_argument("--window-threshold", type=float, default=d["window_threshold"],
                   help="adaptive windows: stop drafting after a token the draft gives less than this")
    p.add_argument("--window-min", type=int, default=d["window_min"], help="adaptive windows: shortest")
    p.add_argument("--window-max", type=int, default=d["window_max"],
                   help="adaptive windows: longest (Mirror-SD: at most gamma, its branches' depth)")


def add_model_options(p: argparse.ArgumentParser) -> None:
    """Which pair, at which precision, on which devices."""
    from mirror_sd.models.precision import PRECISIONS

    p.add_argument("--target", default="default",
                   help="hub id, local folder, .gguf file, 'default' (bundled Qwen2.5-Coder 1.5B) or a "
                        "bundled name (gemma-3-270m)")
    p.add_argument("--draft", default="default",
                   help="as --target; 'default' is the bundled Qwen2.5-Coder 0.5B; gemma-3-270m drafts "
                        "with another tokenizer (token-level intersection)")
    p.add_argument("--precision", default="fp32",
                   help="both models: " + ", ".join(PRECISIONS) + " (models/precision.py)")
    p.add_argument("--target-precision", default=None, help="overrides --precision for the target")
    p.add_argument("--draft-precision", default=None, help="overrides --precision for the draft")
    p.add_argument("--target-device", default="auto")
    p.add_argument("--draft-device", default="auto")
    p.add_argument("--placement", default="auto", choices=list(CONFIGURATIONS),
                   action=_PlacementAction,
                   help="a device configuration that sets both devices (placement.py): "
                        + "; ".join(f"{n}: {d}" for n, (_, _, d) in CONFIGURATIONS.items()))


class _PlacementAction(argparse.Action):
    """--placement NAME: records NAME and sets --target-device / --draft-device to its devices
    ("gpu": cuda, the first GPU); a later --target-device or --draft-device still overrides."""

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, value)
        if value != "auto":
            tdev, ddev, _ = CONFIGURATIONS[value]
            namespace.target_device, namespace.draft_device = (
                "cuda" if d == "gpu" else d for d in (tdev, ddev))


def settings_from_args(args, method: str | None = None) -> tuple[Settings, bool, bool]:
    """(Settings, gamma auto, branch budget auto) from the flags, checked for `method` (every
    method's settings when None) before any model loads. Under `auto` the default stands
    until the probe picks. Raises MirrorSDError."""
    gamma_auto, budget_auto = args.gamma == "auto", args.branch_budget == "auto"
    settings = Settings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                        top_p=args.top_p, top_k=args.top_k, seed=args.seed,
                        gamma=DEFAULTS["gamma"] if gamma_auto else args.gamma, kappa=args.kappa,
                        exit_layer=args.exit_layer,
                        branch_budget=DEFAULTS["branch_budget"] if budget_auto else args.branch_budget,
                        exit_head=args.exit_head, exit_lens=args.exit_lens,
                        streams=args.streams, draft_vocab=args.draft_vocab, window=args.window,
                        window_threshold=args.window_threshold, window_min=args.window_min,
                        window_max=args.window_max, proposer=getattr(args, "proposer", DEFAULT_PROPOSER),
                        lane_overlap=getattr(args, "lane_overlap", DEFAULTS["lane_overlap"]),
                        early_exit=getattr(args, "early_exit", DEFAULTS["early_exit"]))
    settings.check(REGISTRY[method] if method else None)
    return settings, gamma_auto, budget_auto


_last_progress: list[str] = [""]


def progress(message: str, fraction=None) -> None:
    """Loading progress on stderr (load_pair's progress callback); a line that repeats the
    one before is not printed again."""
    pct = f" {fraction:.0%}" if fraction is not None else ""
    line = f"[load]{pct} {message}"
    if line != _last_progress[0]:
        _last_progress[0] = line
        print(line, file=sys.stderr, flush=True)


def model_kwargs(args) -> dict:
    """load_pair's keyword arguments from add_model_options' flags (names excluded). A
    --placement other than auto is checked first (a GPU it needs is there: MirrorSDError)."""
    if getattr(args, "placement", "auto") != "auto":
        configuration_devices(args.placement)
    return dict(precision=args.precision, target_precision=args.target_precision,
                draft_precision=args.draft_precision, target_device=args.target_device,
                draft_device=args.draft_device)
