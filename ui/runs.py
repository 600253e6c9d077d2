"""The record of one decoding run as the UI sees it, and what it derives from the events.

A `RunRecord` is the engine's event stream plus what a trace needs to be replayed without
models: the arrival time of each event (relative to the run's start), the text of each
committed token, and the text of every other token id that appears (drafts, early-exit
candidates). `analyse()` turns it into per-token colours and per-step views; it is pure.

Token kinds (the legend): accepted (drafted, verified; also a Mirror-SD window drafted after
the verdict in a step whose lanes ran in turn, neither hit nor miss), hit (accepted from a
window that was a reused branch, ready by the verdict), late (the same, from a branch the draft
finished after the verdict: the target waited for it), fallback (accepted from a window drafted
serially after a miss),
correction (the target's token where it rejected a draft), bonus (the target's token after
a fully accepted window), plain (the target alone: the AR baseline, or a plain step).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mirror_sd.engine.collect import FIGURES, figures
from mirror_sd.engine.events import (Commit, DraftBranch, EarlyExit, Error, Event, Finish, Notice,
                              Span, StepStart, Verify, event_from_dict)
from mirror_sd.engine.registry import REGISTRY

UNKNOWN_COLOUR = "#888888"  # a method a trace names that this registry does not know


@dataclass(frozen=True)
class Variant:
    """A registry method with some settings changed, run as a method of its own (its own pane,
    card and timeline lanes), off unless ticked: what one setting buys, measured in one run."""
    base: str  # the registry method it runs
    changes: tuple[tuple[str, str | None], ...]  # Settings fields and the values it runs with
    label: str
    title: str
    colour: str
    tag: str = ""  # what differs, in two or three words, on its pane


# The page runs Mirror-SD as the algorithm draws it: the draft beside the target in every step,
# its windows adaptive, so that every step races the target's verdict and its hits and misses
# show. The engine's own default gates that overlap (lane_overlap auto: in turn where that
# measured faster) and prices its windows: on the page that is a variant, "Mirror-SD (gated)".
PAGE_CHANGES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "mirror": (("lane_overlap", "always"), ("window", "adaptive")),
}

VARIANTS: dict[str, Variant] = {
    "mirror-noexit": Variant("mirror", (("early_exit", "off"),), "Mirror-SD (no exit)",
                             "Mirror-SD without its early exit: the draft's own guesses pick "
                             "the branches", "#a21caf", "early exit off"),
    # window None: the page's window setting (priced by default), as SD's
    "mirror-gated": Variant("mirror", (("lane_overlap", "auto"), ("window", None)),
                            "Mirror-SD (gated)",
                            "Mirror-SD as the engine runs it by default: per step, the draft beside the "
                            "target only where that measured faster on this machine, else in turn as SD; "
                            "windows as SD's", "#b45309", "gated: overlaps only where it pays"),
    # SD as first described: what the page's priced windows and prompt lookup buy
    "sd-fixed": Variant("sd", (("window", "fixed"), ("proposer", "draft")), "SD (fixed windows)",
                        "SD as first described: the draft model writes a window of the page's gamma "
                        "tokens every step, whatever it costs; no priced windows, no prompt lookup",
                        "#0f766e", "fixed windows, the draft model only"),
}


# The methods come from the engine's registry, read at call time so that a method registered
# after import (a test's toy method) shows everywhere: panes, legends, timeline lanes, cards.
def method_names() -> tuple[str, ...]:
    """The registry's methods in display order (its dict order: each adds to the one before),
    then the variants of those methods (VARIANTS)."""
    return tuple(REGISTRY) + tuple(v for v, x in VARIANTS.items() if x.base in REGISTRY)


def default_methods() -> tuple[str, ...]:
    """What a run runs unless told otherwise: every registry method (Mirror-SD as the page runs
    it, PAGE_CHANGES); the variants only when ticked."""
    return tuple(REGISTRY)


def variant_of(method: str) -> tuple[str, dict[str, str]]:
    """(registry method, setting changes) of a method or variant name: the page's changes to its
    registry method (PAGE_CHANGES), then the variant's own; a change to None keeps the page's
    setting."""
    v = VARIANTS.get(method)
    base = v.base if v is not None else method
    changes = dict(PAGE_CHANGES.get(base, ()))
    changes.update(v.changes if v is not None else ())
    return base, {k: x for k, x in changes.items() if x is not None}


def exit_off(method: str) -> bool:
    """Whether the method runs Mirror-SD with its early exit off (a variant: the draft's own
    guesses pick the branches), so no exit layer, exit guesses or exit ranking apply to it."""
    return variant_of(method)[1].get("early_exit") == "off"


def always_overlapped(method: str) -> bool:
    """Whether the method runs Mirror-SD with its two lanes at once in every step (the page's
    Mirror-SD; not its gated variant)."""
    return variant_of(method)[1].get("lane_overlap") == "always"


def gated(method: str) -> bool:
    """Whether the method runs Mirror-SD with its overlap gate (lanes at once or in turn, per step)."""
    return variant_of(method)[0] == "mirror" and not always_overlapped(method)


def exit_mirrors(methods) -> list[str]:
    """The Mirror-SD runs among `methods` that read the target's early exit (every one but the
    variant without it), in their order."""
    return [m for m in methods if variant_of(m)[0] == "mirror" and not exit_off(m)]


def overlapped_and_gated(methods) -> tuple[str | None, str | None]:
    """(the first early-exit Mirror-SD with its lanes at once in every step, the first gated
    one) among `methods`; None for either that did not run."""
    runs = exit_mirrors(methods)
    return (next((m for m in runs if always_overlapped(m)), None), next((m for m in runs if gated(m)), None))


def _entry(method: str):
    return REGISTRY.get(method) or VARIANTS.get(method)


def label(method: str) -> str:
    """The method's short display name ("AR", "SD", "Mirror-SD (gated)"); a trace's unknown
    name as is."""
    entry = _entry(method)
    return entry.label if entry is not None else method


def tag(method: str) -> str:
    """A variant's few words on what differs ("early exit off"); '' for a registry method."""
    v = VARIANTS.get(method)
    return v.tag if v is not None else ""


def colour(method: str) -> str:
    entry = _entry(method)
    return entry.colour if entry is not None else UNKNOWN_COLOUR


def title(method: str) -> str:
    entry = _entry(method)
    return entry.title if entry is not None else method


def drafts(method: str) -> bool:
    """Whether the method uses the draft model (it has windows to verify)."""
    entry = REGISTRY.get(variant_of(method)[0])
    return bool(entry is not None and entry.drafts)


@dataclass
class RunRecord:
    method: str  # a registry name ("ar", "sd", "mirror", ...)
    events: list[Event] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)  # arrival of each event, from t0
    # perf_counter_ns of the run's first timed event (Span times are absolute: subtract this);
    # anything before it (a kernel build, the proposal vocabulary) is not part of the run
    t0_ns: int = 0
    token_texts: list[str] = field(default_factory=list)  # one per committed token
    id_texts: dict[int, str] = field(default_factory=dict)  # any token id seen -> its text

    def add(self, event: Event, t_ns: int) -> None:
        self.events.append(event)
        self.times_ns.append(t_ns)

    def rebase(self, origin_ns: int) -> None:
        """Make `origin_ns` (perf_counter_ns) time zero; events that arrived before it sit at 0."""
        shift = origin_ns - self.t0_ns
        if shift:
            self.times_ns = [max(0, t - shift) for t in self.times_ns]
            self.t0_ns = origin_ns

    def snapshot(self) -> "RunRecord":
        """A consistent copy while another thread appends (list slices are atomic)."""
        n = min(len(self.events), len(self.times_ns))
        return RunRecord(self.method, self.events[:n], self.times_ns[:n], self.t0_ns,
                         list(self.token_texts), dict(self.id_texts))

    def until(self, t_ns: int) -> "RunRecord":
        """The run as it stood `t_ns` after its start (race replay)."""
        n = 0
        while n < len(self.times_ns) and self.times_ns[n] <= t_ns:
            n += 1
        return RunRecord(self.method, self.events[:n], self.times_ns[:n], self.t0_ns,
                         self.token_texts, self.id_texts)

    @property
    def finish(self) -> Finish | None:
        return self.events[-1] if self.events and isinstance(self.events[-1], Finish) else None

    @property
    def errors(self) -> list[str]:
        return [e.message for e in self.events if isinstance(e, Error)]

    @property
    def notices(self) -> list[str]:
        return [e.message for e in self.events if isinstance(e, Notice)]

    @property
    def spans(self) -> list[Span]:
        return [e for e in self.events if isinstance(e, Span)]

    @property
    def duration_ns(self) -> int:
        return self.times_ns[-1] if self.times_ns else 0

    @property
    def cancelled(self) -> bool:
        f = self.finish
        return bool(f and f.stats.get("cancelled"))

    @property
    def complete(self) -> bool:
        """Finished on its own: not stopped, no error."""
        return self.finish is not None and not self.cancelled and not self.errors

    def to_dict(self) -> dict:
        return {"method": self.method, "t0_ns": self.t0_ns,
                "events": [dict(e.to_dict(), t_ns=t) for e, t in zip(self.events, self.times_ns)],
                "token_texts": self.token_texts,
                "id_texts": {str(k): v for k, v in self.id_texts.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "RunRecord":
        rec = cls(str(d["method"]), t0_ns=int(d.get("t0_ns", 0)),
                  token_texts=[str(t) for t in d.get("token_texts", [])],
                  id_texts={int(k): str(v) for k, v in d.get("id_texts", {}).items()})
        for i, e in enumerate(d["events"]):
            rec.add(event_from_dict(e), int(e.get("t_ns", i)))
        return rec


@dataclass
class TokenView:
    token_id: int
    text: str
    kind: str  # accepted | hit | late | fallback | correction | bonus | plain
    step: int
    t_ns: int


@dataclass
class StepView:
    step: int
    committed: int  # tokens committed before the step
    t_ns: int = 0
    origin: str = "none"  # where this step's window came from: draft | hit | fallback | turn | none
    window_branch: DraftBranch | None = None  # the rollout that is this step's window
    early_exit: EarlyExit | None = None
    verify: Verify | None = None
    rollouts: list[DraftBranch] = field(default_factory=list)  # speculated during the step
    fallback: DraftBranch | None = None  # serial rollout after a miss: next step's window
    in_turn: DraftBranch | None = None  # next step's window, the lanes in turn (no race, no miss)
    commit: Commit | None = None
    commit_tokens: list[int] = field(default_factory=list)  # indices into Analysis.tokens
    late_ms: int | None = None  # a hit whose branch was ready this long after the verdict (late_ms)
    window_late_ms: int | None = None  # this step's window: from such a late hit, so long after its verdict

    @property
    def window(self) -> list[int]:
        if self.verify is not None:
            return list(self.verify.drafted)
        return list(self.window_branch.tokens) if self.window_branch else []


LATE_BRANCHES = "branches_late"  # a branch forward that began at or after its step's verdict


LATE_MS = 0.5  # a taken branch ready more than this after its step's verdict: a late hit
VERDICT_LABELS = ("suffix", "verify_forward", "accept")  # the target's forward and acceptance rule


def branch_after_verdict_ns(spans) -> int | None:
    """From a step's verdict (the end of its target forward and acceptance rule) to the end of
    its "branches" spans (the draft's branch rollouts), in ns, from the step's spans: <= 0 when
    they were done by then; None without either."""
    verdict = max((s.end_ns for s in spans if s.label in VERDICT_LABELS), default=None)
    done = max((s.end_ns for s in spans if s.label == "branches"), default=None)
    return None if verdict is None or done is None else done - verdict


def late_ms(spans) -> int | None:
    """How late a step's hit was, from its spans: its taken branch was ready at max(verdict, the
    end of its branch rollouts), so the target waited ready - verdict; that wait in whole ms (as
    every place prints it: the zoom, the badges) when over LATE_MS, else None (on time)."""
    wait = (branch_after_verdict_ns(spans) or 0) / 1e6
    return round(wait) if wait > LATE_MS else None


def late_words(ms: int) -> str:
    """A late hit's badge: 'late hit +99 ms' (live.js writes the same)."""
    return f"late hit +{ms} ms"


def token_kind(source: str, origin: str, window_late: int | None) -> str:
    """A committed token's kind (the legend's), the one rule of the settled panes (analyse) and
    the live board (live.LiveFeed): the commit's own source, except that an accepted draft from
    a window that was a branch hit is "hit", or "late" where that branch was ready after the
    verdict (`window_late`, late_ms), and one redrafted after a miss is "fallback"."""
    if source != "accepted" or origin not in ("hit", "fallback"):
        return source
    return "late" if origin == "hit" and window_late is not None else origin


class Verdicts:
    """Each step's verdict time (the end of its target and verify spans seen so far), read span
    by span, so that a branch forward begun after it is drawn as drafting the target waits for
    (`see`), not as drafting beside the target; and the spans that time a hit (`late_ms`)."""

    def __init__(self):
        self.ends: dict[int, int] = {}
        self.timing: dict[int, list] = {}  # step -> its verdict's and its branches' spans

    def see(self, span) -> str:
        """`span`'s label as drawn: its own, or LATE_BRANCHES for a branch forward that began at
        or after its step's verdict."""
        if span.label in VERDICT_LABELS or span.label == "branches":
            self.timing.setdefault(span.step, []).append(span)
        if span.lane in ("target", "verify"):
            self.ends[span.step] = max(self.ends.get(span.step, span.end_ns), span.end_ns)
            return span.label
        end = self.ends.get(span.step)
        return LATE_BRANCHES if span.label == "branches" and end is not None and span.start_ns >= end else span.label

    def late_ms(self, step: int | None) -> int | None:
        """`late_ms` of `step` from its spans seen so far (None for no step)."""
        return None if step is None else late_ms(self.timing.get(step, ()))


def drafted_in_turn(branch: DraftBranch, raced: bool) -> bool:
    """Whether a serial rollout after a Mirror-SD verdict came from a step whose lanes ran one
    after the other (the overlap gate's choice, engine/mirror/gate.py): nothing raced the
    verdict (`raced`: the step had an early exit or branches), and its root was never ranked.
    Such a step is neither a hit nor a miss: the draft wrote the window after the verdict, as
    plain SD does."""
    return branch.rank is None and not raced


def exit_check(rec: RunRecord) -> dict | None:
    """Mirror-SD's exit check of the run (engine/mirror/exit_check.py), computed after the run
    and untimed: of the steps whose lanes ran one after the other, which would have hit had
    the lanes overlapped; None when no step was checked."""
    f = rec.finish
    got = f.stats.get("exit_check") if f is not None else None
    return got if got and got.get("in_turn") else None


def checked_step(rec: RunRecord, step: int) -> dict | None:
    """The exit check of one step whose lanes ran in turn ({"rank", "would_hit", "exit_top"})."""
    return next((s for s in (exit_check(rec) or {}).get("steps", []) if s.get("step") == step), None)


def verdict_outcome(sv: StepView) -> str | None:
    """The one per-step fact the step strip, the inspector and the zoomed step all read: "hit"
    when one of the branches the draft rolled out during this step started exactly at its
    verdict (it became the next window; a late hit where it was ready after the verdict, the
    step's `late_ms`), "miss" when none did and the draft wrote the next
    window serially after the verdict, "turn" when the lanes ran one after the other (no
    branch raced the verdict: the draft wrote the next window after it, as SD does), None when
    no next window followed (the run's end)."""
    if any(b.status == "taken" for b in sv.rollouts):
        return "hit"
    if sv.fallback is not None:
        return "miss"
    return "turn" if sv.in_turn is not None else None


@dataclass
class Analysis:
    tokens: list[TokenView]
    steps: dict[int, StepView]


def analyse(rec: RunRecord) -> Analysis:
    """One pass over the events: token colours and the per-step views."""
    a = Analysis([], {})
    steps = a.steps
    origin, window_branch = "none", None
    verdicts = Verdicts()
    for ev, t in zip(rec.events, rec.times_ns):
        if isinstance(ev, StepStart):
            steps[ev.step] = sv = StepView(ev.step, ev.committed, t, origin if ev.window else "none",
                                           window_branch if ev.window else None)
            # the previous step's spans came before this step (engine/mirror/decoder.py
            # `_after_verdict`): a hit's lateness is known before its window's tokens commit
            if sv.origin == "hit":
                sv.window_late_ms = verdicts.late_ms(window_branch.step)
        elif isinstance(ev, DraftBranch):
            origin, window_branch = _window_origin(steps, ev, origin, window_branch)
        elif isinstance(ev, EarlyExit) and ev.step in steps:
            steps[ev.step].early_exit = ev
        elif isinstance(ev, Verify) and ev.step in steps:
            steps[ev.step].verify = ev
        elif isinstance(ev, Span):
            verdicts.see(ev)
        elif isinstance(ev, Commit):
            _commit_tokens(rec, a, ev, t)
    for sv in steps.values():
        if verdict_outcome(sv) == "hit":
            sv.late_ms = verdicts.late_ms(sv.step)
    return a


def _window_origin(steps: dict[int, StepView], ev: DraftBranch, origin: str, window_branch):
    """A DraftBranch read into its step's view: (where the next window comes from, its rollout)."""
    sv = steps.get(ev.step)
    if ev.status == "serial":
        if sv is None:  # drafted before its step started: the first window
            return "draft", ev
        if sv.verify is None:  # drafted inside its own step (plain SD)
            sv.origin, sv.window_branch = "draft", ev
        elif drafted_in_turn(ev, bool(sv.rollouts) or sv.early_exit is not None):
            sv.in_turn = ev  # the lanes in turn: drafted after the verdict, no race
            return "turn", ev
        else:  # after the verdict: a miss, rolled out serially for the next step
            sv.fallback = ev
            return "fallback", ev
    elif sv is not None:
        sv.rollouts.append(ev)
        if ev.status == "taken":
            return "hit", ev
    return origin, window_branch


def _commit_tokens(rec: RunRecord, a: Analysis, ev: Commit, t: int) -> None:
    """A Commit's tokens into the analysis, each of its kind (`token_kind`)."""
    sv = a.steps.get(ev.step)
    step_origin = sv.origin if sv else "none"
    for j, (tok, source) in enumerate(zip(ev.token_ids, ev.sources)):
        kind = token_kind(source, step_origin, sv.window_late_ms if sv else None)
        i = len(a.tokens)
        text = rec.token_texts[i] if i < len(rec.token_texts) else None
        if text is None:  # a trace without per-token text: the commit's text, once
            text = ev.text if j == 0 else ""
        a.tokens.append(TokenView(tok, text, kind, ev.step, t))
        if sv is not None:
            sv.commit_tokens.append(i)
    if sv is not None:
        sv.commit = ev


def timed_origin(rec: RunRecord, engine_t0_ns: int | None = None) -> int | None:
    """perf_counter_ns where the run's timed part began: the engine's own start when known,
    else its first span, whichever is earlier; None before the first span."""
    starts = [s.start_ns for s in rec.spans]
    first = min(starts) if starts else None
    if engine_t0_ns is not None:
        return engine_t0_ns if first is None else min(engine_t0_ns, first)
    return first


def _commits(rec: RunRecord) -> list[tuple[int, int]]:
    """(arrival t_ns from the run's start, tokens) of each Commit."""
    return [(t, len(e.token_ids)) for e, t in zip(rec.events, rec.times_ns) if isinstance(e, Commit)]


def measured(rec: RunRecord) -> dict:
    """The run's measured figures, the one source of every number the page shows: tokens,
    wall_s, tokens_per_s, prefill_s (start to first commit: the prompt's prefill, plus the
    first window for SD and Mirror-SD), decode_s, decode_tokens, decode_tokens_per_s.
    engine/collect.py's `figures`: Finish's stats when they carry them, else from the event
    times (same rule, engine/stats.split_prefill)."""
    f = rec.finish
    commits = _commits(rec)
    fig = figures(f.stats if f is not None else {}, 0, rec.duration_ns, commits[0] if commits else None,
                  sum(n for _, n in commits))
    return {"tokens": fig["new_tokens"], "elapsed_s": fig["wall_s"],
            **{k: fig[k] for k in FIGURES if k != "new_tokens"}}


def live_stats(rec: RunRecord, now_ns: int | None = None) -> dict:
    """tokens, elapsed_s and tokens_per_s: measured() when finished, else so far."""
    if rec.finish is not None:
        return measured(rec)
    commits = _commits(rec)
    elapsed_ns = now_ns if now_ns is not None else rec.duration_ns
    fig = figures({}, 0, elapsed_ns, commits[0] if commits else None, sum(n for _, n in commits))
    out = {"tokens": fig["new_tokens"], "elapsed_s": fig["wall_s"], "tokens_per_s": fig["tokens_per_s"]}
    if commits:  # the same split as measured(): prefill to the first commit, decode after it
        out.update(prefill_s=fig["prefill_s"], decode_tokens_per_s=fig["decode_tokens_per_s"])
    return out


def against_ar(records: dict, method: str) -> dict | None:
    """`method`'s tokens against AR's (`compare_tokens`), for every place that says whether a
    method wrote AR's tokens: None without both runs finished; {"stopped": True} where either
    was stopped or failed (not compared)."""
    ar, other = records.get("ar"), records.get(method)
    if ar is None or other is None or ar.finish is None or other.finish is None:
        return None
    if not (ar.complete and other.complete):
        return {"stopped": True}
    return compare_tokens(ar.finish.token_ids, other.finish.token_ids)


def compare_tokens(reference: list[int], other: list[int]) -> dict:
    """Position-by-position comparison; a length difference counts as mismatches."""
    n = min(len(reference), len(other))
    diffs = [i for i in range(n) if reference[i] != other[i]]
    extra = abs(len(reference) - len(other))
    first = diffs[0] if diffs else (n if extra else None)
    return {"compared": max(len(reference), len(other)), "mismatches": len(diffs) + extra,
            "first": first, "identical": not diffs and not extra}


def step_marks(rec: RunRecord) -> dict[int, dict[str, float]]:
    """Per step, from the engine's own clock (ms from the run's start): when the target began
    checking its window (`check`, prefill left out), when the early exit's guesses were ready
    (`exit`) and when the verdict was in (`verdict`: the acceptance rule's end, or the end of the
    step's last target span where no rule ran, as in AR)."""
    marks: dict[int, dict[str, float]] = {}
    for ev in rec.events:
        if not isinstance(ev, Span):
            continue
        m = marks.setdefault(ev.step, {})
        a, b = round((ev.start_ns - rec.t0_ns) / 1e6, 2), round((ev.end_ns - rec.t0_ns) / 1e6, 2)
        if ev.lane == "target" and ev.label != "prefill":
            m["check"] = min(m.get("check", a), a)
        if ev.lane == "target":
            m["target_end"] = max(m.get("target_end", b), b)
        if ev.label == "exit_head":
            m["exit"] = b
        if ev.lane == "verify" and ev.label == "accept":
            m["verdict"] = b
    for m in marks.values():
        if "verdict" not in m and "target_end" in m:
            m["verdict"] = m["target_end"]
    return marks
