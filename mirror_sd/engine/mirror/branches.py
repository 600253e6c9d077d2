"""Branch-complete rollouts of the draft, batched: one draft forward per depth for all rows.

Every row shares the draft cache of y_1..y_n, d_1..d_gamma (the base). A row rooted at
(depth j, token v) masks the base entries of d_{j+1}..d_gamma out of its attention and
feeds v at position n+j, then its own tokens. Rows may join while others are mid-rollout
(the rollout slots written before a row joined are masked out for it), so the draft can
start on its own best guess before the target's early exit arrives and add the exit's
candidates later. Each row has its own length (gamma, or the window policy's length for the
verdict its root stands for: windows.WindowPolicy.plan_after) and, given the policy's `stop`,
ends early where the policy would end a serial rollout (the draft's confidence, an
end-of-sequence token). A finished row leaves the batch with its cache cut to a contiguous
batch-1 cache: the draft cache of the next step if its root is the verdict.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from mirror_sd.engine.acceptance import Sampling
from mirror_sd.engine.mirror.scoring import Root
from mirror_sd.engine.drafting import Window, choose, to_probs
from mirror_sd.engine.lanes import new_cache


@dataclass
class Row:
    root: Root
    start_slot: int  # rollout slot where this row's entries begin
    generator: torch.Generator | None
    length: int = 0  # tokens this row drafts at most
    tokens: list[int] = field(default_factory=list)
    q_rows: list[torch.Tensor] = field(default_factory=list)
    stopped: bool = False  # the window policy ended the row before `length`
    cache: DynamicCache | None = None  # contiguous batch-1 cache once complete

    @property
    def finished(self) -> bool:
        return self.stopped or len(self.tokens) >= self.length

    def window(self) -> Window:
        return Window(list(self.tokens), torch.stack(self.q_rows))


class BranchBatch:
    def __init__(self, model, base: DynamicCache, n: int, gamma: int, sampling: Sampling, stop=None):
        self.model, self.base, self.n, self.gamma, self.sampling = model, base, n, gamma, sampling
        self.stop = stop  # (token, q) -> a reason to end a row there, or None (WindowPolicy.stop)
        self.base_len = base.get_seq_length()  # n + gamma
        self.device = base.layers[0].keys.device
        self.live: list[Row] = []  # rows still drafting, in batch order
        self.done: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask: torch.Tensor | None = None  # [rows, base_len + slots]
        self.slots = 0  # rollout slots written so far (all rows share the slot axis)
        self.history: dict[Root, Row] = {}  # every row ever admitted, for the events

    def admit(self, root: Root, generator, length: int | None = None) -> None:
        """Start a row at `root` that drafts `length` tokens at most (default gamma)."""
        row = Row(root, self.slots, generator, length or self.gamma)
        mask = torch.ones(1, self.base_len + self.slots, dtype=torch.long, device=self.device)
        mask[0, self.n + root.depth:] = 0  # hide d_{depth+1}..d_gamma and earlier rows' slots
        new = new_cache(self.model.config)
        for i, layer in enumerate(self.base.layers):
            k, v = layer.keys, layer.values  # [1, H, base_len, D]
            if self.slots:
                pad = k.new_zeros(k.shape[0], k.shape[1], self.slots, k.shape[3])
                k, v = torch.cat([k, pad], 2), torch.cat([v, pad], 2)
            if self.cache is not None:
                k = torch.cat([self.cache.layers[i].keys, k], 0)
                v = torch.cat([self.cache.layers[i].values, v], 0)
            new.update(k, v, i)
        self.cache = new
        self.mask = mask if self.mask is None else torch.cat([self.mask, mask], 0)
        self.live.append(row)
        self.history[root] = row

    def keep(self, predicate) -> None:
        """Drop live rows whose root fails `predicate` (stale once the verdict is known)."""
        idx = [i for i, r in enumerate(self.live) if predicate(r.root)]
        self.done = [r for r in self.done if predicate(r.root)]
        if len(idx) == len(self.live):
            return
        self._select(idx)

    def drop_live(self) -> None:
        """Drop every live row, keeping the finished ones (a forward stopped half way leaves the
        batch's cache half written)."""
        self._select([])

    def _select(self, idx: list[int]) -> None:
        self.live = [self.live[i] for i in idx]
        if not idx:
            self.cache, self.mask, self.slots = None, None, 0
            return
        sel = torch.tensor(idx, device=self.device)
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys.index_select(0, sel), layer.values.index_select(0, sel)
        self.mask = self.mask.index_select(0, sel)

    @torch.inference_mode()
    def forward(self) -> None:
        """One draft forward: every live row drafts its next token."""
        rows = self.live
        inputs = [[r.tokens[-1] if r.tokens else r.root.token] for r in rows]
        pos = torch.tensor([[self.n + r.root.depth + len(r.tokens)] for r in rows], device=self.device)
        mask = torch.cat([self.mask, torch.ones(len(rows), 1, dtype=torch.long, device=self.device)], 1)
        out = self.model(input_ids=torch.tensor(inputs, device=self.device),
                         attention_mask=self._window_masks(mask, pos) or mask,
                         position_ids=pos, cache=self.cache, use_cache=True)
        self.cache, self.mask = out.cache, mask
        self.slots += 1
        logits = out.logits[:, -1]  # [rows, V]
        probs = to_probs(logits, self.sampling)
        for i, r in enumerate(rows):
            token = choose(probs[i], logits[i], self.sampling, r.generator)
            r.tokens.append(token)
            r.q_rows.append(probs[i])
            r.stopped = self.stop is not None and self.stop(token, float(probs[i, token])) is not None
        finished = [i for i, r in enumerate(rows) if r.finished]
        for i in finished:
            rows[i].cache = self._cut(i, rows[i])
            self.done.append(rows[i])
        if finished:
            self._select([i for i in range(len(rows)) if i not in finished])

    def _window_masks(self, mask: torch.Tensor, pos: torch.Tensor) -> dict | None:
        """For a model with sliding-window layers (Gemma 3): one additive 4D mask per layer
        type, from each cache entry's *position*. transformers would derive the window from
        cache indices, and a row's entries sit after the base, so its local layers would see
        another window than the serial rollout does. None for other models (the 2D mask)."""
        config = self.model.config
        window, types = getattr(config, "sliding_window", None), getattr(config, "layer_types", None)
        if not window or not types or "sliding_attention" not in types:
            return None
        kv_pos = torch.arange(mask.shape[1], device=self.device).repeat(len(self.live), 1)
        for i, r in enumerate(self.live):  # slot s of row r holds position n + depth + (s - start)
            kv_pos[i, self.base_len:] = self.n + r.root.depth + torch.arange(
                self.slots + 1, device=self.device) - r.start_slot
        visible = mask.bool()
        near = visible & (pos - kv_pos < window)
        dtype = self.base.layers[0].keys.dtype

        def additive(allowed):
            out = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
            return out.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None, None, :]

        return {"full_attention": additive(visible), "sliding_attention": additive(near)}

    def _cut(self, i: int, row: Row) -> DynamicCache:
        """Row i as a contiguous batch-1 cache: y, d_1..d_j, v, e_1..e_{k-1} (k: its tokens;
        the last one is not fed)."""
        start = self.base_len + row.start_slot
        index = torch.cat([torch.arange(self.n + row.root.depth),
                           torch.arange(start, start + len(row.tokens))]).to(self.device)
        out = new_cache(self.model.config)
        for li, layer in enumerate(self.cache.layers):
            out.update(layer.keys[i:i + 1].index_select(2, index), layer.values[i:i + 1].index_select(2, index), li)
        return out
