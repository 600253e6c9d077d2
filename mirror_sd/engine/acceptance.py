"""The acceptance rule, in one pure module (no models, no threads).

Names: `p` is the target's distribution, `q` the draft's, always.
- Greedy: accept d_i while d_i == argmax p_i; the target's token at the first mismatch (or
  at gamma+1) is argmax p there. Output equals the target's own greedy decoding.
- Sampling (Leviathan et al. 2022, Chen et al. 2023): accept d_i with probability
  min(1, p_i(d_i) / q_i(d_i)); at the first rejection sample from normalize(max(0, p_i - q_i));
  if all are accepted sample the bonus token from p_{gamma+1}. Temperature / top-k / top-p are
  applied to p and q before the rule (transformers' own logits warpers), and q must be the
  distribution each draft token was really drawn from.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import (LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper,
                          TopPLogitsWarper)


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 means greedy (exact argmax)
    top_p: float = 1.0
    top_k: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def warpers(self) -> LogitsProcessorList:
        procs = LogitsProcessorList()
        if self.greedy:
            return procs
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k > 0:
            procs.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(self.top_p))
        return procs


def probs_from_logits(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """[rows, V] logits -> [rows, V] float64 probabilities after the warpers.

    Greedy runs get the plain softmax (used only for display, never for decisions)."""
    logits = logits.to(torch.float64)
    scores = sampling.warpers()(None, logits) if not sampling.greedy else logits
    return torch.softmax(scores, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from a 1-D distribution."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)); falls back to p when the residual has no mass
    (only possible when p == q up to rounding, where any choice from p is correct)."""
    r = torch.clamp(p - q, min=0.0)
    total = r.sum()
    if not torch.isfinite(total) or total <= 0:
        return p
    return r / total


@dataclass(frozen=True)
class Verdict:
    accepted: int  # A: drafted tokens accepted
    token: int  # the target's own token at position A (correction or bonus)
    bonus: bool  # True when all drafted tokens were accepted


def verify_greedy(drafted: list[int], target_logits: torch.Tensor) -> Verdict:
    """drafted: [gamma]; target_logits: [gamma+1, V] (row i scores the token after d_1..d_i)."""
    choices = target_logits.argmax(dim=-1).tolist()  # [gamma+1]
    for i, d in enumerate(drafted):
        if choices[i] != d:
            return Verdict(i, choices[i], False)
    return Verdict(len(drafted), choices[len(drafted)], True)


def verify_sampling(drafted: list[int], p_target: torch.Tensor, q_draft: torch.Tensor,
                    generator: torch.Generator | None) -> Verdict:
    """p_target: [gamma+1, V] warped target probabilities; q_draft: [gamma, V] the
    distributions the drafted tokens were drawn from."""
    for i, d in enumerate(drafted):
        p_d, q_d = float(p_target[i, d]), float(q_draft[i, d])
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if q_d > 0 and u < min(1.0, p_d / q_d):
            continue
        return Verdict(i, sample(residual(p_target[i], q_draft[i]), generator), False)
    return Verdict(len(drafted), sample(p_target[len(drafted)], generator), True)


def verify(drafted: list[int], target_logits: torch.Tensor, q_draft: torch.Tensor | None,
           sampling: Sampling, generator: torch.Generator | None) -> Verdict:
    if sampling.greedy:
        return verify_greedy(drafted, target_logits)
    return verify_sampling(drafted, probs_from_logits(target_logits, sampling), q_draft, generator)
