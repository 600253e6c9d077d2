"""The record of one generation (committed tokens, counters, spans) and its statistics."""
from __future__ import annotations

import hashlib
import time
from contextlib import contextmanager

import torch

from mirror_sd.engine.events import Commit, Span
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.stats import draft_hidden_fraction, split_prefill
from mirror_sd.placement import lane_sync


def generator_for(seed: int, *keys) -> torch.Generator:
    """A CPU generator seeded from (seed, keys): each step and each branch draws from its own
    stream, so seeded runs reproduce however the two lanes' timing interleaves."""
    digest = hashlib.sha256(repr((seed,) + keys).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


class Run:
    """The record of one generation: committed tokens, counters, spans, incremental text."""

    def __init__(self, pair, prompt_ids: list[int], settings: Settings):
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
        self.window_lengths: list[int] = []  # drafted tokens per verified window (windows.py)
        self.window_stops: dict[str, int] = {}  # why those windows stopped -> count
        self.info: dict = {}  # method-specific facts for the stats (e.g. Mirror's exit layer and lens)
        self.done = False
        self.cancelled = False
        self.first_commit: tuple[int, int] | None = None  # (perf_counter_ns, tokens) of the first commit
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

    @property
    def room(self) -> int:
        """Tokens the run may still commit."""
        return self.settings.max_new_tokens - len(self.new_ids)

    def count_source(self, source: str, drafted: int, accepted: int, seconds: float = 0.0) -> None:
        """Per proposer (draft | lookup; "decode" for a step that drafted nothing): windows,
        drafted and accepted tokens, drafting seconds (stats `proposers`)."""
        row = self.info.setdefault("proposers", {}).setdefault(
            source or "decode", {"windows": 0, "drafted": 0, "accepted": 0, "draft_s": 0.0})
        row["windows"] += 1
        row["drafted"] += drafted
        row["accepted"] += accepted
        row["draft_s"] += seconds

    def record_window(self, length: int, stop: str) -> None:
        self.window_lengths.append(length)
        self.window_stops[stop] = self.window_stops.get(stop, 0) + 1

    @contextmanager
    def span(self, lane: str, label: str, device=None, step: int = -1, detail: str = ""):
        if device is not None:
            lane_sync(device)
        start = time.perf_counter_ns()
        note = {"detail": detail}  # the body may set the detail once it knows (e.g. tokens drafted)
        yield note
        if device is not None:
            lane_sync(device)
        self.spans.append(Span(lane, label, start, time.perf_counter_ns(), step, note["detail"]))

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
        if self.first_commit is None:
            self.first_commit = (time.perf_counter_ns(), len(tokens))
        return Commit(step, list(tokens), list(sources), self._text_delta(), hit)

    def _text_delta(self) -> str:
        text = self.pair.decode(self.new_ids)
        if text.endswith("\ufffd") and not self.done:  # a character split over tokens: wait
            return ""
        delta = text[len(self._text):] if text.startswith(self._text) else text
        self._text = text
        return delta

    def stats(self, method: str) -> dict:
        end = time.perf_counter_ns()
        wall_s = (end - self.t0) / 1e9
        n = len(self.new_ids)
        chances = self.hits + self.misses
        return {
            "method": method,
            "new_tokens": n,
            "wall_s": wall_s,
            "tokens_per_s": n / wall_s if wall_s > 0 else 0.0,
            **split_prefill(self.t0, end, n, self.first_commit),
            "target_forwards": self.target_forwards,
            "mean_accepted": n / self.target_forwards if self.target_forwards else 0.0,
            "steps": self.steps,
            "drafted": self.drafted,
            "accepted_drafts": self.accepted,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            "hit_rate": self.hits / chances if chances else None,
            "hits": self.hits,
            "fallbacks": self.misses,
            "window_lengths": list(self.window_lengths),
            "window_stops": dict(self.window_stops),
            "draft_hidden_fraction": draft_hidden_fraction(self.spans),
            "cancelled": self.cancelled,
            "prompt_tokens": len(self.prompt_ids),
            **self.info,
        }
