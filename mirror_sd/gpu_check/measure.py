"""What a GPU check measures on one loaded pair: the three methods against transformers'
`generate()`, and the lanes' overlap from timed spans.

Spans are CUDA events where both lanes share one GPU (each lane records on its own stream, so
the overlap is what the GPU really ran at once) and host clock readings after `lane_sync`
elsewhere (a lane on the CPU, or the dry run): the report says which clock each came from.
"""
from __future__ import annotations

import contextlib
import statistics
import threading
import time

import torch

METHOD_ORDER = ("ar", "sd", "mirror")


def reference(model, ids: list[int], n: int) -> list[int]:
    """transformers' own greedy generate() on the loaded target: the independent reference."""
    from transformers import GenerationConfig
    dev = model.get_input_embeddings().weight.device
    cfg = GenerationConfig(max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    x = torch.tensor([ids], device=dev)
    with torch.inference_mode():  # an explicit mask: a prompt token equal to pad_token_id is no pad
        out = model.generate(x, attention_mask=torch.ones_like(x), generation_config=cfg)
    return out[0, len(ids):].tolist()


def _median(xs):
    return round(statistics.median(xs), 3) if xs else None


def run_methods(pair, prompts, settings, repeats: int) -> dict:
    """{method: medians of tok/s, wall time, acceptance...; mismatches against generate()}.
    Methods interleaved per repeat, so a drifting clock or a warming GPU hits each alike; the
    first repeat is compared token for token with the reference."""
    from mirror_sd.engine.registry import METHODS
    rows = {m: {"tok_s": [], "wall_s": [], "mean_accepted": [], "hit_rate": [],
                "draft_hidden": [], "mismatches": 0, "first_mismatch": None} for m in METHOD_ORDER}
    for p_i, text in enumerate(prompts):
        ids = pair.encode_prompt(text)
        ref = reference(pair.target, ids, settings.max_new_tokens)
        for rep in range(repeats):
            for m in METHOD_ORDER:
                t0 = time.perf_counter_ns()
                fin = list(METHODS[m](pair, settings).generate(ids))[-1]
                wall = (time.perf_counter_ns() - t0) / 1e9
                st, r = fin.stats, rows[m]
                r["wall_s"].append(wall)
                r["tok_s"].append(st["tokens_per_s"])
                r["mean_accepted"].append(st["mean_accepted"])
                for key, stat in (("hit_rate", "hit_rate"), ("draft_hidden", "draft_hidden_fraction")):
                    if st.get(stat) is not None:
                        r[key].append(st[stat])
                got = fin.token_ids[:len(ref)]
                if rep == 0 and got != ref:
                    r["mismatches"] += 1
                    at = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b),
                              min(len(got), len(ref)))
                    r["first_mismatch"] = r["first_mismatch"] or f"prompt {p_i} token {at}"
    ar, sd = (statistics.median(rows[m]["tok_s"]) for m in ("ar", "sd"))
    out = {}
    for m, r in rows.items():
        tok_s = statistics.median(r["tok_s"])
        out[m] = {"tok_s": round(tok_s, 2), "speedup_vs_ar": round(tok_s / ar, 3) if ar else None,
                  "speedup_vs_sd": round(tok_s / sd, 3) if sd else None,
                  "wall_s": _median(r["wall_s"]), "mean_accepted": _median(r["mean_accepted"]),
                  "hit_rate": _median(r["hit_rate"]), "draft_hidden": _median(r["draft_hidden"]),
                  "mismatches": f"{r['mismatches']}/{len(prompts)}",
                  "first_mismatch": r["first_mismatch"]}
    return out


class Clock:
    """Marks on the calling thread's current stream (CUDA events) or the host clock."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.name = "cuda-events" if cuda else "host (perf_counter_ns after lane_sync)"

    def mark(self, device=None):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        if device is not None:
            from mirror_sd.placement import lane_sync
            lane_sync(device)
        return time.perf_counter_ns()

    def ms(self, a, b) -> float:
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b)
        return (b - a) / 1e6


def _intersection(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def overlap(pair, gamma: int, reps: int = 5) -> dict:
    """A target forward over gamma+1 tokens and gamma one-token draft forwards, run back to
    back, then at once from two threads (the draft on its own CUDA stream where both share a
    GPU, as Mirror-SD runs them). Each lane's span is timed; the overlap is their
    intersection, `draft_hidden` its share of the draft's span (medians of `reps`)."""
    probe = _OverlapProbe(pair, gamma)
    results = {"clock": probe.clock.name}
    for mode in ("back_to_back", "at_once"):
        walls, hidden, inter = [], [], []
        for _ in range(reps):
            wall, ts, ds = probe.once(mode)
            walls.append(wall)
            both = _intersection(ts, ds)
            inter.append(both)
            hidden.append(both / (ds[1] - ds[0]) if ds[1] > ds[0] else 0.0)
            if mode == "back_to_back":
                results.setdefault("target_span_ms", []).append(ts[1] - ts[0])
                results.setdefault("draft_span_ms", []).append(ds[1] - ds[0])
        results[f"{mode}_wall_ms"] = round(statistics.median(walls), 3)
        results[f"{mode}_overlap_ms"] = round(statistics.median(inter), 3)
        results[f"{mode}_draft_hidden"] = round(statistics.median(hidden), 3)
    for key in ("target_span_ms", "draft_span_ms"):
        results[key] = round(statistics.median(results[key]), 3)
    return results


class _OverlapProbe:
    """overlap()'s two lanes over a fresh 64-token prefix each time, and their timed work."""

    def __init__(self, pair, gamma: int):
        from mirror_sd.engine.lanes import Lane
        self.pair, self.gamma, self.Lane = pair, gamma, Lane
        self.prefix = [1 + i % 60 for i in range(64)]
        self.tdev, ddev = Lane(pair.target, "target").device, Lane(pair.draft, "draft").device
        self.clock = Clock(self.tdev.type == "cuda" and self.tdev == ddev)

    def fresh(self):
        t, d = self.Lane(self.pair.target, "target"), self.Lane(self.pair.draft, "draft")
        t.feed(self.prefix, 1)
        d.feed(self.prefix, 1)
        t.synchronize()
        d.synchronize()
        return t, d

    def target_work(self, t, spans):
        spans["t0"] = self.clock.mark()
        t.feed(list(range(10, 11 + self.gamma)), self.gamma + 1)
        spans["t1"] = self.clock.mark(t.device)
        t.synchronize()

    def draft_work(self, d, spans, own_stream):
        from mirror_sd.placement import cache_tensors, lane_stream
        ctx = (lane_stream(d.device, adopt=cache_tensors(d.cache)) if own_stream
               else contextlib.nullcontext())
        with ctx:
            spans["d0"] = self.clock.mark()
            for k in range(self.gamma):
                d.feed([20 + k], 1)
            spans["d1"] = self.clock.mark(d.device)
            d.synchronize()

    def once(self, mode: str) -> tuple[float, tuple[float, float], tuple[float, float]]:
        """(wall ms, the target's span, the draft's span) of one run, back to back or at once."""
        t, d = self.fresh()
        spans = {}
        origin = self.clock.mark(self.tdev)
        w0 = time.perf_counter_ns()
        if mode == "back_to_back":
            self.target_work(t, spans)
            self.draft_work(d, spans, False)
        else:
            th = threading.Thread(target=self.draft_work, args=(d, spans, True))
            th.start()
            self.target_work(t, spans)
            th.join()
        wall = (time.perf_counter_ns() - w0) / 1e6
        clock = self.clock
        return (wall, (clock.ms(origin, spans["t0"]), clock.ms(origin, spans["t1"])),
                (clock.ms(origin, spans["d0"]), clock.ms(origin, spans["d1"])))
