"""The baseline: the target alone, one token per forward."""
from __future__ import annotations

from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.drafting import choose, to_probs
from mirror_sd.engine.events import StepStart
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.windows import pair_decode


def plain_step(run: Run, target: Lane, step: int):
    """One target forward, one committed token (also Mirror-SD's way on when its draft fails)."""
    sampling = run.settings.sampling
    pending = target.sync(run.committed)
    with run.span("target", "prefill" if len(pending) > 1 else "decode", target.device, step):
        logits = target.feed(pending, logits_to_keep=1)[-1:]  # [1, V]
    run.target_forwards += 1
    if len(pending) == 1:  # a decode's cost, for the priced windows of the pair's other runs
        span = run.spans[-1]
        pair_decode(run.pair).add((span.end_ns - span.start_ns) / 1e9)
    probs = None if sampling.greedy else to_probs(logits, sampling)[0]
    token = choose(probs, logits[0], sampling, generator_for(run.settings.seed, step, "ar"))
    commit = run.commit(step, [token], ["plain"])
    if commit:
        yield commit
    yield from run.new_spans()


class Autoregressive(Decoder):
    method = "ar"
    drafts = False

    def _decode(self, run, cancel):
        target = Lane(self.pair.target, "target")
        step = 0
        while not run.done and not cancel.is_set():
            yield StepStart(step, len(run.new_ids))
            yield from plain_step(run, target, step)
            step += 1
