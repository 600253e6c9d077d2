"""What a user should know about a pair before a run: shared vocabulary, prompts, sizes.

`check_pair(pair)` answers with plain data (the app and the CLI print it):
- whether the draft shares the target's tokenizer or is bridged (token-level intersection,
  models/vocab_bridge.py); for a bridged pair, the shared tokens and the share of the
  target's *own* greedy output they cover (a short greedy run of the target on a sample
  prompt: the tokens the draft could have proposed at all);
- which text the draft reads (its chat template, the user's text, or the target's tokens);
- warnings: a draft as large as the target or larger (it cannot save time).
"""
from __future__ import annotations

import torch

from mirror_sd.engine.lanes import Lane

SAMPLE_PROMPT = "Write a Python function that returns the n-th Fibonacci number, and explain it briefly."
SAMPLE_TOKENS = 32


def params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.inference_mode()
def target_greedy(pair, prompt_ids: list[int], n: int) -> list[int]:
    """The target's own greedy continuation (n tokens, or up to an eos)."""
    lane, out = Lane(pair.target, "pair check"), []
    logits = lane.feed(list(prompt_ids), logits_to_keep=1)
    eos = pair.eos_token_ids
    for _ in range(n):
        token = int(logits[-1].argmax())
        out.append(token)
        if token in eos:
            break
        logits = lane.feed([token], logits_to_keep=1)
    return out


def check_pair(pair, sample_prompt: str = SAMPLE_PROMPT, sample_tokens: int = SAMPLE_TOKENS) -> dict:
    """The pair check as a dict (see the module docstring); `sample_tokens` 0 skips the run."""
    from mirror_sd.models.vocab_bridge import encode_draft_prompt
    t_params, d_params = params(pair.target), params(getattr(pair, "draft_model", pair.draft))
    report = {"cross": pair.bridge is not None, "target_params": t_params, "draft_params": d_params,
              "warnings": []}
    said = any("larger than the target" in w for w in (getattr(pair, "info", None) or {}).get("warnings", []))
    if d_params >= t_params and not said:  # load_pair already warns about a larger draft
        report["warnings"].append(
            f"The draft ({d_params / 1e6:.0f}M parameters) is not smaller than the target "
            f"({t_params / 1e6:.0f}M): drafting costs as much as the target itself, so speculative "
            f"decoding cannot be faster than the target alone.")
    if pair.bridge is None:
        report["prompt"] = "the draft shares the target's tokenizer and reads the same tokens"
        return report
    b = pair.bridge
    report.update(shared_tokens=b.n_shared, target_tokens=b.target_tokens, shared_share=b.shared_share,
                  target_vocab=b.target_vocab, draft_vocab=b.draft_vocab)
    messages = [{"role": "user", "content": sample_prompt}]
    if pair.draft_tokenizer is not None:
        templated = bool(getattr(pair.tokenizer, "chat_template", None))
        draft_ids, how = encode_draft_prompt(pair.draft_tokenizer, messages, templated)
        report["prompt"] = (f"the draft reads {how}; the target reads its own chat template" if templated
                            else f"the draft reads {how}")
        report["draft_prompt_text"] = pair.draft_tokenizer.decode(draft_ids)
    else:
        report["prompt"] = "the draft reads the target's tokens spelled in its own vocabulary"
    if sample_tokens > 0 and pair.tokenizer is not None:
        ids = target_greedy(pair, pair.encode_prompt(sample_prompt), sample_tokens)
        report.update(sample_tokens=len(ids), coverage=b.coverage(ids))
    return report


def describe(report: dict) -> list[str]:
    """The pair check in sentences."""
    lines = []
    if report["cross"]:
        lines.append(f"Cross-tokenizer pair: {report['shared_tokens']:,} tokens are spelled the same in both "
                     f"vocabularies ({report['shared_share']:.0%} of the target's {report['target_tokens']:,}); "
                     f"the draft proposes only those (token-level intersection), the target verifies as usual.")
        if "coverage" in report:
            lines.append(f"They cover {report['coverage']:.0%} of the target's own greedy output "
                         f"({report['sample_tokens']} tokens on a sample prompt): the other tokens can only "
                         f"come from the target (a correction or a bonus token).")
    lines.append(f"Prompt: {report['prompt']}.")
    lines.extend(report["warnings"])
    return lines
