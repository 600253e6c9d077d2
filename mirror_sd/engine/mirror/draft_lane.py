"""Mirror-SD's draft lane: a worker thread that owns the draft model and its cache.

Per step it extends its cache by the window under verification, rolls out branches from
roots scored with the target's early exit while the target's remaining layers run, and when
the verdict (A, c) arrives hands over the next window: the branch rooted at (A, c) (a hit)
or a serial rollout from c (a miss). `StepJob` is what the two lanes share during a step.

Branch lengths (Settings.branch_extend): a root (j, v) stands for one verdict, "accepted j of
the window", so the window policy's next length after it is known before the verdict
arrives (windows.WindowPolicy.plan_after). With `on` each branch is drafted to that length
and stops where the policy stops a serial rollout; whatever the branch still lacks when the
verdict arrives, the lane drafts then, alone, as plain SD would: a hit's window is the one SD's
policy would draft (under the adaptive policy, up to window_max). With `off` branches are
gamma deep and a taken branch is only cut, so a hit's window is at most gamma long.
"""
from __future__ import annotations

import contextlib
import logging
import queue
import threading
from dataclasses import dataclass, field

from mirror_sd.engine.drafting import Window, to_probs
from mirror_sd.engine.events import DraftBranch
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.mirror.branches import BranchBatch
from mirror_sd.engine.proposers import SERIAL, Proposer, draft_window
from mirror_sd.engine.mirror.scoring import ACCEPT_WEIGHT, EXIT_WEIGHT, Root, rank_of, score_roots
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.windows import WindowPolicy, policy_for
from mirror_sd.placement import cache_tensors, lane_stream

log = logging.getLogger(__name__)

EARLY_ROOTS = 1  # roots started on the draft's own guess, before the early exit arrives


@dataclass
class StepJob:
    """What the two lanes share during one step."""
    step: int
    n: int  # committed length before the step (y_1..y_n)
    window: Window
    proposals: tuple | None = None  # (ids [gamma+1][kappa], logprobs [gamma+1][kappa])
    proposals_ready: threading.Event = field(default_factory=threading.Event)
    verdict: tuple | None = None  # (A, c)
    verdict_ready: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)  # set with either of the above
    cancelled: bool = False
    # filled by the draft lane
    next_window: Window | None = None
    hit: bool = False
    rank: int | None = None  # the verdict root's place in the lane's scored roots (-1: not in it; None: no list)
    branches: list = field(default_factory=list)  # DraftBranch events
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def post_proposals(self, proposals):
        self.proposals = proposals
        self.proposals_ready.set()
        self.wake.set()

    def post_verdict(self, verdict):
        self.verdict = verdict
        self.verdict_ready.set()
        self.wake.set()

    def cancel(self):
        self.cancelled = True
        self.verdict_ready.set()
        self.proposals_ready.set()
        self.wake.set()

    def matches(self, root: Root) -> bool:
        return self.verdict is not None and (root.depth, root.token) == tuple(self.verdict)


def mirror_policy(settings, eos=()) -> WindowPolicy:
    """Mirror-SD's window policy: the run's (windows.policy_for), capped at gamma when
    branches are not extended (a taken branch is then only cut)."""
    return policy_for(settings, eos, cap=None if settings.branch_extend == "on" else settings.gamma)


class DraftWorker(threading.Thread):
    """The draft lane: owns the draft model and its cache for the whole run."""

    def __init__(self, lane: Lane, run: Run, exit_weight: float = EXIT_WEIGHT,
                 proposer: Proposer = SERIAL, accept_weight: float = ACCEPT_WEIGHT,
                 alone=contextlib.nullcontext, policy: WindowPolicy | None = None):
        super().__init__(name="mirror-draft-lane", daemon=True)
        self.lane, self.run_ = lane, run
        self.exit_weight = exit_weight  # share of a root's token score taken from the early exit
        self.accept_weight = accept_weight  # share of the acceptance estimates taken from it
        self.proposer = proposer  # drafts the window after a miss (serial or stream heads)
        self.inbox: queue.Queue = queue.Queue()
        self.alone = alone  # () -> context: the lane works alone (the target waits for it)
        self.extend = run.settings.branch_extend == "on"  # branches as long as the policy's windows
        # the run's window policy (windows.py): this lane alone reads and updates it once the
        # first window is drafted
        self.policy = policy or mirror_policy(run.settings, run.pair.eos_token_ids)

    def run(self):
        # On a GPU shared with the target, the draft's kernels go on a stream of their own.
        with lane_stream(self.lane.device, adopt=cache_tensors(self.lane.cache)):
            self._serve()

    def _serve(self):
        while True:
            job = self.inbox.get()
            if job is None:
                return
            try:
                with contextlib.ExitStack() as alone:  # left before the target lane resumes
                    self._step(job, alone)
            except BaseException as e:  # reported to the target lane, which goes on alone
                log.exception("draft lane failed")
                job.error = e
            finally:
                job.done.set()

    def _span(self, label, step, detail=""):
        return self.run_.span("draft", label, self.lane.device, step, detail)

    def _step(self, job: StepJob, alone: contextlib.ExitStack):
        """One step of the draft lane: extend, race the verdict with branches, then hand the
        next window over (a finished branch on a hit, a serial rollout on a miss)."""
        q_bonus = self._extend(job)
        raced = self._race(job, q_bonus, alone)
        if raced is None:  # the step was cancelled
            return
        batch, scored = raced
        taken = self._next_window(job, batch)
        self._report(job, batch, scored, taken)

    def _extend(self, job: StepJob):
        """Extend the cache by d_gamma: the draft's view of the bonus position (its q row)."""
        lane = self.lane
        with self._span("extend", job.step, "feed d_gamma"):
            logits = lane.feed(lane.sync(self.run_.committed[:job.n] + job.window.tokens), logits_to_keep=1)
            return to_probs(logits[-1:], self.run_.settings.sampling)[0]

    def _race(self, job: StepJob, q_bonus, alone: contextlib.ExitStack):
        """Branch-complete rollouts, batched, until the verdict makes them stale.

        Before the early exit arrives the draft starts on its own best root; once it is here
        the budget is the best `branch_budget` roots of the scored list (the early root stays
        only if it is one of them), so a step hits exactly when the verdict's rank is below
        the budget. Returns (batch, scored roots or None), or None when cancelled."""
        s, lane = self.run_.settings, self.lane
        batch = BranchBatch(lane.model, lane.cache, lane.entries(job.n), s.gamma, s.sampling,
                            self.policy.stop if self.extend else None)
        admitted: set = set()
        scored = None  # the roots scored once the early exit arrived, best first
        alone_now = False

        def admit(roots, limit):
            for root in [r for r in roots if lane.can_branch(r.token)][:limit]:
                if (root.depth, root.token) not in admitted:
                    admitted.add((root.depth, root.token))
                    batch.admit(root, generator_for(s.seed, job.step, "branch", root.depth, root.token),
                                self._branch_length(job, root.depth))

        while True:
            job.wake.clear()
            if job.cancelled:
                return None
            # read before the proposals: they are posted before the verdict, so a verdict seen
            # here always finds its proposals below
            verdict_in = job.verdict_ready.is_set()
            if scored is None and job.proposals_ready.is_set():
                # the early exit is here: the budget goes to the scored list
                scored = score_roots(job.window.tokens, job.window.q_rows, q_bonus, job.proposals,
                                     s.kappa, self.exit_weight, self.accept_weight)
                best = {(r.depth, r.token) for r in scored[:s.branch_budget]}
                batch.keep(lambda root: (root.depth, root.token) in best)
                admit(scored, s.branch_budget)
            elif not admitted:  # start on the draft's own best guess
                admit(score_roots(job.window.tokens, job.window.q_rows, q_bonus, None, s.kappa),
                      min(EARLY_ROOTS, s.branch_budget))
            if verdict_in:
                if not alone_now:  # the target lane now waits for this one: use its cores too
                    alone.enter_context(self.alone())
                    alone_now = True
                batch.keep(job.matches)  # stale branches are cancelled now
                if batch.done or not batch.live:
                    return batch, scored
            if batch.live:
                with self._span("branches", job.step, f"{len(batch.live)} rows"):
                    batch.forward()
            else:  # idle until the early exit or the verdict arrives
                job.wake.wait(1.0)

    def _branch_length(self, job: StepJob, depth: int) -> int:
        """Tokens a branch rooted at `depth` drafts at most: gamma (branch_extend off), or the
        window the policy will ask for after the verdict "accepted `depth`" (A + 1 tokens
        committed; the policy's state is this step's, before `observe`)."""
        s = self.run_.settings
        if not self.extend:
            return s.gamma
        room = s.max_new_tokens - (job.n - len(self.run_.prompt_ids)) - (depth + 1)
        return self.policy.plan_after(len(job.window.tokens), depth, room)[0]

    def _next_window(self, job: StepJob, batch: BranchBatch):
        """The window verified next step; returns the branch taken (a hit) or None (a miss)."""
        s, lane = self.run_.settings, self.lane
        A, c = job.verdict
        prefix = self.run_.committed[:job.n]
        policy, room = self.policy, self.run_.room  # the verdict's tokens are committed by now
        policy.observe(len(job.window.tokens), A)
        taken = batch.done[0] if batch.done else None
        if taken is not None:  # a hit: the branch is the next window, its cache the draft's
            window = taken.window()
            n, stop = policy.cut(window.tokens, window.q_probs, room)
            lane.adopt(taken.cache, prefix + job.window.tokens[:A] + [c] + taken.tokens[:n - 1])
            if n < len(window.tokens):
                lane.cache.crop(n - len(window.tokens))  # drop the cut tokens' entries
            job.next_window = window.cut(n, stop)
        else:  # a miss: roll out from c serially, as plain SD would
            with self._span("fallback", job.step) as note:
                # the same random stream as a branch rooted at (A, c): a seeded run samples the
                # same window whether the branch was precomputed or not (hits change speed only)
                job.next_window = draft_window(self.proposer, policy, lane, prefix + job.window.tokens[:A] + [c],
                                               room, s.sampling, generator_for(s.seed, job.step, "branch", A, c))
                note["detail"] = self.proposer.describe(len(job.next_window.tokens))
        job.hit = taken is not None
        return taken

    def _report(self, job: StepJob, batch: BranchBatch, scored, taken) -> None:
        """The verdict's rank and a DraftBranch event per branch of the step."""
        A, c = job.verdict
        ranks = rank_of(scored) if scored is not None else None
        # score and rank from one list: a root admitted before the early exit arrived was
        # scored without it, and is reported with the score that ranked it afterwards
        scores = {(r.depth, r.token): r.score for r in scored} if scored is not None else {}
        job.rank = None if ranks is None else ranks.get((A, c), -1)
        for root, row in batch.history.items():
            status = "taken" if row is taken else "cancelled"
            rank = None if ranks is None else ranks.get((root.depth, root.token), -1)
            score = scores.get((root.depth, root.token), root.score)
            # a taken branch is reported as the window it became (cut by the window policy)
            tokens = job.next_window.tokens if row is taken else list(row.tokens)
            job.branches.append(DraftBranch(job.step, root.depth, root.token, score, tokens,
                                            [float(q[t]) for q, t in zip(row.q_rows, tokens)], status,
                                            rank))
        if taken is None:
            job.branches.append(DraftBranch(job.step, A, c, 0.0, job.next_window.tokens,
                                            job.next_window.q_probs, "serial", job.rank))
