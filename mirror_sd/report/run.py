"""Run the pair report: check every pair, then per draft load, measure and read off figures.

`run_pair_report(target, drafts, load=...)` is what the CLI and the app call; `load(draft,
progress)` gives a ModelPair (load_pair for named models, the app's pair cache, a tiny pair
in tests). Pairs are measured one after another, each loaded alone (freed before the next),
so a second draft never shares the machine with the first.
"""
from __future__ import annotations

import gc
import platform
import time
from contextlib import nullcontext

from mirror_sd.errors import MirrorSDError
from mirror_sd.report.figures import measure_pair, pair_figures

STATUS_OK, STATUS_REFUSED, STATUS_FAILED = "measured", "cannot work", "failed"


def _slug(name: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-._" else "-" for c in name.rsplit("/", 1)[-1])
    return keep.strip("-.") or "draft"


def refused(draft: str, reason: str, status: str = STATUS_REFUSED) -> dict:
    """A pair's entry when it cannot be measured: the reason, and no figures at all."""
    return {"draft": draft, "status": status, "reason": reason}


def run_pair_report(target: str, drafts: list[str], *, load, questions, settings,
                    verdicts=None, out_dir=None, progress=None, meta=None) -> dict:
    """The report dict (see render.py for its files). `verdicts`: checks.check_pairs' answer
    (None: no checks, e.g. in-memory pairs). `progress(fraction, message)`."""
    from pathlib import Path

    t0 = time.perf_counter()
    reasons = {v.draft: v.reason for v in verdicts or []}
    todo = [d for d in drafts if reasons.get(d) is None]
    entries = []

    def say(fraction, message):
        if progress is not None:
            progress(min(1.0, fraction), message)

    for draft in drafts:
        if reasons.get(draft) is not None:
            entries.append(refused(draft, reasons[draft]))
            continue
        i = todo.index(draft)
        base, span = i / len(todo), 1 / len(todo)
        say(base, f"loading {target} + {draft}")
        started = time.perf_counter()
        try:
            loaded = load(draft, lambda msg, frac=None: say(base + 0.15 * span * (frac or 0), msg))
            load_s = time.perf_counter() - started
            # the app's pair cache gives a LoadedPair: measured under its lock, as a Run is
            pair, lock = (loaded.pair, loaded.lock) if hasattr(loaded, "lock") else (loaded, nullcontext())
            warnings = list((getattr(pair, "info", None) or {}).get("warnings") or [])
            bench_dir = Path(out_dir) / f"bench-{_slug(draft)}" if out_dir is not None else None
            with lock:
                results = measure_pair(
                    pair, questions, settings, out_dir=bench_dir,
                    progress=lambda done, total: say(base + span * (0.15 + 0.85 * done / total),
                                                     f"{draft}: run {done} of {total}"),
                    meta={"command": (meta or {}).get("command", "pair report")})
        except MirrorSDError as e:
            entries.append(refused(draft, str(e), STATUS_FAILED))
            continue
        finally:
            pair = loaded = None  # free this pair before loading the next
            gc.collect()
        entry = {"draft": draft, "status": STATUS_OK, "reason": None, "load_s": load_s,
                 "measure_s": time.perf_counter() - started - load_s, **pair_figures(results)}
        entry["warnings"] = warnings
        if bench_dir is not None:
            entry["benchmark_dir"] = str(bench_dir)
        entries.append(entry)
    say(1.0, "done")
    return {"target": target, "drafts": list(drafts), "pairs": entries,
            "settings": {"max_new_tokens": settings.max_new_tokens, "gamma": settings.gamma,
                         "branch_budget": settings.branch_budget, "window": settings.window},
            "questions": [{"question_id": q.question_id, "category": q.category} for q in questions],
            "wall_s": time.perf_counter() - t0,
            "machine": {"platform": platform.platform(), "processor": platform.processor()},
            **(meta or {})}

