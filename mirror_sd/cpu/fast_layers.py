"""A decoder layer in two C++ calls, for models on the AVX2 kernels (int8, int4) on a CPU.

At one decode row, on lean layers, the int4 0.5B draft's 24 layers took 38.5 ms of a 49.8 ms
forward, while its 97 kernel layers called back to back took 25.2 ms, the LM head 9.5 of it:
most of a layer's time was tensor ops and Python around the weight kernels
(docs/performance.md). `kernels/fast_layer.cpp` does a Qwen2/Llama layer's norm, projections,
rotary, attention and MLP in two calls (`layer_pre`, `layer_post`), with the KV cache update
between them left to the cache object, so every transformers cache, crop and batch operation
the engine uses still works.

Numerics: the same operations in float32, not transformers' exact bits (sums run in another
order). Each query row is computed on its own, in a fixed order by one thread, and the
linears are the extension's row-exact kernels, so a row's output is bit-identical whatever
other rows share the call and whatever the thread count: verifying k tokens gives the bits of
decoding them one by one. Every method (AR, SD, Mirror-SD, transformers' generate()) runs the
same layers, so the comparisons stay like for like.

Installed by models.precision.apply_precision after the lean layers, when its
`KernelChoice.fast_layers` is on, on layers whose projections are all this extension's kernels
with q/k/v and gate/up fused; anything else keeps lean_layers' forward.
"""
from __future__ import annotations

import types

import torch

from mirror_sd.cpu import lean_layers
from mirror_sd.cpu import int8 as native_int8
from mirror_sd.cpu.linears import FusedPart

_EMPTY = torch.empty(0)


def _params(module) -> list[torch.Tensor] | None:
    """The kernel arguments of an extension layer (native_int8 / native_int4), else None."""
    args = getattr(module, "kernel_args", None)
    return args() if callable(args) else None


def _fused(parts, order) -> object | None:
    """The kernel layer behind FusedParts `parts` when they are its members in `order`."""
    if not all(isinstance(p, FusedPart) for p in parts):
        return None
    group = parts[0]._group
    if any(p._group is not group for p in parts) or tuple(p.index for p in parts) != order:
        return None
    return group.linear


def fits(layer) -> bool:
    if not lean_layers.fits(layer):
        return False
    attn, mlp = layer.self_attn, layer.mlp
    qkv = _fused((attn.q_proj, attn.k_proj, attn.v_proj), (0, 1, 2))
    gate_up = _fused((mlp.gate_proj, mlp.up_proj), (0, 1))
    act = type(mlp.act_fn).__name__
    return act in ("SiLUActivation", "SiLU") and qkv is not None and gate_up is not None and \
        all(_params(m) is not None for m in (qkv, gate_up, attn.o_proj, mlp.down_proj))


def install(model) -> int:
    """Give every layer of `model` that `fits` the two-call forward; the count. Only layers
    converted by the extension fit, so this never builds it."""
    count = 0
    for module in model.modules():
        if fits(module):
            module.forward = types.MethodType(_forward, module)  # deep copies rebind it
            count += 1
    return count


def installed(model) -> int:
    return sum(1 for m in model.modules()
               if getattr(vars(m).get("forward"), "__func__", None) is _forward)


def _forward(layer, hidden_states, attention_mask=None, position_ids=None, cache=None,
             use_cache=False, position_embeddings=None, past_key_values=None, **kwargs):
    cache = cache if cache is not None else past_key_values
    if layer.training or position_embeddings is None or kwargs.get("output_attentions") \
            or hidden_states.dtype != torch.float32 or hidden_states.device.type != "cpu":
        return type(layer).forward(layer, hidden_states, attention_mask=attention_mask,
                                   position_ids=position_ids, cache=cache, use_cache=use_cache,
                                   position_embeddings=position_embeddings, **kwargs)
    ext = native_int8.load()
    attn, mlp = layer.self_attn, layer.mlp
    qkv = attn.q_proj._group
    cos, sin = position_embeddings
    head = attn.head_dim
    ln1, ln2 = layer.input_layernorm, layer.post_attention_layernorm
    query, key, value = ext.layer_pre(hidden_states, ln1.weight, ln1.variance_epsilon,
                                      _params(qkv.linear), cos, sin, qkv.sizes[0] // head,
                                      qkv.sizes[1] // head)
    if cache is not None:
        key, value = cache.update(key, value, attn.layer_idx,
                                  kwargs={"position_ids": position_ids, "use_cache": use_cache, **kwargs})
    mask = attention_mask if attention_mask is not None else _EMPTY
    return ext.layer_post(hidden_states, query, key, value, mask, attn.scaling,
                          _params(attn.o_proj), ln2.weight, ln2.variance_epsilon,
                          _params(mlp.gate_proj._group.linear), _params(mlp.down_proj))
