"""A draft with another tokenizer, seen in the target's token ids.

`BridgedDraft` wraps the draft model: it reads target ids and answers with target-width logits
that are -inf outside the shared vocabulary (vocab_bridge.py), so a softmax over them is the
draft's distribution renormalised over the shared tokens: token-level intersection. What the
draft proposes is then a target token and q is over target ids. `ModelPair` builds it for a
cross-tokenizer pair; the engine's lanes feed it (engine/cross.py, `CrossLane`).
"""
from __future__ import annotations

import torch

from mirror_sd.errors import MirrorSDError
from mirror_sd.models.heads import ProposalHead, cut_head
from mirror_sd.models.vocab_bridge import VocabBridge


class BridgedDraft(torch.nn.Module):
    """The draft model in the target's vocabulary (ids in, target-width logits out)."""

    def __init__(self, model, bridge: VocabBridge):
        super().__init__()
        self.model = model
        self.bridge = bridge
        self.config = model.config
        self.generation_config = getattr(model, "generation_config", None)
        self.base_model_prefix = "model"  # no stream heads on a bridged draft (their hidden states are the draft's)
        self.register_buffer("t2d", bridge.t2d.clone(), persistent=False)
        self.register_buffer("shared_target", bridge.shared_target.clone(), persistent=False)
        self.register_buffer("shared_draft", bridge.shared_draft.clone(), persistent=False)
        self._cut = self._cut_head(model, bridge)

    @staticmethod
    def _cut_head(model, bridge: VocabBridge):
        """The draft's LM head over the shared rows only: the other logits are never read, and
        a large-vocabulary draft spends much of its forward there (Gemma 3 270M: 168M of 268M
        parameters are its embedding and tied head). Active only inside this wrapper's forward,
        so the model as loaded (transformers' assisted generation) keeps its full head."""
        head = model.get_output_embeddings()
        if isinstance(head, ProposalHead):
            if torch.equal(head.ids.cpu(), bridge.shared_draft):
                return head
            head = head.full
        new = cut_head(head, bridge.shared_draft, bridge.draft_vocab)
        if new is not None:
            model.set_output_embeddings(new)
        return new

    def _draft(self, **kwargs):
        """The draft's forward with the shared-rows head (the other rows come back as -inf)."""
        if self._cut is None:
            return self.model(**kwargs)
        self._cut.active = True
        try:
            return self.model(**kwargs)
        finally:
            self._cut.active = False

    @property
    def device(self):
        return self.model.get_input_embeddings().weight.device

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., draft vocab] -> [..., target vocab]: the shared columns, -inf elsewhere."""
        out = logits.new_full((*logits.shape[:-1], self.bridge.target_vocab), float("-inf"))
        return out.index_copy_(-1, self.shared_target.to(logits.device),
                               logits.index_select(-1, self.shared_draft.to(logits.device)))

    def forward(self, input_ids: torch.Tensor, logits_to_keep: int = 0, **kwargs):
        """Like the draft's forward, in target ids. One row: any target ids (each spelled in
        draft tokens; logits at the last position of each). Several rows (with a mask and
        position ids): shared tokens only, one position each."""
        if input_ids.shape[0] > 1 or "position_ids" in kwargs or "attention_mask" in kwargs:
            d = self.t2d.to(input_ids.device)[input_ids]
            if bool((d < 0).any()):
                raise MirrorSDError("A batched draft forward got a token outside the shared vocabulary.")
            out = self._draft(input_ids=d, logits_to_keep=logits_to_keep, **kwargs)
            out.logits = self.to_target(out.logits)
            return out
        chunks = [self.bridge.expand(int(t)) for t in input_ids[0].tolist()]
        return self.forward_chunks(chunks, logits_to_keep, **kwargs)

    def forward_chunks(self, chunks: list[list[int]], logits_to_keep: int = 0, **kwargs):
        """Feed the draft tokens `chunks` (one list per target token, possibly empty) as one
        row; logits at the end of each non-empty chunk among the last `logits_to_keep` chunks
        (all when 0)."""
        flat = [d for c in chunks for d in c]
        ends, pos = [], 0
        for c in chunks:
            pos += len(c)
            ends.append(pos - 1 if c else None)
        wanted = [e for e in (ends[-logits_to_keep:] if logits_to_keep else ends) if e is not None]
        first = wanted[0] if wanted else len(flat) - 1
        ids = torch.tensor([flat], dtype=torch.long, device=self.device)
        out = self._draft(input_ids=ids, logits_to_keep=len(flat) - first, **kwargs)
        rows = torch.tensor([e - first for e in wanted] or [len(flat) - 1 - first], device=out.logits.device)
        out.logits = self.to_target(out.logits.index_select(1, rows))
        return out
