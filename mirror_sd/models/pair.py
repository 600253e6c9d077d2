"""A checked (target, draft, tokenizer) triple, as the decoders use it.

`loading.load_pair()` builds one from names; tests build one from tiny in-memory models.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from mirror_sd.errors import MirrorSDError


def model_vocab_size(model) -> int:
    head = model.get_output_embeddings()
    if isinstance(getattr(head, "out_features", None), int):  # nn.Linear and the int8 kernels
        return head.out_features
    weight = head.weight
    return int((weight() if callable(weight) else weight).shape[0])


def num_layers(model) -> int:
    return int(model.config.num_hidden_layers)


def same_vocabulary(a, b) -> bool:
    """Two tokenizers with the same token -> id map (one token stream serves both models)."""
    return a is b or a.get_vocab() == b.get_vocab()


def exit_parts(model):
    """(decoder layers, final norm, LM head) of a transformers causal LM."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return body.layers, body.norm, model.get_output_embeddings()


def model_device(model) -> torch.device:
    """Device of the input embeddings: where input ids must go."""
    return model.get_input_embeddings().weight.device


@dataclass
class ModelPair:
    target: Any  # a transformers causal LM
    draft: Any
    tokenizer: Any = None  # None in tests that work on ids only
    target_name: str = "target"
    draft_name: str = "draft"
    precision: str = "fp32"
    info: dict = field(default_factory=dict)  # load times, devices, parameter counts...
    streams: Any = None  # the draft's trained stream heads (streams.py); None: looked up in assets/
    # The draft's own tokenizer, when it may differ from the target's. A different one makes a
    # cross-tokenizer pair: `bridge` maps the vocabularies (vocab_bridge.py), `draft` becomes the
    # draft seen in target ids (bridged_draft.py) and `draft_model` stays the model as loaded.
    draft_tokenizer: Any = None
    bridge: Any = field(default=None, init=False)
    draft_model: Any = field(default=None, init=False)

    def __post_init__(self):
        self.draft_model = self.draft
        vt, vd = model_vocab_size(self.target), model_vocab_size(self.draft)
        if self.draft_tokenizer is not None and self.tokenizer is not None and not same_vocabulary(
                self.tokenizer, self.draft_tokenizer):
            from mirror_sd.models.bridged_draft import BridgedDraft
            from mirror_sd.models.vocab_bridge import VocabBridge
            self.bridge = VocabBridge.build(self.tokenizer, self.draft_tokenizer, vt, vd)
            self.bridge.check(self.target_name, self.draft_name)
            self.draft = BridgedDraft(self.draft_model, self.bridge)
        elif vt != vd:
            raise MirrorSDError(
                f"The target and the draft must share one vocabulary: target {self.target_name!r} "
                f"has {vt} token ids, draft {self.draft_name!r} has {vd} (a draft with another "
                f"tokenizer needs that tokenizer: load the pair by name).")
        self.target.eval()
        self.draft.eval()

    @property
    def cross(self) -> bool:
        """The draft uses another tokenizer (token-level intersection, vocab_bridge.py)."""
        return self.bridge is not None

    @property
    def vocab_size(self) -> int:
        return model_vocab_size(self.target)

    @property
    def target_layers(self) -> int:
        return num_layers(self.target)

    @property
    def context_length(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 2048))

    @property
    def eos_token_ids(self) -> set[int]:
        ids = set()
        for src in (getattr(self.target, "generation_config", None), self.target.config):
            eos = getattr(src, "eos_token_id", None) if src is not None else None
            if eos is None:
                continue
            ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def encode_prompt(self, prompt: str | list[dict], chat: bool = True) -> list[int]:
        """Token ids fed to the target: the target's chat template applied when it has one.

        `prompt` is a user message, or a list of {role, content} messages (multi-turn)."""
        if self.tokenizer is None:
            raise MirrorSDError("This pair has no tokenizer: pass token ids.")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if not messages or not any(str(m.get("content", "")).strip() for m in messages):
            raise MirrorSDError("The prompt is empty: type something for the model to answer.")
        templated = bool(chat and getattr(self.tokenizer, "chat_template", None))
        if templated:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                     tokenize=True)
            if hasattr(ids, "keys"):  # BatchEncoding in some versions
                ids = ids["input_ids"]
        else:
            ids = self.tokenizer("\n".join(m["content"] for m in messages))["input_ids"]
        if self.bridge is not None:  # the draft reads its own rendering of the same messages
            from mirror_sd.models.vocab_bridge import encode_draft_prompt
            self.bridge.remember_prompt(ids, encode_draft_prompt(self.draft_tokenizer, messages, templated)[0])
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=False)
