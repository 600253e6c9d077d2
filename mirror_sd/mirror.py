"""Mirror speculative decoding (Bhendawade et al. 2025), as in shared/docs/mirror-sd.md.

Per step, on two lanes at once:
  target lane (this thread): forward over [y_n, d_1..d_gamma]; a hook on decoder layer
      `exit_layer` reads the target's own final norm + LM head there (the early exit) and
      hands the top-kappa proposals to the draft lane *while* the remaining layers run;
      then the acceptance rule on the final distributions -> (A, c).
  draft lane (a worker thread): extends its cache by d_gamma, scores (depth, token) roots
      from the proposals and its own distributions, rolls out the best `branch_budget`
      roots gamma tokens deep, batched (one draft forward per depth for all branches).
When the verdict (A, c) arrives: a rollout rooted at (A, c) *is* the next window (a hit;
the other branches are dropped at once); otherwise the draft rolls out from c serially
(a miss). The proposals only choose what is precomputed; every committed token is
verified against the target's final layer, so the output is the target's own.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from .decoding import Decoder, Run, generator_for
from .drafting import Window, choose, serial_rollout, to_probs
from .events import DraftBranch, EarlyExit, Notice, Span, StepStart
from .lanes import Lane, expand_cache, gather_row, select_rows
from .pair import ModelPair
from .placement import lane_sync
from .speculative import verify_window
from .acceptance import Sampling

log = logging.getLogger(__name__)

EXIT_WEIGHT = 0.5  # share of a root's token probability taken from the early exit (rest: draft)


def default_exit_layer(pair: ModelPair) -> int:
    """The paper's default, N/2."""
    return max(1, pair.target_layers // 2)


def exit_parts(model):
    """(decoder layers, final norm, LM head) of a transformers causal LM."""
    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    return body.layers, body.norm, model.get_output_embeddings()


@dataclass
class Root:
    depth: int  # continuation of y, d_1..d_depth, token
    token: int
    score: float


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
    cancelled: bool = False
    # filled by the draft lane
    next_window: Window | None = None
    hit: bool = False
    branches: list = field(default_factory=list)  # DraftBranch events
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def score_roots(job: StepJob, q_bonus: torch.Tensor, kappa: int, budget: int) -> list[Root]:
    """Best-first (depth, token) roots: P(target stops at depth j) * P(its token is v).

    The draft's own probability of each drafted token estimates its acceptance; the token at
    the stop mixes the early-exit proposal with the draft's residual distribution there."""
    d, q_rows = job.window.tokens, job.window.q_rows
    gamma = len(d)
    exit_ids, exit_lps = job.proposals
    reach, roots = 1.0, []
    for j in range(gamma + 1):
        dist = q_rows[j] if j < gamma else q_bonus  # draft's distribution at the stop position
        drafted = d[j] if j < gamma else None
        stop = reach * (1.0 - float(dist[drafted])) if drafted is not None else reach
        rest = 1.0 - (float(dist[drafted]) if drafted is not None else 0.0)
        exit_p = {t: float(torch.tensor(lp).exp()) for t, lp in zip(exit_ids[j], exit_lps[j])}
        exit_rest = 1.0 - exit_p.get(drafted, 0.0) if drafted is not None else 1.0
        draft_top = torch.topk(dist, kappa).indices.tolist()
        for v in dict.fromkeys(list(exit_ids[j]) + draft_top):
            if v == drafted:
                continue  # a stop at j means the target did not pick d_{j+1}
            p_exit = exit_p.get(v, 0.0) / max(exit_rest, 1e-9)
            p_draft = float(dist[v]) / max(rest, 1e-9)
            roots.append(Root(j, v, stop * (EXIT_WEIGHT * p_exit + (1 - EXIT_WEIGHT) * p_draft)))
        if drafted is not None:
            reach *= float(dist[drafted])
    roots.sort(key=lambda r: -r.score)
    return roots[:budget]


class DraftWorker(threading.Thread):
    """The draft lane: owns the draft model and its cache for the whole run."""

    def __init__(self, lane: Lane, run: Run):
        super().__init__(name="mirror-draft-lane", daemon=True)
        self.lane, self.run_ = lane, run
        self.inbox: queue.Queue = queue.Queue()

    def run(self):
        while True:
            job = self.inbox.get()
            if job is None:
                return
            try:
                self._step(job)
            except BaseException as e:  # reported to the target lane, which goes on alone
                log.exception("draft lane failed")
                job.error = e
            finally:
                job.done.set()

    def _span(self, label, step, detail=""):
        return self.run_.span("draft", label, self.lane.device, step, detail)

    def _step(self, job: StepJob):
        s, lane, model = self.run_.settings, self.lane, self.lane.model
        sampling: Sampling = s.sampling
        gamma, n = s.gamma, job.n
        # 1) extend the cache by d_gamma: the draft's view of the bonus position
        with self._span("extend", job.step, "d_gamma"):
            base_ids = self.run_.committed[:n] + job.window.tokens
            logits = lane.feed(lane.sync(base_ids)[:], logits_to_keep=1)
            q_bonus = to_probs(logits[-1:], sampling)[0]
        # 2) wait for the early exit (it leaves the target lane mid-forward)
        while not (job.proposals_ready.wait(0.05) or job.cancelled):
            pass
        if job.cancelled:
            return
        roots = score_roots(job, q_bonus, s.kappa, s.branch_budget)
        # 3) branch-complete rollouts, batched, until the verdict makes them stale
        taken = self._rollout(job, roots, sampling, gamma, n)
        if job.cancelled:
            return
        A, c = job.verdict
        if taken is None:  # 4) miss: roll out from c serially, as plain SD would
            with self._span("fallback", job.step, f"{gamma} tokens, serial"):
                job.next_window = serial_rollout(lane, self.run_.committed[:n] + job.window.tokens[:A] + [c],
                                                 gamma, sampling, generator_for(s.seed, job.step, "fallback"))
            job.branches.append(DraftBranch(job.step, A, c, 0.0, job.next_window.tokens,
                                            job.next_window.q_probs, "serial"))
        job.hit = taken is not None

    def _rollout(self, job, roots, sampling, gamma, n):
        """Roll out all roots together; returns the index of the taken root or None."""
        lane, model, s = self.lane, self.lane.model, self.run_.settings
        B, dev = len(roots), lane.device
        base_len = len(lane.ids)  # n + gamma: y_1..y_n, d_1..d_gamma
        tokens = [[] for _ in roots]
        rows = [[] for _ in roots]
        gens = [generator_for(s.seed, job.step, "branch", r.depth, r.token) for r in roots]
        alive = list(range(B))
        with self._span("branches", job.step, f"{B} roots x {gamma} tokens, batched"):
            cache = expand_cache(lane.cache, B, model.config)
            mask = torch.ones(B, base_len, dtype=torch.long, device=dev)
            for r, root in enumerate(roots):
                mask[r, n + root.depth:base_len] = 0  # the row must not see d_{depth+1}..
            pos = torch.tensor([[n + r.depth] for r in roots], device=dev)
            inputs = [r.token for r in roots]
            pruned = False
            for k in range(gamma):
                if job.cancelled:
                    break
                if job.verdict_ready.is_set() and not pruned:  # stale branches go now
                    pruned = True
                    keep = [i for i, r in enumerate(alive) if self._matches(job, roots[r])]
                    if not keep:
                        break
                    if len(keep) < len(alive):
                        select_rows(cache, keep)
                        mask, pos = mask[keep], pos[keep]
                        alive, inputs = [alive[i] for i in keep], [inputs[i] for i in keep]
                ids = torch.tensor([[t] for t in inputs], device=dev)
                with torch.inference_mode():
                    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                                use_cache=True)
                cache = out.cache
                logits = out.logits[:, -1]  # [rows, V]
                probs = to_probs(logits, sampling)
                for i, r in enumerate(alive):
                    inputs[i] = choose(probs[i], logits[i], sampling, gens[r])
                    tokens[r].append(inputs[i])
                    rows[r].append(probs[i])
                mask = torch.cat([mask, torch.ones(len(alive), 1, dtype=mask.dtype, device=dev)], 1)
                pos = pos + 1
        complete = len(tokens[alive[0]]) == gamma if alive else False
        # wait for the verdict, then keep the branch rooted at (A, c) if we have it
        while not (job.verdict_ready.wait(0.05) or job.cancelled):
            pass
        if job.cancelled:
            return None
        taken = None
        for i, r in enumerate(alive):
            if complete and self._matches(job, roots[r]):
                taken = r
                A = roots[r].depth
                index = torch.cat([torch.arange(n + A), torch.arange(base_len, base_len + gamma)])
                lane.cache = gather_row(cache, i, index, model.config)
                lane.ids = lane.ids[:n + A] + [roots[r].token] + tokens[r][:-1]
                job.next_window = Window(tokens[r], torch.stack(rows[r]))
        for r, root in enumerate(roots):
            status = "taken" if r == taken else "cancelled"
            q = [float(row[t]) for row, t in zip(rows[r], tokens[r])]
            job.branches.append(DraftBranch(job.step, root.depth, root.token, root.score,
                                            tokens[r], q, status))
        return taken

    @staticmethod
    def _matches(job, root) -> bool:
        return job.verdict is not None and (root.depth, root.token) == tuple(job.verdict)


class MirrorSpeculative(Decoder):
    method = "mirror"

    def __init__(self, pair, settings=None):
        super().__init__(pair, settings)
        self._worker: DraftWorker | None = None
        self._hook = None
        self._job: StepJob | None = None  # the step whose target forward is running (for the hook)
        self._active: StepJob | None = None  # the step the draft lane may still work on

    def _decode(self, run, cancel):
        s = run.settings
        exit_layer = s.exit_layer or default_exit_layer(self.pair)
        target = Lane(self.pair.target, "target")
        draft = Lane(self.pair.draft, "draft")
        layers, norm, head = exit_parts(self.pair.target)
        marks = {}  # timestamps of the hook inside the current target forward

        target_thread = threading.get_ident()

        def on_exit_layer(module, args, output):
            job = self._job
            if job is None or threading.get_ident() != target_thread:
                return  # not the target lane's verify forward (the draft may share modules)
            lane_sync(target.device)
            marks["exit_start"] = time.perf_counter_ns()
            h = output[0] if isinstance(output, tuple) else output  # [1, S, H]
            h = h[0, -(s.gamma + 1):].to(head.weight.device)  # window positions j = 0..gamma
            with torch.inference_mode():
                lp = torch.log_softmax(head(norm(h)).float(), dim=-1)  # [gamma+1, V]
                top = lp.topk(s.kappa, dim=-1)
            job.proposals = (top.indices.tolist(), top.values.tolist())  # ids cross, not tensors
            job.proposals_ready.set()
            marks["exit_end"] = time.perf_counter_ns()

        self._hook = layers[exit_layer - 1].register_forward_hook(on_exit_layer)
        if len(run.committed) > 1:
            with run.span("target", "prefill", target.device, 0):
                target.feed(run.committed[:-1], logits_to_keep=1)
        with run.span("draft", "prefill+draft", draft.device, 0, f"{s.gamma} tokens, serial"):
            window = serial_rollout(draft, run.committed, s.gamma, s.sampling,
                                    generator_for(s.seed, 0, "draft"))
        yield DraftBranch(0, 0, run.committed[-1], 1.0, window.tokens, window.q_probs, "serial")
        self._worker = DraftWorker(draft, run)
        self._worker.start()
        step, lane_ok = 0, True
        while not run.done and not cancel.is_set():
            yield StepStart(step, len(run.new_ids), list(window.tokens) if lane_ok else [])
            if not lane_ok:  # the draft lane failed: finish with plain decoding, still lossless
                yield from self._plain_step(run, target, step)
                step += 1
                continue
            job = StepJob(step, len(run.committed), window)
            self._job = self._active = job
            self._worker.inbox.put(job)
            marks.clear()
            start = time.perf_counter_ns()
            verdict, verify_event, commit = verify_window(run, target, step, window)
            self._job = None
            self._target_spans(run, step, start, marks)
            job.verdict = (verdict.accepted, verdict.token)
            job.verdict_ready.set()
            run.steps += 1
            if job.proposals:
                yield EarlyExit(step, exit_layer, list(range(s.gamma + 1)), *job.proposals)
            yield verify_event
            if commit:
                yield commit
            if run.done:
                job.cancelled = True
                job.verdict_ready.set()
                yield from run.new_spans()
                break
            if not job.done.wait(s.lane_timeout_s):
                job.error = TimeoutError(f"no answer in {s.lane_timeout_s:.0f} s")
            if job.error is not None:
                job.cancelled = True
                lane_ok = False
                yield Notice(f"The draft lane failed ({job.error}); finishing with plain decoding.")
            else:
                yield from job.branches
                run.hits += job.hit
                run.misses += not job.hit
                window = job.next_window
            yield from run.new_spans()
            step += 1

    @staticmethod
    def _target_spans(run, step, start, marks):
        """Split the verify forward into prefix (layers 1..exit), exit head and suffix."""
        fwd = next(sp for sp in reversed(run.spans) if sp.lane == "target" and sp.step == step)
        if "exit_start" in marks:
            run.spans.remove(fwd)
            run.spans.append(Span("target", "prefix", fwd.start_ns, marks["exit_start"], step, "layers 1..exit"))
            run.spans.append(Span("target", "exit_head", marks["exit_start"], marks["exit_end"], step, "norm + LM head, top-kappa"))
            run.spans.append(Span("target", "suffix", marks["exit_end"], fwd.end_ns, step, "layers exit+1..N"))

    def _plain_step(self, run, target, step):
        from .autoregressive import Autoregressive  # one plain step on the target lane
        pending = target.sync(run.committed)
        with run.span("target", "decode", target.device, step):
            logits = target.feed(pending, logits_to_keep=1)[-1:]
        run.target_forwards += 1
        s = run.settings
        probs = None if s.sampling.greedy else to_probs(logits, s.sampling)[0]
        token = choose(probs, logits[0], s.sampling, generator_for(s.seed, step, "ar"))
        commit = run.commit(step, [token], ["plain"])
        if commit:
            yield commit
        yield from run.new_spans()

    def _close(self):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._worker is not None:
            job = self._active
            if job is not None:
                job.cancelled = True
                job.verdict_ready.set()
                job.proposals_ready.set()
            self._worker.inbox.put(None)
            self._worker.join(timeout=10)  # a stalled lane is a daemon: never block the caller
            self._worker = None
