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
lane's extend forward, which only an overlapped step runs). It often decides the step: where
the draft is sure of the token after its window the all-accepted root ranks first. Where the
target kept the whole window, d_gamma is committed text, so one untimed draft forward over the
run's committed tokens (`draft_views`) gives that distribution exactly as the lane had it.
Where the target rejected a drafted token, the check puts the early exit's guesses for the
bonus position in its place (the verdict's own root does not read it; only the all-accepted
roots it competes with do). The overlapped steps, whose real outcome is known, are checked the
same way, and `agree` counts the steps where the check and the lane agree.
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
    n: int  # committed tokens before the step (d_1 is committed[n] when accepted)
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

    def all_accepted(self) -> list[Pending]:
        """The steps whose whole window the target kept: the draft's view after d_gamma is
        the one it has after the committed d_gamma (`draft_views`)."""
        return [p for p in self.pending if p.verdict[0] == len(p.window.tokens)]

    def result(self, head, kappa: int, budget: int, exit_weight: float, accept_weight: float,
               views: dict | None = None) -> dict:
        """{"in_turn": steps checked, "would_hit": of them, "budget", "overlapped": overlapped
        steps checked, "agree": of them, "overlapped_hits": the lane's hits among them,
        "overlapped_found": the check's, "steps": [{"step", "rank", "would_hit", "exit_top"}]}:
        rank is the verdict root's place among the scored roots (-1: not among them);
        exit_top the early exit's top 3 at the verdict's depth."""
        steps, in_turn, would, overlapped, agree, found, hits = [], 0, 0, 0, 0, 0, 0
        for p in self.pending:
            proposals = p.proposals if p.proposals is not None else head.proposals(p.rows, kappa)
            rank = verdict_rank(p.window, p.verdict, proposals, kappa, exit_weight, accept_weight,
                                (views or {}).get(p.step))
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
                 exit_weight: float, accept_weight: float, q_bonus: torch.Tensor | None = None) -> int:
    """The verdict root's place among the roots scored from `window`'s draft distributions,
    the early exit's `proposals` and the draft's view after d_gamma `q_bonus` (when unknown:
    the exit's guesses there); -1: not scored."""
    ids, lps = proposals[0][len(window.tokens)], proposals[1][len(window.tokens)]
    width = max([window.q_rows.shape[1], 0 if q_bonus is None else q_bonus.numel()]
                + [int(t) + 1 for row in proposals[0] for t in row])
    q_rows = _widen(window.q_rows, width)  # an exit id past the draft's vocabulary: probability 0
    if q_bonus is not None:
        q_bonus = _widen(q_bonus, width)
    else:  # the draft's view after d_gamma, unknown: the exit's guesses in its place
        q_bonus = q_rows.new_zeros(width)
        if ids:
            p = torch.tensor(lps, dtype=torch.float64).exp()
            q_bonus[torch.tensor([int(t) for t in ids])] = p / p.sum()
    roots = score_roots(window.tokens, q_rows, q_bonus, proposals, kappa, exit_weight, accept_weight)
    return rank_of(roots).get((int(verdict[0]), int(verdict[1])), -1)


def _widen(t: torch.Tensor, width: int) -> torch.Tensor:
    """`t` in float64 with zeros appended on its last axis up to `width`."""
    t = t.to(torch.float64)
    pad = width - t.shape[-1]
    return torch.cat([t, t.new_zeros(*t.shape[:-1], pad)], -1) if pad > 0 else t


@torch.inference_mode()
def draft_views(lane, committed: list[int], steps: list[Pending], sampling, longest: int = 512) -> dict:
    """{step: the draft's distribution after d_gamma} for steps whose whole window was kept,
    from one forward of the draft `lane` (a fresh plain Lane) over the committed tokens (the
    last `longest` positions at most: steps before them keep the exit's guesses)."""
    from mirror_sd.engine.drafting import to_probs
    where = {p.step: p.n + len(p.window.tokens) - 1 for p in steps}  # d_gamma's index in committed
    first = max(min(where.values(), default=len(committed)), len(committed) - longest)
    keep = len(committed) - first
    if keep <= 0:
        return {}
    logits = lane.feed(list(committed), logits_to_keep=keep)  # rows for committed[first:]
    return {step: to_probs(logits[i - first:i - first + 1], sampling)[0]
            for step, i in where.items() if i >= first}
