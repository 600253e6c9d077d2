"""A decoder layer's forward with fewer tensor ops and no submodule calls (CPU, fp32).

At one decode row on a 2-core CPU, everything in a layer except the weight-reading kernels is
op overhead: transformers' Qwen2/Llama layer makes about 90 tensor ops and 13 module calls a
layer for one token (docs/performance.md). This forward does the same arithmetic,
op for op and in the same order (RMSNorm as transformers writes it, rotary as q*cos +
rotate_half(q)*sin, the same attention function with the same arguments), so its logits are
bit-identical to transformers' own (tested: prefill, decode, verify; fp32, fp16w, int8,
int8-dyn; Qwen2 and Llama). What it drops is only bookkeeping: module calls, no-op dtype casts,
and, where q/k/v share one kernel call (linears.FusedPart), separate rotary ops for q and
k (elementwise IEEE ops give each element the same bits in one call or two).

Installed by models.precision.apply_precision on every CPU fp32-activation model whose layers
it knows; anything else (a training model, a sliding-window layer, another architecture, a GPU)
keeps transformers' forward.
"""
from __future__ import annotations

import sys

import torch

from mirror_sd.cpu.linears import FusedPart

LAYERS = ("Qwen2DecoderLayer", "LlamaDecoderLayer")
NORMS = ("Qwen2RMSNorm", "LlamaRMSNorm")
_silu = torch.nn.functional.silu


def install(model) -> int:
    """Give every decoder layer of `model` that `fits` the lean forward; the count."""
    count = 0
    for module in model.modules():
        if fits(module):
            module.forward = _lean_forward(module)
            count += 1
    return count


def uninstall(model) -> None:
    """Back to transformers' forward (the instance attribute shadowed the class's)."""
    for module in model.modules():
        if "forward" in vars(module) and getattr(module.forward, "lean", False):
            del module.forward


def installed(model) -> int:
    return sum(1 for m in model.modules() if getattr(vars(m).get("forward"), "lean", False))


def fits(layer) -> bool:
    if type(layer).__name__ not in LAYERS:
        return False
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    if attn is None or mlp is None or getattr(attn, "sliding_window", None) is not None:
        return False
    norms = (getattr(layer, "input_layernorm", None), getattr(layer, "post_attention_layernorm", None))
    if any(type(n).__name__ not in NORMS for n in norms):
        return False
    params = [p for p in layer.parameters()] + [b for b in layer.buffers()]
    if any(p.device.type != "cpu" for p in params):
        return False
    if any(n.weight.dtype != torch.float32 for n in norms):
        return False
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    return all(hasattr(attn, n) for n in names) and \
        all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn"))


def _rms(x, norm):
    # Qwen2RMSNorm / LlamaRMSNorm for fp32 input, less the two no-op casts
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)


def _lean_forward(layer):
    class_forward = type(layer).forward.__get__(layer)
    attn, mlp = layer.self_attn, layer.mlp
    eager = getattr(sys.modules[type(attn).__module__], "eager_attention_forward", None)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    extra = {"sliding_window": None} if hasattr(attn, "sliding_window") else {}
    act = _silu if type(mlp.act_fn).__name__ in ("SiLUActivation", "SiLU") else mlp.act_fn

    def forward(hidden_states, attention_mask=None, position_ids=None, cache=None,
                use_cache=False, position_embeddings=None, past_key_values=None, **kwargs):
        cache = cache if cache is not None else past_key_values
        if layer.training or position_embeddings is None or kwargs.get("output_attentions") \
                or hidden_states.dtype != torch.float32 or hidden_states.device.type != "cpu":
            return class_forward(hidden_states, attention_mask=attention_mask,
                                 position_ids=position_ids, cache=cache, use_cache=use_cache,
                                 position_embeddings=position_embeddings, **kwargs)
        kwargs = {"position_ids": position_ids, "use_cache": use_cache, **kwargs}
        b, m, _ = hidden_states.shape
        head = attn.head_dim
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        x = _rms(hidden_states, layer.input_layernorm)
        q_proj = attn.q_proj
        if isinstance(q_proj, FusedPart) and q_proj._group is attn.k_proj._group is \
                attn.v_proj._group and (q_proj.index, attn.k_proj.index, attn.v_proj.index) == (0, 1, 2):
            group = q_proj._group
            y = group.linear(x).view(b, m, -1, head).transpose(1, 2)
            nq = group.sizes[0] // head
            nk = group.sizes[1] // head
            qk = _rotate(y[:, :nq + nk], cos, sin)
            query, key, value = qk[:, :nq], qk[:, nq:], y[:, nq + nk:]
        else:
            query = _rotate(q_proj(x).view(b, m, -1, head).transpose(1, 2), cos, sin)
            key = _rotate(attn.k_proj(x).view(b, m, -1, head).transpose(1, 2), cos, sin)
            value = attn.v_proj(x).view(b, m, -1, head).transpose(1, 2)
        if cache is not None:
            key, value = cache.update(key, value, attn.layer_idx, kwargs=kwargs)
        interface = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, eager)
        out, _ = interface(attn, query, key, value, attention_mask, dropout=0.0,
                           scaling=attn.scaling, **extra, **kwargs)
        hidden_states = hidden_states + attn.o_proj(out.reshape(b, m, -1).contiguous())
        x = _rms(hidden_states, layer.post_attention_layernorm)
        gate = mlp.gate_proj
        if isinstance(gate, FusedPart) and gate._group is mlp.up_proj._group and \
                (gate.index, mlp.up_proj.index) == (0, 1):
            g, u = gate._group.linear(x).split(gate._group.sizes, dim=-1)
        else:
            g, u = gate(x), mlp.up_proj(x)
        return hidden_states + mlp.down_proj(act(g) * u)

    forward.lean = True
    return forward
