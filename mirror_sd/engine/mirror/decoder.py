"""Mirror speculative decoding (Bhendawade et al. 2025): the target lane and the step loop.

Per step, on two lanes at once:
  target lane (this thread): forward over [y_n, d_1..d_gamma]; a hook on decoder layer
      `exit_layer` reads the target's own final norm + LM head there (the early exit) and
      hands the top-kappa proposals to the draft lane *while* the remaining layers run;
      then the acceptance rule on the final distributions -> (A, c).
  draft lane (draft_lane.py: a worker thread; on a GPU, its own CUDA stream): extends its
      cache by d_gamma, scores (depth, token) roots from the proposals and its own
      distributions, rolls out the best `branch_budget` roots, batched (one draft forward
      per depth for all branches), each as long as the window policy's next window after
      the verdict it stands for.
When the verdict (A, c) arrives: a rollout rooted at (A, c) *is* the next window (a hit;
the other branches are dropped at once); otherwise the draft rolls out from c serially
(a miss).
Window lengths (windows.py): every window is the one the run's window policy asks for,
as in plain SD. The first window and the serial rollouts after a miss are drafted by the
policy; a branch rooted at (j, v) stands for the verdict "j accepted", so its length is the
policy's next length after that verdict, known before the verdict arrives, and it stops where
the policy stops a serial rollout; what a taken branch still lacks when the verdict comes, the
lane drafts then (draft_lane.py). Under the adaptive policy a hit's window grows to
window_max like SD's. Settings.branch_extend = off keeps branches gamma deep (a taken branch
is only cut: windows at most gamma). Priced windows are priced with the verify forwards, the
draft time the target waits for the next window (near 0 on a hit) and the step's host time,
each mode's steps into costs of their own, and a window is priced with the costs of the mode
the run mostly steps in (gate.favoured). Steps with the lanes one after the other are SD's
steps (the same forwards, in the same order): they read and feed the very costs SD's runs on
this pair measure (windows.pair_costs for "sd"), so where the gate keeps the lanes apart,
Mirror-SD prices its windows as SD does, from the same figures (which still move with the
machine between runs), and the overlap is what separates the two methods by design. A
priced window may be empty where drafting would not pay: that step is a plain target decode,
the lanes one after the other (nothing to race). The length never depends on the target's distributions
for the window it is verified against, so the acceptance rule stays lossless. The proposals
only choose what is precomputed; every committed token is verified against the target's
final layer, so the output is the target's own.

On a CPU the two lanes have one core each while both work; where one works alone (the
prefill and first window, the draft lane's work from the verdict on while the target waits)
it takes both (placement.lane_alone). The draft lane's work after the verdict runs on this
(the target lane's) thread, handed over by the worker (draft_lane.DraftWorker.finish): the
worker thread only ever uses one core, so two-thread work always runs on the warm OpenMP
team of this thread (research/lane_speed.py). Where the two lanes share one CPU's cores, a
step may instead run them one after the other, each with every core, when this pair's measured
steps say overlapping is slower there (gate.py, Settings.lane_overlap); on devices of their
own the lanes always overlap.

The exit layer and the exit lens come from the one rule in exit_layer.py.
"""
from __future__ import annotations

import logging
import threading
import time

import torch

from mirror_sd.engine.autoregressive import plain_step
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.events import DraftBranch, EarlyExit, Notice, Span, StepStart
from mirror_sd.engine.cross import lane_for
from mirror_sd.engine.lanes import Lane
from mirror_sd.engine.mirror.draft_lane import DraftWorker, StepJob, mirror_policy
from mirror_sd.engine.mirror.early_exit import exit_head, exit_parts
from mirror_sd.engine.mirror.exit_check import ExitCheck, Pending, draft_views
from mirror_sd.models.bridged_draft import BridgedDraft
from mirror_sd.engine.mirror.gate import OverlapGate
from mirror_sd.engine.mirror.exit_layer import choose_exit_layer_for
from mirror_sd.engine.proposers import fill_window, plan_window, price_draft, proposer_for
from mirror_sd.engine.mirror.scoring import ACCEPT_WEIGHT, ACCEPT_WEIGHT_LENS, EXIT_WEIGHT, EXIT_WEIGHT_LENS
from mirror_sd.engine.run import generator_for
from mirror_sd.engine.speculative import verify_window
from mirror_sd.engine.windows import pair_costs, shared_with_pair
from mirror_sd.models.pair import model_vocab_size
from mirror_sd.placement import lane_alone, lane_split, lane_sync, lanes_share_a_device
from mirror_sd.proposals.draft_vocab import shipped_ids

log = logging.getLogger(__name__)


def _drafted(window, next_window) -> int:
    """A step's drafted tokens for the overlap gate: the window it verified and the next one."""
    return len(window.tokens) + (len(next_window.tokens) if next_window is not None else 0)


class MirrorSpeculative(Decoder):
    method = "mirror"
    lanes = 2  # the target and the draft run at the same time, one thread each on a CPU

    def __init__(self, pair, settings=None):
        super().__init__(pair, settings)
        self._worker: DraftWorker | None = None
        self._hook = None
        self._job: StepJob | None = None  # the step whose target forward is running (for the hook)
        self._active: StepJob | None = None  # the step the draft lane may still work on
        self._stalled = False  # the draft lane did not answer in lane_timeout_s
        self._held: StepJob | None = None  # a step with the lanes in turn whose exit rows the hook keeps
        self._check = ExitCheck()

    def _prepare(self):
        choice = choose_exit_layer_for(self.pair, self.settings)
        self._notices = list(choice.notices)
        self._info = {"exit_lens": choice.found.path if choice.lens is not None else None,
                      "exit_lens_note": choice.note, "exit_layer_rule": choice.rule,
                      "exit_layer": choice.layer}
        self._exit_layer = choice.layer
        self._head = exit_head(self.pair.target, self.settings.exit_head, choice.lens, choice.layer,
                               self._exit_vocab())

    def _exit_vocab(self):
        """Token ids the exit head proposes from: the draft's vocabulary when the run cuts it;
        under exit head `auto`, the shipped frequent-token set (it only picks branches: measured,
        the same hit rate at about half the head's time, docs/performance.md "The draft
        vocabulary")."""
        if self._vocab is not None and self._vocab.ids is not None:
            return self._vocab.ids
        ids = None
        if self.settings.exit_head == "auto" and self.pair.tokenizer is not None:
            ids = shipped_ids(self.pair.tokenizer, model_vocab_size(self.pair.target))
        if getattr(self.pair, "bridge", None) is not None:  # a root must be a token the draft can read in one position
            shared = self.pair.bridge.shared_target
            ids = shared if ids is None else ids[torch.isin(ids, shared)]
        return ids

    def _decode(self, run, cancel):
        run.info.update(self._info)
        for note in self._notices:
            yield Notice(note, "info")
        target = Lane(self.pair.target, "target")
        draft = lane_for(self.pair.draft, "draft", run.committed)
        proposer, notice = proposer_for(self.pair, run.settings.streams, run.settings.proposer)
        if notice:
            yield Notice(notice)
        marks = {}  # timestamps of the exit hook inside the current target forward
        self._hook = self._exit_hook(target, marks) if run.settings.early_exit == "on" else None
        s = run.settings
        policy = shared_with_pair(mirror_policy(s, self.pair.eos_token_ids), self.pair, "mirror",
                                  s.draft_vocab, s.streams, s.early_exit)
        self._policy = policy
        gate = OverlapGate(s.lane_overlap, lanes_share_a_device(self.pair), self._lane_costs(s))
        # the costs each mode's steps feed: overlapped, Mirror-SD's own; one lane after the other, SD's
        self._costs = {True: policy.costs,
                       False: pair_costs(self.pair, "sd", s.draft_vocab, s.streams) if gate.auto else policy.costs}
        policy.costs = self._costs[gate.favoured()]
        window = yield from self._first_window(run, target, draft, proposer, policy)
        lens_on = self._head.lens is not None
        self._stalled = False
        self._worker = DraftWorker(draft, run, EXIT_WEIGHT_LENS if lens_on else EXIT_WEIGHT, proposer,
                                   ACCEPT_WEIGHT_LENS if lens_on else ACCEPT_WEIGHT, policy=policy)
        run.info["verdict_ranks"] = []  # per step the lane finished: see DraftBranch.rank
        self._worker.start()
        step, hit = 0, False
        while not run.done and not cancel.is_set() and window is not None:
            # an empty window (priced: drafting would not pay) is a plain decode: nothing to race
            overlap = bool(window.tokens) and gate.overlap()
            step_fn = self._step if overlap else self._serial_step
            window, hit = yield from step_fn(run, target, step, window, hit, marks, gate)
            policy.costs = self._costs[gate.favoured()]  # the next windows: priced for the mode the gate favours now
            run.info["lane_split"] = f"{lane_split(self.pair)}; {gate.describe()}"
            step += 1
        while not run.done and not cancel.is_set():  # the draft lane failed: plain decoding
            yield StepStart(step, len(run.new_ids), [])
            with lane_alone(self.pair):  # the target is the only lane left
                yield from plain_step(run, target, step)
            step += 1

    def _lane_costs(self, s) -> dict:
        """The overlap gate's measured step costs for these settings, kept with the pair across
        runs (a step's cost depends on the pair, the machine and the drafting settings)."""
        key = (s.gamma, s.kappa, s.branch_budget, self._exit_layer, s.window, s.branch_extend, s.streams,
               s.draft_vocab, s.exit_lens, s.exit_head, s.early_exit, s.temperature > 0)
        if not isinstance(self.pair.info, dict):
            return {}
        return self.pair.info.setdefault("lane_costs", {}).setdefault(key, {})

    def _step(self, run, target: Lane, step: int, window, window_hit: bool, marks: dict, gate):
        """One overlapped step: the target lane verifies `window` while the draft lane races
        the verdict, then finishes the draft lane's step itself (the hand-off). Returns (the
        next window, or None when the run is over or the draft lane failed; whether a hit)."""
        yield StepStart(step, len(run.new_ids), list(window.tokens))
        job = StepJob(step, len(run.committed), window)
        self._job = self._active = job
        self._worker.inbox.put(job)
        marks.clear()
        start = time.perf_counter_ns()
        verdict, verify_event, commit = verify_window(run, target, step, window)
        if commit:
            commit.hit = window_hit
        self._job = None
        self._target_spans(run, step, marks)
        job.post_verdict((verdict.accepted, verdict.token))
        run.steps += 1
        if run.done:
            job.cancel()
        waited = time.perf_counter_ns()
        error = None if run.done else self._hand_off(run, job)
        waited = (time.perf_counter_ns() - waited) / 1e9  # the target lane waits for the next window
        if not run.done and error is None:
            gate.record(True, (time.perf_counter_ns() - start) / 1e6, _drafted(window, job.next_window),
                        self._decode_ms())
            self._price(run, self._costs[True], step, len(window.tokens) + 1, job.next_window, waited, start)
        if job.proposals:
            yield EarlyExit(step, self._exit_layer, list(range(len(window.tokens) + 1)), *job.proposals,
                            lens=self._head.lens is not None)
        yield from self._after_verdict(run, job, verify_event, commit, error)
        if run.done or error is not None:
            return None, False
        run.hits += job.hit
        run.misses += not job.hit
        if job.proposals is not None:
            self._check.add(Pending(step, job.n, window, tuple(job.verdict), proposals=job.proposals, hit=job.hit))
        run.info["verdict_ranks"].append(job.rank)
        return job.next_window, job.hit

    def _serial_step(self, run, target: Lane, step: int, window, window_hit: bool, marks: dict, gate):
        """One step with the lanes one after the other, each with every core (gate.py: where
        overlapping measured slower): the target verifies, then the draft rolls the next
        window out from the verdict, as plain SD does. Same windows, same rule, same output."""
        yield StepStart(step, len(run.new_ids), list(window.tokens))
        job = StepJob(step, len(run.committed), window)
        self._held = job if self._hook is not None and self._check.room(window) else None
        start = time.perf_counter_ns()
        with lane_alone(self.pair):
            verdict, verify_event, commit = verify_window(run, target, step, window)
        self._held = None
        if commit:
            commit.hit = window_hit
        job.verdict = (verdict.accepted, verdict.token)
        if job.exit_rows is not None and not run.done:  # checked after the run (exit_check.py)
            self._check.add(Pending(step, job.n, window, job.verdict, rows=job.exit_rows))
        run.steps += 1
        error = None
        if not run.done:
            try:
                drafted = time.perf_counter_ns()
                with lane_alone(self.pair):
                    self._worker.finish_serial(job)
                drafted = (time.perf_counter_ns() - drafted) / 1e9
            except Exception as e:  # the draft failed: the target lane goes on alone
                log.exception("draft lane failed")
                error = e
            else:
                wall_ms = (time.perf_counter_ns() - start) / 1e6
                nxt = job.next_window
                if nxt.behind > 2:  # the draft caught up with decoded tokens first: not this mode's cost
                    wall_ms -= nxt.first_s * 1e3
                if window.tokens:  # a decode step is no choice of mode: the gate compares drafted steps
                    gate.record(False, wall_ms, _drafted(window, nxt), self._decode_ms())
                self._price(run, self._costs[False], step, len(window.tokens) + 1, job.next_window, drafted,
                            start)
        yield from self._after_verdict(run, job, verify_event, commit, error)
        if run.done or error is not None:
            return None, False
        return job.next_window, False

    def _decode_ms(self) -> float:
        """What a plain target decode costs here (the priced windows' shared figure; 0 where
        windows are not priced: the gate then compares whole steps per drafted token)."""
        policy = self._policy
        return policy.costs.snapshot().decode_s * 1e3 if policy is not None and policy.priced else 0.0

    def _hand_off(self, run, job: StepJob):
        """Wait for the worker's part of the step, then finish it on this thread with both
        cores (the target lane waits for the next window anyway). Returns an error or None."""
        if not job.done.wait(run.settings.lane_timeout_s):
            self._stalled = True  # never wait for it again: _close leaves it to end on its own
            return TimeoutError(f"no answer in {run.settings.lane_timeout_s:g} s")
        if job.error is not None or job.raced is None:
            return job.error or RuntimeError("the draft lane stopped")
        try:
            with lane_alone(self.pair):
                self._worker.finish(job)
        except Exception as e:  # the draft failed here: the target lane goes on alone
            log.exception("draft lane failed in the hand-off")
            return e
        return None

    def _after_verdict(self, run, job: StepJob, verify_event, commit, error):
        """The step's events once its draft work is over: the verdict, the commit, then the
        branches (or the draft lane's failure)."""
        yield verify_event
        if commit:
            yield commit
        if run.done:
            job.cancel()
        elif error is not None:
            job.cancel()
            yield Notice(f"The draft lane failed ({error}); finishing with plain decoding.")
        else:
            yield from job.branches
        yield from run.new_spans()

    def _price(self, run, costs, step: int, rows: int, window, waited: float, start_ns: int | None = None) -> None:
        """The step's costs for priced windows (windows.py), into `costs` (the step's mode's):
        the target's verify forward over `rows` rows (prefix, exit head and suffix), the draft
        time the target waited for the next window (hidden behind a hit: near 0), per token of
        it, and the step's host time (from `start_ns` to now, less those two: the acceptance
        rule, the hand-off's bookkeeping); the window carries the policy's reason for its length."""
        window.note = self._policy.note
        forward = [sp.end_ns - sp.start_ns for sp in run.spans if sp.step == step and sp.lane == "target"
                   and sp.label in ("verify_forward", "decode", "prefix", "exit_head", "suffix")]
        if forward:
            costs.add_verify(rows, sum(forward) / 1e9)
        price_draft(costs, window, waited)
        if start_ns is not None:
            costs.add_host(rows > 1, (time.perf_counter_ns() - start_ns) / 1e9 - sum(forward) / 1e9 - waited)

    def _exit_hook(self, target: Lane, marks: dict):
        """A forward hook on the exit layer: during the target lane's verify forward, post the
        exit head's top-kappa proposals to the draft lane (and time them in `marks`)."""
        s, head = self.settings, self._head
        layers = exit_parts(self.pair.target)[0]
        target_thread = threading.get_ident()

        def on_exit_layer(module, args, output):
            if threading.get_ident() != target_thread:
                return  # not the target lane's forward (the draft may share modules)
            job = self._job
            if job is None:
                held = self._held  # the lanes in turn: keep the rows for the exit check, nothing more
                if held is not None:
                    h = output[0] if isinstance(output, tuple) else output
                    held.exit_rows = h[0, -(len(held.window.tokens) + 1):].detach().clone()
                return
            lane_sync(target.device)
            marks["exit_start"] = time.perf_counter_ns()
            h = output[0] if isinstance(output, tuple) else output  # [1, S, H]
            rows = len(job.window.tokens) + 1  # j = 0..len(window)
            job.post_proposals(head.proposals(h[0, -rows:], s.kappa))
            marks["exit_end"] = time.perf_counter_ns()

        return layers[self._exit_layer - 1].register_forward_hook(on_exit_layer)

    def _first_window(self, run, target: Lane, draft: Lane, proposer, policy):
        """The prompt's prefill and the first window, one lane at a time (both cores each)."""
        s = run.settings
        with lane_alone(self.pair):  # one lane at a time until the draft lane starts
            if len(run.committed) > 1:
                with run.span("target", "prefill", target.device, 0):
                    target.feed(run.committed[:-1], logits_to_keep=1)
            plan = plan_window(proposer, policy, run.committed, run.room, draft)
            if plan.length == 0:  # priced: drafting would not pay yet, the first step decodes
                return fill_window(proposer, plan, policy, draft, run.committed, s.sampling, None)
            with run.span("draft", "prefill+draft", draft.device, 0) as note:
                window = fill_window(proposer, plan, policy, draft, run.committed, s.sampling,
                                     generator_for(s.seed, 0, "draft"))
                note["detail"] = proposer.describe(len(window.tokens))
        span = run.spans[-1]  # priced as SD prices its windows (a warm-up measures the draft here)
        price_draft(self._costs[False], window, (span.end_ns - span.start_ns) / 1e9)
        yield DraftBranch(0, 0, run.committed[-1], 1.0, window.tokens, window.q_probs, "serial")
        return window

    def _target_spans(self, run, step, marks):
        """Split the verify forward into prefix (layers 1..exit), exit head and suffix."""
        fwd = next(sp for sp in reversed(run.spans) if sp.lane == "target" and sp.step == step)
        if "exit_start" in marks:
            head = f"{'lens + ' if self._head.lens is not None else ''}norm + LM head ({self._head.kind}), top-kappa"
            run.spans.remove(fwd)
            run.spans += [Span("target", "prefix", fwd.start_ns, marks["exit_start"], step, "layers 1..exit"),
                          Span("target", "exit_head", marks["exit_start"], marks["exit_end"], step, head),
                          Span("target", "suffix", marks["exit_end"], fwd.end_ns, step, "layers exit+1..N")]

    def _after_run(self, run, stats: dict) -> None:
        """The exit check of the run's steps (exit_check.py), after its clock stopped: into
        stats["exit_check"] when any step was checked."""
        check, self._check = self._check, ExitCheck()
        if not check.pending:
            return
        views = {}
        if not isinstance(self.pair.draft, BridgedDraft):  # a bridged draft's positions are not tokens
            views = draft_views(Lane(self.pair.draft, "draft"), run.committed, check.all_accepted(),
                                run.settings.sampling)
        lens = self._head.lens is not None
        stats["exit_check"] = check.result(self._head, self.settings.kappa, self.settings.branch_budget,
                                           EXIT_WEIGHT_LENS if lens else EXIT_WEIGHT,
                                           ACCEPT_WEIGHT_LENS if lens else ACCEPT_WEIGHT, views)

    def _close(self):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._worker is not None:
            if self._active is not None:
                self._active.cancel()
            self._worker.inbox.put(None)
            # a stalled lane is a daemon that ends when its stall does: never block the caller
            self._worker.join(timeout=0 if self._stalled else 10)
            self._worker = None
