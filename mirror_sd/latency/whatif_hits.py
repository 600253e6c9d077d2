"""Where the What-if's hit rate comes from, and what Mirror-SD over SD does as it moves.

On a CPU whose cores both lanes share, the overlap gate (engine/mirror/gate.py) runs most
steps with the lanes in turn; only the overlapped steps hit or miss, often 0-2 of a run's
~20. A profile that gives the lanes devices of their own prices those in-turn steps as
overlapped ones at a hit rate, and the rule for that rate is:

  1. the run's own, pooled over its overlapped steps, when it has at least MIN_OVERLAPPED;
  2. else the run's own with its steps in turn that the exit check (engine/mirror/exit_check.py)
     read after the run counted in (would they have hit had the lanes overlapped: measured to
     agree with the lanes' own outcome on 366 of 366 overlapped steps, docs/algorithm.md), when
     the two make at least MIN_OVERLAPPED;
  3. else the rate measured on this pair in a benchmark with the lanes always overlapped
     (mirror_sd/data/measured.json "mirror_hit_rate_overlapped"), only for the pair and the
     settings it was measured at;
  4. else unknown: the figures take UNKNOWN_RATE and the series below shows the range.

MIN_OVERLAPPED = 8: at 8 steps a rate's binomial standard error is at most 0.5 / sqrt(8) =
0.18, about the spread of the per-run rates in the measuring benchmark (0.19 over its runs
with 4 or more overlapped steps). From there on a run's own prompt says about as much as the
pooled figure, and it is about this run's text.

`hit_rate_series` gives Mirror-SD over SD at hit rates 0, 0.25, 0.5, 0.75, 1 and the source's,
and the break-even rate where Mirror-SD passes SD. Every figure here is a projection.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from mirror_sd import measured
from mirror_sd.latency import whatif as wi

MIN_OVERLAPPED = 8
MEASURED = "mirror_hit_rate_overlapped"  # the measured.json entry
UNKNOWN_RATE = 0.5  # the figures' rate where none is known (the series gives the range)
SERIES_RATES = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class HitSource:
    kind: str  # "run" | "checked" (the run's, the exit check's steps in) | "measured" | "set" (by hand) | "unknown"
    rate: float | None  # None: unknown
    steps: int  # overlapped steps behind the rate (this run's, or the benchmark's)
    run_steps: int  # this run's overlapped steps
    run_hits: int
    note: str = ""  # e.g. "at budget 14, from the verdict ranks": the run's rate at another budget

    @property
    def used(self) -> float:
        """The rate the projection's figures take."""
        return UNKNOWN_RATE if self.rate is None else self.rate

    @property
    def reweight(self) -> bool:
        """Whether every drafted step is priced at the rate (it is not this run's own)."""
        return self.kind not in ("run", "checked")

    def words(self) -> str:
        """The source in a few words, with the steps behind it."""
        if self.kind == "run":
            return (f"hit rate {self.rate:.0%}, this run's {_steps(self.steps, 'overlapped step')}"
                    + (f" ({self.note})" if self.note else ""))
        if self.kind == "checked":
            return (f"hit rate {self.rate:.0%}, this run's {_steps(self.steps)} that drafted a window: "
                    f"{self.run_steps} with the lanes overlapped, {self.steps - self.run_steps} in turn checked "
                    f"after the run (the exit check)")
        if self.kind == "measured":
            return (f"hit rate {self.rate:.0%}, measured on this pair over {_steps(self.steps, 'overlapped step')} "
                    f"in a benchmark (lanes always overlapped; this run: {self.run_steps}, fewer than "
                    f"{MIN_OVERLAPPED})")
        if self.kind == "set":
            return f"hit rate {self.rate:.0%}, set by hand"
        return (f"hit rate unknown (this run: {_steps(self.run_steps, 'overlapped step')}, fewer than "
                f"{MIN_OVERLAPPED}; no benchmark measured this pair at these settings): the figures take "
                f"{self.used:.0%}")

    def short(self) -> str:
        """The source in a clause ('this pair's measured 60% (68 overlapped steps, ...)')."""
        if self.kind == "run":
            return (f"this run's {self.rate:.0%} ({_steps(self.steps, 'overlapped step')}"
                    + (f", {self.note})" if self.note else ")"))
        if self.kind == "checked":
            return f"this run's {self.rate:.0%} ({_steps(self.steps)}, {self.steps - self.run_steps} checked after the run)"
        if self.kind == "measured":
            return (f"this pair's measured {self.rate:.0%} ({_steps(self.steps, 'overlapped step')} in a "
                    f"benchmark with the lanes always overlapped)")
        if self.kind == "set":
            return f"the {self.rate:.0%} set by hand"
        return f"an unknown hit rate (this run: {_steps(self.run_steps, 'overlapped step')})"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "rate": self.rate, "steps": self.steps, "run_steps": self.run_steps,
                "run_hits": self.run_hits, "used": self.used, "words": self.words(), "short": self.short()}


def _steps(n: int, what: str = "step") -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def measured_applies(settings: dict | None, pair: dict | None) -> bool:
    """Whether the measured rate is this run's pair's at the settings it was measured with."""
    cond = measured.values(MEASURED)["applies_to"]
    pair, settings = pair or {}, settings or {}
    if pair.get("target") != cond["target"] or pair.get("draft") != cond["draft"]:
        return False
    return all(k in settings and _same(settings[k], v) for k, v in cond["settings"].items())


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def variant_settings(name: str, settings: dict | None) -> dict:
    """The run's settings with a variant's ':key=value' changes ('mirror:exit_layer=21')."""
    out = dict(settings or {})
    for part in str(name).split(":")[1:]:
        key, _, value = part.partition("=")
        if key:
            out[key] = value
    return out


def hit_source(recorded: list, settings: dict | None = None, pair: dict | None = None,
               by_hand: float | None = None) -> HitSource:
    """The hit rate of Mirror-SD's recorded steps (`recorded`: RecordedSteps, its runs) by the
    rule above; `by_hand`: a rate set in the inputs, which wins."""
    mine = [r for r in recorded if r.method == "mirror"]
    steps, hits = sum(r.overlapped for r in mine), sum(r.hits for r in mine)
    if by_hand is not None:
        return HitSource("set", float(by_hand), 0, steps, hits)
    if steps >= MIN_OVERLAPPED:
        return HitSource("run", hits / steps, steps, steps, hits)
    checked, found = sum(r.checked for r in mine), sum(r.checked_hits for r in mine)
    if checked and steps + checked >= MIN_OVERLAPPED:
        return HitSource("checked", (hits + found) / (steps + checked), steps + checked, steps, hits)
    if measured_applies(settings, pair):
        m = measured.values(MEASURED)
        return HitSource("measured", m["hits"] / m["overlapped_steps"], m["overlapped_steps"], steps, hits)
    return HitSource("unknown", None, 0, steps, hits)


def with_source(profile: wi.Profile, source: HitSource) -> wi.Profile:
    """`profile` pricing its expected overlapped steps by `source`: at the run's own rate
    (its recorded hits and misses kept), or every drafted step at the source's."""
    return replace(profile, hit_rate=None if source.kind == "run" else source.used,
                   reweight=source.reweight, hit_source=source)


def hit_rate_series(project_at, source: HitSource, rates=SERIES_RATES, own: float | None = None) -> dict:
    """Mirror-SD over SD against the hit rate. `project_at(h)`: (SD's, Mirror-SD's speedup over
    AR) with every drafted Mirror-SD step priced at hit rate h; `own`: the ratio at the source's
    rate as the projection prices it (the run's own recorded hits), else project_at's. Returns
    {"points": [{"hit_rate", "mirror_over_sd", "source": bool}], "break_even": the rate where
    Mirror-SD passes SD (0.0: at any rate; None: not up to 100%), "source": the source's words,
    "projection": True}."""
    points = []
    mine = round(source.used, 4)
    for h in sorted(set(rates) | {mine}):
        sd, mirror = project_at(h)
        ratio = mirror / sd if sd and mirror is not None else None
        is_source = source.rate is not None and abs(h - mine) < 1e-9
        if is_source and own is not None:
            ratio = own
        points.append({"hit_rate": h, "mirror_over_sd": ratio, "source": is_source})
    return {"projection": True, "points": points, "break_even": break_even(project_at),
            "source": source.words(), "source_short": source.short(), "kind": source.kind,
            "rate": source.rate}


def shown(ratio: float) -> float:
    """Mirror-SD over SD as the page prints it (2 decimals): whether it passes SD is read off this."""
    return float(f"{ratio:.2f}")


def break_even(project_at, tol: float = 0.005) -> float | None:
    """The least hit rate at which Mirror-SD's projected speedup reaches SD's (bisection: it
    grows with the hit rate): 0.0 where it passes at any rate, None where not even at 100%."""
    def ahead(h):
        sd, mirror = project_at(h)
        return None if not sd or mirror is None else mirror >= sd

    lo_ok, hi_ok = ahead(0.0), ahead(1.0)
    if lo_ok is None or hi_ok is None or not hi_ok:
        return None
    if lo_ok:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ahead(mid) else (mid, hi)
    return hi


def _lead(where: str, be: float | None) -> str:
    if be is None:
        return f"{where} Mirror-SD does not pass SD at any hit rate up to 100%"
    if be == 0.0:
        return f"{where} Mirror-SD passes SD at any hit rate"
    return f"{where} Mirror-SD passes SD above a {be:.0%} hit rate"


def series_words(series: dict | None, where: str) -> str:
    """One plain line: where Mirror-SD passes SD on `where` ("On the accelerator pair"), and
    what the source's rate gives (or the range, where the rate is unknown). Whether it passes
    agrees with every figure the line prints, as printed (`shown`)."""
    if not series:
        return ""
    be = series["break_even"]
    pts = {p["hit_rate"]: p["mirror_over_sd"] for p in series["points"] if p["mirror_over_sd"] is not None}
    if not pts:
        return _lead(where, be)
    low, high = min(pts.values()), max(pts.values())
    own = next((p for p in series["points"] if p["source"] and p["mirror_over_sd"] is not None), None)
    if high - low < 0.005:  # one figure, the source's where it has one (its recorded hits priced as such)
        flat = own["mirror_over_sd"] if own is not None else low
        lead = (f"{where} Mirror-SD matches SD at any hit rate" if shown(flat) == 1.0 else  # as printed: 1.00×
                _lead(where, 0.0 if shown(flat) >= 1.0 else None))
        return lead + (
            f" (about {flat:.2f}× SD whatever the hit rate: in this run a hit still left as much "
            f"draft work after its verdict as a miss's rollout, so the model prices hits and misses alike)")
    ahead = [shown(v) >= 1.0 for v in pts.values()]
    if all(ahead) or not any(ahead):  # every figure on one side of 1x
        be = 0.0 if all(ahead) else None
    elif be in (None, 0.0) or (own is not None and (shown(own["mirror_over_sd"]) >= 1.0) != (own["hit_rate"] >= be)):
        be = "both"  # the figures straddle 1x and the source's lies off the break-even's side
    if own is None:
        tail = f"at {series['source_short']} it projects {low:.2f}-{high:.2f}× SD over 0-100%"
        return f"{where}, {tail[3:]}" if be == "both" else f"{_lead(where, be)}; {tail}"
    if be != "both":
        return f"{_lead(where, be)}; {series['source_short']} gives {own['mirror_over_sd']:.2f}× SD"
    # the source's figure (this run's steps as priced) lies on the other side of the break-even
    # read off every drafted step at one rate: both figures, and no claim either contradicts
    rest = [v for h, v in pts.items() if h != own["hit_rate"]] or [low, high]
    return (f"{where} Mirror-SD gives {own['mirror_over_sd']:.2f}× SD at {series['source_short']}, as this "
            f"run's steps are priced; {min(rest):.2f}-{max(rest):.2f}× SD with every drafted step at one hit "
            f"rate from 0 to 100%")


def ratio_range(series: dict | None) -> tuple[float, float] | None:
    """(least, greatest) Mirror-SD over SD over the series' hit rates (None without points)."""
    pts = [p["mirror_over_sd"] for p in (series or {}).get("points", []) if p["mirror_over_sd"] is not None]
    return (min(pts), max(pts)) if pts else None
