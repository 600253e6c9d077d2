"""Attention that gives each query row the bits it gets when decoded alone.

Verifying k drafted tokens runs the target over k rows at once; plain decoding runs one row at
a time. With row-independent linear layers (linears.RowInt8Linear), attention is the only
place where the rows of a verify forward meet: SDPA over k query rows may round differently
from SDPA over one. Here every query row of a forward on a non-empty cache is computed by the
same SDPA call, with the same shapes, that a one-token decode at that position makes: query
row j sees exactly the keys 0..(its position). Elementwise ops and per-row norms do not mix
rows, so the target's logits for a verified window equal, bit for bit, those of decoding the
window token by token, and greedy speculative output is the target's own by construction.

Assumes one sequence without padding (the target lane: batch 1, a cache of real tokens only);
batches go to transformers' own SDPA unchanged. Cost: one small SDPA call per row and layer
instead of one call per forward (a long prompt's prefill pays the most: docs/performance.md).
"""
from __future__ import annotations

import torch

from mirror_sd.placement import torch_threads

NAME = "mirror_sd_row_exact"
_registered = False


def row_exact_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                        **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, kv_len = query.shape[2], key.shape[2]
    if query.shape[0] != 1:  # a batch (rows may be padded): transformers' own SDPA
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout,
                                      scaling, **kwargs)
    start = kv_len - q_len
    with _one_thread():
        rows = [sdpa_attention_forward(module, query[:, :, j:j + 1], key[:, :, :start + j + 1],
                                       value[:, :, :start + j + 1], None, dropout, scaling,
                                       **kwargs)[0]
                for j in range(q_len)]
    return (rows[0] if q_len == 1 else torch.cat(rows, dim=1)), None


def _one_thread():
    """SDPA on a CPU splits one query row's keys over the threads once the context is long
    (measured: 12 heads, 300+ keys), which changes its rounding: a method running the target
    on two threads (AR, SD) would then disagree with one running it on one (Mirror-SD's target
    lane). One thread for these small calls keeps every method's bits the same."""
    return torch_threads(1)


def install(model) -> None:
    """Make `model` (a transformers causal LM) use row-exact attention."""
    global _registered
    from transformers import AttentionInterface
    if not _registered:
        AttentionInterface.register(NAME, row_exact_attention)
        _registered = True
    model.set_attn_implementation(NAME)


def installed(model) -> bool:
    return getattr(model.config, "_attn_implementation", None) == NAME
