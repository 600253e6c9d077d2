"""The early-exit token channel: the target's own final norm + LM head read at a middle layer.

The proposals only choose which branches the draft precomputes; they never decide what is
committed. So the exit head may be computed more cheaply than the target's real head: on a
CPU the LM head is ~18% of the 1.5B target's weights, and running it on gamma+1 rows in fp32
would lengthen every target forward by about as much. `auto` therefore uses an int8 copy of
the head (fbgemm dynamic quantization: measured 12x faster on 5 rows of the default target's
151936x1536 head, 95% of the top-8 ids shared with fp32) on CPU for large heads, and the
exact head elsewhere.

A trained exit lens (exit_lens.py), when one is given, maps the exit-layer hidden state
before the norm: the proposals get much closer to the final layer's at the same layer.

With token ids given (draft_vocab.py: the run's cut draft vocabulary, or under `auto` the
shipped frequent-token set), the head keeps only those rows: measured on the default pair,
10.4 -> 6.1 ms per generated token with the same hit rate (docs/performance.md, "The draft vocabulary").
"""
from __future__ import annotations

import hashlib
import threading
import weakref
from dataclasses import dataclass

import torch

from mirror_sd.models.pair import exit_parts, model_vocab_size
from mirror_sd.models.precision import float_head, int8_head_copy

_LARGE_HEAD = 1 << 24  # parameters; tiny test models stay exact under "auto"
_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


@dataclass
class ExitHead:
    norm: torch.nn.Module  # the target's own final norm
    head: torch.nn.Module  # the target's LM head, or its int8 copy
    device: torch.device
    kind: str  # "exact" or "int8"
    lens: object = None  # an exit_lens.ExitLens covering `layer`, or None (raw exit)
    layer: int | None = None

    @torch.inference_mode()
    def proposals(self, hidden: torch.Tensor, kappa: int) -> tuple[list, list]:
        """hidden: [rows, H] at the exit layer -> top-kappa (ids, log-probs) per row."""
        x = hidden.to(self.device)
        if self.lens is not None:
            x = self.lens.apply(self.layer, x)
        x = self.norm(x)
        if self.kind == "int8":
            x = x.float()
        kept = getattr(self.head, "ids", None)  # a proposal vocabulary: never more than it has
        kappa = min(kappa, len(kept)) if kept is not None else kappa
        top = torch.log_softmax(self.head(x).float(), dim=-1).topk(kappa, dim=-1)  # [rows, kappa]
        return top.indices.tolist(), top.values.tolist()  # ids cross lanes, not tensors


def exit_head(model, choice: str = "auto", lens=None, layer: int | None = None,
              ids: torch.Tensor | None = None) -> ExitHead:
    """The exit head of `model`; with `lens` (covering `layer`) the lens is applied first; with
    `ids` (draft_vocab.py) it proposes from those token ids only."""
    _, norm, head = exit_parts(model)
    device = norm.weight.device
    # a reduced-precision kernel (cpu_kernels) is used as it is; an fp32 head gets an int8 copy
    # on the CPU when asked for, or under "auto" when it is large
    use_int8 = float_head(head) and device.type == "cpu" and (
        choice == "int8" or (choice == "auto" and head.in_features * head.out_features >= _LARGE_HEAD))
    kind = "int8" if use_int8 else "exact"
    with _lock:  # quantizing and cutting take seconds: once per model, shared by every run
        heads = _cache.setdefault(model, {})
        if use_int8 and "int8" not in heads:
            heads["int8"] = int8_head_copy(head)
        base = heads["int8"] if use_int8 else head
        if ids is not None:
            key = (kind, hashlib.sha1(ids.cpu().numpy().tobytes()).hexdigest())
            if key not in heads:
                from mirror_sd.proposals.draft_vocab import cut_head
                heads[key] = cut_head(base, ids, model_vocab_size(model))
                if heads[key] is not None:
                    heads[key].active = True
            base = heads[key] or base
    return ExitHead(norm, base, device, kind, lens, layer)
