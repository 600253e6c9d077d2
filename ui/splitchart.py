"""Each Mirror-SD's wall time against SD's, in seconds: one line of words and one small chart.

The chart draws `time_split` (ui/figures.py) per Mirror-SD method: one row per part, a bar
left of a zero line for the seconds Mirror-SD saved, right of it for the seconds it lost, and
a total row; every method on one scale. The figures are the ones the page prints, in
hundredths of a second: each part as its two decimals round it, the total as the two wall
times the cards print subtract, and "the rest" what the other parts leave of that total (as
`time_split` defines it), so that the parts shown add up to the total shown. A part that
prints as 0.00 s is left out. Plain HTML with inline styles: nothing is measured here.
"""
from __future__ import annotations

import html

from .figures import Card, time_split
from .palette import SPLIT
from .runs import RunRecord, label

esc = html.escape

LEAD = "Against SD, second by second"  # the takeaway's item the chart sits in
PARTS = ("overlap", "steps", "per_step", "rest")  # the rows' order, the total's row on top
HOW = ("Each Mirror-SD's wall time against SD's, split into parts that add up to it: seconds saved "
       "left of the zero line, seconds lost right of it, every method on one scale.")


def cents(x: float) -> int:
    """Seconds in hundredths, as '{:.2f}' prints them."""
    return round(float(f"{x:.2f}") * 100)


def seconds(n: int, signed: bool = True) -> str:
    """Hundredths of a second as the chart prints them: '+0.49 s', '−0.71 s', '0.00 s'."""
    sign = ("+" if n > 0 else "−" if n < 0 else "") if signed else ""
    return f"{sign}{abs(n) / 100:.2f} s"


def printed_split(c: dict[str, Card], records: dict[str, RunRecord], m: str) -> dict | None:
    """`time_split` for method `m` against "sd" in the hundredths the page prints: {"total": the
    cards' wall times subtracted, "parts": {part: its hundredths} with the parts that print as
    0.00 s left out, the rest closing the sum}; None without SD's run, `m`'s or the split's
    figures."""
    if "sd" not in c or m not in c:
        return None
    split = time_split(c["sd"], c[m], records["sd"], records[m])
    if split is None:
        return None
    total = cents(c[m].wall_s) - cents(c["sd"].wall_s)
    parts = {k: cents(split[k]) for k in PARTS[:-1]}
    parts["rest"] = total - sum(parts.values())
    return {"total": total, "parts": {k: v for k, v in parts.items() if v}}


def _steps_words(sd: Card, mirror: Card) -> tuple[str, str]:
    """The verify steps' row: its short name, and its detail (the counts, the windows' medians)."""
    more = mirror.verify_steps - sd.verify_steps
    steps = f"{abs(more)} {'more' if more > 0 else 'fewer'} verify step{'' if abs(more) == 1 else 's'}"
    counts = f"{mirror.verify_steps} against {sd.verify_steps}"
    medians = (f"; windows of median {mirror.windows[1]:g} tokens against {sd.windows[1]:g}"
               if mirror.windows and sd.windows and mirror.windows[1] != sd.windows[1] else "")
    return f"{steps} ({counts})", f"{steps} ({counts}{medians}), each at SD's mean time per verify step"


def part_words(sd: Card, mirror: Card, m: str, key: str, n: int) -> tuple[str, str]:
    """(label, title) of one part's row of method `m` (its card `mirror`): '−0.71 s waiting for
    the draft', and the sentence with every figure behind it ('Mirror-SD saved 0.71 s on
    waiting for the draft: it drafted 2.10 s in all and hid 1.40 s of it beside the target.')."""
    hidden = mirror.draft_hidden_s or 0.0
    drafted = hidden + (mirror.draft_exposed_s or 0.0)
    steps, steps_detail = _steps_words(sd, mirror)
    names = {"overlap": ("waiting for the draft", "waiting for the draft" + (
                 f": it drafted {drafted:.2f} s in all and hid {hidden:.2f} s of it beside the target"
                 if hidden >= 0.005 else "")),
             "steps": (steps, steps_detail),
             "per_step": (f"each verify step {'longer' if n > 0 else 'shorter'} (mean)",
                          f"each verify step taking {'longer' if n > 0 else 'less time'} "
                          f"(its mean over the verify steps after the first, against SD's)"),
             "rest": ("the rest (first token, overhead)",
                      "the rest (first token, overhead): what the other parts leave of the difference")}
    short, detail = names[key]
    return (f"{seconds(n)} {short}",
            f"{label(m)} {'lost' if n > 0 else 'saved'} {seconds(n, False)} on {detail}.")


def total_words(sd: Card, mirror: Card, m: str, total: int) -> tuple[str, str]:
    """(label, title) of the total's row of method `m` (its card `mirror`): 'Mirror-SD: +0.48 s
    against SD's 8.74 s', and 'Mirror-SD took 9.22 s, 0.48 s more than SD's 8.74 s.'"""
    than = f"{seconds(total, False)} {'more' if total > 0 else 'less'} than" if total else "as long as"
    return (f"{label(m)}: {seconds(total)} against SD's {sd.wall_s:.2f} s",
            f"{label(m)} took {mirror.wall_s:.2f} s, {than} SD's {sd.wall_s:.2f} s.")


def short_line(c: dict[str, Card], records: dict[str, RunRecord], methods: list[str]) -> str:
    """The takeaway's line for the chart, a clause per method: 'Mirror-SD took 0.48 s more than SD
    (9.22 s against 8.74 s); Mirror-SD (always overlapped) 0.12 s less (8.62 s); the chart below
    splits each.' ('' where no method has a split)."""
    said = []
    for m in methods:
        got = printed_split(c, records, m)
        if got is None:
            continue
        n, wall = got["total"], f"{c[m].wall_s:.2f} s"
        than = f"{seconds(n, False)} {'more' if n > 0 else 'less'}" if n else "as long"
        said.append(f"{label(m)} {than} ({wall})" if said else  # SD's figures once, in the first
                    f"{label(m)} took {than} {'than' if n else 'as'} SD ({wall} against {c['sd'].wall_s:.2f} s)")
    if not said:
        return ""
    return f"{'; '.join(said)}; the chart below splits {'it' if len(said) == 1 else 'each'}."


def _row(n: int, top: int, text: str, title: str, kind: str) -> str:
    """One row: a bar from the zero line (left: saved, right: lost), its width `n` over `top`
    of a half, and its label."""
    side = "lost" if n > 0 else "saved"
    width = 50.0 * abs(n) / top if top else 0.0
    edge = "left" if n > 0 else "right"
    bar = (f'<span class="sp-bar sp-{side}" style="{edge}:50%;width:{width:.1f}%;background:{SPLIT[side]}" '
           f'title="{esc(title)}"></span>' if n else "")
    return (f'<div class="sp-row sp-{kind}" data-part="{kind}" data-cents="{n}">'
            f'<span class="sp-track">{bar}<span class="sp-zero"></span></span>'
            f'<span class="sp-label" title="{esc(title)}">{esc(text)}</span></div>')


def render_split_chart(c: dict[str, Card], records: dict[str, RunRecord], methods: list[str]) -> str:
    """The chart: a block per method in `methods` with a split, side by side, all on the scale
    of the largest figure drawn ('' where none has one)."""
    splits = {m: got for m in methods if (got := printed_split(c, records, m)) is not None}
    if not splits:
        return ""
    top = max(abs(v) for got in splits.values() for v in (got["total"], *got["parts"].values()))
    blocks = []
    for m, got in splits.items():
        sd, mirror = c["sd"], c[m]
        rows = [_row(got["total"], top, *total_words(sd, mirror, m, got["total"]), "total")]
        rows += [_row(n, top, *part_words(sd, mirror, m, k, n), k) for k, n in got["parts"].items()]
        blocks.append(f'<div class="sp-method" data-method="{esc(m)}">{"".join(rows)}</div>')
    return f'<div class="msd-split" data-top-cents="{top}" title="{esc(HOW)}">{"".join(blocks)}</div>'
