"""Mirror speculative decoding (Bhendawade et al. 2025), as in shared/docs/mirror-sd.md.

Per step, on two lanes at once:
  target lane (this thread): forward over [y_n, d_1..d_gamma]; a hook on decoder layer
      `exit_layer` reads the target's own final norm + LM head there (the early exit) and
      hands the top-kappa proposals to the draft lane *while* the remaining layers run;
      then the acceptance rule on the final distributions -> (A, c).
  draft lane (a worker thread; on a GPU, its own CUDA stream): extends its cache by d_gamma,
      scores (depth, token) roots from the proposals and its own distributions, rolls out the
      best `branch_budget` roots gamma tokens deep, batched (one draft forward per depth for
      all branches).
When the verdict (A, c) arrives: a rollout rooted at (A, c) *is* the next window (a hit;
the other branches are dropped at once); otherwise the draft rolls out from c serially
(a miss). The proposals only choose what is precomputed; every committed token is
verified against the target's final layer, so the output is the target's own.

On a CPU the two lanes have one core each while both work; where one works alone (the
prefill and first window, the draft lane's work from the verdict on while the target waits)
it takes both (placement.lane_alone).

Exit lens and exit layer (Settings.exit_lens / exit_layer): with a trained lens for the
target (exit_lens.py) the exit head reads the lens-mapped hidden state, and when no exit
layer is given it is chosen among the lens's layers by `exit_lens.choose_exit_layer` from
the lens's held-out hit rates and lane speeds measured once per pair (`lane_speeds`);
without a lens the default is the paper's N/2.
"""
from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field

import torch

from mirror_sd.engine.autoregressive import plain_step
from mirror_sd.engine.decoder import Decoder
from mirror_sd.engine.run import Run, generator_for
from mirror_sd.engine.drafting import Window, serial_rollout, to_probs
from mirror_sd.engine.mirror.early_exit import exit_head, exit_parts
from mirror_sd.engine.events import DraftBranch, EarlyExit, Notice, Span, StepStart
from mirror_sd.proposals.exit_lens import choose_exit_layer, find_lens
from mirror_sd.engine.lanes import Lane
from mirror_sd.proposals.draft_vocab import shipped_ids
from mirror_sd.models.pair import ModelPair, model_vocab_size
from mirror_sd.placement import cache_tensors, lane_alone, lane_stream, lane_sync
from mirror_sd.engine.speculative import verify_window
from mirror_sd.engine.mirror.scoring import (ACCEPT_WEIGHT, ACCEPT_WEIGHT_LENS, EXIT_WEIGHT, EXIT_WEIGHT_LENS, Root,
                             rank_of, score_roots)
from mirror_sd.proposals.streams import rollout_for
from mirror_sd.engine.mirror.branches import BranchBatch

log = logging.getLogger(__name__)

EARLY_ROOTS = 1  # roots started on the draft's own guess, before the early exit arrives


def _how(rollout) -> str:
    return "serial" if rollout is serial_rollout else "streams"


def default_exit_layer(pair: ModelPair) -> int:
    """The paper's default, N/2 (used when there is no exit lens to choose with)."""
    return max(1, pair.target_layers // 2)


_speeds: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_speeds_lock = threading.Lock()
PROBE_PREFIX = 16  # tokens of context before the timed forwards


@torch.inference_mode()
def lane_speeds(pair: ModelPair, gamma: int, reps: int = 2) -> tuple[float, float]:
    """(seconds of one target forward over gamma+1 tokens, seconds of one draft token), each
    measured alone after a short prefix, best of `reps`; once per (pair, gamma)."""
    head = pair.draft.get_output_embeddings()  # a cut proposal head is timed as such
    key = (id(pair.draft), gamma, bool(getattr(head, "active", False)))
    with _speeds_lock:
        cached = _speeds.setdefault(pair.target, {})
        if key in cached:
            return cached[key]
        probe = [1 + i % (pair.vocab_size - 1) for i in range(PROBE_PREFIX + gamma + 1)]
        prefix, window = probe[:PROBE_PREFIX], probe[PROBE_PREFIX:]

        def timed(model, chunks):
            best = float("inf")
            for _ in range(reps):
                lane = Lane(model, "probe")
                lane.feed(prefix, logits_to_keep=1)
                lane.synchronize()
                t0 = time.perf_counter()
                for chunk in chunks:
                    lane.feed(chunk, logits_to_keep=len(chunk))
                lane.synchronize()
                best = min(best, time.perf_counter() - t0)
            return best

        t_verify = timed(pair.target, [window])  # gamma+1 tokens in one forward
        t_draft = timed(pair.draft, [[t] for t in window[:gamma]]) / gamma  # one token per forward
        cached[key] = (t_verify, t_draft)
        return cached[key]


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


class DraftWorker(threading.Thread):
    """The draft lane: owns the draft model and its cache for the whole run."""

    def __init__(self, lane: Lane, run: Run, exit_weight: float = EXIT_WEIGHT,
                 rollout=serial_rollout, accept_weight: float = ACCEPT_WEIGHT,
                 alone=contextlib.nullcontext):
        super().__init__(name="mirror-draft-lane", daemon=True)
        self.lane, self.run_ = lane, run
        self.exit_weight = exit_weight  # share of a root's token score taken from the early exit
        self.accept_weight = accept_weight  # share of the acceptance estimates taken from it
        self.rollout = rollout  # serial_rollout, or stream heads' rollout for the misses
        self.inbox: queue.Queue = queue.Queue()
        self.alone = alone  # () -> context: the lane works alone (the target waits for it)

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
        s, lane = self.run_.settings, self.lane
        sampling, gamma, n = s.sampling, s.gamma, job.n
        prefix = self.run_.committed[:n]
        # 1) extend the cache by d_gamma: the draft's view of the bonus position
        with self._span("extend", job.step, "feed d_gamma"):
            logits = lane.feed(lane.sync(prefix + job.window.tokens), logits_to_keep=1)
            q_bonus = to_probs(logits[-1:], sampling)[0]
        # 2) branch-complete rollouts, batched, until the verdict makes them stale. Before the
        # early exit arrives the draft starts on its own best root; once it is here the budget
        # is the best `branch_budget` roots of the scored list (the early root stays only if it
        # is one of them), so a step hits exactly when the verdict's rank is below the budget.
        batch = BranchBatch(lane.model, lane.cache, n, gamma, sampling)
        admitted: set = set()
        scored = None  # the roots scored once the early exit arrived, best first
        alone_now = False

        def admit(roots, limit):
            for root in roots[:limit]:
                if (root.depth, root.token) not in admitted:
                    admitted.add((root.depth, root.token))
                    batch.admit(root, generator_for(s.seed, job.step, "branch", root.depth, root.token))

        while True:
            job.wake.clear()
            if job.cancelled:
                return
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
                    break
            if batch.live:
                with self._span("branches", job.step, f"{len(batch.live)} rows"):
                    batch.forward()
            else:  # idle until the early exit or the verdict arrives
                job.wake.wait(1.0)
        A, c = job.verdict
        taken = batch.done[0] if batch.done else None
        if taken is not None:  # 3) a hit: the branch is the next window, its cache the draft's
            lane.cache = taken.cache
            lane.ids = prefix + job.window.tokens[:A] + [c] + taken.tokens[:-1]
            job.next_window = taken.window()
        else:  # 4) a miss: roll out from c serially, as plain SD would
            with self._span("fallback", job.step, f"{gamma} tokens, {_how(self.rollout)}"):
                # the same random stream as a branch rooted at (A, c): a seeded run samples the
                # same window whether the branch was precomputed or not (hits change speed only)
                job.next_window = self.rollout(lane, prefix + job.window.tokens[:A] + [c], gamma,
                                               sampling, generator_for(s.seed, job.step, "branch", A, c))
        job.hit = taken is not None
        ranks = rank_of(scored) if scored is not None else None
        job.rank = None if ranks is None else ranks.get((A, c), -1)
        for root, row in batch.history.items():
            status = "taken" if row is taken else "cancelled"
            rank = None if ranks is None else ranks.get((root.depth, root.token), -1)
            job.branches.append(DraftBranch(job.step, root.depth, root.token, root.score, list(row.tokens),
                                            [float(q[t]) for q, t in zip(row.q_rows, row.tokens)], status,
                                            rank))
        if taken is None:
            job.branches.append(DraftBranch(job.step, A, c, 0.0, job.next_window.tokens,
                                            job.next_window.q_probs, "serial", job.rank))


class MirrorSpeculative(Decoder):
    method = "mirror"
    lanes = 2  # the target and the draft run at the same time, one thread each on a CPU

    def __init__(self, pair, settings=None):
        super().__init__(pair, settings)
        self._worker: DraftWorker | None = None
        self._hook = None
        self._job: StepJob | None = None  # the step whose target forward is running (for the hook)
        self._active: StepJob | None = None  # the step the draft lane may still work on

    def _prepare(self):
        s, target = self.settings, self.pair.target
        lens = find_lens(target, s.exit_lens)
        self._notices = [lens.message] if lens.notify else []
        self._info = {"exit_lens": lens.path, "exit_lens_note": lens.message}
        if s.exit_layer:
            layer = s.exit_layer
            self._info["exit_layer_rule"] = "given"
            if lens.lens is not None and not lens.covers(layer):
                note = (f"The exit lens covers layers {', '.join(map(str, lens.lens.layers))}, not "
                        f"{layer}: raw early exit at layer {layer}.")
                self._notices.append(note)
                self._info["exit_lens_note"] = note
        elif lens.lens is not None and lens.lens.hit_rates():
            t_verify, t_draft = lane_speeds(self.pair, s.gamma)
            rates = lens.lens.hit_rates()
            layer = choose_exit_layer(rates, self.pair.target_layers, t_verify, (s.gamma + 1) * t_draft)
            self._info["exit_layer_rule"] = (
                f"least expected step time over the lens's layers {sorted(rates)} (held-out top-8 "
                f"{rates[layer]:.0%} at {layer}; target verify {t_verify * 1e3:.0f} ms, draft "
                f"{t_draft * 1e3:.0f} ms/token, measured)")
        else:
            layer = default_exit_layer(self.pair)
            self._info["exit_layer_rule"] = "N/2 (no exit lens)"
        use = lens.lens if lens.covers(layer) else None
        if use is None:
            self._info["exit_lens"] = None
        self._exit_layer = layer
        self._info["exit_layer"] = layer
        self._head = exit_head(target, s.exit_head, use, layer, self._exit_vocab())

    def _exit_vocab(self):
        """Token ids the exit head proposes from: the draft's vocabulary when the run cuts it;
        under exit head `auto`, the shipped frequent-token set (it only picks branches: measured,
        the same hit rate at about half the head's time, docs/measurements.md section 11)."""
        if self._vocab is not None and self._vocab.ids is not None:
            return self._vocab.ids
        if self.settings.exit_head == "auto" and self.pair.tokenizer is not None:
            return shipped_ids(self.pair.tokenizer, model_vocab_size(self.pair.target))
        return None

    def _decode(self, run, cancel):
        s = run.settings
        exit_layer = self._exit_layer
        run.info.update(self._info)
        for note in self._notices:
            yield Notice(note, "info")
        target = Lane(self.pair.target, "target")
        draft = Lane(self.pair.draft, "draft")
        rollout, notice = rollout_for(self.pair, s.streams)
        if notice:
            yield Notice(notice)
        layers = exit_parts(self.pair.target)[0]
        head = self._head
        marks = {}  # timestamps of the hook inside the current target forward

        target_thread = threading.get_ident()

        def on_exit_layer(module, args, output):
            job = self._job
            if job is None or threading.get_ident() != target_thread:
                return  # not the target lane's verify forward (the draft may share modules)
            lane_sync(target.device)
            marks["exit_start"] = time.perf_counter_ns()
            h = output[0] if isinstance(output, tuple) else output  # [1, S, H]
            job.post_proposals(head.proposals(h[0, -(s.gamma + 1):], s.kappa))  # j = 0..gamma
            marks["exit_end"] = time.perf_counter_ns()

        self._hook = layers[exit_layer - 1].register_forward_hook(on_exit_layer)
        with lane_alone(self.pair):  # one lane at a time until the draft lane starts
            if len(run.committed) > 1:
                with run.span("target", "prefill", target.device, 0):
                    target.feed(run.committed[:-1], logits_to_keep=1)
            with run.span("draft", "prefill+draft", draft.device, 0, f"{s.gamma} tokens, {_how(rollout)}"):
                window = rollout(draft, run.committed, s.gamma, s.sampling,
                                 generator_for(s.seed, 0, "draft"))
        yield DraftBranch(0, 0, run.committed[-1], 1.0, window.tokens, window.q_probs, "serial")
        lens_on = head.lens is not None
        self._worker = DraftWorker(draft, run, EXIT_WEIGHT_LENS if lens_on else EXIT_WEIGHT, rollout,
                                   ACCEPT_WEIGHT_LENS if lens_on else ACCEPT_WEIGHT,
                                   alone=lambda: lane_alone(self.pair))
        ranks = run.info["verdict_ranks"] = []  # per step the lane finished: see DraftBranch.rank
        self._worker.start()
        step, lane_ok, window_hit = 0, True, False
        while not run.done and not cancel.is_set():
            yield StepStart(step, len(run.new_ids), list(window.tokens) if lane_ok else [])
            if not lane_ok:  # the draft lane failed: finish with plain decoding, still lossless
                with lane_alone(self.pair):  # the target is the only lane left
                    yield from plain_step(run, target, step)
                step += 1
                continue
            job = StepJob(step, len(run.committed), window)
            self._job = self._active = job
            self._worker.inbox.put(job)
            marks.clear()
            verdict, verify_event, commit = verify_window(run, target, step, window)
            if commit:
                commit.hit = window_hit
            self._job = None
            self._target_spans(run, step, marks)
            job.post_verdict((verdict.accepted, verdict.token))
            run.steps += 1
            if job.proposals:
                yield EarlyExit(step, exit_layer, list(range(s.gamma + 1)), *job.proposals,
                                lens=head.lens is not None)
            yield verify_event
            if commit:
                yield commit
            if run.done:
                job.cancel()
                yield from run.new_spans()
                break
            if not job.done.wait(s.lane_timeout_s):
                job.error = TimeoutError(f"no answer in {s.lane_timeout_s:.0f} s")
            if job.error is not None:
                job.cancel()
                lane_ok = False
                yield Notice(f"The draft lane failed ({job.error}); finishing with plain decoding.")
            else:
                yield from job.branches
                run.hits += job.hit
                run.misses += not job.hit
                ranks.append(job.rank)
                window, window_hit = job.next_window, job.hit
            yield from run.new_spans()
            step += 1

    def _target_spans(self, run, step, marks):
        """Split the verify forward into prefix (layers 1..exit), exit head and suffix."""
        fwd = next(sp for sp in reversed(run.spans) if sp.lane == "target" and sp.step == step)
        if "exit_start" in marks:
            run.spans.remove(fwd)
            run.spans.append(Span("target", "prefix", fwd.start_ns, marks["exit_start"], step, "layers 1..exit"))
            run.spans.append(Span("target", "exit_head", marks["exit_start"], marks["exit_end"], step, f"{'lens + ' if self._head.lens is not None else ''}norm + LM head ({self._head.kind}), top-kappa"))
            run.spans.append(Span("target", "suffix", marks["exit_end"], fwd.end_ns, step, "layers exit+1..N"))

    def _close(self):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._worker is not None:
            if self._active is not None:
                self._active.cancel()
            self._worker.inbox.put(None)
            self._worker.join(timeout=10)  # a stalled lane is a daemon: never block the caller
            self._worker = None
