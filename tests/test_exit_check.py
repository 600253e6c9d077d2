"""Mirror-SD's exit check (engine/mirror/exit_check.py): steps whose lanes ran one after the
other are checked after the run for whether they would have hit had the lanes overlapped, and
the check agrees with the lanes' real outcomes where they did overlap."""
from __future__ import annotations

import pytest

from mirror_sd.engine.events import Commit, DraftBranch
from mirror_sd.engine.mirror import decoder as mirror_decoder
from mirror_sd.engine.mirror.decoder import MirrorSpeculative

import tiny
from tiny import one_torch_thread, wait_no_draft_lane  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SETTINGS = dict(max_new_tokens=40, gamma=3, kappa=4, branch_budget=2)


def _run(monkeypatch, overlap: bool, seed: int):
    monkeypatch.setattr(mirror_decoder.OverlapGate, "overlap", lambda self: overlap)
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 6)
    events = tiny.run(MirrorSpeculative, pair, p, **SETTINGS)
    wait_no_draft_lane()
    return events, tiny.finish(events), p


@pytest.mark.parametrize("seed", [3, 4])
def test_steps_in_turn_are_checked_as_the_overlapped_lanes_would_hit(monkeypatch, seed):
    over_events, over, p = _run(monkeypatch, True, seed)
    turn_events, turn, _ = _run(monkeypatch, False, seed)
    reference = tiny.cached_reference(seed, "qwen", tuple(p), SETTINGS["max_new_tokens"])
    assert over.token_ids == reference and turn.token_ids == reference  # lossless either way

    # overlapped: every step with a verdict that raced is checked against the lane's outcome
    check = over.stats["exit_check"]
    assert check["in_turn"] == 0 and check["steps"] == []
    assert check["overlapped"] == over.stats["hits"] + over.stats["fallbacks"] > 0
    assert 0 <= check["agree"] <= check["overlapped"]
    assert check["overlapped_hits"] == over.stats["hits"]

    # in turn: no hit or miss measured, each drafted step checked after the run
    got = turn.stats["exit_check"]
    assert turn.stats["hits"] == turn.stats["fallbacks"] == 0 and got["overlapped"] == 0
    assert got["in_turn"] == len(got["steps"]) > 0 and got["budget"] == SETTINGS["branch_budget"]
    assert got["would_hit"] == sum(s["would_hit"] for s in got["steps"])
    for s in got["steps"]:
        assert s["would_hit"] == (0 <= s["rank"] < SETTINGS["branch_budget"])

    # fixed windows and greedy: both runs verify the same windows and reach the same verdicts,
    # so a step in turn would hit exactly where the overlapped run's lane hit, but for the
    # steps where leaving out the draft's view after d_gamma changes the outcome, which the
    # overlapped run counts as its disagreements
    taken = {e.step for e in over_events if isinstance(e, DraftBranch) and e.status == "taken"}
    windows = lambda evs: [e.token_ids for e in evs if isinstance(e, Commit)]  # noqa: E731
    assert windows(over_events) == windows(turn_events)
    differ = sum(s["would_hit"] != (s["step"] in taken) for s in got["steps"])
    assert differ == check["overlapped"] - check["agree"]


def test_the_check_is_not_timed(monkeypatch):
    """The check runs after Finish: the run's wall time is fixed before it."""
    monkeypatch.setattr(mirror_decoder.OverlapGate, "overlap", lambda self: False)
    pair = tiny.cached_pair("perturbed", 3)
    gen = MirrorSpeculative(pair, tiny.Settings(**SETTINGS)).generate(tiny.prompt(3, 6))
    events = []
    for ev in gen:
        events.append(ev)
        if type(ev).__name__ == "Finish":
            assert "exit_check" not in ev.stats  # filled once the consumer reads past Finish
            wall = ev.stats["wall_s"]
    wait_no_draft_lane()
    fin = events[-1]
    assert fin.stats["exit_check"]["in_turn"] > 0 and fin.stats["wall_s"] == wall
