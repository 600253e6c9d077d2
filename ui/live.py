"""The live board's data: each run's events as small items that the page draws (ui/live.js).

While a method's run is timed, the server renders no HTML for it: the polling handler turns
the events that arrived since its last poll into items (token texts, kinds, times in ms: a
few hundred bytes per step) and sends them, with those of the last two seconds again, as JSON
in one hidden value; the page draws them.
When the last run ends, the page gets every run's items again at the engine's own times
(race_items) and replays the runs together (the race), then shows the panes rendered from the full records.

Items (each has `k`, its kind, and `t`, its arrival in ms from the run's start):
  w  a window of drafted tokens, before the target's verdict (`d`: texts)
  x  the early exit's top guesses (`l`: layer, `g`: per position, its three best texts)
  b  a branch the draft rolled out beside the target (`r`: root, `d`: texts, `st`: status)
  v  the verdict (`a`: accepted, `d`: drafted texts, `y`: the target's own token, `kd`; `h`:
     where the window came from a late hit, how late, in whole ms: runs.late_ms)
  c  committed tokens (`x`: [text, kind] pairs, kinds as ui/runs.analyse gives them)
  p  a span on the target or draft lane (`l`: "t" | "d", `a` .. `b`: start .. end, `n`)
  f  the run's end (`n`: tokens, `w`: wall time, `c`: stopped); e / n: an error / a notice
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from mirror_sd.engine.events import (Commit, DraftBranch, EarlyExit, Error, Finish, Notice, Span,
                                     StepStart, Verify)

from .runs import (VARIANTS, RunRecord, Verdicts, colour, drafted_in_turn, label, measured, method_names, step_marks, tag,
                   token_kind)
from .why import LANES_TIP, lanes_badge

# the board's fixed HTML: Gradio re-renders a gr.HTML's template when its value changes, and
# this one has no ${value} in it, so the JSON messages never touch what the script drew
BOARD_TEMPLATE = (
    '<div class="msd-board"><div class="msd-board-bar"><span class="msd-board-say"></span>'
    '<span class="msd-board-ctl"><span class="msd-blab">race speed</span>'
    '<span class="msd-board-speeds"></span>'
    '<button type="button" class="msd-replay">↻ Replay the race</button></span></div>'
    '<div class="msd-board-note"></div>'
    '<div class="msd-bmini" aria-label="the race in brief: tokens written so far, one bar per run"></div>'
    '<div class="msd-board-panes"></div>'
    '<div class="msd-tvt" aria-label="tokens written against time, one line per run"></div>'
    '<div class="msd-board-wait">The verdict and the figures appear under the timeline when the race ends '
    '(“instant” ends it now).</div></div>')
TIMELINE_TEMPLATE = '<div class="msd-btl-host"></div>'
BOARD_JS = (Path(__file__).with_name("live.js")).read_text(encoding="utf-8")

GUESSES = 3  # the early exit's best guesses shown per position
POSITIONS = 3  # window positions whose guesses are shown
LANES = {"target": "t", "draft": "d"}


def _json(message: dict) -> str:
    """Compact JSON; '<' escaped, so no model text reads as a tag to anything on the way."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def _ms(ns: int) -> float:
    return round(ns / 1e6, 2)


class LiveFeed:
    """One run's items, built incrementally from its record (each event is read once)."""

    def __init__(self, method: str):
        self.method = method
        self.items: list[dict] = []
        self.n = 0  # events read so far
        self.tokens = 0  # committed tokens so far
        self.origin = "none"  # where the next window comes from (as runs.analyse)
        self.step_origin: dict[int, str] = {}
        self.hit_step: int | None = None  # the step whose taken branch is the next window
        self.window_late: dict[int, int | None] = {}  # step -> its window's late hit, in ms (runs.late_ms)
        self.verified: dict[int, Verify] = {}
        self.raced: set[int] = set()  # Mirror-SD steps with an early exit or branches
        # a branch forward after its step's verdict: drawn as the target waiting; how late a hit was
        self.verdicts = Verdicts()

    def pull(self, rec: RunRecord) -> list[dict]:
        """Items for the events that arrived since the last pull."""
        n = min(len(rec.events), len(rec.times_ns))
        start = len(self.items)
        for i in range(self.n, n):
            item = self._item(rec, rec.events[i])
            if item is not None:
                item["t"] = _ms(rec.times_ns[i])
                self.items.append(item)
        self.n = n
        return self.items[start:]

    def _text(self, rec: RunRecord, tok: int) -> str:
        return rec.id_texts.get(tok, f"#{tok}")

    def _item(self, rec: RunRecord, ev) -> dict | None:
        if isinstance(ev, StepStart):
            self._window(ev)
            return {"k": "w", "s": ev.step, "d": [self._text(rec, t) for t in ev.window]} if ev.window else None
        if isinstance(ev, DraftBranch):
            return self._branch(rec, ev)
        if isinstance(ev, EarlyExit):
            self.raced.add(ev.step)
            return {"k": "x", "s": ev.step, "l": ev.layer,
                    "g": [[self._text(rec, t) for t in row[:GUESSES]] for row in ev.token_ids[:POSITIONS]]}
        if isinstance(ev, Verify):
            self.verified[ev.step] = ev
            item = {"k": "v", "s": ev.step, "a": ev.accepted, "kd": ev.kind,
                    "d": [self._text(rec, t) for t in ev.drafted], "y": self._text(rec, ev.token)}
            if self.window_late.get(ev.step) is not None:
                item["h"] = self.window_late[ev.step]
            return item
        if isinstance(ev, Commit):
            return self._commit(rec, ev)
        if isinstance(ev, Span):
            shown = self.verdicts.see(ev)
            if ev.lane not in LANES:
                return None
            return {"k": "p", "l": LANES[ev.lane], "n": shown, "s": ev.step,
                    "a": _ms(ev.start_ns - rec.t0_ns), "b": _ms(ev.end_ns - rec.t0_ns)}
        if isinstance(ev, Finish):
            # "r": the run's end-to-end speed as its pane's head prints it (runs.measured), so the
            # race chart's key gives that very figure, not one recomputed from rounded times
            return {"k": "f", "n": int(ev.stats.get("new_tokens", self.tokens)),
                    "w": round(float(ev.stats.get("wall_s", 0.0)) * 1e3, 3),
                    "r": measured(rec).get("tokens_per_s"), "c": bool(ev.stats.get("cancelled"))}
        if isinstance(ev, (Error, Notice)):
            return {"k": "e" if isinstance(ev, Error) else "n", "m": ev.message}
        return None

    def _window(self, ev: StepStart) -> None:
        """Where the step's window came from, as runs.analyse reads it at the same event. The
        engine sends a step's verdict, commit, branches and then its spans before the next step
        starts (engine/mirror/decoder.py `_after_verdict`), so by this StepStart the verdict's
        time and the end of the branches of the step that hit are in: a late hit is decided here,
        from the events seen so far, before its window's tokens commit."""
        origin = self.origin if ev.window else "none"
        self.step_origin[ev.step] = origin
        self.window_late[ev.step] = self.verdicts.late_ms(self.hit_step) if origin == "hit" else None

    def _branch(self, rec: RunRecord, ev: DraftBranch) -> dict | None:
        """The window's origin as runs.analyse tracks it; a branch beside the target as an item."""
        texts = [self._text(rec, t) for t in ev.tokens]
        if ev.status == "serial":
            if ev.step not in self.step_origin:
                self.origin = "draft"  # the first window, drafted before its step
            elif ev.step not in self.verified:
                self.step_origin[ev.step] = "draft"  # plain SD: drafted inside its step
                return {"k": "w", "s": ev.step, "d": texts}
            elif drafted_in_turn(ev, ev.step in self.raced):
                self.origin = "turn"  # the lanes in turn: neither a hit nor a miss
            else:
                self.origin = "fallback"  # a miss: the next window drafted after the verdict
            return None
        self.raced.add(ev.step)
        if ev.status == "taken":
            self.origin, self.hit_step = "hit", ev.step
        return {"k": "b", "s": ev.step, "r": self._text(rec, ev.root_token), "d": texts,
                "st": ev.status, "rk": ev.rank}

    def _commit(self, rec: RunRecord, ev: Commit) -> dict:
        origin = self.step_origin.get(ev.step, "none")
        out = []
        for tok, source in zip(ev.token_ids, ev.sources):
            kind = token_kind(source, origin, self.window_late.get(ev.step))
            text = rec.token_texts[self.tokens] if self.tokens < len(rec.token_texts) else self._text(rec, tok)
            out.append([text, kind])
            self.tokens += 1
        item = {"k": "c", "s": ev.step, "x": out}
        v = self.verified.get(ev.step)
        if v is not None and v.kind == "correction" and v.accepted < len(v.drafted):
            item["r"] = self._text(rec, v.drafted[v.accepted])  # the rejected draft, struck through
        return item


def _heads(methods) -> list[dict]:
    return [{"m": m, "label": label(m), "colour": colour(m), "on": m in methods, "tag": tag(m)}
            for m in method_names() if m not in VARIANTS or m in methods]


OVERLAP_S = 2.0  # each message repeats the items of the messages sent in this many seconds
RESYNC_S = 5.0  # and a run's whole item list goes again at least this often (a longer burst)


class LivePush:
    """What the polling handler sends while a job runs: each run's new items, with the items
    of the messages of the last OVERLAP_S seconds again. The server's loop may hold frames back
    while both cores decode and then send several at once, and the page sees only the last of
    a burst; repeating the recent ones makes such a burst no gap (the page keeps what it has).
    A longer burst leaves a gap the page cannot fill from the repeats, so each run's whole list
    goes again every RESYNC_S seconds, and in every message of the OVERLAP_S seconds after the
    run's end (also when only the next run has news): a finished pane holds every committed
    token whatever the page missed."""

    def __init__(self, methods, round_no: int = 1, rounds: int = 1, overlap_s: float = OVERLAP_S):
        self.methods = tuple(methods)
        self.feeds: dict[str, LiveFeed] = {}
        self.recent: dict[str, list[tuple[float, int]]] = {}  # (when, first new item) per message
        self.seq = 0
        self.round = (round_no, rounds)
        self.overlap_s = overlap_s
        self.resynced: dict[str, float] = {}  # when each run's whole list was last sent

    def start(self) -> str:
        self.seq += 1
        return _json({"op": "start", "seq": self.seq, "runs": _heads(self.methods),
                      "round": list(self.round)})

    def update(self, records: dict[str, RunRecord], current: str | None,
               now: float | None = None) -> str | None:
        """The new items since the last call (and the recent ones again) as one JSON message;
        None when nothing is new."""
        now = time.monotonic() if now is None else now
        runs, fresh = {}, False
        for m in self.methods:
            rec = records.get(m)
            if rec is None:
                continue
            feed = self.feeds.setdefault(m, LiveFeed(m))
            before = len(feed.items)
            new = bool(feed.pull(rec))
            recent = [(t, i) for t, i in self.recent.get(m, []) if now - t <= self.overlap_s]
            self.recent[m] = recent = recent + [(now, before)] if new else recent
            fresh = fresh or new
            ended = bool(feed.items) and feed.items[-1]["k"] == "f"
            due = now - self.resynced.setdefault(m, now) >= RESYNC_S
            if not recent and not (ended and due):  # an ended run rides along now and then
                continue
            start = recent[0][1] if recent else 0
            if (ended and recent) or due:
                start, self.resynced[m] = 0, now  # everything again: no gap survives this
            runs[m] = {"from": start, "items": feed.items[start:]}
        if not fresh:  # the page holds the last message sent: nothing to add
            return None
        self.seq += 1
        return _json({"op": "feed", "seq": self.seq, "runs": runs, "current": current})


LATE_START_S = 0.1  # a first token this much after the earliest one is worth a word on the race


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def race_note(records: dict[str, RunRecord]) -> str:
    """The race replays each run from its own start, so a run whose first token came later
    (SD and Mirror-SD draft and check a first window before theirs) starts behind: which, by
    how much, and that the cards' end-to-end speed counts that time (their decode speed leaves it out) ('' when none is
    LATE_START_S behind the earliest)."""
    first = {m: measured(rec).get("prefill_s") for m, rec in records.items()
             if rec is not None and rec.finish is not None}
    first = {m: t for m, t in first.items() if t is not None}
    if len(first) < 2:
        return ""
    lead = min(first, key=first.get)
    late = [m for m in first if first[m] - first[lead] >= LATE_START_S]
    if not late:
        return ""
    one = len(late) == 1
    at = _names([f"{label(m)} at {first[m]:.2f} s" for m in late])
    gaps = _names([f"{first[m] - first[lead]:.2f}" for m in late])
    why = "" if "ar" in late else f" ({'it drafts' if one else 'each drafts'} and checks a first window)"
    # each late run by name and by how much, behind the first to start (AR may be among them)
    who = "it starts" if one else f"{_names([label(m) for m in late])} start"
    return (f"First tokens: {label(lead)} at {first[lead]:.2f} s, {at}{why}, so "
            f"{who} {gaps} s behind{'' if one else ' ' + label(lead)}. End-to-end speed counts this; "
            f"decode speed does not.")


RACE_AT = {"w": "check", "x": "exit", "b": "verdict", "v": "verdict", "c": "verdict"}


def race_items(rec: RunRecord, items: list[dict]) -> list[dict]:
    """The run's items for the race, at the engine's times. An event reaches the page when the
    engine's generator yields it, which can be later than the moment it stands for: Mirror-SD
    yields a step's verdict and tokens after the draft lane's work of that step (its next window
    or its branches), so at arrival times the race would show its tokens late and its timeline
    blank while it already decoded. Here a step's items move to the engine's marks (never later
    than their arrival, and in their order), and a span starts at its own start (the page grows
    it to its end)."""
    marks = step_marks(rec)
    out, floor = [], 0.0
    for item in items:
        item = dict(item)
        if item["k"] == "p":
            item["t"] = item["a"]
        else:
            at = marks.get(item.get("s"), {}).get(RACE_AT.get(item["k"], ""))
            t = min(item["t"], at) if at is not None else item["t"]
            item["t"] = floor = max(floor, t)  # in order: a step's items never before the last one's
        out.append(item)
    return sorted(out, key=lambda it: it["t"])  # stable: the items of a moment keep their order


def race_message(records: dict[str, RunRecord], methods=None, autoplay: bool = True, shown=None,
                 tie: str = "") -> str:
    """Every finished run's items at the engine's times: the page replays them together.
    `shown`: how many interleaved runs each method had, when these are each one's middle run; `tie`:
    the runs' word on the finishing order where they cannot tell the winner from the rest (the
    race's last line says it after the order)."""
    methods = tuple(methods or records)
    runs = {}
    for m, rec in records.items():
        if rec is not None:
            feed = LiveFeed(m)
            feed.pull(rec)
            runs[m] = {"items": race_items(rec, feed.items), "wall": round(rec.duration_ns / 1e6, 1)}
            lanes = lanes_badge(m, rec)
            if lanes:
                runs[m]["lanes"] = lanes
    complete = all(records.get(m) is not None and records[m].complete for m in methods)
    return _json({"op": "race", "seq": time.time_ns(), "runs": runs, "heads": _heads(methods), "lanesTip": LANES_TIP,
                  "note": race_note(records), "autoplay": bool(autoplay and complete and runs),
                  "runs_of": int(shown) if shown else None, "tie": tie})
