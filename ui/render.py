"""Pure functions from run records to HTML: the token panes, the legend, the status line.

Every piece of model or user text goes through `html.escape`; tokens sit in a <pre> with
`white-space: pre-wrap`, so code keeps its indentation and copies out unchanged. Each line of
the text is a box of its own (`msd-ln`): a line too long for the pane wraps under a hanging
indent with a bar in the margin, so a wrapped line never reads as a new one (ui/live.js builds
the same boxes while a run is live).
"""
from __future__ import annotations

import html
import re
import unicodedata

from mirror_sd.engine.events import Verify

from .runs import RunRecord, analyse, colour, label, late_words, live_stats, tag
from .runs import title as method_title
from .texts import GLOSSARY, LEGEND, LEGEND_GROUPS, LEGEND_MARKS
from .why import LANES_TIP, lanes_badge

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


def is_ws(text: str) -> bool:
    """A token of whitespace alone (spaces, tabs, line breaks)."""
    return bool(text) and not text.strip()


def fill(text: str, ws: bool) -> str:
    """A token's text as HTML: each line break in a `msd-nl` span and, for a token of whitespace
    alone, each run of spaces or tabs in a `msd-sp` span; the CSS draws a faint ↵ and a faint dot
    per space over them (generated content: the characters, and so the copied text, unchanged)."""
    out = []
    for part in re.split(r"(\n|[ \t]+)", text):
        if part == "\n":
            out.append('<span class="msd-nl">\n</span>')
        elif part and ws and not part.strip(" \t"):
            out.append(f'<span class="msd-sp">{part}</span>')
        elif part:
            out.append(esc(shown(part)))
    return "".join(out)


def pieces(text: str) -> list[str]:
    """`text` cut after each line break: each piece but the last ends a line."""
    return re.split(r"(?<=\n)", text)


def _rejected(rec: RunRecord, v: Verify, step_no: int) -> str:
    """The drafted token the target rejected, struck through, before the target's own token
    (a line break in it drawn as ↵ in the line, never a break: it is not in the output)."""
    i = v.accepted
    if i >= len(v.drafted):
        return ""
    tok = v.drafted[i]
    text = rec.id_texts.get(tok, f"#{tok}")
    tip = (f"rejected draft token at step {step_no}: the draft gave it q = {v.q_probs[i]:.2f}, "
           f"the target p = {v.p_probs[i]:.2f}; the target wrote the next token instead")
    ws = " ws" if is_ws(text) else ""
    return f'<s class="msd-rej{ws}" data-step="{v.step}" title="{esc(tip)}">{fill(text, bool(ws))}</s>'


def token_spans(rec: RunRecord) -> str:
    """The committed tokens, one <span> per token, coloured by kind, in one box per line (a
    token with a line break inside is cut there: its later pieces are `is-cont`); a rejected
    drafted token struck through before the target's correction (a toggle hides them); a token
    of whitespace alone is marked quietly (a dotted underline in its kind's colour, a faint dot
    per space and ↵ per line break), not as a blank brick."""
    lines, line = [], []
    rejected = _rejections(rec)
    a = analyse(rec)
    numbers = {s: i + 1 for i, s in enumerate(sorted({t.step for t in a.tokens}))}
    for t in a.tokens:
        kind_label = LEGEND.get(t.kind, (t.kind, ""))[0]
        if t.kind == "late" and a.steps[t.step].window_late_ms is not None:  # its badge: how late
            kind_label = f"{kind_label}: {late_words(a.steps[t.step].window_late_ms)}"
        if t.kind == "correction" and t.step in rejected:
            line.append(_rejected(rec, rejected.pop(t.step), numbers.get(t.step, t.step + 1)))
        ws = " ws" if is_ws(t.text) else ""
        for n, piece in enumerate(pieces(t.text)):
            if not piece and n:
                continue
            cont = " is-cont" if n else ""
            line.append(f'<span class="msd-tok k-{esc(t.kind)}{ws}{cont}" data-step="{t.step}" '
                        f'title="step {t.step} · {esc(kind_label)} · id {t.token_id}">{fill(piece, bool(ws))}</span>')
            if piece.endswith("\n"):
                lines.append(line)
                line = []
    if line:
        lines.append(line)
    return "".join(f'<span class="msd-ln">{"".join(parts)}</span>' for parts in lines)


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
    marks = "".join(  # a whitespace token's sample: two spaces and a line break, as the panes mark them
        f'<span class="msd-legend-item" title="{esc(tip)}"><span class="{cls}"><span class="msd-sp">  </span>'
        f'<span class="msd-nl"></span></span> {esc(text)}</span>' for cls, (text, tip) in LEGEND_MARKS.items())
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
                note: str = "", rank: str = "") -> str:
    """One run: name, state, elapsed time, tokens, tokens/s (and `rank`, where this run stands
    among the method's interleaved runs), then the coloured text."""
    name = label(method)
    stats = live_stats(rec, now_ns) if rec is not None else None
    head = [f'<span class="msd-name" style="color:{esc(colour(method))}">{esc(name)}</span>',
            f'<span class="msd-badge s-{esc(state)}">{esc(PANE_STATES.get(state, state))}</span>']
    if tag(method):  # a variant: what it changes, e.g. the early exit off
        head.append(f'<span class="msd-badge s-variant" title="{esc(method_title(method))}">{esc(tag(method))}</span>')
    lanes = lanes_badge(method, rec) if rec is not None and rec.finish is not None else ""
    if lanes:  # Mirror-SD's overlap gate: in how many verify steps its lanes ran at once
        head.append(f'<span class="msd-badge s-lanes" title="{esc(LANES_TIP)}">{esc(lanes)}</span>')
    if stats is not None:
        head.append(f'<span class="msd-stat"><b>{stats["tokens"]}</b> tokens in '
                    f'<b>{stats["elapsed_s"]:.2f}</b> s</span>')
        if stats.get("prefill_s") is not None:
            head.append(f'<span class="msd-stat" title="{esc(GLOSSARY["ttft"])}">first token '
                        f'<b>{stats["prefill_s"]:.2f}</b> s</span>')
        if stats.get("tokens_per_s"):  # end to end: the tiles' and the cards' metric
            head.append(f'<span class="msd-stat" title="{esc(GLOSSARY["e2e"])}">'
                        f'<b>{stats["tokens_per_s"]:.2f}</b> tok/s end to end'
                        + (f' <span class="msd-rank">({esc(rank)})</span>' if rank else "") + '</span>')
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


