"""Handlers of the "Pair check" box (ui/paircheck.py renders it; the check runs in a worker).

The box names the pair the controls name: its check once that pair is loaded (by the
background preparation at launch, "Check pair", a bundled preset or a run), else a line that
says how to get it, or why its load failed. On ZeroGPU the models live in the run's worker
process only: there the box shows the check that came back with the last run.
"""
from __future__ import annotations

import threading
import time

import gradio as gr

from . import zerogpu
from .frames import pair_spec
from .paircheck import ensure_check, human_name, render_pair_check, render_pair_note
from .render import render_status
from .session import PairSpec, page_errors
from .state import AppState

POLL_S = 0.35  # the status while a pair loads for its check (no timed run is in progress)


NOT_LOADED = ("{names}: not loaded yet. “Check pair” (under “Model pair and devices”) loads and "
              "checks it without a run; Run does too.")
LOADED_UNCHECKED = "{names}: loaded, not checked yet. “Check pair” checks it (seconds); Run does too."
ON_ZEROGPU = "{names}: the check comes with the first Run here (the models load for a run only)."


def _names(spec: PairSpec) -> str:
    """'target Qwen2.5-Coder 1.5B Instruct + draft Qwen2.5-Coder 0.5B Instruct (int8)': "default"
    said by the bundled model's own name (paircheck.human_name)."""
    def own(name: str, role: str) -> str:
        return human_name(f"default {role}" if str(name).strip().lower() == "default" else name)
    return f"target {own(spec.target, 'target')} + draft {own(spec.draft, 'draft')} ({spec.precision})"


class CheckJob(threading.Thread):
    """Load a pair (if it is not loaded) and check it, in a worker thread."""

    def __init__(self, app: AppState, spec: PairSpec):
        super().__init__(name="mirror-sd-check", daemon=True)
        self.app, self.spec = app, spec
        self.message, self.fraction = "starting", None
        self.error: str | None = None
        self.check: dict | None = None
        self.finished = threading.Event()

    def _progress(self, message: str, fraction=None) -> None:
        self.message, self.fraction = message, fraction

    def run(self) -> None:
        with page_errors(self, "pair check failed"):
            loaded = self.app.pairs.get(self.spec, self._progress)
            self.message, self.fraction = "checking the pair", None
            with loaded.lock:  # a run on this pair first
                self.check = ensure_check(loaded)


class PairBox:
    """The box's handlers over the app's state."""

    def __init__(self, app: AppState):
        self.app = app

    def _view(self, spec: PairSpec, state=None) -> str:
        """The box for `spec`: its check, a failed load's message, or how to get it."""
        loaded = self.app.pairs.peek(spec)
        if loaded is not None and loaded.check is not None:
            return render_pair_check(loaded.check)
        if loaded is not None:
            return render_pair_note(LOADED_UNCHECKED.format(names=_names(spec)))
        if error := self.app.load_errors.get(spec):
            return render_pair_note(f"{_names(spec)} could not be loaded: {error}", "error")
        if zerogpu.on_zerogpu():
            check = ((state or {}).get("meta") or {}).get("pair_check")
            return render_pair_check(check) if check else render_pair_note(ON_ZEROGPU.format(names=_names(spec)))
        return render_pair_note(NOT_LOADED.format(names=_names(spec)))

    def show(self, target, draft, precision, target_device, draft_device, draft_precision):
        """The box for the pair the controls name (page load, a changed field)."""
        return self._view(pair_spec(target, draft, precision, target_device, draft_device, draft_precision))

    def poll(self, target, draft, precision, target_device, draft_device, draft_precision):
        """While a run loads its pair: the check as soon as it is there, then the timer stops."""
        spec = pair_spec(target, draft, precision, target_device, draft_device, draft_precision)
        loaded = self.app.pairs.peek(spec)
        if loaded is None or loaded.check is None:
            return gr.skip(), gr.skip()
        return render_pair_check(loaded.check), gr.Timer(active=False)

    def after_run(self, state, target, draft, precision, target_device, draft_device, draft_precision):
        """After a run: the check of its pair (or why it did not load); the poll timer stops."""
        spec = pair_spec(target, draft, precision, target_device, draft_device, draft_precision)
        return self._view(spec, state), gr.Timer(active=False)

    def check(self, target, draft, precision, target_device, draft_device, draft_precision):
        """“Check pair”: load the pair the controls name (if needed) and show its check, no run.
        Streams (status, box)."""
        spec = pair_spec(target, draft, precision, target_device, draft_device, draft_precision)
        if zerogpu.on_zerogpu():
            yield gr.skip(), render_pair_note(ON_ZEROGPU.format(names=_names(spec)))
            return
        job = CheckJob(self.app, spec)
        job.start()
        start = time.monotonic()
        loading = render_pair_note(f"{_names(spec)}: loading, then a short check (the status says how far).")
        while not job.finished.wait(POLL_S):
            yield (render_status(f"Loading and checking {_names(spec)}: {job.message} "
                                 f"({time.monotonic() - start:.0f} s)", "info", job.fraction), loading)
        if job.error:
            self.app.remember_load_error(spec, job.error)
            gr.Warning(job.error)
            yield render_status(job.error, "error"), self._view(spec)
            return
        self.app.load_errors.pop(spec, None)
        yield (render_status(f"Loaded and checked: {_names(spec)} (see “Pair check”). Press Run.", "info"),
               render_pair_check(job.check))

    def preset_check(self, target, draft, precision, target_device, draft_device, draft_precision):
        """A chosen preset: bundled models (offline) and the test mode's tiny pairs load and are
        checked at once; a hub pair waits for “Check pair” or Run (a download is a big step).
        Streams (status, box, the preparation's timer: stopped when this loads)."""
        values = (target, draft, precision, target_device, draft_device, draft_precision)
        spec = pair_spec(*values)
        loaded = self.app.pairs.peek(spec)
        if (loaded is not None and loaded.check is not None) or not (self.app.is_tiny or offline(spec)):
            yield gr.skip(), self._view(spec), gr.skip()
            return
        for status, box in self.check(*values):  # the status is the check's from now on
            yield status, box, gr.Timer(active=False)


def offline(spec: PairSpec) -> bool:
    """Both models are bundled (no download)."""
    from mirror_sd.models.bundled import bundled_name
    return all(name == "default" or bundled_name(name) for name in (spec.target, spec.draft))
