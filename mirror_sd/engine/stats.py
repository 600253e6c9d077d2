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


def split_prefill(start_ns: int, end_ns: int, new_tokens: int, first_commit) -> dict:
    """A run's time to its first committed tokens and its decode speed after them.

    prefill_s: from the run's start to its first commit (the prompt's prefill, which gives
    AR its first token; SD and Mirror-SD also draft and verify their first window in it).
    decode_tokens_per_s: the tokens committed after the first commit over the time after
    it; None when there are none. first_commit: (perf_counter_ns, tokens) or None."""
    if first_commit is None:
        return {"prefill_s": None, "decode_s": None, "decode_tokens": 0, "decode_tokens_per_s": None}
    at_ns, first_tokens = first_commit
    decode_s = (end_ns - at_ns) / 1e9
    decode_tokens = new_tokens - first_tokens
    return {"prefill_s": (at_ns - start_ns) / 1e9, "decode_s": decode_s, "decode_tokens": decode_tokens,
            "decode_tokens_per_s": decode_tokens / decode_s if decode_tokens > 0 and decode_s > 0 else None}
