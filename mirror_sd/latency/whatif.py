"""What if: a recorded run replayed on other hardware. Every number here is a projection.

A run's decode phase is replayed step by step through the latency model of latency_model.py
(the paper's eq. 10, calibrated from spans): the recorded steps keep what happened (how many
decode steps, which Mirror-SD steps hit or missed, the windows and accepted lengths), and a
hardware profile says what each step costs there.

Profiles:
  a  this machine as measured: costs calibrated from the run's own spans (target forward per
     token, a verify forward, draft per drafted token, the lanes' contention) plus the host
     time per step off the critical path, measured per method; SD pays for the tokens each
     window really drafted (adaptive windows vary). Mirror-SD's target lane is taken as it ran beside the
     draft, and its step adds the draft work measured after each verdict (a hit: the taken
     branch's last forwards; a miss: the forward in flight, then the serial fallback), since
     the latency model's mean terms miss when the taken root started early. It should
     reproduce each method's measured decode time; the gap is the replay's error.
  b  this machine with the draft on a device of its own: no shared memory bus (contention 1),
     Mirror-SD's target lane at its alone speed (SD's verify), the draft's forwards before the
     verdict at the speed they ran after it (alone, the target waiting); a hit waits for the
     draft work its earlier verdict leaves (per hit, from the measured work); host time as
     measured. AR and SD are unchanged (they never run two lanes at once).
  c  a heterogeneous accelerator pair (whatif_hardware.py): target on a GPU, draft on an NPU
     or second device, costs from weight bytes over each device's memory bandwidth, the
     latency model's step times (the paper's schedule).

The decode phase starts at the first commit (stats `decode_s`). Replayed decode steps: AR,
every target forward after the prefill; SD, every step after the first; Mirror-SD, the outcome
of every step but the last (step 0's draft work after its verdict, every later step and the
last step's target lane make one full step per outcome): a hit or a miss where the step
overlapped its lanes, IN_TURN where they ran one after the other (the overlap gate's choice
where the lanes share a CPU's cores, or a plain decode). An in-turn step is priced as what it
was where the lanes still share a device, profile (a): the verify alone, then the serial draft
of the next window, both at the costs its own spans measured (an SD step); where the lanes get
devices of their own, (b), (c) and the many-core profile, the step would have overlapped: it
is priced as an expected overlapped step at the profile's hit rate (whatif_hits.py says where
that rate comes from), h * hit + (1 - h) * miss.

Pure Python: no torch, no models; spans may be `events.Span` objects or dicts.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median

from mirror_sd.latency import latency_model as lm
from mirror_sd.latency.step_model import target_k

METHODS = ("ar", "sd", "mirror")
IN_TURN = "in turn"  # a Mirror-SD step whose lanes ran one after the other (gate.py)
# spans only a step with its lanes overlapped has: the split verify forward, the draft lane's
# work beside it, and a miss's serial rollout after the verdict
OVERLAP_LABELS = ("prefix", "exit_head", "suffix", "extend", "branches", "fallback")
PROFILE_NAMES = {
    "a": "this machine, as measured",
    "b": "this machine, draft on a device of its own",
    "c": "accelerator pair (target GPU, draft NPU)",
}


def _get(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _kind(event) -> str:
    return event.get("type", "") if isinstance(event, dict) else type(event).__name__


def base_method(name: str) -> str:
    """'mirror:exit_layer=21' -> 'mirror'."""
    return str(name).split(":", 1)[0]


# ---------------------------------------------------------------------------------------------
# 1) the recorded steps


@dataclass
class RecordedSteps:
    """What one run did in its decode phase, independent of what it cost."""
    method: str
    gamma: int
    outcomes: list  # one per replayed decode step: True hit, False miss, IN_TURN (Mirror-SD); None
    tokens: int  # tokens committed in the decode phase
    decode_s: float | None  # measured decode time (None: the run did not say)
    host_s: float = 0.0  # measured seconds per decode step outside every lane span
    windows: list[int] = field(default_factory=list)  # drafted tokens per verified step
    accepted: list[int] = field(default_factory=list)  # accepted drafts per verified step
    # Mirror-SD: seconds of draft-lane work after each step's verdict, the fallback apart (a hit:
    # the taken branch's last forwards; a miss: the forward in flight before the fallback)
    tail_hit: list[float] = field(default_factory=list)
    tail_miss: list[float] = field(default_factory=list)
    # Mirror-SD, per hit: (draft work before the verdict, after it, the target lane's time from
    # the step's start to the verdict), seconds: what another profile's lane speeds re-time
    hit_work: list[tuple[float, float, float]] = field(default_factory=list)
    # Mirror-SD: per replayed step, the verdict root's rank among the scored roots (-1: not
    # among them; None: scored after the verdict), so another branch budget can be replayed
    ranks: list = field(default_factory=list)
    # SD: drafted tokens that came from a prompt lookup (no model: no draft cost)
    looked_up: int = 0
    # Mirror-SD's exit check (engine/mirror/exit_check.py): steps in turn checked after the run,
    # and how many of them would have hit had the lanes overlapped
    checked: int = 0
    checked_hits: int = 0

    @property
    def steps(self) -> int:
        return len(self.outcomes)

    @property
    def hits(self) -> int:
        return sum(o is True for o in self.outcomes)

    @property
    def misses(self) -> int:
        return sum(o is False for o in self.outcomes)

    @property
    def in_turn(self) -> int:
        return sum(o == IN_TURN for o in self.outcomes)

    @property
    def overlapped(self) -> int:
        """Steps with the lanes overlapped: the ones a hit rate is measured over."""
        return self.hits + self.misses

    def drafted_alpha(self) -> float | None:
        """Per-token acceptance over the steps that drafted (a window of w tokens with A
        accepted tested A + 1 tokens, or w when all were taken): decode-only steps (a priced
        window of 0) say nothing about it. None without per-step accepted lengths."""
        pairs = [(w, a) for w, a in zip(self.windows, self.accepted) if w > 0]
        if not pairs or len(self.accepted) != len(self.windows):
            return None
        taken = sum(a for _, a in pairs)
        tested = sum(a + (1 if a < w else 0) for w, a in pairs)
        return min(taken / tested, 0.999) if tested else None


def _dur(s) -> float:
    return (_get(s, "end_ns") - _get(s, "start_ns")) / 1e9


def _union_s(intervals) -> float:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e9


def _decode_start_ns(method: str, spans) -> int | None:
    """Span time of the first commit: the end of AR's first target forward, or of the first
    step's acceptance rule (SD, Mirror-SD)."""
    if method == "ar":
        first = [s for s in spans if _get(s, "lane") == "target"]
    else:
        first = [s for s in spans if _get(s, "lane") == "verify" and _get(s, "step") == 0]
    return min((_get(s, "end_ns") for s in first), default=None)


def overlapped_steps(spans) -> set:
    """The steps that overlapped their lanes: those with a span only such a step has."""
    return {_get(s, "step") for s in spans if _get(s, "label") in OVERLAP_LABELS}


def mirror_outcomes(method_steps: int, spans, events=None, stats=None) -> list:
    """The outcome of each step but the last, in step order: IN_TURN where the lanes ran one
    after the other (no span of an overlapped step); else a hit (True) or a miss (False), from
    the typed events (a "taken" branch is a hit) when there are any, else from the verdict
    ranks in `stats` (ranked_hits), else from the spans (a "fallback" span is the serial
    rollout after a miss; a miss whose next window was priced empty leaves none)."""
    n = max(0, method_steps - 1)
    overlapped = sorted(s for s in overlapped_steps(spans) if s is not None and 0 <= s < n)
    if events:
        hit_steps = {_get(e, "step") for e in events
                     if _kind(e) == "DraftBranch" and _get(e, "status") == "taken"}
    else:
        fallback = {_get(s, "step") for s in spans if _get(s, "label") == "fallback"}
        by_span = [s not in fallback for s in overlapped]
        hit_steps = {s for s, hit in zip(overlapped, ranked_hits(stats or {}, by_span) or by_span) if hit}
    mine = set(overlapped)
    return [(s in hit_steps) if s in mine else IN_TURN for s in range(n)]


def ranked_hits(stats: dict, by_span: list[bool]) -> list[bool] | None:
    """Hit or miss of each overlapped step from its verdict rank (stats "verdict_ranks", one
    per overlapped step: a hit ranked below the branch budget); a step scored after its
    verdict keeps `by_span`. The budget is the one that gives the run's counted hits (the
    stats keep the counts, not the setting). None where the ranks or the counts do not fit."""
    ranks, hits = list(stats.get("verdict_ranks") or []), stats.get("hits")
    if len(ranks) != len(by_span) or hits is None:
        return None
    for budget in range(1, lm.MAX_BUDGET + 1):
        got = [b if r is None else 0 <= r < budget for r, b in zip(ranks, by_span)]
        if sum(got) == hits:
            return got
    return None


def mirror_tails(outcomes: list, spans) -> tuple[list[float], list[float], list[tuple[float, float, float]]]:
    """Per hit and per miss: the draft lane's work after the step's verdict (the end of its
    acceptance rule), its serial fallback excluded: what the target lane waited for. Per hit
    also (draft work before the verdict, after it, the target lane from the step's first
    target span to the verdict)."""
    verdicts = {_get(s, "step"): _get(s, "end_ns") for s in spans if _get(s, "lane") == "verify"}
    starts: dict = {}
    for s in spans:
        if _get(s, "lane") == "target":
            starts[_get(s, "step")] = min(starts.get(_get(s, "step"), _get(s, "start_ns")), _get(s, "start_ns"))
    hit, miss, work = [], [], []
    for step, outcome in enumerate(outcomes):
        v = verdicts.get(step)
        if v is None or outcome == IN_TURN:
            continue
        mine = [x for x in spans if _get(x, "lane") == "draft" and _get(x, "step") == step
                and _get(x, "label") != "fallback"]
        after = sum(max(0, _get(x, "end_ns") - max(_get(x, "start_ns"), v)) for x in mine) / 1e9
        (hit if outcome else miss).append(after)
        if outcome and step in starts:
            t0 = starts[step]
            before = sum(max(0, min(_get(x, "end_ns"), v) - max(_get(x, "start_ns"), t0)) for x in mine) / 1e9
            work.append((before, after, (v - t0) / 1e9))
    return hit, miss, work


def draft_beside_factor(records) -> float | None:
    """How much slower the draft lane's one-row branch forward ran beside the target (ended
    before the verdict) than alone with the target waiting (started after it): the ratio of
    the two medians over Mirror-SD's runs; None without both."""
    beside, alone = [], []
    for rec in records:
        if base_method(rec["method"]) != "mirror" or rec.get("error"):
            continue
        spans = list(rec.get("spans") or [])
        verdicts = {_get(s, "step"): _get(s, "end_ns") for s in spans if _get(s, "lane") == "verify"}
        for s in spans:
            v = verdicts.get(_get(s, "step"))
            if _get(s, "label") != "branches" or _get(s, "detail") != "1 rows" or v is None:
                continue
            if _get(s, "end_ns") <= v:
                beside.append(_dur(s))
            elif _get(s, "start_ns") >= v:
                alone.append(_dur(s))
    if not beside or not alone:
        return None
    return max(1.0, median(beside) / median(alone))


def _drafted_tokens(span) -> int | None:
    """Tokens a draft span wrote: its detail starts with the count ("4 tokens, serial")."""
    head = (_get(span, "detail") or "").split(" ", 1)[0]
    return int(head) if head.isdigit() else None


def recorded_steps(record: dict, gamma: int) -> RecordedSteps | None:
    """The decode steps of one run. `record`: {method, stats (Finish.stats), spans, and
    optionally events (the typed events, for per-step accepted lengths and hits)}."""
    method = base_method(record["method"])
    if method not in METHODS:
        return None
    stats, spans, events = record.get("stats") or {}, list(record.get("spans") or []), record.get("events")
    if method == "ar":
        outcomes = [None] * max(0, (stats.get("target_forwards") or 0) - 1)
    elif method == "sd":
        outcomes = [None] * max(0, (stats.get("steps") or 0) - 1)
    else:
        outcomes = mirror_outcomes(stats.get("steps") or 0, spans, events, stats)
    decode_s = stats.get("decode_s")
    if decode_s is None and stats.get("prefill_s") is not None and stats.get("wall_s") is not None:
        decode_s = stats["wall_s"] - stats["prefill_s"]
    tokens = stats.get("decode_tokens")
    if tokens is None:
        tokens = max(0, (stats.get("new_tokens") or 0) - (1 if method == "ar" else 0))
    verifies = [e for e in (events or []) if _kind(e) == "Verify" and _get(e, "step", 0) > 0]
    windows = [len(_get(e, "drafted")) for e in verifies]
    if not windows and method != "ar":  # a benchmark record keeps spans and stats, not events
        windows = list(stats.get("window_lengths") or [])[1:]
    if not windows and method == "sd":
        windows = [n for n in (_drafted_tokens(s) for s in spans
                               if _get(s, "label") == "draft" and _get(s, "step", 0) > 0) if n]
    accepted = [int(_get(e, "accepted")) for e in verifies]
    if not verifies and method != "ar":  # a benchmark record: [drafted, accepted] per verify
        verdicts = list(stats.get("window_verdicts") or [])[1:]
        if len(verdicts) == len(windows) and all(int(v[0]) == w for v, w in zip(verdicts, windows)):
            accepted = [int(v[1]) for v in verdicts]
    rec = RecordedSteps(method, gamma, outcomes, int(tokens), decode_s,
                        windows=windows,
                        accepted=accepted,
                        ranks=list(stats.get("verdict_ranks") or []) if method == "mirror" else [])
    if method == "mirror":
        rec.tail_hit, rec.tail_miss, rec.hit_work = mirror_tails(outcomes, spans)
        check = stats.get("exit_check") or {}
        rec.checked, rec.checked_hits = int(check.get("in_turn") or 0), int(check.get("would_hit") or 0)
        if isinstance(check.get("steps"), list):  # the run's last step has no next window to hit with
            rows = [x for x in check["steps"] if int(_get(x, "step", 0)) < len(outcomes)]
            rec.checked, rec.checked_hits = len(rows), sum(1 for x in rows if _get(x, "would_hit"))
    if method == "sd":
        rec.looked_up = sum(_drafted_tokens(s) or 0 for s in spans
                            if _get(s, "label") == "lookup" and _get(s, "step", 0) > 0)
    start = _decode_start_ns(method, spans)
    if decode_s is not None and start is not None and outcomes:
        end = start + int(decode_s * 1e9)
        busy = _union_s((max(a, start), min(b, end)) for a, b in critical_path(method, spans)
                        if b > start and a < end)
        rec.host_s = max(0.0, decode_s - busy) / len(outcomes)
    return rec


def critical_path(method: str, spans) -> list[tuple[int, int]]:
    """The spans a step waits for, as (start_ns, end_ns): all of them for AR and SD (one lane
    at a time); for Mirror-SD the target and verify lanes, and the draft lane's work after each
    verdict (before it, the draft runs beside the target and the step does not wait for it)."""
    if method != "mirror":
        return [(_get(s, "start_ns"), _get(s, "end_ns")) for s in spans]
    verdicts = {_get(s, "step"): _get(s, "end_ns") for s in spans if _get(s, "lane") == "verify"}
    out = []
    for s in spans:
        a, b = _get(s, "start_ns"), _get(s, "end_ns")
        if _get(s, "lane") == "draft":
            a = max(a, verdicts.get(_get(s, "step"), b))
        if b > a:
            out.append((a, b))
    return out


def record_from_run(rec) -> dict:
    """A UI RunRecord (ui.runs) as a record dict: its Finish stats, spans and typed events."""
    finish = rec.finish
    return {"method": rec.method, "stats": dict(finish.stats) if finish else {},
            "spans": rec.spans, "events": rec.events}


# ---------------------------------------------------------------------------------------------
# 2) profiles (a) and (b): this machine


@dataclass
class Profile:
    key: str  # "a" | "b" | "c"
    name: str
    calibration: lm.Calibration
    host_s: dict  # method -> host seconds per decode step (not in any lane)
    notes: list[str] = field(default_factory=list)
    acceptance_from_run: bool = True  # replay the recorded steps (else expected values)
    # this machine: Mirror-SD's costs from its own spans (its lanes as they ran) and the draft
    # work it left at the verdict, seconds per hit / miss (None: the latency model's terms)
    mirror: lm.Calibration | None = None
    tail: tuple[float, float] | None = None
    # SD's windows priced again with this profile's costs (priced_sd_steps): the run's
    # decode-only steps were this machine's choice at its costs, not the profile's
    reprice_windows: bool = False
    # Mirror-SD's steps whose lanes ran in turn, where the lanes still share a device (this
    # machine): the verify and the serial draft alone, as its spans measured (an SD step).
    # None: the lanes get devices of their own here, the step would have overlapped
    in_turn: lm.Calibration | None = None
    # the hit rate of the steps priced as expected overlapped ones (None: the recorded
    # overlapped steps' own), and whether every drafted step is (the rate comes from elsewhere
    # than this run: its few recorded hits and misses aside); `hit_source` says where from
    hit_rate: float | None = None
    reweight: bool = False
    hit_source: object = None  # whatif_hits.HitSource

    def calibration_for(self, method: str) -> lm.Calibration:
        return self.mirror if method == "mirror" and self.mirror is not None else self.calibration


def decode_spans_only(record: dict) -> dict:
    """The record without the spans of its prefill phase (before the first commit): SD's
    first draft also prefills the draft on the prompt, and the first verify forward after a
    prefill runs slower than the decode phase's; Mirror-SD keeps its first step's draft work,
    which runs after the first commit."""
    method = base_method(record["method"])
    if method == "sd":
        keep = [s for s in record["spans"] if _get(s, "step") != 0]
    elif method == "mirror":
        keep = [s for s in record["spans"] if _get(s, "step") != 0 or _get(s, "lane") == "draft"]
    else:
        return record
    return {**record, "spans": keep}


def calibrate_machine(records, *, target_layers: int, gamma: int, exit_layer: int | None = None,
                      branch_budget: int = 2, kappa: int = 8, source: str = "") -> lm.Calibration:
    """latency_model.calibrate over the runs' decode-phase spans (engine methods only)."""
    usable = [decode_spans_only({**r, "method": base_method(r["method"])}) for r in records
              if base_method(r["method"]) in METHODS and not r.get("error")]
    return lm.calibrate(usable, target_layers=target_layers, gamma=gamma, exit_layer=exit_layer,
                        branch_budget=branch_budget, kappa=kappa, source=source)


def host_times(recorded: list[RecordedSteps]) -> dict:
    """Host seconds per decode step per method, pooled over runs (weighted by steps)."""
    out = {}
    for m in METHODS:
        rs = [r for r in recorded if r.method == m and r.steps]
        steps = sum(r.steps for r in rs)
        out[m] = sum(r.host_s * r.steps for r in rs) / steps if steps else 0.0
    return out


def _mean(xs, default=0.0):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else default


def mirror_tail(recorded: list[RecordedSteps]) -> tuple[float, float]:
    """(seconds per hit, per miss) of draft work after the verdict, pooled over runs."""
    return (_mean(x for r in recorded for x in r.tail_hit),
            _mean(x for r in recorded for x in r.tail_miss))


def mirror_as_run(records, pooled: lm.Calibration, **kw) -> lm.Calibration | None:
    """Mirror-SD's costs from its own spans: the target lane as it ran beside the draft (its
    contention inside), the fallback per token; missing terms from `pooled` (a run whose
    priced windows decoded every step verified nothing: its target lane is the pooled one)."""
    mine = [r for r in records if base_method(r["method"]) == "mirror" and not r.get("error")]
    if not mine:
        return None
    cal = calibrate_machine(mine, **kw)
    if cal.t_target_k is None and pooled.t_target_k is None:
        return None
    fill = {k: getattr(pooled, k) for k in ("t_target_1", "t_target_k", "t_fallback_token", "t_draft_token",
                                           "t_extend", "t_branch_1") if getattr(cal, k) is None}
    return replace(cal, notes=[], **fill)


def tail_alone(work: list[tuple[float, float, float]], target_scale: float, draft_factor: float | None,
               measured: float) -> float:
    """Seconds per hit the target lane waits for the draft when each lane runs at its alone
    speed: per hit, the draft's work (before the verdict at 1 / `draft_factor` of the time it
    took beside the target, the rest as measured: it ran alone already) past the target lane's
    time scaled by `target_scale`; the mean over hits (`measured` without per-hit work)."""
    if not work:
        return measured
    f = draft_factor or 1.0
    return _mean(max(0.0, before / f + after - lane * target_scale) for before, after, lane in work)


def machine_profiles(cal: lm.Calibration, host_s: dict, mirror: lm.Calibration | None = None,
                     tail: tuple[float, float] | None = None,
                     hit_work: list[tuple[float, float, float]] | None = None,
                     draft_factor: float | None = None) -> dict[str, Profile]:
    """Profiles (a) and (b) from a calibration of this machine (and Mirror-SD's own, with the
    draft work it left at each verdict, when the runs have one). In (b) both lanes run at
    their alone speed: the target lane as SD's verify measured it, the draft's forwards before
    the verdict `draft_factor` faster (its one-row forwards beside against after the verdict),
    so a hit waits for whatever draft work is left when the (earlier) verdict comes."""
    a_notes = list(cal.notes)
    if mirror is not None and tail is not None:
        a_notes.append(f"Mirror-SD's target lane {mirror.t_target_k * 1e3:.0f} ms as it ran beside the "
                       f"draft; draft work after the verdict {tail[0] * 1e3:.0f} ms per hit, "
                       f"{tail[1] * 1e3:.0f} ms per miss before its fallback")
    a = Profile("a", PROFILE_NAMES["a"], cal, dict(host_s), a_notes, mirror=mirror, tail=tail)
    b_cal = lm.apply_changes(cal, draft_device="separate")
    notes = [f"contention factor {cal.contention:.2f} -> 1: each lane at its measured alone speed"]
    b_mirror, b_tail = None, tail
    if mirror is not None:  # the target lane at its alone speed (SD's verify), never slower
        target_alone_s = (cal.t_target_k if cal.t_target_k and cal.t_target_k < mirror.t_target_k
                          else mirror.t_target_k)
        scale = target_alone_s / mirror.t_target_k
        b_mirror = lm.apply_changes(mirror, target_scale=scale, draft_device="separate")
        if tail is not None:
            b_tail = (tail_alone(hit_work or [], scale, draft_factor, tail[0]), tail[1])
        notes = [f"Mirror-SD's target lane {mirror.t_target_k * 1e3:.0f} -> {target_alone_s * 1e3:.0f} ms "
                 f"(beside the draft -> alone, as SD's verify measured it)"]
        if tail is not None:
            drafted = ("its forwards before the verdict at the speed they ran after it "
                       f"({draft_factor:.2f}x faster)" if draft_factor else
                       "its forwards at the speed they ran beside the target (no alone speed measured)")
            notes.append(f"the draft lane alone too, {drafted}: the earlier verdict leaves more of a hit's "
                         f"branch to draft after it, {tail[0] * 1e3:.0f} -> {b_tail[0] * 1e3:.0f} ms per hit")
    b = Profile("b", PROFILE_NAMES["b"], b_cal, dict(host_s), notes, mirror=b_mirror, tail=b_tail)
    return {"a": a, "b": b}


# what AR and SD cost per step, taken from their own runs' spans
PLAIN_COSTS = ("t_target_1", "t_target_k", "gamma_measured", "head_share", "t_accept", "t_draft_token")


def this_machine(records, *, target_layers: int, gamma: int, exit_layer: int | None = None,
                 branch_budget: int = 2, kappa: int = 8, source: str = "") -> dict[str, Profile]:
    """Profiles (a) and (b) calibrated from `records` (record dicts, see recorded_steps)."""
    kw = dict(target_layers=target_layers, gamma=gamma, exit_layer=exit_layer,
              branch_budget=branch_budget, kappa=kappa)
    recorded = [r for r in (recorded_steps(rec, gamma) for rec in records) if r is not None]
    # AR's and SD's costs from their own runs (Mirror-SD's spans price Mirror-SD alone), so SD
    # projects the same here as in each profile's settings search, which calibrates per variant
    cal = calibrate_machine(records, source=source, **kw)
    plain = [r for r in records if base_method(r["method"]) != "mirror"]
    if any(base_method(r["method"]) == "sd" for r in plain):
        own = calibrate_machine(plain, source=source, **kw)
        cal = replace(cal, **{k: getattr(own, k) for k in PLAIN_COSTS})
    mirror = mirror_as_run(records, cal, **kw)
    profiles = machine_profiles(cal, host_times(recorded), mirror,
                                mirror_tail(recorded) if mirror is not None else None,
                                [w for r in recorded for w in r.hit_work], draft_beside_factor(records))
    turn = in_turn_costs(records, cal)
    if turn is not None:
        profiles["a"].in_turn = turn
        profiles["a"].notes.append(in_turn_note(turn))
    return profiles


def in_turn_costs(records, pooled: lm.Calibration) -> lm.Calibration | None:
    """What a Mirror-SD step with its lanes in turn cost on this machine, from the spans of
    those steps: its verify forward alone (rows from the span's "N tokens"), its plain decodes,
    the serial draft of the next window per drafted token; what they lack from `pooled`
    (SD's verify, AR's decode). None without a Mirror-SD run."""
    verify, rows, decode, draft = [], [], [], []
    mine = [r for r in records if base_method(r["method"]) == "mirror" and not r.get("error")]
    for r in mine:
        spans = decode_spans_only({**r, "method": "mirror"})["spans"]
        overlapped = overlapped_steps(spans)
        for sp in spans:
            if _get(sp, "step") in overlapped:
                continue
            label = _get(sp, "label")
            if _get(sp, "lane") == "target" and label == "verify_forward" and _drafted_tokens(sp):
                verify.append(_dur(sp))
                rows.append(_drafted_tokens(sp))
            elif _get(sp, "lane") == "target" and label == "decode":
                decode.append(_dur(sp))
            elif _get(sp, "lane") == "draft" and label == "draft":
                draft.append(sp)
    if not mine:
        return None
    fill = {}
    if verify:
        fill.update(t_target_k=_mean(verify), gamma_measured=max(1.0, _mean(rows) - 1))
    if decode:
        fill["t_target_1"] = _mean(decode)
    per_token = lm._per_token(draft, pooled.gamma) if draft else None
    fill["t_draft_token"] = per_token if per_token is not None else (
        pooled.t_fallback_token if pooled.t_fallback_token is not None else pooled.t_draft_token)
    return replace(pooled, contention=1.0, draft_device="serial", notes=[],
                   source=f"{len(verify)} verifies, {len(decode)} decodes and {len(draft)} serial drafts "
                          f"of Mirror-SD's steps with the lanes in turn", **fill)


def in_turn_note(turn: lm.Calibration) -> str:
    """Profile (a)'s words for how it priced Mirror-SD's steps with the lanes in turn."""
    parts = [f"verify of {(turn.gamma_measured or turn.gamma) + 1:.1f} rows {turn.t_target_k * 1e3:.0f} ms"
             if turn.t_target_k else None,
             f"draft {turn.t_draft_token * 1e3:.0f} ms per token" if turn.t_draft_token else None]
    return ("Mirror-SD's steps with the lanes in turn priced as what they were, an SD step: "
            + ", ".join(p for p in parts if p) + f" ({turn.source})")


# ---------------------------------------------------------------------------------------------
# 3) projection


def lane_factor(cal: lm.Calibration) -> float:
    return cal.contention if cal.draft_device == "shared" else 1.0


def step_seconds(cal: lm.Calibration, method: str, hit: bool | None = None,
                 tail: tuple[float, float] | None = None) -> float | None:
    """Seconds of one step of `method` under `cal` (a Mirror-SD hit or miss when `hit` is set).
    With `tail` (this machine), a Mirror-SD step is its target lane, the acceptance rule, and
    the draft work measured after the verdict (plus the serial fallback on a miss); without,
    the latency model's step time."""
    if method == "mirror" and hit is not None:
        if tail is None:
            return lm.step_time(replace(cal, hit_rate=1.0 if hit else 0.0), "mirror")
        t = lm.step_terms(cal)
        if t["T_prefix"] is None or (not hit and t["T_fallback"] is None):
            return None
        lane = lane_factor(cal) * (t["T_prefix"] + t["T_ee"] + t["T_suffix"])
        after = tail[0] if hit else tail[1] + t["T_fallback"]
        return lane + cal.t_comm_ee + cal.t_comm_verify + cal.t_accept + after
    return lm.step_time(cal, method)


def project_run(rec: RecordedSteps, profile: Profile, hit_rate: float | None = None,
                alpha: float | None = None) -> dict:
    """Projected decode time of one recorded run under `profile`: the recorded steps when the
    profile keeps the run's window and acceptance, else their expected number (tokens over
    tau, hits at the profile's hit rate). `hit_rate`: the rate of Mirror-SD's steps priced as
    expected overlapped ones when the profile sets none (project() passes the pooled rate of
    the runs' overlapped steps; without either, 0). `alpha`: the per-token acceptance windows
    priced again assume (project() passes SD's and Mirror-SD's pooled: one draft, one policy,
    the engine shares their acceptance), else the run's own drafted steps'."""
    m = rec.method
    cal, host = profile.calibration_for(m), profile.host_s.get(m, 0.0)
    h = profile_hit_rate(profile, rec, hit_rate)
    replay = profile.acceptance_from_run and (m == "ar" or cal.gamma == rec.gamma)
    if replay:
        steps, hits = float(rec.steps), float(rec.hits)
        if m == "mirror" and (profile.reweight or profile.in_turn is None):
            # steps priced at h: every drafted one when reweighted, else the in-turn ones
            priced_at_h = rec.overlapped + rec.in_turn if profile.reweight else rec.in_turn
            hits = (0.0 if profile.reweight else float(rec.hits)) + h * priced_at_h
    else:
        tau = lm.tokens_per_step(cal, m) or 1.0
        steps = rec.tokens / tau
        hits = steps * h if m == "mirror" else 0.0
    priced = (priced_steps(rec, cal, hit=h, alpha=alpha) if m in ("sd", "mirror") and profile.reprice_windows
              else None)
    if priced is not None:
        steps, window, busy, hit = priced
        decode = steps * (busy + host)
        return {"method": m, "profile": profile.key, "projection": True, "replayed": False,
                "steps": steps, "hits": None if hit is None else steps * hit, "tokens": rec.tokens, "decode_s": decode,
                "measured_decode_s": rec.decode_s, "window": window,
                "tokens_per_s": rec.tokens / decode if decode else None}
    if m == "mirror" and replay and len(rec.windows) == rec.steps:
        busy = mirror_replay_seconds(rec, profile, h)
    elif m == "mirror":
        t_hit, t_miss = (step_seconds(cal, m, x, profile.tail) for x in (True, False))
        busy = None if t_hit is None or t_miss is None else hits * t_hit + (steps - hits) * t_miss
    elif m == "sd" and replay and rec.windows:
        busy = sd_replay_seconds(rec, cal, steps)
    else:
        t = step_seconds(cal, m)
        busy = None if t is None else steps * t
    decode = None if busy is None else busy + steps * host
    return {"method": m, "profile": profile.key, "projection": True, "replayed": replay,
            "steps": steps, "hits": hits if m == "mirror" else None, "tokens": rec.tokens,
            "decode_s": decode, "measured_decode_s": rec.decode_s,
            "tokens_per_s": rec.tokens / decode if decode else None}


def profile_hit_rate(profile: Profile, rec: RecordedSteps | None = None, pooled: float | None = None) -> float:
    """The hit rate `profile` prices expected overlapped steps at: its own, else `pooled`, else
    the run's overlapped steps' own, else 0 (no overlapped step anywhere: priced as misses)."""
    for h in (profile.hit_rate, pooled):
        if h is not None:
            return float(h)
    if rec is not None and rec.overlapped:
        return rec.hits / rec.overlapped
    return 0.0


def _sd_costs(cal: lm.Calibration) -> tuple:
    """(the draft's gamma tokens, a verify forward at the run's mean window, a plain decode)
    in seconds under `cal`, each None where unknown: what a replayed SD step is priced at."""
    draft = lm.step_terms(cal)["T_draft(gamma)"]
    fwd = None if cal.t_target_1 is None and cal.t_target_k is None else target_k(
        cal, (cal.gamma_measured or cal.gamma) + 1)
    return draft, fwd, cal.t_target_1 if cal.t_target_1 is not None else fwd


def sd_replay_seconds(rec: RecordedSteps, cal: lm.Calibration, steps: float) -> float | None:
    """SD's recorded steps under `cal`. Windows vary in length (adaptive or priced policy):
    the draft pays for the tokens it really drafted and a verify forward costs the run's mean
    (its cost grows far less than linearly with the rows on these kernels); a step that
    drafted nothing (a priced window of 0) is a plain decode at T_target(1); a run with no
    draft-model span drafted by prompt lookup only, priced at no draft cost."""
    drafted = sum(1 for w in rec.windows if w > 0)
    plain = max(0.0, steps - drafted)
    draft, fwd, one = _sd_costs(cal)
    # no draft-model span at all: every window came from a prompt lookup (no model, ~0.2 ms)
    draft = (draft or 0.0) if drafted else 0.0
    if fwd is None or (plain and one is None):
        return None
    model_tokens = max(0, sum(rec.windows) - rec.looked_up)  # a looked-up window costs no draft forward
    return (model_tokens * draft / cal.gamma + drafted * fwd + plain * one
            + steps * cal.t_accept)


def priced_sd_steps(rec: RecordedSteps, cal: lm.Calibration, longest: int = 12):
    """SD as priced windows would run it under `cal`'s costs: the window k = 0..longest
    (0: a plain decode step) with the most expected tokens per second, at the acceptance the
    run's drafted steps showed. (steps, k, seconds per step), or None when the run recorded
    no per-step acceptance or `cal` lacks a cost."""
    got = priced_steps(rec, cal, longest)
    return None if got is None else got[:3]


def priced_steps(rec: RecordedSteps, cal: lm.Calibration, longest: int = 12, hit: float | None = None,
                 alpha: float | None = None):
    """SD or Mirror-SD as priced windows would run it under `cal`'s costs, at the acceptance
    the run's drafted steps showed: the window k with the most expected tokens per second
    (k = 0..longest, 0 a plain decode; Mirror-SD's drafted steps each a hit at `hit`, else
    the hit rate of the run's overlapped steps, kept whatever k: a stated assumption). (steps,
    k, seconds per step, hit rate or None), or None when the run recorded no per-step
    acceptance or `cal` lacks a cost."""
    alpha = alpha if alpha is not None else rec.drafted_alpha()
    draft = lm.step_terms(cal)["T_draft(gamma)"]
    if alpha is None or draft is None or cal.t_target_1 is None:
        return None
    if rec.method != "mirror":
        hit = None
    elif hit is None:
        hit = rec.hits / rec.overlapped if rec.overlapped else None
        if hit is None:
            return None
    best = None
    for k in range(0, longest + 1):
        tokens = (1.0 - alpha ** (k + 1)) / (1.0 - alpha)  # accepted drafts + the target's own
        if rec.method == "mirror" and k:
            at = replace(cal, gamma=k, gamma_measured=cal.gamma_measured or cal.gamma)
            times = [step_seconds(at, "mirror", h) for h in (True, False)]
            if None in times:
                return None
            seconds = hit * times[0] + (1.0 - hit) * times[1]
        else:
            seconds = (k * draft / cal.gamma + target_k(cal, k + 1) + cal.t_accept) if k else cal.t_target_1
        if best is None or tokens / seconds > best[0]:
            best = (tokens / seconds, k, tokens, seconds)
    _, k, tokens, seconds = best
    return rec.tokens / tokens, k, seconds, hit


def mirror_replay_seconds(rec: RecordedSteps, profile: Profile, hit_rate: float) -> float | None:
    """Mirror-SD's replayed steps under `profile`, each priced at the window it handed over
    (adaptive windows vary: a miss's serial fallback and a hit's rollout cost per drafted
    token). A step that drafted nothing (a priced window of 0) is a plain decode at
    T_target(1); a step with the lanes in turn is an SD step where the profile prices it so
    (profile.in_turn), else an expected overlapped step at `hit_rate`, as is every drafted
    step when the profile reweights; the others as recorded, a hit or a miss."""
    cal, tail = profile.calibration_for("mirror"), profile.tail
    at = replace(cal, gamma_measured=cal.gamma_measured or cal.gamma)
    # a plain decode runs alone: the target's decode as measured alone (profile (a): Mirror-SD's
    # own decodes), never the target lane's cost beside the draft
    one = (profile.in_turn or profile.calibration).t_target_1
    cost: dict = {}
    total = 0.0
    for outcome, window in zip(rec.outcomes, rec.windows):
        if window == 0:
            key = ("decode", 0)
        elif outcome == IN_TURN and profile.in_turn is not None:
            key = ("turn", window)
        elif outcome == IN_TURN or profile.reweight:
            key = ("expected", window)
        else:
            key = (bool(outcome), window)
        if key not in cost:
            if key[0] == "decode":
                cost[key] = None if one is None else one + cal.t_accept
            elif key[0] == "turn":
                cost[key] = in_turn_seconds(profile.in_turn, window)
            elif key[0] == "expected":
                hit, miss = (step_seconds(replace(at, gamma=window), "mirror", x, tail) for x in (True, False))
                # an expected hit costs at most a miss: the taken branch's work after the verdict
                # is at most a serial rollout of the window (a run's few recorded hits can carry
                # the draft's catch-up after decoded steps in their mean tail)
                cost[key] = (None if hit is None or miss is None
                             else hit_rate * min(hit, miss) + (1.0 - hit_rate) * miss)
            else:
                cost[key] = step_seconds(replace(at, gamma=window), "mirror", key[0], tail)
        if cost[key] is None:
            return None
        total += cost[key]
    return total


def in_turn_seconds(turn: lm.Calibration, window: int) -> float | None:
    """One step with the lanes in turn: the verify of `window` + 1 rows alone, the acceptance
    rule, then the serial draft of the next window (`window` tokens), each lane alone."""
    fwd = target_k(turn, window + 1)
    if fwd is None or turn.t_draft_token is None:
        return None
    return fwd + turn.t_accept + window * turn.t_draft_token


def at_budget(rec: RecordedSteps, budget: int) -> RecordedSteps | None:
    """Mirror-SD's recorded steps as another branch budget would have had them: a step hits
    when its verdict root ranked below `budget` among the scored roots (a root rolled out is
    counted as ready in time; the profile prices the time). A step scored after its verdict
    keeps its outcome; a step with the lanes in turn scored no roots (its ranks are those of
    the overlapped steps, in order). None when the run recorded no rank per overlapped step."""
    overlapped = [i for i, o in enumerate(rec.outcomes) if o is True or o is False]
    if rec.method != "mirror" or len(rec.ranks) != len(overlapped):
        return None
    outcomes = list(rec.outcomes)
    for i, r in zip(overlapped, rec.ranks):
        if r is not None:
            outcomes[i] = 0 <= r < budget
    return replace(rec, outcomes=outcomes)


def shared_alpha(recorded: list[RecordedSteps]) -> float | None:
    """Per-token acceptance over SD's and Mirror-SD's drafted steps together (drafted_alpha)."""
    both = [r for r in recorded if r.method in ("sd", "mirror") and len(r.accepted) == len(r.windows)]
    if not both:
        return None
    return RecordedSteps("sd", 0, [], 0, None, windows=[w for r in both for w in r.windows],
                         accepted=[a for r in both for a in r.accepted]).drafted_alpha()


def project(recorded: list[RecordedSteps], profile: Profile, alpha: float | None = None) -> dict:
    """{method: pooled projection over runs, with speedup over AR}: decode tokens/s ratios.
    `alpha`: the per-token acceptance priced windows assume, where the caller pools more runs
    than `recorded` (else SD's and Mirror-SD's drafted steps in `recorded`, `shared_alpha`)."""
    out = {}
    mirror = [r for r in recorded if r.method == "mirror"]
    overlapped = sum(r.overlapped for r in mirror)
    pooled = sum(r.hits for r in mirror) / overlapped if overlapped else None
    shared = alpha if alpha is not None else shared_alpha(recorded)
    for m in METHODS:
        parts = [project_run(r, profile, pooled, shared) for r in recorded if r.method == m]
        if not parts or any(p["decode_s"] is None for p in parts):
            continue
        decode = sum(p["decode_s"] for p in parts)
        measured = [p["measured_decode_s"] for p in parts]
        tokens = sum(p["tokens"] for p in parts)
        out[m] = {"method": m, "profile": profile.key, "projection": True,
                  "replayed": all(p["replayed"] for p in parts),
                  "steps": sum(p["steps"] for p in parts), "tokens": tokens, "decode_s": decode,
                  "tokens_per_s": tokens / decode if decode else None,
                  "measured_decode_s": None if None in measured else sum(measured),
                  # SD's windows as the profile priced them (priced_sd_steps), one per run
                  "windows": sorted({p["window"] for p in parts if p.get("window") is not None})}
        if m == "mirror":  # the rate its expected overlapped steps were priced at
            out[m]["hit_rate"] = profile_hit_rate(profile, None, pooled)
    ar = out.get("ar")
    for row in out.values():
        row["speedup"] = (row["tokens_per_s"] / ar["tokens_per_s"]
                          if ar and ar["tokens_per_s"] and row["tokens_per_s"] else None)
        me = row["measured_decode_s"]
        row["ratio"] = row["decode_s"] / me if me else None  # projection / measured
    return out


def measured_speedups(recorded: list[RecordedSteps]) -> dict:
    """Measured decode tokens/s per method over AR's (the numbers the projection faces)."""
    tps = {}
    for m in METHODS:
        rs = [r for r in recorded if r.method == m and r.decode_s]
        if rs:
            tps[m] = sum(r.tokens for r in rs) / sum(r.decode_s for r in rs)
    return {m: v / tps["ar"] for m, v in tps.items()} if tps.get("ar") else {}


# ---------------------------------------------------------------------------------------------
# 4) the projected per-step timeline


def step_bars(cal: lm.Calibration, method: str, hit: bool | None, host: float = 0.0,
              tail: tuple[float, float] | None = None):
    """Bars [(lane, label, start_s, end_s)] of one projected step, and its duration; the
    duration equals step_seconds(...) + host (the model's step time, laid out on lanes)."""
    t = lm.step_terms(cal)
    bars = []
    if method == "ar":
        bars.append(("target", "decode", 0.0, t["T_AR"]))
        end = t["T_AR"]
    elif method == "sd":
        draft, fwd = t["T_draft(gamma)"], t["T_target(gamma+1)"]
        bars += [("draft", "draft", 0.0, draft), ("target", "verify_forward", draft, draft + fwd),
                 ("verify", "accept", draft + fwd, draft + fwd + cal.t_accept)]
        end = draft + fwd + cal.t_accept
    else:
        c = lane_factor(cal)
        p, ee, s = c * t["T_prefix"], c * t["T_ee"], c * t["T_suffix"]
        comm_ee = cal.t_comm_ee
        total = step_seconds(cal, "mirror", hit, tail)
        fallback = t["T_fallback"] if not hit else None
        bars += [("target", "prefix", 0.0, p), ("target", "exit_head", p, p + ee)]
        if comm_ee:
            bars.append(("transfer", "early exit -> draft", p + ee, p + ee + comm_ee))
        bars.append(("target", "suffix", p + ee, p + ee + s))
        verdict = p + ee + s
        bars.append(("verify", "accept", verdict, verdict + cal.t_accept))
        verdict += cal.t_accept
        if cal.t_comm_verify:
            bars.append(("transfer", "verdict -> draft", verdict, verdict + cal.t_comm_verify))
        draft_start = 0.0 if cal.schedule == "engine" else p + ee + comm_ee
        if cal.draft_device == "serial":
            draft_start = verdict
        if hit:  # the rollouts run beside the target lane; what is left runs after the verdict
            draft_end = draft_start + c * t["T_rollouts"]
            if (cal.schedule == "engine" or tail is not None) and total > verdict + 1e-12:
                draft_end = total
            bars.append(("draft", "branches", draft_start, min(total, max(draft_start, draft_end))))
        else:
            bars.append(("draft", "branches", draft_start, max(draft_start, verdict)))
            bars.append(("draft", "fallback", total - fallback, total))
        end = total
    if host:
        bars.append(("host", "host", end, end + host))
    return [b for b in bars if b[3] > b[2]], end + host


def in_turn_bars(turn: lm.Calibration, host: float = 0.0):
    """Bars of one step with the lanes in turn (the verify alone, then the serial draft of the
    next window), and its duration: in_turn_seconds at the window setting, plus `host`."""
    g = turn.gamma
    fwd, accept, draft = target_k(turn, g + 1), turn.t_accept, g * (turn.t_draft_token or 0.0)
    bars = [("target", "verify_forward", 0.0, fwd), ("verify", "accept", fwd, fwd + accept),
            ("draft", "draft", fwd + accept, fwd + accept + draft)]
    end = fwd + accept + draft
    if host:
        bars.append(("host", "host", end, end + host))
    return [b for b in bars if b[3] > b[2]], end + host


def sd_step_bars(cal: lm.Calibration, window: int, model_share: float = 1.0, host: float = 0.0):
    """Bars of one replayed SD step of `window` drafted tokens, priced as `sd_replay_seconds`
    prices it (a window of none: a plain target forward for one token; else the draft pays for
    its tokens, `model_share` of them from the draft model, the rest looked up, and the verify
    forward costs the run's mean), and its duration; None where a cost is unknown."""
    draft, fwd, one = _sd_costs(cal)
    if window == 0:
        if one is None:
            return None
        bars, end = [("target", "decode", 0.0, one)], one
    else:
        if draft is None or fwd is None:
            return None
        d = window * model_share * draft / cal.gamma
        bars, end = [("draft", "draft", 0.0, d), ("target", "verify_forward", d, d + fwd)], d + fwd
    bars.append(("verify", "accept", end, end + cal.t_accept))
    end += cal.t_accept
    if host:
        bars.append(("host", "host", end, end + host))
    return [b for b in bars if b[3] > b[2]], end + host


def projected_timeline(rec: RecordedSteps, profile: Profile, max_steps: int = 12) -> dict:
    """The first `max_steps` replayed decode steps laid end to end: {bars, end_s, steps}. SD's
    steps at their recorded windows (`sd_step_bars`, as its projected decode time prices them).
    A Mirror-SD step with the lanes in turn is drawn as it ran where the profile prices it so,
    else as the outcome the profile's hit rate makes likelier (its time is the expected one's
    in the projected decode time)."""
    cal, host = profile.calibration_for(rec.method), profile.host_s.get(rec.method, 0.0)
    likely = profile_hit_rate(profile, rec) >= 0.5
    total = sum(rec.windows)
    share = max(0.0, total - rec.looked_up) / total if total else 1.0
    bars, t0 = [], 0.0
    for i, outcome in enumerate(rec.outcomes[:max_steps]):
        replayed = (sd_step_bars(cal, rec.windows[i], share, host)
                    if rec.method == "sd" and len(rec.windows) == rec.steps else None)
        if replayed is not None:
            step, dur = replayed
        elif outcome == IN_TURN and profile.in_turn is not None:
            step, dur = in_turn_bars(profile.in_turn, host)
        else:
            step, dur = step_bars(cal, rec.method, likely if outcome == IN_TURN else outcome, host,
                                  profile.tail)
        bars += [(lane, label, t0 + a, t0 + b, i) for lane, label, a, b in step]
        t0 += dur
    return {"bars": bars, "end_s": t0, "steps": min(max_steps, rec.steps), "projection": True}


def measured_timeline(record: dict, max_steps: int = 12) -> dict:
    """The same steps as measured: the run's spans from the first commit on, in seconds."""
    method = base_method(record["method"])
    spans = list(record.get("spans") or [])
    start = _decode_start_ns(method, spans)
    rec = recorded_steps(record, 0)
    if start is None or rec is None:
        return {"bars": [], "end_s": 0.0, "steps": 0}
    first = 1 if method in ("ar", "sd") else 0  # Mirror-SD: step 0's draft work after its verdict
    keep = [s for s in spans if _get(s, "end_ns") > start and first <= _get(s, "step", 0) < first + max_steps]
    bars = [(_get(s, "lane"), _get(s, "label"), (max(_get(s, "start_ns"), start) - start) / 1e9,
             (_get(s, "end_ns") - start) / 1e9, _get(s, "step", 0)) for s in keep]
    end = max((b[3] for b in bars), default=0.0)
    return {"bars": bars, "end_s": end, "steps": min(max_steps, rec.steps)}
