"""The untimed warm-up: a model's first forwards after a load (lazy set-up, a kernel's first
call or build, the draft lane's threads, a proposal vocabulary) are slow, and no timed run may
pay for them. So before any timed run each method runs once, briefly, on the prompt's start.

One size for every caller (`quick`, `prompt`): the command line, the app (which keeps `done`
per loaded pair so that a method runs its warm-up once per pair and proposal settings), the run
path (run_path.py) and the benchmark, which warms each of its runners (assisted generation and
the variants too) the same way.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace

from mirror_sd.engine.registry import LABELS, METHODS
from mirror_sd.engine.windows import drafting_every_step

WARMUP_TOKENS = 4  # per method: enough for a verify step, branches and a second window
WARMUP_PROMPT = 16  # prompt tokens the warm-up prefills


def quick(settings):
    """The settings of a warm-up run: at most WARMUP_TOKENS new tokens, the draft model drafting
    every step (windows.drafting_every_step: a priced window could leave it cold)."""
    return replace(drafting_every_step(settings), max_new_tokens=min(settings.max_new_tokens, WARMUP_TOKENS))


def prompt(prompt_ids: list[int]) -> list[int]:
    """The prompt a warm-up run prefills: its first WARMUP_PROMPT tokens."""
    return list(prompt_ids[:WARMUP_PROMPT])


def warm_key(method: str, settings) -> tuple:
    """What a warm-up covers: the method with these proposal settings (stream heads and the
    draft vocabulary each set up models of their own)."""
    return method, settings.streams, settings.draft_vocab


def warm_up(pair, methods, settings, prompt_ids: list[int], *, done: set | None = None,
            cancel: threading.Event | None = None, say=None) -> float:
    """An untimed short run of each method in `methods` not in `done` yet (their warm_key; the
    set is updated); `say(message, fraction)` hears the progress. Returns the seconds it took
    (0.0: all warm already). An error here is not raised: the timed run meets it again."""
    done = set() if done is None else done
    cancel = cancel or threading.Event()
    todo = [m for m in methods if warm_key(m, settings) not in done]
    if not todo:
        return 0.0
    names = ", ".join(LABELS.get(m, m) for m in todo)
    short, ids = quick(settings), prompt(prompt_ids)
    start = time.perf_counter_ns()
    for i, method in enumerate(todo):
        if cancel.is_set():
            break
        if say is not None:
            say(f"Warming up ({names}): a {WARMUP_TOKENS}-token run of each, untimed, so that every "
                f"timed run starts warm", i / len(todo))
        for _ in METHODS[method](pair, short).generate(ids, cancel=cancel):
            pass
        done.add(warm_key(method, settings))
    return (time.perf_counter_ns() - start) / 1e9
