"""The one consumer of a run's events: a decoder's events in, a record with its spans and
figures out. The command line's decode, the app's timed run and the benchmark's engine runner
all read a run through `collect`.

    record = collect(decoder.generate(prompt_ids), "mirror", listener=on_event)
    record.figures()   # new_tokens, wall_s, tokens_per_s, prefill_s, decode_tokens_per_s, ...

`listener(event, t_ns)` hears each event as it arrives (t_ns: its perf_counter_ns), after the
record holds it: the app's page and the command line's streaming subscribe this way. It runs
inside the timed run, so it must stay cheap (append, no rendering).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from mirror_sd.engine.events import Commit, EarlyExit, Error, Event, Finish, Notice, Span, Verify
from mirror_sd.engine.stats import split_prefill

Listener = Callable[[Event, int], None]


@dataclass
class Collected:
    """One method's run: what its events said, and when (perf_counter_ns)."""
    method: str
    start_ns: int  # when the collector asked for the first event (the run's timed start)
    end_ns: int = 0  # when Finish arrived (what the decoder does after it is untimed), else the last event
    spans: list[Span] = field(default_factory=list)
    steps: list[Event] = field(default_factory=list)  # EarlyExit and Verify, in order
    notices: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    finish: Finish | None = None
    first_commit: tuple[int, int] | None = None  # (arrival perf_counter_ns, tokens)
    committed: int = 0  # tokens committed so far

    def add(self, event: Event, t_ns: int) -> None:
        if isinstance(event, Span):
            self.spans.append(event)
        elif isinstance(event, (EarlyExit, Verify)):
            self.steps.append(event)
        elif isinstance(event, Commit):
            if self.first_commit is None and event.token_ids:
                self.first_commit = (t_ns, len(event.token_ids))
            self.committed += len(event.token_ids)
        elif isinstance(event, Notice):
            self.notices.append(event.message)
        elif isinstance(event, Error):
            self.errors.append(event.message)
        elif isinstance(event, Finish):
            self.finish = event

    @property
    def error(self) -> str | None:
        return self.errors[0] if self.errors else None

    @property
    def token_ids(self) -> list[int]:
        return list(self.finish.token_ids) if self.finish else []

    @property
    def text(self) -> str:
        return self.finish.text if self.finish else ""

    @property
    def wall_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def stats(self) -> dict:
        """The engine's statistics of the run (Finish's; a copy), or the bare minimum."""
        return dict(self.finish.stats) if self.finish else {"method": self.method, "new_tokens": 0}

    def figures(self) -> dict:
        """The run's figures (see `figures`)."""
        return figures(self.stats, self.start_ns, self.end_ns, self.first_commit, self.committed)


FIGURES = ("new_tokens", "wall_s", "tokens_per_s", "prefill_s", "decode_s", "decode_tokens",
           "decode_tokens_per_s")


def figures(stats: dict, start_ns: int, end_ns: int, first_commit, committed: int) -> dict:
    """new_tokens, wall_s, tokens_per_s and engine/stats.split_prefill's time to first token
    and decode rate: the engine's own (its Finish stats) where they carry them, else from the
    observed times by the same rule (a trace, a run without Finish): `first_commit`
    (perf_counter_ns, tokens) of the first Commit's arrival, `committed` tokens in all."""
    wall = stats.get("wall_s", (end_ns - start_ns) / 1e9)
    tokens = stats.get("new_tokens", committed)
    out = {"new_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall if wall > 0 else 0.0}
    if "prefill_s" in stats:
        return dict(out, **{k: stats.get(k) for k in FIGURES[3:]})
    end = start_ns + int(wall * 1e9)
    return dict(out, **split_prefill(start_ns, max(end, first_commit[0]) if first_commit else end,
                                     tokens, first_commit))


def collect(events: Iterable[Event], method: str, listener: Listener | None = None) -> Collected:
    """Read a run's events to the end: the record, and each event to `listener` as it comes."""
    record = Collected(method, time.perf_counter_ns())
    for event in events:
        now = time.perf_counter_ns()
        record.add(event, now)
        if isinstance(event, Finish):
            record.end_ns = now
        if listener is not None:
            listener(event, now)
    record.end_ns = record.end_ns or time.perf_counter_ns()
    return record
