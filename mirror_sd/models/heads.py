"""An LM head cut to some of its rows: what a proposal vocabulary (proposals/draft_vocab.py),
the early exit's cut head and a draft with another tokenizer (bridged_draft.py) answer with.

`ProposalHead` keeps the full head and the cut one and returns full-width logits (-inf outside
the rows), so every caller works on token ids unchanged; `active` says which head answers.
"""
from __future__ import annotations

import torch

from mirror_sd.models.precision import head_rows


class ProposalHead(torch.nn.Module):
    """An LM head that answers with the full head or with its rows `ids` (-inf elsewhere)."""

    def __init__(self, full: torch.nn.Module, cut: torch.nn.Module, ids: torch.Tensor, vocab_size: int):
        super().__init__()
        self.full, self.cut = full, cut
        self.register_buffer("ids", ids.to(torch.long), persistent=False)
        self.in_features = getattr(full, "in_features", None)
        self.out_features = vocab_size
        self.active = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return self.full(x)
        part = self.cut(x)
        out = part.new_full((*part.shape[:-1], self.out_features), float("-inf"))
        return out.index_copy_(-1, self.ids.to(part.device), part)

    def extra_repr(self) -> str:
        return f"{len(self.ids)} of {self.out_features} ids, active={self.active}"


def cut_head(head: torch.nn.Module, ids: torch.Tensor, vocab_size: int) -> ProposalHead | None:
    """A ProposalHead over `head` (its kernel kept), or None when the kernel is not handled."""
    if isinstance(head, ProposalHead):
        head = head.full
    if hasattr(head, "_hf_hook"):  # placed by accelerate across devices: leave it alone
        return None
    cut = head_rows(head, ids)
    return None if cut is None else ProposalHead(head, cut, ids, vocab_size)
