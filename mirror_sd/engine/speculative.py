"""Plain speculative decoding: the draft writes a window, then the target verifies it.

The window is gamma tokens, or under the adaptive policy (windows.py) as many as the policy
asks for after the earlier verdicts, ended early where the draft's confidence drops; under
the priced policy as many as pay at the costs this run measures (pricing.py), which may be
none: the step is then a plain target decode. The proposer is the draft model, or a prompt
lookup beside it (proposers.py).
The two models never run at the same time: step time = T_draft(window) + T_target(window+1).
"""
from __future__ import annotations

import time

from mirror_sd.engine.acceptance import verify
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.drafting import Window, to_probs
from mirror_sd.engine.events import DraftBranch, Notice, StepStart, Verify
from mirror_sd.engine.cross import lane_for
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.proposers import fill_window, plan_window, price_draft, proposer_for
from mirror_sd.engine.windows import policy_for, shared_with_pair


def verify_window(run: Run, target: Lane, step: int, window: Window):
    """Target forward over [y_n, d_1..d_gamma] and the acceptance rule; an empty window
    (a priced window of 0) is a plain decode: the rule then draws the target's own token.

    Returns (verdict, Verify event, Commit event or None)."""
    s = run.settings
    drafted = window.tokens
    pending = target.sync(run.committed)
    label = "verify_forward" if drafted else "decode"
    with run.span("target", label, target.device, step, f"{len(pending) + len(drafted)} tokens"):
        logits = target.feed(pending + drafted)[-(len(drafted) + 1):]  # [gamma+1, V]
    run.target_forwards += 1
    with run.span("verify", "accept", None, step):
        verdict = verify(drafted, logits.to("cpu"), window.q_rows, s.sampling,
                         generator_for(s.seed, step, "verify"))
        p_rows = to_probs(logits[:-1], s.sampling)
        p_probs = [float(p_rows[i, t]) for i, t in enumerate(drafted)]
    run.drafted += len(drafted)
    run.accepted += verdict.accepted
    run.record_window(len(drafted), window.stop)
    kind = "plain" if not drafted else "bonus" if verdict.bonus else "correction"
    event = Verify(step, list(drafted), verdict.accepted, p_probs, window.q_probs, verdict.token, kind,
                   window.stop, window.note, window.source)
    tokens = drafted[:verdict.accepted] + [verdict.token]
    commit = run.commit(step, tokens, ["accepted"] * verdict.accepted + [kind])
    return verdict, event, commit


def _outside_forwards(run, step: int, start_ns: int) -> float:
    """Seconds of `step` since `start_ns` outside the draft's and the target's forwards (and
    a lookup): what priced windows add to each step as its host time (pricing.py)."""
    inside = 0
    for sp in reversed(run.spans):  # the step's spans are the newest: stop at the step before
        if sp.step != step:
            break
        if sp.lane == "draft" or sp.label in ("verify_forward", "decode"):
            inside += sp.end_ns - sp.start_ns
    return (time.perf_counter_ns() - start_ns - inside) / 1e9


class Speculative(Decoder):
    method = "sd"

    def _decode(self, run, cancel):
        s = run.settings
        target = Lane(self.pair.target, "target")
        draft = lane_for(self.pair.draft, "draft", run.committed)
        proposer, notice = proposer_for(self.pair, s.streams, s.proposer)
        if notice:
            yield Notice(notice)
        policy = shared_with_pair(policy_for(s, self.pair.eos_token_ids), self.pair, "sd", s.draft_vocab, s.streams)
        if len(run.committed) > 1:
            with run.span("target", "prefill", target.device, 0):
                target.feed(run.committed[:-1], logits_to_keep=1)
        step = 0
        while not run.done and not cancel.is_set():
            yield StepStart(step, len(run.new_ids))
            start = time.perf_counter_ns()
            window = yield from self._window(run, draft, proposer, policy, step)
            verdict, event, commit = verify_window(run, target, step, window)
            policy.observe(len(window.tokens), verdict.accepted, window.source or None, window.q_probs)
            forward = next(sp for sp in reversed(run.spans) if sp.lane == "target")  # verify or decode
            policy.costs.add_verify(int(forward.detail.split()[0]), (forward.end_ns - forward.start_ns) / 1e9)
            policy.costs.add_host(bool(window.tokens), _outside_forwards(run, step, start))
            run.count_source(window.source, len(window.tokens), verdict.accepted, window.draft_s)
            run.steps += 1
            yield event
            if commit:
                yield commit
            yield from run.new_spans()
            step += 1

    def _window(self, run, draft: Lane, proposer, policy, step: int):
        """The step's window (empty: the step decodes), its span and DraftBranch event; the
        draft's cost per token goes to the policy's costs (when the draft first caught up with
        more than two committed tokens, a prefill, only the forwards after that one)."""
        s = run.settings
        plan = plan_window(proposer, policy, run.committed, run.room, draft)
        if plan.length == 0:
            return fill_window(proposer, plan, policy, draft, run.committed, s.sampling, None)
        lookup = plan.source == "lookup"
        with run.span("draft", "lookup" if lookup else "draft", None if lookup else draft.device, step) as note:
            window = fill_window(proposer, plan, policy, draft, run.committed, s.sampling,
                                 generator_for(s.seed, step, "draft"))
            note["detail"] = proposer.describe(len(window.tokens), window.source)
        span = run.spans[-1]
        window.draft_s = (span.end_ns - span.start_ns) / 1e9
        price_draft(policy.costs, window, window.draft_s)
        yield DraftBranch(step, 0, run.committed[-1], 1.0, window.tokens, window.q_probs, "serial")
        return window
