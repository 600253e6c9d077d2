"""A lane: one model, its KV cache and the token ids that cache covers.

The decoders never touch a cache directly: they say which committed text the lane must
match (`sync`) and what to feed. Device moves happen here, at the lane boundary, and
nowhere else: ids come in as Python ints, logits leave on the lane's device.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from mirror_sd.models.pair import model_device
from mirror_sd.placement import lane_sync


def new_cache(config) -> DynamicCache:
    """An empty cache whose every layer keeps all positions. The lanes cut caches back after a
    rejection and the branches index positions; a sliding-window layer (Gemma 3) drops old
    entries and cannot be cut back, so such models get full layers instead (their attention
    still applies its window by position: the same logits)."""
    cache = DynamicCache(config=config)
    if any(type(layer).__name__ != "DynamicLayer" for layer in cache.layers):
        cache = DynamicCache()
    return cache


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Lane:
    def __init__(self, model, name: str):
        self.model = model
        self.name = name
        self.device = model_device(model)
        self.reset()

    def reset(self):
        self.cache = new_cache(self.model.config)
        self.ids: list[int] = []  # tokens whose keys/values the cache holds, in order

    def sync(self, committed: list[int]) -> list[int]:
        """Cut the cache back to its longest prefix shared with `committed`; return the
        committed tokens that still have to be fed."""
        keep = common_prefix(self.ids, committed)
        if keep == len(committed) and keep > 0:
            keep -= 1  # always feed at least the last token: its logits are needed
        drop = len(self.ids) - keep
        if drop > 0:
            self.cache.crop(-drop)
            self.ids = self.ids[:keep]
        return committed[keep:]

    @torch.inference_mode()
    def feed(self, tokens: list[int], logits_to_keep: int = 0) -> torch.Tensor:
        """Append `tokens` to the cache; return logits [len(tokens) or logits_to_keep, V]."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, cache=self.cache, use_cache=True,
                         logits_to_keep=logits_to_keep)
        self.cache = out.cache
        self.ids.extend(tokens)
        return out.logits[0]

    @torch.inference_mode()
    def feed_hidden(self, tokens: list[int]) -> torch.Tensor:
        """Append `tokens` to the cache; return the final-normed hidden states [len(tokens), H]
        (the LM head's input: stream heads read them)."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        base = getattr(self.model, self.model.base_model_prefix)
        out = base(input_ids=ids, cache=self.cache, use_cache=True)
        self.cache = out.cache
        self.ids.extend(tokens)
        return out.last_hidden_state[0]

    def entries(self, k: int) -> int:
        """Cache positions of the first k tokens (one each; a CrossLane may use more)."""
        return k

    def can_branch(self, token: int) -> bool:
        """Whether a batched branch may be rooted at `token` (cross.py narrows this)."""
        return True

    def adopt(self, cache: DynamicCache, ids: list[int]) -> None:
        """Take over `cache`, which holds the keys/values of `ids` (a finished branch)."""
        self.cache, self.ids = cache, list(ids)

    def synchronize(self):
        lane_sync(self.device)
