"""A KV cache that grows in place: appending a token costs its own keys and values, not a copy
of the whole cache.

transformers' `DynamicLayer` appends with `torch.cat`, which copies every cached key and value
of the layer at each forward: at a few hundred tokens of context that was 7.7% of an int8
decode step of the 1.5B target here (py-spy, docs/measurements.md section 9), and it grows
with the context. `GrowingLayer` keeps a buffer with spare room (doubling when full) and hands
attention views of its filled part; cropping only moves the fill mark. A tensor assigned to
`keys`/`values` from outside (batch ops, branch caches) becomes the new buffer, so code that
treats the layer like a `DynamicLayer` keeps working.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_ROOM = 256  # positions allocated at least, when a buffer is (re)made


class GrowingLayer(DynamicLayer):
    def __init__(self, *args, **kwargs):
        self._k = self._v = None  # buffers [B, H, capacity, D]
        self._n = 0  # filled positions
        self._owned = False  # False: the buffers came from outside; copy before writing
        super().__init__(*args, **kwargs)

    # keys/values: views of the filled part, as DynamicLayer's attributes were
    @property
    def keys(self):
        return None if self._k is None else self._k[..., :self._n, :]

    @keys.setter
    def keys(self, t):
        self._k, self._n, self._owned = self._adopt(t), self._length(t), False

    @property
    def values(self):
        return None if self._v is None else self._v[..., :self._n, :]

    @values.setter
    def values(self, t):
        self._v = self._adopt(t)

    @staticmethod
    def _adopt(t):
        return None if t is None or t.dim() < 4 else t

    @staticmethod
    def _length(t):
        return 0 if t is None or t.dim() < 4 else t.shape[-2]

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        need = self._n + new
        if (not self._owned or self._k.shape[:2] != key_states.shape[:2]
                or need > self._k.shape[-2]):
            self._grow(key_states, value_states, need)
        self._k[..., self._n:need, :] = key_states
        self._v[..., self._n:need, :] = value_states
        self._n = need
        return self.keys, self.values

    def _grow(self, key_states, value_states, need):
        room = max(MIN_ROOM, 2 * need)
        bufs = []
        for old, new in ((self._k, key_states), (self._v, value_states)):
            shape = (*new.shape[:2], room, new.shape[-1])
            buf = torch.empty(shape, dtype=new.dtype, device=new.device)
            if old is not None and self._n and old.shape[:2] == new.shape[:2]:
                buf[..., :self._n, :] = old[..., :self._n, :]
            bufs.append(buf)
        self._k, self._v = bufs
        self._owned = True

    def get_seq_length(self) -> int:
        return self._n if self.is_initialized else 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove")
        if tokens_to_remove and self.is_initialized:
            self._n = max(0, self._n + tokens_to_remove)


class GrowingCache(DynamicCache):
    """A DynamicCache whose full-attention layers are `GrowingLayer`s."""

    def __init__(self, config=None):
        super().__init__(config=config)
        self.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in self.layers]
