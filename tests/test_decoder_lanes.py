"""The decoders' lanes on tiny models: a run can be cancelled and leaves no draft-lane thread,
a lane working alone takes both cores and gives them back, and a failing draft lane degrades
to plain decoding (target-only output, still generate()'s)."""
import contextlib
import threading
import time

import pytest
import torch

from mirror_sd.engine.mirror import decoder as mirror_decoder
from mirror_sd.engine.mirror import draft_lane as mirror_mod
from mirror_sd.engine.registry import METHODS
from mirror_sd.engine.settings import Settings
from mirror_sd.engine.events import Commit, EarlyExit, Error, Notice, Span
from mirror_sd.engine.mirror.decoder import MirrorSpeculative
from mirror_sd.models.pair import ModelPair

import tiny
from tiny import one_torch_thread, wait_no_draft_lane  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DECODERS = METHODS  # the registry: name -> decoder class


def of(events, cls):
    return [e for e in events if isinstance(e, cls)]


# ---------------------------------------------------------------- cancellation

@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
def test_cancel_after_first_commit(method):
    pair = tiny.cached_pair("perturbed", 1)
    cancel = threading.Event()
    events, cancelled_at = [], None
    gen = DECODERS[method](pair, Settings(max_new_tokens=200, gamma=3)).generate(tiny.prompt(1, 5), cancel)
    for e in gen:
        events.append(e)
        if isinstance(e, Commit) and not cancel.is_set():
            cancel.set()
            cancelled_at = time.monotonic()
    elapsed = time.monotonic() - cancelled_at
    fin = tiny.finish(events)
    assert elapsed < 5.0
    assert fin.stats["cancelled"] is True
    commits = of(events, Commit)
    assert len(commits) == 1  # nothing committed after the cancel
    assert fin.token_ids == commits[0].token_ids and len(fin.token_ids) < 200
    assert not of(events, Error)
    assert wait_no_draft_lane() == []


# ---------------------------------------------------------------- one lane alone

def test_a_lane_takes_both_cores_only_while_the_other_waits(monkeypatch):
    """Mirror-SD gives the working lane the other lane's cores (placement.lane_alone) for the
    prefill and the first window, and for the draft lane's work after the verdict, which the
    worker hands to the target lane's thread: the worker thread never takes both cores, and
    it never runs a forward while the target lane's thread holds them."""
    seed = 2
    pair = tiny.pair_perturbed(seed)
    entered = {"main": 0, "worker": 0}
    main_alone = threading.Event()
    bad = []

    @contextlib.contextmanager
    def recording_alone(_pair):
        worker = threading.current_thread().name == "mirror-draft-lane"
        entered["worker" if worker else "main"] += 1
        main_alone.set()
        try:
            yield
        finally:
            main_alone.clear()

    def draft_forward_starts(module, args):
        if threading.current_thread().name == "mirror-draft-lane" and main_alone.is_set():
            bad.append("the draft lane's worker ran while the target lane's thread held both cores")

    monkeypatch.setattr(mirror_decoder, "lane_alone", recording_alone)
    hook = pair.draft.register_forward_pre_hook(draft_forward_starts)
    try:
        p = tiny.prompt(seed, 6)
        decoder = MirrorSpeculative(pair, Settings(max_new_tokens=24, gamma=3, branch_budget=2))
        events = list(decoder.generate(p))
    finally:
        hook.remove()
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 24)
    assert bad == []
    assert entered["worker"] == 0
    handed = fin.stats["hits"] + fin.stats["fallbacks"]  # one hand-off per step that drafted on
    assert handed >= 1 and entered["main"] == 1 + handed  # + the prefill and the first window
    assert not main_alone.is_set()
    assert fin.stats["lane_split"]  # the split in words (tiny pairs: no placement)


def test_lane_alone_gives_a_cpu_lane_both_cores_and_takes_them_back():
    from mirror_sd.placement import Placement, cpu_cores, lane_alone
    placement = Placement("cpu", "cpu")
    placement.target_threads = placement.draft_threads = 1
    pair = ModelPair(tiny.target(1), tiny.target(1), None, info={"placement": placement})
    seen = {}

    def lane():
        torch.set_num_threads(1)
        with lane_alone(pair):
            seen["inside"] = torch.get_num_threads()
        seen["after"] = torch.get_num_threads()

    t = threading.Thread(target=lane)
    t.start()
    t.join()
    assert seen["inside"] == (2 if cpu_cores() >= 2 else 1)
    assert seen["after"] == 1


# ---------------------------------------------------------------- draft lane failure

def test_draft_lane_failure_falls_back_to_plain_decoding(monkeypatch):
    def broken(self, job):
        raise RuntimeError("draft device lost")

    monkeypatch.setattr(mirror_mod.DraftWorker, "_step", broken)
    seed = 2
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 6)
    events = list(MirrorSpeculative(pair, Settings(max_new_tokens=20, gamma=3)).generate(p))
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 20)
    notices = of(events, Notice)
    assert len(notices) == 1 and "draft device lost" in notices[0].message
    assert not of(events, Error)
    assert [t for c in of(events, Commit) for t in c.token_ids] == fin.token_ids
    assert wait_no_draft_lane() == []


def test_draft_model_failing_mid_run_inside_the_lane_thread(monkeypatch):
    """The draft model's forward raises from its 3rd call inside the draft-lane thread only
    (after the lane already rolled branches out and moved its cache)."""
    seed = 3
    pair = tiny.pair_perturbed(seed)
    original = pair.draft.forward
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        if threading.current_thread().name == "mirror-draft-lane":
            calls["n"] += 1
            if calls["n"] >= 3:
                raise RuntimeError("draft lane OOM")
        return original(*args, **kwargs)

    monkeypatch.setattr(pair.draft, "forward", flaky)
    p = tiny.prompt(seed, 6)
    events = list(MirrorSpeculative(pair, Settings(max_new_tokens=30, gamma=3)).generate(p))
    fin = tiny.finish(events)
    assert calls["n"] >= 3
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 30)
    assert len(of(events, Notice)) == 1 and not of(events, Error)
    assert wait_no_draft_lane() == []


def test_a_draft_failure_in_the_hand_off_falls_back_to_plain_decoding(monkeypatch):
    """The draft lane's work after the verdict runs on the target lane's thread: a failure
    there ends the draft lane the same way (one notice, target-only output, no thread left)."""
    calls = {"n": 0}
    original = mirror_mod.DraftWorker.finish

    def failing(self, job):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("draft kernel fault")
        return original(self, job)

    monkeypatch.setattr(mirror_mod.DraftWorker, "finish", failing)
    seed = 2
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 6)
    events = list(MirrorSpeculative(pair, Settings(max_new_tokens=24, gamma=3)).generate(p))
    fin = tiny.finish(events)
    assert calls["n"] == 2
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 24)
    notices = of(events, Notice)
    assert len(notices) == 1 and "draft kernel fault" in notices[0].message
    assert not of(events, Error)
    assert wait_no_draft_lane() == []


def test_a_stalled_draft_lane_ends_its_part_with_a_clear_message(monkeypatch):
    """A worker that never answers: the target lane stops waiting after lane_timeout_s, says
    so once, finishes alone (still the target's output), and the stalled thread ends with the
    run instead of outliving it."""
    release = threading.Event()
    original = mirror_mod.DraftWorker._step

    def stalling(self, job):
        if job.step == 1:
            release.wait(30)
        return original(self, job)

    monkeypatch.setattr(mirror_mod.DraftWorker, "_step", stalling)
    seed = 2
    pair = tiny.cached_pair("perturbed", seed)
    p = tiny.prompt(seed, 6)
    t0 = time.monotonic()
    events = list(MirrorSpeculative(pair, Settings(max_new_tokens=24, gamma=3, lane_timeout_s=0.5)).generate(p))
    assert time.monotonic() - t0 < 10
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.cached_reference(seed, "qwen", tuple(p), 24)
    notices = of(events, Notice)
    assert len(notices) == 1 and "no answer in" in notices[0].message
    release.set()  # the stalled step sees its job cancelled and the worker its stop
    assert wait_no_draft_lane() == []


def test_a_branch_forward_made_stale_by_the_verdict_stops_at_a_layer(monkeypatch):
    """With a slow draft (each decoder layer sleeps in the worker thread), the verdict comes in
    the middle of branch forwards: one no row can use stops at its next layer (its span says
    so), the run goes on and its output is still the target's own."""
    seed = 2
    pair = tiny.pair_perturbed(seed)

    def slow(seconds, in_worker):
        def hook(module, args):
            if (threading.current_thread().name == "mirror-draft-lane") == in_worker:
                time.sleep(seconds)
        return hook

    # a target forward takes about 100 ms, a draft forward in the worker about 60 ms: the
    # verdict lands during the first or second branch forward of a step
    hooks = [layer.register_forward_pre_hook(slow(0.025, False)) for layer in pair.target.model.layers]
    hooks += [layer.register_forward_pre_hook(slow(0.015, True)) for layer in pair.draft.model.layers]
    try:
        p = tiny.prompt(seed, 6)
        events = list(MirrorSpeculative(pair, Settings(max_new_tokens=16, gamma=3, branch_budget=2)).generate(p))
    finally:
        for h in hooks:
            h.remove()
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 16)
    stopped = [s for s in of(events, Span) if s.label == "branches" and "stopped at the verdict" in s.detail]
    assert stopped, "no branch forward was stopped at the verdict"
    assert wait_no_draft_lane() == []


# ---------------------------------------------------------------- overlapped or one after the other

def test_the_overlap_gate_follows_the_measured_step_times():
    from mirror_sd.engine.mirror.gate import PROBE_EVERY, OverlapGate
    memory = {}
    gate = OverlapGate("auto", True, memory)
    assert gate.overlap() is True  # nothing measured: overlap first
    gate.record(True, 120.0, 4)  # 30 ms per drafted token (no decode figure)
    assert gate.overlap() is False  # then the other mode once
    gate.record(False, 80.0, 4)  # 20 ms per row: one after the other wins
    modes = [gate.overlap() for _ in range(2 * PROBE_EVERY)]
    assert modes.count(True) == 2 and modes[PROBE_EVERY - 1] is True  # the loser tried every PROBE_EVERY
    gate.record(True, 40.0, 4)
    gate.record(True, 40.0, 4)
    gate.record(True, 40.0, 4)  # overlap got cheaper: it wins now
    assert memory["overlap"] < memory["serial"] and gate.overlap() is True
    assert "overlapped in 4 of 5 steps" in gate.describe()
    # lanes on devices of their own, or "always": every step overlaps, nothing is measured
    for gate in (OverlapGate("auto", False, {}), OverlapGate("always", True, {})):
        gate.record(True, 10.0, 2)
        assert all(gate.overlap() for _ in range(20)) and gate.memory == {}


def test_the_gate_prices_a_mode_beyond_a_plain_decode_so_short_windows_do_not_condemn_it():
    """A step's fixed part (a verify costs about a decode whatever its rows) is taken off before
    dividing by the drafted tokens: one after the other measured on 1-token windows (a 260 ms
    decode, 300 ms verify, 100 ms draft) beats overlapping measured on 4-token windows that
    cost 920 ms, as it would at any one window length; per verified row it would have lost."""
    from mirror_sd.engine.mirror.gate import OverlapGate
    memory = {}
    gate = OverlapGate("auto", True, memory)
    gate.record(True, 920.0, 4 + 4, decode_ms=260.0)  # (920 - 260) / 8 = 82.5 ms a drafted token
    gate.record(False, 400.0, 1 + 1, decode_ms=260.0)  # (400 - 260) / 2 = 70 ms
    assert memory == {"overlap": 82.5, "serial": 70.0}
    assert gate.overlap() is False and gate.favoured() is False
    assert 920.0 / 5 < 400.0 / 2  # the old measure, per verified row, would have picked overlapping
    assert ("(the gate's step cost, a step's time beyond a plain decode per drafted token: 82.5 ms with the "
            "lanes overlapped, 70.0 ms one after the other)") in gate.describe()


def test_each_try_of_the_slower_mode_that_loses_again_doubles_the_gap():
    from mirror_sd.engine.mirror.gate import PROBE_EVERY, PROBE_MAX, OverlapGate
    memory = {"overlap": 30.0, "serial": 20.0}
    gate = OverlapGate("auto", True, memory)

    def steps_to_try():
        for n in range(1, 10 * PROBE_MAX):
            if gate.overlap():
                return n
        raise AssertionError("never tried")

    gaps = []
    for _ in range(5):
        gaps.append(steps_to_try())
        gate.record(True, 120.0, 4)  # the try: 30 ms per row again, still slower
        gate.record(False, 80.0, 4)
    assert gaps == [PROBE_EVERY, 2 * PROBE_EVERY, 4 * PROBE_EVERY, PROBE_MAX, PROBE_MAX]
    steps_to_try()
    gate.record(True, 40.0, 4)  # a try faster than the best: the gap starts again
    assert memory["gap"] == PROBE_EVERY


def test_the_windows_are_priced_for_the_favoured_mode():
    """Where the lanes share a device, the windows are priced for the mode measured cheaper
    (before both are measured: the lanes one after the other); elsewhere for overlapped steps."""
    from mirror_sd.engine.mirror.gate import OverlapGate
    memory = {}
    gate = OverlapGate("auto", True, memory)
    assert gate.favoured() is False  # nothing measured yet
    gate.record(True, 120.0, 4)
    gate.record(False, 80.0, 4)  # one after the other wins
    assert gate.favoured() is False
    for _ in range(4):
        gate.record(True, 20.0, 4)  # overlapping wins now
    assert gate.favoured() is True
    for gate in (OverlapGate("auto", False, {}), OverlapGate("always", True, {})):
        assert gate.favoured() is True


def test_steps_in_turn_price_with_sd_s_costs_and_overlapped_steps_with_their_own(monkeypatch):
    """With the lanes sharing cores, a priced Mirror-SD run's steps one lane after the other
    read and feed the very costs SD's runs on this pair feed (the same forwards in the same
    order: where the gate keeps the lanes apart, Mirror-SD drafts the windows SD would), and its
    overlapped steps (every PROBE_EVERY-th here) feed costs of their own, which never price the
    in-turn windows; the policy learns the step's host time and how far to trust a drafted token
    of each draft probability, as plain SD's does; output unchanged."""
    from mirror_sd.engine.pricing import Costs, Prices
    from mirror_sd.engine.speculative import Speculative
    from mirror_sd.engine.windows import pair_costs
    # priced as on a machine where drafting pays (the tiny models' own timings are near ties)
    fixed = Prices([(1, 1.0), (2, 1.05), (9, 1.4)], {"draft": 0.15, "lookup": 0.0, "catchup": 0.0})
    monkeypatch.setattr(Costs, "snapshot", lambda self: fixed)
    seed = 3
    pair = tiny.pair_perturbed(seed)
    p = tiny.prompt(seed, 6)
    list(Speculative(pair, Settings(max_new_tokens=8, gamma=3, window="priced")).generate(p))
    sd_costs = pair_costs(pair, "sd", "full", "off")
    own = pair_costs(pair, "mirror", "full", "off", "on")
    assert sd_costs is not own
    monkeypatch.setattr(mirror_decoder, "lanes_share_a_device", lambda _pair: True)
    decoder = MirrorSpeculative(pair, Settings(max_new_tokens=40, gamma=3, window="priced"))
    decoder._prepare()
    decoder._lane_costs(decoder.settings).update(overlap=50.0, serial=10.0)  # serial wins
    fed = []
    original = mirror_decoder.MirrorSpeculative._price

    def price(self, run, costs, step, *rest):
        fed.append((step, costs, self._policy.costs))
        return original(self, run, costs, step, *rest)

    monkeypatch.setattr(mirror_decoder.MirrorSpeculative, "_price", price)
    events = list(decoder.generate(p))
    fin = tiny.finish(events)
    assert fin.token_ids == tiny.reference_greedy(pair.target, p, 40)
    overlapped = {e.step for e in of(events, EarlyExit)}
    assert overlapped, "the gate tries overlapping every PROBE_EVERY steps"
    assert len(overlapped) < len(fed)
    assert all(costs is (own if step in overlapped else sd_costs) for step, costs, _ in fed)
    assert all(reading is sd_costs for _, _, reading in fed)  # in turn favoured: priced as SD prices
    assert decoder._policy.costs is sd_costs
    measured = sd_costs._draft  # what the runs fed (the snapshot above is fixed)
    assert measured["host-drafted"].values and measured["draft"].values
    assert own._draft["draft"].values  # the overlapped steps' waits, apart
    assert sum(decoder._policy.calibrated("draft").seen) > 0
    # lanes on devices of their own: every step overlaps, priced with Mirror-SD's own costs only
    monkeypatch.setattr(mirror_decoder, "lanes_share_a_device", lambda _pair: False)
    fed.clear()
    decoder = MirrorSpeculative(pair, Settings(max_new_tokens=12, gamma=3, window="priced"))
    list(decoder.generate(p))
    assert fed and all(costs is own and reading is own for _, costs, reading in fed)


def test_with_the_lanes_in_turn_and_the_same_costs_mirror_sd_drafts_sd_s_windows(monkeypatch):
    """The gated Mirror-SD's steps in turn plan, draft and stop their windows as SD's do: from
    the same costs and the same starting acceptance, every window is SD's, token count for token
    count (on a real run the shared costs and acceptance move between the two runs, so its
    windows can still differ there)."""
    from mirror_sd.engine.events import Verify
    from mirror_sd.engine.mirror import gate
    from mirror_sd.engine.pricing import Costs, Prices
    from mirror_sd.engine.speculative import Speculative
    fixed = Prices([(1, 1.0), (2, 1.05), (9, 1.4)], {"draft": 0.15, "lookup": 0.0, "catchup": 0.0})
    monkeypatch.setattr(Costs, "snapshot", lambda self: fixed)
    monkeypatch.setattr(mirror_decoder, "lanes_share_a_device", lambda _pair: True)
    monkeypatch.setattr(gate, "PROBE_EVERY", 10**6)  # no overlapped try: every step in turn
    seed = 3
    p = tiny.prompt(seed, 6)
    settings = Settings(max_new_tokens=60, gamma=3, window="priced")
    sd = [len(e.drafted) for e in Speculative(tiny.pair_perturbed(seed), settings).generate(p) if isinstance(e, Verify)]
    decoder = MirrorSpeculative(tiny.pair_perturbed(seed), settings)  # a fresh pair: the same starting acceptance
    decoder._prepare()
    decoder._lane_costs(decoder.settings).update(overlap=50.0, serial=10.0)  # in turn wins
    events = list(decoder.generate(p))
    assert not of(events, EarlyExit)  # no step overlapped
    mirror = [len(e.drafted) for e in events if isinstance(e, Verify)]
    assert len(set(sd)) > 1 and mirror == sd, (sd, mirror)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_steps_with_the_lanes_one_after_the_other_give_the_same_tokens(monkeypatch, temperature):
    """Where the lanes share cores and overlapping measured slower, steps run the lanes one
    after the other (with every 8th overlapped to keep measuring): the tokens are those of a
    run that overlaps every step (greedy: generate()'s; seeded sampling: the same sample)."""
    seed = 3
    pair = tiny.pair_perturbed(seed)
    p = tiny.prompt(seed, 6)
    kw = dict(max_new_tokens=40, gamma=3, temperature=temperature, seed=5)
    always = tiny.finish(list(MirrorSpeculative(pair, Settings(lane_overlap="always", **kw)).generate(p)))
    monkeypatch.setattr(mirror_decoder, "lanes_share_a_device", lambda _pair: True)
    decoder = MirrorSpeculative(pair, Settings(**kw))
    decoder._prepare()
    decoder._lane_costs(decoder.settings).update(overlap=50.0, serial=10.0)  # measured before: serial wins
    events = list(decoder.generate(p))
    fin = tiny.finish(events)
    assert fin.token_ids == always.token_ids
    if temperature == 0.0:
        assert fin.token_ids == tiny.reference_greedy(pair.target, p, 40)
    serial = [s for s in of(events, Span) if s.lane == "draft" and s.label == "draft"]
    assert serial and len(of(events, EarlyExit)) < fin.stats["steps"]
    assert "lanes overlapped in" in fin.stats["lane_split"]
    assert not of(events, Error) and not of(events, Notice)
    assert wait_no_draft_lane() == []


def test_a_stopped_branch_forward_keeps_the_finished_rows():
    """drop_live (a branch forward stopped at the verdict) drops the rows still drafting and
    keeps the finished ones: a finished row may be the verdict's (a hit)."""
    from mirror_sd.engine.acceptance import Sampling
    from mirror_sd.engine.lanes import Lane
    from mirror_sd.engine.mirror.branches import BranchBatch
    from mirror_sd.engine.mirror.scoring import Root
    pair = tiny.cached_pair("perturbed", 1)
    lane = Lane(pair.draft, "draft")
    lane.feed(tiny.prompt(1, 6) + [3, 4, 5], logits_to_keep=1)
    batch = BranchBatch(pair.draft, lane.cache, 6, 3, Sampling())
    batch.admit(Root(1, 7, 0.5), None, 1)
    batch.admit(Root(2, 9, 0.3), None, 3)
    batch.forward()
    assert [r.root.token for r in batch.done] == [7] and [r.root.token for r in batch.live] == [9]
    batch.drop_live()
    assert batch.live == [] and [r.root.token for r in batch.done] == [7]
    assert batch.done[0].cache.get_seq_length() == 6 + 1 + 1  # y, d_1, its root 7


@pytest.mark.parametrize("seed", [1, 4])
def test_without_the_early_exit_the_draft_alone_picks_the_branches(seed):
    """early_exit off: no exit hook runs (no EarlyExit event, no prefix/exit-head split of the
    verify forward); the branches come from the draft's own scored roots, every step reports
    the verdict's rank among them, and the greedy tokens are still generate()'s."""
    pair = tiny.pair_perturbed(seed)
    p = tiny.prompt(seed, 6)
    kw = dict(max_new_tokens=36, gamma=3, lane_overlap="always")
    off = list(MirrorSpeculative(pair, Settings(early_exit="off", **kw)).generate(p))
    on = list(MirrorSpeculative(pair, Settings(**kw)).generate(p))
    ref = tiny.reference_greedy(pair.target, p, 36)
    assert tiny.finish(off).token_ids == ref == tiny.finish(on).token_ids
    assert not of(off, EarlyExit) and of(on, EarlyExit)
    assert not [s for s in of(off, Span) if s.label == "exit_head"]
    assert [s for s in of(on, Span) if s.label == "exit_head"]
    fin = tiny.finish(off)
    branches = [b for b in off if type(b).__name__ == "DraftBranch" and b.status != "serial" and b.step > 0]
    assert branches and all(b.rank is not None for b in branches)
    assert fin.stats["hit_rate"] is not None
    assert wait_no_draft_lane() == []


def test_early_exit_must_be_on_or_off():
    from mirror_sd.errors import MirrorSDError
    with pytest.raises(MirrorSDError, match="early exit must be on or off"):
        Settings(early_exit="maybe").check("mirror")
    Settings(early_exit="maybe").check("sd")  # SD does not read it
