"""The exit check: would Mirror-SD's steps whose lanes ran one after the other have hit?

Where the two lanes share one CPU's cores, the overlap gate runs most steps with the lanes in
turn (gate.py): no early exit is read and no branch races the verdict, so the run measures no
hit or miss there. On devices of their own those steps would overlap, and a projection needs
how often they would hit. The check answers that after the run, untimed: during such a step
the exit layer's forward hook only keeps that layer's hidden rows (a copy of a few rows; no
head, no scoring); once the run's clock has stopped, the check reads them through the exit
head, scores the roots as the draft lane scores them (scoring.score_roots, the same weights)
and asks whether the verdict's root (A, c) is among the first `branch_budget`: exactly when an
overlapped step hits (draft_lane._race).

One input a step in turn lacks is the draft's distribution after d_gamma (q_bonus: the draft
lane's extend forward, which only an overlapped step runs). The check scores the
all-accepted roots from the early exit alone. How much that changes the outcome is measured
in the same run: the overlapped steps, whose real outcome is known, are checked the same way
(q_bonus left out) and `agree` counts the steps where the check and the lane agree.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mirror_sd.engine.drafting import Window
from mirror_sd.engine.mirror.scoring import rank_of, score_roots

MAX_ROWS = 256  # drafted rows kept per run (each holds the draft's distribution until the check)


@dataclass
class Pending:
    step: int
    window: Window
    verdict: tuple[int, int]  # (A, c)
    rows: torch.Tensor | None = None  # lanes in turn: the exit layer's hidden rows [gamma+1, H]
    proposals: tuple | None = None  # overlapped: the early exit's (ids, logprobs) as the lane read them
    hit: bool | None = None  # overlapped: the lane's outcome


class ExitCheck:
    """The steps to check, collected during a run (cheap), checked after it (`result`)."""

    def __init__(self, max_rows: int = MAX_ROWS):
        self.pending: list[Pending] = []
        self.rows, self.max_rows = 0, max_rows

    def room(self, window: Window) -> bool:
        """Whether a step verifying `window` can still be kept (a decode step has no race)."""
        return bool(window.tokens) and self.rows + len(window.tokens) <= self.max_rows

    def add(self, item: Pending) -> None:
        if self.room(item.window):
            self.pending.append(item)
            self.rows += len(item.window.tokens)

    def result(self, head, kappa: int, budget: int, exit_weight: float, accept_weight: float) -> dict:
        """{"in_turn": steps checked, "would_hit": of them, "budget", "overlapped": overlapped
        steps checked, "agree": of them, "overlapped_hits": the lane's hits among them,
        "overlapped_found": the check's, "steps": [{"step", "rank", "would_hit", "exit_top"}]}:
        rank is the verdict root's place among the scored roots (-1: not among them);
        exit_top the early exit's top 3 at the verdict's depth."""
        steps, in_turn, would, overlapped, agree, found, hits = [], 0, 0, 0, 0, 0, 0
        for p in self.pending:
            proposals = p.proposals if p.proposals is not None else head.proposals(p.rows, kappa)
            rank = verdict_rank(p.window, p.verdict, proposals, kappa, exit_weight, accept_weight)
            hit = 0 <= rank < budget
            if p.hit is None:
                in_turn += 1
                would += hit
                A = p.verdict[0]
                steps.append({"step": p.step, "rank": rank, "would_hit": hit,
                              "exit_top": [int(t) for t in proposals[0][A][:3]]})
            else:
                overlapped += 1
                agree += hit == p.hit
                found += hit
                hits += bool(p.hit)
        self.pending.clear()
        return {"in_turn": in_turn, "would_hit": would, "budget": budget, "overlapped": overlapped,
                "agree": agree, "overlapped_hits": hits, "overlapped_found": found, "steps": steps}


def verdict_rank(window: Window, verdict: tuple[int, int], proposals: tuple, kappa: int,
                 exit_weight: float, accept_weight: float) -> int:
    """The verdict root's place among the roots scored from `window`'s draft distributions and
    the early exit's `proposals`, without the draft's view after d_gamma (-1: not scored)."""
    q_rows = window.q_rows.to(torch.float64)
    width = max([q_rows.shape[1]] + [int(t) + 1 for row in proposals[0] for t in row])
    if q_rows.shape[1] < width:  # an exit id past the draft's vocabulary: probability 0 there
        q_rows = torch.cat([q_rows, q_rows.new_zeros(q_rows.shape[0], width - q_rows.shape[1])], 1)
    q_bonus = q_rows.new_zeros(width)
    roots = score_roots(window.tokens, q_rows, q_bonus, proposals, kappa, exit_weight, accept_weight)
    return rank_of(roots).get((int(verdict[0]), int(verdict[1])), -1)
