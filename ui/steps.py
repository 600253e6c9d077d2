"""The step strip and the narrated step: what each speculative step did, at a glance and in words.

The strip is one cell per step of a speculative run, numbered from 1. A Mirror-SD cell's
colour is the step's own verdict outcome (ui/runs.verdict_outcome, the fact the inspector and
the zoomed step state too):
  hit    (blue)   one of the branches the draft rolled out during this step, beside the target,
                  started exactly at its verdict: it became the next window, no serial redraft;
  late   (indigo, hatched) such a hit whose branch the draft finished after the verdict (the
                  target waited for it: "late hit +n ms", runs.late_ms);
  miss   (yellow) no branch started there: the draft wrote the next window after the verdict,
                  serially, while the target waited;
  turn   (grey)   the lanes ran one after the other (the overlap gate's choice): no branch raced
                  the verdict, the draft wrote the next window after it as plain SD does;
  end    (grey)   no next window: the run ended at this step.
Plain SD's cells are all "drafted": every window is written while the target waits.
A bar under the cell gives the verdict: red when the target rejected part of the window (it
wrote its own token there), purple when it accepted all of it (plus its bonus token).

`narrate()` builds one sentence per step from its events: the early exit's guess, the branches
the draft built meanwhile, the verdict, and what it meant for the next window. All figures are
measured in the run (spans), none projected.
"""
from __future__ import annotations

import html
import math
import re
import statistics

from .runs import (RunRecord, StepView, analyse, branch_after_verdict_ns, checked_step, exit_check, late_words,
                   variant_of, verdict_outcome)

esc = html.escape

KINDS = {  # strip kind -> (label, definition)
    "hit": ("branch hit", "One of the branches the draft rolled out during this step, beside the "
                          "target, started exactly at its verdict: it became the next window (no "
                          "serial redraft), however many drafted tokens the target kept."),
    "late": ("late hit", "A branch hit whose branch was ready after the verdict: one of the branches "
                         "the draft rolled out during this step started exactly at its verdict and became "
                         "the next window, but the draft finished it after the verdict, so the target "
                         "waited for it (+n ms: how long)."),
    "miss": ("branch miss", "No branch started at this step's verdict: the draft wrote the next "
                            "window after it, serially, while the target waited."),
    "turn": ("lanes in turn", "The lanes ran one after the other in this step (overlapping them "
                              "measured slower here): the target verified, then the draft wrote "
                              "the next window from the verdict, as plain SD does. Neither a hit "
                              "nor a miss."),
    "end": ("run's end", "No next window: the run ended at this step."),
    "first": ("first window", "The first window, drafted after the prompt's prefill: nothing "
                              "could hit or miss yet."),
    "drafted": ("drafted", "Plain speculative decoding: the draft writes each window while the "
                           "target waits."),
    "plain": ("no draft", "A plain target step: no drafted window."),
}
WOULD = {  # a step in turn, by the exit check (after the run) -> its definition
    True: ("Checked after the run (untimed): the early exit, read at this step, ranked the verdict's "
           "root among the branches the draft would have rolled out, so with the lanes overlapped "
           "(on devices of their own) the next window would have been ready early: a branch hit."),
    False: ("Checked after the run (untimed): the verdict's root was not among the branches the "
            "draft would have rolled out, so with the lanes overlapped this step would have missed."),
}
WINDOW_STOPS = {  # Verify.stop -> why the window has its length (engine/windows.py)
    "gamma": ("its length limit under this run's window rule: the window setting (fixed windows), the "
              "current length (adaptive windows: 2 longer after a fully accepted window, 1 shorter after a "
              "rejection) or the longest a priced window may be"),
    "confidence": "the draft's probability of its last token fell below the threshold",
    "eos": "the draft wrote an end-of-sequence token",
    "room": "no more tokens were left to generate",
    "price": "its price (at this run's measured costs, one more token would not raise the expected tokens per second)",
    "probe": "a short window after decoded steps, to measure whether drafting pays again",
    "match": "the prompt lookup's continuation ended there",
}


SOURCES = {"draft": "the draft model", "lookup": "prompt lookup"}
_DECODED = re.compile(r"^decoded: 1 token in (?P<dec>\d+ ms)$")
_PASSED = re.compile(r"^drafting (?P<k>\d+) \((?P<src>\w+)\) would cost (?P<ms>\d+ ms) for (?P<tok>[\d.]+) expected "
                     r"tokens \(decoding: 1 in (?P<dec>\d+ ms)\); decoded instead$")
_DRAFTED = re.compile(r"^(?P<probe>probing: )?drafting (?P<k>\d+) \((?P<src>\w+)\): (?P<tok>[\d.]+) expected tokens in "
                      r"(?P<ms>\d+ ms)(?: \(decoding: 1 in (?P<dec>\d+ ms)\))?(?:; up to (?P<cap>\d+) while each next "
                      r"token pays)?$")


def price_figures(price: str) -> tuple[str, list[tuple[str, str]]]:
    """A priced window's price (the engine's words, engine/pricing.explain, kept in traces) as a
    short plain sentence and its figures as (plain name, value) rows, every figure kept; an
    unknown form: the words as they are, no rows."""
    price = (price or "").strip()
    if m := _DECODED.match(price):
        return "No window could be priced: the target decoded one token.", [("one target forward", m["dec"])]
    if m := _PASSED.match(price):
        return ("Drafting did not pay: the target decoded one token instead. Priced:",
                [("best window priced", f"{m['k']} tokens, {SOURCES.get(m['src'], m['src'])}"),
                 ("its expected tokens", m["tok"]), ("its expected time", m["ms"]),
                 ("decoding one token instead", m["dec"])])
    if m := _DRAFTED.match(price):
        lead = ("A probe: a short window drafted to measure whether drafting pays again. Priced:" if m["probe"] else
                "Drafting paid. Priced before drafting:")
        rows = [("best window priced", f"{m['k']} tokens, {SOURCES.get(m['src'], m['src'])}"),
                ("its expected tokens", m["tok"]), ("its expected time", m["ms"])]
        if m["dec"]:
            rows.append(("decoding one token instead", m["dec"]))
        if m["cap"]:
            rows.append(("longest it may grow (while each next token pays)", f"{m['cap']} tokens"))
        return lead, rows
    return price, []


def window_note(verify, figures: bool = True) -> str:
    """'n drafted tokens, stopped at ...' for a step's Verify event ('' without one; the
    reason is left out for traces recorded before windows had one); `figures`: the price's
    figures in words after it (the inspector lists them in a table instead, `price_table`)."""
    if verify is None:
        return ""
    n = len(verify.drafted)
    price = getattr(verify, "price", "") or ""
    lead, rows = price_figures(price) if price else ("", [])
    said = f"{lead} " + "; ".join(f"{name}: {value}" for name, value in rows) if rows else lead
    if n == 0 and price:
        return "no window, decoded" + (f": {said}" if figures else "")
    why = WINDOW_STOPS.get(getattr(verify, "stop", "") or "")
    by = " by prompt lookup" if getattr(verify, "source", "") == "lookup" else ""
    note = f"window of {n} drafted token{'' if n == 1 else 's'}{by}" + (f", stopped: {why}" if why else "")
    return note + (f" ({said})" if price and figures else "")


def price_table(verify) -> str:
    """A priced window's price in the inspector: its sentence and a two-column table of its
    figures ('' without a price)."""
    price = (getattr(verify, "price", "") or "") if verify is not None else ""
    if not price:
        return ""
    lead, rows = price_figures(price)
    body = "".join(f"<tr><th>{esc(name)}</th><td>{esc(value)}</td></tr>" for name, value in rows)
    table = f'<table class="msd-price-figures">{body}</table>' if rows else ""
    return f'<div class="msd-price"><span class="msd-price-lead">{esc(lead)}</span>{table}</div>'


OUTCOMES = {  # verify kind -> (label, definition)
    "correction": ("rejection", "The target rejected a drafted token and wrote its own there."),
    "bonus": ("all accepted", "The target accepted the whole window and added one token of its own."),
}

# The strip's click, and a click on a token in an output pane, select a step: both end in the
# inspector component's `select` event with {index: engine step, value: run}. Runs as the
# inspector's js_on_load (gr.HTML): `element` is the inspector, `trigger` fires its events.
PICK_JS = """
window.msdPickStep = (step, run) => trigger('select', {index: Number(step), value: run});
if (!element.dataset.msdPick) {
  element.dataset.msdPick = '1';
  element.addEventListener('click', (e) => {
    const cell = e.target.closest('[data-step][data-run]');
    if (cell && element.contains(cell) && !cell.disabled) window.msdPickStep(cell.dataset.step, cell.dataset.run);
  });
}
if (!window.msdTokenPick) {
  window.msdTokenPick = true;
  document.addEventListener('click', (e) => {
    const tok = e.target.closest('.msd-tok');
    const pane = tok && tok.closest('[id^="pane-"]');
    if (!pane) return;
    const run = pane.id.slice(5);
    let step = tok.dataset.step;
    if (step === undefined) { const m = /^step (\\d+)/.exec(tok.title || ''); step = m ? m[1] : undefined; }
    if (run === 'ar' || step === undefined || !window.msdPickStep) return;
    window.msdPickStep(step, run);
    const ins = document.getElementById('inspector');
    if (ins) ins.scrollIntoView({behavior: 'smooth', block: 'start'});
  });
}
"""


def visible(text: str) -> str:
    """Token text with its whitespace made visible, for chips and quotes."""
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")


OPEN, CLOSE = "\ue000", "\ue001"  # around a token in a sentence: ‘…’ in plain text, a chip in HTML


def quoted(rec: RunRecord, token_id: int) -> str:
    """A token in a sentence, between markers that `plain` turns into quotes and `chipped` into
    a chip (a token of quotes itself then reads as no quote in quotes)."""
    text = rec.id_texts.get(token_id)
    return f"{OPEN}{visible(text)}{CLOSE}" if text is not None else f"token #{token_id}"


def plain(text: str) -> str:
    """A sentence with its tokens in quotes."""
    return text.replace(OPEN, "‘").replace(CLOSE, "’")


def chipped(text: str) -> str:
    """A sentence as HTML, escaped, each of its tokens in a chip."""
    return (html.escape(text).replace(OPEN, '<code class="msd-qtok">').replace(CLOSE, "</code>"))


def _mirror(rec: RunRecord) -> bool:
    """Mirror-SD or one of its variants (a step can hit or miss)."""
    return variant_of(rec.method)[0] == "mirror"


def step_kind(rec: RunRecord, sv: StepView, first: bool) -> str:
    if first and sv.window:
        return "first" if _mirror(rec) else "drafted"
    if sv.origin == "hit":
        return "hit"
    if sv.origin == "fallback":
        return "miss"
    if sv.origin == "turn":
        return "turn"
    if sv.origin == "draft" or sv.window:
        return "drafted"
    return "plain"


def strip_kind(rec: RunRecord, sv: StepView, first: bool) -> str:
    """A strip cell's kind: Mirror-SD's verdict outcome (hit, miss, end; "turn" for a step whose
    lanes ran one after the other, which the engine counts neither a hit nor a miss), else
    step_kind."""
    if not _mirror(rec) or sv.verify is None:
        return step_kind(rec, sv, first)
    outcome = verdict_outcome(sv) or "end"
    if outcome == "hit" and sv.late_ms is not None:
        return "late"
    return "turn" if outcome == "miss" and lanes_in_turn(rec, sv.step) else outcome


def _seconds(rec: RunRecord, step: int, *labels: str) -> float:
    return sum(s.end_ns - s.start_ns for s in rec.spans if s.step == step and s.label in labels) / 1e9


def after_verdict_s(rec: RunRecord, step: int) -> float:
    """Seconds from the verdict (the end of the step's target forward and acceptance rule) to
    the end of the draft's branch rollouts; <= 0 when they were done by then."""
    after = branch_after_verdict_ns([s for s in rec.spans if s.step == step])
    return 0.0 if after is None else after / 1e9


def _fmt_s(x: float) -> str:
    """A step's time as the zoomed step prints it: whole milliseconds under a second."""
    return f"{x:.2f} s" if x >= 1.0 else f"{x * 1e3:.0f} ms"


def lanes_in_turn(rec: RunRecord, step: int) -> bool:
    """Whether Mirror-SD ran `step` with its lanes one after the other (the overlap gate): no
    branches beside the target, the next window drafted after the verdict in a plain "draft"
    span (an overlapped step that missed drafts it in a "fallback" span)."""
    return any(s.step == step and s.lane == "draft" and s.label == "draft" for s in rec.spans) and \
        not any(s.step == step and s.label in ("branches", "fallback") for s in rec.spans)


def redraft_s(rec: RunRecord, step: int) -> float:
    """Seconds the draft spent writing the next window after `step`'s verdict (the target
    waited for them): a miss's redraft, or the window of a step whose lanes ran in turn (only
    for a step whose next window came after its verdict: SD drafts its own "draft" spans)."""
    return _seconds(rec, step, "fallback", "draft")


def _exit_guess(rec: RunRecord, sv: StepView) -> str:
    ee, v = sv.early_exit, sv.verify
    if ee is None or v is None or v.accepted >= len(ee.token_ids) or not ee.token_ids[v.accepted]:
        return ""
    ids, lps = ee.token_ids[v.accepted], ee.logprobs[v.accepted]
    guess = (f"at layer {ee.layer} the target's top guess was {quoted(rec, ids[0])} at "
             f"{math.exp(lps[0]):.0%}")
    if ids[0] == v.token:
        return guess + " (right)"
    if v.token in ids:
        return guess + f" (its final token was its no. {ids.index(v.token) + 1})"
    return guess + f" (its final token was not in its top {len(ids)})"


def _window(rec: RunRecord, sv: StepView, kind: str, previous: int | None) -> str:
    if kind == "hit" and sv.window_late_ms is not None:
        return f"the window was a branch prepared during the previous step (a {late_words(sv.window_late_ms)})"
    if kind == "hit":
        return "the window was a branch prepared during the previous step (a branch hit)"
    if kind == "miss" and previous is not None:
        if lanes_in_turn(rec, previous):
            return (f"the window was drafted after the previous verdict, the lanes one after the other "
                    f"(the target waited {_fmt_s(redraft_s(rec, previous))})")
        return (f"its window was redrafted after the step before missed (no branch matched; the target "
                f"waited {_fmt_s(redraft_s(rec, previous))})")
    if kind == "turn" and previous is not None:
        return (f"the window was drafted after the previous verdict, the lanes in turn (the "
                f"target waited {_fmt_s(redraft_s(rec, previous))})")
    if kind == "first":
        return "the first window was drafted after the prompt's prefill"
    if kind == "drafted":
        took = _seconds(rec, sv.step, "draft", "prefill+draft")
        return f"the draft wrote the window in {_fmt_s(took)} while the target waited"
    return "a plain target step"


def exit_end(spans) -> int | None:
    """When the early exit's guesses reached the draft: the end of the step's exit head (None
    without one)."""
    return max((s.end_ns for s in spans if s.label == "exit_head"), default=None)


def branch_ms(spans, exit_at: int | None) -> tuple[float, float]:
    """The draft's branch forwards in ms, all branches together, before `exit_at` (the early
    exit's end, when its guesses reach the draft: before it, on the draft's own guess) and after."""
    cut = [(s.start_ns, s.end_ns) for s in spans if s.label == "branches"]
    if exit_at is None:
        return 0.0, sum(b - a for a, b in cut) / 1e6
    before = sum(max(0, min(b, exit_at) - a) for a, b in cut) / 1e6
    return before, sum(b - a for a, b in cut) / 1e6 - before


def _branches(rec: RunRecord, sv: StepView) -> str:
    built = [b for b in sv.rollouts if b.tokens]
    if not built or sv.early_exit is None:
        return ""
    n = len(built)
    spans = [s for s in rec.spans if s.step == sv.step]
    before, after = branch_ms(spans, exit_end(spans))
    took, rest = after / 1e3, _seconds(rec, sv.step, 'suffix')
    own = f"; {_fmt_s(before / 1e3)} more before the exit, on its own guess" if before >= 0.5 else ""
    # every branch the step began, as the zoom and the table below count them: one cut short
    # before its first token is named, not left out
    short = len(sv.rollouts) - n
    began = (f"the draft began {len(sv.rollouts)} branches, wrote {n} and cancelled {short} before its first token"
             if short else f"the draft built {n} branch{'es' if n != 1 else ''}")
    words = (f"{began}: all branches together took {_fmt_s(took)} "
             f"of draft forwards after the exit (the short gaps between forwards not counted{own}), beside the "
             f"target's remaining layers "
             f"({sv.early_exit.layer + 1} and up, {_fmt_s(rest)})")
    return words  # how long the target waited for the branch it took: the next window's words


def _verdict(rec: RunRecord, sv: StepView) -> str:
    v = sv.verify
    if v is None:
        return ""
    if v.kind == "bonus":
        return f"the target kept all {len(v.drafted)} drafted tokens and added {quoted(rec, v.token)}"
    return f"the target kept {v.accepted} of the {len(v.drafted)} drafted tokens and wrote {quoted(rec, v.token)}"


def _next(rec: RunRecord, sv: StepView, saved_s: float | None, last: bool) -> str:
    if last:
        return "and the run ended here"
    if not _mirror(rec) or sv.verify is None:
        return ""
    taken = next((b for b in sv.rollouts if b.status == "taken"), None)
    if taken is not None:
        rank = f" no. {taken.rank + 1}" if taken.rank is not None and taken.rank >= 0 else ""
        late = after_verdict_s(rec, sv.step)  # the draft's branch work still left at the verdict
        none = (" (it kept none of the window, but the draft had already guessed the target's own token)"
                if sv.verify.accepted == 0 else "")
        redraft = (f"; after a branch miss the target waited {_fmt_s(saved_s)} for a window redrafted serially "
                   f"(the median over this run's misses)") if saved_s else ""
        if sv.late_ms is not None:  # in the zoom's words
            return (f"so the verdict matched branch{rank}{none}, a {late_words(sv.late_ms)}: begun beside the "
                    f"target before the verdict; the draft finished it {_fmt_s(late)} after the verdict (the target waited that "
                    f"long){redraft}")
        return f"so the verdict matched branch{rank}{none}, whose window was ready when the verdict came{redraft}"
    if sv.fallback is not None and lanes_in_turn(rec, sv.step):
        return (f"then the draft wrote the next window, the lanes one after the other "
                f"({_fmt_s(redraft_s(rec, sv.step))})")
    if sv.fallback is not None:
        return (f"so no branch matched and the next window was redrafted serially "
                f"({_fmt_s(redraft_s(rec, sv.step))})")
    if sv.in_turn is not None:
        return (f"then, the lanes in turn, the draft wrote the next window from the verdict "
                f"({_fmt_s(redraft_s(rec, sv.step))}){would_hit_words(rec, sv.step, '; ')}")
    return ""


def would_hit_words(rec: RunRecord, step: int, lead: str = "", who: str = "checked after the run, the early exit ") -> str:
    """What the exit check (after the run, untimed) says of a step whose lanes ran in turn."""
    c = checked_step(rec, step)
    if c is None:
        return ""
    budget = (exit_check(rec) or {}).get("budget", 0)
    rank = c.get("rank", -1)
    place = f"ranked the verdict's root no. {rank + 1}" if rank >= 0 else "did not rank the verdict's root"
    outcome = ("so with the lanes overlapped that window would have been ready early (a branch hit)"
               if c.get("would_hit") else
               f"outside the {budget} branch{'es' if budget != 1 else ''} rolled out, so with the lanes "
               f"overlapped it would have been a branch miss")
    return f"{lead}{who}{place}, {outcome}"


def narrate(rec: RunRecord, step: int) -> str:
    """One sentence (plain text) about one step, from its events and measured spans."""
    return plain(_narration(rec, step))


def narrate_html(rec: RunRecord, step: int) -> str:
    """`narrate` as HTML, its tokens in chips."""
    return chipped(_narration(rec, step))


def _narration(rec: RunRecord, step: int) -> str:
    a = analyse(rec)
    order = sorted(a.steps)
    if step not in a.steps:
        return ""
    sv = a.steps[step]
    pos = order.index(step)
    kind = step_kind(rec, sv, pos == 0)
    previous = order[pos - 1] if pos > 0 else None
    redrafts = [redraft_s(rec, s) for s in order if a.steps[s].fallback is not None]
    saved = statistics.median(redrafts) if redrafts else None
    parts = [_window(rec, sv, kind, previous), _exit_guess(rec, sv), _branches(rec, sv),
             _verdict(rec, sv)]
    text = "; ".join(p for p in parts if p)
    tail = _next(rec, sv, saved, pos == len(order) - 1)
    if tail:
        text += ", " + tail
    return f"Step {pos + 1}: {text[:1].upper()}{text[1:]}." if text else f"Step {pos + 1}."


def _window_mark(verify) -> str:
    """The window's length under the cell, with its stop reason in the class (and a mark when
    the window stopped before the policy's length)."""
    if verify is None:
        return ""
    stop = getattr(verify, "stop", "") or ""
    mark = "" if stop in ("", "gamma") else "·"
    return (f'<small class="msd-step-window w-{esc(stop or "none")}">'
            f'{len(verify.drafted)}d{mark}</small>')


def _cell(rec: RunRecord, sv: StepView, pos: int, selected: bool, future: bool) -> str:
    """One step's strip cell: its number, tokens committed and window length, its kind's colour,
    its name ("late hit +n ms" for a late hit) and its facts on hover."""
    kind = strip_kind(rec, sv, pos == 0)
    outcome = sv.verify.kind if sv.verify is not None else ""
    label, tip = KINDS[kind]
    if kind == "late":
        label = late_words(sv.late_ms)
    tips = [f"Step {pos + 1}: {label}", tip]
    if outcome in OUTCOMES:
        tips.append(OUTCOMES[outcome][1])
    if sv.verify is not None:
        tips.append(window_note(sv.verify)[:1].upper() + window_note(sv.verify)[1:] + ".")
    tips.append(f"{len(sv.commit_tokens)} token{'s' if len(sv.commit_tokens) != 1 else ''} committed")
    cls = ["msd-step", f"k-{kind}", f"o-{outcome or 'none'}"]
    checked = checked_step(rec, sv.step) if kind == "turn" else None
    if checked is not None:
        cls.append("w-hit" if checked.get("would_hit") else "w-miss")
        tips.append(WOULD[bool(checked.get("would_hit"))])
    if selected:
        cls.append("is-selected")
    if future:
        cls.append("is-future")
    return (f'<button type="button" class="{" ".join(cls)}" data-step="{sv.step}" '
            f'data-run="{esc(rec.method)}" title="{esc(" ".join(tips))}" '
            f'aria-label="step {pos + 1}, {esc(label)}">{pos + 1}'
            f'<small>+{len(sv.commit_tokens)}</small>{_window_mark(sv.verify)}</button>')


def render_strip(rec: RunRecord, selected: int | None, played: int | None = None) -> str:
    """One button per step (numbered from 1), coloured by `strip_kind`, with the verdict's bar;
    `played`: during a replay, the steps after it are faded."""
    a = analyse(rec)
    order = sorted(a.steps)
    if not order:
        return ""
    cells = [_cell(rec, a.steps[s], pos, s == selected, played is not None and s > played)
             for pos, s in enumerate(order)]
    at = order.index(selected) if selected in order else None
    nav = ""
    if at is not None:
        prev_s = order[at - 1] if at > 0 else None
        next_s = order[at + 1] if at + 1 < len(order) else None
        nav = "".join(
            f'<button type="button" class="msd-step-nav" data-step="{s}" data-run="{esc(rec.method)}" '
            f'title="{title}">{arrow}</button>' if s is not None else
            f'<button type="button" class="msd-step-nav" disabled>{arrow}</button>'
            for s, arrow, title in ((prev_s, "◀", "previous step"), (next_s, "▶", "next step")))
    kinds = ["hit", "late", "miss", "turn", "end"] if _mirror(rec) else ["drafted"]
    key = "".join(f'<span class="msd-step-key k-{k}" title="{esc(KINDS[k][1])}">{esc(KINDS[k][0])}</span>'
                  for k in kinds)
    if exit_check(rec) is not None:
        key += (f'<span class="msd-step-key k-turn w-hit" title="{esc(WOULD[True])}">lanes in turn, '
                f'would have hit</span>')
    key += "".join(f'<span class="msd-step-key o-{o}" title="{esc(t)}">{esc(lbl)}</span>'
                   for o, (lbl, t) in OUTCOMES.items())
    return (f'<div class="msd-strip" role="group" aria-label="steps">'
            f'<div class="msd-strip-cells">{nav}{"".join(cells)}</div>'
            f'<div class="msd-strip-key">Click a step, or a token in an output pane. '
            f'Cell: {"whether the verdict found its next window ready (branch hit), a branch the draft finished after it (late hit), none (branch miss), or the lanes ran in turn (the target verified, then the draft wrote the next window, as SD does, where overlapping them measured slower)" if _mirror(rec) else "where the window came from"}; bar: the verdict; +n: tokens committed; '
            f'nd: n tokens drafted in its window (· when it stopped early: hover for why). {key}</div>'
            f'</div>')


def replay_step(rec: RunRecord, t_ns: int) -> int | None:
    """The step under way `t_ns` after the run's start (the last one begun by then)."""
    steps = analyse(rec.until(t_ns)).steps
    return max(steps) if steps else None
