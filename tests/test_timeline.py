"""The latency timeline: each run drawn from its own start to its reported wall time."""
from __future__ import annotations

import pytest

from mirror_sd.engine.events import Commit, Finish, Span, StepStart
from ui.runs import RunRecord
from ui.timeline import GROUP_OF, GROUPS, LABELS, build_timeline, lanes_for, run_origin_ns
from ui_records import tiny_records

T0 = 5_000_000_000


def _run_traces(fig, name):
    return [t for t in fig.data if t.name and t.name.startswith(f"{name}: ")]


def _bars_of(fig, name):
    return [(b, x, y) for t in fig.data if t.type == "bar"
            for b, x, y in zip(t.base, t.x, t.y) if y.startswith(f"{name} · ")]


@pytest.mark.parametrize("method,name", [("ar", "AR"), ("sd", "SD"), ("mirror", "Mirror-SD")])
def test_each_run_ends_at_its_reported_wall_time(method, name):
    records = tiny_records()
    fig = build_timeline(records)
    wall = records[method].finish.stats["wall_s"]
    traces = _run_traces(fig, name)
    assert {t.name for t in traces} == {f"{name}: end", f"{name}: tokens committed"}
    for t in traces:
        assert max(t.x) == pytest.approx(wall, abs=1e-6), t.name
    bars = _bars_of(fig, name)
    assert bars
    assert min(b for b, _, _ in bars) >= 0.0  # nothing of the run before its own t = 0
    assert max(b + x for b, x, _ in bars) <= wall + 1e-6  # nor after its wall time
    curve = next(t for t in traces if t.name.endswith("tokens committed"))
    assert list(curve.y)[-1] == records[method].finish.stats["new_tokens"]  # as in the table
    assert list(curve.x) == sorted(curve.x)


def test_time_before_the_first_span_is_not_drawn():
    """A run whose record started 20 s before its first timed event (a kernel build, a
    warm-up): its bars and its curve start at 0, and it ends at its wall time."""
    setup = 20 * 10**9
    start = T0 + setup
    rec = RunRecord("ar", t0_ns=T0, token_texts=["a", "b"])
    events = [StepStart(0, 0), Span("target", "prefill", start, start + 10**8, 0),
              Commit(0, [1], ["plain"], "a"), StepStart(1, 1),
              Span("target", "decode", start + 10**8, start + 2 * 10**8, 1),
              Commit(1, [2], ["plain"], "b"),
              Finish({"new_tokens": 2, "wall_s": 0.2, "tokens_per_s": 10.0}, [1, 2], "ab")]
    arrivals = [setup, setup + 10**8, setup + 10**8, setup + 10**8, setup + 2 * 10**8,
                setup + 2 * 10**8, setup + 2 * 10**8]
    for ev, t in zip(events, arrivals):
        rec.add(ev, t)
    assert run_origin_ns(rec) == start
    fig = build_timeline({"ar": rec})
    bars = _bars_of(fig, "AR")
    assert min(b for b, _, _ in bars) == pytest.approx(0.0)
    curve = next(t for t in fig.data if t.name == "AR: tokens committed")
    assert list(curve.x) == pytest.approx([0.0, 0.1, 0.2, 0.2])
    assert list(curve.y) == [0, 1, 2, 2]


def test_lanes_and_colours_follow_the_legend():
    records = tiny_records()
    assert lanes_for(records)[:1] == ["AR · target"]
    assert {"Mirror-SD · target", "Mirror-SD · draft", "SD · draft"} <= set(lanes_for(records))
    fig = build_timeline(records)
    colours = {t.name: t.marker.color for t in fig.data if t.type == "bar"}
    # bars in lane colours, never a token colour: the serial redraft after a miss is drafting
    # the target waits for, like SD's windows; the legend has one entry per group, each its own colour
    from ui.palette import LANES, TOKENS
    assert GROUP_OF["fallback"] == GROUP_OF["draft"] and GROUP_OF["fallback"][1] == LANES["draft_waits"]
    assert not set(colours.values()) & set(TOKENS.values())
    assert set(colours.values()) <= set(LANES.values())
    assert len({c for c, _ in GROUPS.values()}) == len(GROUPS) <= 6
    legend = [t.name for t in fig.data if t.type == "bar" and t.showlegend is not False]
    assert len(legend) == len(set(legend)) <= len(GROUPS)
    assert set(LABELS) <= set(GROUP_OF)  # every span the engine names has its group


def test_an_empty_timeline_says_when_it_appears():
    fig = build_timeline({})
    assert "appears when a run has finished" in fig.layout.annotations[0].text


def test_a_branch_forward_after_its_verdict_is_drawn_as_drafting_the_target_waits_for():
    """After a step's verdict the target waits for the draft to finish the next window: a branch
    forward begun then is drawn in the waiting colour, in the timeline fold and on the live
    board alike; those before it stay beside the target."""
    import dataclasses

    from mirror_sd.engine.events import Span
    from ui.live import LiveFeed
    from ui.runs import LATE_BRANCHES, RunRecord
    from ui.timeline import GROUP_OF, build_timeline
    rec = tiny_records()["mirror"]
    step = next(s.step for s in rec.spans if s.label == "branches" and s.step > 0)
    verdict = max(s.end_ns for s in rec.spans if s.step == step and s.lane in ("target", "verify"))
    late = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    pairs = list(zip(rec.events, rec.times_ns))
    first = next(i for i, (ev, _) in enumerate(pairs) if isinstance(ev, Span) and ev.step == step
                 and ev.label == "branches")
    ev, t = pairs.pop(first)
    # one just before the verdict (the tiny forwards' own times fall either side of it, as the
    # scheduler has it), and one after it, sent after the step's target spans as a branch begun
    # after the verdict is
    pairs.insert(first, (dataclasses.replace(ev, start_ns=verdict - 2_000_000, end_ns=verdict - 1_000_000), t))
    after = max(i for i, (e, _) in enumerate(pairs) if isinstance(e, Span) and e.step == step
                and e.lane in ("target", "verify"))
    pairs.insert(after + 1, (dataclasses.replace(ev, start_ns=verdict + 1_000_000, end_ns=verdict + 2_000_000), t))
    for ev, t in pairs:
        late.add(ev, t)
    feed = LiveFeed("mirror")
    items = [i for i in feed.pull(late) if i["k"] == "p" and i["s"] == step and i["l"] == "d"]
    names = [i["n"] for i in items]
    assert LATE_BRANCHES in names and "branches" in names, names
    for i in items:  # a branch forward is late exactly when it began at or after the verdict (to the 0.01 ms)
        if i["n"] in ("branches", LATE_BRANCHES):
            assert (i["n"] == LATE_BRANCHES) == (i["a"] >= round((verdict - late.t0_ns) / 1e6, 2)), (i, verdict)
    fig = build_timeline({"mirror": late})
    waits = [tr for tr in fig.data if tr.name == GROUP_OF[LATE_BRANCHES][0]]
    assert GROUP_OF[LATE_BRANCHES][0] == "draft, the target waits" and waits
    assert any("after" not in str(tr.name) for tr in fig.data if tr.name == "draft beside the target")


def test_the_committed_curve_puts_each_token_at_its_verdict_not_its_arrival():
    """Mirror-SD yields a step's tokens after the draft lane's work of the step: the curve draws
    them at the step's verdict on the engine's clock, so its first token sits at the card's time
    to first token, and a run whose events all reached the page 300 ms late draws the same curve."""
    from ui.figures import cards
    from ui.runs import RunRecord
    from ui.timeline import committed_curve
    records = tiny_records()
    c = cards(records)
    for m, rec in records.items():
        xs, ys = committed_curve(rec, run_origin_ns(rec))  # t = 0 where the timeline puts it
        first = xs[ys.index(1)]
        assert abs(first - c[m].ttft_s) < 0.005, (m, first, c[m].ttft_s)
        assert xs == sorted(xs)
    rec = records["mirror"]
    late = RunRecord("mirror", t0_ns=rec.t0_ns, token_texts=rec.token_texts, id_texts=rec.id_texts)
    for ev, t in zip(rec.events, rec.times_ns):
        late.add(ev, t + 300_000_000)
    assert committed_curve(late, run_origin_ns(rec))[0][:-1] == committed_curve(rec, run_origin_ns(rec))[0][:-1]
