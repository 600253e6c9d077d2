"""How many tokens the draft writes each step: the window policy (pure: no models, no threads).

`fixed`: gamma tokens every step. `adaptive`, after transformers' assisted generation (its
"heuristic" schedule of num_assistant_tokens and its assistant_confidence_threshold):
- the window's length grows by 2 after a fully accepted window and shrinks by 1 after a
  rejection, within [window_min, window_max], starting at gamma;
- the draft stops early when its own probability of the token it just drafted falls below
  the threshold (the token is kept: it is verified like the others), or when it drafted an
  end-of-sequence token;
- a window never drafts more than the run can still commit (max_new_tokens - committed - 1,
  at least 1: the target adds one token of its own).

Lossless by construction: the length depends only on the draft's own tokens and
probabilities and on the verdicts of earlier steps, never on the target's distributions for
the window being verified. Drafting up to any such stopping rule is speculative sampling with
a window chosen before the target looks, so the acceptance rule still makes every committed
token the target's own (greedy) or distributed as the target's (sampling).

Stop reasons (why a window has its length): "gamma" (the policy's length), "confidence",
"eos", "room".
"""
from __future__ import annotations

from dataclasses import dataclass, replace

WINDOW_CHOICES = ("fixed", "adaptive")
# What the CLI, the benchmark and the app use unless told otherwise: adaptive windows ran faster
# than fixed ones for SD and Mirror-SD in two interleaved int8 benchmarks of the default pair
# (docs/performance.md, "Draft windows"). Settings itself keeps fixed, the reference the engine's
# tests are written against.
DEFAULT_WINDOW = "adaptive"
STOP_REASONS = ("gamma", "confidence", "eos", "room")
GROW, SHRINK = 2, 1  # transformers' heuristic schedule: +2 after a full accept, -1 after a rejection


@dataclass
class WindowPolicy:
    kind: str = "fixed"
    gamma: int = 4
    threshold: float = 0.4
    min_len: int = 1
    max_len: int = 12
    eos: frozenset = frozenset()
    length: int = 0  # the next window's length before the room cap (set from gamma)

    def __post_init__(self):
        self.max_len = max(self.max_len, self.min_len)
        if not self.length:
            self.length = self.gamma if self.fixed else min(max(self.gamma, self.min_len), self.max_len)

    @property
    def fixed(self) -> bool:
        return self.kind != "adaptive"

    def plan(self, room: int) -> tuple[int, str]:
        """(tokens to draft at most, the reason if the window reaches it). room: tokens the
        run may still commit."""
        if not self.fixed and room - 1 < self.length:
            return max(1, room - 1), "room"
        return self.length, "gamma"

    def stop(self, token: int, q: float) -> str | None:
        """Why the window ends after drafting `token` with draft probability `q`, or None."""
        if self.fixed:
            return None
        if token in self.eos:
            return "eos"
        if q < self.threshold:
            return "confidence"
        return None

    def cut(self, tokens: list[int], q_probs: list[float], room: int) -> tuple[int, str]:
        """(length, stop reason) of a window already drafted (`tokens`, with their draft
        probabilities) under this policy: the same window the policy's rollout would draw."""
        cap, reason = self.plan(room)
        for i, (t, q) in enumerate(zip(tokens[:cap], q_probs)):
            why = self.stop(t, q)
            if why is not None:
                return i + 1, why
        return min(cap, len(tokens)), reason

    def next_length(self, drafted: int, accepted: int) -> int:
        """The next window's length (before the room cap) after a verdict: `accepted` of
        `drafted` tokens. Pure: `observe` applies it."""
        if self.fixed or drafted == 0:
            return self.length
        if accepted >= drafted:
            return min(self.length + GROW, self.max_len)
        return max(self.length - SHRINK, self.min_len)

    def plan_after(self, drafted: int, accepted: int, room: int) -> tuple[int, str]:
        """What `plan(room)` will say once `observe(drafted, accepted)` has run, without
        running it: Mirror-SD's branch rooted at depth `accepted` is the window after exactly
        that verdict, so it can be drafted to its own length before the verdict is known."""
        return replace(self, length=self.next_length(drafted, accepted)).plan(room)

    def observe(self, drafted: int, accepted: int) -> None:
        """Update the next length from a verdict: `accepted` of `drafted` tokens."""
        self.length = self.next_length(drafted, accepted)


def policy_for(settings, eos=(), cap: int | None = None) -> WindowPolicy:
    """The run's policy from Settings (window, gamma, window_threshold/min/max); `cap` bounds
    the length (Mirror-SD with branch_extend off: its branches are gamma tokens long)."""
    top = settings.window_max if cap is None else min(settings.window_max, cap)
    return WindowPolicy(settings.window, settings.gamma, settings.window_threshold,
                        min(settings.window_min, top), top, frozenset(eos))
