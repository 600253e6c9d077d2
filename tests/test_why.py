"""The why of a run: the lanes' contention compares verify forwards of equal size."""
from types import SimpleNamespace

from mirror_sd.engine.events import Span, Verify
from ui import why


def _record(windows_ms: dict[int, tuple[int, float]], beside: bool = False):
    """A stand-in RunRecord: step -> (drafted tokens, verify forward ms); `beside`: the draft
    lane works during every verify (the lanes at once)."""
    events, spans, t = [], [], 0
    for step, (n, ms) in windows_ms.items():
        events.append(Verify(step, [1] * n, n, [1.0] * n, [1.0] * n, 2, "bonus"))
        spans.append(Span("target", "verify_forward", t, t + int(ms * 1e6), step))
        if beside:
            spans.append(Span("draft", "branches", t, t + int(ms * 1e6), step))
        t += int(ms * 1e6) + 1
    return SimpleNamespace(events=events, spans=spans)


def test_contention_compares_verify_forwards_of_the_same_window():
    # SD verifies long adaptive windows (8 tokens: 200 ms) and a few 4-token ones (100 ms);
    # Mirror-SD's windows are 4 tokens (150 ms beside the draft): 1.5x, not 0.75x
    sd = _record({0: (4, 999), 1: (8, 200), 2: (8, 200), 3: (4, 100), 4: (4, 100), 5: (8, 200)})
    mirror = _record({0: (4, 999), 1: (4, 150), 2: (4, 150), 3: (4, 150)}, beside=True)
    c = why.costs({"sd": sd, "mirror": mirror})
    assert c["verify_window"] == 4
    assert abs(c["verify_alone"] - 0.100) < 1e-6 and abs(c["verify_beside"] - 0.150) < 1e-6
    assert abs(why.contention(c)["verify"] - 1.5) < 1e-6


def test_no_common_window_means_no_contention_figure():
    sd = _record({0: (4, 1), 1: (8, 200)})
    mirror = _record({0: (4, 1), 1: (3, 150)}, beside=True)
    c = why.costs({"sd": sd, "mirror": mirror})
    assert c["verify_window"] is None and "verify" not in why.contention(c)
