"""How the draft writes a window: the proposer interface.

In the spirit of transformers' candidate generators, a proposer is what a speculative
decoder asks for drafted tokens, behind two methods: `window(...)` drafts gamma tokens after
the committed text (with the distributions they were drawn from), `describe(gamma)` says how,
for the spans. Two proposers exist: the serial rollout (one draft forward per token,
drafting.serial_rollout) and the draft's stream heads (1 + K tokens per draft forward,
`stream_rollout` here, with the heads of proposals/streams.py). Mirror-SD's branches
(mirror/branches.py) are rolled out batched instead; its serial fallback after a miss goes
through the proposer.

`draft_window` drafts the window the run's window policy (windows.py) asks for: the serial
rollout stops as soon as the policy says so; the stream heads draft their length and the
window is then cut by the same rule (the same tokens, some drafted for nothing).
"""
from __future__ import annotations

import logging

import torch

from mirror_sd.engine.acceptance import Sampling
from mirror_sd.engine.drafting import Window, choose, serial_rollout, to_probs
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.windows import WindowPolicy
from mirror_sd.proposals.streams import StreamHeads, find_heads

log = logging.getLogger(__name__)


class Proposer:
    def __init__(self, rollout, kind: str):
        self._rollout = rollout  # (lane, committed, gamma, sampling, generator) -> Window
        self.kind = kind  # "serial" | "streams"

    def window(self, lane: Lane, committed: list[int], gamma: int, sampling: Sampling,
               generator: torch.Generator | None, stop=None) -> Window:
        """gamma drafted tokens after `committed` (the lane's cache is synced to it first),
        fewer when `stop(token, q)` gives a reason (see serial_rollout)."""
        if self._rollout is serial_rollout:
            return serial_rollout(lane, committed, gamma, sampling, generator, stop)
        window = self._rollout(lane, committed, gamma, sampling, generator)
        for i, (t, q) in enumerate(zip(window.tokens, window.q_probs)):
            why = stop(t, q) if stop is not None else None
            if why is not None:
                return window.cut(i + 1, why)
        return window

    def describe(self, gamma: int) -> str:
        return f"{gamma} tokens, {self.kind}"


SERIAL = Proposer(serial_rollout, "serial")


@torch.inference_mode()
def stream_rollout(lane: Lane, heads: StreamHeads, committed: list[int], gamma: int,
                   sampling: Sampling, generator: torch.Generator | None) -> Window:
    """Draft gamma tokens after `committed` with the draft's stream heads
    (proposals/streams.py): each forward feeds the tokens drafted by the previous one (or the
    committed ones the cache lacks) and proposes 1 + K more."""
    lm_head = lane.model.get_output_embeddings()
    pending = lane.sync(committed)
    tokens, rows = [], []
    while True:
        h = lane.feed_hidden(pending)[-1]  # [H]
        logits = heads.rows(h, lm_head, min(heads.n_heads + 1, gamma - len(tokens)))  # [n, V]
        probs = to_probs(logits, sampling)
        pending = [choose(probs[i], logits[i], sampling, generator) for i in range(len(logits))]
        tokens += pending
        rows.append(probs)
        if len(tokens) == gamma:  # the last forward's tokens are fed by the next step's sync
            return Window(tokens, torch.cat(rows))


def rollout_for(pair, streams: str):
    """(rollout function with serial_rollout's signature, notice or None) for a setting."""
    if streams == "off":
        return serial_rollout, None
    if getattr(pair, "bridge", None) is not None:
        return serial_rollout, "stream heads are not used with a draft of another tokenizer: serial drafting"
    heads, line = find_heads(pair)
    if heads is None:
        return serial_rollout, line
    log.info(line)

    def rollout(lane, committed, gamma, sampling, generator):
        return stream_rollout(lane, heads, committed, gamma, sampling, generator)

    rollout.heads = heads
    return rollout, None


def proposer_for(pair, streams: str) -> tuple[Proposer, str | None]:
    """(the proposer for Settings.streams, a notice when stream heads were asked for and are
    not there)."""
    rollout, notice = rollout_for(pair, streams)
    return (SERIAL if rollout is serial_rollout else Proposer(rollout, "streams")), notice


def draft_window(proposer: Proposer, policy: WindowPolicy, lane: Lane, committed: list[int], room: int,
                 sampling: Sampling, generator: torch.Generator | None) -> Window:
    """The window `policy` asks for after `committed` (room: tokens the run may still commit);
    its `stop` says why it has its length."""
    length, reason = policy.plan(room)
    window = proposer.window(lane, committed, length, sampling, generator, policy.stop)
    if len(window.tokens) == length and window.stop == "gamma":
        window.stop = reason
    return window
