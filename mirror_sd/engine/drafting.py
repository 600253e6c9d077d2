"""Token choice and the serial draft rollout, shared by the decoders."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from mirror_sd.engine.acceptance import Sampling, probs_from_logits, sample
from mirror_sd.engine.lanes import Lane


@dataclass
class Window:
    """gamma drafted tokens and the draft distributions they were drawn from."""
    tokens: list[int]
    q_rows: torch.Tensor  # [gamma, V] float64 on CPU: warped q (softmax for greedy)
    stop: str = "gamma"  # why the window has its length (windows.STOP_REASONS)
    source: str = "draft"  # who drafted it: draft (the draft model) | lookup (proposers.py)
    note: str = ""  # the priced policy's reason in words (windows.py, pricing.explain)
    draft_s: float = 0.0  # measured time to draft it (the decoder sets it; per-proposer figures)
    first_s: float = 0.0  # serial rollout: its first forward (the catch-up with the committed text)
    behind: int = 0  # committed tokens the draft model lacked before drafting it (its catch-up's length)

    def cut(self, n: int, stop: str) -> "Window":
        """The first n drafted tokens, stopped for `stop`."""
        return Window(self.tokens[:n], self.q_rows[:n], stop, self.source, self.note)

    @classmethod
    def empty(cls, stop: str, note: str = "") -> "Window":
        """No drafted token: the step is a plain target decode (a priced window of 0)."""
        return cls([], torch.zeros(0, 0, dtype=torch.float64), stop, "", note)

    @property
    def q_probs(self) -> list[float]:
        return [float(self.q_rows[i, t]) for i, t in enumerate(self.tokens)]


def choose(probs_row: torch.Tensor, logits_row: torch.Tensor, sampling: Sampling,
           generator: torch.Generator | None) -> int:
    """Greedy: exact argmax of the logits. Sampling: a draw from the warped distribution."""
    if sampling.greedy:
        return int(logits_row.argmax())
    return sample(probs_row, generator)


def to_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """[rows, V] logits on any device -> float64 probabilities on the CPU (lane boundary)."""
    return probs_from_logits(logits.detach().to("cpu"), sampling)


def serial_rollout(lane: Lane, committed: list[int], gamma: int, sampling: Sampling,
                   generator: torch.Generator | None, stop=None) -> Window:
    """Draft gamma tokens after `committed`, one forward each (the last one is not fed).

    stop: (token, its draft probability) -> a reason to end the window after that token, or
    None (windows.WindowPolicy.stop); the window then ends early with that reason."""
    start = time.perf_counter_ns()
    logits = lane.feed(lane.sync(committed), logits_to_keep=1)[-1:]
    first_s = (time.perf_counter_ns() - start) / 1e9  # no device sync: a CPU figure, for pricing only
    tokens, rows = [], []
    for k in range(gamma):
        probs = to_probs(logits, sampling)
        token = choose(probs[0], logits[0], sampling, generator)
        tokens.append(token)
        rows.append(probs[0])
        why = stop(token, float(probs[0, token])) if stop is not None else None
        if why is not None:
            return Window(tokens, torch.stack(rows), why, first_s=first_s)
        if k < gamma - 1:
            logits = lane.feed([token], logits_to_keep=1)
    return Window(tokens, torch.stack(rows), first_s=first_s)
