"""How many tokens the draft writes each step: the window policy (pure: no models, no threads).

`fixed`: gamma tokens every step. `adaptive`, after transformers' assisted generation (its
"heuristic" schedule of num_assistant_tokens and its assistant_confidence_threshold):
- the window's length grows by 2 after a fully accepted window and shrinks by 1 after a
  rejection, within [window_min, window_max], starting at gamma;
- the draft stops early when its own probability of the token it just drafted falls below
  the threshold (the token is kept: it is verified like the others), or when it drafted an
  end-of-sequence token;
- a window never drafts more than the run can still commit (max_new_tokens - committed - 1,
  at least 1: the target adds one token of its own).

`priced` (pricing.py): each window is the length with the most expected tokens per second,
priced with the costs the run measures as it goes (a draft forward per token, the target's
verify at k + 1 rows, a plain decode) and the acceptance it has seen per window position,
for each proposer the run may use; zero included: a window of no tokens is a plain target
decode step. After PROBE_AFTER decoded steps in a row (FIRST_PROBE at the run's start) a
short window is drafted anyway (a probe: it measures the acceptance the estimates need to
price drafting again); the gap doubles after each probe that did not lead back to drafting.
Once drafting pays, the window goes on token by token while one more token still raises the
window's expected tokens per second, each drafted token trusted as far as tokens of its draft
probability have been accepted in this run (pricing.Calibration, pricing.worth_more), and ends
at a drafted end-of-sequence token (`window_stop`); Mirror-SD's batched branches, drafted
before the verdict, stop at the draft's confidence threshold as under `adaptive` (`stop`) and
are then cut by `window_stop`. Mirror-SD's priced windows may be empty too: its step then
decodes with the lanes one after the other (nothing to race).

Lossless by construction: the length depends only on the draft's own tokens and
probabilities and on the verdicts of earlier steps, never on the target's distributions for
the window being verified. Drafting up to any such stopping rule is speculative sampling with
a window chosen before the target looks, so the acceptance rule still makes every committed
token the target's own (greedy) or distributed as the target's (sampling).

Stop reasons (why a window has its length): "gamma" (the policy's length), "confidence",
"eos", "room", "price" (the length priced best; 0: decoded instead), "probe" (a short window
after decoded steps), "match" (a prompt lookup's continuation ended).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from mirror_sd.engine import pricing

WINDOW_CHOICES = ("fixed", "adaptive", "priced")
# What the CLI, the benchmark and the app use unless told otherwise, with DEFAULT_PROPOSER: priced
# windows with prompt lookup ran fastest for SD (1.02x AR against 0.91x with adaptive windows,
# per-question median) and level with adaptive windows for Mirror-SD in one interleaved int8
# benchmark of the default pair on 18 questions (docs/performance.md, "Windows and proposers").
# Settings itself keeps fixed windows and the draft model, the reference the engine's tests are
# written against.
DEFAULT_WINDOW = "priced"
DEFAULT_PROPOSER = "lookup"
STOP_REASONS = ("gamma", "confidence", "eos", "room", "price", "probe", "match")
PROBE_AFTER, PROBE_MAX = 4, 32  # decoded steps in a row before a probe window (doubling up to the max)
PROBE_LEN = 2  # a probe window's tokens
FIRST_PROBE = 1  # the run's first probe: after one decode step (its time prices decoding)
GROW, SHRINK = 2, 1  # transformers' heuristic schedule: +2 after a full accept, -1 after a rejection


@dataclass
class WindowPolicy:
    kind: str = "fixed"
    gamma: int = 4
    threshold: float = 0.4
    min_len: int = 1
    max_len: int = 12
    eos: frozenset = frozenset()
    length: int = 0  # the next window's length before the room cap (set from gamma)
    zero: bool = True  # priced: a window may be empty (a plain decode step)
    # priced: the measured costs (shared with the decoder that feeds them, and with the pair's
    # other runs: pair_costs), the acceptance
    # per position per proposer, decoded steps in a row, the gap before the next probe, and the
    # last plan's proposer and reason in words (the Verify event's `price`)
    costs: pricing.Costs = field(default_factory=pricing.Costs)
    acceptance: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)  # priced: source -> pricing.Calibration
    plain_run: int = 0
    probe_gap: int = FIRST_PROBE
    source: str = "draft"
    note: str = ""
    probing: bool = False  # the last plan was a probe (drafted whole, whatever it costs)

    def __post_init__(self):
        self.max_len = max(self.max_len, self.min_len)
        if not self.length:
            self.length = self.gamma if self.fixed else min(max(self.gamma, self.min_len), self.max_len)

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed"

    @property
    def priced(self) -> bool:
        return self.kind == "priced"

    def plan(self, room: int, lookup: int = 0, behind: int = 0) -> tuple[int, str]:
        """(tokens to draft at most, the reason if the window reaches it). room: tokens the
        run may still commit; lookup: tokens a prompt lookup offers now (priced windows then
        price it beside the draft model, `source` says which won); behind: committed tokens
        the draft model lacks (priced: its catch-up is a cost of drafting with it)."""
        if self.priced:
            return self._priced_plan(room, lookup, behind)
        if not self.fixed and room - 1 < self.length:
            return max(1, room - 1), "room"
        return self.length, "gamma"

    def accepting(self, source: str) -> pricing.PositionAcceptance:
        if source not in self.acceptance:
            self.acceptance[source] = pricing.PositionAcceptance(pricing.SEED_ACCEPT.get(source, 0.5))
        return self.acceptance[source]

    def _priced_plan(self, room: int, lookup: int, behind: int) -> tuple[int, str]:
        """The best priced window (pricing.best_window) within [min_len, max_len] and the room;
        a probe after `probe_gap` decoded steps in a row, if it could pay for the draft's
        catch-up at the acceptance a probe hopes for (PROBE_ACCEPT)."""
        top = max(1, min(self.max_len, room - 1))
        sources = {"draft": top, **({"lookup": min(top, lookup)} if lookup > 0 else {})}
        lo = min(self.min_len, top)
        table_in = {s: (self.accepting(s).rates(hi), lo, hi) for s, hi in sources.items()}
        prices = self.costs.snapshot()
        best, table = pricing.best_window(prices, table_in, self.zero, behind, room)
        probe = self.probing = best.k == 0 and self.plain_run >= self.probe_gap and self._hopeful(
            prices, sources, behind, room)
        if probe:  # two tokens (the draft's cost is measured past its catch-up forward)
            best = max((o for o in table if o.k == min(PROBE_LEN, top)), key=lambda o: o.rate)
        self.source = best.source or "draft"
        self.note = pricing.explain(best, table, probe)
        if best.k == 0:
            return 0, "price"
        if probe or best.rate * (prices.decode_s + prices.host_s(False)) <= 1:  # a probe, or a window Mirror-SD must draft
            return best.k, "probe" if probe else "price"
        # drafting pays: the window goes on while each next token still pays (window_stop)
        cap = min(top, lookup) if best.source == "lookup" else top
        self.note += f"; up to {cap} while each next token pays"
        if cap == top and room - 1 < self.max_len:
            return cap, "room"
        return cap, "match" if best.source == "lookup" and cap < top else "price"

    def calibrated(self, source: str) -> pricing.Calibration:
        if source not in self.calibration:
            self.calibration[source] = pricing.Calibration()
        return self.calibration[source]

    def window_stop(self):
        """The stop rule for one window drafted token by token (a fresh one per window).
        Priced: after each token, whether one more raises the window's expected tokens per
        second (pricing.worth_more), with each drafted token trusted as far as the draft's
        probability of it has been accepted so far (pricing.Calibration); else `stop`."""
        if not self.priced:
            return self.stop
        prices, source, probing = self.costs.snapshot(), self.source, self.probing
        # the next token's acceptance: pooled over positions (a later position is seldom
        # reached, and its own estimate would keep windows from ever reaching it)
        calibration, a_next = self.calibrated(source), self.accepting(source).pooled()
        survival: list[float] = []

        def stop(token: int, q: float) -> str | None:
            if token in self.eos:
                return "eos"
            if probing:
                return None
            survival.append((survival[-1] if survival else 1.0) * calibration.accept(q))
            if not pricing.worth_more(prices, source, survival, a_next):
                return "price"
            return None

        return stop

    def _hopeful(self, prices, sources: dict, behind: int, room: int) -> bool:
        """Whether drafting could beat decoding at the acceptance a probe hopes for, the
        draft's catch-up included: else a probe could only cost (a short run, a dear draft).
        Where this run has not measured the draft yet, also at the seeds' prices for its
        forwards and the verify: a figure from an earlier run may be stale (too dear), and only
        a probe measures it again."""
        hope = {s: ([self.hoped(s)] * hi, 1, hi) for s, hi in sources.items()}
        tried = [prices, prices.seeded()] if self.costs.from_earlier_runs("draft") else [prices]
        return any(pricing.best_window(p, hope, True, behind, room)[0].k > 0 for p in tried)

    def hoped(self, source: str) -> float:
        """The acceptance a probe hopes for: PROBE_ACCEPT, or once this pair's windows from
        `source` have shown theirs (pricing.PROBE_EVIDENCE windows), that plus PROBE_MARGIN."""
        seen = self.acceptance.get(source)
        if seen is None or sum(seen.reached) < pricing.PROBE_EVIDENCE:
            return pricing.PROBE_ACCEPT
        return min(pricing.PROBE_ACCEPT, seen.pooled() + pricing.PROBE_MARGIN)

    def stop(self, token: int, q: float) -> str | None:
        """Why the window ends after drafting `token` with draft probability `q`, or None."""
        if self.fixed:
            return None
        if token in self.eos:
            return "eos"
        if q < self.threshold:
            return "confidence"
        return None

    def cut(self, tokens: list[int], q_probs: list[float], room: int) -> tuple[int, str]:
        """(length, stop reason) of a window already drafted (`tokens`, with their draft
        probabilities) under this policy: the same window the policy's rollout would draw."""
        cap, reason = self.plan(room)
        stop = self.window_stop()
        for i, (t, q) in enumerate(zip(tokens[:cap], q_probs)):
            why = stop(t, q)
            if why is not None:
                return i + 1, why
        return min(cap, len(tokens)), reason

    def next_length(self, drafted: int, accepted: int) -> int:
        """The next window's length (before the room cap) after a verdict: `accepted` of
        `drafted` tokens. Pure: `observe` applies it."""
        if self.kind != "adaptive" or drafted == 0:
            return self.length
        if accepted >= drafted:
            return min(self.length + GROW, self.max_len)
        return max(self.length - SHRINK, self.min_len)

    def plan_after(self, drafted: int, accepted: int, room: int, source: str | None = None,
                   q_probs: list[float] | None = None) -> tuple[int, str]:
        """What `plan(room)` will say once `observe(drafted, accepted)` has run, without
        running it: Mirror-SD's branch rooted at depth `accepted` is the window after exactly
        that verdict, so it can be drafted to its own length before the verdict is known."""
        after = replace(self, acceptance={s: a.copy() for s, a in self.acceptance.items()},
                        calibration={s: c.copy() for s, c in self.calibration.items()})
        after.observe(drafted, accepted, source, q_probs)
        return after.plan(room)

    def observe(self, drafted: int, accepted: int, source: str | None = None,
                q_probs: list[float] | None = None) -> None:
        """Update the next length from a verdict: `accepted` of `drafted` tokens (drafted by
        `source`, default the last plan's; `q_probs`: the draft's probability of each)."""
        self.length = self.next_length(drafted, accepted)
        if not self.priced:
            return
        if drafted == 0:
            self.plain_run += 1
            return
        self.accepting(source or self.source).observe(drafted, accepted)
        if q_probs:
            self.calibrated(source or self.source).observe(q_probs, accepted)
        if self.plain_run:  # a probe: wait longer before the next unless it was all accepted
            self.probe_gap = max(PROBE_AFTER, min(2 * self.probe_gap, PROBE_MAX))
        if accepted >= drafted:
            self.probe_gap = PROBE_AFTER
        self.plain_run = 0


def drafting_every_step(settings):
    """The settings with the draft model drafting every step: priced windows may draft nothing
    and prompt lookup runs no model, but a warm-up must run the draft model and the tuning
    probe must time it (priced windows become adaptive ones, the proposer the draft model)."""
    window = "adaptive" if settings.window == "priced" else settings.window
    return replace(settings, window=window, proposer="draft")


def _kept_with_pair(pair, slot: str, key: tuple, make):
    """`pair.info[slot][key]`, made by `make()` the first time; a fresh one for a pair
    without an info dict."""
    info = getattr(pair, "info", None)
    if not isinstance(info, dict):
        return make()
    kept = info.setdefault(slot, {})
    if key not in kept:
        kept[key] = make()
    return kept[key]


def pair_costs(pair, *key) -> pricing.Costs:
    """The measured costs priced windows read, kept with the pair across runs
    (`pair.info["prices"]`, per `key`: the method and the drafting settings that change a
    cost): a run starts from what the runs before it on this machine measured, the warm-up's
    (which drafts every step) included, not from the seeds. A run that never drafted could
    otherwise never price drafting below the seeds' guess and would decode to the end."""
    costs = _kept_with_pair(pair, "prices", key, pricing.Costs)
    costs.share_decode(pair_decode(pair))
    costs.begin_run()
    return costs


def pair_decode(pair) -> pricing.RunningMedian:
    """The target's plain decode step on this pair (seconds), one running median for every
    method: AR's steps (autoregressive.plain_step) and SD's and Mirror-SD's decode steps feed
    it, priced windows read it (`pair_costs`)."""
    return _kept_with_pair(pair, "decode", (), pricing.RunningMedian)


def pair_acceptance(pair, *key) -> dict:
    """The priced windows' acceptance per proposer (source -> pricing.PositionAcceptance),
    kept with the pair across runs like `pair_costs`: a run starts from the acceptance the
    pair's last windows showed (decayed per window, so it follows the text) rather than the
    seeds, and a probe hopes for what this pair has shown (`_hopeful`)."""
    return _kept_with_pair(pair, "acceptance", key, dict)


def shared_with_pair(policy: WindowPolicy, pair, method: str, draft_vocab, streams, *more) -> WindowPolicy:
    """`policy` reading and feeding the pair's costs for the method and the drafting settings
    that change them (`more`: the method's own), and the pair's acceptance for the proposal
    settings alone: how often the target keeps the draft's tokens does not depend on which
    method verifies them (Mirror-SD's windows are the windows SD would draft), so SD's runs
    teach Mirror-SD's and the other way round."""
    policy.costs = pair_costs(pair, method, draft_vocab, streams, *more)
    policy.acceptance = pair_acceptance(pair, draft_vocab, streams)
    return policy


def policy_for(settings, eos=(), cap: int | None = None) -> WindowPolicy:
    """The run's policy from Settings (window, gamma, window_threshold/min/max); `cap` bounds
    the length (Mirror-SD with branch_extend off: its branches are gamma tokens long)."""
    top = settings.window_max if cap is None else min(settings.window_max, cap)
    return WindowPolicy(settings.window, settings.gamma, settings.window_threshold,
                        min(settings.window_min, top), top, frozenset(eos))
