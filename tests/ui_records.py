"""Real run records for the UI tests: AR, SD and Mirror-SD decoded with the tiny random pair
(mirror_sd/models/tiny.py), recorded the way the app records them (arrival times, token texts). No downloads;
built once per test session."""
from __future__ import annotations

import functools
import time

PROMPT = "def hello ( x ) :"


@functools.lru_cache(maxsize=4)
def tiny_records(max_new_tokens: int = 24, gamma: int = 4) -> dict:
    import torch

    from mirror_sd.engine.settings import Settings
    from mirror_sd.engine.registry import METHODS
    from ui.runs import RunRecord
    from ui.session import TokenTexts
    from mirror_sd.models.tiny import tiny_pair

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pair = tiny_pair()
        prompt = pair.encode_prompt(PROMPT)
        records = {}
        for method in ("ar", "sd", "mirror"):
            rec = RunRecord(method)
            texts = TokenTexts(pair, rec)
            rec.t0_ns = time.perf_counter_ns()
            # Mirror-SD's lanes at once in every step: a gated run would choose per step from
            # timings, which differ machine to machine (tests derive in-turn runs with _serial_after)
            settings = Settings(max_new_tokens=max_new_tokens, gamma=gamma, kappa=4,
                                lane_overlap="always" if method == "mirror" else "auto")
            for ev in METHODS[method](pair, settings).generate(prompt):
                texts.on_event(ev)
                rec.add(ev, time.perf_counter_ns() - rec.t0_ns)
            records[method] = rec
        _pin_overlap(records["mirror"])
        return records
    finally:
        torch.set_num_threads(threads)


def _pin_overlap(rec) -> None:
    """Mirror-SD's lanes ran at once in every step (lane_overlap "always"), but the tiny models'
    forwards take microseconds, so whether a step's draft span meets its target's span is the
    thread scheduler's draw: where one does not, its first branch span is moved back to start
    with the target's layers after the exit (its length kept; never later than it was), so the
    record reads as what the run did on any machine."""
    from dataclasses import replace

    from mirror_sd.engine.events import Span
    from ui.why import steps_at_once
    at_once = steps_at_once(rec)
    suffix = {e.step: e.start_ns for e in rec.events if isinstance(e, Span) and e.label == "suffix"}
    moved = set()
    for i, e in enumerate(rec.events):
        if (isinstance(e, Span) and e.lane == "draft" and e.label == "branches" and e.step in suffix
                and e.step not in at_once and e.step not in moved and suffix[e.step] < e.start_ns):
            rec.events[i] = replace(e, start_ns=suffix[e.step], end_ns=suffix[e.step] + (e.end_ns - e.start_ns))
            moved.add(e.step)
