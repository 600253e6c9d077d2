"""Gradio event handlers: thin generators over `session` (work) and `render` (HTML).

Every handler returns values for a fixed list of outputs (see `OUTPUTS` in layout.py):
status, AR pane, Mirror pane, SD pane, summary, timeline, step slider, inspector, trace file,
state. Errors become a status message and a gr.Warning, never a traceback.
"""
from __future__ import annotations

import logging
import time

import gradio as gr

from mirror_sd.engine.settings import Settings
from mirror_sd.engine.windows import DEFAULT_WINDOW
from mirror_sd.errors import MirrorSDError

from .inspector import render_inspector
from .paircheck import render_pair_check
from .render import render_pane, render_status, render_summary
from .runs import METHOD_ORDER, SHORT_NAMES, RunRecord, analyse, measured
from .preparing import Preparer
from .session import Cancels, Job, PairCache, PairSpec, ResultCache, RunRequest, target_layers
from .texts import CPU_PRECISION_TIP, DEFAULT_EXAMPLE, EXAMPLES
from .timeline import build_timeline
from .traces import TraceError, export_trace, read_trace, write_trace

log = logging.getLogger(__name__)

PAIRS = PairCache()
RESULTS = ResultCache()
CANCELS = Cancels()
LOAD_ERRORS: dict[PairSpec, str] = {}  # pairs whose load failed: why (the pair check box says it)
POLL_S = 0.35  # page refresh while a run streams: cheap renders, decoding never waits
PANES = ("ar", "mirror", "sd")  # the order of the pane outputs (the page shows AR, SD, Mirror-SD)
DEFAULT_PRECISION = "int8"  # AR about 4.4x faster than fp32 here; every pane runs the same weights
EXIT_LAYER_CEILING = 127  # the slider's range until the target's layer count is known
EXIT_LAYER_LABEL = "ℓₑ: early-exit layer (0 = chosen: by the exit lens's rule, else half the layers)"
EXIT_LAYER_INFO = ("Earlier: more overlap, weaker guesses. Later: better guesses, less time to "
                   "hide the draft.")


def _session(request: gr.Request | None) -> str:
    return (getattr(request, "session_hash", None) or "api") if request is not None else "api"


def _frame(status, panes, summary=None, timeline=None, slider=None, inspector=None,
           trace=None, state=None):
    """One update of all outputs; None leaves an output as it is."""
    keep = gr.skip()
    return (status, *(p if p is not None else keep for p in panes),
            *(v if v is not None else keep for v in (summary, timeline, slider, inspector, trace, state)))


def _settings(gamma, kappa, exit_layer, branch_budget, temperature, top_p, seed, max_new_tokens,
              streams="off", draft_vocab="full") -> Settings:
    return Settings(max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                    top_p=float(top_p), seed=int(seed), gamma=int(gamma), kappa=int(kappa),
                    exit_layer=int(exit_layer) or None, branch_budget=int(branch_budget),
                    streams=streams or "off", draft_vocab=draft_vocab or "full", window=DEFAULT_WINDOW)


def _pane_state(rec: RunRecord | None, running: bool) -> str:
    if rec is None:
        return "waiting"
    if running:
        return "running"
    if rec.errors:
        return "error"
    return "stopped" if rec.cancelled or rec.finish is None else "done"


def _live_panes(job: Job, methods) -> list[str]:
    out = []
    for m in PANES:
        if m not in methods:
            out.append(render_pane(m, None, "skipped", note=SKIPPED_NOTE))
            continue
        rec = job.records.get(m)
        running = job.current == m and not job.finished.is_set()
        if rec is None:
            note = ("waits: the runs go one after another" if not job.finished.is_set()
                    else "not run")
            out.append(render_pane(m, None, "waiting" if not job.finished.is_set() else "skipped", note=note))
            continue
        snap = rec.snapshot()
        now = time.perf_counter_ns() - snap.t0_ns if running else None
        out.append(render_pane(m, snap, _pane_state(snap, running), now_ns=now))
    return out


SKIPPED_NOTE = "Not ticked under “Methods”."


def _best_step(rec: RunRecord | None) -> int:
    """A step worth showing first: the first hit, else the first verified step."""
    if rec is None:
        return 0
    steps = analyse(rec).steps
    for s in sorted(steps):
        if any(b.status == "taken" for b in steps[s].rollouts):
            return s
    return min((s for s in steps if steps[s].verify is not None), default=0)


def _inspect_target(records: dict) -> str:
    return "mirror" if records.get("mirror") is not None else "sd"


def final_outputs(records: dict[str, RunRecord], settings: dict, meta: dict, prompt: str,
                  status: str, level: str = "info", pane_state: str | None = None,
                  methods=None) -> tuple:
    """Everything rendered from finished records (a run, a cached result or a trace)."""
    methods = methods or tuple(records)
    panes = []
    for m in PANES:
        rec = records.get(m)
        if rec is None:
            note = SKIPPED_NOTE if m not in methods else "not run"
            panes.append(render_pane(m, None, "skipped", note=note))
        else:
            panes.append(render_pane(m, rec, pane_state or _pane_state(rec, False)))
    which = _inspect_target(records)
    rec = records.get(which)
    n_steps = len(analyse(rec).steps) if rec is not None else 0
    step = _best_step(rec)
    greedy = float(settings.get("temperature", 0.0)) == 0.0
    slider = gr.update(minimum=0, maximum=max(n_steps - 1, 1), value=step, interactive=n_steps > 1)
    trace = write_trace(export_trace(records, prompt, settings, meta)) if records else None
    state = {"records": records, "settings": settings, "meta": meta, "prompt": prompt}
    return _frame(render_status(status, level), panes, render_summary(records, settings, meta),
                  build_timeline(records), slider, render_inspector(rec, step, greedy),
                  trace, state)


def arm(request: gr.Request = None):
    """On Run click, before queueing: a fresh Stop event for this browser session; Stop on;
    the status is the run's from now on (the preparation's timer stops); the pair check box
    polls for the check of the pair the run loads."""
    CANCELS.arm(_session(request))
    return gr.update(interactive=True), gr.Timer(active=False), gr.Timer(active=True)


def arm_check():
    """On “Check pair”: the status is the check's from now on (the preparation's timer stops)."""
    return gr.Timer(active=False)


def idle():
    """After a run: Stop off until the next Run."""
    return gr.update(interactive=False)


READY = "Ready. Press Run: the models load on the first run and stay loaded."
PREPARED = "Ready: the default models are loaded and warm. Press Run."
_PREPARER: list = []  # the background preparation started by launch(), if any


def use_tiny_models() -> None:
    """Test mode: every run gets the tiny random pair (no downloads); set once, at start."""
    global PAIRS
    PAIRS = PairCache.tiny()
    RESULTS.clear()


def tiny_models() -> bool:
    return PAIRS.is_tiny


def start_preparing(settings: Settings | None = None) -> None:
    """Load and warm up the default pair in a background thread (launch() calls this)."""
    if PAIRS.is_tiny or _PREPARER:
        return
    settings = settings or Settings(max_new_tokens=16)
    spec = PairSpec(precision=DEFAULT_PRECISION)
    _PREPARER.append(Preparer(PAIRS, spec, EXAMPLES[DEFAULT_EXAMPLE], settings))
    _PREPARER[0].start()


def ready_message() -> str:
    """The status line before the first run: what is preparing in the background, if anything."""
    if not _PREPARER:
        return READY
    return _PREPARER[0].describe() or PREPARED


def preparing_status():
    """Refreshes the status while the background preparation runs; then says so once, shows
    the prepared pair's check and stops its timer. Outputs: status, timer, pair check box."""
    if not _PREPARER:
        return gr.skip(), gr.Timer(active=False), gr.skip()
    prep = _PREPARER[0]
    if prep.done.is_set():
        level = "error" if prep.error else "info"
        loaded = PAIRS.peek(prep.spec)
        box = render_pair_check(loaded.check) if loaded is not None and loaded.check else gr.skip()
        return render_status(ready_message(), level), gr.Timer(active=False), box
    return render_status(ready_message(), "info"), gr.skip(), gr.skip()


def stop(request: gr.Request = None):
    if CANCELS.stop(_session(request)):
        return render_status("Stopping after the current decoding step…", "warning")
    return gr.skip()


def pair_spec(target, draft, precision, target_device, draft_device, draft_precision) -> PairSpec:
    """The pair the controls name (blank fields take their defaults)."""
    return PairSpec(*(str(v or "").strip() or d for v, d in
                      zip((target, draft, precision, target_device, draft_device, draft_precision),
                          ("default", "default", DEFAULT_PRECISION, "auto", "auto", "same"))))


def remember_load_error(spec: PairSpec, error: str) -> None:
    """Why a pair did not load, for the pair check box (the last few pairs)."""
    LOAD_ERRORS[spec] = error
    while len(LOAD_ERRORS) > 8:
        LOAD_ERRORS.pop(next(iter(LOAD_ERRORS)))


def _methods(chosen) -> tuple[str, ...]:
    """The ticked methods in the page's order; all three when nothing is ticked (API callers)."""
    chosen = {str(m).strip().lower() for m in (chosen or [])}
    picked = tuple(m for m in METHOD_ORDER if m in chosen or SHORT_NAMES[m].lower() in chosen)
    return picked or METHOD_ORDER


def run(prompt, target, draft, precision, target_device, draft_device, gamma, kappa, exit_layer,
        branch_budget, temperature, top_p, seed, max_new_tokens, methods, use_cache,
        draft_precision="same", auto_tune=False, streams="off", draft_vocab="full",
        request: gr.Request = None):
    """AR, SD and Mirror-SD (those ticked), one after another, streaming; ends with all
    outputs filled."""
    session = _session(request)
    cancel = CANCELS.current(session)
    job = None
    try:
        prompt = (prompt or "").strip()
        if not prompt:
            gr.Warning("The prompt is empty: type something or pick an example.")
            yield _frame(render_status("The prompt is empty: type something or pick an example.",
                                       "error"), [None] * 3)
            return
        settings = _settings(gamma, kappa, exit_layer, branch_budget, temperature, top_p, seed,
                             max_new_tokens, streams, draft_vocab)
        spec = pair_spec(target, draft, precision, target_device, draft_device, draft_precision)
        methods = _methods(methods)
        try:  # a bad value is a message now, before any model loads
            for m in methods:
                settings.check(m)
        except MirrorSDError as e:
            gr.Warning(str(e))
            yield _frame(render_status(str(e), "error"), [None] * 3)
            return
        req = RunRequest(prompt, spec, settings, methods, auto=bool(auto_tune))
        settings_d = vars(settings).copy()
        cached = RESULTS.get(req.key()) if use_cache else None
        if cached is not None:
            yield final_outputs(cached["records"], settings_d, cached["meta"], prompt,
                                f"Cached result for these settings (measured at {cached['when']}). "
                                f"Untick “reuse cached results” to measure again.",
                                pane_state="cached")
            return
        if cancel.is_set():
            yield _frame(render_status("Stopped before the run started.", "warning"), [None] * 3)
            return
        job = Job(req, PAIRS, cancel)
        job.start()
        empty = build_timeline({})
        first = True
        t_start = time.monotonic()
        while not job.finished.wait(0 if first else POLL_S):
            job.poll()
            status = _live_status(job, methods, t_start)
            if first:
                yield _frame(status, _live_panes(job, methods), render_summary({}), empty,
                             gr.update(value=0, maximum=1, interactive=False),
                             render_inspector(None, 0), None, None)
                first = False
            else:
                yield _frame(status, _live_panes(job, methods))
        records = {m: r for m, r in job.records.items()}
        meta = dict(job.meta)
        if meta.get("auto"):  # the settings the runs really used
            settings_d.update(gamma=meta["auto"]["gamma"], branch_budget=meta["auto"]["branch_budget"])
        if job.error and not PAIRS.loaded(spec):
            remember_load_error(spec, job.error)
        else:
            LOAD_ERRORS.pop(spec, None)
        if job.error:
            gr.Warning(job.error)
            if not records:
                yield _frame(render_status(job.error, "error"), _live_panes(job, methods))
                return
            yield final_outputs(records, settings_d, meta, prompt, job.error, "error")
            return
        if cancel.is_set() and not records:
            yield _frame(render_status("Stopped before the first run started.", "warning"),
                         _live_panes(job, methods))
            return
        if cancel.is_set():
            yield final_outputs(records, settings_d, meta, prompt,
                                "Stopped: partial results below; the models are free again.",
                                "warning")
            return
        RESULTS.put(req.key(), {"records": records, "meta": meta,
                                "when": time.strftime("%H:%M:%S")})
        yield final_outputs(records, settings_d, meta, prompt, _done_message(records, meta))
    except Exception as e:  # a bug here must not leave a traceback or a silent stall
        log.exception("run handler failed")
        gr.Warning(f"Internal error: {type(e).__name__}: {e}")
        yield _frame(render_status(f"Internal error: {type(e).__name__}: {e}", "error"), [None] * 3)
    finally:
        if job is not None and not job.finished.is_set():
            cancel.set()  # the viewer left (or the handler died): free the lanes
        CANCELS.release(session, cancel)


def _live_status(job: Job, methods, t_start: float) -> str:
    if job.current is None:
        return render_status(f"{job.message} ({time.monotonic() - t_start:.0f} s)", "info", job.fraction)
    i = methods.index(job.current) + 1
    done = [f"{SHORT_NAMES[m]} {measured(job.records[m])['wall_s']:.1f} s"
            for m in methods if m in job.records and job.records[m].finish is not None]
    tail = f" · finished: {', '.join(done)}" if done else ""
    warm = job.meta.get("warmup_s")
    warm = f" · warm-up done ({warm:.1f} s, untimed)" if warm else ""
    return render_status(f"Running {SHORT_NAMES[job.current]} ({i} of {len(methods)}), "
                         f"alone on the hardware{warm}{tail}", "info", (i - 1) / len(methods))


def _done_message(records: dict[str, RunRecord], meta: dict) -> str:
    ar = records.get("ar")
    base = measured(ar)["decode_tokens_per_s"] if ar is not None and ar.finish else None
    speeds = [(SHORT_NAMES[m], measured(records[m])["decode_tokens_per_s"]) for m in ("sd", "mirror")
              if records.get(m) is not None and records[m].finish is not None]
    speeds = [f"{name} {'decoded ' if i == 0 else ''}at {tps / base:.2f}×"
              for i, (name, tps) in enumerate((n, t) for n, t in speeds if t and base)]
    message = "Done."
    if speeds:
        message = (f"Done: {' and '.join(speeds)} the speed of the AR baseline (warm runs, "
                   f"prefill apart). Press “Race replay” to watch them side by side at their "
                   f"measured pace.")
    if meta.get("precision") == "fp32" and str(meta.get("target_device", "")).startswith("cpu"):
        message += f" {CPU_PRECISION_TIP}"
    return message


def inspect(state, which, step):
    if not state:
        return render_inspector(None, 0)
    records = state["records"]
    greedy = float(state["settings"].get("temperature", 0.0)) == 0.0
    return render_inspector(records.get(which) or records.get(_inspect_target(records)), step, greedy)


def inspect_run(state, which):
    """Switching the inspected run resets the slider to that run's steps."""
    if not state or state["records"].get(which) is None:
        return gr.skip(), render_inspector(None, 0)
    rec = state["records"][which]
    n = len(analyse(rec).steps)
    step = _best_step(rec)
    greedy = float(state["settings"].get("temperature", 0.0)) == 0.0
    return (gr.update(maximum=max(n - 1, 1), value=step, interactive=n > 1),
            render_inspector(rec, step, greedy))


def load_trace(path):
    """A downloaded trace back on screen, without models; also puts its prompt back."""
    if not path:
        return (*_frame(gr.skip(), [None] * 3), gr.skip())
    try:
        records, prompt, settings, meta = read_trace(path)
    except TraceError as e:
        gr.Warning(str(e))
        return (*_frame(render_status(str(e), "error"), [None] * 3), gr.skip())
    status = (f"Loaded a trace ({', '.join(SHORT_NAMES.get(m, m) for m in records)}) recorded "
              f"with {meta.get('target', '?')} / {meta.get('draft', '?')}: replayed from the file, "
              f"no model involved.")
    return (*final_outputs(records, settings, meta, prompt, status, pane_state="replay"), prompt)


def race(state, speed):
    """Replay the finished runs together, at their measured pace (times `speed`)."""
    if not state or not state.get("records"):
        yield render_status("Run (or load a trace) first, then replay the race.", "warning"), *([gr.skip()] * 3)
        return
    records: dict[str, RunRecord] = state["records"]
    speed = float(str(speed).rstrip("×x") or 1)
    total = max(r.duration_ns for r in records.values())
    start = time.monotonic()
    while True:
        t = int((time.monotonic() - start) * speed * 1e9)
        panes = []
        for m in PANES:
            rec = records.get(m)
            if rec is None:
                panes.append(render_pane(m, None, "skipped", note="not in this result"))
                continue
            part = rec.until(t)
            running = part.finish is None and t < rec.duration_ns
            panes.append(render_pane(m, part, "replay" if running else _pane_state(part, False),
                                     now_ns=min(t, rec.duration_ns)))
        status = render_status(f"Race replay at {speed:g}×: t = {min(t, total) / 1e9:.1f} s of "
                               f"{total / 1e9:.1f} s (measured times, runs aligned at their start)",
                               "info", min(1.0, t / total) if total else 1.0)
        yield status, *panes
        if t >= total:
            return
        time.sleep(0.2)


def exit_layer_range(target, exit_layer):
    """The early-exit slider spans the target's layers: 1..N-1, and 0 for the automatic choice.
    Known from a loaded pair or a local config; otherwise the range stays wide and the run
    checks the value against the loaded target (a message, not an error)."""
    n = target_layers(target, PAIRS)
    if n is None or n < 2:
        return gr.update(minimum=0, maximum=EXIT_LAYER_CEILING, info=EXIT_LAYER_INFO)
    value = int(exit_layer or 0)
    return gr.update(minimum=0, maximum=n - 1, value=value if value <= n - 1 else 0,
                     info=f"This target has {n} layers: 1 to {n - 1}. {EXIT_LAYER_INFO}")


def pick_example(task):
    return EXAMPLES.get(task, gr.skip())
