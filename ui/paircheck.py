"""The pair check in the app: what a user should know about the loaded pair before a run.

- `ensure_check(loaded)`: `mirror_sd.engine.pair_check.check_pair` once per loaded pair, kept
  with it (call it holding `loaded.lock`: for a cross-tokenizer pair it runs the target for a
  few seconds). The result is plain data (it crosses processes on ZeroGPU and goes into
  traces): the pair's names, whether it is cross-tokenizer, the sentences to show, warnings
  (the check's and the loader's, `pair.info["warnings"]`), the draft's prompt for the sample.
- `cross_meta(pair)` / `output_coverage(pair, ids)`: the shared vocabulary of a cross pair and
  the share of a run's output it holds (the summary's sentence, `why.cross_sentence`).
- `render_pair_check(check)`: the compact "Pair check" box; `render_pair_note(text)` the same
  box holding one line (not loaded yet, loading, a failed load).
"""
from __future__ import annotations

import logging
from html import escape as esc

log = logging.getLogger(__name__)

SAME_TOKENIZER = "draft and target share one tokenizer"
DRAFT_PROMPT_CHARS = 600  # the draft's sample prompt is shown this long at most


def _sentence(text: str) -> str:
    text = str(text).strip()
    return text[:1].upper() + text[1:] if text else text


def compute_check(pair) -> dict:
    """The pair check as plain data (never raises: a failure is one sentence)."""
    from mirror_sd.engine.pair_check import check_pair, describe
    info = getattr(pair, "info", None) or {}
    warnings = [_sentence(w) for w in info.get("warnings") or []]
    check = {"target": pair.target_name, "draft": pair.draft_name,
             "precision": info.get("precision"), "draft_precision": info.get("draft_precision"),
             "cross": getattr(pair, "bridge", None) is not None,
             "lines": [], "warnings": warnings, "draft_prompt_text": None}
    try:
        report = check_pair(pair)
    except Exception as e:  # the check only informs: the pair itself loaded fine
        log.exception("pair check failed")
        check["lines"] = [f"The pair check failed: {type(e).__name__}: {e}"]
        return check
    check["warnings"] = warnings + [w for w in report.get("warnings", []) if w not in warnings]
    if not report["cross"]:
        return check  # the box's head says it: one tokenizer
    check["lines"] = describe({**report, "warnings": []})
    check["draft_prompt_text"] = report.get("draft_prompt_text")
    for key in ("shared_tokens", "target_tokens", "shared_share", "coverage", "sample_tokens"):
        if key in report:
            check[key] = report[key]
    return check


def ensure_check(loaded) -> dict:
    """The loaded pair's check, computed the first time (hold loaded.lock)."""
    if loaded.check is None:
        loaded.check = compute_check(loaded.pair)
    return loaded.check


def cross_meta(pair) -> dict | None:
    """The shared vocabulary of a cross-tokenizer pair (None for a same-tokenizer pair)."""
    bridge = getattr(pair, "bridge", None)
    if bridge is None:
        return None
    return {"shared_tokens": int(bridge.n_shared), "target_tokens": int(bridge.target_tokens),
            "shared_share": float(bridge.shared_share)}


def output_coverage(pair, token_ids) -> float | None:
    """Share of a run's output tokens that the draft could have proposed (shared tokens)."""
    bridge = getattr(pair, "bridge", None)
    if bridge is None or not token_ids:
        return None
    return float(bridge.coverage(list(token_ids)))


def human_name(name: str) -> str:
    """A bundled model's own name ('Qwen2.5-Coder 1.5B Instruct') for its source name as the
    loader gives it ("default target (<cache folder>)", or a bundled name and its folder);
    any other name (a path, a hub id) as it is."""
    from mirror_sd.models.bundled import DEFAULTS, bundled_model
    head = str(name).split(" (")[0].strip()
    model = DEFAULTS.get(head[len("default "):]) if head.startswith("default ") else bundled_model(head)
    if model is None or not model.note:
        return str(name)
    return model.note.split(" (")[0].split(":")[0]


def _names(check: dict) -> str:
    """'target Qwen2.5-Coder 1.5B Instruct (int8) + draft ...': each model by its own name and
    precision, its file name on hover."""
    precision = {"target": check.get("precision"), "draft": check.get("draft_precision") or check.get("precision")}
    out = []
    for role in ("target", "draft"):
        name = str(check.get(role, "?"))
        shown = human_name(name) + (f" ({precision[role]})" if precision[role] else "")
        out.append(f'{role} <span class="msd-pc-name" title="{esc(name)}">{esc(shown)}</span>')
    return " + ".join(out)


def render_pair_note(text: str, level: str = "info") -> str:
    """The box with one line (no pair loaded yet, loading, a failed load)."""
    return (f'<div class="msd-paircheck l-{esc(level)}"><b>Pair check</b> · '
            f'<span class="msd-pc-note">{esc(text)}</span></div>')


def render_pair_check(check: dict | None) -> str:
    """The pair check box: one line for a same-tokenizer pair (and its warnings); for a cross
    pair its sentences, the draft's prompt for the sample (folded) and any warnings."""
    if not check:
        return render_pair_note("appears when a pair is loaded (at launch, with “Check pair” or "
                                "the first Run).")
    cross = bool(check.get("cross"))
    kind = "cross-tokenizer" if cross else SAME_TOKENIZER
    head = (f'<div class="msd-pc-head"><b>Pair check</b> · {_names(check)} · '
            f'<span class="msd-pc-kind{" is-cross" if cross else ""}">{kind}</span></div>')
    lines = "".join(f"<li>{esc(line)}</li>" for line in check.get("lines", []))
    warns = "".join(f'<li class="msd-pc-warn">⚠ {esc(w)}</li>' for w in check.get("warnings", []))
    prompt = check.get("draft_prompt_text")
    details = ""
    if prompt:
        shown = prompt if len(prompt) <= DRAFT_PROMPT_CHARS else prompt[:DRAFT_PROMPT_CHARS] + "…"
        details = ('<details class="msd-pc-prompt"><summary>The text the draft reads for the '
                   f'sample prompt</summary><pre>{esc(shown)}</pre></details>')
    items = f'<ul class="msd-pc-lines">{lines}{warns}</ul>' if lines or warns else ""
    return f'<div class="msd-paircheck{" is-cross" if cross else ""}">{head}{items}{details}</div>'
