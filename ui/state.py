"""The app's state, in one object: the loaded pairs, the cached results, the Stop events, the
pairs that failed to load, and the background preparation. `build_demo` makes one and hands
it to the handlers (handlers.Handlers, pairbox.PairBox)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .session import Cancels, PairCache, PairSpec, ResultCache

KEEP_LOAD_ERRORS = 8  # the last few pairs that failed to load (the pair check box says why)


@dataclass
class AppState:
    pairs: PairCache = field(default_factory=PairCache)
    results: ResultCache = field(default_factory=ResultCache)
    cancels: Cancels = field(default_factory=Cancels)
    load_errors: dict[PairSpec, str] = field(default_factory=dict)
    preparer: object | None = None  # preparing.Preparer, started by launch() (never in test mode)

    @classmethod
    def tiny(cls) -> "AppState":
        """Test mode: every run gets the tiny random pair (no downloads)."""
        return cls(pairs=PairCache.tiny())

    @property
    def is_tiny(self) -> bool:
        return self.pairs.is_tiny

    def remember_load_error(self, spec: PairSpec, error: str) -> None:
        self.load_errors[spec] = error
        while len(self.load_errors) > KEEP_LOAD_ERRORS:
            self.load_errors.pop(next(iter(self.load_errors)))
