"""Between the Gradio handlers and mirror_sd: loaded pairs, jobs, results cache, Stop.

- `PairCache`: model pairs load lazily on first use (progress reported) and stay loaded; each
  loaded pair has a lock, so one run at a time uses it. `PairCache.tiny()` holds the tiny
  random pair of `mirror_sd.models.tiny` instead (tests and the app's test mode, no downloads;
  a bundled draft with another tokenizer, e.g. "gemma-3-270m", gets the tiny cross pair).
  Each loaded pair keeps its pair check (ui/paircheck.py), computed once by the first job.
- `Job`: a worker thread that loads the pair and prepares the run (mirror_sd's run path:
  validate, pair check, warm-up, auto settings), then runs the methods one after another
  (never at the same time, so each timing is honest), recording every event with its arrival
  time. The Gradio handler polls it and renders; decoding never waits for
  the page.
- `ResultCache`: finished results per (pair, prompt, settings).
- `Cancels`: one threading.Event per browser session, set by Stop, passed as `cancel=`.
"""
from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

from mirror_sd.engine.collect import collect
from mirror_sd.engine.events import Commit, DraftBranch, EarlyExit, Finish, Span, Verify
from mirror_sd.engine.registry import REGISTRY
from mirror_sd.engine.run_path import PreparedRun, RunPath
from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError

from .paircheck import cross_meta, ensure_check, output_coverage
from .runs import RunRecord, exit_check, timed_origin, variant_of
from .texts import parse_prompt

log = logging.getLogger(__name__)


@contextmanager
def page_errors(worker, what: str):
    """A worker thread's body: any failure becomes `worker.error`, one line for the page, never
    a traceback (the log keeps it, under `what`); `worker.finished` is set however it ends."""
    try:
        yield
    except MirrorSDError as e:
        worker.error = str(e)
    except Exception as e:
        log.exception(what)
        worker.error = f"{type(e).__name__}: {e}"
    finally:
        worker.finished.set()

@dataclass(frozen=True)
class PairSpec:
    target: str = "default"
    draft: str = "default"
    precision: str = "fp32"
    target_device: str = "auto"
    draft_device: str = "auto"
    draft_precision: str = "same"  # "same" as the target, or e.g. int8 (any draft stays lossless)


@dataclass
class LoadedPair:
    pair: object  # mirror_sd.models.pair.ModelPair
    lock: threading.Lock = field(default_factory=threading.Lock)
    meta: dict = field(default_factory=dict)
    warmed: set = field(default_factory=set)  # engine/warmup.py's done: warm-ups run on this pair
    check: dict | None = None  # paircheck.ensure_check: computed once, holding `lock`


def _load(spec: PairSpec, progress) -> object:
    # the run path's loader (models/loading.py load_pair; it also sets the lanes' CPU threads)
    return RunPath.load(spec.target, spec.draft, precision=spec.precision,
                        draft_precision=None if spec.draft_precision == "same" else spec.draft_precision,
                        target_device=spec.target_device, draft_device=spec.draft_device,
                        progress=progress)


def _load_tiny(spec: PairSpec, progress) -> object:
    from mirror_sd.models.tiny import stand_in
    from mirror_sd.placement import set_process_threads
    set_process_threads(1)  # tiny matmuls: threads only fight over the cores
    progress("Loading the models: building the tiny test pair", 0.5)
    return _paced(stand_in(spec.draft))


def _paced(pair):
    """Test mode: MIRROR_SD_TINY_PACE_MS > 0 makes every forward of the tiny models take that
    much longer (a sleep after it), so a browser test can watch a run while it is in progress."""
    pace = float(os.environ.get("MIRROR_SD_TINY_PACE_MS", "0") or 0) / 1000
    if pace > 0:
        for model in {id(m): m for m in (pair.target, pair.draft_model)}.values():
            embed = model.get_input_embeddings()  # once per forward, whole or split in two
            embed.register_forward_hook(lambda *_: time.sleep(pace))
    return pair


def pair_meta(spec: PairSpec, pair, tiny: bool = False) -> dict:
    info = getattr(pair, "info", {}) or {}
    return {"target": pair.target_name, "draft": pair.draft_name,
            "target_layers": pair.target_layers,
            "precision": info.get("precision", spec.precision),  # what really loaded
            "draft_precision": spec.draft_precision,
            "target_device": (info.get("target") or {}).get("device", spec.target_device),
            "draft_device": (info.get("draft") or {}).get("device", spec.draft_device),
            "tiny": tiny, "cross": cross_meta(pair)}


def target_layers(target: str, pairs: "PairCache | None" = None) -> int | None:
    """The layer count of a target without loading it: a loaded pair's, else what its files
    say (mirror_sd.models.layer_count); None when only loading would tell."""
    if pairs is not None and pairs.is_tiny:
        from mirror_sd.models.tiny import LAYERS
        return LAYERS
    target = (target or "").strip() or "default"
    if pairs is not None and (n := pairs.layers(target)) is not None:
        return n
    from mirror_sd.models.layer_count import layer_count
    return layer_count(target)


class PairCache:
    """Loaded pairs, at most `max_pairs` (the least recently used one is dropped first)."""

    @classmethod
    def tiny(cls) -> "PairCache":
        """A cache whose every pair is the tiny random test pair (no downloads)."""
        return cls(loader=_load_tiny, is_tiny=True)

    def __init__(self, max_pairs: int | None = None, loader=_load, is_tiny: bool = False):
        self.max_pairs = max_pairs or int(os.environ.get("MIRROR_SD_MAX_PAIRS", "1"))
        self.loader = loader
        self.is_tiny = is_tiny  # every spec gives the tiny test pair (the page says so)
        self._pairs: OrderedDict[PairSpec, LoadedPair] = OrderedDict()
        self._lock = threading.Lock()  # one load at a time
        self.loading: dict | None = None  # the load in progress: spec, message, fraction, since

    def describe(self) -> str:
        """The load in progress, in a line: the loader's own words (its step and measured
        estimate) and one timer ('' when none)."""
        now = self.loading
        if now is None:
            return ""
        timer = "" if re.search(r"\d+ s so far", now["message"]) else (
            f", {time.monotonic() - now['since']:.0f} s so far")  # one timer: the loader's own when it has one
        return (f"{now['message']}{timer}. Press Run at any time: the run starts when the models "
                f"are ready.")

    def clear(self) -> None:
        """Drop every loaded pair (waits for runs still using them)."""
        with self._lock:
            while self._pairs:
                _, old = self._pairs.popitem(last=False)
                with old.lock:
                    pass
                del old
            gc.collect()

    def layers(self, target: str) -> int | None:
        """Layers of a loaded pair's target named `target` (any precision or device)."""
        for spec, loaded in list(self._pairs.items()):
            if spec.target == target:
                return loaded.meta.get("target_layers")
        return None

    def loaded(self, spec: PairSpec) -> bool:
        return spec in self._pairs

    def peek(self, spec: PairSpec) -> LoadedPair | None:
        """The loaded pair for `spec`, without loading it (None when it is not loaded)."""
        return self._pairs.get(spec)

    def get(self, spec: PairSpec, progress) -> LoadedPair:
        key = spec
        while not self._lock.acquire(timeout=0.5):  # another load (e.g. the background one)
            if (now := self.loading) is not None:
                progress(f"{now['message']} (a load started {time.monotonic() - now['since']:.0f} s "
                         f"ago; this run waits for it)", now["fraction"])
        try:
            return self._get(spec, key, progress)
        finally:
            self.loading = None
            self._lock.release()

    def _get(self, spec: PairSpec, key: PairSpec, progress) -> LoadedPair:
        """Under self._lock: the loaded pair, loading it first (dropping the oldest)."""
        if key in self._pairs:
            self._pairs.move_to_end(key)
            return self._pairs[key]
        while len(self._pairs) >= self.max_pairs:  # free the memory before loading
            _, old = self._pairs.popitem(last=False)
            with old.lock:  # wait for a run still using it
                pass
            del old
            gc.collect()
        self.loading = {"spec": spec, "message": "starting", "fraction": None,
                        "since": time.monotonic()}

        def report(message: str, fraction: float | None = None) -> None:
            self.loading.update(message=message, fraction=fraction)
            progress(message, fraction)

        pair = self.loader(spec, report)
        loaded = LoadedPair(pair, meta=pair_meta(spec, pair, self.is_tiny))
        self._pairs[key] = loaded
        return loaded


class TokenTexts:
    """Text of each committed token (so colours sit on the right characters) and of every
    other id an event mentions (drafts, candidates), decoded once, in the job thread."""

    END = "[end]"  # an end-of-sequence token's text on the page (not the tokenizer's markup)

    def __init__(self, pair, record: RunRecord):
        self.decode = pair.decode
        self.eos = set(getattr(pair, "eos_token_ids", None) or ())
        self.rec = record
        self.ids: list[int] = []
        self.pending = 0  # first token whose text is not out yet (a split UTF-8 character)

    def on_event(self, ev) -> None:
        if isinstance(ev, Commit):
            for tok in ev.token_ids:
                self._commit(tok)
        ids: list[int] = []
        if isinstance(ev, EarlyExit):
            ids = [t for row in ev.token_ids for t in row]
        elif isinstance(ev, DraftBranch):
            ids = [ev.root_token] + list(ev.tokens)
        elif isinstance(ev, Verify):
            ids = list(ev.drafted) + [ev.token]
        elif isinstance(ev, Commit):
            ids = list(ev.token_ids)
        self.on_ids(ids)

    def on_ids(self, ids) -> None:
        """Texts for token ids the page may name."""
        for t in ids:
            if t not in self.rec.id_texts:
                self.rec.id_texts[t] = self.END if t in self.eos else self.decode([t])

    def _commit(self, tok: int) -> None:
        if tok in self.eos:  # the run's last token: named, not shown as "<|im_end|>"
            self.ids.append(tok)
            self.rec.token_texts.append(self.END)
            self.pending = len(self.ids)
            return
        self.ids.append(tok)
        i = len(self.ids)
        start = max(0, self.pending - 8)  # a little left context: spaces, merges
        prev = self.decode(self.ids[start:self.pending])
        cur = self.decode(self.ids[start:i])
        if cur.endswith("\ufffd") and i - self.pending < 4:
            self.rec.token_texts.append("")  # its bytes show with the next token
            return
        self.rec.token_texts.append(cur[len(prev):] if cur.startswith(prev) else cur)
        self.pending = i


@dataclass
class RunRequest:
    prompt: str
    spec: PairSpec
    settings: Settings
    methods: tuple[str, ...] = field(default_factory=lambda: tuple(REGISTRY))
    auto: bool = False  # gamma and branch budget chosen by the run path's probe first

    def key(self) -> tuple:
        return (self.prompt, self.spec, tuple(sorted(asdict(self.settings).items())), self.methods,
                self.auto)


class Job(threading.Thread):
    """Load, then run each method in turn; the handler reads the fields while it runs."""

    HEARTBEAT_S = 120.0  # no poll from the page for this long: the viewer left, stop

    def __init__(self, request: RunRequest, pairs: PairCache, cancel: threading.Event):
        super().__init__(name="mirror-sd-job", daemon=True)
        self.request = request
        self.pairs = pairs
        self.cancel = cancel
        self.records: dict[str, RunRecord] = {}
        self.current: str | None = None
        self.message = "starting"
        self.fraction: float | None = None
        self.error: str | None = None
        self.meta: dict = {}
        self.finished = threading.Event()
        self.last_poll = time.monotonic()
        self.listeners: list = []  # listener(event, perf_counter_ns) per timed event (engine/collect.py)

    def poll(self) -> None:
        self.last_poll = time.monotonic()

    def _progress(self, message: str, fraction=None) -> None:
        self.message = message  # the loader's own words: "Loading the models: ..." or its step
        self.fraction = fraction

    def run(self) -> None:
        with page_errors(self, "job failed"):
            try:
                self._run()
            finally:
                self.current = None

    def _run(self) -> None:
        req = self.request
        engine = tuple(dict.fromkeys(variant_of(m)[0] for m in req.methods))  # a variant runs its base
        path = RunPath(engine, req.settings, gamma_auto=req.auto, budget_auto=req.auto)
        if not self.pairs.loaded(req.spec):
            self.message = "Loading the models (first run with this pair; they stay loaded)"
        loaded = self.pairs.get(req.spec, self._progress)
        self.meta = dict(loaded.meta)
        # encoded and checked once, before waiting for the pair: a bad setting (e.g. an exit
        # layer past this target's layers) is one message, not an error in the pane of a
        # method that never reads it
        prompt_ids = path.prompt_ids(loaded.pair, parse_prompt(req.prompt))
        self.meta["prompt_tokens"] = len(prompt_ids)
        if any(REGISTRY[m].early_exit for m in engine):
            from mirror_sd.engine.mirror.exit_layer import default_exit_layer
            self.meta["exit_layer"] = req.settings.exit_layer or default_exit_layer(loaded.pair)
        self.fraction = None
        if not loaded.lock.acquire(blocking=False):
            self.message = "Waiting for the background warm-up of the models to finish"
            loaded.lock.acquire()
        try:
            self._run_methods(loaded, self._prepare(path, loaded, prompt_ids))
        finally:
            loaded.lock.release()

    def _prepare(self, path: RunPath, loaded: LoadedPair, prompt_ids: list[int]) -> PreparedRun:
        """The run path's steps before the timed runs (holding loaded.lock)."""
        def say(message: str, fraction: float | None) -> None:
            self.message, self.fraction = message, fraction

        if loaded.check is None:
            self.message = "Checking the pair (untimed)"
        run = path.prepare(loaded.pair, prompt_ids, pair_check=lambda pair: ensure_check(loaded),
                           warmed=loaded.warmed, cancel=self.cancel, say=say)
        self.fraction = None
        self.meta["pair_check"] = run.pair_check
        self.meta["warmup_s"] = run.warmup_s
        if run.auto is not None:
            self.meta["auto"] = run.auto.to_dict()
        return run

    def _run_methods(self, loaded: LoadedPair, run: PreparedRun) -> None:
        for method in self.request.methods:
            if self.cancel.is_set():
                break
            self.current = method
            self.message = f"Running {method}"
            rec = self._timed_run(run, method)
            if REGISTRY[variant_of(method)[0]].baseline and self.meta.get("cross") and rec.finish is not None:
                self.meta["cross"] = {**self.meta["cross"], "ar_tokens": len(rec.finish.token_ids),
                                      "ar_coverage": output_coverage(run.pair, rec.finish.token_ids)}
            if rec.errors:  # the same settings would fail the next method too
                self.error = rec.errors[0]
                break

    def _timed_run(self, run: PreparedRun, method: str) -> RunRecord:
        """One method through the engine's collector, `records[method]` growing event by event
        with each arrival time (the page polls it). Time zero is the run's first timed event
        (its first span, then the engine's own start once Finish tells it), so nothing before
        it (building the decoder, a proposal vocabulary) is in its bars. `listeners` hear every
        event after it is recorded, inside the timed run: they must stay cheap."""
        rec = RunRecord(method)
        texts = TokenTexts(run.pair, rec)

        def on_event(ev, now: int) -> None:
            texts.on_event(ev)  # before add: the page sees a token with its text
            if isinstance(ev, EarlyExit):  # the layer Mirror really used (lens rule)
                self.meta["exit_layer"] = ev.layer
            rec.add(ev, now - rec.t0_ns)
            if isinstance(ev, Span) and (len(rec.spans) == 1 or ev.start_ns < rec.t0_ns):
                rec.rebase(ev.start_ns if len(rec.spans) == 1 else timed_origin(rec))
            elif isinstance(ev, Finish):
                engine_t0 = ev.stats.get("t0_ns") or now - int(ev.stats.get("wall_s", 0) * 1e9)
                rec.rebase(timed_origin(rec, engine_t0))
            for listener in self.listeners:
                listener(ev, now)
            if time.monotonic() - self.last_poll > self.HEARTBEAT_S:
                self.cancel.set()

        base, changes = variant_of(method)
        events = (run.events(method, cancel=self.cancel) if not changes else  # a variant: its settings
                  REGISTRY[base].decoder(run.pair, replace(run.settings, **changes)).generate(
                      run.prompt_ids, cancel=self.cancel))
        rec.t0_ns = time.perf_counter_ns()
        self.records[method] = rec
        collect(events, method, on_event)
        for s in (exit_check(rec) or {}).get("steps", []):  # checked after the run: names for its guesses
            texts.on_ids(s.get("exit_top") or [])
        return rec


class ResultCache:
    def __init__(self, size: int = 32):
        self.size = size
        self._items: OrderedDict[tuple, dict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> dict | None:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            return None

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def put(self, key: tuple, value: dict) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class Cancels:
    """One Event per browser session: `arm` at click time, `stop` from the Stop button."""

    def __init__(self):
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def arm(self, session: str) -> threading.Event:
        with self._lock:
            ev = self._events[session] = threading.Event()
            return ev

    def current(self, session: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(session, threading.Event())

    def stop(self, session: str) -> bool:
        with self._lock:
            ev = self._events.get(session)
        if ev is None:
            return False
        ev.set()
        return True

    def release(self, session: str, ev: threading.Event) -> None:
        with self._lock:
            if self._events.get(session) is ev:
                del self._events[session]
