"""Acceptance of a draft, from its verified windows (pure functions over plain values).

A window is `[drafted, accepted]`: the draft proposed `drafted` tokens and the target kept
the first `accepted` of them (engine/acceptance.py `Verdict.accepted`, the `Verify` event's
`accepted`). From a run's windows:
- the rate per window position i (1-based): of the windows that reached position i (drafted
  at least i tokens and accepted all i-1 before it), the share that accepted the i-th too;
- the histogram of accepted counts: windows that accepted 0, 1, ..., gamma drafts;
- tau, the mean tokens per target forward: accepted drafts plus the target's own token
  (correction or bonus), so plain decoding scores 1.
Mirror-SD's early-exit coverage is the share of steps whose target token (at the verdict's
position A) was among the early exit's top-kappa candidates at A: what lets a branch rooted
there exist at all.
"""
from __future__ import annotations


def window_facts(events) -> dict:
    """From one run's typed events: `window_verdicts` [[drafted, accepted], ...] per Verify,
    and `exit_cover` [1 or 0 per Mirror-SD step with an EarlyExit]; plain data for stats."""
    from mirror_sd.engine.events import EarlyExit, Verify

    windows, exits, cover = [], {}, []
    for ev in events:
        if isinstance(ev, EarlyExit):
            exits[ev.step] = ev.token_ids
        elif isinstance(ev, Verify):
            windows.append([len(ev.drafted), int(ev.accepted)])
            candidates = exits.pop(ev.step, None)
            if candidates is not None and ev.accepted < len(candidates):
                cover.append(int(ev.token in candidates[ev.accepted]))
    return {"window_verdicts": windows, "exit_cover": cover}


def from_verdicts(verdicts, drafted: int | list[int]) -> list[list[int]]:
    """Windows from engine `Verdict`s, each of `drafted` tokens (one count or one per verdict)."""
    sizes = drafted if isinstance(drafted, list) else [drafted] * len(verdicts)
    return [[int(n), int(v.accepted)] for v, n in zip(verdicts, sizes)]


def _drafting(windows) -> list[tuple[int, int]]:
    """Windows that drafted something (a plain step drafts none and says nothing of the draft)."""
    out = []
    for n, a in windows:
        if not 0 <= a <= n:
            raise ValueError(f"a window cannot accept {a} of {n} drafted tokens")
        if n > 0:
            out.append((int(n), int(a)))
    return out


def position_rates(windows) -> list[dict]:
    """Per position i = 1..longest window: {position, reached, accepted, rate}; rate None
    where no window reached the position."""
    ws = _drafting(windows)
    longest = max((n for n, _ in ws), default=0)
    rows = []
    for i in range(1, longest + 1):
        reached = sum(1 for n, a in ws if n >= i and a >= i - 1)
        accepted = sum(1 for n, a in ws if a >= i)
        rows.append({"position": i, "reached": reached, "accepted": accepted,
                     "rate": accepted / reached if reached else None})
    return rows


def accepted_histogram(windows) -> list[int]:
    """counts[k] = windows that accepted exactly k drafts (k = 0..longest window)."""
    ws = _drafting(windows)
    counts = [0] * (max((n for n, _ in ws), default=0) + 1)
    for _, a in ws:
        counts[a] += 1
    return counts


def tau(windows) -> float | None:
    """Mean tokens per verified window: accepted drafts plus the target's own token."""
    ws = [(int(n), int(a)) for n, a in windows]
    return sum(a + 1 for _, a in ws) / len(ws) if ws else None


def share(flags) -> float | None:
    flags = list(flags)
    return sum(flags) / len(flags) if flags else None


def summarize_windows(windows, cover=()) -> dict:
    """Every acceptance figure of a set of windows (and Mirror-SD's early-exit flags)."""
    ws = _drafting(windows)
    drafted = sum(n for n, _ in ws)
    return {"windows": len(ws), "drafted": drafted, "accepted_drafts": sum(a for _, a in ws),
            "acceptance_rate": sum(a for _, a in ws) / drafted if drafted else None,
            "tau_windows": tau(windows), "window_mean": drafted / len(ws) if ws else None,
            "position_rates": position_rates(ws), "accepted_histogram": accepted_histogram(ws),
            "exit_top_kappa_coverage": share(cover)}
