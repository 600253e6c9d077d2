"""Pure functions from run records to HTML: the token panes, the legend, the status line.

Every piece of model or user text goes through `html.escape`; tokens sit in a <pre> with
`white-space: pre-wrap`, so code keeps its indentation and copies out unchanged.
"""
from __future__ import annotations

import html
import unicodedata

from mirror_sd.engine.events import Verify

from .runs import RunRecord, analyse, colour, label, live_stats, tag
from .runs import title as method_title
from .texts import GLOSSARY, LEGEND, LEGEND_GROUPS, LEGEND_MARKS

esc = html.escape
KEEP = {"\n", "\t", "\r"}


def shown(text: str) -> str:
    """Token text for the page: a character no font can draw (control, private use, unassigned,
    a lone surrogate) becomes a visible U+XXXX escape; everything else, CJK included, stays."""
    out = []
    for ch in text:
        if ch not in KEEP and unicodedata.category(ch) in ("Cc", "Co", "Cn", "Cs"):
            out.append(f"U+{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def _rejections(rec: RunRecord) -> dict[int, Verify]:
    """step -> its Verify event, for the steps where the target rejected a drafted token."""
    return {e.step: e for e in rec.events if isinstance(e, Verify) and e.kind == "correction"}


def _rejected(rec: RunRecord, v: Verify, step_no: int) -> str:
    """The drafted token the target rejected, struck through, before the target's own token."""
    i = v.accepted
    if i >= len(v.drafted):
        return ""
    tok = v.drafted[i]
    text = rec.id_texts.get(tok, f"#{tok}")
    tip = (f"rejected draft token at step {step_no}: the draft gave it q = {v.q_probs[i]:.2f}, "
           f"the target p = {v.p_probs[i]:.2f}; the target wrote the next token instead")
    return f'<s class="msd-rej" data-step="{v.step}" title="{esc(tip)}">{esc(shown(text))}</s>'


def token_spans(rec: RunRecord) -> str:
    """The committed tokens, one <span> per token, coloured by kind; a rejected drafted token
    struck through before the target's correction (a toggle hides them); a token of whitespace
    alone is marked quietly (a dotted underline in its kind's colour), not as a blank brick."""
    out = []
    rejected = _rejections(rec)
    numbers = {s: i + 1 for i, s in enumerate(sorted({t.step for t in analyse(rec).tokens}))}
    for t in analyse(rec).tokens:
        kind_label = LEGEND.get(t.kind, (t.kind, ""))[0]
        if t.kind == "correction" and t.step in rejected:
            out.append(_rejected(rec, rejected.pop(t.step), numbers.get(t.step, t.step + 1)))
        ws = " ws" if t.text and not t.text.strip() else ""
        out.append(f'<span class="msd-tok k-{esc(t.kind)}{ws}" data-step="{t.step}" '
                   f'title="step {t.step} · {esc(kind_label)} · id {t.token_id}">{esc(shown(t.text))}</span>')
    return "".join(out)


def render_legend() -> str:
    """The token colours in two groups (drafted and kept; written by the target), then the
    whitespace mark: each colour once, named."""
    item = lambda cls, text, tip: (f'<span class="msd-legend-item" title="{esc(tip)}"><span class="{cls}">'  # noqa: E731
                                   f'{esc(text)}</span></span>')
    groups = "".join(
        f'<span class="msd-legend-group" role="group" aria-label="{esc(title)}">'
        f'<span class="msd-legend-title">{esc(title)}:</span>'
        + "".join(item(f"msd-tok k-{kind}", short, LEGEND[kind][1]) for kind, short in kinds) + "</span>"
        for title, kinds in LEGEND_GROUPS)
    marks = "".join(item(cls, text, tip) for cls, (text, tip) in LEGEND_MARKS.items())
    return (f'<div class="msd-legend" role="list" aria-label="token colours">'
            f'<b class="msd-legend-lead">Text colours:</b>{groups}{marks}'
            f'<span class="msd-legend-hint">hover for details</span></div>')


def term(word: str, key: str | None = None) -> str:
    """A word with its definition on hover (the glossary)."""
    tip = GLOSSARY.get(key or word, "")
    return f'<abbr class="msd-term" title="{esc(tip)}">{esc(word)}</abbr>' if tip else esc(word)


def narrow_fold(key: str, title: str, body: str) -> str:
    """`body` as it is on a wide page; on a narrow one (a phone, ui/panes.css) folded under
    `title`, opened with a tap (a checkbox and its label: no script)."""
    if not body:
        return ""
    box = f"msd-nf-{esc(key)}"
    return (f'<input type="checkbox" id="{box}" class="msd-nf-toggle">'
            f'<label for="{box}" class="msd-nf-label">{esc(title)}</label>'
            f'<div class="msd-nf-body">{body}</div>')


def _fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


PANE_STATES = {"waiting": "waiting", "running": "running…", "done": "done",
               "stopped": "stopped", "error": "error", "cached": "cached result",
               "replay": "replay", "skipped": "not run"}


def render_pane(method: str, rec: RunRecord | None, state: str, now_ns: int | None = None,
                note: str = "") -> str:
    """One run: name, state, elapsed time, tokens, tokens/s, then the coloured text."""
    name = label(method)
    stats = live_stats(rec, now_ns) if rec is not None else None
    head = [f'<span class="msd-name" style="color:{esc(colour(method))}">{esc(name)}</span>',
            f'<span class="msd-badge s-{esc(state)}">{esc(PANE_STATES.get(state, state))}</span>']
    if tag(method):  # a variant: what it changes, e.g. the early exit off
        head.append(f'<span class="msd-badge s-variant" title="{esc(method_title(method))}">{esc(tag(method))}</span>')
    if stats is not None:
        head.append(f'<span class="msd-stat"><b>{stats["tokens"]}</b> tokens in '
                    f'<b>{stats["elapsed_s"]:.1f}</b> s</span>')
        if stats.get("prefill_s") is not None:
            head.append(f'<span class="msd-stat" title="{esc(GLOSSARY["ttft"])}">first token '
                        f'<b>{stats["prefill_s"]:.2f}</b> s</span>')
        if stats.get("decode_tokens_per_s"):
            head.append(f'<span class="msd-stat" title="{esc(GLOSSARY["decode"])}">decode '
                        f'<b>{stats["decode_tokens_per_s"]:.2f}</b> tok/s</span>')
    body = token_spans(rec) if rec is not None else ""
    if not body:
        body = f'<span class="msd-placeholder">{esc(note or "no output yet")}</span>'
        note = ""
    notes = ""
    if rec is not None:
        notes = "".join(f'<div class="msd-error">{esc(m)}</div>' for m in rec.errors)
        notes += "".join(f'<div class="msd-notice">{esc(m)}</div>' for m in rec.notices)
    if note:
        notes += f'<div class="msd-note">{esc(note)}</div>'
    return (f'<div class="msd-pane m-{esc(method)}" data-state="{esc(state)}">'
            f'<div class="msd-pane-head">{"".join(head)}</div>'
            f'<pre class="msd-tokens">{body}</pre>{notes}</div>')


def render_status(message: str, level: str = "info", fraction: float | None = None) -> str:
    """The status line: progress of loading and runs, stop and error messages."""
    bar = ""
    if fraction is not None:
        pct = max(0.0, min(1.0, fraction)) * 100
        bar = f'<div class="msd-progress"><div style="width:{pct:.0f}%"></div></div>'
    return f'<div class="msd-status l-{esc(level)}">{esc(message)}{bar}</div>'


