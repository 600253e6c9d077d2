"""Tiny GGUF files written in code (gguf's GGUFWriter): a Qwen2-architecture model with a
byte-level BPE tokenizer, its weights in GGUF's quantized types, for tests of the loaders that
read GGUF files directly (no download, a second to write)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 96  # the default sizes
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 single-byte tokens of a byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def tokens() -> tuple[list[str], list[str]]:
    """(tokens, merges): the bytes, a few merges, then the special tokens."""
    merges = ["Ġ t", "h e", "Ġt he", "i n", "r e"]
    vocab = _byte_chars() + [m.replace(" ", "") for m in merges] + SPECIAL
    return vocab, merges


def write_qwen2(path: Path, seed: int = 0, tied: bool = False, types: dict | None = None,
                hidden: int = HIDDEN) -> Path:
    """A tiny Qwen2 GGUF at `path`: q/k/v with biases, the linears and embedding in quantized
    types (`types`: tensor-name substring -> GGMLQuantizationType name; default Q8_0 for the
    attention, Q5_0 for the MLP, Q4_K/Q6_K where a row holds 256 values), norms in F32;
    `tied`: no output.weight (the LM head is the embedding); `hidden`: a multiple of 256 for the
    K-quant types (their blocks hold 256 values)."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter, quants

    rng = np.random.default_rng(seed)
    vocab, merges = tokens()
    w = GGUFWriter(str(path), "qwen2")
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab)
    w.add_token_types([1] * (len(vocab) - len(SPECIAL)) + [3] * len(SPECIAL))
    w.add_token_merges(merges)
    w.add_eos_token_id(vocab.index("<|im_end|>"))
    w.add_bos_token_id(vocab.index("<|endoftext|>"))
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                        "<|im_end|>\n{% endfor %}<|im_start|>assistant\n")
    kv = hidden // HEADS * KV_HEADS
    shapes = {"token_embd.weight": (len(vocab), hidden), "output_norm.weight": (hidden,)}
    if not tied:
        shapes["output.weight"] = (len(vocab), hidden)
    for i in range(LAYERS):
        b = f"blk.{i}."
        shapes.update({b + "attn_norm.weight": (hidden,), b + "ffn_norm.weight": (hidden,),
                       b + "attn_q.weight": (hidden, hidden), b + "attn_q.bias": (hidden,),
                       b + "attn_k.weight": (kv, hidden), b + "attn_k.bias": (kv,),
                       b + "attn_v.weight": (kv, hidden), b + "attn_v.bias": (kv,),
                       b + "attn_output.weight": (hidden, hidden),
                       b + "ffn_gate.weight": (FFN, hidden), b + "ffn_up.weight": (FFN, hidden),
                       b + "ffn_down.weight": (hidden, FFN)})
    chosen = {"attn_": "Q8_0", "ffn_gate": "Q5_0", "ffn_up": "Q5_0", "ffn_down": "Q8_0",
              "token_embd": "Q8_0", "output.": "Q6_K" if hidden % 256 == 0 else "Q8_0",
              **(types or {})}
    for name, shape in shapes.items():
        values = (rng.standard_normal(shape) * (0.5 if len(shape) == 1 else 0.08)).astype(np.float32)
        if len(shape) == 1:  # norms near 1, biases small
            values = values + (1.0 if "norm" in name else 0.0)
            w.add_tensor(name, values)
            continue
        qtype = Q[next(t for key, t in chosen.items() if key in name)]
        data = _k_blocks(rng, shape, qtype) if qtype in (Q.Q4_K, Q.Q6_K) else \
            quants.quantize(values, qtype)
        w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _k_blocks(rng, shape: tuple[int, int], qtype) -> np.ndarray:
    """Random Q4_K / Q6_K blocks (gguf quantizes neither in numpy): random integers with small
    positive fp16 scales, [rows, bytes per row]."""
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q
    size = GGML_QUANT_SIZES[qtype][1]
    blocks = rng.integers(0, 256, size=(shape[0] * shape[1] // 256, size), dtype=np.uint8)
    halves = (rng.random((blocks.shape[0], 2)) * 0.01 + 1e-4).astype(np.float16).view(np.uint8)
    if qtype == Q.Q4_K:  # d, dmin first
        blocks[:, 0:4] = halves.reshape(-1, 4)
    else:  # Q6_K: d last
        blocks[:, -2:] = halves[:, :2]
    return blocks.reshape(shape[0], -1)
