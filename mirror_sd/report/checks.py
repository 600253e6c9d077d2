"""Before anything loads: does this pair have a chance? One line per pair that cannot work.

A pair cannot work when the draft is not smaller than the target (drafting then costs as
much as the target itself), when the two would not fit in memory (models/memory.py, the same
check load_pair makes), or when the tokenizers share almost nothing (models/vocab_bridge.py's
refusal). All of it is known from the models' headers and tokenizers, without their weights.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mirror_sd.errors import MirrorSDError


@dataclass
class PairVerdict:
    draft: str
    reason: str | None = None  # None: the pair may work; else why it cannot, in one line
    target_params: int | None = None
    draft_params: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reason is None


def size_reason(target_params: int, draft_params: int) -> str | None:
    if draft_params >= target_params:
        return (f"the draft ({draft_params / 1e6:,.0f}M parameters) is not smaller than the target "
                f"({target_params / 1e6:,.0f}M): drafting costs as much as the target itself, so "
                f"speculative decoding cannot be faster than the target alone")
    return None


def _shared_vocabulary_reason(tok_t, tok_d, vt: int | None, vd: int | None, names) -> str | None:
    from mirror_sd.models.pair import same_vocabulary
    from mirror_sd.models.vocab_bridge import VocabBridge
    if same_vocabulary(tok_t, tok_d):
        return None
    try:
        VocabBridge.build(tok_t, tok_d, vt or len(tok_t), vd or len(tok_d)).check(*names)
    except MirrorSDError as e:
        return str(e)
    return None


def check_pairs(target: str, drafts: list[str], *, precision: str = "fp32",
                target_precision: str | None = None, draft_precision: str | None = None,
                target_device: str = "auto", draft_device: str = "auto",
                memory_limit_bytes: int | None = None, cache_dir=None, progress=None,
                tokenizers: bool = True) -> list[PairVerdict]:
    """A verdict per draft. A problem with the target or the settings (an unknown model, a
    precision the device cannot run) concerns every pair: MirrorSDError, one line."""
    from collections import defaultdict

    from mirror_sd.models.loading import cache_kind, load_tokenizer, resolve_sources
    from mirror_sd.models.memory import check_memory, pool
    from mirror_sd.models.names import inspect
    from mirror_sd.models.precision import check_precisions, kernel_choice
    from mirror_sd.placement import resolve_placement

    placement = resolve_placement(target_device, draft_device, None)
    names_prec = {"target": target_precision or precision, "draft": draft_precision or precision}
    precs = check_precisions(names_prec, {"target": placement.target_device,
                                          "draft": placement.draft_device}, kernel_choice())
    kernels = kernel_choice()
    kinds = {"target": cache_kind(names_prec["target"], placement.target_device, kernels),
             "draft": cache_kind(names_prec["draft"], placement.draft_device, kernels)}
    t_src = resolve_sources({"target": target}, False, cache_dir, progress, kinds).srcs["target"]
    t_params, t_vocab = inspect(t_src, "target", False)
    t_tok = None
    out = []
    for name in drafts:
        verdict = PairVerdict(name, target_params=t_params)
        out.append(verdict)
        try:
            d_src = resolve_sources({"draft": name}, False, cache_dir, progress, kinds).srcs["draft"]
            d_params, d_vocab = inspect(d_src, "draft", False)
        except MirrorSDError as e:
            verdict.reason = str(e)
            continue
        verdict.draft_params = d_params
        needs = defaultdict(float)
        needs[pool(placement.target_device_map)] += t_params * precs["target"].bytes_per_param
        needs[pool(placement.draft_device)] += d_params * precs["draft"].bytes_per_param
        try:
            check_memory(needs, memory_limit_bytes, f"The pair in {names_prec['target']} needs", placement)
        except MirrorSDError as e:
            verdict.reason = str(e).rstrip(".")
            continue
        verdict.reason = size_reason(t_params, d_params)
        if verdict.reason is None and tokenizers:
            try:
                t_tok = t_tok or load_tokenizer(t_src, False, "the target")
                d_tok = load_tokenizer(d_src, False, "the draft")
            except MirrorSDError as e:
                verdict.reason = str(e)
                continue
            verdict.reason = _shared_vocabulary_reason(t_tok, d_tok, t_vocab, d_vocab,
                                                       (t_src.name, d_src.name))
    return out
