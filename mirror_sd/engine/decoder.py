"""The decoder base: what every decoding method shares.

A decoder is a class with `generate(prompt_ids, cancel=None)`: a generator of typed events
(see events.py) that ends with exactly one `Finish` (or an `Error` then `Finish`). A consumer
that reads on to the generator's end lets it add untimed figures to Finish's stats after the
run (`_after_run`: Mirror-SD's exit check); collect() does. A method
plugs in by subclassing `Decoder`, implementing `_decode(run, cancel)` and adding itself to
registry.py.
"""
from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from contextlib import nullcontext
from typing import Iterator

import torch

from mirror_sd.engine.events import Error, Event, Finish, Notice
from mirror_sd.engine.run import Run
from mirror_sd.engine.settings import ALL_FIELDS, METHOD_USES, Settings
from mirror_sd.errors import MirrorSDError
from mirror_sd.placement import method_threads
from mirror_sd.proposals import draft_vocab

log = logging.getLogger(__name__)


class Decoder(ABC):
    method = "base"
    drafts = True  # uses the draft model (AR does not)
    lanes = 1  # models running at the same time (placement.method_threads gives the cores)

    def __init__(self, pair, settings: Settings | None = None):
        self.pair = pair
        self.settings = settings or Settings()
        self._vocab: draft_vocab.InUse | None = None  # set per run by generate()

    def generate(self, prompt_ids: list[int], cancel: threading.Event | None = None) -> Iterator[Event]:
        cancel = cancel or threading.Event()
        run = Run(self.pair, prompt_ids, self.settings)
        try:
            # the settings its registry entry reads (all of them for a decoder not registered)
            self.settings.validate(self.pair, len(prompt_ids), METHOD_USES.get(self.method, ALL_FIELDS))
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
        finish = Finish(run.stats(self.method), list(run.new_ids), run.pair.decode(run.new_ids))
        yield finish
        # untimed: a consumer reading to the end asks past Finish, after the run's figures
        self._after_run(run, finish.stats)

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

    def _after_run(self, run: Run, stats: dict) -> None:
        """Work on the finished run outside its time (Mirror-SD's exit check), adding to
        Finish's `stats` once the consumer asks for the event after Finish."""

    def _prepare(self) -> None:
        """Build what a method needs once per model pair (cached across runs)."""

    def _close(self) -> None:
        """Release lanes (threads, caches); called however the run ends."""
