"""One Mirror-SD step on a real time axis (HTML), and the step worth opening first.

The zoom draws the measured spans of one step in two lanes, target and draft, from the
step's first span: layers 1..exit, the early exit and its hand-off to the draft, the rest of
the target's layers while the draft writes its branches, the verdict, then hit (the next
window is a branch already written) or miss (the draft writes it after the verdict while the
target waits). Every millisecond on it is measured in the run (spans); none is projected.
"""
from __future__ import annotations

import html
from statistics import median

from .runs import (VERDICT_LABELS, RunRecord, StepView, analyse, label, exit_mirrors, late_ms, late_words,
                   verdict_outcome)
from .steps import after_verdict_s, branch_ms, chipped, exit_end, quoted, redraft_s
from .why import lanes_at_once, steps_at_once

esc = html.escape

SEGMENTS = {  # span label -> (plain name, css class)
    "prefix": ("target: layers 1–{layer}", "z-prefix"),
    "exit_head": ("early exit: top guesses to the draft", "z-exit"),
    "suffix": ("target: layers {next}–{layers}", "z-suffix"),
    "accept": ("verdict", "z-accept"),
    "extend": ("draft: reads its last token", "z-extend"),
    "branches": ("draft: writes branches", "z-branches"),
    "fallback": ("draft: writes the next window (target waits)", "z-fallback"),
}


def instructive_step(rec: RunRecord | None) -> int:
    """The step to open on: the first rejection or miss (whichever comes first), else the
    first hit, else the first verified step; among the steps that read the early exit first
    when the run has any (the overlap gate may run a step without it); 0 without steps."""
    if rec is None:
        return 0
    steps = analyse(rec).steps
    every = sorted(steps)
    for order in ([s for s in every if steps[s].early_exit is not None], every):
        telling = [s for s in order if steps[s].fallback is not None or (
            steps[s].verify is not None and steps[s].verify.kind == "correction")]
        hits = [s for s in order if any(b.status == "taken" for b in steps[s].rollouts)]
        found = (telling or hits or [s for s in order if steps[s].verify is not None])
        if found:
            return found[0]
    return 0


def opening_step(records: dict[str, RunRecord], rec: RunRecord | None) -> int:
    """The step the inspector opens on: the zoom's own step when it opens on the run the zoom
    draws (one step, drawn above and taken apart in the inspector, with the same figures),
    else `instructive_step`."""
    if rec is not None and rec is zoom_record(records):
        step = zoom_step(rec)
        if step is not None:
            return step
    return instructive_step(rec)


def zoom_record(records: dict[str, RunRecord]) -> RunRecord | None:
    """The Mirror-SD run the zoom draws: Mirror-SD's own, unless its overlap gate ran most of its
    steps in turn (or all of them) and a variant with the early exit on had its lanes at once,
    the run with the lanes at once in every step among them; None without a Mirror-SD run."""
    runs = [records[m] for m in exit_mirrors(records) if records[m] is not None and records[m].finish is not None]

    def mostly_in_turn(r: RunRecord) -> bool:
        at_once, steps = lanes_at_once(r)
        return 2 * at_once < steps

    # Mirror-SD's own first, unless its gate ran most steps in turn: then a run that overlapped
    # (the page's Mirror-SD) shows the mechanism at its usual step, not at a rare one
    runs.sort(key=lambda r: (mostly_in_turn(r), r.method != "mirror"))

    return next((r for r in runs if any({"prefix", "branches"} <= x for x in _labels(r).values())),
                runs[0] if runs else None)


def _labels(rec: RunRecord) -> dict[int, set[str]]:
    """Each step's span labels."""
    labels: dict[int, set[str]] = {}
    for sp in rec.spans:
        labels.setdefault(sp.step, set()).add(sp.label)
    return labels


def zoom_step(rec: RunRecord) -> int | None:
    """The step the zoom draws, the most telling one after the first: a step with a window to
    verify (never a plain-decode step, γ 0, when another exists) whose lanes overlapped, the
    target's layers split at the early exit while the draft wrote branches beside them; a hit
    best, one whose verdict kept a drafted token before one that kept none (a hit that keeps
    nothing still readies the next window, but teaches less), and among them the typical one,
    not the best case: the one whose wait for its branch after the verdict is the median of
    theirs (the lower middle of an even count); then one with
    branches, then one split at the exit. A step with nothing to draw but its verdict is never
    picked; None when no step has more."""
    steps = analyse(rec).steps
    labels = _labels(rec)
    found = {}
    for s in sorted(steps):
        have = labels.get(s, set())
        if s == 0 or not (have & set(SEGMENTS)) - {"accept"}:
            continue
        sv = steps[s]
        windowed = sv.verify is None or bool(sv.verify.drafted)
        overlapped = "prefix" in have and "branches" in have
        hit = any(b.status == "taken" for b in sv.rollouts)
        wait = after_verdict_s(rec, s) * 1e3 if hit else 0.0
        found[s] = ((windowed, overlapped, hit, hit and _kept(sv), bool(sv.rollouts), "prefix" in have), wait)
    if not found:
        return None
    top = max(kind for kind, _ in found.values())
    waits = sorted(wait for kind, wait in found.values() if kind == top)
    middle = waits[(len(waits) - 1) // 2]
    return min((s for s, (kind, _) in found.items() if kind == top), key=lambda s: (abs(found[s][1] - middle), s))


def nearest_miss(rec: RunRecord, step: int) -> tuple[int, float] | None:
    """The miss nearest `step` (its index among the run's steps, 1-based, as the page numbers
    them, and the ms the target waited for its redraft), to set beside a hit; None without one."""
    steps = analyse(rec).steps
    order = sorted(steps)
    misses = [s for s in order if verdict_outcome(steps[s]) == "miss"]
    if not misses:
        return None
    s = min(misses, key=lambda m: (abs(m - step), m))
    return order.index(s) + 1, redraft_s(rec, s) * 1e3


# a bar's label at the zoom's width, labels at about 6.5 px a character: the share of the width
# one character takes, in percent, on a wide page (a track of about 1,100 px) and on a phone's
# (about 280 px at 400 px); the page shows the one for its width (panes.css)
CHAR_PCT = 0.6
CHAR_PCT_NARROW = 2.6


def bar_label(name: str, ms: float, width_pct: float, first: bool, char_pct: float = CHAR_PCT) -> str:
    """What fits on a bar: the name and its milliseconds, the milliseconds alone (the name
    only on the first of a run of same-named bars, or when it does not fit), or nothing; the
    whole name is always in the bar's tooltip."""
    full, short = f"{name} · {ms:.0f} ms", f"{ms:.0f} ms"
    fits = lambda text: (len(text) + 1) * char_pct <= width_pct  # noqa: E731  (+1: the padding)
    if first and fits(full):
        return full
    return short if fits(short) else ""


def _bar(span, t0: int, scale: float, name: str, cls: str, first: bool = True) -> str:
    left, width = (span.start_ns - t0) * scale, max((span.end_ns - span.start_ns) * scale, 0.3)
    ms = (span.end_ns - span.start_ns) / 1e6
    wide, narrow = (bar_label(name, ms, width, first, pct) for pct in (CHAR_PCT, CHAR_PCT_NARROW))
    return (f'<div class="msd-zbar {cls}" style="left:{left:.2f}%;width:{width:.2f}%" '
            f'title="{esc(name)}: {(span.start_ns - t0) / 1e6:.0f} → {(span.end_ns - t0) / 1e6:.0f} ms '
            f'({ms:.0f} ms)"><span class="zl-wide">{esc(wide)}</span>'
            f'<span class="zl-narrow">{esc(narrow)}</span></div>')


def _mark(t_ns: int, t0: int, scale: float, text: str, cls: str) -> str:
    left = (t_ns - t0) * scale
    side = " z-left" if left > 60 else ""  # near the right edge: the label to the line's left
    return (f'<div class="msd-zmark {cls}{side}" style="left:{left:.2f}%">'
            f'<span>{esc(text)}</span></div>')


def _kept(sv: StepView) -> bool:
    """Whether the step's verdict kept at least one drafted token."""
    return bool(sv.verify is not None and sv.verify.accepted)


def how_typical(rec: RunRecord, step: int) -> str:
    """'9 of its 11 steps like this one (the lanes at once, a late hit; this one the middle of
    them by how late)': how many of the run's steps share the drawn step's kind (the hits among
    them the card's hits, a late hit apart from one ready by the verdict), so that a rare step
    reads as rare and a typical one as typical."""
    steps, at_once = analyse(rec).steps, steps_at_once(rec)

    def kind(s: int) -> tuple[bool, str, bool]:
        hit = any(b.status == "taken" for b in steps[s].rollouts)
        return (s in at_once, ("late" if steps[s].late_ms is not None else "hit") if hit else "none",
                hit and _kept(steps[s]))

    mine = kind(step)
    alike = [s for s in steps if kind(s) == mine]
    words = ("the lanes at once" if mine[0] else "the lanes in turn") + {
        "late": ", a late hit", "hit": ", a branch hit ready by the verdict", "none": ", no branch hit"}[mine[1]]
    if mine[1] != "none":
        words += ", drafted tokens kept" if mine[2] else ", no drafted token kept"
    if mine[1] == "late" and len(alike) > 2:
        words += "; this one the middle of them by how late"
    return f"{len(alike)} of its {len(steps)} steps like this one ({words})"


def render_zoom(rec: RunRecord | None, meta: dict, step: int | None = None) -> str:
    """The annotated zoom of one Mirror-SD step, `zoom_step`'s unless one is given ('' without
    a Mirror-SD run)."""
    if rec is None or rec.finish is None:
        return ""
    step = zoom_step(rec) if step is None else step
    if step is None:
        return ""
    sv = analyse(rec).steps[step]
    spans = [s for s in rec.spans if s.step == step and s.label in SEGMENTS]
    if not spans:
        return ""
    t0, t1 = min(s.start_ns for s in spans), max(s.end_ns for s in spans)
    scale = 100.0 / max(t1 - t0, 1)
    layer = sv.early_exit.layer if sv.early_exit else meta.get("exit_layer", "?")
    layers = meta.get("target_layers", "N")
    names = {k: v[0].format(layer=layer, next=(layer + 1) if isinstance(layer, int) else "?",
                            layers=layers) for k, v in SEGMENTS.items()}
    lanes = {"target": [], "draft": []}
    last = {}  # lane -> the label of its previous bar
    for s in sorted(spans, key=lambda x: x.start_ns):
        lane = "draft" if s.lane == "draft" else "target"
        lanes[lane].append(_bar(s, t0, scale, names[s.label], SEGMENTS[s.label][1], last.get(lane) != s.label))
        last[lane] = s.label
    verdict_ns = max((s.end_ns for s in spans if s.label in VERDICT_LABELS), default=t1)  # runs.late_ms's
    marks = [_mark(verdict_ns, t0, scale, f"verdict at {(verdict_ns - t0) / 1e6:.0f} ms", "z-verdict")]
    ready_ns, outcome = _next_window(sv, spans, verdict_ns)
    # the two labels share a row unless the marks are close enough for them to overlap
    low = (ready_ns - verdict_ns) * scale < 25
    marks.append(_mark(ready_ns, t0, scale, f"next window ready at {(ready_ns - t0) / 1e6:.0f} ms",
                       "z-ready z-low" if low else "z-ready"))
    rows = "".join(f'<div class="msd-zlane"><span class="msd-zlane-name">{name}</span>'
                   f'<div class="msd-ztrack">{"".join(bars)}</div></div>' for name, bars in lanes.items())
    axis = (f'<div class="msd-zaxis{" z-low" if low else ""}"><span>0 ms</span>'
            f'<span>{(t1 - t0) / 1e6:.0f} ms</span></div>')
    present = [k for k in SEGMENTS if any(s.label == k for s in spans)]
    axis += ('<div class="msd-zlegend">' + "".join(
        f'<span><i class="{SEGMENTS[k][1]}"></i>{esc(names[k])}</span>' for k in present) + '</div>')
    beats = "<br>".join(f"<b>{esc(lead)}</b> {chipped(text)}" for lead, text in
                        _caption(rec, sv, spans, layer, layers, outcome, (ready_ns - verdict_ns) / 1e6,
                                 meta.get("branch_budget")))
    return (f'<div class="msd-zoom"><div class="msd-sub">One {esc(label(rec.method))} step, measured: step '
            f'{sorted(analyse(rec).steps).index(step) + 1}, real milliseconds from its start; '
            f'{esc(how_typical(rec, step))}</div>'
            f'<div class="msd-zplot">{rows}<div class="msd-zmarks">{"".join(marks)}</div></div>{axis}'
            f'{rule_words(rule_figures(rec, step, meta))}'
            f'<p class="msd-zcaption">{beats}</p></div>')


def fit(spans, ready_ns: int, verdict_ns: int) -> dict | None:
    """The one condition Mirror-SD's gain rests on, in one hit step's figures, both from the early
    exit's end: `need`, the draft's ms to the taken branch (the next window, ready at
    `ready_ns`); `have`, the target's ms to its verdict (its layers after the exit and the
    acceptance); `wait`, the ms the target waited for the branch after its verdict (need = have +
    wait when it did not fit); `fits`, whether it was ready by the verdict (None without an exit)."""
    exit_ns = exit_end(spans)
    if exit_ns is None:
        return None
    # a branch done before the verdict was ready by the end of the draft's last branch forward
    done_ns = max((s.end_ns for s in spans if s.label == "branches"), default=ready_ns)
    fits = ready_ns <= verdict_ns
    need = max(0.0, ((done_ns if fits else ready_ns) - exit_ns) / 1e6)
    have = (verdict_ns - exit_ns) / 1e6
    wait = late_ms(spans) or 0  # the caption's wait and the late hit's badge, to the ms
    if not fits:  # the figures shown add up: when it was ready is what the target took plus its wait
        need = round(have) + wait
    return {"need": need, "have": have, "wait": wait, "fits": fits}


def rule_figures(rec: RunRecord, step: int, meta: dict | None = None) -> dict | None:
    """`fit`'s figures for a hit step of `rec`, with `after`, the target's part after the exit in
    words (None for a step without an exit or whose next window was no branch)."""
    sv = analyse(rec).steps.get(step)
    spans = [s for s in rec.spans if s.step == step and s.label in SEGMENTS]
    if sv is None or not spans:
        return None
    verdict_ns = max((s.end_ns for s in spans if s.label in VERDICT_LABELS), default=max(s.end_ns for s in spans))
    ready_ns, outcome = _next_window(sv, spans, verdict_ns)
    f = fit(spans, ready_ns, verdict_ns) if outcome == "hit" else None
    if f is None:
        return None
    layer = sv.early_exit.layer if sv.early_exit else None
    layers = (meta or {}).get("target_layers", "N")
    return dict(f, after=f"layers {layer + 1}–{layers} and its verdict" if isinstance(layer, int)
                else "the layers after it and its verdict",
                layers_ms=step_suffix_ms(rec, step))  # the layers alone, as the inspector gives them


def step_suffix_ms(rec: RunRecord, step: int) -> float | None:
    """The target's layers after the early exit in one step, in ms (None without them)."""
    spans = [s for s in rec.spans if s.label == "suffix" and s.step == step]
    return sum(s.end_ns - s.start_ns for s in spans) / 1e6 if spans else None


def cause_figures(rec: RunRecord | None, meta: dict) -> tuple[int, dict] | None:
    """(the zoomed step of `rec`, its `rule_figures`), the cause the verdict draws and names (None
    without such a step)."""
    step = zoom_step(rec) if rec is not None and rec.finish is not None else None
    f = rule_figures(rec, step, meta) if step is not None else None
    return (step, f) if f is not None else None


def rule_words(f: dict | None) -> str:
    """The rule under the zoom, with its step's figures (`rule_figures`; '' without)."""
    if f is None:
        return ""
    then = ("so the next window was ready at the verdict: the drafting was hidden" if f["fits"] else
            f"so the target waited {f['wait']} ms for it at the verdict" if f["wait"] else
            "so the target waited under 1 ms for it at the verdict")
    return (f'<p class="msd-zrule"><b>The rule:</b> the draft\'s branches are free only when they '
            f'fit beside the target\'s layers after the early exit. In this step the taken branch (the '
            f'next window) was ready {"by " if f["fits"] else ""}<b>{f["need"]:.0f} ms</b> after the exit, and the '
            f'target\'s {esc(f["after"])} took <b>{f["have"]:.0f} ms</b>, {then}.</p>')


def render_cause(rec: RunRecord | None, meta: dict) -> str:
    """Under the verdict's tiles, the cause in one picture: the zoomed step's two lanes after the
    early exit as bars on one scale (the target's layers to its verdict; the draft's time to the
    branch the verdict took) and the wait between, with the words ('' without such a step)."""
    got = cause_figures(rec, meta)
    if got is None:
        return ""
    step, f = got
    n = sorted(analyse(rec).steps).index(step) + 1
    top = max(f["need"], f["have"], 1.0)
    bar = lambda ms, cls: f'<i class="{cls}" style="width:{100 * ms / top:.1f}%"></i>'  # noqa: E731
    wait = (f'<i class="c-wait" style="left:{100 * f["have"] / top:.1f}%;width:{100 * f["wait"] / top:.1f}%"></i>'
            if not f["fits"] and f["wait"] else "")
    rows = (f'<div class="msd-cause-row"><span>target: {esc(f["after"])}</span>'
            f'<div class="msd-cause-track">{bar(f["have"], "c-target")}</div><b>{f["have"]:.0f} ms</b></div>'
            f'<div class="msd-cause-row"><span>draft: the branch the verdict took, ready</span>'
            f'<div class="msd-cause-track">{bar(f["need"], "c-draft")}{wait}</div><b>{f["need"]:.0f} ms</b></div>')
    said = (f"The draft finished the branch the verdict took within the target's {f['have']:.0f} ms after the "
            f"early exit: the drafting was hidden, which is what Mirror-SD is for." if f["fits"] else
            f"After the early exit the target needed {f['have']:.0f} ms more{_layers_part(f)}. The draft, on the "
            f"same cores, had the right branch ready only after {f['need']:.0f} ms. The target waited {f['wait']} ms.")
    return (f'<div class="msd-cause"><b>Why, in one step</b> ({esc(label(rec.method))}, step {n}, '
            f'a typical{"" if f["fits"] else " late"} hit<span class="msd-cause-below">; in full below</span>): {esc(said)}{rows}</div>')


def _layers_part(f: dict) -> str:
    """' (its layers 85 ms, then its verdict)': the target's time after the exit in its two parts,
    so it reads beside the inspector's and How it works' layer time ('' without it)."""
    ms = f.get("layers_ms")
    return f" (layers {ms:.0f} ms, then its verdict)" if ms is not None and round(ms) < round(f["have"]) else ""


def _next_window(sv: StepView, spans, verdict_ns: int) -> tuple[int, str]:
    """When the next window was ready, and whether the step hit or missed."""
    outcome = verdict_outcome(sv)
    if outcome == "hit":
        ends = [s.end_ns for s in spans if s.label == "branches"]
        return (max(verdict_ns, max(ends)) if ends else verdict_ns), "hit"
    ends = [s.end_ns for s in spans if s.label == ("draft" if outcome == "turn" else "fallback")]
    return (max(ends) if ends else verdict_ns), outcome or "end"


def _ms(spans, label: str) -> float:
    return sum(s.end_ns - s.start_ns for s in spans if s.label == label) / 1e6


def _branches_written(sv: StepView, budget: int | None) -> str:
    """'n branches' as the step wrote them: the exit's best roots (the branch budget), and the
    one the draft had started on its own guess before the early exit, when it was dropped."""
    n = len(sv.rollouts)
    if not budget:
        return f"{n} branch{'' if n == 1 else 'es'}"
    kept = sum(1 for b in sv.rollouts if b.rank is not None and 0 <= b.rank < budget)
    dropped = n - kept
    text = f"{kept} branch{'' if kept == 1 else 'es'} from the early exit's best starts (branch budget {budget})"
    if dropped:
        text += (f", after dropping the {'one' if dropped == 1 else dropped} it had begun on its own "
                 f"guess before the exit ranked {'it' if dropped == 1 else 'them'} lower")
    return text


def fresh_steps(steps: dict[int, StepView]) -> list[int]:
    """The steps whose next window the draft wrote after the verdict: a miss's redraft, or a
    step whose lanes ran in turn."""
    return [s for s, sv in steps.items() if sv.fallback is not None or verdict_outcome(sv) == "turn"]


FRESH_MIN = 3  # fresh windows (drafted after a verdict) a run needs before their median is set beside its hits


def redraft_ms(rec: RunRecord) -> float | None:
    """The median time the draft took to write a window after a verdict in this run (a miss's
    redraft, or a step whose lanes ran in turn), in ms; None where fewer than FRESH_MIN steps did
    (a median of one or two windows compares nothing)."""
    times = [redraft_s(rec, s) for s in fresh_steps(analyse(rec).steps)]
    times = [t for t in times if t > 0]
    return median(times) * 1e3 if len(times) >= FRESH_MIN else None


def _miss_beside(rec: RunRecord, sv: StepView) -> str:
    """' Compare step 9, a miss: …', the nearest miss's wait set beside a hit ('' without one)."""
    near = nearest_miss(rec, sv.step)
    if near is None:
        return ""
    n, ms = near
    return (f" Compare step {n}, a miss: no branch started at its verdict, so the target waited "
            f"{ms:.0f} ms while the draft wrote the next window.")


def _caption(rec: RunRecord, sv: StepView, spans, layer, layers, outcome: str,
             wait_ms: float, budget: int | None = None) -> list[tuple[str, str]]:
    """The step in four beats, each under a short lead: before the exit, the exit, after it,
    the verdict and what came of it."""
    v = sv.verify
    kept = (f"kept {v.accepted} of the {len(v.drafted)} drafted tokens and wrote "
            f"{quoted(rec, v.token)} itself" if v else "gave its verdict")
    if v and not v.accepted and outcome == "hit":
        kept = (f"kept none of the {len(v.drafted)} drafted tokens and wrote {quoted(rec, v.token)} itself, "
                f"but the draft had already guessed that token")
    extend = _ms(spans, "extend")
    read = f"read its last token ({extend:.0f} ms) and " if extend else ""
    exit_at = exit_end(spans)  # the guesses reach the draft
    early = exit_at is not None and any(s.label == "branches" and s.start_ns < exit_at for s in spans)
    before, after = branch_ms(spans, exit_at)
    doing = (f"{read}started a branch on its own best guess of the verdict ({before:.0f} ms of forwards)" if early else
             (f"read its last token ({extend:.0f} ms)" if extend else "waited for the early exit"))
    rest = f"layers {layer + 1}–{layers}" if isinstance(layer, int) and isinstance(layers, int) else "the rest of its layers"
    beats = [("Before the exit:", f"the target ran layers 1–{layer} ({_ms(spans, 'prefix'):.0f} ms); the draft {doing}."),
             ("The exit:", f"at layer {layer} the target peeked at its likely next tokens "
                           f"({_ms(spans, 'exit_head'):.0f} ms) and handed its top guesses to the draft."),
             ("After the exit:", f"the target ran {rest} ({_ms(spans, 'suffix'):.0f} ms); beside it, and on "
                                 f"past the verdict where it had to, the draft wrote {_branches_written(sv, budget)}; "
                                 f"all branches together took {after:.0f} ms of draft forwards after the exit "
                                 f"(the short gaps between forwards not counted).")]
    return beats + [("The verdict:", f"the target {kept}. {_outcome(rec, sv, spans, outcome, wait_ms)}")]


def _outcome(rec: RunRecord, sv: StepView, spans, outcome: str, wait_ms: float) -> str:
    """Hit, miss or neither, and what the step's next window cost the target."""
    hit = "Branch hit: one branch began exactly where the verdict left off, with the target's own token, and "
    late = sv.late_ms if outcome == "hit" else None  # runs.late_ms: the strip's and the live board's badge
    if late is not None:
        badge = late_words(late)[:1].upper() + late_words(late)[1:]
        redraft = redraft_ms(rec)
        if redraft is not None and redraft <= wait_ms:  # the hit came later than a fresh window would have
            return (f"{badge}, and it cost time here: one branch began exactly where the verdict left off, with the "
                    f"target's own token, and became the next window, yet the draft finished it {late} ms "
                    f"after the verdict, while a window drafted fresh after the verdict took {redraft:.0f} ms in "
                    f"this run (median). Both models sharing the cores slowed the branches more than the head "
                    f"start gained.")
        fresh = (f" A window drafted fresh after a verdict kept the target waiting {redraft:.0f} ms in this run (median): "
                 f"this hit saved {round(redraft) - late} ms." if redraft is not None else "")  # the shown figures' difference
        return (f"{badge}: one branch began exactly where the verdict left off, with the target's own token, and "
                f"became the next window; the draft finished it {late} ms after the verdict, so the "
                f"target waited that long instead of for a whole new window.{fresh}{_miss_beside(rec, sv)}")
    if outcome == "hit":
        return f"{hit}was ready before the verdict, so it became the next window with no wait.{_miss_beside(rec, sv)}"
    if outcome == "end":
        return "The run ended at this step: no next window."
    if outcome == "turn":
        return "The lanes ran in turn here: the draft wrote the next window after the verdict."
    return (f"Branch miss: no branch started there, so the draft wrote the next window after the verdict "
            f"({_ms(spans, 'fallback'):.0f} ms) while the target waited.")
