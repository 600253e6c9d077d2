"""The step inspector: what happened inside one speculative step, as HTML tables.

1) the early exit: the target's top-kappa guesses at layer l_e for each window position,
   with probabilities exp(logprob);
2) the draft branches: the window and every rollout hanging off it at its root position,
   with its status (taken / cancelled / serial) and score;
3) the verification: p (target) vs q (draft) for each drafted token, accepted or rejected.
"""
from __future__ import annotations

import html
import math

from .runs import RunRecord, StepView, analyse

esc = html.escape
ORIGINS = {"draft": "drafted serially", "hit": "a reused branch (hit)",
           "fallback": "a serial fallback after a miss", "none": "no draft (plain step)"}


def visible(text: str) -> str:
    """Token text with its whitespace made visible, for chips."""
    if text == "":
        return "∅"
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")


def _chip(rec: RunRecord, token_id: int, cls: str = "", extra: str = "", title: str = "") -> str:
    text = rec.id_texts.get(token_id)
    label = visible(text) if text is not None else f"#{token_id}"
    tip = f"id {token_id}" + (f" · {title}" if title else "")
    return (f'<span class="msd-chip {cls}" title="{esc(tip)}">{esc(label)}'
            f'{f"<small>{esc(extra)}</small>" if extra else ""}</span>')


def _last_committed(rec: RunRecord, sv: StepView, tokens) -> str:
    if sv.committed == 0:
        return "end of prompt"
    return visible(tokens[sv.committed - 1].text) if sv.committed - 1 < len(tokens) else "yₙ"


def _early_exit(rec: RunRecord, sv: StepView, last: str) -> str:
    ee, v = sv.early_exit, sv.verify
    if ee is None:
        return '<p class="msd-muted">No early exit in this step (plain speculative decoding has none).</p>'
    window = sv.window
    A, c = (v.accepted, v.token) if v else (None, None)
    rows = []
    for j, (ids, lps) in enumerate(zip(ee.token_ids, ee.logprobs)):
        nxt = window[j] if j < len(window) else None
        chips = []
        for tid, lp in zip(ids, lps):
            cls = []
            if nxt is not None and tid == nxt:
                cls.append("is-draft")
            if A is not None and ((j < A and tid == nxt) or (j == A and tid == c)):
                cls.append("is-target")
            chips.append(_chip(rec, tid, " ".join(cls), f"{math.exp(lp):.0%}"))
        after = esc(last) if j == 0 else _chip(rec, window[j - 1]) if j - 1 < len(window) else ""
        drafted = _chip(rec, nxt, "is-draft") if nxt is not None else '<i>bonus position</i>'
        verdict = ""
        if A is not None and j == A:
            verdict = ' class="is-verdict"'
        rows.append(f"<tr{verdict}><td>{j}</td><td>{after}</td><td>{drafted}</td>"
                    f"<td class=\"msd-chips\">{''.join(chips)}</td></tr>")
    found = ""
    if v is not None and A < len(ee.token_ids):
        inside = c in ee.token_ids[A]
        rooted = any((b.depth, b.root_token) == (A, c) for b in sv.rollouts)
        how = ""
        if rooted and not inside:
            how = "; the branch rooted there came from the draft's own guesses"
        elif not rooted and (sv.rollouts or sv.fallback):
            how = "; no rollout was rooted there, so the next window is drafted after the verdict"
        found = (f'<p class="msd-muted">The target\'s own token at position {A} '
                 f'{"<b>was</b>" if inside else "<b>was not</b>"} among the early-exit '
                 f'top-{len(ee.token_ids[A])}{how}.</p>')
    return (f'<p class="msd-muted">Layer {ee.layer}: the target\'s final norm and LM head '
            f'applied half-way. Row j guesses the token after yₙ, d₁…d_j. '
            f'<span class="msd-chip is-draft">outlined</span> = the drafted next token, '
            f'<span class="msd-chip is-target">green</span> = what the full target chose.</p>'
            f'<table class="msd-table msd-ee"><thead><tr><th>j</th><th>after</th>'
            f'<th>drafted next</th><th>early-exit top-κ (probability)</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{found}')


def _branch_row(rec: RunRecord, label: str, cls: str, offset: int, root: int | None,
                tokens: list[int], width: int) -> str:
    cells = ['<td></td>'] * offset
    if root is not None:
        cells.append(f"<td>{_chip(rec, root, 'is-root', title='root token')}</td>")
    cells += [f"<td>{_chip(rec, t)}</td>" for t in tokens]
    cells += ['<td></td>'] * max(0, width - len(cells))
    return f'<tr class="{cls}"><th>{label}</th>{"".join(cells)}</tr>'


def _branches(rec: RunRecord, sv: StepView, last: str) -> str:
    v = sv.verify
    window = sv.window
    gamma = len(window)
    if not window:
        return '<p class="msd-muted">No draft window in this step.</p>'
    A = v.accepted if v else None
    width = 1 + 2 * gamma + 1
    wcells = [f"<td><span class=\"msd-chip\">{esc(last)}</span></td>"]
    for i, t in enumerate(window):
        state = "" if A is None else "is-accepted" if i < A else "is-rejected" if i == A else "is-unchecked"
        wcells.append(f"<td>{_chip(rec, t, state)}</td>")
    wcells += ['<td></td>'] * (width - len(wcells))
    rows = [f'<tr class="b-window"><th>window ({esc(ORIGINS.get(sv.origin, sv.origin))})</th>'
            f'{"".join(wcells)}</tr>']
    if v is not None:
        cells = ['<td></td>'] * (1 + A) + [f"<td>{_chip(rec, v.token, 'is-target')}</td>"]
        cells += ['<td></td>'] * (width - len(cells))
        rows.append(f'<tr class="b-verdict"><th>verdict: A = {A}, then the target\'s '
                    f'{esc(v.kind)}</th>{"".join(cells)}</tr>')
    for b in sorted(sv.rollouts, key=lambda b: -b.score):
        label = (f'<span class="msd-status-chip st-{esc(b.status)}">{esc(b.status)}</span> '
                 f'root (j={b.depth}) · score {b.score:.3f}')
        rows.append(_branch_row(rec, label, f"b-{b.status}", 1 + b.depth, b.root_token, b.tokens, width))
    if sv.fallback is not None:
        b = sv.fallback
        label = ('<span class="msd-status-chip st-serial">serial</span> fallback from the '
                 'verdict (miss)')
        rows.append(_branch_row(rec, label, "b-serial", 1 + b.depth, b.root_token, b.tokens, width))
    head = "".join(f"<th>{i}</th>" for i in range(width))
    note = ""
    if sv.rollouts or sv.fallback:
        hit = any(b.status == "taken" for b in sv.rollouts)
        note = (f'<p class="msd-muted">{"Hit: the taken branch is the next window, drafted while the target was still verifying." if hit else "Miss: no rollout started at the verdict, so the draft wrote the next window serially (the critical path pays for it)."}</p>')
    return (f'<p class="msd-muted">Columns are positions after yₙ. Each rollout starts at its root '
            f'(depth j, token v): the guess that the target keeps d₁…d_j and then writes v.</p>'
            f'<div class="msd-scroll"><table class="msd-table msd-tree"><thead><tr><th></th>{head}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{note}')


def _verification(rec: RunRecord, sv: StepView, greedy: bool) -> str:
    v = sv.verify
    if v is None:
        return '<p class="msd-muted">No verification in this step (a plain target step).</p>'
    rows = []
    for i, t in enumerate(v.drafted):
        p, q = v.p_probs[i], v.q_probs[i]
        ratio = min(1.0, p / q) if q > 0 else 1.0
        if i < v.accepted:
            result = '<span class="msd-ok">accepted</span>'
        elif i == v.accepted:
            result = f'<span class="msd-bad">rejected</span> → target wrote {_chip(rec, v.token, "is-target")}'
        else:
            result = '<span class="msd-muted">not checked (after a rejection)</span>'
        rows.append(f"<tr><td>d{_sub(i + 1)}</td><td>{_chip(rec, t)}</td><td>{q:.3f}</td>"
                    f"<td>{p:.3f}</td><td>{ratio:.3f}</td><td>{result}</td></tr>")
    if v.kind == "bonus":
        rows.append(f'<tr><td>bonus</td><td>{_chip(rec, v.token, "is-target")}</td><td></td><td></td>'
                    f'<td></td><td><span class="msd-ok">all {len(v.drafted)} accepted</span>: one '
                    f'more token from the same target forward</td></tr>')
    rule = ("Greedy: a drafted token is accepted while it equals the target's argmax; p and q "
            "are shown for insight." if greedy else
            "Sampling: d_i is accepted with probability min(1, p/q); at the first rejection the "
            "target samples from normalize(max(0, p − q)).")
    return (f'<p class="msd-muted">{rule}</p><table class="msd-table msd-verify"><thead><tr>'
            f'<th>i</th><th>token</th><th>q (draft)</th><th>p (target)</th><th>min(1, p/q)</th>'
            f'<th>result</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _sub(n: int) -> str:
    return str(n).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def step_count(rec: RunRecord | None) -> int:
    return len(analyse(rec).steps) if rec is not None else 0


def render_inspector(rec: RunRecord | None, step: int, greedy: bool = True) -> str:
    if rec is None or not rec.events:
        return ('<div class="msd-inspector msd-placeholder">Run (or load a trace) to inspect '
                'the speculative steps.</div>')
    if rec.method == "ar":
        return ('<div class="msd-inspector msd-placeholder">The AR baseline has no drafts: every '
                'step is one target forward for one token.</div>')
    a = analyse(rec)
    if not a.steps:
        return '<div class="msd-inspector msd-placeholder">No steps recorded.</div>'
    steps = sorted(a.steps)
    step = min(max(int(step), steps[0]), steps[-1])
    sv = a.steps[step]
    last = _last_committed(rec, sv, a.tokens)
    v = sv.verify
    verdict = ""
    if v is not None:
        verdict = (f" · accepted <b>A = {v.accepted}</b> of γ = {len(v.drafted)}, then the "
                   f"target's {esc(v.kind)} {_chip(rec, v.token, 'is-target')}")
    committed = "".join(a.tokens[i].text for i in sv.commit_tokens)
    head = (f'<div class="msd-step-head"><b>Step {step}</b> of {len(steps)} · '
            f'{sv.committed} token{"" if sv.committed == 1 else "s"} committed before · window from '
            f'{esc(ORIGINS.get(sv.origin, sv.origin))}{verdict} · committed '
            f'<code>{esc(committed)}</code></div>')
    return (f'<div class="msd-inspector">{head}'
            f'<h4>1 · Early exit: the target\'s guesses half-way through</h4>{_early_exit(rec, sv, last)}'
            f'<h4>2 · Draft branches</h4>{_branches(rec, sv, last)}'
            f'<h4>3 · Verification (p = target, q = draft)</h4>{_verification(rec, sv, greedy)}'
            f'</div>')
