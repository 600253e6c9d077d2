"""The one collector (engine/collect.py) and the run path around it: a run's events in, the
record with its spans and figures out; a listener hears every event in order; auto settings
are tuned for the methods that run; the prompt is encoded and checked once."""
import pytest

import tiny
from tiny import one_torch_thread  # noqa: F401  (fixture)
from mirror_sd.engine import tuning
from mirror_sd.engine.collect import collect, figures
from mirror_sd.engine.events import Commit, Error, Finish, Span
from mirror_sd.engine.run_path import PreparedRun, RunPath
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("method", ["ar", "sd", "mirror"])
def test_the_record_holds_the_runs_events_and_the_engines_figures(method):
    pair = tiny.cached_pair("perturbed", 0)
    prompt_ids = tiny.prompt(0, 6)
    heard = []
    run = PreparedRun(pair, prompt_ids, Settings(max_new_tokens=8, gamma=3), (method,))
    record = run.collect(method, listener=lambda ev, t: heard.append((ev, t)))
    events = [ev for ev, _ in heard]
    assert isinstance(events[-1], Finish) and record.finish is events[-1]
    assert [t for _, t in heard] == sorted(t for _, t in heard)  # arrival order, perf_counter_ns
    assert record.start_ns <= heard[0][1] and heard[-1][1] <= record.end_ns
    assert record.spans == [ev for ev in events if isinstance(ev, Span)] and record.spans
    assert record.token_ids == tiny.cached_reference(0, "qwen", tuple(prompt_ids), 8)
    assert record.committed == len(record.token_ids) == record.stats["new_tokens"]
    first = next(ev for ev in events if isinstance(ev, Commit))
    assert record.first_commit[1] == len(first.token_ids)
    got = record.figures()
    for k in ("new_tokens", "wall_s", "tokens_per_s", "prefill_s", "decode_tokens_per_s"):
        assert got[k] == record.stats[k]  # the engine's own figures, as it reported them
    assert 0 < got["prefill_s"] < got["wall_s"] <= record.wall_s


def test_figures_without_the_engines_stats_follow_the_same_rule():
    # 4 tokens: 1 at 100 ms, 3 more by the end at 500 ms
    out = figures({}, 0, 500_000_000, (100_000_000, 1), 4)
    assert out["new_tokens"] == 4 and out["wall_s"] == pytest.approx(0.5)
    assert out["prefill_s"] == pytest.approx(0.1) and out["decode_tokens"] == 3
    assert out["decode_tokens_per_s"] == pytest.approx(3 / 0.4)
    assert figures({}, 0, 10, None, 0)["prefill_s"] is None


def test_an_error_is_recorded_and_the_listener_may_stop_the_run():
    def events():
        yield Error("bad")
        yield Finish({"method": "x", "new_tokens": 0}, [], "")

    record = collect(events(), "x")
    assert record.error == "bad" and record.errors == ["bad"] and record.token_ids == []

    def stop(ev, t):
        if isinstance(ev, Error):
            raise MirrorSDError(ev.message)

    with pytest.raises(MirrorSDError, match="bad"):
        collect(events(), "x", stop)


@pytest.mark.parametrize("methods, tuned", [(["ar", "sd"], "sd"), (["sd"], "sd"),
                                            (["ar", "sd", "mirror"], "mirror"), (["mirror"], "mirror")])
def test_auto_settings_are_tuned_for_the_methods_that_run(methods, tuned, monkeypatch):
    seen = []

    def auto_settings(pair, prompt_ids, settings, gamma_auto, budget_auto, method):
        seen.append(method)
        return settings, tuning.Choice(settings.gamma, settings.branch_budget, 1.0, 0.0)

    monkeypatch.setattr(tuning, "auto_settings", auto_settings)
    path = RunPath(methods, Settings(max_new_tokens=4), gamma_auto=True)
    path.prepare(tiny.cached_pair("perturbed", 0), tiny.prompt(0, 6), warm=False)
    assert seen == [tuned]


def test_the_prompt_is_encoded_and_validated_once(monkeypatch):
    pair = tiny.cached_pair("perturbed", 0)
    path = RunPath(["ar", "mirror"], Settings(max_new_tokens=4))
    calls = []
    real = RunPath.validate
    monkeypatch.setattr(RunPath, "validate", lambda self, *a: calls.append(1) or real(self, *a))
    ids = path.prompt_ids(pair, tiny.prompt(0, 6))
    run = path.prepare(pair, ids, warm=False)
    assert calls == [1] and run.prompt_ids == tiny.prompt(0, 6)
    path.prepare(pair, tiny.prompt(0, 6), warm=False)  # plain ids: checked here
    assert calls == [1, 1]
    with pytest.raises(MirrorSDError):
        RunPath(["mirror"], Settings(max_new_tokens=4, exit_layer=99)).prompt_ids(pair, [1, 2, 3])


def test_the_app_loads_through_the_run_path(monkeypatch):
    from ui import session
    calls = []
    monkeypatch.setattr(RunPath, "load", staticmethod(lambda *a, **kw: calls.append((a, kw)) or "pair"))
    spec = session.PairSpec(target="t", draft="d", precision="int8", draft_precision="same")
    assert session._load(spec, print) == "pair"
    (args, kw), = calls
    assert args == ("t", "d") and kw["precision"] == "int8" and kw["draft_precision"] is None


def test_work_a_decoder_does_after_finish_is_outside_the_records_time():
    """A decoder may add untimed figures after Finish (Mirror-SD's exit check): the record's
    wall time ends when Finish arrives, and the figures the work adds are in the record."""
    import time

    def events():
        finish = Finish({"new_tokens": 1, "wall_s": 0.01}, [5], "x")
        yield Commit(0, [5], ["target"], "x")
        yield finish
        time.sleep(0.3)
        finish.stats["after"] = True

    record = collect(events(), "mirror")
    assert record.wall_s < 0.2 and record.stats.get("after") is True
