"""The one run path from settings to events, shared by `python -m mirror_sd generate`, the
app's job and the benchmark.

    path = RunPath(["ar", "mirror"], settings, gamma_auto=True)   # checks, no model yet
    pair = path.load("default", "default", precision="int8")      # or a pair already loaded
    run = path.prepare(pair, "Write a haiku.")                    # encode, validate, pair check,
                                                                  # warm up, resolve auto
    for method in run.methods:
        record = run.collect(method, listener=on_event)           # engine/collect.py: the
        ...                                                       # events in, spans and figures out

Each step says what it does through `say(message, fraction)` (the app's status line, the
CLI's stderr) and stops early when `cancel` is set. Steps a caller does not want (the
benchmark warms its own runners up) are switched off by argument, never skipped silently.
Auto settings are tuned for the methods that run (`tune_for`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from mirror_sd.engine import tuning, warmup
from mirror_sd.engine.collect import Collected, Listener, collect
from mirror_sd.engine.registry import REGISTRY, having
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError

Say = Callable[[str, "float | None"], None]


def _quiet(message: str, fraction: float | None = None) -> None:
    pass


class PromptIds(list):
    """Token ids of a prompt that RunPath.prompt_ids encoded and validated."""


@dataclass
class PreparedRun:
    """A pair and a prompt ready to decode: the settings resolved (auto gamma / budget), the
    pair check and the warm-up done."""
    pair: object
    prompt_ids: list[int]
    settings: Settings
    methods: tuple[str, ...]
    auto: tuning.Choice | None = None  # the probe's choice when gamma / budget were auto
    pair_check: dict | None = None  # engine/pair_check.py's report (a cross-tokenizer pair)
    warmup_s: float = 0.0

    def events(self, method: str, cancel: threading.Event | None = None) -> Iterator:
        """The typed events of one method's run (engine/events.py), as they happen."""
        return REGISTRY[method].decoder(self.pair, self.settings).generate(self.prompt_ids, cancel=cancel)

    def collect(self, method: str, listener: Listener | None = None,
                cancel: threading.Event | None = None) -> Collected:
        """One method's timed run read to the end (engine/collect.py); the decoder is built
        before the run's clock starts."""
        return collect(self.events(method, cancel), method, listener)


class RunPath:
    """What to run (methods, settings, which settings are auto) and the steps before it."""

    def __init__(self, methods: Sequence[str], settings: Settings, *, gamma_auto: bool = False,
                 budget_auto: bool = False):
        unknown = [m for m in methods if m not in REGISTRY]
        if unknown:
            raise MirrorSDError(f"Unknown method(s) {', '.join(unknown)}: choose from "
                                f"{', '.join(REGISTRY)}.")
        self.methods = tuple(methods)
        self.settings = settings
        self.gamma_auto, self.budget_auto = gamma_auto, budget_auto
        self.tune_for = tune_for(self.methods)  # whose projected speedup auto settings maximise
        self.check()

    @property
    def auto(self) -> bool:
        return self.gamma_auto or self.budget_auto

    @property
    def drafts(self) -> bool:
        return any(REGISTRY[m].drafts for m in self.methods)

    def check(self) -> None:
        """Every setting each method reads, before any model loads (MirrorSDError)."""
        for m in self.methods:
            REGISTRY[m].check(self.settings)

    @staticmethod
    def load(target: str = "default", draft: str = "default", **load_kwargs):
        """The pair, by name (models/loading.py `load_pair`; its keyword arguments pass on):
        every entry point loads through here."""
        from mirror_sd.models import loading  # heavy: only when a pair is loaded
        return loading.load_pair(target, draft, **load_kwargs)

    def encode(self, pair, prompt, chat: bool = True) -> list[int]:
        """Token ids of a prompt: a text, a list of chat messages, or ids already."""
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        return pair.encode_prompt(prompt, chat=chat)

    def validate(self, pair, prompt_ids: list[int]) -> None:
        for m in self.methods:
            self.settings.validate(pair, len(prompt_ids), REGISTRY[m].uses)

    def prompt_ids(self, pair, prompt, chat: bool = True) -> "PromptIds":
        """The prompt encoded and validated against the pair, once: `prepare` takes it as is."""
        ids = PromptIds(self.encode(pair, prompt, chat))
        self.validate(pair, ids)
        return ids

    def prepare(self, pair, prompt, *, chat: bool = True, pair_check=None, warm: bool = True,
                warmed: set | None = None, cancel: threading.Event | None = None,
                say: Say = _quiet) -> PreparedRun:
        """Encode and validate the prompt, check the pair, warm up, resolve auto settings.

        `prompt`: a text, chat messages, token ids, or `prompt_ids()`'s (already checked).
        `pair_check`: a function of the pair giving the report (the app keeps one per loaded
        pair), or None: engine/pair_check.py's, for a cross-tokenizer pair a drafting method
        reads, else none. `warmed`: warm_up's `done` set, kept by the caller across runs."""
        cancel = cancel or threading.Event()
        prompt_ids = prompt if isinstance(prompt, PromptIds) else self.prompt_ids(pair, prompt, chat)
        report = self._pair_check(pair, pair_check, say)
        warm_s = 0.0
        if warm:
            warm_s = warmup.warm_up(pair, self.methods, self.settings, prompt_ids, done=warmed,
                                    cancel=cancel, say=say)
        settings, choice = self.settings, None
        if self.auto and not cancel.is_set():
            say("Choosing γ and branch budget (a short probe of each method)", None)
            settings, choice = self.tune(pair, prompt_ids)
        return PreparedRun(pair, list(prompt_ids), settings, self.methods, choice, report, warm_s)

    def _pair_check(self, pair, pair_check, say: Say) -> dict | None:
        if pair_check is not None:
            return pair_check(pair)
        if not (pair.cross and self.drafts):
            return None
        from mirror_sd.engine.pair_check import check_pair
        say("Checking the pair (untimed)", None)
        return check_pair(pair, sample_tokens=0)

    def tune(self, pair, prompt_ids: list[int]) -> tuple[Settings, tuning.Choice]:
        """Settings with gamma and / or the branch budget chosen by the probe (tuning.py)."""
        try:
            return tuning.auto_settings(pair, prompt_ids, self.settings, self.gamma_auto,
                                        self.budget_auto, method=self.tune_for)
        except ValueError as e:
            raise MirrorSDError(f"auto tuning failed: {e}") from e


def tune_for(methods: Sequence[str]) -> str:
    """The method whose projected speedup auto settings maximise: among the methods that run
    and that the latency model projects (the registry's `modelled`) and draft, the one reading
    the early exit, else the first; with none of them, the modelled early-exit method."""
    run = [m for m in having(modelled=True, drafts=True) if m in methods]
    early = [m for m in run if REGISTRY[m].early_exit]
    return (early or run or list(having(modelled=True, early_exit=True)))[0]
