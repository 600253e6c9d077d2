"""What all decoders share: settings, the run record, commits, spans and statistics.

A decoder is a class with `generate(prompt_ids, cancel=None)`: a generator of typed events
(see events.py) that ends with exactly one `Finish` (or an `Error` then `Finish`).
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator

import torch

from mirror_sd.proposals import draft_vocab
from mirror_sd.engine.acceptance import Sampling
from mirror_sd.engine.mirror.early_exit import EXIT_HEAD_CHOICES
from mirror_sd.proposals.exit_lens import LENS_CHOICES
from mirror_sd.errors import MirrorSDError
from mirror_sd.engine.events import Commit, Error, Event, Finish, Notice, Span
from mirror_sd.models.pair import ModelPair
from mirror_sd.placement import lane_sync, method_threads
from mirror_sd.engine.stats import draft_hidden_fraction

log = logging.getLogger(__name__)


@dataclass
class Settings:
    max_new_tokens: int = 128
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    gamma: int = 4  # drafted tokens per window
    kappa: int = 8  # early-exit candidates per window position
    exit_layer: int | None = None  # None: chosen for the pair (see mirror.MirrorSpeculative)
    branch_budget: int = 2  # branch-complete rollouts per step
    exit_head: str = "auto"  # early-exit LM head: auto | exact | int8 (see early_exit.py)
    exit_lens: str = "auto"  # auto (the shipped lens of the target, if any) | off | a lens file
    lane_timeout_s: float = 300.0  # a draft lane silent this long is declared stalled
    streams: str = "off"  # draft stream heads: auto (the pair's trained file if any) | off
    draft_vocab: str = "full"  # the draft's proposal vocabulary: full | auto (the shipped file) | a file

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)

    def validate(self, pair: ModelPair, prompt_len: int) -> None:
        ctx = pair.context_length
        checks = [
            (prompt_len >= 1, "The prompt is empty: give at least one token."),
            (self.max_new_tokens >= 1, f"max new tokens must be at least 1 (got {self.max_new_tokens})."),
            (prompt_len < ctx, f"The prompt has {prompt_len} tokens; the target's context holds {ctx}."),
            (prompt_len + self.max_new_tokens + self.gamma + 1 <= ctx,
             f"prompt ({prompt_len} tokens) + max new tokens ({self.max_new_tokens}) + window "
             f"exceeds the target's context of {ctx} tokens: lower max new tokens."),
            (1 <= self.gamma <= 32, f"gamma must be between 1 and 32 (got {self.gamma})."),
            (1 <= self.kappa <= min(64, pair.vocab_size),
             f"kappa must be between 1 and {min(64, pair.vocab_size)} (got {self.kappa})."),
            (1 <= self.branch_budget <= 16, f"branch budget must be between 1 and 16 (got {self.branch_budget})."),
            (0.0 <= self.temperature <= 10.0, f"temperature must be between 0 and 10 (got {self.temperature})."),
            (0.0 < self.top_p <= 1.0, f"top-p must be in (0, 1] (got {self.top_p})."),
            (self.top_k >= 0, f"top-k must be 0 (off) or positive (got {self.top_k})."),
        ]
        checks.append((self.exit_head in EXIT_HEAD_CHOICES,
                       f"exit head must be one of {', '.join(EXIT_HEAD_CHOICES)} (got {self.exit_head!r})."))
        checks.append((self.exit_lens in LENS_CHOICES or str(self.exit_lens).endswith(".safetensors"),
                       f"exit lens must be auto, off or a .safetensors lens file (got {self.exit_lens!r})."))
        checks.append((self.streams in ("auto", "off"), f"streams must be auto or off (got {self.streams!r})."))
        checks.append((self.draft_vocab in draft_vocab.CHOICES or str(self.draft_vocab).endswith(".safetensors"),
                       f"draft vocab must be auto, full or a .safetensors vocabulary file (got {self.draft_vocab!r})."))
        n = pair.target_layers
        if self.exit_layer is not None:
            checks.append((1 <= self.exit_layer <= n - 1,
                           f"exit layer must be between 1 and {n - 1} for this {n}-layer target (got {self.exit_layer})."))
        for ok, message in checks:
            if not ok:
                raise MirrorSDError(message)


def generator_for(seed: int, *keys) -> torch.Generator:
    """A CPU generator seeded from (seed, keys): each step and each branch draws from its own
    stream, so seeded runs reproduce however the two lanes' timing interleaves."""
    digest = hashlib.sha256(repr((seed,) + keys).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


class Run:
    """The record of one generation: committed tokens, counters, spans, incremental text."""

    def __init__(self, pair: ModelPair, prompt_ids: list[int], settings: Settings):
        self.pair = pair
        self.settings = settings
        self.prompt_ids = list(prompt_ids)
        self.new_ids: list[int] = []
        self.spans: list[Span] = []
        self.target_forwards = 0
        self.drafted = 0
        self.accepted = 0
        self.hits = 0
        self.misses = 0
        self.steps = 0
        self.info: dict = {}  # method-specific facts for the stats (e.g. Mirror's exit layer and lens)
        self.done = False
        self.cancelled = False
        self._text = ""
        self._eos = pair.eos_token_ids
        self._spans_sent = 0
        self.t0 = time.perf_counter_ns()

    def new_spans(self) -> list[Span]:
        """Spans recorded (by any lane) since the last call, for live streaming."""
        end = len(self.spans)
        out, self._spans_sent = self.spans[self._spans_sent:end], end
        return out

    @property
    def committed(self) -> list[int]:
        return self.prompt_ids + self.new_ids

    @contextmanager
    def span(self, lane: str, label: str, device=None, step: int = -1, detail: str = ""):
        if device is not None:
            lane_sync(device)
        start = time.perf_counter_ns()
        yield
        if device is not None:
            lane_sync(device)
        self.spans.append(Span(lane, label, start, time.perf_counter_ns(), step, detail))

    def commit(self, step: int, tokens: list[int], sources: list[str], hit=None) -> Commit | None:
        """Append tokens, stopping at an end-of-sequence token or at max_new_tokens."""
        room = self.settings.max_new_tokens - len(self.new_ids)
        tokens, sources = tokens[:room], sources[:room]
        for i, t in enumerate(tokens):
            if t in self._eos:
                tokens, sources = tokens[:i + 1], sources[:i + 1]
                self.done = True
                break
        self.new_ids.extend(tokens)
        if len(self.new_ids) >= self.settings.max_new_tokens:
            self.done = True
        if not tokens:
            return None
        return Commit(step, list(tokens), list(sources), self._text_delta(), hit)

    def _text_delta(self) -> str:
        text = self.pair.decode(self.new_ids)
        if text.endswith("\ufffd") and not self.done:  # a character split over tokens: wait
            return ""
        delta = text[len(self._text):] if text.startswith(self._text) else text
        self._text = text
        return delta

    def stats(self, method: str) -> dict:
        wall_s = (time.perf_counter_ns() - self.t0) / 1e9
        n = len(self.new_ids)
        chances = self.hits + self.misses
        return {
            "method": method,
            "new_tokens": n,
            "wall_s": wall_s,
            "tokens_per_s": n / wall_s if wall_s > 0 else 0.0,
            "target_forwards": self.target_forwards,
            "mean_accepted": n / self.target_forwards if self.target_forwards else 0.0,
            "steps": self.steps,
            "drafted": self.drafted,
            "accepted_drafts": self.accepted,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            "hit_rate": self.hits / chances if chances else None,
            "hits": self.hits,
            "fallbacks": self.misses,
            "draft_hidden_fraction": draft_hidden_fraction(self.spans),
            "cancelled": self.cancelled,
            "prompt_tokens": len(self.prompt_ids),
            **self.info,
        }


class Decoder(ABC):
    method = "base"
    drafts = True  # uses the draft model (AR does not)
    lanes = 1  # models running at the same time (placement.method_threads gives the cores)

    def __init__(self, pair: ModelPair, settings: Settings | None = None):
        self.pair = pair
        self.settings = settings or Settings()
        self._vocab: draft_vocab.InUse | None = None  # set per run by generate()

    def generate(self, prompt_ids: list[int], cancel: threading.Event | None = None) -> Iterator[Event]:
        cancel = cancel or threading.Event()
        run = Run(self.pair, prompt_ids, self.settings)
        try:
            self.settings.validate(self.pair, len(prompt_ids))
        except MirrorSDError as e:
            yield Error(str(e))
            yield Finish(run.stats(self.method), [], "")
            return
        with self._proposals() as vocab:
            self._vocab = vocab
            if vocab is not None:
                run.info.update(draft_vocab=vocab.size, draft_vocab_note=vocab.line)
                if vocab.warn:
                    yield Notice(vocab.line)
            self._prepare()  # one-time work per model (not part of this run's time)
            yield from self._timed(run, cancel)
        yield from run.new_spans()
        yield Finish(run.stats(self.method), list(run.new_ids), run.pair.decode(run.new_ids))

    def _proposals(self):
        """The draft's proposal vocabulary for this run (draft_vocab.py); AR has no draft."""
        return draft_vocab.use(self.pair, self.settings.draft_vocab) if self.drafts else nullcontext()

    def _timed(self, run: Run, cancel: threading.Event) -> Iterator[Event]:
        with method_threads(self.pair, self.lanes):
            run.t0 = time.perf_counter_ns()
            try:
                for event in self._decode(run, cancel):
                    yield event
                    if cancel.is_set() and not run.done:
                        run.cancelled = True
                        break
            except MirrorSDError as e:
                yield Error(str(e))
            except torch.OutOfMemoryError:
                yield Error("Out of memory while decoding: try a shorter prompt, fewer new tokens or a smaller pair.")
            except Exception as e:  # never a traceback in the UI; the log keeps it
                log.exception("decoding failed")
                yield Error(f"Decoding failed: {type(e).__name__}: {e}")
            finally:
                self._close()

    @abstractmethod
    def _decode(self, run: Run, cancel: threading.Event) -> Iterator[Event]:
        ...

    def _prepare(self) -> None:
        """Build what a method needs once per model pair (cached across runs)."""

    def _close(self) -> None:
        """Release lanes (threads, caches); called however the run ends."""
