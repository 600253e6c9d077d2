"""The live board's data (ui/live.py): each run's events as small JSON items, built once per
event while the run is timed; the handler's frames while a run is in progress carry those
items and no rendered HTML; the race message at the end holds every run with its final times."""
from __future__ import annotations

import json

from ui.live import LiveFeed, LivePush, race_items, race_message, race_note
from ui.runs import RunRecord, analyse
from ui_records import tiny_records


def _merge(received: dict, message: str) -> None:
    """ui/live.js's merge rule: append the items past what the page holds."""
    for m, part in json.loads(message)["runs"].items():
        have = received.setdefault(m, [])
        assert part["from"] <= len(have), "a gap the overlap should have covered"
        have.extend(part["items"][len(have) - part["from"]:])


def test_items_give_the_same_tokens_and_kinds_as_the_rendered_panes():
    for m, rec in tiny_records().items():
        items = LiveFeed(m).pull(rec)
        committed = [tuple(x) for it in items if it["k"] == "c" for x in it["x"]]
        want = [(t.text, t.kind) for t in analyse(rec).tokens]
        assert committed == want, m
        assert [it["t"] for it in items] == sorted(it["t"] for it in items)
        assert items[-1]["k"] == "f" and items[-1]["n"] == len(want)
        from ui.runs import live_stats  # the pane head's speed, carried so the race chart prints that figure
        assert items[-1]["r"] == live_stats(rec)["tokens_per_s"]
        verdicts = [it for it in items if it["k"] == "v"]
        rejected = [it for it in items if it["k"] == "c" and "r" in it]
        assert len(rejected) == sum(v["kd"] == "correction" and v["a"] < len(v["d"]) for v in verdicts)
        if m == "mirror":
            assert any(it["k"] == "x" and it["g"] for it in items)  # the early exit's guesses
            assert any(it["k"] == "b" for it in items)  # branches beside the target
            assert {it["l"] for it in items if it["k"] == "p"} == {"t", "d"}


def test_pulled_event_by_event_the_items_are_those_of_one_pull():
    rec = tiny_records()["mirror"]
    feed, growing = LiveFeed("mirror"), RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts,
                                                  id_texts=rec.id_texts)
    pieces = []
    for ev, t in zip(rec.events, rec.times_ns):
        growing.add(ev, t)
        pieces += feed.pull(growing)
    assert pieces == LiveFeed("mirror").pull(rec)


def test_the_board_marks_a_late_hit_s_window_as_the_settled_panes_do():
    """The real run's events in the engine's order, one hit's branch forward made to end 50 ms
    after its verdict: pulled event by event, the board gives that hit's window's accepted tokens
    "late" and its verdict line the badge's 50 ms, as the settled analysis does; every other
    window's tokens and badges as the analysis has them too."""
    from dataclasses import replace

    from mirror_sd.engine.events import Span
    from ui.runs import verdict_outcome
    rec = tiny_records()["mirror"]
    steps = analyse(rec).steps
    hit = min(s for s, sv in steps.items() if verdict_outcome(sv) == "hit"
              and steps[s + 1].verify is not None and steps[s + 1].verify.accepted)  # its window kept a token
    verdict = max(e.end_ns for e in rec.spans if e.step == hit and e.label in ("suffix", "accept"))
    last = max(i for i, e in enumerate(rec.events) if isinstance(e, Span) and e.step == hit and e.label == "branches")
    events = list(rec.events)
    events[last] = replace(events[last], end_ns=verdict + 50 * 10**6)
    late = RunRecord("mirror", events, list(rec.times_ns), rec.t0_ns, rec.token_texts, rec.id_texts)
    a = analyse(late)
    assert a.steps[hit].late_ms == 50 and a.steps[hit + 1].window_late_ms == 50
    feed, growing, items = LiveFeed("mirror"), RunRecord("mirror", t0_ns=late.t0_ns, id_texts=late.id_texts), []
    growing.token_texts = late.token_texts
    for ev, t in zip(late.events, late.times_ns):
        growing.add(ev, t)
        items += feed.pull(growing)
    kinds = [k for it in items if it["k"] == "c" for _, k in it["x"]]
    assert kinds == [t.kind for t in a.tokens] and "late" in kinds
    assert [k for it in items if it["k"] == "c" and it["s"] == hit + 1 for _, k in it["x"]] == [
        t.kind for t in a.tokens if t.step == hit + 1]
    badges = {it["s"]: it.get("h") for it in items if it["k"] == "v"}
    assert badges == {s: sv.window_late_ms for s, sv in a.steps.items() if sv.verify is not None}
    assert badges[hit + 1] == 50


def test_push_sends_new_items_and_repeats_the_recent_ones():
    """Polled every few events, a quarter of a second apart: a page that merges the messages
    has every item, also when it saw only the last of each burst of up to eight."""
    records = tiny_records()
    rec = records["sd"]
    push, growing = LivePush(("ar", "sd")), RunRecord("sd", t0_ns=rec.t0_ns, token_texts=rec.token_texts,
                                                      id_texts=rec.id_texts)
    assert json.loads(push.start())["op"] == "start"
    messages, now = [], 0.0
    for i, (ev, t) in enumerate(zip(rec.events, rec.times_ns)):
        growing.add(ev, t)
        if i % 5 == 4:
            now += 0.25
            message = push.update({"sd": growing}, "sd", now)
            if message is not None:
                messages.append(message)
    message = push.update({"sd": growing}, None, now + 0.25)
    if message is not None:
        messages.append(message)
    assert push.update({"sd": growing}, None, now + 0.5) is None  # nothing new: nothing sent
    want = LiveFeed("sd").pull(rec)
    for burst in (1, 8):  # the page sees every message, or one in eight
        received: dict = {}
        for message in messages[burst - 1::burst] + ([messages[-1]] if len(messages) % burst else []):
            _merge(received, message)
        assert received["sd"] == want, burst
    assert max(len(m) for m in messages) < 8000, [len(m) for m in messages]


def _page_merge(received: dict, message: str) -> None:
    """ui/live.js's rule: a part past a gap is skipped, else the items past what it holds."""
    for m, part in json.loads(message)["runs"].items():
        have = received.setdefault(m, [])
        if part["from"] <= len(have):
            have.extend(part["items"][len(have) - part["from"]:])


def test_a_finished_run_reaches_the_page_whole_after_any_burst():
    """Two runs one after the other, polled every quarter second; the page sees only the last
    message of each burst, bursts of up to five seconds (longer than the repeat window), and a
    burst may end after the first run's end, on a message with only the second run's news:
    each run the page saw end holds every item, its end and its token count."""
    records = tiny_records()
    want = {m: LiveFeed(m).pull(records[m]) for m in ("ar", "sd")}
    for burst in (1, 3, 9, 20):
        push, messages, now, growing = LivePush(("ar", "sd")), [], 0.0, {}
        for m in ("ar", "sd"):
            rec = records[m]
            growing[m] = RunRecord(m, t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
            for i, (ev, t) in enumerate(zip(rec.events, rec.times_ns)):
                growing[m].add(ev, t)
                if i % 3 == 2:
                    now += 0.25
                    messages.append(push.update(growing, m, now))
        now += 0.25
        messages.append(push.update(growing, None, now))
        sent = [x for x in messages if x is not None]
        seen = sent[burst - 1::burst] + [sent[-1]]  # the last of a burst reaches the page
        received: dict = {}
        for message in seen:
            _page_merge(received, message)
        for m in ("ar", "sd"):
            have = received.get(m, [])
            if burst <= 8:  # within the repeat window: every run whole, its end included
                assert have == want[m], (burst, m)
            if have and have[-1]["k"] == "f":
                assert have == want[m], (burst, m)
                assert sum(len(it["x"]) for it in have if it["k"] == "c") == have[-1]["n"]
        assert received["sd"] == want["sd"], burst  # the last message always arrives


def test_the_race_holds_every_run_and_plays_only_when_all_finished():
    records = tiny_records()
    race = json.loads(race_message(records, ("ar", "sd", "mirror")))
    assert race["op"] == "race" and race["autoplay"] is True
    for m, rec in records.items():
        items = LiveFeed(m).pull(rec)
        key = lambda it: {k: v for k, v in it.items() if k != "t"}
        assert sorted(map(json.dumps, map(key, race["runs"][m]["items"]))) == sorted(map(json.dumps, map(key, items)))
        assert abs(race["runs"][m]["wall"] - rec.duration_ns / 1e6) < 0.1
    # a gated Mirror-SD's pane says in how many of its verify steps the lanes ran at once, counted
    # from its spans; the page's Mirror-SD, at once in every step, says nothing (its tag says it)
    from mirror_sd.engine.events import Verify
    from ui.why import steps_at_once
    mirror = records["mirror"]
    steps = {e.step for e in mirror.events if isinstance(e, Verify)}
    at_once = len(steps_at_once(mirror) & steps)
    assert at_once == len(steps) and "lanes" not in race["runs"]["mirror"]
    both = json.loads(race_message(dict(records, **{"mirror-gated": mirror}), ("ar", "sd", "mirror", "mirror-gated")))
    assert both["runs"]["mirror-gated"]["lanes"] == f"gated: draft beside the target in {at_once} of {len(steps)} steps"
    assert "lanes" not in race["runs"]["sd"] and "lanes" not in race["runs"]["ar"] and race["lanesTip"]
    from ui.render import render_pane  # the settled pane says the same
    assert both["runs"]["mirror-gated"]["lanes"] in render_pane("mirror-gated", mirror, "done")
    assert "s-lanes" not in render_pane("sd", records["sd"], "done")
    partial = json.loads(race_message({"ar": records["ar"]}, ("ar", "sd")))
    assert partial["autoplay"] is False  # SD never ran: nothing to race
    assert "<" not in race_message({"x": _record_with_text("<script>")}, ("x",))


def _record_with_text(text: str) -> RunRecord:
    from mirror_sd.engine.events import Commit, Finish
    rec = RunRecord("x", token_texts=[text])
    rec.add(Commit(0, [5], ["plain"], text), 1)
    rec.add(Finish({"new_tokens": 1, "wall_s": 0.001}, [5], text), 2)
    return rec


def test_while_a_run_is_timed_the_page_gets_items_not_html(monkeypatch):
    """Frames before the last carry no pane HTML with tokens; their live items show each
    run's tokens before that run's end (paced tiny models: several polls per run)."""
    monkeypatch.setenv("MIRROR_SD_TINY_PACE_MS", "15")
    from ui.frames import RESULT_OUTPUTS
    from ui.handlers import Handlers
    from ui.runs import default_methods, method_names
    from ui.state import AppState

    frames = list(Handlers(AppState.tiny()).run(prompt="def hello ( x ) :", max_new_tokens=24,
                                                use_cache=False))
    names = method_names()
    at = 1 + len(names) + RESULT_OUTPUTS.index("live")
    tokens_before_end: dict[str, int] = {}
    ended: set[str] = set()
    for f in frames[:-1]:
        assert not any(isinstance(p, str) and "msd-tok k-" in p for p in f[1:1 + len(names)])
        live = f[at]
        if not isinstance(live, str) or not live:
            continue
        message = json.loads(live)
        for m, part in message.get("runs", {}).items() if message["op"] == "feed" else ():
            for it in part["items"]:
                if it["k"] == "f":
                    ended.add(m)
                elif it["k"] == "c" and m not in ended:
                    tokens_before_end[m] = tokens_before_end.get(m, 0) + len(it["x"])
    ran = default_methods()  # every registry method (Mirror-SD as the page runs it)
    assert set(tokens_before_end) == set(ran), tokens_before_end
    final = frames[-1]
    assert json.loads(final[at])["op"] == "race"
    panes = [p["value"] if isinstance(p, dict) else p for p in final[1:1 + len(names)]]
    assert all('data-state="done"' in p for m, p in zip(names, panes) if m in ran)


def test_the_race_says_which_run_starts_behind_and_by_how_much():
    """Each run races from its own start: a first token 0.1 s or more after the earliest one
    is named with its gap, and the note says the cards' end-to-end speed counts it."""
    records = tiny_records()
    saved = {m: dict(rec.finish.stats) for m, rec in records.items()}
    try:
        for m, t in (("ar", 0.45), ("sd", 0.50), ("mirror", 0.78)):
            records[m].finish.stats["prefill_s"] = t
        note = race_note(records)
        assert note.startswith("First tokens: AR at 0.45 s, Mirror-SD at 0.78 s (it drafts and checks a first "
                               "window), so it starts 0.33 s behind.")
        assert "SD at" not in note.replace("Mirror-SD at", "") and "End-to-end speed counts this; decode speed does not" in note
        assert json.loads(race_message(records))["note"] == note
        records["sd"].finish.stats["prefill_s"] = 0.78
        assert race_note(records).startswith("First tokens: AR at 0.45 s, SD at 0.78 s and Mirror-SD at 0.78 s "
                                             "(each drafts and checks a first window), so SD and Mirror-SD start "
                                             "0.33 and 0.33 s behind AR.")
        for m, t in (("ar", 0.70), ("sd", 0.50), ("mirror", 0.78)):  # SD first: AR is behind it too, named
            records[m].finish.stats["prefill_s"] = t
        assert race_note(records).startswith("First tokens: SD at 0.50 s, AR at 0.70 s and Mirror-SD at 0.78 s, "
                                             "so AR and Mirror-SD start 0.20 and 0.28 s behind SD.")
        records["ar"].finish.stats["prefill_s"] = 0.45
        records["sd"].finish.stats["prefill_s"] = 0.50
        records["mirror"].finish.stats["prefill_s"] = 0.52
        assert race_note(records) == ""  # within 0.1 s of the earliest: nothing to say
    finally:
        for m, rec in records.items():
            rec.finish.stats.clear()
            rec.finish.stats.update(saved[m])


def _mirror_yielding_late() -> RunRecord:
    """Mirror-SD's record with each step's events yielded 300 ms after its verdict, as the
    engine yields them once the draft lane's work of the step is done."""
    rec = tiny_records()["mirror"]
    late = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):
        late.add(ev, t + 300_000_000)
    return late


def test_the_race_shows_each_step_at_the_engine_s_times_not_at_arrival():
    from mirror_sd.engine.events import Span
    rec = _mirror_yielding_late()
    arrived = LiveFeed("mirror").pull(rec)
    raced = race_items(rec, arrived)
    assert len(raced) == len(arrived) and [it["t"] for it in raced] == sorted(it["t"] for it in raced)
    verdict = {e.step: (e.end_ns - rec.t0_ns) / 1e6 for e in rec.events
               if isinstance(e, Span) and e.lane == "verify" and e.label == "accept"}
    commits = [it for it in raced if it["k"] == "c"]
    assert commits and all(abs(it["t"] - verdict[it["s"]]) < 0.02 for it in commits if it["s"] in verdict)
    by_arrival = {json.dumps({k: v for k, v in it.items() if k != "t"}): it["t"] for it in arrived}
    for it in raced:  # never later than it arrived; a span at its own start
        assert it["t"] <= by_arrival[json.dumps({k: v for k, v in it.items() if k != "t"})] + 1e-6
        if it["k"] == "p":
            assert it["t"] == it["a"]
    steps = [it["s"] for it in raced if it["k"] in "wxbvc"]
    assert steps == sorted(steps)  # a step's items never before the step before's
    # a step's tokens come when its verdict is in, 300 ms before they reached the page
    assert commits[0]["t"] < next(it for it in arrived if it["k"] == "c")["t"] - 250
