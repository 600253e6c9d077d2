"""Which (depth, token) roots the draft lane rolls out first.

A root (j, v) pays off when the target stops at depth j (accepts d_1..d_j, not d_{j+1}) and
its own token there is v. Its score estimates that chance:
  P(stop at j) = prod_{i<=j} a_i * (1 - a_{j+1})     (a_i: the draft's probability of d_i,
                                                     its own estimate that d_i is accepted)
  P(v | stop)  = w * exit_p(v) + (1 - w) * q_res(v)  (early exit renormalized without d_{j+1};
                                                     the draft's residual distribution)
At j = gamma (everything accepted) the token is the bonus and P(v) mixes the early exit
with the draft's distribution after d_gamma. Before the early exit arrives, w = 0.
With `accept_weight` u > 0 the acceptance estimates mix in the early exit too:
  a_i = u * exit_p(d_i) + (1 - u) * q(d_i)
(worth it only when the exit is close to the final layer, i.e. with a trained exit lens).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mirror_sd import measured

# mirror_sd/data/measured.json "scoring_weights": the values, and the research/hit_rate_sim.py
# commands that chose them on recorded int8 runs (docs/exit-lens.md section 6)
_WEIGHTS = measured.values("scoring_weights")
# the shares of P(v | stop) and of the acceptance estimates a_i taken from the raw early exit
EXIT_WEIGHT = _WEIGHTS["exit_weight"]
ACCEPT_WEIGHT = _WEIGHTS["accept_weight"]
# The same with a trained exit lens (see exit_lens.py)
EXIT_WEIGHT_LENS = _WEIGHTS["exit_weight_lens"]
ACCEPT_WEIGHT_LENS = _WEIGHTS["accept_weight_lens"]


@dataclass(frozen=True)
class Root:
    depth: int  # the branch continues y, d_1..d_depth, token
    token: int
    score: float


def score_roots(drafted: list[int], q_rows: torch.Tensor, q_bonus: torch.Tensor,
                proposals: tuple | None, kappa: int, exit_weight: float = EXIT_WEIGHT,
                accept_weight: float = ACCEPT_WEIGHT) -> list[Root]:
    """All candidate roots, best first.

    drafted: d_1..d_gamma; q_rows: [gamma, V] the draft distributions they came from;
    q_bonus: [V] the draft's distribution after d_gamma; proposals: (ids, logprobs), each
    [gamma+1][kappa], from the early exit, or None when it has not arrived yet."""
    gamma = len(drafted)
    weight = exit_weight if proposals is not None else 0.0
    u = accept_weight if proposals is not None else 0.0
    reach, roots = 1.0, []
    for j in range(gamma + 1):
        dist = q_rows[j] if j < gamma else q_bonus  # the draft's view of the token after d_j
        d_next = drafted[j] if j < gamma else None
        exit_p = {}
        if proposals is not None:
            exit_p = {t: math.exp(lp) for t, lp in zip(proposals[0][j], proposals[1][j])}
        q_next = float(dist[d_next]) if d_next is not None else 0.0
        a_next = u * exit_p.get(d_next, 0.0) + (1 - u) * q_next if d_next is not None else 0.0
        stop = reach * (1.0 - a_next)
        exit_rest = max(1.0 - exit_p.get(d_next, 0.0), 1e-9)
        candidates = list(exit_p) + torch.topk(dist, min(kappa, dist.numel())).indices.tolist()
        for v in dict.fromkeys(candidates):
            if v == d_next:
                continue  # a stop at j means the target did not take d_{j+1}
            p_v = weight * exit_p.get(v, 0.0) / exit_rest + (1 - weight) * float(dist[v]) / max(1.0 - q_next, 1e-9)
            roots.append(Root(j, int(v), stop * p_v))
        reach *= a_next
    roots.sort(key=lambda r: -r.score)
    return roots


def rank_of(roots: list[Root]) -> dict[tuple[int, int], int]:
    """{(depth, token): place in `roots`} (0 = best). With budget b the draft lane rolls out
    exactly the roots of place < b once the early exit has arrived."""
    return {(r.depth, r.token): i for i, r in enumerate(roots)}
