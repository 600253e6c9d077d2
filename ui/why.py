"""Why a run came out as it did, from its own measured spans and events (pure functions).

- `breakdown(rec)`: where each run's wall time went, seconds that add up to the wall time:
  to the first token (the same for every method), then target forwards (AR), verify, draft
  exposed (the draft lane busy while the target lane is not), idle (no lane busy: Python, the
  hand-offs); plus draft hidden (the draft lane busy while the target lane is busy too, which
  costs no wall time by itself).
- `contention(records)`: what two lanes at once cost here: the target's verify forward alone
  (SD) against beside the draft (Mirror-SD), and one draft forward over a batch of branches
  beside the target against a one-token draft forward alone.
- `lanes_at_once(rec)`: in how many of Mirror-SD's verify steps its two lanes worked at the
  same time.
- `early_exit_share(rec)`: for Mirror-SD, hits whose root was among the early exit's top-κ
  against hits rooted only in the draft's own guesses, and how often the early exit's top-κ
  held the target's token.
- `cross_sentence(meta)`: for a cross-tokenizer pair, what the draft could propose at all and
  the share of this run's AR output it covers (the job measures it: meta["cross"]).
"""
from __future__ import annotations

from statistics import median

from mirror_sd.engine.events import DraftBranch, EarlyExit, Verify

from .runs import RunRecord, always_overlapped, measured, variant_of

TARGET_FORWARD = {"decode"}
VERIFY = {"verify_forward", "prefix", "exit_head", "suffix", "accept"}
PARTS = ("first_token", "target", "verify", "draft_exposed", "idle")
PART_NAMES = {"first_token": "to the first token (the prompt; SD and Mirror-SD also their first window)",
              "target": "target forwards (1 token each)",
              "verify": "verify forwards", "draft_exposed": "draft, exposed (the target waits)",
              "idle": "idle (no model busy)", "draft_hidden": "draft, hidden (beside the target; branches the verdict did not take, and the last step's, included)"}


def _part(span) -> str:
    if span.lane == "draft":
        return "draft"
    if span.label in TARGET_FORWARD:
        return "target"
    return "verify" if span.label in VERIFY or span.lane in ("target", "verify") else "other"


def breakdown(rec: RunRecord) -> dict | None:
    """Seconds per part over [0, wall]; the parts in PARTS add up to the wall time. Everything
    before the first committed token is "first_token" (the card's time to first token), for
    every method alike; after it, each instant goes to the first busy part in order target,
    verify, draft (then it is exposed)."""
    if rec.finish is None:
        return None
    m = measured(rec)
    wall_ns = int(m["wall_s"] * 1e9)
    first_ns = min(wall_ns, int((m.get("prefill_s") or 0.0) * 1e9))
    marks = {0, first_ns, wall_ns}
    spans = []
    for s in rec.spans:
        a, b = max(first_ns, s.start_ns - rec.t0_ns), min(wall_ns, s.end_ns - rec.t0_ns)
        if b > a:
            spans.append((a, b, _part(s)))
            marks.update((a, b))
    cuts = sorted(marks)
    out = dict.fromkeys(PARTS + ("draft_hidden",), 0)
    out["first_token"] = first_ns
    for lo, hi in zip(cuts, cuts[1:]):
        if hi <= first_ns:
            continue
        busy = {p for a, b, p in spans if a <= lo and b >= hi}
        target = next((p for p in ("target", "verify") if p in busy), None)
        if target:
            out[target] += hi - lo
            out["draft_hidden"] += (hi - lo) if "draft" in busy else 0
        elif "draft" in busy:
            out["draft_exposed"] += hi - lo
        else:
            out["idle"] += hi - lo
    return {k: v / 1e9 for k, v in out.items()}


def per_token(rec: RunRecord) -> dict | None:
    """The run's time after its first token, per step and per token (ms): `breakdown`'s parts
    after the first token over the steps that wrote them, so that (forwards + waiting + idle) per
    step over tokens per step is the run's decode time per token exactly. A step is a verify
    forward after the first commit (AR: a target forward); `hidden` is the draft's work beside
    the target per step (not in the sum). None without a finished run that wrote after its first
    token."""
    parts = breakdown(rec)
    m = measured(rec)
    tokens = int(m.get("decode_tokens") or 0)
    if not parts or tokens <= 0:
        return None
    verifies = sum(1 for e in rec.events if isinstance(e, Verify))
    steps = max(1, verifies - 1) if verifies else tokens  # the first verify wrote the first token
    ms = lambda x: 1e3 * x / steps  # noqa: E731
    step = {"forwards": ms(parts["target"] + parts["verify"]), "waiting": ms(parts["draft_exposed"]),
            "idle": ms(parts["idle"]), "hidden": ms(parts["draft_hidden"])}
    total = step["forwards"] + step["waiting"] + step["idle"]
    return {**step, "steps": steps, "tokens_per_step": tokens / steps, "per_token": total * steps / tokens}


def _durations(rec: RunRecord | None, labels: set[str], lane: str | None = None) -> list[float]:
    if rec is None:
        return []
    return [(s.end_ns - s.start_ns) / 1e9 for s in rec.spans
            if s.label in labels and (lane is None or s.lane == lane) and s.step > 0]


def _per_drafted_token(rec: RunRecord | None, label: str) -> list[float]:
    """Seconds per drafted token of each serial draft window (steps after the first); a
    span's detail starts with the number of tokens it drafted (windows vary in length)."""
    if rec is None:
        return []
    out = []
    for s in rec.spans:
        n = s.detail.split(" ", 1)[0] if s.detail else ""
        if s.lane == "draft" and s.label == label and s.step > 0 and n.isdigit() and int(n) > 0:
            out.append((s.end_ns - s.start_ns) / 1e9 / int(n))
    return out


def verify_forwards(rec: RunRecord | None, window: int | None = None) -> dict[int, float]:
    """step -> seconds of its target verify forward (Mirror-SD splits it into prefix, exit,
    suffix), steps after the first; with `window`, only the steps that verified that many
    drafted tokens."""
    if rec is None:
        return {}
    per_step: dict[int, float] = {}
    for s in rec.spans:
        if s.lane == "target" and s.label in ("verify_forward", "prefix", "exit_head", "suffix") and s.step > 0:
            per_step[s.step] = per_step.get(s.step, 0.0) + (s.end_ns - s.start_ns) / 1e9
    if window is not None:
        sizes = _windows(rec)
        return {step: d for step, d in per_step.items() if sizes.get(step) == window}
    return per_step


def _verify_forwards(rec: RunRecord | None, window: int | None = None) -> list[float]:
    return list(verify_forwards(rec, window).values())


def _windows(rec: RunRecord | None) -> dict[int, int]:
    """step -> drafted tokens it verified."""
    return {e.step: len(e.drafted) for e in (rec.events if rec else []) if isinstance(e, Verify)}


def _common_window(sd: RunRecord | None, mirror: RunRecord | None, only: set[int] | None = None) -> int | None:
    """The window length verified most often by both runs (steps after the first; Mirror-SD's
    among the steps `only` when given), so that SD's verify forward alone and Mirror-SD's
    beside the draft are compared at equal size (a verify's cost grows with its rows, and
    adaptive windows vary)."""
    a = [w for s, w in _windows(sd).items() if s > 0]
    b = [w for s, w in _windows(mirror).items() if s > 0 and (only is None or s in only)]
    both = set(a) & set(b)
    return max(both, key=lambda w: (min(a.count(w), b.count(w)), w)) if both else None


def mean_window(rec: RunRecord | None) -> float | None:
    """The drafted tokens a verify step checked, on average over the steps after the first (the
    ledger's steps; a step that drafted nothing counts 0); None without such a step."""
    sizes = [w for step, w in _windows(rec).items() if step > 0]
    return sum(sizes) / len(sizes) if sizes else None


def _gamma(rec: RunRecord | None) -> int:
    windows = [len(e.drafted) for e in (rec.events if rec else []) if isinstance(e, Verify)]
    return max(windows, default=0)


def costs(records: dict[str, RunRecord]) -> dict:
    """Median per-forward costs in seconds, from the runs' spans (steps after the first):
    target (one AR token), verify (one verify forward, SD alone and Mirror-SD beside its
    draft), draft (one serial draft forward alone, from SD's windows) and draft_beside (one
    batched branch forward of Mirror-SD's draft while its target verified)."""
    ar, sd, mirror = records.get("ar"), records.get("sd"), records.get("mirror")
    out: dict = {}
    if d := _durations(ar, TARGET_FORWARD):
        out["target"] = median(d)
    # beside the draft: the steps whose lanes really worked at once, Mirror-SD's own where it
    # has any, else a variant's (gated, a run may take all its steps in turn)
    beside, once = next(((m, once) for m in ["mirror", *(v for v in records if v != "mirror" and variant_of(v)[0] == "mirror")]
                         if records.get(m) is not None and (once := steps_at_once(records[m]))), (None, set()))
    window = _common_window(sd, records[beside] if beside else None, once)
    if d := _verify_forwards(sd, window):
        out["verify_alone"], out["verify_alone_all"] = median(d), sorted(d)
    if beside and (d := [t for s, t in verify_forwards(records[beside], window).items() if s in once]):
        out["verify_beside"], out["verify_beside_all"] = median(d), sorted(d)
        out["beside_method"] = beside
    out["verify_window"] = window
    if d := _per_drafted_token(sd, "draft") or _per_drafted_token(mirror, "fallback"):
        out["draft"] = median(d)
    if d := _durations(mirror, {"branches"}, "draft"):
        out["draft_beside"] = median(d)
    out["gamma"] = _gamma(sd) or _gamma(mirror)
    return out


def contention(c: dict) -> dict:
    """Slowdowns from sharing the hardware (1.0 = none): verify beside the draft over verify
    alone (medians at one window length); one draft forward over a batch of branches beside
    the target over a one-token draft forward alone."""
    out = {}
    if c.get("verify_alone") and c.get("verify_beside") and c.get("verify_window") is not None:
        out["verify"] = c["verify_beside"] / c["verify_alone"]
    if c.get("draft") and c.get("draft_beside"):
        out["draft"] = c["draft_beside"] / c["draft"]
    return out


def lanes_at_once(rec: RunRecord | None) -> tuple[int, int]:
    """(verify steps in which the draft lane worked while the target lane did, verify steps):
    read from the spans, so the count's denominator is the cards' verify steps (the engine's
    own count leaves out the last step, which drafts no next window)."""
    if rec is None:
        return 0, 0
    steps = {e.step for e in rec.events if isinstance(e, Verify)}
    return len(steps_at_once(rec) & steps), len(steps)


def steps_undrafted(rec: RunRecord | None) -> int:
    """Verify steps that verified no drafted window: plain target decodes, where the priced
    windows judged drafting not worth it (neither lanes at once nor in turn: no draft ran)."""
    return sum(1 for e in (rec.events if rec else []) if isinstance(e, Verify) and not e.drafted)


def steps_in_turn(rec: RunRecord | None) -> int:
    """Verify steps whose next window the draft wrote after the verdict, the lanes in turn: those
    neither at once nor a plain decode, less the run's last step (it drafts no next window),
    so that with the lanes at once, the plain decodes and the last step they add up to the
    verify steps, as the card's hits row counts them."""
    verifies = [e for e in (rec.events if rec else []) if isinstance(e, Verify)]
    if not verifies:
        return 0
    steps, once = {e.step for e in verifies}, steps_at_once(rec)
    last = max(steps)
    last_counted = last not in once and any(e.step == last and e.drafted for e in verifies)
    return max(0, len(steps) - len(once & steps) - steps_undrafted(rec) - last_counted)


def steps_at_once(rec: RunRecord | None) -> set[int]:
    """The steps in which the draft lane worked while the target lane did (from the spans)."""
    lanes: dict[int, dict[str, list]] = {}
    for s in (rec.spans if rec else []):
        lanes.setdefault(s.step, {}).setdefault("draft" if s.lane == "draft" else "target", []).append(s)
    return {step for step, by in lanes.items() if any(
        d.start_ns < t.end_ns and t.start_ns < d.end_ns for d in by.get("draft", []) for t in by.get("target", []))}


def early_exit_share(rec: RunRecord | None) -> dict | None:
    """Mirror-SD's hits by where their root came from, and the early exit's recall."""
    if rec is None:
        return None
    exits = {e.step: e for e in rec.events if isinstance(e, EarlyExit)}
    if not exits:
        return None
    verifies = {e.step: e for e in rec.events if isinstance(e, Verify)}
    taken = [b for b in rec.events if isinstance(b, DraftBranch) and b.status == "taken"]
    from_exit = sum(1 for b in taken if b.step in exits and b.depth < len(exits[b.step].token_ids)
                    and b.root_token in exits[b.step].token_ids[b.depth])
    held = checked = top1 = 0
    for step, ee in exits.items():
        v = verifies.get(step)
        if v is None or v.accepted >= len(ee.token_ids):
            continue
        checked += 1
        row = ee.token_ids[v.accepted]
        held += v.token in row
        top1 += bool(row) and row[0] == v.token
    return {"hits": len(taken), "hits_from_exit": from_exit, "hits_from_draft": len(taken) - from_exit,
            "steps": checked, "exit_held": held, "exit_top1": top1,
            "kappa": max((len(r) for e in exits.values() for r in e.token_ids), default=0),
            "layer": next(iter(exits.values())).layer, "lens": next(iter(exits.values())).lens}


def cross_sentence(meta: dict) -> str:
    """A cross-tokenizer pair: the draft proposes only the shared tokens; how much of this
    run's AR output they cover ('' for a same-tokenizer pair)."""
    cross = (meta or {}).get("cross")
    if not cross:
        return ""
    sentence = (f"Cross-tokenizer pair: the draft proposes only the {cross['shared_tokens']:,} tokens "
                f"both vocabularies spell the same ({cross['shared_share']:.0%} of the target's "
                f"{cross['target_tokens']:,})")
    if cross.get("ar_coverage") is not None:
        sentence += (f"; {cross['ar_coverage']:.0%} of this run's AR output "
                     f"({cross.get('ar_tokens', '?')} tokens) are among them, the rest only the "
                     f"target can write (a correction or a bonus token)")
    return sentence + "."


LANES_TIP = ("Verify steps in which the draft wrote its branches while the target finished the "
             "verify (the lanes at once); the other steps ran one lane after the other, as SD does: "
             "Mirror-SD chose per step, from the step times it measured, whichever was faster.")


def lanes_badge(method: str, rec: RunRecord) -> str:
    """'gated: draft then target in 15 of 17 steps' (mostly in turn, as SD orders them; `steps_in_turn`) or
    'gated: draft beside the target in 9 of 17 steps' for a Mirror-SD run whose overlap gate chose per step
    ('' for the other methods and for Mirror-SD with its lanes at once in every step, unless a trace
    of it ran mostly in turn or drafted nothing)."""
    if variant_of(method)[0] != "mirror":
        return ""
    at_once, steps = lanes_at_once(rec)
    if not steps:
        return ""
    decoded = steps_undrafted(rec)
    if 2 * decoded >= steps:  # mostly no draft at all: its priced windows, not the gate
        return f"priced windows: no draft in {decoded} of {steps} steps"
    if turned := ran_as_sd(method, rec):  # mostly in turn: what it mostly did (the last step drafts no next window)
        return f"ran as SD: draft, then target, in {as_sd_count(turned, short=True)}"
    if always_overlapped(method):  # beside the target in every step: its pane's tag says so
        return ""
    return f"gated: draft beside the target in {at_once} of {steps} steps"


def as_sd_count(turned: tuple[int, int], short: bool = False) -> str:
    """How many steps a gated run ran as SD, from `ran_as_sd`'s (steps in turn, verify steps):
    'all 11 of its steps that drafted a next window' where that is every step but the last (it
    has no next window to draft), so the count reads as all of them; else '11 of its 14 steps'.
    `short`: the tile's words ('all 11 drafting steps', '11 of 14 steps')."""
    k, n = turned
    if k == n - 1:
        return f"all {k} drafting steps" if short else f"all {k} of its steps that drafted a next window"
    return f"{k} of {n} steps" if short else f"{k} of its {n} steps"


def ran_as_sd(method: str, rec: RunRecord | None) -> tuple[int, int] | None:
    """(steps in turn, verify steps) for a gated Mirror-SD run whose gate chose SD's order (the
    draft, then the target) in most of its steps, so its speed is SD's way of working and not
    the overlap's; None otherwise (the other methods, the always-overlapped variant, a run that
    mostly overlapped or mostly drafted nothing)."""
    if rec is None or variant_of(method)[0] != "mirror":
        return None
    at_once, steps = lanes_at_once(rec)
    if not steps or 2 * at_once >= steps or 2 * steps_undrafted(rec) >= steps:
        return None
    return steps_in_turn(rec), steps
