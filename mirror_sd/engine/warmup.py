"""An untimed warm-up: the first forwards after a load (allocations, kernel selection, a
lazily built kernel) stay out of every timed figure."""
from __future__ import annotations

import torch

from mirror_sd.engine.lanes import Lane

WARMUP_TOKENS = 8


@torch.inference_mode()
def warm_up(pair, drafts: bool = True, tokens: int = WARMUP_TOKENS) -> None:
    """A short prompt-like forward and a one-token forward of the target, and of the draft
    when the method uses it (registry.Method.drafts)."""
    ids = [1 + i % (pair.vocab_size - 1) for i in range(tokens)]
    for model in (pair.target, pair.draft) if drafts else (pair.target,):
        lane = Lane(model, "warm-up")
        lane.feed(ids, logits_to_keep=1)
        lane.feed(ids[:1], logits_to_keep=1)
        lane.synchronize()
