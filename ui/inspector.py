"""The step inspector: what happened inside one speculative step, as HTML.

On top, the step strip (every step, clickable) and the step's narration (steps.py); then
1) the early exit: the target's top-kappa guesses at layer l_e for each window position,
   with probabilities exp(logprob);
2) the draft branches: the window and every rollout hanging off it at its root position,
   with its status (taken / cancelled / serial redraft) and score;
3) the verification: p (target) vs q (draft) for each drafted token, accepted or rejected.
Steps are numbered from 1 on the page (the engine counts from 0). Chip colours are the token
legend's: green accepted draft, red the target's token after a rejection, purple its bonus
token, blue a branch reused as the next window (hit; indigo hatched where the draft finished it
after the verdict: a late hit), yellow a redraft after a miss.
"""
from __future__ import annotations

import html
import math

import gradio as gr

from . import texts
from .runs import RunRecord, StepView, analyse, checked_step, drafts, exit_off, label, late_words, verdict_outcome
from .steps import (lanes_in_turn, narrate_html, price_table, render_strip, step_kind, visible, window_note,
                    would_hit_words)

esc = html.escape
ORIGINS = {"first": "the first window: drafted after the prompt's prefill (nothing could miss yet)",
           "drafted": "drafted serially while the target waited",
           "hit": "a branch prepared during the previous step (a branch hit)",
           "miss": "redrafted serially after the previous verdict found no prepared branch (a branch miss)",
           "turn": "drafted after the previous verdict, the lanes in turn (neither a hit nor a miss)",
           "in turn": "drafted after the previous verdict: that step ran its lanes one after the other",
           "plain": "no draft (a plain target step)"}
# what this step's verdict found for the next window (the strip cell's colour): its window above
# says how this step's own window came about, which is the previous step's outcome
NEXT = {"hit": "branch hit, a branch drafted beside this verify matched the verdict and became the next window",
        "miss": "branch miss, no branch matched the verdict, so the draft wrote the next one after it",
        "turn": "drafted after the verdict, the lanes in turn (neither a hit nor a miss)"}
STATUS = {"taken": ("taken", "Reused as the next window: a branch hit."),
          "cancelled": ("cancelled", "Dropped: the verdict landed elsewhere (or the early exit "
                                     "ranked this root below the branch budget)."),
          "serial": ("serial redraft", "No prepared branch matched the verdict: the draft wrote "
                                       "this window after it, one token per forward (a branch miss)."),
          "turn": ("after the verdict", "The lanes ran one after the other in this step: the "
                                        "draft wrote this window after the verdict, as plain SD "
                                        "does (neither a hit nor a miss).")}
SCORE_TIP = ("The scorer's estimate that the verdict lands on this root (j, v): "
             "P(the target keeps d₁…d_j and rejects d_{j+1}) × P(it then writes v). The first "
             "factor multiplies the draft's probabilities of its own tokens (its guess that each "
             "is accepted); the second mixes the early exit's probability of v with the draft's. "
             "The best-scored roots are rolled out, up to the branch budget.")
EXTRA_TIPS = {"exit layer": "The target layer after which its final norm and LM head are applied "
                            "early, while the remaining layers still run."}


def _term(word: str, key: str) -> str:
    """A word with its definition on hover (the app's glossary, else the inspector's own)."""
    tip = getattr(texts, "GLOSSARY", {}).get(key) or EXTRA_TIPS.get(key, "")
    return f'<abbr class="msd-term" title="{esc(tip)}">{esc(word)}</abbr>' if tip else esc(word)


def _chip(rec: RunRecord, token_id: int, cls: str = "", extra: str = "", title: str = "") -> str:
    text = rec.id_texts.get(token_id)
    label = visible(text) if text is not None else f"#{token_id}"
    tip = f"id {token_id}" + (f" · {title}" if title else "")
    return (f'<span class="msd-chip {cls}" title="{esc(tip)}">{esc(label)}'
            f'{f"<small>{esc(extra)}</small>" if extra else ""}</span>')


def _target_cls(kind: str) -> str:
    """The target's own token at the verdict, in the legend's colour for its kind."""
    return "k-bonus" if kind == "bonus" else "k-correction"


def _percent(p: float) -> str:
    return f"{p:.0%}" if p >= 0.005 else "<1%"


def _last_committed(sv: StepView, tokens) -> str:
    if sv.committed == 0:
        return "end of prompt"
    return visible(tokens[sv.committed - 1].text) if sv.committed - 1 < len(tokens) else "last"


def _early_exit(rec: RunRecord, sv: StepView, last: str) -> str:
    ee, v = sv.early_exit, sv.verify
    if exit_off(rec.method):
        return (f'<p class="msd-muted"><b>Early exit: off</b> in {esc(label(rec.method))}: the target '
                f'gives no guesses part-way through; the draft\'s own guesses pick the branches.</p>')
    if ee is None:
        return ('<p class="msd-muted">No early exit in this step (plain SD reads none; Mirror-SD skips it in a '
                'step whose lanes ran one after the other, and in its variant without the exit).</p>')
    window = sv.window
    A, c = (v.accepted, v.token) if v else (None, None)
    rows = []
    for j, (ids, lps) in enumerate(zip(ee.token_ids, ee.logprobs)):
        nxt = window[j] if j < len(window) else None
        chips = []
        for tid, lp in zip(ids, lps):
            cls = ["is-draft"] if nxt is not None and tid == nxt else []
            if A is not None and j < A and tid == nxt:
                cls.append("k-accepted")
            elif A is not None and j == A and tid == c:
                cls.append(_target_cls(v.kind))
            chips.append(_chip(rec, tid, " ".join(cls), _percent(math.exp(lp))))
        after = esc(last) if j == 0 else _chip(rec, window[j - 1]) if j - 1 < len(window) else ""
        drafted = _chip(rec, nxt, "is-draft") if nxt is not None else '<i>bonus position</i>'
        verdict = ""
        if A is not None:
            verdict = ("accepted" if j < A else
                       f"verdict: the target wrote {_chip(rec, c, _target_cls(v.kind))}" if j == A
                       else '<span class="msd-muted">not reached</span>')
        rows.append(f"<tr><td>{j}</td><td>{after}</td><td>{drafted}</td>"
                    f"<td class=\"msd-chips\">{''.join(chips)}</td><td>{verdict}</td></tr>")
    found = ""
    if v is not None and A < len(ee.token_ids):
        inside = c in ee.token_ids[A]
        rooted = any((b.depth, b.root_token) == (A, c) for b in sv.rollouts)
        how = ""
        if rooted and not inside:
            how = "; the branch rooted there came from the draft's own guesses"
        elif not rooted and (sv.rollouts or sv.fallback):
            how = "; no rollout was rooted there, so the next window is drafted after the verdict"
        found = (f'<p class="msd-muted">The target\'s own token at row {A} '
                 f'{"<b>was</b>" if inside else "<b>was not</b>"} among the early exit\'s top '
                 f'{len(ee.token_ids[A])} guesses{how}.</p>')
    lens = (f" read through the {_term('exit lens', 'exit lens')} (a small trained correction of the "
            f"exit layer's state)," if ee.lens else "")
    return (f'<p class="msd-muted">After layer {ee.layer} (the {_term("exit layer", "exit layer")}),{lens} '
            f'the target\'s final norm and LM head give its early guesses. Row j guesses the token '
            f'after the last committed token and the first j drafted ones; the percentages are the '
            f'early exit\'s probabilities. '
            f'<span class="msd-chip is-draft">outlined</span> = the drafted token, '
            f'<span class="msd-chip k-accepted">green</span> = accepted, '
            f'<span class="msd-chip k-correction">red</span> / <span class="msd-chip k-bonus">purple</span> '
            f'= the full target\'s own token after a rejection / as its bonus.</p>'
            f'<table class="msd-table msd-ee"><thead><tr><th>j</th><th>after</th>'
            f'<th>drafted next</th><th>the early exit\'s top guesses (probability)</th><th>verdict</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{found}')


def _branch_row(rec: RunRecord, label: str, cls: str, offset: int, root: int | None,
                tokens: list[int], width: int) -> str:
    cells = ['<td></td>'] * offset
    if root is not None:
        cells.append(f"<td>{_chip(rec, root, 'is-root', title='root token v')}</td>")
    cells += [f"<td>{_chip(rec, t)}</td>" for t in tokens]
    cells += ['<td></td>'] * max(0, width - len(cells))
    return f'<tr class="{cls}"><th>{label}</th>{"".join(cells)}</tr>'


def _status(status: str) -> str:
    label, tip = STATUS.get(status, (status, ""))
    return f'<span class="msd-status-chip st-{esc(status)}" title="{esc(tip)}">{esc(label)}</span>'


OUTCOME_NOTES = {
    "hit": "Branch hit: the taken branch (blue) is the next window, drafted while the target was still verifying.",
    "miss": "Branch miss: no rollout started at the verdict, so the draft wrote the next window serially (yellow; the critical path pays for it).",
    "turn": "Lanes in turn: overlapping the two lanes measured slower on this machine, so this step ran them one after the other; the draft wrote the next window after the verdict (grey), as plain SD does. Neither a hit nor a miss."}


def _origin_words(sv: StepView, origin: str) -> str:
    """How the step's window came about (ORIGINS), with a late hit's badge."""
    if origin == "hit" and sv.window_late_ms is not None:
        return (f"a branch prepared during the previous step (a {late_words(sv.window_late_ms)}: ready "
                f"{sv.window_late_ms} ms after that step's verdict)")
    return ORIGINS.get(origin, origin)


def _outcome_note(sv: StepView) -> str:
    """What the step's verdict found for the next window, in one sentence ('' at the run's end)."""
    outcome = verdict_outcome(sv)
    if outcome == "hit" and sv.late_ms is not None:
        return (f"{late_words(sv.late_ms)[:1].upper()}{late_words(sv.late_ms)[1:]}: the taken branch is the next "
                f"window, begun while the target was still verifying, but the draft finished it "
                f"{sv.late_ms} ms after the verdict, so the target waited that long for it.")
    return OUTCOME_NOTES[outcome] if outcome is not None else ""


def _next_words(sv: StepView) -> str:
    """The next window as the step's head names it: NEXT, with a late hit's badge."""
    outcome = verdict_outcome(sv) or ""
    if outcome == "hit" and sv.late_ms is not None:
        return (f"{late_words(sv.late_ms)}, a branch drafted beside this verify matched the verdict and became "
                f"the next window, ready {sv.late_ms} ms after the verdict")
    return NEXT.get(outcome, "")


def _outcome_name(sv: StepView) -> str:
    """The step's outcome in the table of every step: branch hit, late hit +n ms, branch miss…"""
    outcome = verdict_outcome(sv)
    if outcome == "hit" and sv.late_ms is not None:
        return late_words(sv.late_ms)
    return {"turn": "lanes in turn", "hit": "branch hit", "miss": "branch miss"}.get(outcome or "–", outcome or "–")


def _branch_notes(rec: RunRecord, sv: StepView) -> str:
    """Under the branch table: what the verdict made of the branches, and where they came from."""
    outcome = verdict_outcome(sv)
    note = f'<p class="msd-muted">{esc(_outcome_note(sv))}</p>' if outcome is not None else ""
    if sv.rollouts and exit_off(rec.method):
        note += ('<p class="msd-muted">Where the branches come from: the early exit is off in this '
                 'run, so the draft ranks the roots by its own probabilities alone and rolls out the '
                 'best ones (the branch budget).</p>')
    elif sv.rollouts:
        note += ('<p class="msd-muted">Where the branches come from: before the early exit is '
                 'read, the draft starts one branch on its own best guess of the verdict; once '
                 'the early exit arrives, its best-ranked roots get the branch budget, and that '
                 'first branch is dropped when the exit ranks it lower. So a step can show one '
                 'branch more than the budget: the one begun early and dropped.</p>')
    checked = checked_step(rec, sv.step) if outcome == "turn" else None
    if checked is not None:
        guesses = " ".join(_chip(rec, t) for t in checked.get("exit_top") or [])
        note += (f'<p class="msd-muted msd-would"><b>Had the lanes overlapped:</b> the early exit, read '
                 f'at this step after the run (untimed), guessed {guesses} for the target\'s own token and '
                 f'{esc(would_hit_words(rec, sv.step, who=""))}.</p>')
    return note


def _branches(rec: RunRecord, sv: StepView, last: str, kind: str, origin: str | None = None) -> str:
    v = sv.verify
    window = sv.window
    gamma = len(window)
    if not window:
        return '<p class="msd-muted">No draft window in this step.</p>'
    A = v.accepted if v else None
    width = 1 + 2 * gamma + 1
    wcells = [f"<td><span class=\"msd-chip\">{esc(last)}</span></td>"]
    for i, t in enumerate(window):
        state = "" if A is None else "k-accepted" if i < A else "is-rejected" if i == A else "is-unchecked"
        wcells.append(f"<td>{_chip(rec, t, state)}</td>")
    wcells += ['<td></td>'] * (width - len(wcells))
    rows = [f'<tr class="b-window b-{kind}"><th>window ({esc(_origin_words(sv, origin or kind))})</th>'
            f'{"".join(wcells)}</tr>']
    if v is not None:
        cells = ['<td></td>'] * (1 + A) + [f"<td>{_chip(rec, v.token, _target_cls(v.kind))}</td>"]
        cells += ['<td></td>'] * (width - len(cells))
        rows.append(f'<tr class="b-verdict"><th>verdict: {A} kept, then the target\'s own token '
                    f'({"bonus" if v.kind == "bonus" else "after a rejection"})</th>{"".join(cells)}</tr>')
    score = f'<abbr class="msd-term" title="{esc(SCORE_TIP)}">score</abbr>'
    root = _term("root", "root")
    for b in sorted(sv.rollouts, key=lambda b: (b.rank if b.rank is not None and b.rank >= 0 else 99, -b.score)):
        rank = f", ranked no. {b.rank + 1}" if b.rank is not None and b.rank >= 0 else ""
        label = f'{_status(b.status)} {root} (j={b.depth}) · {score} {b.score:.3f}{rank}'
        rows.append(_branch_row(rec, label, f"b-{b.status}", 1 + b.depth, b.root_token, b.tokens, width))
    if sv.fallback is not None:
        b = sv.fallback
        rank = (f" (the verdict's root was ranked no. {b.rank + 1}: not rolled out in advance)"
                if b.rank is not None and b.rank >= 0 else "")
        label = f'{_status("serial")} from the verdict{rank}'
        rows.append(_branch_row(rec, label, "b-serial", 1 + b.depth, b.root_token, b.tokens, width))
    elif sv.in_turn is not None:
        b = sv.in_turn
        label = f'{_status("turn")} from the verdict, the lanes in turn'
        rows.append(_branch_row(rec, label, "b-turn", 1 + b.depth, b.root_token, b.tokens, width))
    head = "<th>last</th>" + "".join(f"<th>+{i}</th>" for i in range(1, width))
    ranked_by = "the draft's" if exit_off(rec.method) else "the draft's and the early exit's"
    note = _branch_notes(rec, sv)
    return (f'<p class="msd-muted">Column “last” is the last committed token, column +k the k-th '
            f'token after it. A rollout starts at its {root} (j, v), drawn with a dashed '
            f'outline in column +(j+1): the guess that the target keeps the first j drafted tokens '
            f'and then writes v. '
            f'Branches are ranked by {score}: {ranked_by} estimate that the '
            f'verdict lands on that root (no. 1 = most likely, rolled out first).</p>'
            f'<div class="msd-scroll"><table class="msd-table msd-tree"><thead><tr><th></th>{head}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{note}')


def _verification(rec: RunRecord, sv: StepView, greedy: bool) -> str:
    v = sv.verify
    if v is None:
        return '<p class="msd-muted">No verification in this step (a plain target step).</p>'
    rows = []
    for i, t in enumerate(v.drafted):
        p, q = v.p_probs[i], v.q_probs[i]
        rule = ""
        if not greedy:
            rule = f"<td>{min(1.0, p / q) if q > 0 else 1.0:.3f}</td>"
        if i < v.accepted:
            why = "equals the target's argmax" if greedy else "kept"
            result = f'<span class="msd-ok">accepted</span>: {why}'
        elif i == v.accepted:
            why = "not the target's argmax; " if greedy else ""
            result = (f'<span class="msd-bad">rejected</span>: {why}the target wrote '
                      f'{_chip(rec, v.token, "k-correction")}')
        else:
            result = '<span class="msd-muted">not checked (after a rejection)</span>'
        rows.append(f"<tr><td>{i + 1}</td><td>{_chip(rec, t)}</td><td>{q:.3f}</td>"
                    f"<td>{p:.3f}</td>{rule}<td>{result}</td></tr>")
    if v.kind == "bonus":
        blank = "<td></td>" * (3 if greedy else 4)
        rows.append(f'<tr><td>bonus</td><td>{_chip(rec, v.token, "k-bonus")}</td>{blank}'
                    f'<td><span class="msd-ok">all {len(v.drafted)} accepted</span>: one more token '
                    f'from the same target forward</td></tr>')
    if greedy:
        rule = ("Greedy: a drafted token is accepted exactly when it equals the target's most "
                "likely token (its argmax); p and q are shown for insight only.")
        ratio = ""
    else:
        rule = ("Sampling: d_i is accepted with probability min(1, p/q); at the first rejection "
                "the target samples from normalize(max(0, p − q)).")
        ratio = "<th>min(1, p/q)</th>"
    return (f'<p class="msd-muted">{rule}</p><table class="msd-table msd-verify"><thead><tr>'
            f'<th>drafted no.</th><th>token</th><th>q (draft)</th><th>p (target)</th>{ratio}'
            f'<th>result</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _window(v) -> str:
    """' · window of n drafted tokens, stopped: why' (engine/windows.py), '' without a verify."""
    note = window_note(v, figures=False)
    return f" · <span class=\"msd-window-note\">{esc(note)}</span>" if note else ""


def _sub(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def render_inspector(rec: RunRecord | None, step: int, greedy: bool = True,
                     played: int | None = None) -> str:
    """The inspector for engine step `step` (clamped to the run's steps); `played`: during a
    race replay, the step under way (the strip fades the later ones)."""
    if rec is None or not rec.events:
        return ('<div class="msd-inspector msd-placeholder">Run (or load a trace) to inspect '
                'the speculative steps.</div>')
    if not drafts(rec.method):
        return (f'<div class="msd-inspector msd-placeholder">{esc(label(rec.method))} has no drafts: '
                f'every step is one target forward for one token.</div>')
    a = analyse(rec)
    if not a.steps:
        return '<div class="msd-inspector msd-placeholder">No steps recorded.</div>'
    steps = sorted(a.steps)
    step = min(max(int(step), steps[0]), steps[-1])
    if step not in a.steps:
        step = min(steps, key=lambda s: abs(s - step))
    sv = a.steps[step]
    pos = steps.index(step)
    kind = step_kind(rec, sv, pos == 0)
    origin = "in turn" if kind == "miss" and pos > 0 and lanes_in_turn(rec, steps[pos - 1]) else kind
    last = _last_committed(sv, a.tokens)
    v = sv.verify
    verdict = ""
    if v is not None:
        own = "added its bonus token" if v.kind == "bonus" else "wrote its own token"
        verdict = (f" · the target kept <b>{v.accepted}</b> of {len(v.drafted)} drafted tokens, then "
                   f"{own} {_chip(rec, v.token, _target_cls(v.kind))}")
    committed = "".join(a.tokens[i].text for i in sv.commit_tokens)
    after = _next_words(sv)
    after = f" · <b>the next step's window</b> (the cell's colour): {esc(after)}" if after else ""
    head = (f'<div class="msd-step-head"><b>Step {pos + 1}</b> of {len(steps)} · '
            f'{sv.committed} token{"" if sv.committed == 1 else "s"} committed before · <b>the window of this step</b> (how it came): '
            f'{esc(_origin_words(sv, origin))}{_window(v)}{verdict} · committed '
            f'<code>{esc(committed)}</code>{after}{price_table(v)}</div>')
    replay = '<span class="msd-replay-tag">replay</span> ' if played is not None else ""
    return (f'<div class="msd-inspector">{render_strip(rec, step, played)}'
            f'<p class="msd-narration">{replay}{narrate_html(rec, step)}</p>{head}'
            f'<h4>1 · Early exit: the target\'s guesses part-way through</h4>{_early_exit(rec, sv, last)}'
            f'<h4>2 · Draft branches</h4>{_branches(rec, sv, last, kind, origin)}'
            f'<h4>3 · Verification (p = target, q = draft)</h4>{_verification(rec, sv, greedy)}'
            f'{all_steps(rec)}</div>')


def _step_ms(rec: RunRecord, step: int) -> float | None:
    spans = [s for s in rec.spans if s.step == step]
    return (max(s.end_ns for s in spans) - min(s.start_ns for s in spans)) / 1e6 if spans else None


def all_steps(rec: RunRecord) -> str:
    """Every step in one table: window, accepted, the rejected token, hit or miss, time."""
    a = analyse(rec)
    rows = []
    for pos, s in enumerate(sorted(a.steps)):
        sv = a.steps[s]
        v = sv.verify
        if v is None:
            continue
        rejected = (_chip(rec, v.drafted[v.accepted], "is-rejected")
                    if v.kind == "correction" and v.accepted < len(v.drafted) else "–")
        outcome = _outcome_name(sv)
        ms = _step_ms(rec, s)
        rows.append(f'<tr data-step="{s}" data-run="{esc(rec.method)}"><td>{pos + 1}</td>'
                    f'<td>{len(v.drafted)}</td><td>{v.accepted}</td><td>{rejected}</td>'
                    f'<td>{outcome}</td><td>{"–" if ms is None else f"{ms:.0f}"}</td></tr>')
    return (f'<details class="msd-all-steps"><summary>All steps of {esc(label(rec.method))} '
            f'({len(rows)})</summary><table class="msd-table"><thead><tr><th>step</th>'
            f'<th>drafted</th><th>accepted</th><th>rejected token</th><th>next window</th>'
            f'<th>ms</th></tr></thead><tbody>{"".join(rows)}</tbody></table></details>')


def _greedy(state) -> bool:
    return float(state["settings"].get("temperature", 0.0)) == 0.0


def pick(state, evt: gr.SelectData):
    """A step cell or a token in an output pane was clicked: (run radio, step, inspector)."""
    records = (state or {}).get("records") or {}
    run = str(evt.value or "")
    rec = records.get(run)
    if rec is None or rec.method == "ar":  # the AR baseline has no steps to inspect
        return gr.skip(), gr.skip(), gr.skip()
    step = int(evt.index)
    return run, gr.update(value=step), render_inspector(rec, step, _greedy(state))
