"""Plain speculative decoding: the draft writes a window, then the target verifies it.

The window is gamma tokens, or under the adaptive policy (windows.py) as many as the policy
asks for after the earlier verdicts, ended early where the draft's confidence drops.
The two models never run at the same time: step time = T_draft(window) + T_target(window+1).
"""
from __future__ import annotations

from mirror_sd.engine.acceptance import verify
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.drafting import Window, to_probs
from mirror_sd.engine.events import DraftBranch, Notice, StepStart, Verify
from mirror_sd.engine.cross import lane_for
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.proposers import draft_window, proposer_for
from mirror_sd.engine.windows import policy_for


def verify_window(run: Run, target: Lane, step: int, window: Window):
    """Target forward over [y_n, d_1..d_gamma] and the acceptance rule.

    Returns (verdict, Verify event, Commit event or None)."""
    s = run.settings
    drafted = window.tokens
    pending = target.sync(run.committed)
    with run.span("target", "verify_forward", target.device, step, f"{len(pending) + len(drafted)} tokens"):
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
    kind = "bonus" if verdict.bonus else "correction"
    event = Verify(step, list(drafted), verdict.accepted, p_probs, window.q_probs, verdict.token, kind,
                   window.stop)
    tokens = drafted[:verdict.accepted] + [verdict.token]
    commit = run.commit(step, tokens, ["accepted"] * verdict.accepted + [kind])
    return verdict, event, commit


class Speculative(Decoder):
    method = "sd"

    def _decode(self, run, cancel):
        s = run.settings
        target = Lane(self.pair.target, "target")
        draft = lane_for(self.pair.draft, "draft", run.committed)
        proposer, notice = proposer_for(self.pair, s.streams)
        if notice:
            yield Notice(notice)
        policy = policy_for(s, self.pair.eos_token_ids)
        if len(run.committed) > 1:
            with run.span("target", "prefill", target.device, 0):
                target.feed(run.committed[:-1], logits_to_keep=1)
        step = 0
        while not run.done and not cancel.is_set():
            yield StepStart(step, len(run.new_ids))
            with run.span("draft", "draft", draft.device, step) as note:
                window = draft_window(proposer, policy, draft, run.committed, run.room, s.sampling,
                                      generator_for(s.seed, step, "draft"))
                note["detail"] = proposer.describe(len(window.tokens))
            yield DraftBranch(step, 0, run.committed[-1], 1.0, window.tokens, window.q_probs, "serial")
            verdict, event, commit = verify_window(run, target, step, window)
            policy.observe(len(window.tokens), verdict.accepted)
            run.steps += 1
            yield event
            if commit:
                yield commit
            yield from run.new_spans()
            step += 1
