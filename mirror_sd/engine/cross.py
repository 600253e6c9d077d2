"""A draft with another tokenizer, fed by the engine in the target's token ids.

The pair's draft is then a `BridgedDraft` (models/bridged_draft.py): it reads target ids and
answers with target-width logits that are -inf outside the shared vocabulary, so every caller
(the serial rollout, Mirror-SD's batched branches, the acceptance rule) works unchanged.

A target token the draft's vocabulary lacks is fed as the draft tokens that spell it, so one
target token may take several draft positions. `CrossLane` keeps that bookkeeping (draft
positions per committed target token) so that cutting the cache back to a common prefix stays
exact, and feeds the draft its own rendering of the prompt (VocabBridge.draft_prompt).
Batched forwards (Mirror-SD's branches) take shared tokens only, one position each: the
branch roots are restricted to shared tokens (`Lane.can_branch`), and drafted tokens are
shared by construction.
"""
from __future__ import annotations

import torch

from mirror_sd.engine.lanes import Lane, common_prefix
from mirror_sd.errors import MirrorSDError
from mirror_sd.models.bridged_draft import BridgedDraft


class CrossLane(Lane):
    """A lane on a BridgedDraft: target ids in and out, draft positions counted per token."""

    def __init__(self, model: BridgedDraft, name: str, prompt_ids: list[int]):
        self.prompt = list(prompt_ids)
        self.draft_prompt = model.bridge.draft_prompt(self.prompt)
        super().__init__(model, name)

    def reset(self):
        super().reset()
        self.lens: list[int] = []  # draft positions of each token in self.ids

    def entries(self, k: int) -> int:
        return sum(self.lens[:k])

    def can_branch(self, token: int) -> bool:
        return self.model.bridge.is_shared(token)

    def sync(self, committed: list[int]) -> list[int]:
        keep = common_prefix(self.ids, committed)
        if keep == len(committed) and keep > 0:
            keep -= 1
        if keep < len(self.prompt):  # the prompt is one unit in the draft's rendering
            keep = 0
        drop = sum(self.lens[keep:])
        if keep == 0:
            self.reset()
        elif drop > 0:
            self.cache.crop(-drop)
        self.ids, self.lens = self.ids[:keep], self.lens[:keep]
        return committed[keep:]

    def _chunks(self, tokens: list[int]) -> list[list[int]]:
        start, out, p = len(self.ids), [], len(self.prompt)
        for k, t in enumerate(tokens):
            i = start + k
            if i < p and t == self.prompt[i]:
                out.append(self.draft_prompt if i == p - 1 else [])
            else:
                out.append(self.model.bridge.expand(t))
        return out

    @torch.inference_mode()
    def feed(self, tokens: list[int], logits_to_keep: int = 0) -> torch.Tensor:
        chunks = self._chunks(tokens)
        out = self.model.forward_chunks(chunks, logits_to_keep, cache=self.cache, use_cache=True)
        self.cache = out.cache
        self.ids.extend(tokens)
        self.lens.extend(len(c) for c in chunks)
        return out.logits[0]

    def feed_hidden(self, tokens: list[int]) -> torch.Tensor:
        raise MirrorSDError("Stream heads need a draft that shares the target's vocabulary.")

    def adopt(self, cache, ids: list[int]) -> None:
        keep = common_prefix(self.ids, ids)
        self.cache = cache
        self.lens = self.lens[:keep] + [1] * (len(ids) - keep)  # shared tokens: one position each
        self.ids = list(ids)


def lane_for(model, name: str, prompt_ids: list[int]) -> Lane:
    """The lane for a model: a CrossLane for a bridged draft, else a plain Lane."""
    if isinstance(model, BridgedDraft):
        return CrossLane(model, name, prompt_ids)
    return Lane(model, name)
