"""Two tokenizers, one token stream: the map between a target's and a draft's vocabularies.

Cross-tokenizer speculative decoding by token-level intersection (TLI; Timor et al. 2025,
"Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for Heterogeneous
Vocabularies", ICML 2025, arXiv 2502.05202). A token is *shared* when both vocabularies hold
a token with the same byte string. The draft proposes shared tokens only (its distribution
renormalised over them), so every drafted token is already a target token and the target
verifies it with the usual rule: greedy output is the target's argmax, and speculative
sampling with any proposal q is exact for the target's p. Everything the engine handles stays
in target ids; the draft's side is translated at its edge (engine/cross.py).

What the draft reads: the committed text, target token by target token. A shared token is its
draft twin (one draft position); a special token the draft also has (same text) is that
token; any other target token (a merge the draft's vocabulary lacks, a special token of the
target's own) is spelled with the draft's own tokens by longest match on bytes. The prompt
is the exception: the draft reads its own rendering of the conversation (`draft_prompt`):
its chat template when it has one, else the user's text and a blank line (a base model
continues text; it does not know the target's chat markup).

Byte strings come from the vocabularies themselves: byte-level BPE (GPT-2, Qwen, Llama 3)
maps characters back to bytes; SentencePiece-style vocabularies (Gemma, Llama 2) write a space
as U+2581 and odd bytes as <0xNN> tokens. Added and special tokens are never shared (their
text means something else to each model).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from mirror_sd.errors import MirrorSDError

SPM_SPACE = "\u2581"
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
MIN_SHARED_SHARE = 0.05  # fewer shared tokens than this share of the target's vocabulary: refused
DRAFT_PROMPT_SEPARATOR = "\n\n"  # after the user's text, for a draft without a chat template


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the printable character -> its byte."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _decoder_kinds(tokenizer) -> set[str]:
    """The decoder types of a fast tokenizer (a Sequence counts as its members)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return set()
    dec = json.loads(backend.to_str()).get("decoder") or {}
    parts = dec.get("decoders", [dec]) if dec.get("type") == "Sequence" else [dec]
    kinds = {p.get("type") for p in parts if p}
    if any(p.get("type") == "Replace" and SPM_SPACE in json.dumps(p.get("pattern", ""), ensure_ascii=False)
           for p in parts if p):
        kinds.add("Metaspace")
    return kinds


def token_bytes(tokenizer) -> list[bytes | None]:
    """The byte string of every token id (None: added/special tokens and unreadable entries)."""
    vocab = tokenizer.get_vocab()
    size = max(vocab.values()) + 1 if vocab else 0
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {}) | set(tokenizer.all_special_ids)
    kinds = _decoder_kinds(tokenizer)
    out: list[bytes | None] = [None] * size
    if "ByteLevel" in kinds:
        table = _byte_decoder()
        for tok, i in vocab.items():
            if i not in added and all(ch in table for ch in tok):
                out[i] = bytes(table[ch] for ch in tok)
        return out
    if "Metaspace" in kinds or "ByteFallback" in kinds:
        for tok, i in vocab.items():
            m = _BYTE_TOKEN.match(tok)
            if i in added and not m:  # a byte token may be registered as an added token
                continue
            out[i] = bytes([int(m.group(1), 16)]) if m else tok.replace(SPM_SPACE, " ").encode("utf-8")
        return out
    for tok, i in vocab.items():  # unknown scheme: what the tokenizer decodes a lone token to
        if i not in added:
            text = tokenizer.decode([i])
            out[i] = None if "\ufffd" in text else text.encode("utf-8")
    return out


def byte_token_ids(tokenizer) -> set[int]:
    """Ids of SentencePiece byte-fallback tokens (<0xNN>)."""
    return {i for tok, i in tokenizer.get_vocab().items() if _BYTE_TOKEN.match(tok)}


def _first_by_bytes(strings: list[bytes | None], byte_tokens: set[int]) -> dict[bytes, int]:
    """bytes -> one id: a regular token before a <0xNN> byte token, then the lowest id."""
    best: dict[bytes, int] = {}
    for i, b in enumerate(strings):
        if b and (b not in best or (best[b] in byte_tokens and i not in byte_tokens)):
            best[b] = i
    return best


@dataclass
class VocabBridge:
    """The shared vocabulary of a (target, draft) tokenizer pair and how to translate."""
    target_bytes: list[bytes | None]
    draft_bytes: list[bytes | None]
    target_vocab: int  # rows of the target's LM head (logits width the engine works in)
    draft_vocab: int  # rows of the draft's LM head
    shared_target: torch.Tensor = field(init=False)  # sorted target ids with a draft twin
    shared_draft: torch.Tensor = field(init=False)  # their twins, in the same order
    t2d: torch.Tensor = field(init=False)  # [target_vocab] draft twin or -1
    draft_byte_tokens: set = field(default_factory=set)  # the draft's <0xNN> ids
    draft_bos: list[int] = field(default_factory=list)
    special_text: dict[int, str] = field(default_factory=dict)  # target special id -> its text
    draft_specials: dict[str, int] = field(default_factory=dict)  # draft special text -> its id
    _expansions: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _prompts: dict[tuple, list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        draft_by = _first_by_bytes([b if i < self.draft_vocab else None for i, b in enumerate(self.draft_bytes)],
                                   self.draft_byte_tokens)
        pairs = []
        seen_draft = set()
        for t, b in enumerate(self.target_bytes[:self.target_vocab]):
            d = draft_by.get(b) if b else None
            if d is not None and d not in seen_draft:  # one target id per draft id (q must map 1:1)
                seen_draft.add(d)
                pairs.append((t, d))
        self.t2d = torch.full((self.target_vocab,), -1, dtype=torch.long)
        if pairs:
            ts, ds = zip(*pairs)
            self.shared_target = torch.tensor(ts, dtype=torch.long)
            self.shared_draft = torch.tensor(ds, dtype=torch.long)
            self.t2d[self.shared_target] = self.shared_draft
        else:
            self.shared_target = torch.zeros(0, dtype=torch.long)
            self.shared_draft = torch.zeros(0, dtype=torch.long)
        # regular (non-special) target tokens: the denominator of the shared share
        self.target_tokens = sum(1 for b in self.target_bytes[:self.target_vocab] if b)
        self._draft_index = draft_by
        self._max_len = max((len(b) for b in draft_by), default=1)

    @classmethod
    def build(cls, target_tokenizer, draft_tokenizer, target_vocab: int, draft_vocab: int) -> "VocabBridge":
        bridge = cls(token_bytes(target_tokenizer), token_bytes(draft_tokenizer), target_vocab, draft_vocab,
                     draft_byte_tokens=byte_token_ids(draft_tokenizer))
        bos = getattr(draft_tokenizer, "bos_token_id", None)
        probe = draft_tokenizer("a")["input_ids"] if callable(draft_tokenizer) else []
        bridge.draft_bos = [bos] if bos is not None and probe[:1] == [bos] else []
        bridge.special_text = {int(i): str(t) for i, t in
                               (getattr(target_tokenizer, "added_tokens_decoder", {}) or {}).items()}
        bridge.draft_specials = {str(t): int(i) for i, t in
                                 (getattr(draft_tokenizer, "added_tokens_decoder", {}) or {}).items()}
        return bridge

    # -- the figures a pair check shows -------------------------------------------------
    @property
    def n_shared(self) -> int:
        return len(self.shared_target)


    @property
    def shared_share(self) -> float:
        return self.n_shared / max(1, self.target_tokens)

    def is_shared(self, target_id: int) -> bool:
        return 0 <= target_id < self.target_vocab and int(self.t2d[target_id]) >= 0

    def coverage(self, target_ids: list[int]) -> float:
        """Share of these target tokens that are shared (the draft can propose them)."""
        ids = [t for t in target_ids if 0 <= t < self.target_vocab]
        if not ids:
            return 0.0
        return float((self.t2d[torch.tensor(ids)] >= 0).float().mean())

    def check(self, target_name: str = "target", draft_name: str = "draft") -> None:
        """Refuse a pair that shares almost nothing: its draft could propose almost nothing."""
        if self.shared_share < MIN_SHARED_SHARE:
            raise MirrorSDError(
                f"The draft {draft_name!r} and the target {target_name!r} share only {self.n_shared} of "
                f"{self.target_tokens} tokens ({self.shared_share:.1%}): the draft could propose almost "
                f"nothing the target can verify. Pick a draft whose tokenizer is closer to the target's "
                f"(at least {MIN_SHARED_SHARE:.0%} of the target's vocabulary in common).")

    # -- translation ----------------------------------------------------------------------
    def spell(self, data: bytes) -> list[int]:
        """`data` in draft tokens, longest match first (bytes the draft cannot write are skipped)."""
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._max_len, len(data) - i), 0, -1):
                d = self._draft_index.get(data[i:i + n])
                if d is not None:
                    out.append(d)
                    i += n
                    break
            else:
                i += 1
        return out

    def expand(self, target_id: int) -> list[int]:
        """The draft tokens that spell one target token (one for a shared token, never none)."""
        d = int(self.t2d[target_id]) if 0 <= target_id < self.target_vocab else -1
        if d >= 0:
            return [d]
        if target_id not in self._expansions:
            b = self.target_bytes[target_id] if target_id < len(self.target_bytes) else None
            text = self.special_text.get(target_id, "")
            if b is None and text in self.draft_specials:  # the same special token (one family)
                self._expansions[target_id] = [self.draft_specials[text]]
                return self._expansions[target_id]
            if b is None:
                b = text.encode("utf-8")
            self._expansions[target_id] = self.spell(b) or self.spell(b" ")
        return self._expansions[target_id]

    def remember_prompt(self, target_ids: list[int], draft_ids: list[int]) -> None:
        """The draft's own rendering of a prompt the target reads as `target_ids`."""
        if len(self._prompts) > 64:
            self._prompts.pop(next(iter(self._prompts)))
        self._prompts[tuple(target_ids)] = list(draft_ids)

    def draft_prompt(self, target_ids: list[int]) -> list[int]:
        """The draft's prompt for a target prompt: its remembered rendering (ModelPair.encode_prompt),
        else the target's tokens spelled in draft tokens after the draft's BOS."""
        known = self._prompts.get(tuple(target_ids))
        if known is not None:
            return list(known)
        return self.draft_bos + [d for t in target_ids for d in self.expand(t)]


def draft_messages_text(messages: list[dict]) -> str:
    """What a draft without a chat template reads for a conversation."""
    return "\n".join(str(m.get("content", "")) for m in messages) + DRAFT_PROMPT_SEPARATOR


def encode_draft_prompt(draft_tokenizer, messages: list[dict], chat: bool = True) -> tuple[list[int], str]:
    """(the draft's prompt ids, how it was made, in words) for a conversation. `chat` False:
    the target reads the plain text (no chat template), and so does the draft."""
    if not chat:
        ids = draft_tokenizer("\n".join(str(m.get("content", "")) for m in messages))["input_ids"]
        return list(ids), "the same plain text as the target"
    if getattr(draft_tokenizer, "chat_template", None):
        ids = draft_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return list(ids), "the draft's own chat template"
    ids = draft_tokenizer(draft_messages_text(messages))["input_ids"]
    return list(ids), "the user's text and a blank line (the draft has no chat template)"
