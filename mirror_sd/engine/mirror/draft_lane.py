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

The hand-off: the worker thread only works while the target lane does (one core each on a
CPU). Once the verdict is in, it stops at once (a branch forward in flight that no verdict can
use stops at its next decoder layer) and the waiting target lane's thread finishes the step
with both cores (`DraftWorker.finish`: the taken branch's last tokens, or the serial rollout
after a miss). So every forward that runs with two threads runs on the thread whose OpenMP
team is already warm, and the worker never builds a team of its own (research/lane_speed.py).
"""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field

import torch

from mirror_sd.engine.drafting import Window, to_probs
from mirror_sd.engine.events import DraftBranch
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.mirror.branches import BranchBatch
from mirror_sd.engine.proposers import SERIAL, Proposer, fill_window, plan_window
from mirror_sd.engine.mirror.scoring import ACCEPT_WEIGHT, EXIT_WEIGHT, Root, rank_of, score_roots
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.windows import WindowPolicy, policy_for
from mirror_sd.models.pair import exit_parts
from mirror_sd.placement import cache_tensors, lane_join, lane_stream, lane_sync

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
    done: threading.Event = field(default_factory=threading.Event)  # the worker's part is over
    raced: tuple | None = None  # (batch, scored roots or None): handed to DraftWorker.finish
    exit_rows: torch.Tensor | None = None  # lanes in turn: the exit layer's hidden rows, kept for the exit check (exit_check.py)

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


class StaleForward(Exception):
    """Raised inside the worker's branch forward when the verdict has made every row stale."""


class DraftWorker(threading.Thread):
    """The draft lane: owns the draft model and its cache for the whole run. Its thread works
    while the target lane verifies; `finish` runs on the target lane's thread (the hand-off)."""

    def __init__(self, lane: Lane, run: Run, exit_weight: float = EXIT_WEIGHT,
                 proposer: Proposer = SERIAL, accept_weight: float = ACCEPT_WEIGHT,
                 policy: WindowPolicy | None = None):
        super().__init__(name="mirror-draft-lane", daemon=True)
        self.lane, self.run_ = lane, run
        self.exit_weight = exit_weight  # share of a root's token score taken from the early exit
        self.accept_weight = accept_weight  # share of the acceptance estimates taken from it
        self.proposer = proposer  # drafts the window after a miss (serial or stream heads)
        self.inbox: queue.Queue = queue.Queue()
        self.extend = run.settings.branch_extend == "on"  # branches as long as the policy's windows
        # the run's window policy (windows.py): read and updated by whichever thread holds the
        # lane (the worker before the verdict, the target lane's thread in `finish`)
        self.policy = policy or mirror_policy(run.settings, run.pair.eos_token_ids)
        self.held_bonus = None  # (ids, q row): the lane already holds the window's last token
        self._stale = None  # () -> bool while a branch forward runs in this thread

    def run(self):
        # On a GPU shared with the target, the draft's kernels go on a stream of their own.
        hooks = self._stale_hooks()
        try:
            with lane_stream(self.lane.device, adopt=cache_tensors(self.lane.cache)):
                self._serve()
        finally:
            for h in hooks:
                h.remove()

    def _stale_hooks(self) -> list:
        """A pre-hook on each decoder layer of the draft: in this thread, while a branch forward
        runs, stop it at the next layer once the verdict has made all its rows stale."""
        try:
            layers = exit_parts(self.lane.model)[0]
        except (AttributeError, TypeError):  # a wrapped draft without a layer list: forwards run to the end
            return []
        me = threading.get_ident()

        def check(module, args):
            if self._stale is not None and threading.get_ident() == me and self._stale():
                raise StaleForward

        return [layer.register_forward_pre_hook(check) for layer in layers]

    def _serve(self):
        while True:
            job = self.inbox.get()
            if job is None:
                return
            try:
                lane_join(self.lane.device)  # after the hand-off's work on the default stream
                job.raced = self._step(job)
                lane_sync(self.lane.device)
            except BaseException as e:  # reported to the target lane, which goes on alone
                log.exception("draft lane failed")
                job.error = e
            finally:
                job.done.set()

    def _span(self, label, step, detail=""):
        return self.run_.span("draft", label, self.lane.device, step, detail)

    def _step(self, job: StepJob):
        """The worker's part of a step: extend, then race the verdict with branches. Returns
        (batch, scored roots or None), or None when the step was cancelled."""
        q_bonus = self._extend(job)
        return self._race(job, q_bonus)

    def finish(self, job: StepJob) -> None:
        """The hand-off, on the target lane's thread after the worker's part (both cores on a
        CPU): the taken branch's last tokens, the next window, the step's branch events."""
        batch, scored = job.raced
        while batch.live and not batch.done:  # only the verdict's row is left
            with self._span("branches", job.step, f"{len(batch.live)} rows"):
                batch.forward()
        taken = self._next_window(job, batch)
        self._report(job, batch, scored, taken)

    def finish_serial(self, job: StepJob) -> None:
        """A step whose lanes ran one after the other (gate.py), on the target lane's thread
        after the verdict: the next window rolled out from (A, c) as plain SD does."""
        A, c = job.verdict
        self.policy.observe(len(job.window.tokens), A, job.window.source or None, job.window.q_probs)
        self.held_bonus = None
        committed = self.run_.committed[:job.n] + job.window.tokens[:A] + [c]
        job.next_window = self._roll_out(job, committed, "draft", ", after the verdict")
        if job.next_window.tokens:
            job.branches.append(DraftBranch(job.step, A, c, 0.0, job.next_window.tokens,
                                            job.next_window.q_probs, "serial", None))

    def _roll_out(self, job: StepJob, committed: list[int], label: str, detail: str = ""):
        """The next window after `committed` as the policy plans it, rolled out serially (a
        span `label` on this lane), or empty with no span where the plan drafts nothing (a
        priced window that would not pay: the next step decodes). The random stream is that
        of a branch rooted at the verdict (A, c): a seeded run samples the same window whether
        a branch was precomputed or not (hits change speed only)."""
        s, (A, c) = self.run_.settings, job.verdict
        plan = plan_window(self.proposer, self.policy, committed, self.run_.room, self.lane)
        if plan.length == 0:
            return fill_window(self.proposer, plan, self.policy, self.lane, committed, s.sampling, None)
        with self._span(label, job.step) as note:
            window = fill_window(self.proposer, plan, self.policy, self.lane, committed, s.sampling,
                                 generator_for(s.seed, job.step, "branch", A, c))
            note["detail"] = f"{self.proposer.describe(len(window.tokens))}{detail}"
        return window

    def _extend(self, job: StepJob):
        """Extend the cache by d_gamma: the draft's view of the bonus position (its q row).
        No forward when the lane already holds d_gamma (a taken branch cut by the policy)."""
        lane, want = self.lane, self.run_.committed[:job.n] + job.window.tokens
        held, self.held_bonus = self.held_bonus, None
        if held is not None and held[0] == want and lane.ids == want:
            return held[1]
        with self._span("extend", job.step, "feed d_gamma"):
            logits = lane.feed(lane.sync(want), logits_to_keep=1)
            return to_probs(logits[-1:], self.run_.settings.sampling)[0]

    def _forward(self, job: StepJob, batch: BranchBatch) -> None:
        """One branch forward beside the target; stopped at a decoder layer (and its rows
        dropped) once the verdict is in and no live row is rooted at it."""
        self._stale = lambda: job.cancelled or (job.verdict_ready.is_set()
                                                and not any(job.matches(r.root) for r in batch.live))
        rows = len(batch.live)
        try:
            with self._span("branches", job.step, f"{rows} rows") as note:
                try:
                    batch.forward()
                except StaleForward:  # its cache is half written: every live row goes
                    batch.drop_live()
                    note["detail"] = f"{rows} rows, stopped at the verdict"
        finally:
            self._stale = None

    def _race(self, job: StepJob, q_bonus):
        """Branch-complete rollouts, batched, until the verdict makes them stale.

        Before the early exit arrives the draft starts on its own best root; once it is here
        the budget is the best `branch_budget` roots of the scored list (the early root stays
        only if it is one of them), so a step hits exactly when the verdict's rank is below
        the budget. With `early_exit` off no exit comes: the draft's own scored list is the
        budget from the start (what the exit buys is the hit rate between the two). Returns (batch, scored roots or None), or None when cancelled."""
        s, lane = self.run_.settings, self.lane
        batch = BranchBatch(lane.model, lane.cache, lane.entries(job.n), s.gamma, s.sampling,
                            self.policy.stop if self.extend else None)
        admitted: set = set()
        scored = None  # the roots scored once the early exit arrived, best first

        def admit(roots, limit, wanted=lambda root: True):
            for root in [r for r in roots if lane.can_branch(r.token)][:limit]:
                if (root.depth, root.token) not in admitted and wanted(root):
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
                # with the verdict already in, only its own root starts (the others would be
                # cancelled before their first forward)
                admit(scored, s.branch_budget, job.matches if verdict_in else lambda root: True)
            elif scored is None and s.early_exit == "off":  # no exit: the draft's own guesses decide
                scored = score_roots(job.window.tokens, job.window.q_rows, q_bonus, None, s.kappa)
                admit(scored, s.branch_budget, job.matches if verdict_in else lambda root: True)
            elif not admitted and not verdict_in:  # start on the draft's own best guess
                admit(score_roots(job.window.tokens, job.window.q_rows, q_bonus, None, s.kappa),
                      min(EARLY_ROOTS, s.branch_budget))
            if verdict_in:  # the rest is the target lane's (finish): stale branches go now
                batch.keep(job.matches)
                return batch, scored
            if batch.live:
                self._forward(job, batch)
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
        # at least one token: a priced plan of none (the step after would decode) still races
        # (the hit's window is then cut to none)
        return max(1, self.policy.plan_after(len(job.window.tokens), depth, room, job.window.source or None,
                                             job.window.q_probs)[0])

    def _next_window(self, job: StepJob, batch: BranchBatch):
        """The window verified next step; returns the branch taken (a hit) or None (a miss)."""
        lane = self.lane
        A, c = job.verdict
        prefix = self.run_.committed[:job.n]
        policy, room = self.policy, self.run_.room  # the verdict's tokens are committed by now
        policy.observe(len(job.window.tokens), A, job.window.source or None, job.window.q_probs)
        taken = batch.done[0] if batch.done else None
        if taken is not None:  # a hit: the branch is the next window, its cache the draft's
            window = taken.window()
            n, stop = policy.cut(window.tokens, window.q_probs, room)
            held = min(n, len(window.tokens) - 1)  # window tokens the branch's cache holds
            ids = prefix + job.window.tokens[:A] + [c] + taken.tokens[:held]
            lane.adopt(taken.cache, ids)
            if held < len(window.tokens) - 1:
                lane.cache.crop(held - len(window.tokens) + 1)  # drop the cut tokens' entries
            if held == n:  # cut by the policy: the lane holds the new d_gamma and its q row
                self.held_bonus = (ids, taken.q_rows[n])
            job.next_window = window.cut(n, stop)
        else:  # a miss: roll out from c serially, as plain SD would
            job.next_window = self._roll_out(job, prefix + job.window.tokens[:A] + [c], "fallback")
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
        if taken is None and job.next_window.tokens:
            job.branches.append(DraftBranch(job.step, A, c, 0.0, job.next_window.tokens,
                                            job.next_window.q_probs, "serial", job.rank))
