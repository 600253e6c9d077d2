"""Typed events that every decoder yields.

The UI and the benchmark consume these and never touch tensors: every field is a plain
Python value (ints, floats, lists, strings). `to_dict()` gives a JSON-ready dict with a
`type` field; `event_from_dict()` turns it back (used to replay saved traces).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class Event:
    def to_dict(self) -> dict:
        d = asdict(self)
        d["type"] = type(self).__name__
        return d


@dataclass
class StepStart(Event):
    step: int
    committed: int  # tokens committed before this step (prompt excluded)
    window: list[int] = field(default_factory=list)  # drafted tokens d_1..d_gamma verified this step


@dataclass
class EarlyExit(Event):
    """Top-kappa of the target's final norm + LM head applied at `layer` (after the exit lens
    when `lens`), per window position.

    Position j guesses the target's token after `y_n, d_1..d_j` (j = 0..gamma).
    """
    step: int
    layer: int
    positions: list[int]
    token_ids: list[list[int]]  # [gamma+1][kappa]
    logprobs: list[list[float]]  # [gamma+1][kappa]
    lens: bool = False  # read through a trained exit lens (exit_lens.py) before the norm


@dataclass
class DraftBranch(Event):
    """One branch-complete rollout of the draft from root (depth, token).

    status: "taken" (reused as the next window: a hit), "cancelled" (stale when the verdict
    came, or dropped when the early exit ranked it below the budget), or "serial" (rolled out
    one token per forward: after a miss, the first window, and every plain SD window).

    rank (Mirror-SD): the root's place in the step's roots as scored once the early exit
    arrived (0 = best; -1: not among them; None: not scored, e.g. the first window and SD).
    The step's "taken" or "serial" branch is rooted at the verdict (A, c), so its rank is the
    verdict's: the step hits exactly when 0 <= rank < branch budget.
    """
    step: int
    depth: int  # root depth j: continuation of y, d_1..d_j, root_token
    root_token: int
    score: float
    tokens: list[int]  # drafted tokens after the root
    q_probs: list[float]  # draft probability of each drafted token (as sampled)
    status: str
    rank: int | None = None  # place among the step's scored roots (see above)


@dataclass
class Verify(Event):
    """Verification of one window against the target's final distributions."""
    step: int
    drafted: list[int]
    accepted: int  # A: number of drafted tokens accepted
    p_probs: list[float]  # target probability of each drafted token
    q_probs: list[float]  # draft probability of each drafted token
    token: int  # the target's own token at position A
    kind: str  # "correction" (rejected at A+1), "bonus" (all accepted), "plain" (no draft)
    stop: str = ""  # why the window has len(drafted) tokens: gamma | confidence | eos | room | price | probe | match (windows.py)
    price: str = ""  # priced windows: the decision in words, e.g. "drafting 3 would cost 120 ms for 1.9 expected tokens (decoding: 1 in 80 ms); decoded instead"
    source: str = ""  # who drafted the window: draft | lookup ("" when nothing was drafted)


@dataclass
class Commit(Event):
    """Tokens appended to the output. source per token: accepted | correction | bonus | plain."""
    step: int
    token_ids: list[int]
    sources: list[str]
    text: str  # decoded text of these tokens ('' when the decoder has no tokenizer)
    hit: bool | None = None  # Mirror-SD: whether the verified window was a reused branch (a hit)


@dataclass
class Span(Event):
    """A timed interval on one lane, measured with time.perf_counter_ns (device synced)."""
    lane: str  # "target", "draft", "verify", "transfer", ...
    label: str
    start_ns: int
    end_ns: int
    step: int = -1
    detail: str = ""


@dataclass
class Notice(Event):
    """Something the user should know that is not an error (e.g. draft lane failed, fell back)."""
    message: str
    level: str = "warning"


@dataclass
class Error(Event):
    message: str


@dataclass
class Finish(Event):
    stats: dict
    token_ids: list[int]
    text: str


EVENT_TYPES = {cls.__name__: cls for cls in
               (StepStart, EarlyExit, DraftBranch, Verify, Commit, Span, Notice, Error, Finish)}


def event_from_dict(d: dict) -> Event:
    cls = EVENT_TYPES[d["type"]]
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})
