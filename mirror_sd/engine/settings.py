"""Decoding settings, checked per method.

`Settings.check(method)` needs no models: token counts, gamma, kappa, temperature, top-p,
top-k and the choice-valued settings, so a bad value fails before a pair is loaded.
`Settings.validate(pair, prompt_len, method)` adds what depends on the pair and the prompt
(the context length, kappa against the vocabulary, the exit layer against the target's
depth). Each method checks only the settings it reads (its registry entry's `uses`, built
from the field-name tuples below): AR ignores gamma, kappa, the exit lens and the draft's
settings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import get_args, get_type_hints

from mirror_sd.engine.acceptance import Sampling
from mirror_sd.engine.windows import WINDOW_CHOICES
from mirror_sd.errors import MirrorSDError
from mirror_sd.proposals.draft_vocab import CHOICES as DRAFT_VOCAB_CHOICES
from mirror_sd.proposals.exit_lens import LENS_CHOICES
from mirror_sd.proposals.streams import STREAMS_CHOICES

MAX_GAMMA = 32
MAX_KAPPA = 64
MAX_BRANCH_BUDGET = 16
EXIT_HEAD_CHOICES = ("auto", "exact", "int8")  # read by engine/mirror/early_exit.py
PROPOSER_CHOICES = ("draft", "lookup")  # who drafts: the draft model | prompt lookup, the draft where none (proposers.py)

SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_p", "top_k", "seed")
DRAFTING_FIELDS = ("gamma", "streams", "draft_vocab", "window", "window_threshold", "window_min", "window_max",
                   "proposer")
MIRROR_FIELDS = ("kappa", "exit_layer", "branch_budget", "exit_head", "exit_lens", "lane_timeout_s",
                 "branch_extend", "lane_overlap", "early_exit")
ALL_FIELDS = SAMPLING_FIELDS + DRAFTING_FIELDS + MIRROR_FIELDS
# name -> the settings it reads, for every registered method: written by registry.register
# only (the registry imports this module, so the lookup by name needs no import back)
METHOD_USES: dict[str, tuple[str, ...]] = {}


def reads(method) -> set[str]:
    """The settings `method` reads: a registered method's name, a registry entry (anything
    with `uses`), a tuple of field names, or None (every setting). Raises MirrorSDError for a
    name that is not registered."""
    if method is None:
        return set(ALL_FIELDS)
    if isinstance(method, str):
        if method not in METHOD_USES:
            raise MirrorSDError(f"Unknown method {method!r}: choose from {', '.join(METHOD_USES)}.")
        return set(METHOD_USES[method])
    return set(getattr(method, "uses", method))


@dataclass
class Settings:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    gamma: int = 4  # drafted tokens per window
    kappa: int = 8  # early-exit candidates per window position
    exit_layer: int | None = None  # None: chosen for the pair (engine/mirror/exit_layer.py)
    branch_budget: int = 2  # branch-complete rollouts per step
    exit_head: str = "auto"  # early-exit LM head: auto | exact | int8 (see early_exit.py)
    exit_lens: str = "auto"  # auto (the shipped lens of the target, if any) | off | a lens file
    lane_timeout_s: float = 300.0  # a draft lane silent this long is declared stalled
    branch_extend: str = "on"  # on: a branch is drafted to the window policy's length | off: gamma deep, only cut
    lane_overlap: str = "auto"  # auto: per step, as measured where the lanes share cores | always (engine/mirror/gate.py)
    early_exit: str = "on"  # on: the target's exit layer proposes the branches' roots | off: the draft's own guesses alone
    streams: str = "off"  # draft stream heads: auto (the pair's trained file if any) | off
    draft_vocab: str = "full"  # the draft's proposal vocabulary: full | auto (the shipped file) | a file
    window: str = "fixed"  # per-step window length: fixed (gamma every step) | adaptive | priced; the CLI, benchmark and app default to windows.DEFAULT_WINDOW
    window_threshold: float = 0.4  # adaptive, priced: stop drafting below this draft probability
    window_min: int = 1  # adaptive, priced: the shortest and longest windows (priced: or none at all)
    window_max: int = 12
    proposer: str = "draft"  # draft (the draft model) | lookup (prompt lookup, the draft model where it finds nothing)

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)

    def check(self, method=None) -> None:
        """Raise MirrorSDError for the first bad value among the settings `method` reads
        (see `reads`; all of them when None); needs no model pair."""
        uses = reads(method)
        for name, ok, message in self._checks():
            if name in uses and not ok:
                raise MirrorSDError(message)

    def validate(self, pair, prompt_len: int, method=None) -> None:
        """`check(method)` plus what depends on the pair and the prompt."""
        self.check(method)
        uses = reads(method)
        ctx = pair.context_length
        longest = max(self.gamma, self.window_max) if self.window != "fixed" else self.gamma
        window = longest + 1 if "gamma" in uses else 0
        checks = [
            (prompt_len >= 1, "The prompt is empty: give at least one token."),
            (prompt_len < ctx, f"The prompt has {prompt_len} tokens; the target's context holds {ctx}."),
            (prompt_len + self.max_new_tokens + window <= ctx,
             f"prompt ({prompt_len} tokens) + max new tokens ({self.max_new_tokens})"
             + (" + window" if window else "") + f" exceeds the target's context of {ctx} tokens: "
             "lower max new tokens."),
        ]
        if "kappa" in uses:
            top = min(MAX_KAPPA, pair.vocab_size)
            checks.append((self.kappa <= top, f"kappa must be between 1 and {top} (got {self.kappa})."))
        n = pair.target_layers
        if "exit_layer" in uses and self.exit_layer is not None:
            checks.append((1 <= self.exit_layer <= n - 1,
                           f"exit layer must be between 1 and {n - 1} for this {n}-layer target "
                           f"(got {self.exit_layer})."))
        for ok, message in checks:
            if not ok:
                raise MirrorSDError(message)

    def _checks(self):
        """(setting, ok, message) for every check that needs no model pair."""
        return [
            ("max_new_tokens", self.max_new_tokens >= 1,
             f"max new tokens must be at least 1 (got {self.max_new_tokens})."),
            ("gamma", 1 <= self.gamma <= MAX_GAMMA,
             f"gamma must be between 1 and {MAX_GAMMA} (got {self.gamma})."),
            ("kappa", 1 <= self.kappa <= MAX_KAPPA,
             f"kappa must be between 1 and {MAX_KAPPA} (got {self.kappa})."),
            ("branch_budget", 1 <= self.branch_budget <= MAX_BRANCH_BUDGET,
             f"branch budget must be between 1 and {MAX_BRANCH_BUDGET} (got {self.branch_budget})."),
            ("temperature", 0.0 <= self.temperature <= 10.0,
             f"temperature must be between 0 and 10 (got {self.temperature})."),
            ("top_p", 0.0 < self.top_p <= 1.0, f"top-p must be in (0, 1] (got {self.top_p})."),
            ("top_k", self.top_k >= 0, f"top-k must be 0 (off) or positive (got {self.top_k})."),
            ("exit_head", self.exit_head in EXIT_HEAD_CHOICES,
             f"exit head must be one of {', '.join(EXIT_HEAD_CHOICES)} (got {self.exit_head!r})."),
            ("exit_lens", self.exit_lens in LENS_CHOICES or str(self.exit_lens).endswith(".safetensors"),
             f"exit lens must be auto, off or a .safetensors lens file (got {self.exit_lens!r})."),
            ("streams", self.streams in STREAMS_CHOICES,
             f"streams must be auto or off (got {self.streams!r})."),
            ("draft_vocab", self.draft_vocab in DRAFT_VOCAB_CHOICES
             or str(self.draft_vocab).endswith(".safetensors"),
             f"draft vocab must be auto, full or a .safetensors vocabulary file (got {self.draft_vocab!r})."),
            ("branch_extend", self.branch_extend in ("on", "off"),
             f"branch extend must be on or off (got {self.branch_extend!r})."),
            ("proposer", self.proposer in PROPOSER_CHOICES,
             f"proposer must be one of {', '.join(PROPOSER_CHOICES)} (got {self.proposer!r})."),
            ("lane_overlap", self.lane_overlap in ("auto", "always"),
             f"lane overlap must be auto or always (got {self.lane_overlap!r})."),
            ("early_exit", self.early_exit in ("on", "off"),
             f"early exit must be on or off (got {self.early_exit!r})."),
            ("window", self.window in WINDOW_CHOICES,
             f"window must be one of {', '.join(WINDOW_CHOICES)} (got {self.window!r})."),
            ("window_threshold", 0.0 <= self.window_threshold < 1.0,
             f"window threshold must be in [0, 1) (got {self.window_threshold})."),
            ("window_min", 1 <= self.window_min <= MAX_GAMMA,
             f"window min must be between 1 and {MAX_GAMMA} (got {self.window_min})."),
            ("window_max", self.window_min <= self.window_max <= MAX_GAMMA,
             f"window max must be between window min ({self.window_min}) and {MAX_GAMMA} "
             f"(got {self.window_max})."),
        ]


DEFAULTS = Settings()  # every setting's default: the entry points show and derive theirs from it


def field_type(name: str) -> type:
    """A setting's plain type (int for `int | None`): what a value given as text converts to."""
    hint = get_type_hints(Settings)[name]
    return next((a for a in get_args(hint) if a is not type(None)), hint)


def settings_from(values: dict, **fixed) -> Settings:
    """Settings from values given as numbers or text (a form's controls, a method name's
    `:key=value`), each converted to its field's type; None or '' keeps the default. `fixed`
    pass on as they are."""
    given = {k: field_type(k)(v) for k, v in values.items() if v is not None and v != ""}
    return Settings(**given, **fixed)
