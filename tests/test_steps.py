"""The step strip and the narrated step, on real tiny runs and on hand-written events."""
from __future__ import annotations

import pytest
from dataclasses import replace
import re

from mirror_sd.engine.events import Commit, DraftBranch, EarlyExit, Finish, Span, StepStart, Verify
from ui.runs import RunRecord, analyse
from ui.steps import PICK_JS, narrate, render_strip, replay_step, step_kind
from ui_records import tiny_records

T0 = 1_000_000_000



# a second step that keeps its whole window, then the run's end (shared by the records below)
SECOND_STEP = [
    StepStart(1, 2, [4, 5]),
    Verify(1, [4, 5], 2, [0.9, 0.9], [0.8, 0.8], 6, "bonus"),
    Commit(1, [4, 5, 6], ["accepted", "accepted", "bonus"], ""),
    Finish({"new_tokens": 5, "wall_s": 1.0, "tokens_per_s": 5.0}, [1, 3, 4, 5, 6], ""),
]


CHECKED_ROW = "in turn, checked after the run"

def mirror_record(events) -> RunRecord:
    rec = RunRecord("mirror", t0_ns=T0, id_texts={i: f"w{i}" for i in range(10)})
    for i, ev in enumerate(events):
        rec.add(ev, i * 10**8)
    return rec

def _cells(html):
    return re.findall(r'<button type="button" class="msd-step ([^"]*)" data-step="(\d+)" '
                      r'data-run="(\w+)"[^>]*>(\d+)<small>\+(\d+)</small>', html)


def test_one_numbered_cell_per_step_with_its_run():
    rec = tiny_records()["mirror"]
    a = analyse(rec)
    cells = _cells(render_strip(rec, selected=min(a.steps)))
    assert [int(s) for _, s, _, _, _ in cells] == sorted(a.steps)
    assert [int(n) for _, _, _, n, _ in cells] == list(range(1, len(a.steps) + 1))  # from 1
    assert {run for _, _, run, _, _ in cells} == {"mirror"}
    assert sum(int(c) for *_, c in cells) == rec.finish.stats["new_tokens"]
    assert sum("is-selected" in cls for cls, *_ in cells) == 1


def test_cell_colours_follow_the_step_s_own_verdict_and_the_verify():
    from ui.steps import after_verdict_s
    rec = tiny_records()["mirror"]
    a = analyse(rec)
    order = sorted(a.steps)
    cells = _cells(render_strip(rec, selected=order[0]))
    for pos, s in enumerate(order):
        sv = a.steps[s]
        hit = any(b.status == "taken" for b in sv.rollouts)
        late = hit and after_verdict_s(rec, s) * 1e3 > 0.5  # its branch ready after the verdict
        want = ("k-late" if late else "k-hit" if hit else "k-miss" if sv.fallback is not None else
                "k-turn" if sv.in_turn is not None else "k-end")
        assert want in cells[pos][0], (pos, cells[pos][0])
    for (cls, *_), s in zip(cells, order):
        v = a.steps[s].verify
        assert f"o-{v.kind}" in cls
    assert {"k-hit", "k-late", "k-miss", "k-turn"} & {c.split()[0] for c, *_ in cells}  # the run has one
    kinds = [c.split()[0] for c, *_ in cells]
    stats = rec.finish.stats  # the cards' hits / misses: the strip shows as many of each, late ones hits too
    assert (kinds.count("k-hit") + kinds.count("k-late"), kinds.count("k-miss")) == (stats["hits"], stats["fallbacks"])


def test_the_strip_the_inspector_and_the_zoomed_step_read_one_hit_or_miss():
    """A step the zoomed step calls a hit is blue in the strip and "hit" in the inspector's
    table (a late hit hatched indigo, "late hit +n ms" with the zoom's n, and a miss yellow and
    "miss" in both), for every step the zoom may show."""
    from ui.inspector import all_steps
    from ui.zoom import render_zoom, zoom_step
    rec = tiny_records()["mirror"]
    a = analyse(rec)
    order = sorted(a.steps)
    cells = {int(s): cls for cls, s, *_ in _cells(render_strip(rec, selected=order[0]))}
    table = dict(re.findall(r'<tr data-step="(\d+)" data-run="mirror">(?:<td>.*?</td>){4}<td>([\w +]+|–)</td>',
                            all_steps(rec)))
    step = zoom_step(rec)
    caption = re.search(r'<p class="msd-zcaption">(.*?)</p>', render_zoom(rec, {"branch_budget": 2})).group(1)
    late = re.search(r"\bLate hit \+(\d+) ms\b", caption)
    said = ("late" if late else "hit" if "Branch hit:" in caption else "miss" if "Branch miss:" in caption
            else "end")
    assert f"k-{said}" in cells[step], (said, cells[step])
    if late:  # the zoom's figure is the strip's badge
        assert f'aria-label="step {order.index(step) + 1}, late hit +{late[1]} ms"' in render_strip(rec, step)
    for s in (s for s in order if str(s) in table):
        kind = re.search(r"k-(\w+)", cells[s]).group(1)
        want = {"end": "–", "turn": "lanes in turn", "late": f"late hit +{a.steps[s].late_ms} ms"}
        assert table[str(s)] == want.get(kind, f"branch {kind}"), (s, kind, table[str(s)])


def test_plain_sd_cells_are_drafted_windows():
    rec = tiny_records()["sd"]
    a = analyse(rec)
    assert {step_kind(rec, a.steps[s], i == 0) for i, s in enumerate(sorted(a.steps))} == {"drafted"}
    assert "k-hit" not in render_strip(rec, selected=0)


def _first_step(branches_end: int, suffix_end: int, exit_event) -> list:
    """A hand-made Mirror-SD run's prefill and first window, then step 0's branch and suffix
    spans (ending `branches_end` and `suffix_end` tenths of a second in) and its early exit."""
    return [
        Span("target", "prefill", T0, T0 + 10**8, 0),
        DraftBranch(0, 0, 9, 1.0, [1, 2], [0.9, 0.4], "serial"),
        StepStart(0, 0, [1, 2]),
        Span("draft", "branches", T0 + 2 * 10**8, T0 + branches_end * 10**8, 0),
        Span("target", "suffix", T0 + 2 * 10**8, T0 + suffix_end * 10**8, 0),
        exit_event,
    ]


def _hand_record():
    """Step 0: the first window, 1 of 2 accepted; a branch rooted at the verdict is taken.
    Step 1: that branch (a hit), all accepted plus a bonus."""
    events = _first_step(5, 6, EarlyExit(0, 2, [0, 1, 2], [[1, 7], [8, 3], [6, 5]],
                                         [[-0.1, -2.0], [-0.5, -1.2], [-0.2, -2.0]])) + [
        Verify(0, [1, 2], 1, [0.8, 0.1], [0.9, 0.4], 3, "correction"),
        Commit(0, [1, 3], ["accepted", "correction"], ""),
        DraftBranch(0, 1, 3, 0.4, [4, 5], [0.8, 0.8], "taken", rank=0),
    ] + SECOND_STEP
    rec = mirror_record(events)
    return rec


def test_the_narration_splits_branch_forwards_at_the_exit_as_the_zoom_does():
    """Branch forwards before the early exit's guesses reached the draft (on its own guess) and
    after: the narration gives the two as the zoomed step does (steps.branch_ms)."""
    from mirror_sd.engine.events import Span as S
    rec = _hand_record()
    exit_head = S("target", "exit_head", T0 + 29 * 10**7, T0 + 3 * 10**8, 0)  # ends 100 ms into the branches
    rec = mirror_record([rec.events[0], exit_head] + rec.events[1:])
    first = narrate(rec, 0)
    assert "all branches together took 200 ms of draft forwards after the exit (the short gaps between forwards " \
           "not counted; 100 ms more before the exit, on its own guess)" in first, first


def test_narration_tells_the_window_the_branches_the_verdict_and_the_next_window():
    rec = _hand_record()
    first, second = narrate(rec, 0), narrate(rec, 1)
    assert first.startswith("Step 1: The first window")
    assert "miss" not in first.split(";")[0]
    assert "at layer 2 the target's top guess was ‘w8’ at 61% (its final token was its no. 2)" in first
    assert ("built 1 branch: all branches together took 300 ms of draft forwards after the exit (the short gaps "
            "between forwards not counted), beside the "
            "target's remaining layers (3 and up, 400 ms)") in first  # the zoom's unit and words
    assert "longer than those layers" not in first
    assert "kept 1 of the 2 drafted tokens and wrote ‘w3’" in first
    assert "matched branch no. 1, whose window was ready when the verdict came" in first
    assert second.startswith("Step 2: The window was a branch prepared during the previous step (a branch hit)")
    assert "kept all 2 drafted tokens and added ‘w6’" in second and second.endswith("the run ended here.")


def test_narration_of_every_real_step_is_one_sentence():
    for method in ("sd", "mirror"):
        rec = tiny_records()[method]
        for pos, s in enumerate(sorted(analyse(rec).steps)):
            text = narrate(rec, s)
            assert text.startswith(f"Step {pos + 1}: ") and text.endswith(".")
            assert "the target kept" in text


def test_replay_step_follows_time():
    rec = tiny_records()["mirror"]
    order = sorted(analyse(rec).steps)
    seen = [replay_step(rec, t) for t in sorted(set(rec.times_ns))]
    seen = [s for s in seen if s is not None]
    assert seen == sorted(seen) and seen[-1] == order[-1] and seen[0] == order[0]
    assert replay_step(rec, -1) is None


def test_the_click_script_selects_through_the_inspector():
    assert "trigger('select'" in PICK_JS and "data-step" in PICK_JS and "pane-" in PICK_JS


def _gated_record(raced: bool, check: dict | None = None):
    """Two steps after the first window. After step 0's verdict the draft writes the next
    window serially: in a step whose lanes ran in turn (`raced` False: no early exit, no
    branch, its root never ranked), or after a miss (`raced`: the exit's guesses and a
    branch raced the verdict and lost)."""
    events = [
        Span("target", "prefill", T0, T0 + 10**8, 0),
        DraftBranch(0, 0, 9, 1.0, [1, 2], [0.9, 0.4], "serial"),
        StepStart(0, 0, [1, 2]),
    ]
    if raced:
        events += [EarlyExit(0, 2, [0, 1, 2], [[1, 7], [8, 3], [6, 5]], [[-0.1, -2.0]] * 3),
                   Span("draft", "branches", T0 + 2 * 10**8, T0 + 3 * 10**8, 0)]
    events += [Verify(0, [1, 2], 1, [0.8, 0.1], [0.9, 0.4], 3, "correction"),
               Commit(0, [1, 3], ["accepted", "correction"], "", hit=False)]
    if raced:
        events += [DraftBranch(0, 1, 7, 0.4, [4, 5], [0.8, 0.8], "cancelled", rank=0),
                   DraftBranch(0, 1, 3, 0.0, [4, 5], [0.8, 0.8], "serial", rank=-1),
                   Span("draft", "fallback", T0 + 4 * 10**8, T0 + 5 * 10**8, 0)]
    else:
        events += [DraftBranch(0, 1, 3, 0.0, [4, 5], [0.8, 0.8], "serial", None),
                   Span("draft", "draft", T0 + 4 * 10**8, T0 + 5 * 10**8, 0)]
    events += [StepStart(1, 2, [4, 5]),
               Verify(1, [4, 5], 2, [0.9, 0.9], [0.8, 0.8], 6, "bonus"),
               Commit(1, [4, 5, 6], ["accepted", "accepted", "bonus"], "", hit=False),
               Finish({"new_tokens": 5, "wall_s": 1.0, "tokens_per_s": 5.0, "hits": 0,
                       "fallbacks": int(raced), "hit_rate": 0.0 if raced else None,
                       **({"exit_check": check} if check else {})}, [1, 3, 4, 5, 6], "")]
    rec = RunRecord("mirror", t0_ns=T0, id_texts={i: f"w{i}" for i in range(10)})
    for i, ev in enumerate(events):
        rec.add(ev, i * 10**8)
    return rec


def test_a_step_whose_lanes_ran_in_turn_is_neither_a_hit_nor_a_miss():
    from ui.inspector import render_inspector
    from ui.live import LiveFeed
    from ui.render import token_spans
    from ui.runs import verdict_outcome
    rec = _gated_record(raced=False)
    a = analyse(rec)
    assert verdict_outcome(a.steps[0]) == "turn" and a.steps[0].fallback is None
    # its window's tokens are plain accepted drafts (green), never "after a miss" (yellow)
    assert [t.kind for t in a.tokens] == ["accepted", "correction", "accepted", "accepted", "bonus"]
    assert "k-fallback" not in token_spans(rec)
    feed = LiveFeed("mirror")
    kinds = [k for item in feed.pull(rec) if item["k"] == "c" for _, k in item["x"]]
    assert kinds == [t.kind for t in a.tokens]  # the live board colours them alike
    cells = _cells(render_strip(rec, selected=0))
    assert "k-turn" in cells[0][0] and "k-miss" not in cells[0][0]
    assert "lanes in turn" in render_strip(rec, selected=0)  # named in the strip's key
    assert "the lanes in turn" in narrate(rec, 0) and "miss" not in narrate(rec, 0)
    assert narrate(rec, 1).startswith("Step 2: The window was drafted after the previous verdict, the lanes in turn")
    assert "Lanes in turn" in render_inspector(rec, 0) and "Miss:" not in render_inspector(rec, 0)
    # the card counts it apart: no hit, no miss, one step with the lanes in turn
    from ui.figures import card
    from ui.results import _card_rows
    c = card(rec)
    assert (c.hits, c.misses, c.in_turn) == (0, 0, 1)
    assert ("hits / misses", "0 / 0 · lanes in turn: 1 · the last step: no next window", "hit") in _card_rows(c, {})


@pytest.mark.parametrize("rank", [0, 1, 4, -1])
def test_a_step_in_turn_says_what_the_exit_check_found(rank):
    """The exit check (after the run) of a step whose lanes ran in turn: the strip marks it,
    the narration, inspector and card say whether it would have hit with the lanes overlapped
    (a hit exactly when the verdict's root ranked within the branch budget)."""
    from ui.figures import card
    from ui.inspector import render_inspector
    from ui.results import _card_rows
    budget = 2
    would = 0 <= rank < budget
    check = {"in_turn": 1, "would_hit": int(would), "budget": budget, "overlapped": 0, "agree": 0,
             "steps": [{"step": 0, "rank": rank, "would_hit": would, "exit_top": [3, 7, 8]}]}
    rec = _gated_record(raced=False, check=check)
    cells = _cells(render_strip(rec, selected=0))
    assert ("w-hit" if would else "w-miss") in cells[0][0]
    assert "w-" not in cells[1][0]  # step 2 ended the run: nothing checked
    words = narrate(rec, 0)
    assert ("would have been ready early (a branch hit)" in words) == would
    assert ("would have been a branch miss" in words) == (not would)
    assert (f"no. {rank + 1}" in words) == (rank >= 0)
    inspector = render_inspector(rec, 0)
    assert "Had the lanes overlapped" in inspector and inspector.count("w3") >= 1
    # one count in the same words on the card, in Statistics and in the verdict's lanes line
    same = f"of the 1 in-turn step that drafted a window, {int(would)} would have hit, lanes overlapped"
    assert same in dict((k, v) for k, v, _ in _card_rows(card(rec), {}))[CHECKED_ROW]
    from ui.results import render_lanes
    assert same in render_lanes({"mirror": rec})
    from ui.results import _checked_words
    assert same in _checked_words(rec)
    plain = _gated_record(raced=False)  # no check: none of it
    assert "exit check" not in render_lanes({"mirror": plain})
    assert "Had the lanes overlapped" not in render_inspector(plain, 0) and "w-hit" not in render_strip(plain, 0)


def test_a_step_that_raced_the_verdict_and_lost_is_a_miss():
    from ui.live import LiveFeed
    from ui.runs import verdict_outcome
    rec = _gated_record(raced=True)
    a = analyse(rec)
    assert verdict_outcome(a.steps[0]) == "miss" and a.steps[0].in_turn is None
    assert [t.kind for t in a.tokens][2:4] == ["fallback", "fallback"]
    kinds = [k for item in LiveFeed("mirror").pull(rec) if item["k"] == "c" for _, k in item["x"]]
    assert kinds == [t.kind for t in a.tokens]
    assert "k-miss" in _cells(render_strip(rec, selected=0))[0][0]


def test_the_steps_hits_and_misses_are_the_engine_s_own_counts():
    """What the strip and the panes call a hit or a miss is what the statistics count: a step
    whose lanes ran in turn is neither."""
    from ui.runs import verdict_outcome
    rec = tiny_records()["mirror"]
    outcomes = [verdict_outcome(sv) for sv in analyse(rec).steps.values()]
    stats = rec.finish.stats
    assert outcomes.count("hit") == stats["hits"] and outcomes.count("miss") == stats["fallbacks"]
def test_the_zoom_and_the_narration_give_one_step_s_wait_in_the_same_words():
    """The time from the verdict to the next window, for the step the zoom draws: the same
    number in the same unit in the zoom's caption and in the inspector's narration."""
    from ui.zoom import render_zoom, zoom_step
    rec = tiny_records(48)["mirror"]
    step = zoom_step(rec)
    caption = re.search(r"finished it (\d+ ms) after the verdict|(before the verdict)", render_zoom(rec, {}))
    told = narrate(rec, step)
    if caption and caption[1]:
        assert f"begun beside the target before the verdict; the draft finished it {caption[1]} after the verdict" in told
        assert not re.search(r"ready \d", told)  # a hit begun early never reads as "ready 123 ms after"
    elif caption:
        assert "ready when the verdict came" in told
    assert not re.search(r"\d\.\d+ s after the verdict", told)  # under a second: milliseconds, as the zoom


def test_a_step_whose_lanes_ran_in_turn_is_told_so_with_the_time_the_target_waited():
    """A Mirror-SD step the overlap gate ran one lane after the other drafts the next window
    in a plain "draft" span after its verdict: the next step says so, with that span's time
    (never a miss's "0 ms" from a span it does not have)."""
    from ui.inspector import all_steps, render_inspector
    events = [
        DraftBranch(0, 0, 9, 1.0, [1, 2], [0.9, 0.4], "serial"),
        StepStart(0, 0, [1, 2]),
        Span("target", "verify_forward", T0 + 10**8, T0 + 2 * 10**8, 0),
        Verify(0, [1, 2], 1, [0.8, 0.1], [0.9, 0.4], 3, "correction"),
        Commit(0, [1, 3], ["accepted", "correction"], ""),
        Span("draft", "draft", T0 + 2 * 10**8, T0 + 2 * 10**8 + 70 * 10**6, 0),
        DraftBranch(0, 1, 3, 0.0, [4, 5], [0.8, 0.8], "serial"),
    ] + SECOND_STEP
    rec = mirror_record(events)
    assert "then, the lanes in turn, the draft wrote the next window from the verdict (70 ms)" in narrate(rec, 0)
    second = narrate(rec, 1)
    assert "drafted after the previous verdict, the lanes in turn (the target waited 70 ms)" in second
    assert "miss" not in second
    assert "the lanes in turn (neither a hit nor a miss)" in render_inspector(rec, 1)
    assert ">lanes in turn<" in all_steps(rec)
    cells = _cells(render_strip(rec, selected=0))
    assert "k-turn" in cells[0][0] and ">lanes in turn<" in render_strip(rec, selected=0)  # not a miss


def test_the_zoom_says_instead_of_a_new_window_only_when_the_hit_saved_time():
    """A hit whose branch finished after the verdict: the caption compares that wait with the
    run's own redraft time (the inspector's figure), never claiming a saving it did not make."""
    from statistics import median

    from ui.steps import redraft_s
    from ui.zoom import render_zoom
    rec = tiny_records(48)["mirror"]
    html = render_zoom(rec, {})
    saved = re.search(r"finished it (\d+) ms after the verdict, so the target waited that long instead of for a whole new window\.", html)
    cost = re.search(r"Late hit \+\d+ ms, and it cost time here: .*? the draft finished it (\d+) ms after the verdict, while a window "
                     r"drafted fresh after the verdict took (\d+) ms in this run \(median\)", html)
    if saved is None and cost is None:
        return  # this run's zoomed step was not a late hit
    steps = analyse(rec).steps
    from ui.runs import verdict_outcome  # a miss's redraft or an in-turn step's window: drafted after the verdict
    redrafts = [redraft_s(rec, s) * 1e3 for s in steps
                if steps[s].fallback is not None or verdict_outcome(steps[s]) == "turn"]
    redrafts = [r for r in redrafts if r > 0]
    if cost is not None:
        assert saved is None and redrafts and round(median(redrafts)) == int(cost[2]) <= int(cost[1]) + 1
    else:
        assert not redrafts or median(redrafts) > int(saved[1]) - 1


def _record_with_an_empty_window_in_turn():
    """Four steps, every one with its lanes in turn: step 0 drafts [1, 2] and is checked after
    the run; the window after step 1 is empty (a priced window of none), so step 2 is a plain
    target forward whose own next window is drafted in turn; step 3 ends the run."""
    check = {"in_turn": 1, "would_hit": 1, "budget": 2, "overlapped": 0, "agree": 0,
             "steps": [{"step": 0, "rank": 0, "would_hit": True, "exit_top": [1, 2, 3]}]}
    events = [
        Span("target", "prefill", T0, T0 + 10**8, 0),
        DraftBranch(0, 0, 9, 1.0, [1, 2], [0.9, 0.8], "serial"),
        StepStart(0, 0, [1, 2]),
        Verify(0, [1, 2], 2, [0.9, 0.9], [0.9, 0.8], 3, "bonus"),
        Commit(0, [1, 2, 3], ["accepted", "accepted", "bonus"], "", hit=False),
        DraftBranch(0, 2, 3, 0.0, [4, 5], [0.8, 0.8], "serial", None),
        StepStart(1, 3, [4, 5]),
        Verify(1, [4, 5], 2, [0.9, 0.9], [0.8, 0.8], 6, "bonus"),
        Commit(1, [4, 5, 6], ["accepted", "accepted", "bonus"], "", hit=False),
        StepStart(2, 6, []),
        Verify(2, [], 0, [], [], 7, "plain", stop="price",
               price="drafting 2 (draft) would cost 120 ms for 1.9 expected tokens (decoding: 1 in 80 ms); decoded instead"),
        Commit(2, [7], ["plain"], "", hit=False),
        DraftBranch(2, 0, 7, 0.0, [8, 9], [0.8, 0.8], "serial", None),
        StepStart(3, 7, [8, 9]),
        Verify(3, [8, 9], 2, [0.9, 0.9], [0.8, 0.8], 1, "bonus"),
        Commit(3, [8, 9, 1], ["accepted", "accepted", "bonus"], "", hit=False),
        Finish({"new_tokens": 10, "wall_s": 1.0, "tokens_per_s": 10.0, "hits": 0, "fallbacks": 0,
                "hit_rate": None, "exit_check": check,
                "lane_split": "2 cores: target 1 thread and draft 1 while both work; lanes overlapped in 0 of 3 steps"},
               list(range(10)), ""),
    ]
    rec = RunRecord("mirror", t0_ns=T0, id_texts={i: f"w{i}" for i in range(10)})
    for i, ev in enumerate(events):
        rec.add(ev, i * 10**8)
    return rec


def test_the_steps_in_turn_and_the_exit_check_are_one_count_in_every_place():
    """The card's "lanes in turn", the verdict's lanes line and Statistics state one count of
    the steps the exit check read, in the same words, and why the steps in turn it did not read
    differ (a step that drafted nothing has nothing to check); the hit-rate row shows the
    checked rate the projection quotes; an empty window counts as a plain target forward."""
    from ui.figures import card, turn_check
    from ui.results import _card_rows, _lanes_line, render_lanes, render_statistics
    rec = _record_with_an_empty_window_in_turn()
    t = turn_check(rec)
    assert (t["in_turn"], t["checked"], t["would_hit"], t["undrafted"], t["unread"]) == (2, 1, 1, 1, 0)
    assert t["no_next"] == 2 and not t["only_last"] and t["rate"] == 1.0
    same = ("of the 1 in-turn step that drafted a window, 1 would have hit, lanes overlapped "
            "(1 more verified no drafted token: nothing to check")
    rows = {k: v for k, v, _ in _card_rows(card(rec), {})}
    # the card's count of the steps in turn is the check's: 1 read + 1 that drafted nothing
    assert rows["hits / misses"] == "0 / 0 · 2 steps in turn (next row)"
    assert re.sub(r"<[^>]+>", "", rows[CHECKED_ROW]).startswith(same)
    assert re.sub(r"<[^>]+>", "", rows[CHECKED_ROW]).endswith(" · the projections' hit rate: 1 of 1 (timed hits and would-have-hits), 100%")
    line = _lanes_line(rec)
    assert same in line and "(the lanes at once) in none of its 4 verify steps" in line and "of those" not in line
    assert "2 more were followed by no drafted window" in line  # the 4 steps: 1 checked, 1 drafted nothing, 2 no next window
    assert same in render_lanes({"mirror": rec})
    # the empty window's step is a target forward, not a verify of a window
    forwards = re.sub(r"<[^>]+>", "", rows["target forwards (verify steps)"])
    assert forwards == "4, 2.5 tokens each; 1 drafted nothing", forwards
    assert 'title="10 tokens / 4 target forwards"' in rows["target forwards (verify steps)"]
    stats = render_statistics({"mirror": rec})
    hit_row = re.search(r"hits / \(hits \+ misses\).*?</tr>", stats).group(0)
    assert "<td>– · 100% checked</td>" in hit_row and "after the run (untimed)" in hit_row


def test_a_priced_window_in_the_inspector_is_a_short_sentence_and_a_table_of_its_figures():
    """The price of a window (the engine's words in the trace) reads as one plain sentence and
    a two-column table, every figure of it kept."""
    from ui.inspector import render_inspector
    from ui.steps import price_figures
    lead, rows = price_figures("drafting 5 (draft): 4.5 expected tokens in 381 ms (decoding: 1 in 100 ms); "
                               "up to 12 while each next token pays")
    assert lead == "Drafting paid. Priced before drafting:"
    assert rows == [("best window priced", "5 tokens, the draft model"), ("its expected tokens", "4.5"),
                    ("its expected time", "381 ms"), ("decoding one token instead", "100 ms"),
                    ("longest it may grow (while each next token pays)", "12 tokens")]
    assert price_figures("probing: drafting 2 (lookup): 1.2 expected tokens in 90 ms")[0].startswith("A probe")
    assert price_figures("decoded: 1 token in 80 ms")[1] == [("one target forward", "80 ms")]
    rec = _record_with_an_empty_window_in_turn()
    html = render_inspector(rec, 2)
    head = html.split('class="msd-step-head"')[1].split('<p class="msd-narration"', 1)[0]
    assert "Drafting did not pay: the target decoded one token instead." in head
    cells = re.findall(r"<tr><th>([^<]+)</th><td>([^<]+)</td></tr>", head)
    assert cells == [("best window priced", "2 tokens, the draft model"), ("its expected tokens", "1.9"),
                     ("its expected time", "120 ms"), ("decoding one token instead", "80 ms")]
    assert "would cost 120 ms for 1.9 expected tokens" not in html  # the run-on words are gone


def test_a_branch_hit_in_a_step_that_kept_none_of_its_window_says_so_in_plain_words():
    """"Hit" is the branch against the verdict, not the tokens kept: a step that kept none of
    its window can hit, when a branch began at the target's own token (depth 0). The narration
    and the zoomed step say so once; the strip, the inspector and its table say "branch hit"."""
    from ui.inspector import all_steps, render_inspector
    from ui.steps import plain
    from ui.zoom import _caption
    events = _first_step(3, 4, EarlyExit(0, 2, [0, 1, 2], [[3, 7], [8, 3], [6, 5]], [[-0.1, -2.0]] * 3)) + [
        Verify(0, [1, 2], 0, [0.1, 0.1], [0.9, 0.4], 3, "correction"),
        Commit(0, [3], ["correction"], ""),
        DraftBranch(0, 0, 3, 0.6, [4, 5], [0.8, 0.8], "taken", rank=0),
        StepStart(1, 1, [4, 5]),
        Verify(1, [4, 5], 2, [0.9, 0.9], [0.8, 0.8], 6, "bonus"),
        Commit(1, [4, 5, 6], ["accepted", "accepted", "bonus"], ""),
        Finish({"new_tokens": 4, "wall_s": 1.0, "tokens_per_s": 4.0}, [3, 4, 5, 6], ""),
    ]
    rec = mirror_record(events)
    words = "it kept none of the window, but the draft had already guessed the target's own token"
    first = narrate(rec, 0)
    assert "the target kept 0 of the 2 drafted tokens and wrote ‘w3’" in first and first.count(words) == 1, first
    assert words not in narrate(rec, 1)  # a step that kept tokens needs no such words
    page = render_inspector(rec, 0)
    assert page.count("had already guessed the target&#x27;s own token") == 1
    assert "(the cell's colour): branch hit" in page and "<td>branch hit</td>" in all_steps(rec)
    assert "step 1, branch hit" in render_strip(rec, selected=0)
    sv = analyse(rec).steps[0]
    spans = [s for s in rec.spans if s.step == 0]
    verdict = plain(dict(_caption(rec, sv, spans, 2, 4, "hit", 0.0))["The verdict:"])
    assert verdict.startswith("the target kept none of the 2 drafted tokens and wrote ‘w3’ itself, but the draft "
                              "had already guessed that token. Branch hit: "), verdict


MS = 10**6


def _step_spans(step: int, at: int, branches_end: int, last: bool = False) -> list:
    """A step's spans as the engine sends them, `at` ms into the run: the target's layers to the
    exit (100 ms), the exit head (10 ms), the rest of its layers (190 ms) and the acceptance rule
    (5 ms: the verdict at `at` + 305 ms), and the draft's branches from 5 ms after the exit to
    `branches_end` ms into the run (none for the run's last step)."""
    ms = lambda x: T0 + x * MS  # noqa: E731
    spans = [Span("target", "prefix", ms(at), ms(at + 100), step),
             Span("target", "exit_head", ms(at + 100), ms(at + 110), step),
             Span("target", "suffix", ms(at + 110), ms(at + 300), step),
             Span("verify", "accept", ms(at + 300), ms(at + 305), step)]
    return spans if last else spans + [Span("draft", "branches", ms(at + 115), ms(branches_end), step)]


def _guesses(step: int) -> EarlyExit:
    return EarlyExit(step, 2, [0, 1, 2], [[1, 7], [8, 3], [6, 5]], [[-0.1, -2.0], [-0.5, -1.2], [-0.2, -2.0]])


def _hits_record(second_branches_end: float) -> RunRecord:
    """Three Mirror-SD steps in the engine's order (per step: its start, the early exit, the
    verdict, the commit, the branches, then the spans). Step 1's branch is done 25 ms before its
    verdict (405 ms): a hit on time. Step 2's branches end at `second_branches_end` ms, its
    verdict at 805 ms. Step 3 verifies the window step 2's hit made and ends the run."""
    events = [
        Span("target", "prefill", T0, T0 + 100 * MS, 0),
        DraftBranch(0, 0, 9, 1.0, [1, 2], [0.9, 0.4], "serial"),
        StepStart(0, 0, [1, 2]), _guesses(0),
        Verify(0, [1, 2], 1, [0.8, 0.1], [0.9, 0.4], 3, "correction"),
        Commit(0, [1, 3], ["accepted", "correction"], ""),
        DraftBranch(0, 1, 3, 0.4, [4, 5], [0.8, 0.8], "taken", rank=0),
        DraftBranch(0, 1, 7, 0.2, [8, 8], [0.5, 0.5], "cancelled", rank=1),
        *_step_spans(0, 100, 380),
        StepStart(1, 2, [4, 5]), _guesses(1),
        Verify(1, [4, 5], 1, [0.9, 0.1], [0.8, 0.8], 6, "correction"),
        Commit(1, [4, 6], ["accepted", "correction"], "", hit=True),
        DraftBranch(1, 1, 6, 0.4, [7, 8], [0.8, 0.8], "taken", rank=0),
        *_step_spans(1, 500, 0),
        StepStart(2, 4, [7, 8]),
        Verify(2, [7, 8], 2, [0.9, 0.9], [0.8, 0.8], 9, "bonus"),
        Commit(2, [7, 8, 9], ["accepted", "accepted", "bonus"], "", hit=True),
        *_step_spans(2, 900, 0, last=True),
        Finish({"new_tokens": 7, "wall_s": 1.5, "tokens_per_s": 7 / 1.5, "hits": 2, "fallbacks": 0,
                "hit_rate": 1.0}, [1, 3, 4, 6, 7, 8, 9], ""),
    ]
    # step 2's branch forward ends `second_branches_end` ms in (fractions of a ms kept)
    events = [replace(e, end_ns=T0 + int(second_branches_end * MS))
              if isinstance(e, Span) and e.step == 1 and e.label == "branches" else e for e in events]
    return mirror_record(events)


@pytest.mark.parametrize("branches_end, late", [(905.0, 100), (805.4, None), (805.6, 1), (700.0, None)])
def test_a_hit_whose_branch_was_ready_after_the_verdict_is_late_alike_live_and_settled(branches_end, late):
    """A hit whose taken branch the draft finished more than 0.5 ms after the verdict is a late
    hit: its window's accepted tokens are "late" (else "hit"), in the settled analysis and on the
    live board alike, and every place that names the step gives the same whole milliseconds."""
    from html import unescape

    from ui.figures import card
    from ui.inspector import all_steps, render_inspector
    from ui.live import LiveFeed
    from ui.render import token_spans
    from ui.results import _card_rows
    from ui.runs import late_words
    rec = _hits_record(branches_end)
    a = analyse(rec)
    kinds = [t.kind for t in a.tokens]
    assert kinds == ["accepted", "correction", "hit", "correction", "late" if late else "hit",
                     "late" if late else "hit", "bonus"]
    assert (a.steps[0].late_ms, a.steps[1].late_ms, a.steps[2].window_late_ms) == (None, late, late)
    items = LiveFeed("mirror").pull(rec)
    assert [k for i in items if i["k"] == "c" for _, k in i["x"]] == kinds  # the live board's kinds
    verdicts = {i["s"]: i for i in items if i["k"] == "v"}
    assert "h" not in verdicts[0] and "h" not in verdicts[1] and verdicts[2].get("h") == late
    cells = _cells(render_strip(rec, selected=1))
    assert ["k-hit" in cells[0][0], "k-late" in cells[1][0], "k-hit" in cells[1][0]] == [True, bool(late), not late]
    rows = dict((k, v) for k, v, _ in _card_rows(card(rec), {}))
    if late:
        words = late_words(late)
        assert words == f"late hit +{late} ms" and f'aria-label="step 2, {words}"' in render_strip(rec, 1)
        assert f"<td>{words}</td>" in all_steps(rec) and f"a {words}: begun beside the target" in narrate(rec, 1)
        assert f"(a {words}: ready {late} ms after that step's verdict)" in unescape(render_inspector(rec, 2))
        assert f"{words.capitalize()}: the taken branch is the next window" in render_inspector(rec, 1)
        assert f"accepted, from a branch hit, ready after the verdict (late): {words}" in token_spans(rec)
        assert rows["hits / misses"].startswith("2 (1 late) / 0")
    else:
        assert "late hit +" not in render_strip(rec, 1) + all_steps(rec) + narrate(rec, 1) + token_spans(rec)
        assert rows["hits / misses"].startswith("2 / 0")


def test_the_zoom_gives_a_late_hit_the_badge_s_milliseconds():
    """The zoomed step (a late hit here) words its wait with the number the strip's badge and
    the live board's show."""
    from ui.live import LiveFeed
    from ui.zoom import render_zoom, zoom_step
    rec = _hits_record(905.4)  # 100.4 ms after the verdict
    assert zoom_step(rec) == 1 and analyse(rec).steps[1].late_ms == 100
    html = render_zoom(rec, {"target_layers": 4})
    assert "Late hit +100 ms" in html and "the draft finished it 100 ms after the verdict" in html
    assert "the target waited 100 ms for it at the verdict" in html  # the rule's figure
    assert next(i["h"] for i in LiveFeed("mirror").pull(rec) if i["k"] == "v" and i["s"] == 2) == 100
