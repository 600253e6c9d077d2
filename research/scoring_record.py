"""Watching Mirror-SD's draft lane score its branch roots, for the hit-rate scripts in this folder.

The draft lane (`mirror_sd.engine.mirror.draft_lane`) calls `score_roots` once on the draft's
own guess (no early-exit proposals yet) and once when the target's early exit arrives; the
scripts record those calls and replay other scorings offline.
"""
from contextlib import contextmanager


@contextmanager
def watch_scoring(on_score):
    """While inside: each `score_roots` call of the draft lane first calls
    `on_score(step, drafted, q_rows, q_bonus, proposals, kappa, *rest, **kw)`, `step` being the
    step the draft lane is working on. Yields the unpatched `score_roots`."""
    from mirror_sd.engine.mirror import draft_lane
    real_score, real_step = draft_lane.score_roots, draft_lane.DraftWorker._step
    current = {"step": None}

    def step(self, job, alone):
        current["step"] = job.step  # the draft lane handles one step at a time
        return real_step(self, job, alone)

    def score(*args, **kw):
        on_score(current["step"], *args, **kw)
        return real_score(*args, **kw)

    draft_lane.score_roots, draft_lane.DraftWorker._step = score, step
    try:
        yield real_score
    finally:
        draft_lane.score_roots, draft_lane.DraftWorker._step = real_score, real_step
