"""A proposal vocabulary: the draft's LM head (and the early-exit head) over the frequent tokens.

The draft and the early exit only *propose*; the target decides. So their LM heads need not
cover all 151,936 ids of the Qwen2 vocabulary: restricted to the most frequent tokens, the
head is several times smaller, and on this CPU the draft's head is about a sixth of a draft
forward (docs/performance.md). FR-Spec (Zhao et al. 2025, arXiv 2502.14856) makes
the same cut for EAGLE drafts of large-vocabulary models.

Exactness does not move:
- greedy: the committed token is the target's argmax, whatever was proposed;
- sampling: a drafted token is drawn from q = softmax over the kept ids (0 elsewhere), and that
  q is the one the acceptance rule reads, so min(1, p/q) and the residual max(0, p - q) are
  computed against the distribution the token really came from. A target token outside the
  set can still be committed: by the residual, or as the bonus token.

`ProposalHead` (models/heads.py) keeps the full head and the cut one and returns full-width logits (-inf outside
the set), so every caller (lanes, batched branches, stream heads, the tuner's probe) works on
token ids unchanged. Which head answers is switched per run (`Settings.draft_vocab`).

File: safetensors with `ids` (int32, sorted) and metadata: the format, the vocabulary size,
the tokenizer's fingerprint (which file fits which vocabulary), the build command and its
coverage report (`python -m mirror_sd.training.draft_vocab`).
"""
from __future__ import annotations

import hashlib
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from mirror_sd.models.heads import ProposalHead, cut_head
from mirror_sd.paths import ASSETS

FORMAT = "mirror-sd draft vocab v1"
CHOICES = ("auto", "full")  # or a path to a vocabulary file
SHIPPED_GLOB = "draft_vocab_*.safetensors"
_lock = threading.Lock()


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's token -> id map: a file fits any model with this vocabulary."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class VocabFile:
    ids: torch.Tensor  # sorted token ids, int64
    meta: dict
    path: Path | None = None

    @property
    def size(self) -> int:
        return len(self.ids)


def save(path: Path, ids: torch.Tensor, meta: dict) -> None:
    from safetensors.torch import save_file
    ids = torch.unique(ids.to(torch.int64)).to(torch.int32)  # sorted, no repeats
    strings = {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}
    save_file({"ids": ids}, str(path), metadata={"format": FORMAT, **strings})


def load(path: str | Path) -> VocabFile:
    from safetensors import SafetensorError, safe_open
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            if meta.get("format") != FORMAT:
                raise ValueError(f"{path.name} is not a draft vocabulary file ({FORMAT}).")
            ids = f.get_tensor("ids").to(torch.int64)
    except SafetensorError as e:
        raise ValueError(f"{path.name} is not a readable safetensors file ({e}).") from None
    for key in ("vocab_size", "size", "report"):
        if key in meta:
            meta[key] = json.loads(meta[key])
    return VocabFile(ids, meta, path)


def _fits(vf: VocabFile, vocab_size: int, fingerprint: str | None) -> bool:
    """Built for this tokenizer (when it is known) and inside the model's head."""
    return ((fingerprint is None or vf.meta.get("fingerprint") == fingerprint) and
            bool(len(vf.ids)) and int(vf.ids.max()) < vocab_size and int(vf.ids.min()) >= 0)


def find(choice: str, tokenizer, vocab_size: int) -> tuple[VocabFile | None, str]:
    """The vocabulary `choice` names for this tokenizer, or None; and a line saying which.
    `vocab_size` is the number of rows of the draft's LM head."""
    if choice == "full":
        return None, "full draft vocabulary (as asked)"
    fingerprint = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    if choice == "auto":
        for path in sorted(ASSETS.glob(SHIPPED_GLOB)) if fingerprint else []:
            vf = load(path)
            if _fits(vf, vocab_size, fingerprint):
                return vf, f"draft vocabulary: {vf.size} frequent tokens ({path.name})"
        return None, "no shipped draft vocabulary for this tokenizer: the draft's full LM head is used"
    try:
        vf = load(choice)
    except (OSError, ValueError) as e:
        return None, f"draft vocabulary {choice!r} not used ({e}): the full LM head is used"
    if not _fits(vf, vocab_size, fingerprint):
        return None, (f"draft vocabulary {Path(choice).name} was built for another tokenizer: "
                      "the full LM head is used")
    return vf, f"draft vocabulary: {vf.size} tokens ({Path(choice).name})"


def install(model, vf: VocabFile, vocab_size: int) -> ProposalHead | None:
    """Give `model` (the draft) a ProposalHead for `vf`, once; it starts inactive."""
    with _lock:
        head = model.get_output_embeddings()
        if isinstance(head, ProposalHead) and torch.equal(head.ids.cpu(), vf.ids):
            return head
        new = cut_head(head, vf.ids, vocab_size)
        if new is not None:
            model.set_output_embeddings(new)
        return new


@dataclass(frozen=True)
class InUse:
    """What a run proposes from: `ids` (None: the full vocabulary) and a line saying why."""
    ids: torch.Tensor | None
    line: str
    warn: bool = False  # asked for a vocabulary that could not be used

    @property
    def size(self) -> int | None:
        return None if self.ids is None else len(self.ids)


_found: dict = {}


def _find_cached(choice: str, tokenizer, vocab_size: int):
    key = (choice, id(tokenizer), vocab_size)
    with _lock:
        if key not in _found or _found[key][0] is not tokenizer:
            _found[key] = (tokenizer, *find(choice, tokenizer, vocab_size))
        return _found[key][1:]


def shipped_ids(tokenizer, vocab_size: int) -> torch.Tensor | None:
    """The shipped set's ids for this tokenizer, or None."""
    vf, _ = _find_cached("auto", tokenizer, vocab_size)
    return None if vf is None else vf.ids


@contextmanager
def use(pair, choice: str):
    """Within: the pair's draft proposes from the vocabulary `choice` names; yields an InUse.
    A draft that is the target itself keeps its full head (its logits are the target's)."""
    from mirror_sd.models.pair import model_vocab_size
    if pair.draft is pair.target:
        yield InUse(None, "full draft vocabulary (the draft is the target)")
        return
    if getattr(pair, "bridge", None) is not None:
        yield InUse(None, "the vocabulary both tokenizers share (a cross-tokenizer pair)", choice not in CHOICES)
        return
    vocab_size = model_vocab_size(pair.draft)
    vf, line = _find_cached(choice, pair.tokenizer, vocab_size)
    warn = vf is None and choice not in CHOICES
    head = install(pair.draft, vf, vocab_size) if vf is not None else None
    if vf is not None and head is None:
        line, warn = "the draft's LM head kernel cannot be cut: the full LM head is used", True
    if head is None:
        yield InUse(None, line, warn)
        return
    head.active = True
    try:
        yield InUse(head.ids, line)
    finally:
        head.active = False
