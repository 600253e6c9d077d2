"""A tiny random model pair built in code, for tests and offline demos (MIRROR_SD_TINY=1).

Word-level tokenizer with a chat template; a 4-layer Qwen2 target and a draft that is the
target plus weight noise, so that some drafted tokens are accepted and some are rejected.
No downloads, no files: it builds in well under a second.
"""
from __future__ import annotations

import copy

WORDS = (
    ["<unk>", "<|im_start|>", "<|im_end|>", "user", "assistant", "\n", "    "]
    + "def return if else for in while ( ) : , . = + - * / == < > [ ] print x y n i "
      "the a of to is and it that <script> & \" ' result value list sum count True False "
      "None 0 1 2 hello world fast slow draft target token mirror".split()
)
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} "
                 "<|im_end|> \n {% endfor %}{% if add_generation_prompt %}<|im_start|> "
                 "assistant \n {% endif %}")
LAYERS = 4
NOISE = 0.02  # relative weight noise of the draft: a mix of accepted and rejected drafts


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # no eos token: a random model would stop at once; the demo shows max_new_tokens tokens
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_pair(seed: int = 0):
    """A ModelPair of two tiny random Qwen2 models sharing the tiny tokenizer's vocabulary."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mirror_sd.models.pair import ModelPair

    config = Qwen2Config(vocab_size=len(WORDS), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, tie_word_embeddings=False,
                         eos_token_id=None, bos_token_id=None, pad_token_id=None,
                         initializer_range=0.2)
    torch.manual_seed(seed)
    target = Qwen2ForCausalLM(config).eval()
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * NOISE * p.abs().mean())
    info = {"precision": "fp32", "dtype": "float32",
            "target": {"source": "tiny (random, built in code)", "device": "cpu", "layers": LAYERS},
            "draft": {"source": "tiny (target + noise)", "device": "cpu", "layers": LAYERS}}
    return ModelPair(target, draft, tiny_tokenizer(), target_name="tiny-target",
                     draft_name="tiny-draft", info=info)
