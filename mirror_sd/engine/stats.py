"""Statistics derived from a run's events (pure functions over plain values)."""
from __future__ import annotations


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def overlap_ns(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Total time covered by both interval sets."""
    a, b = _union(a), _union(b)
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def draft_hidden_fraction(spans) -> float | None:
    """Share of the draft lane's busy time that ran while the target lane was busy."""
    draft = [(s.start_ns, s.end_ns) for s in spans if s.lane == "draft"]
    target = [(s.start_ns, s.end_ns) for s in spans if s.lane == "target"]
    busy = sum(e - s for s, e in _union(draft))
    if busy == 0:
        return None
    return overlap_ns(draft, target) / busy
