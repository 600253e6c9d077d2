"""How the draft writes a window: the proposer interface.

In the spirit of transformers' candidate generators, a proposer is what a speculative
decoder asks for drafted tokens, behind two methods: `window(...)` drafts gamma tokens after
the committed text (with the distributions they were drawn from), `describe(gamma)` says how,
for the spans. Two proposers exist: the serial rollout (one draft forward per token,
drafting.serial_rollout) and the draft's stream heads (1 + K tokens per draft forward,
`stream_rollout` here, with the heads of proposals/streams.py). Mirror-SD's branches
(mirror/branches.py) are rolled out batched instead; its serial fallback after a miss goes
through the proposer.

A third proposer needs no model: prompt lookup (`LookupProposer`) proposes the tokens that
followed the latest earlier occurrence of the text's last n-gram (n = 3, then 2) in the
prompt and the output so far; where it finds none the draft model drafts. Its proposal is
deterministic, so its q is one-hot: the acceptance rule then accepts d with probability
p(d) and resamples from p without d, still lossless (acceptance.py).

`plan_window` and `fill_window` draft the window the run's window policy (windows.py) asks
for: the serial rollout stops as soon as the policy says so; the stream heads draft their length and the
window is then cut by the same rule (the same tokens, some drafted for nothing). Under the
priced policy a lookup's continuation and the draft model are priced side by side
(`plan_window`), and the window may be empty: the step decodes instead.
"""
from __future__ import annotations

import logging

import torch

from dataclasses import dataclass, field

from mirror_sd.engine.acceptance import Sampling
from mirror_sd.engine.drafting import Window, choose, serial_rollout, to_probs
from mirror_sd.engine.lanes import Lane, common_prefix
from mirror_sd.engine.settings import PROPOSER_CHOICES
from mirror_sd.engine.windows import WindowPolicy
from mirror_sd.errors import MirrorSDError
from mirror_sd.proposals.streams import StreamHeads, find_heads

log = logging.getLogger(__name__)

NGRAM_MAX, NGRAM_MIN = 3, 2  # prompt lookup: the longest n-gram tried first; a single token recurs too often to tell


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

    def describe(self, gamma: int, source: str = "draft") -> str:
        return f"{gamma} tokens, {'lookup' if source == 'lookup' else self.kind}"

    def lookup(self, committed: list[int], limit: int) -> list[int]:
        """A model-free continuation of `committed` (prompt lookup); none for a model."""
        return []


SERIAL = Proposer(serial_rollout, "serial")


def find_continuation(ids: list[int], limit: int, ngram_max: int = NGRAM_MAX,
                      ngram_min: int = NGRAM_MIN) -> list[int]:
    """Up to `limit` tokens that followed the latest earlier occurrence of the last n tokens
    of `ids` (n from ngram_max down to ngram_min); [] when no n-gram recurs."""
    size = len(ids)
    for n in range(min(ngram_max, size - 1), ngram_min - 1, -1):
        tail = ids[size - n:]
        for start in range(size - n - 1, -1, -1):  # latest first; the tail itself excluded
            if ids[start:start + n] == tail:
                return ids[start + n:start + n + limit]
    return []


class LookupProposer(Proposer):
    """Prompt lookup (find_continuation), the draft model's proposer where it finds none."""

    def __init__(self, fallback: Proposer, vocab_size: int):
        super().__init__(fallback._rollout, "lookup+" + fallback.kind)
        self.fallback, self.vocab_size = fallback, vocab_size

    def window(self, lane, committed, gamma, sampling, generator, stop=None) -> Window:
        return self.fallback.window(lane, committed, gamma, sampling, generator, stop)

    def lookup(self, committed: list[int], limit: int) -> list[int]:
        return find_continuation(committed, limit)

    def describe(self, gamma: int, source: str = "draft") -> str:
        return f"{gamma} tokens, {'lookup' if source == 'lookup' else self.fallback.kind}"


def lookup_window(tokens: list[int], vocab_size: int, stop=None) -> Window:
    """A window of looked-up tokens: q one-hot (a deterministic proposal), cut by `stop`."""
    q_rows = torch.zeros(len(tokens), vocab_size, dtype=torch.float64)
    q_rows[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 1.0
    window = Window(list(tokens), q_rows, "match", "lookup")
    for i, t in enumerate(tokens):
        why = stop(t, 1.0) if stop is not None else None
        if why is not None:
            return window.cut(i + 1, why)
    return window


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


def proposer_for(pair, streams: str, proposer: str = "draft") -> tuple[Proposer, str | None]:
    """(the proposer for Settings.streams and Settings.proposer, a notice when stream heads
    were asked for and are not there)."""
    if proposer not in PROPOSER_CHOICES:
        raise MirrorSDError(f"proposer must be one of {', '.join(PROPOSER_CHOICES)} (got {proposer!r}).")
    rollout, notice = rollout_for(pair, streams)
    model = SERIAL if rollout is serial_rollout else Proposer(rollout, "streams")
    if proposer == "lookup":
        from mirror_sd.models.pair import model_vocab_size

        return LookupProposer(model, model_vocab_size(pair.target)), notice
    return model, notice


@dataclass
class Plan:
    """What the next window will be, before anything is drafted."""
    length: int  # 0: no window, the step decodes
    reason: str  # the stop reason if the window reaches `length` (windows.STOP_REASONS)
    source: str  # draft | lookup
    note: str = ""  # the priced policy's reason in words
    match: list = field(default_factory=list)  # the lookup's continuation, if any


def plan_window(proposer: Proposer, policy: WindowPolicy, committed: list[int], room: int,
                lane: Lane | None = None) -> Plan:
    """The policy's plan after `committed` (room: tokens the run may still commit), with a
    prompt lookup's continuation priced beside the draft model when the proposer has one
    (under a policy that does not price, a continuation found is used), and the committed
    tokens the draft model's `lane` lacks priced as its catch-up."""
    match = proposer.lookup(committed, policy.max_len)
    behind = len(committed) - common_prefix(lane.ids, committed) if lane is not None else 0
    length, reason = policy.plan(room, len(match), behind)
    if policy.priced:
        source = policy.source if length else ""
    else:
        source = "lookup" if match else "draft"
        if match and len(match) < length:
            length, reason = len(match), "match"
    return Plan(length, reason, source, policy.note if policy.priced else "", match)


def fill_window(proposer: Proposer, plan: Plan, policy: WindowPolicy, lane: Lane, committed: list[int],
                sampling: Sampling, generator: torch.Generator | None) -> Window:
    """The window `plan` asks for; its `stop` says why it has its length."""
    if plan.length == 0:
        return Window.empty(plan.reason, plan.note)
    if plan.source == "lookup":
        window = lookup_window(plan.match[:plan.length], proposer.vocab_size, policy.window_stop())
    else:
        behind = len(committed) - common_prefix(lane.ids, committed)
        window = proposer.window(lane, committed, plan.length, sampling, generator, policy.window_stop())
        window.behind = behind
    if len(window.tokens) == plan.length and window.stop in ("gamma", "match"):
        window.stop = plan.reason
    window.source, window.note = plan.source, plan.note
    return window


def price_draft(costs, window: Window, seconds: float) -> None:
    """Feed priced windows' costs (pricing.Costs) with a window that took `seconds` to draft:
    its cost per drafted token; where the draft model first caught up with more than two
    committed tokens (a prefill: the prompt, or the tokens decoded while it did not draft),
    only the forwards after that one, and the catch-up per token apart (priced by its length
    when the policy plans: pricing.Prices.catchup_s)."""
    lookup = window.source == "lookup"
    if lookup or window.behind <= 2:
        costs.add_draft(window.source, seconds, len(window.tokens))
    elif window.first_s and len(window.tokens) > 1:
        costs.add_draft(window.source, seconds - window.first_s, len(window.tokens) - 1)
    if not lookup and window.first_s:
        costs.add_catchup(window.first_s, window.behind)
