"""Gradio event handlers: thin generators over `session` (work) and the renderers (HTML).

The handlers are the methods of `Handlers`, which holds the app's state (state.AppState, one
per app). Errors become a status message and a gr.Warning, never a traceback.

While a method's timed run is in progress the server renders no HTML: four times a second the
handler sends the events that arrived since its last poll as small JSON items (ui/live.py) and
the page draws them (ui/live.js); the status line changes once a second. The panes rendered
from the full records come with the last frame, after every timed run.
"""
from __future__ import annotations

import logging
from dataclasses import replace
import time

import gradio as gr

from mirror_sd.engine.settings import Settings
from mirror_sd.errors import MirrorSDError

from .figures import cards, median_runs
from .frames import (DEFAULT_PRECISION, EXIT_LAYER_CEILING, EXIT_LAYER_INFO, RunInputs,
                     final_outputs, frame, live_status, panes, session_of)
from .inspector import render_inspector
from .live import LivePush, race_message
from .paircheck import render_pair_check
from .preparing import Preparer
from .render import render_status
from .runs import analyse, label, variant_of
from .session import Job, RunRequest, target_layers
from .state import AppState
from .texts import DEFAULT_EXAMPLE, EXAMPLES
from .traces import TraceError, read_trace
from .whatif import over_sd_of
from .zoom import instructive_step

log = logging.getLogger(__name__)

STATUS_POLL_S = 1.0  # the status line's refresh while a run is in progress
LIVE_POLL_S = 0.25  # the live board's poll: new items, if any, four times a second
READY = "Ready. Press Run: the models load on the first run and stay loaded."
PREPARED = "Ready: the default models are loaded and warm. Press Run."
WAITING_NOTE = "Next: the methods run one after another."
CLEARED = dict(verdict="", cards="", zoom="", how="", statistics="")


class Handlers:
    def __init__(self, app: AppState):
        self.app = app

    # ---- a run ------------------------------------------------------------------------------
    def run(self, request: gr.Request = None, **controls):
        """Every ticked method (RunInputs: the controls by name), one after another, `repeat`
        interleaved rounds; the status streams; ends with every output filled."""
        session = session_of(request)
        cancel = self.app.cancels.current(session)
        job = None
        try:
            inputs = RunInputs.from_controls(controls)
            problem = _problem(inputs)
            if problem:
                gr.Warning(problem)
                yield frame(render_status(problem, "error"))
                return
            methods, settings = inputs.chosen_methods(), inputs.settings()
            req = RunRequest(inputs.prompt.strip(), inputs.spec(), settings, methods,
                             auto=bool(inputs.auto_tune))
            rounds_wanted = max(1, min(int(inputs.repeat or 1), 5))
            key = (req.key(), rounds_wanted)
            cached = self.app.results.get(key) if inputs.use_cache else None
            if cached is not None:
                yield final_outputs(cached["records"], vars(settings).copy(), cached["meta"],
                                    req.prompt, f"Cached result for these settings (measured at "
                                    f"{cached['when']}). Untick “reuse cached results” to measure "
                                    f"again.", pane_state="cached", rounds=cached["rounds"],
                                    projected=cached.get("projected"))
                return
            if cancel.is_set():
                yield frame(render_status("Stopped before the run started.", "warning"))
                return
            rounds: list = []
            kept: list = []  # per round, its records and meta: the page shows one round in full
            projected: list = []  # per round, Mirror-SD over SD in the verdict's projections
            t_start = time.monotonic()
            for round_no in range(1, rounds_wanted + 1):
                job = Job(req, self.app.pairs, cancel)
                job.start()
                yield from _stream(job, methods, t_start, round_no, rounds_wanted)
                if job.error or cancel.is_set():
                    break
                rounds.append(cards(dict(job.records)))
                kept.append((dict(job.records), dict(job.meta)))
                # between timed runs (a few ms): how the projection moves from round to round
                projected.append(over_sd_of({"records": dict(job.records), "meta": dict(job.meta),
                                             "settings": _settings_used(req, job.meta)}))
            yield from self._finish(job, req, key, rounds, cancel, projected, kept)
        except Exception as e:  # a bug here must not leave a traceback or a silent stall
            log.exception("run handler failed")
            gr.Warning(f"Internal error: {type(e).__name__}: {e}")
            yield frame(render_status(f"Internal error: {type(e).__name__}: {e}", "error"))
        finally:
            if job is not None and not job.finished.is_set():
                cancel.set()  # the viewer left (or the handler died): free the lanes
            self.app.cancels.release(session, cancel)

    def _finish(self, job: Job, req: RunRequest, key, rounds: list, cancel, projected: list | None = None,
                kept: list | None = None):
        records, meta = dict(job.records), dict(job.meta)
        if kept and len(kept) == len(rounds) > 1 and not job.error and not cancel.is_set():
            shown = median_runs(rounds)  # each method's middle run: the race runs in the medians' order
            last = len(kept) - 1  # a method with no speed in any round: its last round's run
            records = {m: kept[shown.get(m, last)][0][m] for m in kept[last][0]}
            meta = dict(kept[shown.get("mirror", last)][1])  # Mirror-SD's run's exit layer and the like
            meta["median_runs"] = {m: i + 1 for m, i in shown.items()}
            meta["rounds"] = len(rounds)
        meta.setdefault("machine", _machine())
        settings_d = _settings_used(req, meta)
        if job.error and not self.app.pairs.loaded(req.spec):
            self.app.remember_load_error(req.spec, job.error)
        else:
            self.app.load_errors.pop(req.spec, None)
        out = dict(settings=settings_d, meta=meta, prompt=req.prompt, methods=req.methods,
                   rounds=rounds, projected=projected)
        if job.error:
            gr.Warning(job.error)
            if not records:
                yield frame(render_status(job.error, "error"), panes({}, req.methods),
                            live=race_message({}, req.methods))
                return
            yield final_outputs(records, status=job.error, level="error", **out)
        elif cancel.is_set():
            message = ("Stopped: partial results below; the models are free again." if records
                       else "Stopped before the first run started.")
            yield final_outputs(records, status=message, level="warning", **out)
        else:
            self.app.results.put(key, {"records": records, "meta": meta, "rounds": rounds, "projected": projected,
                                       "when": time.strftime("%H:%M:%S")})
            yield final_outputs(records, status=None, **out)  # the done message

    # ---- buttons and timers -----------------------------------------------------------------
    def arm(self, request: gr.Request = None):
        """On Run, before queueing: a fresh Stop event; Stop on; the preparation's timer stops;
        the pair check box polls for the run's pair; the results area shows."""
        self.app.cancels.arm(session_of(request))
        return (gr.update(interactive=True), gr.Timer(active=False), gr.Timer(active=True),
                gr.update(visible=True))

    def stop(self, request: gr.Request = None):
        if self.app.cancels.stop(session_of(request)):
            return render_status("Stopping after the current decoding step…", "warning")
        return gr.skip()

    def start_preparing(self, settings: Settings | None = None) -> None:
        """Load and warm up the default pair in a background thread (launch() calls this)."""
        if self.app.is_tiny or self.app.preparer is not None:
            return
        from .frames import pair_spec
        settings = settings or Settings(max_new_tokens=16)
        spec = pair_spec("default", "default", DEFAULT_PRECISION, "auto", "auto", "same")
        self.app.preparer = Preparer(self.app.pairs, spec, EXAMPLES[DEFAULT_EXAMPLE], settings)
        self.app.preparer.start()

    def ready_message(self) -> str:
        """The status line before the first run: the background preparation, if any."""
        if self.app.preparer is None:
            return READY
        return self.app.preparer.describe() or PREPARED

    def preparing_status(self):
        """Refreshes the status while the background preparation runs; then says so once, shows
        the prepared pair's check and stops its timer. Outputs: status, timer, pair check box."""
        prep = self.app.preparer
        if prep is None:
            return gr.skip(), gr.Timer(active=False), gr.skip()
        if prep.done.is_set():
            level = "error" if prep.error else "info"
            loaded = self.app.pairs.peek(prep.spec)
            box = render_pair_check(loaded.check) if loaded is not None and loaded.check else gr.skip()
            return render_status(self.ready_message(), level), gr.Timer(active=False), box
        return render_status(self.ready_message(), "info"), gr.skip(), gr.skip()

    def exit_layer_range(self, target, exit_layer):
        """The early-exit slider spans the target's layers: 1..N-1, and 0 for the automatic
        choice; unknown (a hub id not loaded yet): the wide range, checked at run."""
        n = target_layers(target, self.app.pairs)
        if n is None or n < 2:
            return gr.update(minimum=0, maximum=EXIT_LAYER_CEILING, info=EXIT_LAYER_INFO)
        value = int(exit_layer or 0)
        return gr.update(minimum=0, maximum=n - 1, value=value if value <= n - 1 else 0,
                         info=f"This target has {n} layers: 1 to {n - 1}. {EXIT_LAYER_INFO}")

    # ---- after a run: inspect, replay, load a trace ------------------------------------------
    @staticmethod
    def inspect(state, which, step):
        if not state:
            return render_inspector(None, 0)
        records = state["records"]
        greedy = float(state["settings"].get("temperature", 0.0)) == 0.0
        return render_inspector(records.get(which) or records.get("mirror"), step, greedy)

    @staticmethod
    def inspect_run(state, which):
        """Switching the inspected run resets the slider to that run's steps."""
        if not state or state["records"].get(which) is None:
            return gr.skip(), render_inspector(None, 0)
        rec = state["records"][which]
        n = len(analyse(rec).steps)
        step = instructive_step(rec)
        greedy = float(state["settings"].get("temperature", 0.0)) == 0.0
        return (gr.update(maximum=max(n - 1, 1), value=step, interactive=n > 1),
                render_inspector(rec, step, greedy))

    @staticmethod
    def load_trace(path):
        """A downloaded trace back on screen, without models; also puts its prompt back."""
        if not path:
            return (*frame(gr.skip()), gr.skip())
        try:
            records, prompt, settings, meta = read_trace(path)
        except TraceError as e:
            gr.Warning(str(e))
            return (*frame(render_status(str(e), "error")), gr.skip())
        status = (f"Loaded a trace ({', '.join(label(m) for m in records)}) recorded with "
                  f"{meta.get('target', '?')} / {meta.get('draft', '?')}: replayed from the file, "
                  f"no model involved.")
        return (*final_outputs(records, settings, meta, prompt, status, pane_state="replay"), prompt)


def _problem(inputs: RunInputs) -> str | None:
    """A bad input as one line, before any model loads; None when the run may start."""
    if not inputs.prompt.strip():
        return "The prompt is empty: type something or pick an example."
    try:
        settings = inputs.settings()
        for m in inputs.chosen_methods():
            base, changes = variant_of(m)
            replace(settings, **changes).check(base)
    except (MirrorSDError, TypeError, ValueError) as e:
        return str(e)
    return None


def _settings_used(req: RunRequest, meta: dict) -> dict:
    """The run's settings as the runs used them (auto-tuned window and branch budget applied)."""
    settings = vars(req.settings).copy()
    if meta.get("auto"):
        settings.update(gamma=meta["auto"]["gamma"], branch_budget=meta["auto"]["branch_budget"])
    return settings


def _stream(job: Job, methods, t_start: float, round_no: int, rounds: int):
    """Frames while a job runs: first every pane waiting and the live board reset; then, four
    times a second, the events new since the last poll as JSON items for the board (no HTML)
    and, once a second, the status line. The panes come with the last frame (_finish)."""
    push = LivePush(methods, round_no, rounds)
    first = {"panes": panes({}, methods, pending=WAITING_NOTE), **(CLEARED if round_no == 1 else {})}
    yield frame(live_status(job, methods, t_start, round_no, rounds), live=push.start(), **first)
    said = time.monotonic()
    while True:
        finished = job.finished.wait(LIVE_POLL_S)
        job.poll()
        message = push.update(job.records, job.current)
        status = None
        if not finished and time.monotonic() - said >= STATUS_POLL_S:  # the last frame says the end
            status, said = live_status(job, methods, t_start, round_no, rounds), time.monotonic()
        if message is not None or status is not None:
            yield frame(status if status is not None else gr.skip(), live=message)
        if finished:
            return


def _machine() -> str:
    from .figures import machine
    return machine()


def pick_example(task):
    return EXAMPLES.get(task, gr.skip())
