"""What the handlers send to the page: the run's inputs (`RunInputs`, the public run API) and
the frames of outputs.

Every run-like handler returns one frame: the status, one pane per registered method
(registry order), then RESULT_OUTPUTS in that order (layout.py builds its output list the
same way).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, fields

import gradio as gr

from mirror_sd.engine.registry import baseline
from mirror_sd.engine.settings import DEFAULTS, Settings, settings_from
from mirror_sd.engine.windows import DEFAULT_PROPOSER, DEFAULT_WINDOW
from mirror_sd.errors import MirrorSDError

from .figures import cards, machine_words, order_within_noise, output_words, repeat_summary
from .how import render_how
from .inspector import render_inspector
from .live import race_message
from .render import render_pane, render_status
from .results import finished, render_cards, render_statistics, render_verdict
from .runs import VARIANTS, RunRecord, analyse, default_methods, label, measured, method_names
from .session import Job, PairSpec
from .texts import CPU_PRECISION_TIP
from .timeline import build_timeline
from .traces import export_trace, write_trace
from .whatif import best_projection, over_sd_figure
from .zoom import opening_step, render_zoom, zoom_record

DEFAULT_PRECISION = "int8"  # several times faster than fp32 here; every pane runs the same weights
EXIT_LAYER_CEILING = 127  # the slider's range until the target's layer count is known
EXIT_LAYER_LABEL = "Early-exit layer (0 = chosen automatically)"
EXIT_LAYER_INFO = ("The target layer after which Mirror-SD peeks at its likely next tokens. "
                   "Earlier: more overlap, weaker guesses. Later: better guesses, less time to "
                   "hide the draft.")
RESULT_OUTPUTS = ("verdict", "cards", "zoom", "how", "statistics", "timeline", "which", "step",
                  "inspector", "live", "trace", "state")
SKIPPED_NOTE = "Not ticked under “Methods”."
DEFAULT_TOKENS = 64  # room for the default example's whole answer (58 tokens with its end), about 6 s a run here
# the run's inputs that are settings of engine/settings.py (same names, converted to its types)
SETTING_INPUTS = ("max_new_tokens", "temperature", "top_p", "seed", "gamma", "kappa", "exit_layer",
                  "branch_budget", "streams", "draft_vocab", "proposer")


@dataclass
class RunInputs:
    """The inputs of a run: the page's controls, and the public `run` API's parameters (by
    name; any left out takes the default here, the page's default). The settings among them
    (SETTING_INPUTS) default to engine/settings.py's, but for a shorter run and the exit
    layer's 0 (chosen automatically)."""
    prompt: str = ""
    target: str = "default"  # "default", a hub id, a folder or a .gguf file
    draft: str = "default"
    precision: str = DEFAULT_PRECISION
    target_device: str = "auto"
    draft_device: str = "auto"
    draft_precision: str = "same"
    gamma: int = DEFAULTS.gamma  # drafted tokens per window
    kappa: int = DEFAULTS.kappa  # early-exit candidates per position
    exit_layer: int = 0  # 0: chosen automatically
    branch_budget: int = DEFAULTS.branch_budget
    temperature: float = DEFAULTS.temperature  # 0: greedy
    top_p: float = DEFAULTS.top_p
    seed: int = DEFAULTS.seed
    max_new_tokens: int = DEFAULT_TOKENS
    methods: list | None = None  # registry names or labels; none: every method
    use_cache: bool = True
    auto_tune: bool = False  # gamma and branch budget chosen by a short probe
    streams: str = DEFAULTS.streams
    draft_vocab: str = DEFAULTS.draft_vocab
    proposer: str = DEFAULT_PROPOSER  # draft | lookup (engine/proposers.py)
    repeat: int = 3  # interleaved rounds of every method (median and range on the cards; the verdict calls a difference within them a tie)

    @classmethod
    def from_controls(cls, controls: dict) -> "RunInputs":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(controls) - known)
        if unknown:
            raise MirrorSDError(f"Unknown run input(s): {', '.join(unknown)}.")
        return cls(**{k: v for k, v in controls.items() if v is not None})

    def settings(self) -> Settings:
        values = {name: getattr(self, name) for name in SETTING_INPUTS}
        values["exit_layer"] = int(self.exit_layer or 0) or None  # 0: chosen for the pair
        return settings_from(values, window=DEFAULT_WINDOW)

    def spec(self) -> PairSpec:
        return pair_spec(self.target, self.draft, self.precision, self.target_device,
                         self.draft_device, self.draft_precision)

    def chosen_methods(self) -> tuple[str, ...]:
        """The ticked methods (and variants) in display order; every registry method when none
        is ticked."""
        chosen = {str(m).strip().lower() for m in (self.methods or [])}
        picked = tuple(m for m in method_names() if m in chosen or label(m).lower() in chosen)
        return picked or default_methods()


def pair_spec(target, draft, precision, target_device, draft_device, draft_precision) -> PairSpec:
    """The pair the controls name (blank fields take their defaults)."""
    return PairSpec(*(str(v or "").strip() or d for v, d in
                      zip((target, draft, precision, target_device, draft_device, draft_precision),
                          ("default", "default", DEFAULT_PRECISION, "auto", "auto", "same"))))


def session_of(request: gr.Request | None) -> str:
    return (getattr(request, "session_hash", None) or "api") if request is not None else "api"


def frame(status, panes=None, **results):
    """One update of all outputs: the status, the panes (None: unchanged), RESULT_OUTPUTS
    (left out: unchanged)."""
    keep = gr.skip()
    panes = panes if panes is not None else [None] * len(method_names())
    return (status, *(p if p is not None else keep for p in panes),
            *(results[k] if results.get(k) is not None else keep for k in RESULT_OUTPUTS))


def pane_state_of(rec: RunRecord | None, running: bool) -> str:
    if rec is None:
        return "waiting"
    if running:
        return "running"
    if rec.errors:
        return "error"
    return "stopped" if rec.cancelled or rec.finish is None else "done"


def round_rank(rounds: list | None, shown: dict[str, int] | None) -> dict[str, str]:
    """{method: 'the middle of its 3 runs'} and the like: where each method's run shown
    (`shown`: {method: round index}) stands among its interleaved runs by end-to-end speed."""
    if not rounds or len(rounds) < 2 or not shown:
        return {}
    out = {}
    for m, i in shown.items():
        own = rounds[i].get(m) if 0 <= i < len(rounds) else None
        values = [r[m].e2e_tps for r in rounds if m in r and r[m].e2e_tps]
        if own is None or own.e2e_tps is None or len(values) < 2:
            continue
        n = len(values)
        middle = sorted(values)[(n - 1) // 2]  # its median run (equal speeds: the middle too)
        out[m] = (f"the middle of its {n} runs by speed" if own.e2e_tps == middle else
                  f"its fastest of {n} runs" if own.e2e_tps >= max(values) else
                  f"its slowest of {n} runs" if own.e2e_tps <= min(values) else f"the middle of its {n} runs by speed")
    return out


def panes(records: dict, methods, pane_state: str | None = None, pending: str = "not run",
          ranks: dict[str, str] | None = None) -> list:
    """Each pane's HTML; a variant's pane (VARIANTS) shows only when it was chosen or ran;
    `ranks`: where each method's run shown stands among its runs (`round_rank`)."""
    out = []
    for m in method_names():
        rec = records.get(m)
        if m in VARIANTS and rec is None and m not in methods:
            out.append(gr.update(value="", visible=False))
        elif rec is None:
            note = SKIPPED_NOTE if m not in methods else pending
            out.append(render_pane(m, None, "waiting" if m in methods and pending != "not run"
                                   else "skipped", note=note))
        else:
            state = pane_state or pane_state_of(rec, False)
            note = (f"Stopped: the run ended at the step after Stop, {measured(rec)['tokens']} "
                    f"tokens in." if rec.cancelled else "")
            out.append(render_pane(m, rec, state, note=note, rank=(ranks or {}).get(m, "")))
        if m in VARIANTS and not (rec is None and m not in methods):
            out[-1] = gr.update(value=out[-1], visible=True)
    return out


def _drafting_runs(records: dict) -> list[str]:
    """The runs with steps to inspect (every method but the baseline), in registry order."""
    return [m for m in records if m != baseline() and records[m] is not None
            and any(True for _ in analyse(records[m]).steps)]


def _inspect_target(records: dict) -> str | None:
    """The run the inspector opens on: the Mirror-SD run the zoom draws (one whose lanes ran at
    once, so that the early exit, the branches and a hit show), else the last drafting method
    that ran."""
    drafting = _drafting_runs(records)
    zoomed = zoom_record(records)
    if zoomed is not None and zoomed.method in drafting:
        return zoomed.method
    own = [m for m in drafting if m not in VARIANTS] or drafting  # a variant only when alone
    return own[-1] if own else None


def final_outputs(records: dict[str, RunRecord], settings: dict, meta: dict, prompt: str,
                  status: str | None, level: str = "info", pane_state: str | None = None,
                  methods=None, rounds: list | None = None, projected: list | None = None) -> tuple:
    """Everything rendered from finished records (a run, a cached result or a trace); `status`
    None: a finished run's (`done_message`)."""
    methods = methods or tuple(records)
    which = _inspect_target(records)
    rec = records.get(which) if which else None
    n_steps = len(analyse(rec).steps) if rec is not None else 0
    step = opening_step(records, rec)
    greedy = float(settings.get("temperature", 0.0)) == 0.0
    spreads = repeat_summary(rounds) if rounds and len(rounds) > 1 else None
    state = {"records": records, "settings": settings, "meta": meta, "prompt": prompt,
             "rounds": rounds or [], "projected": projected or []}
    projection = best_projection(state)
    state["replay_b"] = over_sd_figure(projection, "b")  # How it works' step model cites it
    if status is None:  # a finished run: the done message (the verdict says the result)
        status, level = done_message(records, meta, rounds), "done"  # the result (style.css)
    return frame(
        render_status(status, level),
        panes(records, methods, pane_state, ranks=round_rank(rounds, {m: i - 1 for m, i in (meta.get("median_runs") or {}).items()})),
        verdict=render_verdict(records, meta, projection, spreads),
        cards=render_cards(records, meta, spreads, settings),
        zoom=render_zoom(zoom_record(records), dict(meta, branch_budget=settings.get("branch_budget"))),
        how=render_how(records, meta, state["replay_b"]),
        statistics=render_statistics(records, settings, meta, len(rounds or []) or 1, spreads),
        timeline=build_timeline(records),
        # the inspector offers the runs this result holds, not every registered method
        which=gr.update(choices=[(label(m), m) for m in _drafting_runs(records)], value=which) if which else None,
        step=gr.update(minimum=0, maximum=max(n_steps - 1, 1), value=step, interactive=n_steps > 1),
        inspector=render_inspector(rec, step, greedy),
        trace=write_trace(export_trace(records, prompt, settings, meta)) if records else None,
        live=race_message(records, methods, shown=meta.get("rounds") if meta.get("median_runs") else None,
                          tie=order_within_noise(cards(finished(records)), spreads)), state=state)


def live_status(job: Job, methods, t_start: float, round_no: int, rounds: int) -> str:
    """The status line while a run is under way, one timer in it: 'Round 1 of 3: SD running,
    job 2 s so far. ...' (the time since Run was pressed: every run and round so far, named the
    job's so that it reads apart from each pane's clock, 'run 1.2 s', its own run's time)."""
    so_far = f"{time.monotonic() - t_start:.0f} s so far"
    if job.current is None:  # loading or warming up: the message, and one timer
        timed = re.search(r"\d+ s (ago|so far)", job.message)
        return render_status(job.message if timed else f"{job.message}, {so_far}", "info", job.fraction)
    i = methods.index(job.current) + 1
    done = [f"{label(m)} {measured(job.records[m])['wall_s']:.1f} s"
            for m in methods if m in job.records and job.records[m].finish is not None]
    again = f"Round {round_no} of {rounds}: " if rounds > 1 else ""
    name = label(job.current)
    turns = (f" The methods take turns, each timed alone on the hardware; done{' this round' if rounds > 1 else ''}: "
             f"{', '.join(done)}." if done else
             " The methods take turns, each timed alone on the hardware." if len(methods) > 1 else "")
    # no token count here: the pane counts the tokens it has drawn, and a count read at the
    # poll would run ahead of or behind it
    fraction = ((round_no - 1) * len(methods) + i - 1) / (len(methods) * rounds)
    elapsed = time.monotonic() - t_start
    # after a whole round, the rounds left at that round's pace (an estimate, said as one)
    left = f", about {elapsed * (1 - fraction) / fraction:.0f} s left" if round_no > 1 and fraction > 0 else ""
    return render_status(f"{again}{name if again else name[:1].upper() + name[1:]} running, job {so_far}{left}.{turns}",
                         "info", fraction)


def done_message(records: dict[str, RunRecord], meta: dict, rounds: list | None = None) -> str:
    """The status line after a run: where and how often it was measured, whether each method
    wrote AR's tokens, and where the result is. The verdict under the race says who was faster,
    once; the status does not repeat it."""
    ran = [m for m, r in records.items() if r is not None and r.finish is not None]
    message = "Done."
    if baseline() in ran and len(ran) > 1:
        how = f"{len(rounds)} interleaved runs of each method" if rounds and len(rounds) > 1 else "one run of each method"
        lines = [f"Done, measured on {machine_words(meta)} ({how}).", output_words(records),
                 "The result is under the race."]
        message = " ".join(x for x in lines if x)
    if meta.get("precision") == "fp32" and str(meta.get("target_device", "")).startswith("cpu"):
        message += f" {CPU_PRECISION_TIP}"
    return message
