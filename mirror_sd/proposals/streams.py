"""Speculative streaming in the draft lane, light variant: residual heads on the last hidden state.

The paper's design (stream embeddings entering the top layers, shared keys and values) needs
training through the draft's layers; on a 2-core CPU we train Medusa-style heads instead:

    head j (j = 1..K):  h_j = h + W2_j SiLU(W1_j h)     (low rank r; W2_j starts at zero)
    logits_j = lm_head(h_j)                               (the draft's own LM head, frozen)

where h is the draft's final-normed hidden state at the last fed token. Head j proposes the
token j+1 steps ahead; the LM head itself proposes the next one. So one draft forward yields
1 + K tokens, and a rollout of gamma tokens needs about gamma / (K + 1) forwards.

This module holds the heads and their files; the rollout that drafts with them is the
engine's (engine/proposers.py, `stream_rollout`).

Exactness: every drafted token is verified by the target. Greedy: any window gives the
target's own greedy output. Sampling: each token is drawn from the warped distribution of the
row that proposed it, and that row is the q the acceptance rule uses.
"""
from __future__ import annotations

import copy
import re
import threading
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mirror_sd.errors import MirrorSDError
from mirror_sd.paths import ASSETS

STREAMS_CHOICES = ("auto", "off")
FORMAT = 1


class StreamHeads(nn.Module):
    """K low-rank residual heads on the draft's final hidden state."""

    def __init__(self, hidden: int, n_heads: int, rank: int, meta: dict | None = None):
        super().__init__()
        self.hidden, self.n_heads, self.rank = hidden, n_heads, rank
        self.down = nn.Parameter(torch.randn(n_heads, rank, hidden) / hidden ** 0.5)  # W1 [K, r, H]
        self.up = nn.Parameter(torch.zeros(n_heads, hidden, rank))  # W2 [K, H, r]: h_j = h at start
        self.meta = dict(meta or {})

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h [N, H] -> the heads' hidden states [N, K, H]."""
        z = F.silu(torch.einsum("krh,nh->nkr", self.down, h))  # [N, K, r]
        return h[:, None, :] + torch.einsum("khr,nkr->nkh", self.up, z)

    def rows(self, h: torch.Tensor, lm_head, n: int | None = None) -> torch.Tensor:
        """h [H] (one position) -> logits [1 + K, V]: row 0 the draft's own next token, row j
        head j (the token j+1 steps ahead). `n` keeps only the first n rows."""
        n = self.n_heads + 1 if n is None else n
        states = torch.cat([h[None], self(h[None])[0, :n - 1]], 0)  # [n, H]
        return lm_head(states)

    # ---- files
    def save(self, path: str | Path) -> None:
        state = {k: v.detach().to(torch.float16).cpu() for k, v in self.state_dict().items()}
        torch.save({"format": FORMAT, "hidden": self.hidden, "n_heads": self.n_heads,
                    "rank": self.rank, "meta": self.meta, "state": state}, str(path))

    @classmethod
    def load(cls, path: str | Path) -> "StreamHeads":
        try:
            d = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as e:
            raise MirrorSDError(f"Could not read stream heads from {path}: {e}") from e
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise MirrorSDError(f"{path} is not a stream-heads file (format {FORMAT}).")
        heads = cls(d["hidden"], d["n_heads"], d["rank"], d.get("meta"))
        heads.load_state_dict({k: v.float() for k, v in d["state"].items()})
        return heads.eval()

    def like(self, model) -> "StreamHeads":
        """A copy in the dtype and on the device of the draft's LM head input."""
        ref = model.get_input_embeddings().weight
        dtype = ref.dtype if ref.dtype.is_floating_point else torch.float32
        return copy.deepcopy(self).to(device=ref.device, dtype=dtype).requires_grad_(False)


# ---------------------------------------------------------------------------------------------
# which heads a pair uses

def draft_key(name_or_path: str) -> str:
    """A file-name-safe key for a draft: the folder (or hub id) name."""
    base = str(name_or_path).rstrip("/\\")
    base = base.split("/")[-1] if Path(base).exists() else base.replace("/", "--")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", base)


def heads_path(key: str) -> Path:
    return ASSETS / f"streams-{key}.pt"


def find_heads(pair) -> tuple[StreamHeads | None, str]:
    """The pair's trained heads (pair.streams, or the assets/ file of its draft), and a line
    saying what was found."""
    heads = getattr(pair, "streams", None)
    if heads is None:
        path = (pair.info.get("draft") or {}).get("path") if pair.info else None
        key = draft_key(path or pair.draft_name)
        file = heads_path(key)
        if not file.is_file():
            return None, f"No trained stream heads for the draft {pair.draft_name!r} ({file.name}): plain drafting."
        heads = StreamHeads.load(file)
        hidden, vocab = pair.draft.config.hidden_size, pair.vocab_size
        if heads.hidden != hidden or heads.meta.get("vocab", vocab) != vocab:
            return None, f"{file.name} does not fit the draft (hidden {heads.hidden} vs {hidden}): plain drafting."
        pair.streams = heads
    return live_heads(heads, pair.draft), f"stream heads: {heads.n_heads} per draft forward"


# heads in the draft's dtype and device, made once per (draft model, heads): the draft can be
# swapped (another precision) and pair.streams replaced, and both are shared across runs
_live: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_live_lock = threading.Lock()


def live_heads(heads: StreamHeads, draft) -> StreamHeads:
    """`heads` as the draft `draft` runs them (StreamHeads.like), cached per draft model."""
    with _live_lock:
        made = _live.get(draft)
        if made is None or made[0] is not heads:
            made = (heads, heads.like(draft))
            _live[draft] = made
        return made[1]
