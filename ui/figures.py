"""Every figure the results cards and the verdict show, from the run's trace alone (pure).

One set of definitions, the engine's (mirror_sd/engine/stats.py), the same for every method:
- time to first token: from the run's start (the prompt goes in) to its first committed tokens.
  SD and Mirror-SD draft and verify their first window inside it, both the same way;
- decode speed: the tokens committed after that first commit, over the time after it;
- end to end: all tokens over the run's wall time.
The cards add, per method: verify steps and tokens per step (a ratio of two totals), window
lengths (min / median / max), rejections, hits and misses (as the engine counts them) and the
draft's time after the first token, exposed (the target waited) or hidden (beside it).
Every figure is a total, a ratio of totals, or says it is a median.

`repeat_summary` folds several interleaved runs of each method into median and range.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from statistics import median

from mirror_sd.latency.whatif_costs import core_split
from mirror_sd.engine.events import Verify
from mirror_sd.engine.registry import baseline, having

from .runs import RunRecord, against_ar, analyse, exit_check, label, measured, variant_of, verdict_outcome
from .why import as_sd_count, breakdown, contention, costs, ran_as_sd, steps_at_once, steps_undrafted


@dataclass
class Card:
    method: str
    tokens: int
    wall_s: float
    ttft_s: float | None  # time to first token
    decode_s: float | None
    decode_tokens: int
    decode_tps: float | None  # tokens after the first commit / time after it
    e2e_tps: float | None  # all tokens / wall time
    verify_steps: int
    rejections: int  # verify steps where the target rejected a drafted token
    windows: tuple[int, int, int] | None  # drafted tokens per window: min, median, max
    hits: int | None  # Mirror-SD: the verdict matched a prepared branch
    misses: int | None  # Mirror-SD: no prepared branch matched; the draft wrote the next window
    draft_exposed_s: float | None  # after the first token: the draft busy, the target waiting
    draft_hidden_s: float | None  # after the first token: the draft busy beside the target
    complete: bool
    decode_speedup: float | None = None  # over AR's decode speed
    e2e_speedup: float | None = None  # over AR's end-to-end speed
    in_turn: int = 0  # Mirror-SD: steps whose lanes ran one after the other (neither hit nor miss)
    late: int = 0  # Mirror-SD: of the hits, those whose branch was ready after the verdict (runs.late_ms)
    would_hit: tuple[int, int] | None = None  # exit check after the run: (would have hit, steps checked)
    undrafted: int = 0  # verify steps whose window was empty: a plain target forward for one token
    turns: dict | None = None  # Mirror-SD: `turn_check`, the counts every place states

    @property
    def tokens_per_step(self) -> float | None:
        return self.tokens / self.verify_steps if self.verify_steps else None

    def to_dict(self) -> dict:
        return dict(asdict(self), tokens_per_step=self.tokens_per_step)


def card(rec: RunRecord) -> Card | None:
    """The card of one finished run (None before it finishes)."""
    if rec.finish is None:
        return None
    m, stats = measured(rec), rec.finish.stats
    verifies = [e for e in rec.events if isinstance(e, Verify)]
    lengths = list(stats.get("window_lengths") or [len(v.drafted) for v in verifies])
    windows = (min(lengths), int(median(lengths)) if len(lengths) % 2 else median(lengths),
               max(lengths)) if lengths else None
    parts = breakdown(rec) if rec.spans else None
    views = analyse(rec).steps.values()
    in_turn = sum(verdict_outcome(sv) == "turn" for sv in views)
    # Mirror-SD always says its hits and misses, 0 / 0 when every step ran its lanes in turn
    has_branches = "hits" in stats and (stats.get("hits") or stats.get("fallbacks") or in_turn
                                        or stats.get("hit_rate") is not None
                                        or variant_of(rec.method)[0] in having(early_exit=True))
    return Card(
        method=rec.method, tokens=int(m["tokens"]), wall_s=float(m["wall_s"]),
        ttft_s=m.get("prefill_s"), decode_s=m.get("decode_s"),
        decode_tokens=int(m.get("decode_tokens") or 0), decode_tps=m.get("decode_tokens_per_s"),
        e2e_tps=m["tokens_per_s"] if m["wall_s"] else None,
        verify_steps=len(verifies), rejections=sum(v.kind == "correction" for v in verifies),
        windows=windows,
        hits=int(stats.get("hits") or 0) if has_branches else None,
        misses=int(stats.get("fallbacks") or 0) if has_branches else None,
        draft_exposed_s=parts["draft_exposed"] if parts and lengths else None,
        draft_hidden_s=parts["draft_hidden"] if parts and lengths else None,
        complete=rec.complete, in_turn=in_turn, late=sum(sv.late_ms is not None for sv in views),
        undrafted=steps_undrafted(rec),
        turns=(t := turn_check(rec)),
        would_hit=(t["would_hit"], t["checked"]) if t else None)


def turn_check(rec: RunRecord) -> dict | None:
    """Mirror-SD's steps whose lanes ran in turn and the exit check of them, counted once for
    every place that states them (the verdict's lanes line, the card's hits row, Statistics):
    {"in_turn": steps whose next window was drafted after the verdict, the lanes in turn;
    "checked": of them, those the exit check read, "would_hit": of those, the ones that would
    have hit; "undrafted": in turn but drafted nothing (nothing to check), "unread": in turn,
    drafted, not read (past the check's row limit); "hits", "misses": the overlapped steps'
    outcomes; "rate": (hits + would_hit) / (hits + misses + checked)}. None without a check."""
    check = exit_check(rec)
    if not check:
        return None
    a = analyse(rec)
    turn = [s for s, sv in a.steps.items() if verdict_outcome(sv) == "turn"]
    in_turn = set(turn)
    # the check also reads a step no next window followed (the run's last): counted with those
    rows = [x for x in check.get("steps", []) if int(x["step"]) in in_turn]
    read = {int(x["step"]) for x in rows}
    undrafted = sum(1 for s in turn if s not in read and a.steps[s].verify is not None
                    and not a.steps[s].verify.drafted)
    stats = rec.finish.stats if rec.finish else {}
    hits, misses = int(stats.get("hits") or 0), int(stats.get("fallbacks") or 0)
    checked, would = len(rows), sum(1 for x in rows if x.get("would_hit"))
    steps = hits + misses + checked
    # neither at once nor in turn: no next window followed (the run's last step, or one before an empty window)
    at_once = steps_at_once(rec)
    no_next = [s for s, sv in a.steps.items() if sv.verify is not None and s not in at_once
               and verdict_outcome(sv) is None]
    return {"in_turn": len(turn), "checked": checked, "would_hit": would, "undrafted": undrafted,
            "no_next": len(no_next), "only_last": no_next == [max(a.steps)],
            "unread": max(0, len(turn) - checked - undrafted), "hits": hits, "misses": misses,
            "rate": (hits + would) / steps if steps else None}


def checked_words(t: dict, apart: bool = False) -> str:
    """The exit check's count in the one form every place uses: 'of the 22 in-turn steps that
    drafted a window, 20 would have hit, lanes overlapped', then why the steps in turn not read
    differ; `apart`: where the steps whose lanes did not work at once are counted beside it,
    also those not in turn either (no next window followed)."""
    n = t["no_next"] if apart else 0
    why = ([f"{t['undrafted']} more verified no drafted token: nothing to check"] if t["undrafted"] else []) + \
          ([f"{t['unread']} more past the check's row limit"] if t["unread"] else []) + \
          (["the run's last step has no next window" if t["only_last"] else
            f"{n} more were followed by no drafted window (the window's pricing chose to draft none, "
            f"or the run ended)"] if n else [])
    steps = "step that" if t["checked"] == 1 else "steps that"
    return (f"of the {t['checked']} in-turn {steps} drafted a window, {t['would_hit']} would have hit, "
            f"lanes overlapped" + (f" ({'; '.join(why)})" if why else ""))


def cards(records: dict[str, RunRecord]) -> dict[str, Card]:
    """Cards of the finished runs, in the records' order, with speedups over AR when it ran."""
    out = {m: c for m, rec in records.items() if rec is not None and (c := card(rec)) is not None}
    base = out.get(baseline())
    for c in out.values():
        if base is not None:
            c.decode_speedup = _ratio(c.decode_tps, base.decode_tps)
            c.e2e_speedup = _ratio(c.e2e_tps, base.e2e_tps)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def machine() -> str:
    """The machine the app runs on, in words (quoted beside every speed)."""
    return f"{os.cpu_count() or '?'} CPU cores"


def machine_words(meta: dict) -> str:
    """'2 CPU cores, no GPU' for the machine a run was measured on (a trace keeps it)."""
    where = meta.get("machine") or machine()
    devices = {str(meta.get(k, "")).split(":")[0] for k in ("target_device", "draft_device")}
    gpu = devices & {"cuda", "mps"}
    return f"{where}, {'GPU ' + ', '.join(sorted(gpu)) if gpu else 'no GPU'}"


def output_words(records: dict[str, RunRecord]) -> str:
    """Whether each method wrote AR's tokens, in one line: 'Every method wrote exactly AR's
    58 tokens.', or which differ and where (a near-tie in fp32 can flip a greedy token: counted,
    never hidden), or which were not compared (a run stopped or failed); '' without AR."""
    ar = records.get("ar")
    if ar is None or ar.finish is None:
        return ""
    same, differ, skipped = [], [], []
    for m in records:
        cmp = None if m == "ar" else against_ar(records, m)
        if cmp is None:
            continue
        if cmp.get("stopped"):
            skipped.append(m)
            continue
        if cmp["identical"]:
            same.append(m)
        else:
            differ.append(f"{label(m)} differs from AR in {cmp['mismatches']} of {cmp['compared']} tokens "
                          f"(first at token {cmp['first']}: a near-tie, see the checks under the bars)")
    n = len(ar.finish.token_ids)
    out = []
    if same and not differ and not skipped:
        out.append(f"Every method wrote exactly AR's {n} tokens: speculation changed the speed, not the text.")
    elif same:
        out.append(f"{names_of(same)} wrote exactly AR's {n} tokens.")
    out += [f"{d}." for d in differ]
    if skipped:
        out.append(f"{names_of(skipped)}: not compared with AR (a run was stopped or failed).")
    return " ".join(out)


def one_device(meta: dict) -> bool:
    """Both models on the same device (the lanes share it)."""
    t, d = str(meta.get("target_device", "")), str(meta.get("draft_device", ""))
    return bool(t) and t == d


@dataclass
class Spread:
    median: float
    low: float
    high: float
    n: int
    # each round's value in the rounds' order (None where the method did not finish that round),
    # so two methods can be compared round by round (`rounds_ahead`)
    values: tuple = ()

    @property
    def includes_one(self) -> bool:
        return self.low <= 1.0 <= self.high


def spread(values: list[float | None]) -> Spread | None:
    vals = [v for v in values if v is not None]
    return Spread(median(vals), min(vals), max(vals), len(vals), tuple(values)) if vals else None


def repeat_summary(rounds: list[dict[str, Card]]) -> dict[str, dict[str, Spread]]:
    """Per method, median and range over the rounds of: time to first token, decode and end-to-end
    speed, and both speedups over AR (each round's speedup against that round's AR). The page's
    ratios divide the median speeds instead (`speeds`), so that they match the speeds shown."""
    keys = ("ttft_s", "decode_tps", "e2e_tps", "decode_speedup", "e2e_speedup")
    methods = [m for m in rounds[0]] if rounds else []
    out = {}
    for m in methods:
        per = {k: spread([getattr(r[m], k) if m in r else None for r in rounds]) for k in keys}
        out[m] = {k: v for k, v in per.items() if v is not None}
    return out



def shown_run(spreads: dict | None) -> str:
    """How the page names the run its per-run figures come from."""
    return "the runs shown" if runs_of(spreads) > 1 else "this run"

def median_runs(rounds: list[dict[str, Card]]) -> dict[str, int]:
    """{method: index of its median run by end-to-end speed} over the interleaved rounds: the
    runs the page shows in full and the race replays, one per method, so that the race's
    finishing order is the medians' and each pane is its method's middle run (rounds in a
    method's own order; among equal speeds, the later round; an even count: the slower middle)."""
    out = {}
    for m in (rounds[0] if rounds else {}):
        have = [(r[m].e2e_tps, i) for i, r in enumerate(rounds) if m in r and r[m].e2e_tps]
        if have:
            out[m] = sorted(have)[(len(have) - 1) // 2][1]
    return out

# ---- the verdict: who won, by how much, the one reason ------------------------------------

def verify_slowdown(records: dict[str, RunRecord]) -> dict | None:
    """Mirror-SD's verify forward beside its draft against SD's alone, at the window length
    both verified most often (a verify's cost grows with its tokens): medians over those
    steps, the same figure the statistics fold shows (why.costs)."""
    c = costs(records)
    k = contention(c).get("verify")
    if not k:
        return None
    alone, beside = c["verify_alone_all"], c["verify_beside_all"]
    # only steps whose draft really worked beside the target are in the comparison (why.costs)
    return {"beside_s": c["verify_beside"], "alone_s": c["verify_alone"], "factor": k, "at_once": len(beside),
            "method": c["beside_method"],
            "tokens": c["verify_window"] + 1, "alone_all": alone, "beside_all": beside,
            "overlap": alone[0] <= beside[-1] and beside[0] <= alone[-1]}


def winner(c: dict[str, Card], spreads: dict | None = None) -> str | None:
    """The method with the best end-to-end speed (the median over interleaved runs, when
    there were several)."""
    sp = speeds(c, spreads)
    timed = {m: sp[m][0] for m, x in c.items() if sp[m][0] and x.complete}
    return max(timed, key=timed.get) if timed else None


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def verdict(c: dict[str, Card], records: dict[str, RunRecord], meta: dict,
            spreads: dict | None = None) -> str:
    """A few plain sentences from the run: who won, by how much, decode, the reason."""
    head, reason = verdict_parts(c, records, meta, spreads)
    sub = verdict_sub(c, meta, spreads)
    return " ".join(x for x in (head, sub) if x) + reason.replace(ITEM, " ")


# end-to-end speeds closer than this share of the faster one are called level, not a win: one
# run's noise on a busy CPU is of that order (the "3, interleaved" runs give the range)
LEVEL = 0.03
# from a single run no rounds can be compared, and a whole run here can be 10% or more off the
# next one of the same method: within this share of the faster, one run calls no winner
ONE_RUN = 0.10


def e2e_ranges(spreads: dict | None) -> dict:
    """Each method's end-to-end speed over the interleaved runs (a Spread), where there were several."""
    return {m: s["e2e_tps"] for m, s in (spreads or {}).items() if "e2e_tps" in s and s["e2e_tps"].n > 1}


def rounds_ahead(spreads: dict | None, a: str, b: str) -> tuple[int, int] | None:
    """(the rounds in which `a` ran faster than `b` end to end, the rounds both finished): the
    interleaved runs compared round by round, so a round the whole machine ran slow counts
    against both alike (None without per-round speeds for both)."""
    ra, rb = (e2e_ranges(spreads).get(m) for m in (a, b))
    if ra is None or rb is None or not ra.values or len(ra.values) != len(rb.values):
        return None
    both = [(x, y) for x, y in zip(ra.values, rb.values) if x is not None and y is not None]
    return (sum(x > y for x, y in both), len(both)) if len(both) > 1 else None


def told_apart(spreads: dict | None, a: str, b: str) -> bool:
    """Whether the interleaved runs show `a` faster than `b`: faster in every round both finished,
    and its median at least LEVEL (about one run's noise here) above (without per-round speeds:
    every run of `a` faster than every run of `b`)."""
    got = rounds_ahead(spreads, a, b)
    ra, rb = (e2e_ranges(spreads).get(m) for m in (a, b))
    if got is not None:
        return got[0] == got[1] and ra.median >= rb.median * (1 + LEVEL)
    return ra is not None and rb is not None and ra.low > rb.high


def ahead_by_little(spreads: dict | None, a: str, b: str) -> bool:
    """Whether `a` was faster than `b` in every round, yet not told apart from it: its median less
    than LEVEL above."""
    got = rounds_ahead(spreads, a, b)
    return got is not None and got[0] == got[1] and not told_apart(spreads, a, b)


def ahead_words(spreads: dict | None, a: str, b: str) -> str:
    """'SD was faster than AR in 2 of the 3 rounds' ('' without per-round speeds)."""
    got = rounds_ahead(spreads, a, b)
    if got is None:
        return ""
    k, n = got
    small = f", but by less than {LEVEL:.0%} (medians)" if ahead_by_little(spreads, a, b) else ""
    return (f"{label(a)} was faster than {label(b)} in {'all' if k == n else k} of the {n} rounds{small}" if k else
            f"{label(a)} was faster than {label(b)} in none of the {n} rounds")


def level_with(c: dict[str, Card], best: str | None, spreads: dict | None = None) -> list[str]:
    """The methods the run cannot tell from the winner, the winner first ([] when the winner is
    clear): over several interleaved runs, those the winner did not beat in every round
    (`told_apart`); from one run, those within ONE_RUN of its end-to-end speed (about one run's
    noise here)."""
    if best is None or not c[best].e2e_tps:
        return []
    ranges = e2e_ranges(spreads)
    if best in ranges:
        near = [m for m in c if m != best and m in ranges and not told_apart(spreads, best, m)]
        # and every method whose median is at least a tied one's: a method with the higher median
        # never reads "slower than the fastest" beside one with a lower median that ties
        floor = min((ranges[m].median for m in near), default=None)
        near += [m for m in c if m != best and m not in near and m in ranges and floor is not None
                 and ranges[m].median >= floor]
        near = [m for m in c if m in near]  # in the cards' order
    else:
        near = [m for m, x in c.items() if m != best and x.e2e_tps and x.complete
                and x.e2e_tps >= c[best].e2e_tps * (1 - ONE_RUN)]
    return [best] + near if near else []


def speeds(c: dict[str, Card], spreads: dict | None = None) -> dict[str, tuple[float | None, float | None, float | None]]:
    """Per method (end-to-end tok/s, end to end over AR, decode over AR): the medians of the
    speeds over the interleaved runs when there were several, else this run's; each ratio is
    that speed divided by AR's same figure, so a ratio always equals the two speeds shown
    (the median of per-round ratios can differ from it)."""
    def pick(m: str, key: str, own):
        s = (spreads or {}).get(m, {})
        return s[key].median if key in s and s[key].n > 1 else own

    tps = {m: (pick(m, "e2e_tps", x.e2e_tps), pick(m, "decode_tps", x.decode_tps)) for m, x in c.items()}
    base = tps.get(baseline())
    return {m: (e2e, _ratio(e2e, base[0]) if base else None, _ratio(dec, base[1]) if base else None)
            for m, (e2e, dec) in tps.items()}


def _ratio_list(c: dict[str, Card], sp: dict, key: int = 1) -> str:
    """'SD 1.11× AR, Mirror-SD 0.96× AR': each method's ratio over AR, end to end (key 1, the
    tiles' and the cards' figures) or in decode (key 2)."""
    ar = baseline()
    return ", ".join(f"{label(m)} {_x(sp[m][key])} AR" for m in c if m != ar and sp[m][key] is not None)


def names_of(methods: list[str]) -> str:
    """'SD and Mirror-SD', 'AR, SD and Mirror-SD'."""
    names = [label(m) for m in methods]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _told(methods: list[str], apart: str = " apart") -> str:
    """'SD and Mirror-SD apart' (`apart` after two); from three on, the first against each of
    the rest: 'Mirror-SD from SD or AR' (the runs compare each with the first, not the rest
    with each other)."""
    if len(methods) < 3:
        return f"{names_of(methods)}{apart}"
    rest = [label(m) for m in methods[1:]]
    return f"{label(methods[0])} from {', '.join(rest[:-1])} or {rest[-1]}"


def rounds_said(spreads: dict | None, names: list[str]) -> list[str]:
    """Why the runs cannot tell names[1:] from names[0], one clause each: the rounds the first
    won ('SD was faster than AR in 2 of the 3 rounds'), or, for a method the first beat in every
    round that ties only because its median is at least a tied one's (`level_with`), that ('' for a
    method without per-round speeds)."""
    first, rest = names[0], names[1:]
    by_rounds = [m for m in rest if not told_apart(spreads, first, m)]
    ranges = e2e_ranges(spreads)
    floor = min((m for m in by_rounds if m in ranges), key=lambda m: ranges[m].median, default=None)
    out = []
    for m in rest:
        if m in by_rounds or floor is None or m not in ranges:
            out.append(ahead_words(spreads, first, m))
        else:
            out.append(f"{label(m)}'s median is above {label(floor)}'s")
    return out


def _apart(names: list[str], runs: int, every: bool = False, nor: list[str] | None = None,
           spreads: dict | None = None) -> str:
    """The plain clause for methods a run cannot separate ("them" when they are all the
    methods shown and no more than two; `nor`, a second group the runs cannot separate either),
    with the first's rounds against each of the rest where the spreads have them."""
    who = "them apart" if every and len(names) < 3 else _told(names)
    also = f", nor {_told(nor, apart='')}" if nor else ""
    if runs > 1:
        said = [w for w in rounds_said(spreads, names) + (rounds_said(spreads, nor) if nor else []) if w]
        if not said:
            return f"these {runs} runs cannot tell {who}{also} (their ranges overlap: within this machine's noise)"
        return f"these {runs} runs cannot tell {who}{also}, within this machine's noise: {'; '.join(said)}"
    return (f"one run cannot tell {who}{also} (within {ONE_RUN:.0%}, about one run's noise here; "
            f"choose “3, interleaved” runs)")


def order_within_noise(c: dict[str, Card], spreads: dict | None = None) -> str:
    """For the race's last line: 'Over these 3 runs, SD and Mirror-SD (gated) tie: their order is
    within this machine's noise.' ('' where the runs tell the winner from the rest). The verdict
    under the race says it in full, once."""
    level = level_with(c, winner(c, spreads), spreads)
    if not level:
        return ""
    runs = runs_of(spreads)
    which = f"Over these {runs} runs" if runs > 1 else f"In one run (within {ONE_RUN:.0%})"
    return (f"{which}, {label(level[0])} had the best time, but the runs cannot tell it from "
            f"{names_of(level[1:])}: within this machine's noise.")


def verdict_parts(c: dict[str, Card], records: dict[str, RunRecord], meta: dict,
                  spreads: dict | None = None) -> tuple[str, str]:
    """The verdict as (its headline: one sentence, each method's end-to-end ratio over AR, the
    tiles' figures, and who won or that the runs cannot tell them apart; the reason and its
    notes). The decode ratios and the machine go on a smaller line (`verdict_sub`)."""
    best = winner(c, spreads)
    if best is None:
        return "", ""
    head = "".join(headline(c, records, meta, spreads))
    if baseline() not in c or len(c) < 2:
        return head, ""
    level, runs = level_with(c, best, spreads), runs_of(spreads)
    lead = "The trade:" if level else "The reason:"
    reason = _reason(best, c, records, meta.get("precision"), lead, level)
    notes = _first_token_note(c).strip() if runs == 1 else ""  # medians steady the first token
    if notes:
        reason += (ITEM if ITEM in reason else " ") + notes
    return head, reason


def headline(c: dict[str, Card], records: dict[str, RunRecord], meta: dict,
             spreads: dict | None = None) -> tuple[str, str]:
    """The verdict's headline in two parts that join into one text (the status says it whole):
    what the large type shows (each method's end-to-end ratio over AR, the tiles' figures, and
    who won), then what the runs cannot tell apart and where the gate ran Mirror-SD as SD."""
    best, ar = winner(c, spreads), baseline()
    if ar not in c or len(c) < 2:
        return (f"On this machine ({machine_words(meta)}): {label(best)} wrote {c[best].tokens} tokens "
                f"at {c[best].e2e_tps:.2f} tok/s end to end."), ""
    sp, runs = speeds(c, spreads), runs_of(spreads)
    level = level_with(c, best, spreads)
    ratios = _ratio_list(c, sp)
    near = _near_ar(c, best, level, sp, spreads)
    if level:  # no winner: who ties for the lead comes first, in the large type, then the ratios
        lead = ("No method clearly ahead" if set(level) == set(c) else
                f"{names_of(level)} tie for the lead")
        return (f"{lead}: {ratios} end to end;", f" {_apart(level, runs, set(level) == set(c), near and near + [ar], spreads)}."
                + _as_sd(c, records))
    if best == ar:
        return f"Plain decoding (AR) won end to end: {ratios}.", _as_sd(c, records)
    second = max((m for m in c if m != best and sp[m][0]), key=lambda m: sp[m][0])
    if variant_of(best)[0] == "mirror" and "sd" in c and sp["sd"][0]:
        second = "sd"  # a Mirror-SD's win is said against SD, the method it builds on, not its variant
    than = "" if second == ar else f", {sp[best][0] / sp[second][0]:.2f}× {label(second)}'s speed"
    also = f"; {_apart(near + [ar], runs, spreads=spreads)}" if near else ""
    return f"{label(best)} won end to end{than}: {ratios}{also}.", _as_sd(c, records)


def lead_words(c: dict[str, Card], records: dict[str, RunRecord], meta: dict,
               spreads: dict | None = None, why: str = "", cost: float | None = None) -> str:
    """The verdict's first words, for an audience: did speculation pay against plain decoding, and
    did Mirror-SD pay against SD, each said only as far as the runs tell it (`told_apart`), with
    the one figure that matters; the headline under it gives every ratio ('' without AR and a
    drafting method). `why`: where Mirror-SD did not beat SD, the clause that says why (the
    caller's, from the projection and the cause in one step). `cost`: SD's drafting time per drafted
    token over one target forward (medians, `why.costs`), said where drafting did not beat plain decoding."""
    ar = baseline()
    sp = speeds(c, spreads)
    drafting = [m for m in c if m != ar and sp[m][0] and c[m].complete]
    if ar not in c or not sp[ar][0] or not drafting:
        return ""
    runs = runs_of(spreads)

    def ahead(a: str, b: str) -> bool:  # as far as the runs tell: every round, or one run beyond its noise
        return told_apart(spreads, a, b) if runs > 1 else sp[a][0] >= sp[b][0] * (1 + ONE_RUN)

    same = all((against_ar(records, m) or {}).get("identical") for m in drafting)
    text = f"the same {c[ar].tokens} tokens" if same else "its tokens"
    best = max(drafting, key=lambda m: sp[m][0])
    # SD names speculation's gain where it is level with the fastest; a method the runs tell above it, itself
    who = "sd" if "sd" in drafting and ahead("sd", ar) and not ahead(best, "sd") else best
    if ahead(who, ar):  # from one run, said as one run's (a presenter's Run; the default runs 3)
        out = [("In this one run, " if runs == 1 else "") + f"{label(who)} wrote {text} as plain decoding, "
               f"{sp[who][1]:.2f}× as fast."]
    else:
        dear = f" Each drafted token cost {cost:.0%} of a target forward on this machine (SD's median)." if cost else ""
        out = ["Plain decoding (AR) was the fastest here: drafting cost more than it saved." + dear
               if all(ahead(ar, m) for m in drafting) else
               "No method was clearly faster than plain decoding (AR) here." + dear]
    # Mirror-SD against SD, every variant (a gated run that ran as SD among them: the headline says so)
    mirrors = [m for m in drafting if variant_of(m)[0] == "mirror"]
    if "sd" not in drafting or not mirrors:
        return " ".join(out)
    top = max(mirrors, key=lambda m: sp[m][0])
    ratio = sp[top][0] / sp["sd"][0]
    hid = c[top].draft_hidden_s  # where it won, how: the drafting it did beside the target
    how = f" Its draft hid {hid:.1f} s of drafting beside the target." if hid and hid >= 0.05 else ""
    if runs == 1:  # one run settles no close call: the figure, and the way to settle it
        # the why (': its draft is too slow …') as a sentence of its own after the figure
        after = f" {why[2].upper()}{why[3:]}." if why.startswith(": ") and ratio < 1 else how if ratio >= 1 + ONE_RUN else ""
        out.append(f"In this one run {label(top)} ran {ratio:.2f}× SD's speed: within one run's noise here "
                   f"({ONE_RUN:.0%}).{after}"  # the one-run note under the lead says where the medians are
                   if abs(ratio - 1) < ONE_RUN else
                   f"Mirror-SD {'beat' if ratio > 1 else 'was slower than'} SD in this one run: {label(top)} "
                   f"{ratio:.2f}× SD's speed.{after}")
    elif ahead(top, "sd"):
        out.append(f"Mirror-SD beat SD: {label(top)} {ratio:.2f}× SD's speed.{how}")
    elif all(ahead("sd", m) for m in mirrors):  # slower in every round: the rule the tiles say it by
        out.append(f"Mirror-SD was slower than SD, in all {runs} rounds{why}.")
    elif ratio > 1:  # a higher median that the rounds cannot tell from SD's: a tie, its figure said
        out.append(f"Mirror-SD and SD tie: {label(top)} ran {ratio:.2f}× SD's speed (medians), but not faster "
                   f"in every round, so these {runs} runs cannot tell the two apart.")
    else:
        out.append(f"Mirror-SD did not beat SD{why}.")
    return " ".join(out)


def _as_sd(c: dict[str, Card], records: dict[str, RunRecord]) -> str:
    """' Mirror-SD (gated) ran as SD (the draft, then the target) in 26 of its 27 steps, so its
    speed is not the overlap's.': where a gated Mirror-SD's gate chose SD's order in most of its
    steps, the headline says whose way of working its figure measures ('' otherwise)."""
    said = []
    for m in c:
        got = ran_as_sd(m, records.get(m))
        if got:
            said.append(f" {label(m)} ran as SD (the draft, then the target) in {as_sd_count(got)}, "
                        f"so its speed is not the overlap's.")
    return "".join(said)


def verdict_sub(c: dict[str, Card], meta: dict, spreads: dict | None = None) -> str:
    """The line under the headline: the decode ratios, said what they are (the speed after each
    run's first token), and where and how often it was measured ('' without AR)."""
    if baseline() not in c or len(c) < 2 or winner(c, spreads) is None:
        return ""
    runs = runs_of(spreads)
    shown = bool(meta.get("median_runs")) and runs > 1  # the cards' figures: each method's middle run
    sp = speeds(c, None if shown else spreads)
    decode = _ratio_list(c, sp, 2)
    many = (f" (each method's middle run of {runs}, as in the cards)" if shown else
            f" (medians of {runs} interleaved runs)" if runs > 1 else " (one run)")
    lead = f"Decode alone, the speed after each run's first token: {decode}. " if decode else ""
    return f"{lead}Measured on {machine_words(meta)}{many}."


def runs_of(spreads: dict | None) -> int:
    """How many interleaved runs the spreads span (1 without)."""
    return max((x.n for s in (spreads or {}).values() for x in s.values()), default=1)


def _near_ar(c: dict[str, Card], best: str, level: list[str], sp: dict,
             spreads: dict | None = None) -> list[str]:
    """Methods other than the winner's group that the runs cannot tell from AR ([] for none):
    over several interleaved runs, those neither faster nor slower than AR in every round
    (`told_apart`); from one run, those within ONE_RUN of AR."""
    ar = baseline()
    if best == ar or ar in level:
        return []
    ranges = e2e_ranges(spreads)
    rest = [m for m, x in c.items() if m not in (ar, best) and m not in level and x.complete]
    if ar in ranges:
        return [m for m in rest if m in ranges and not told_apart(spreads, m, ar) and not told_apart(spreads, ar, m)]
    return [m for m in rest if sp[m][1] is not None and abs(sp[m][1] - 1) <= ONE_RUN]


# SD and Mirror-SD do the same work before their first token (the prompt, the first window):
# from one run (no range), times further apart than this are worth a note pointing to the
# decode speed, the steadier figure
FIRST_TOKEN_SPREAD = 1.3
FIRST_TOKEN_GAP_S = 0.1  # and at least this far apart: a few milliseconds are not worth a word


def roles() -> tuple[str, str]:
    """(SD, Mirror-SD) by the registry's facts: the modelled method that drafts without the
    early exit, and the modelled one that reads it (the verdict compares the two)."""
    return (having(modelled=True, drafts=True, early_exit=False)[0],
            having(modelled=True, early_exit=True)[0])


def _first_token_note(c: dict[str, Card]) -> str:
    sd, mirror = roles()
    ttft = {m: c[m].ttft_s for m in (sd, mirror) if m in c and c[m].ttft_s}
    if len(ttft) < 2:
        return ""
    slow, fast = max(ttft, key=ttft.get), min(ttft, key=ttft.get)
    if ttft[slow] < FIRST_TOKEN_SPREAD * ttft[fast] or ttft[slow] - ttft[fast] < FIRST_TOKEN_GAP_S:
        return ""
    return (f" Note: {label(slow)}'s time to first token ({ttft[slow]:.2f} s) was "
            f"{ttft[slow] / ttft[fast]:.1f}× {label(fast)}'s ({ttft[fast]:.2f} s) for the same work "
            f"(the prompt and the first window); one run gives no range to tell that gap from noise, "
            f"so compare their decode speeds ({label(sd)} {_x(c[sd].decode_speedup)}, {label(mirror)} "
            f"{_x(c[mirror].decode_speedup)} AR's), or choose “3, interleaved” runs.")


def _reason(best: str, c: dict[str, Card], records: dict[str, RunRecord], precision: str | None = None,
            lead: str = "The reason:", level: list[str] | None = None) -> str:
    """The reason's items (`level`: the methods the runs cannot tell from the winner)."""
    slow = verify_slowdown(records)
    sd_name, mirror_name = roles()
    mirror, sd = c.get(mirror_name), c.get(sd_name)
    if best in (sd_name, mirror_name) and mirror is not None and sd is not None:
        return _sd_against_mirror(sd, mirror, records, slow, precision, lead, level)
    if best == mirror_name and mirror is not None and ran_as_sd(mirror_name, records.get(mirror_name)):
        return ""  # its speed is SD's way of working, not the overlap's: the headline says so (`_as_sd`)
    if best == mirror_name and mirror is not None:
        hidden = mirror.draft_hidden_s or 0.0
        extra = (f"; the target's verify forward took {slow['factor']:.2f}× as long beside it "
                 f"(median{split_words(slow['factor'], precision, slow['tokens'])})" if slow else "")
        return (f" The reason: {hidden:.2f} s of drafting ran beside the target instead of "
                f"before it{extra}.")
    if best == baseline():
        spec = [x for m, x in c.items() if m != best and x.tokens_per_step]
        if spec:
            x = max(spec, key=lambda k: k.tokens_per_step)
            c_ = costs(records)
            dear = (f" (a draft forward costs {c_['draft'] / c_['target']:.0%} of a target forward here)"
                    if c_.get("draft") and c_.get("target") else "")
            return (f" {lead} even at {x.tokens_per_step:.1f} tokens per verify step "
                    f"({label(x.method)}, the most), the drafting{dear} and the longer verify forward "
                    f"cost more time than the saved target forwards.")
    return ""


def split_words(factor: float, precision: str | None, tokens: int) -> str:
    """The verify's slowdown beside the draft named as its two costs: the core split (the
    target's forward on one thread against two, measured alone on a 2-core CPU:
    mirror_sd.latency.whatif_costs) and the interference beyond it (one memory bus); '' where
    no split was measured at this precision or the slowdown is under the split alone."""
    split = core_split(precision, tokens)
    if split is None or factor < split:
        return ""
    return (f"; of that, {split:.2f}× is the core split (each model gets one of the two cores, "
            f"measured one thread against two) and {factor / split:.2f}× the two models sharing "
            f"one memory bus")


# the reason's items are separated by this in the verdict's text; the page shows one per line
ITEM = "\n"


def _verify_and_waits(sd: Card, mirror: Card, sd_rec: RunRecord, mirror_rec: RunRecord):
    """(parts, verify, exposed, after), each keyed by role ("sd" the serial drafter's card,
    "mirror" the early-exit drafter's): the runs' breakdowns, the target's forwards of every
    step after the first token (a window verified, or one token where the window's pricing
    drafted none: every verify step counts, so the means divide like with like), the drafting
    the target waited for, and the verify steps after the first (the first is in the first
    token); None without those figures."""
    parts = {"sd": breakdown(sd_rec) or {}, "mirror": breakdown(mirror_rec) or {}}
    verify = {m: None if parts[m].get("verify") is None else parts[m]["verify"] + (parts[m].get("target") or 0.0)
              for m in parts}
    exposed = {m: parts[m].get("draft_exposed") for m in parts}
    if None in verify.values() or None in exposed.values():
        return None
    after = {m: max(0, x.verify_steps - 1) for m, x in (("sd", sd), ("mirror", mirror))}
    return parts, verify, exposed, after


def time_split(sd: Card, mirror: Card, sd_rec: RunRecord, mirror_rec: RunRecord) -> dict | None:
    """Mirror-SD's wall time less SD's (seconds; negative: Mirror-SD finished sooner), split
    into what each difference accounts for, adding up to it: "overlap" (less or more drafting
    the target waited for: what running the draft beside the target hid), "steps" (more or
    fewer verify steps after the first, each at SD's mean a step: window lengths and
    rejections), "per_step" (each of Mirror-SD's verify steps dearer or cheaper than SD's on
    mean: the verify beside the draft, and longer windows), "rest" (the first token, host
    time, idle). None without the figures, or where a run verified nothing after its first."""
    got = _verify_and_waits(sd, mirror, sd_rec, mirror_rec)
    if got is None or not (sd.wall_s and mirror.wall_s):
        return None
    _, verify, exposed, after = got
    if not (after["sd"] and after["mirror"]):
        return None
    mean = {m: verify[m] / after[m] for m in verify}
    split = {"overlap": exposed["mirror"] - exposed["sd"],
             "steps": (after["mirror"] - after["sd"]) * mean["sd"],
             "per_step": after["mirror"] * (mean["mirror"] - mean["sd"])}
    total = mirror.wall_s - sd.wall_s
    split["rest"] = total - sum(split.values())
    split["total"] = total
    return split


def _sd_against_mirror(sd: Card, mirror: Card, records: dict[str, RunRecord], slow: dict | None,
                       precision: str | None = None, lead: str = "The reason:",
                       level: list[str] | None = None) -> str:
    """Where Mirror-SD's decode time went against SD's (whichever won), from the two runs' own
    parts (totals after the first token, as the bars show them), in three items: verifying
    (with what running the draft beside the target cost each verify, medians, named as the
    core split and the interference beyond it), drafting the target waited for, and the net.
    Where the overlap gate ran Mirror-SD as SD in most steps (`ran_as_sd`), the first item says
    so instead of a cause, and nothing credits its time to the overlap: both runs worked SD's
    way, and where the runs cannot tell the two apart (`level`), their difference is this
    machine's run-to-run spread."""
    got = _verify_and_waits(sd, mirror, records[sd.method], records[mirror.method])
    if got is None:
        return ""
    parts, verify, exposed, after = got
    turned = ran_as_sd(mirror.method, records[mirror.method])
    mean = {m: verify[m] / after[m] * 1e3 if after[m] else None for m in verify}
    per = {m: f" ({mean[m]:.0f} ms a step, mean)" if mean[m] else "" for m in mean}
    verifying = (f"Verifying (the target's forwards, one-token ones where a step drafted nothing), after "
                 f"the first token (each run's first verify step falls inside it): "
                 f"Mirror-SD {verify['mirror']:.2f} s in {after['mirror']} of its {mirror.verify_steps} "
                 f"verify steps{per['mirror']}, SD {verify['sd']:.2f} s in {after['sd']} of its "
                 f"{sd.verify_steps}{per['sd']}")
    if mean["sd"] and mean["mirror"]:
        verifying += f": {mean['mirror'] / mean['sd']:.2f}× per step, mean over all windows"
    if slow and not (turned and slow["method"] == mirror.method):  # in turn, its few steps beside the draft say nothing
        whose = "" if slow["method"] == "mirror" else f" ({label(slow['method'])}'s steps)"
        verifying += (f"; at one window length, {slow['tokens']} tokens, the median verify forward "
                      f"took {slow['factor']:.2f}× as long beside the draft{whose} "
                      f"({slow['beside_s'] * 1e3:.0f} ms against {slow['alone_s'] * 1e3:.0f} ms alone"
                      f"{split_words(slow['factor'], precision, slow['tokens'])})")
    hidden = mirror.draft_hidden_s or 0.0
    drafting = (f"Drafting: Mirror-SD hid {hidden:.2f} s of it beside the target and kept the target "
                f"waiting {exposed['mirror']:.2f} s for the draft; SD's target waited "
                f"{exposed['sd']:.2f} s (all of SD's drafting)")
    saved, lost = exposed["sd"] - exposed["mirror"], verify["mirror"] - verify["sd"]
    waiting = (f"saved {saved:.2f} s of waiting for the draft" if saved >= 0 else
               f"waited {-saved:.2f} s longer for the draft")
    verifying_net = f"lost {lost:.2f} s verifying" if lost >= 0 else f"saved {-lost:.2f} s verifying"
    net = f"Net: Mirror-SD {waiting} and {verifying_net}"
    if sd.ttft_s is not None and mirror.ttft_s is not None and sd.wall_s and mirror.wall_s:
        # the parts above start after the first token: its own gap and the rest (host time, idle)
        # close the sum to the two runs' wall times
        first = mirror.ttft_s - sd.ttft_s
        rest = (mirror.wall_s - sd.wall_s) - first - (verify["mirror"] - verify["sd"]) - (exposed["mirror"] - exposed["sd"])
        net += (f"; its first token came {abs(first):.2f} s {'later' if first > 0 else 'earlier'}, and the "
                f"rest (overhead, idle) {'added' if rest >= 0 else 'saved'} {abs(rest):.2f} s: its run took "
                f"{mirror.wall_s:.2f} s against SD's {sd.wall_s:.2f} s")
    net += "."
    cause = cause_words(sd, mirror, parts, {m: verify[m] / after[m] if after[m] else None for m in verify})
    if turned:
        cause = as_sd_words(mirror.method, turned, {sd.method, mirror.method} <= set(level or []), cause)
    return f" {lead}{ITEM}{cause}{ITEM}{verifying}.{ITEM}{drafting}.{ITEM}{net}"


def as_sd_words(method: str, turned: tuple[int, int], level: bool, cause: str) -> str:
    """The trade's first item for a gated Mirror-SD that ran as SD in most steps (`turned`:
    `ran_as_sd`'s counts): what it ran, and what its difference from SD then is: where the runs
    cannot tell the two apart (`level`), within this machine's run-to-run spread; else not the
    overlap's, with the measured `cause`."""
    ran = (f"{label(method)} ran as SD (the draft, then the target) in {as_sd_count(turned)}, "
           f"so its difference from SD")
    if level:
        return (f"{ran} is within this machine's run-to-run spread, not a cost or a gain of the overlap: "
                f"both took turns, each choosing its windows from the costs it measured.")
    return f"{ran} is not the overlap's. {cause}"


def window_words(x: Card) -> str:
    """'1', '2–4, median 2': drafted tokens per window."""
    lo, mid, hi = x.windows
    return f"{lo}" if lo == hi else f"{lo}–{hi}, median {mid:g}"


def cause_words(sd: Card, mirror: Card, parts: dict, mean_s: dict) -> str:
    """Why Mirror-SD ended faster or slower than SD, in one or two plain sentences from the
    runs' own figures: the time each difference accounts for (more or fewer verify steps at
    SD's mean cost a step; a dearer or cheaper verify step; waiting for the draft; the first
    token), the largest named first, with what caused it (window lengths, rejections)."""
    effects = {"ttft": (mirror.ttft_s or 0.0) - (sd.ttft_s or 0.0),
               "wait": (parts["mirror"].get("draft_exposed") or 0.0) - (parts["sd"].get("draft_exposed") or 0.0)}
    if mean_s["sd"] and mean_s["mirror"]:
        after_m, after_s = max(0, mirror.verify_steps - 1), max(0, sd.verify_steps - 1)
        effects["steps"] = (after_m - after_s) * mean_s["sd"]
        effects["per_step"] = after_m * (mean_s["mirror"] - mean_s["sd"])
    lost = sum(effects.values()) >= 0  # Mirror-SD slower than SD over these parts
    sign = 1 if lost else -1
    ranked = sorted((k for k, v in effects.items() if sign * v > 0), key=lambda k: -sign * effects[k])
    if not ranked:
        return "Mirror-SD and SD spent their time alike."
    words = [_effect_words(k, lost, sd, mirror, parts, mean_s) for k in ranked[:2]]
    total = sign * effects[ranked[0]] + (sign * effects[ranked[1]] if len(ranked) > 1 else 0.0)
    if len(words) > 1 and sign * effects[ranked[1]] < 0.25 * total:
        words = words[:1]  # a minor second cause is for the Statistics fold
    first = words[0][:1].upper() + words[0][1:]
    return f"{first}." + (f" Also, {words[1]}." if len(words) > 1 else "")


def _effect_words(key: str, lost: bool, sd: Card, mirror: Card, parts: dict, mean_s: dict) -> str:
    if key == "steps":
        # the cause said as what it was: more (or fewer) tokens per verify step; the windows'
        # medians and the rejections beside it as facts, never as a "so" that a median can
        # contradict (shorter windows on median with fewer steps)
        more = "more" if mirror.tokens_per_step > sd.tokens_per_step else "fewer"
        facts = [f"rejections in {mirror.rejections} of its {mirror.verify_steps} steps against SD's "
                 f"{sd.rejections} of {sd.verify_steps}"]
        if sd.windows and mirror.windows and mirror.windows[1] != sd.windows[1]:
            own = window_words(mirror)
            facts.insert(0, f"its windows {own} drafted token{'' if own == '1' else 's'} against SD's {window_words(sd)}")
        return (f"each of Mirror-SD's verify steps wrote {more} tokens: {mirror.tokens_per_step:.1f} against "
                f"SD's {sd.tokens_per_step:.1f} ({'; '.join(facts)}), so {mirror.verify_steps} verify steps "
                f"(target forwards) against SD's {sd.verify_steps}")
    if key == "per_step":
        return (f"each of Mirror-SD's verify steps took {'longer' if lost else 'less time'}: "
                f"{mean_s['mirror'] * 1e3:.0f} ms against SD's {mean_s['sd'] * 1e3:.0f} ms (the mean over "
                f"every verify step after the first, every window length)")
    if key == "wait":
        m, s = (parts[x].get("draft_exposed") or 0.0 for x in ("mirror", "sd"))
        hidden = mirror.draft_hidden_s or 0.0
        return (f"the target waited {m:.2f} s for Mirror-SD's draft against {s:.2f} s for SD's"
                + (f" (Mirror-SD hid {hidden:.2f} s of drafting beside the target)" if hidden and not lost else ""))
    return (f"Mirror-SD's time to first token was {'longer' if lost else 'shorter'}: "
            f"{mirror.ttft_s:.2f} s against SD's {sd.ttft_s:.2f} s, for the same work (the prompt and the "
            f"first window)")


def _variant_and_base(c: dict[str, Card], setting: str, value: str) -> tuple[str | None, str | None]:
    """(the variant that runs its registry method with `setting` at `value`, that method) where
    both ran (are among the cards), else (None, None)."""
    from .runs import VARIANTS
    return next(((v, x.base) for v, x in VARIANTS.items()
                 if dict(x.changes).get(setting) == value and v in c and x.base in c), (None, None))


def _speeds_against(c: dict[str, Card], spreads: dict | None, base: str, v: str, with_: str, without: str) -> str:
    """'12.10 tok/s<with_> against 10.30 tok/s<without> (1.17×)', with '; the runs cannot tell
    these two speeds apart' inside the bracket where they cannot ('' without both speeds)."""
    sp = speeds(c, spreads)
    a, b = sp[base][0], sp[v][0]
    if not (a and b):
        return ""
    pair = {base: c[base], v: c[v]}
    apart = level_with(pair, winner(pair, spreads), spreads)
    return (f"{a:.2f} tok/s{with_} against {b:.2f} tok/s{without} ({a / b:.2f}×"
            + ("; the runs cannot tell these two speeds apart)" if apart else ")"))


def _bought(what: str, parts: list[str], spreads: dict | None) -> tuple[str, str] | None:
    """("What <what> bought (speeds: medians of 3 interleaved runs)", " <parts>."): a variant's
    comparison, its lead and its text apart (None without parts)."""
    parts = [x for x in parts if x]
    if not parts:
        return None
    runs = runs_of(spreads)
    many = f" (speeds: medians of {runs} interleaved runs)" if runs > 1 else ", this run"
    return f"What {what} bought{many}", " " + "; ".join(parts) + "."


def exit_bought(c: dict[str, Card], records: dict[str, RunRecord],
                spreads: dict | None = None) -> tuple[str, str] | None:
    """What Mirror-SD's early exit bought, when its variant without the exit ran in the same
    run: the hit rate with it against without, and the end-to-end speed (`_bought`; None otherwise)."""
    v, base = _variant_and_base(c, "early_exit", "off")
    if v is None:
        return None
    parts = []
    if None not in (c[base].hits, c[v].hits):
        rate = lambda x: f" ({x.hits / (x.hits + x.misses):.0%})" if x.hits + x.misses else ""  # noqa: E731
        parts.append(f"{c[base].hits} hits of {c[base].hits + c[base].misses} verdicts with it"
                     f"{rate(c[base])} against {c[v].hits} of {c[v].hits + c[v].misses} without"
                     f"{rate(c[v])}, the draft's own guesses picking the branches ({shown_run(spreads)})")
    parts.append(_speeds_against(c, spreads, base, v, " with it", " without"))
    return _bought("the early exit", parts, spreads)


def windows_bought(c: dict[str, Card], records: dict[str, RunRecord],
                   spreads: dict | None = None) -> tuple[str, str] | None:
    """What SD's priced windows and prompt lookup bought, when SD with fixed windows (the draft
    model writing gamma tokens every step) ran in the same run: the two end-to-end speeds, the
    tokens drafted per window and kept per verify step (`_bought`; None otherwise)."""
    v, base = _variant_and_base(c, "window", "fixed")
    if v is None or base != "sd":
        return None
    parts = [_speeds_against(c, spreads, base, v, "",
                             " with windows of a fixed length drafted by the draft model")]
    if c[base].windows and c[v].windows:
        parts.append(f"a median {c[base].windows[1]:g} drafted tokens per window against {c[v].windows[1]:g}")
    if c[base].tokens_per_step and c[v].tokens_per_step:
        parts.append(f"{c[base].tokens_per_step:.2f} tokens per verify step against {c[v].tokens_per_step:.2f} "
                     f"({shown_run(spreads)})")
    return _bought("SD's priced windows and prompt lookup", parts, spreads)


def overlap_measured(c: dict[str, Card], spreads: dict | None = None) -> str:
    """What Mirror-SD's lanes at once did here, where a run with both lanes at once in every step
    (the page's Mirror-SD) and a gated one both ran: the first's hits of its verdicts and its
    end-to-end speed against the gated run's, which the overlap gate's choice rests on ('' otherwise)."""
    from .runs import overlapped_and_gated
    v, base = overlapped_and_gated(c)
    if v is None or base is None:
        return ""
    sp = speeds(c, spreads)
    every, gate = sp[v], sp[base]
    parts = []
    if c[v].hits is not None and c[v].hits + (c[v].misses or 0):
        n = c[v].hits + (c[v].misses or 0)
        parts.append(f"hit {c[v].hits} of its {n} verdicts ({c[v].hits / n:.0%}; {shown_run(spreads)})")
    if every[0] and gate[0]:
        pair = {base: c[base], v: c[v]}
        apart = level_with(pair, winner(pair, spreads), spreads)
        faster = every[0] > gate[0]
        which = " (medians)" if runs_of(spreads) > 1 else ""
        parts.append(f"ran {every[0]:.2f} tok/s ({_x(every[1])} AR) against {label(base)}'s "
                     f"{gate[0]:.2f} tok/s{which}" + (": the runs cannot tell them apart" if apart else
                                                 ": overlapping paid here" if faster else
                                                 ": both lanes on the same cores cost more than a hit saves"))
    if not parts:
        return ""
    return f"{label(v)}, with its lanes at once in every step, " + " and ".join(parts) + "."
