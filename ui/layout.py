"""The Gradio Blocks: the prompt and Run on top (settings folded beside them), then the results
of the run: the verdict, the live board and the token panes, one Mirror-SD step zoomed in, one card per method,
and folds for the timeline, the step inspector, the What-if projection, the statistics, how it
works and the glossary. Panes, cards, legends and lanes come from the engine's registry.

`build_demo()` builds the app (no model is loaded until the first Run); `launch(demo)` starts
it with the queue (one run at a time, a bounded queue whose position the page shows).
"""
from __future__ import annotations

import html
import os
from pathlib import Path

import gradio as gr

from mirror_sd.engine.registry import baseline
from mirror_sd.engine.settings import PROPOSER_CHOICES

from . import whatif, zerogpu
from .frames import (DEFAULT_PRECISION, EXIT_LAYER_CEILING, EXIT_LAYER_INFO, EXIT_LAYER_LABEL, RESULT_OUTPUTS,
                     RunInputs)
from .handlers import Handlers, pick_example
from .how import race_key, render_how
from .inspector import pick, render_inspector
from .live import BOARD_JS, BOARD_TEMPLATE, TIMELINE_TEMPLATE
from .pairbox import PairBox
from .paircheck import render_pair_check
from .render import render_legend, render_pane, render_status
from .runs import VARIANTS, default_methods, label, method_names
from .pair_report import build_pair_report_tab
from .state import AppState
from .steps import PICK_JS
from .stepmodel import CALC_JS
from .texts import (DRAFT_PRECISION_INFO, DRAFT_PRECISIONS, PRECISION_INFO, TARGET_PRECISIONS)
from .texts import DEFAULT_EXAMPLE, EXAMPLES, GLOSSARY, HOW_IN_NOTATION

CSS = "\n".join(Path(__file__).with_name(name).read_text(encoding="utf-8")
                for name in ("style.css", "panes.css", "live.css"))  # panes, legend, the live board
QUEUE_SIZE = int(os.environ.get("MIRROR_SD_QUEUE_SIZE", "16"))


def theme() -> gr.themes.Base:
    """Gradio's default theme with its bundled fonts at weights 400 and 700 only: the
    semibold (600) files it ships hold a few dozen glyphs (a capital A but no other capital
    letter), so bold text drew its A's in another face than the rest of the word."""
    return gr.themes.Default(
        font=(gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif", "system-ui",
              "sans-serif"),
        font_mono=(gr.themes.LocalFont("IBM Plex Mono", weights=(400, 700)), "ui-monospace", "Consolas",
                   "monospace"))

# name -> (target, draft); "default" is the bundled offline pair
PAIR_PRESETS = {
    "Default: Qwen2.5-Coder 1.5B + 0.5B (bundled, offline)": ("default", "default"),
    "Cross-tokenizer: Qwen2.5-Coder 1.5B + Gemma 3 270M (bundled, offline)": ("default",
                                                                             "gemma-3-270m"),
    "Hub: Qwen2.5-Coder-1.5B-Instruct + 0.5B-Instruct": ("Qwen/Qwen2.5-Coder-1.5B-Instruct",
                                                         "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    "Hub: Qwen2.5-7B-Instruct + 0.5B-Instruct": ("Qwen/Qwen2.5-7B-Instruct",
                                                 "Qwen/Qwen2.5-0.5B-Instruct"),
    "Hub: Qwen3-8B + Qwen3-0.6B (the paper's family)": ("Qwen/Qwen3-8B", "Qwen/Qwen3-0.6B"),
    "Custom (type hub ids, folders or .gguf files below)": (None, None),
}
DEVICES = ["auto", "cpu", "cuda", "cuda:0", "cuda:1", "mps"]
INPUTS = RunInputs()  # the controls' defaults

HEADER = """
<div class="msd-header">
  <h1>Mirror Speculative Decoding, live</h1>
  <p>A real Mirror-SD engine beside plain decoding (AR) and plain speculative decoding (SD), each
  measured on this machine: see what the draft wrote, what the target kept or rejected, and
  where the time went.</p>
  {banner}
</div>
"""


def _speculation(c: dict) -> None:
    """Methods and the speculation settings."""
    choices = [(label(m), m) for m in method_names()]
    with gr.Accordion("Methods and speculation", open=False):
        methods = gr.CheckboxGroup(choices, value=list(default_methods()),
                                   label="Methods", elem_id="methods",
                                   info="Each runs alone, one after another, on the same weights. "
                                        "Mirror-SD drafts beside the target in every step, as on two "
                                        "devices, so its hits and misses show. “Mirror-SD (no exit)” "
                                        "lets the draft's own guesses pick the branches, so the verdict "
                                        "can say what the early exit bought. “Mirror-SD (gated)” "
                                        "overlaps only in steps where that measured faster here.")
        gamma = gr.Slider(1, 12, value=INPUTS.gamma, step=1, label="Drafted tokens per window (γ)",
                          info="Longer windows win more per step when the draft is right, cost more when it is wrong.")
        kappa = gr.Slider(1, 32, value=INPUTS.kappa, step=1, label="Early-exit guesses per position (κ)",
                          info="How many of the target's early guesses go to the draft.")
        # the range follows the target (handlers.exit_layer_range, on page load, on
        # a new target and after each run); the run checks it against the model
        exit_layer = gr.Slider(0, EXIT_LAYER_CEILING, value=INPUTS.exit_layer, step=1,
                               label=EXIT_LAYER_LABEL,
                               info=EXIT_LAYER_INFO)
        branch_budget = gr.Slider(1, 8, value=INPUTS.branch_budget, step=1, label="Branch budget",
                                  info="Branch-complete rollouts the draft writes in parallel per step (batched).")
        proposer = gr.Dropdown(list(PROPOSER_CHOICES), value=INPUTS.proposer, label="Proposer", elem_id="proposer",
                               info="Who drafts: the draft model, or prompt lookup (the tokens that followed "
                                    "the text's last words earlier in the prompt or the answer; no model, the "
                                    "draft where nothing recurs). Output unchanged either way.")
        auto_tune = gr.Checkbox(False, label="Choose γ and branch budget automatically",
                                info="A short probe (AR, SD, Mirror-SD, 16 tokens each) calibrates the latency model; the setting with the best projected speedup is used (a projection, shown in the summary).",
                                elem_id="auto-tune")
    c.update(methods=methods, gamma=gamma, kappa=kappa, exit_layer=exit_layer, branch_budget=branch_budget, auto_tune=auto_tune,
             proposer=proposer)


def _sampling(c: dict) -> None:
    """Sampling and length."""
    with gr.Accordion("Sampling and length", open=False):
        temperature = gr.Slider(0, 2, value=INPUTS.temperature, step=0.05, label="Temperature (0 = greedy)",
                                info="Greedy runs must reproduce the baseline token for token; the summary checks it.")
        top_p = gr.Slider(0.05, 1, value=INPUTS.top_p, step=0.05, label="Top-p")
        seed = gr.Number(INPUTS.seed, precision=0, label="Seed", minimum=0)
        max_new_tokens = gr.Slider(4, 512, value=INPUTS.max_new_tokens, step=4, label="Max new tokens", elem_id="max-new-tokens",
                                   info="More tokens: steadier figures, a longer run.")
    c.update(temperature=temperature, top_p=top_p, seed=seed, max_new_tokens=max_new_tokens)


def _pair(c: dict) -> None:
    """The model pair and the devices."""
    with gr.Accordion("Model pair and devices", open=False):
        preset = gr.Dropdown(list(PAIR_PRESETS), value=next(iter(PAIR_PRESETS)), label="Pair",
                             elem_id="pair-preset")
        target = gr.Textbox("default", label="Target model",
                            info="“default”, a Hugging Face hub id, a local folder or a .gguf file.")
        draft = gr.Textbox("default", label="Draft model", elem_id="draft-model",
                           info="Its tokenizer may differ from the target's: then it "
                                "proposes only the tokens both vocabularies share "
                                "(a cross-tokenizer pair; output unchanged).")
        check_btn = gr.Button("Check pair", size="sm", elem_id="check-pair-btn",
                              visible=not zerogpu.on_zerogpu())
        precision = gr.Dropdown(TARGET_PRECISIONS, value=zerogpu.default_precision(DEFAULT_PRECISION), label="Precision",
                                info=PRECISION_INFO)
        draft_precision = gr.Dropdown(["same"] + DRAFT_PRECISIONS, value="same",
                                      label="Draft precision", info=DRAFT_PRECISION_INFO)
        streams = gr.Dropdown(["off", "auto"], value=INPUTS.streams, label="Draft streams",
                              info="auto: the draft's trained stream heads propose several "
                                   "tokens per draft forward (SD and Mirror-SD; lossless).")
        draft_vocab = gr.Dropdown(["full", "auto"], value=INPUTS.draft_vocab, label="Draft vocabulary",
                                  info="auto: the draft proposes from the 65,536 most frequent "
                                       "tokens (a smaller LM head; at int8 SD 1.04-1.10x faster than with the full "
                                       "head, median per question in two runs: within noise here); "
                                       "full: all ids. Output unchanged either way.")
        with gr.Row():
            target_device = gr.Dropdown(DEVICES, value="auto", allow_custom_value=True,
                                        label="Target device")
            draft_device = gr.Dropdown(DEVICES, value="auto", allow_custom_value=True,
                                       label="Draft device")
        configs, config_value, config_open = zerogpu.device_configurations()
        device_config = gr.Dropdown(configs, value=config_value, interactive=config_open,
                                    label="Device configuration",
                                    info="Sets both devices (docs/hosting.md); without a GPU "
                                         "both models run on the CPU.")
    c.update(preset=preset, target=target, draft=draft, check_btn=check_btn, precision=precision, draft_precision=draft_precision, streams=streams, draft_vocab=draft_vocab, target_device=target_device, draft_device=draft_device, device_config=device_config)


def _traces(c: dict) -> None:
    """Traces and the result cache."""
    with gr.Accordion("Traces and cache", open=False):
        use_cache = gr.Checkbox(True, label="Reuse cached results for identical settings")
        trace_file = gr.File(label="Download the run shown as a JSON trace", interactive=False,
                             elem_id="trace-download")
        trace_upload = gr.File(label="Load a JSON trace (replays without models)",
                               file_types=[".json"], type="filepath", elem_id="trace-upload")
    c.update(use_cache=use_cache, trace_file=trace_file, trace_upload=trace_upload)


RUN_INPUTS = ("prompt", "target", "draft", "precision", "target_device", "draft_device",
              "draft_precision", "gamma", "kappa", "exit_layer", "branch_budget", "temperature",
              "top_p", "seed", "max_new_tokens", "methods", "use_cache", "auto_tune", "streams",
              "draft_vocab", "proposer", "repeat")  # handlers.RunInputs' fields: the run API's parameters
PAIR_INPUTS = ("target", "draft", "precision", "target_device", "draft_device", "draft_precision")
HIDE_REJECTED_JS = "(show) => { document.body.classList.toggle('msd-hide-rej', !show); return show; }"
# the presenter view: the race and the result for an audience, the rest hidden (style.css);
# "?presenter" in the address opens the page in it
PRESENTER_JS = "(on) => { document.body.classList.toggle('msd-presenter', !!on); return on; }"
PRESENTER_FROM_URL_JS = "() => new URLSearchParams(window.location.search).has('presenter')"
OPEN_INSPECTOR_JS = """() => { const d = document.querySelector('#inspector-fold');
  if (d && !d.querySelector('.open')) { const b = d.querySelector('button'); if (b) b.click(); } }"""


def _header(tiny: bool) -> str:
    banner = ('<p class="msd-banner">Test mode: tiny random models, the text is noise; the '
              'mechanics are real.</p>' if tiny else "")
    return HEADER.format(banner=banner)


def _prompt_row(c: dict) -> None:
    """The prompt, Run / Stop, the number of runs per method, then the settings folds."""
    with gr.Row(equal_height=False, elem_id="prompt-row"):
        with gr.Column(scale=3):
            prompt = gr.Textbox(EXAMPLES[DEFAULT_EXAMPLE], lines=3, max_lines=16, label="Prompt",
                                info="For a multi-turn chat, start lines with “User:” and “Assistant:”.",
                                elem_id="prompt")
        with gr.Column(scale=1, min_width=260):
            example = gr.Dropdown(list(EXAMPLES), value=DEFAULT_EXAMPLE, label="Example prompt")
            with gr.Row():
                run_btn = gr.Button("Run", variant="primary", elem_id="run-btn")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn", interactive=False)
            repeat = gr.Radio([("1", 1), ("3, interleaved", 3), ("5, interleaved", 5)], value=INPUTS.repeat,
                              label="Runs per method", elem_id="repeat",
                              info="3 or 5: median and range on the cards, and the verdict says when the "
                              "ranges cannot tell two methods apart; 5 narrows them and takes longer.")
            presenter = gr.Checkbox(False, label="Presenter view: the race and the result, the details hidden; its Run times each method once",
                                    elem_id="presenter")
    # an audience sees the race after one run of each method, not three: the presenter view
    # runs each once (the runs' control is hidden there); leaving it brings back the default
    presenter.change(None, presenter, presenter, js=PRESENTER_JS).then(
        lambda on: 1 if on else INPUTS.repeat, presenter, repeat, api_visibility="private", queue=False)
    c.update(prompt=prompt, example=example, run_btn=run_btn, stop_btn=stop_btn, repeat=repeat,
             presenter=presenter)
    with gr.Row(equal_height=False, elem_id="settings-row"):
        for section in (_speculation, _sampling, _pair, _traces):
            with gr.Column(min_width=240):
                section(c)


def _results(c: dict) -> None:
    """The results of a run: shown once a run starts (nothing empty before)."""
    with gr.Column(visible=False, elem_id="results") as results:
        c["live"] = gr.HTML("", html_template=BOARD_TEMPLATE, js_on_load=BOARD_JS,
                            apply_default_css=False, elem_id="board")
        # the verdict right under the race: what the runs measured, then the panes they wrote
        c["verdict"] = gr.HTML("", elem_id="verdict")
        # the panes' colours and the two methods' orders beside the panes they explain, under the
        # race and the verdict (on screen right after Run: the race)
        with gr.Row(elem_id="legend-row"):
            gr.HTML(render_legend(), elem_id="legend")
            gr.HTML(race_key(), elem_id="race-key")
            show_rejected = gr.Checkbox(True, label="show rejected drafts (struck through)",
                                        elem_id="show-rejected", scale=0, min_width=230)
        with gr.Row(equal_height=False, elem_id="panes"):
            c["panes"] = [gr.HTML(render_pane(m, None, "waiting", note="Press Run."),
                                  elem_id=f"pane-{m}", min_width=300, visible=m in default_methods() or m not in VARIANTS)
                          for m in method_names()]
        gr.HTML("", html_template=TIMELINE_TEMPLATE, js_on_load=None, apply_default_css=False,
                elem_id="board-timeline")
        c["zoom"] = gr.HTML("", elem_id="zoom")
        c["cards"] = gr.HTML("", elem_id="cards")
        _folds(c)
    show_rejected.change(None, show_rejected, show_rejected, js=HIDE_REJECTED_JS)
    c["results"] = results


def _folds(c: dict) -> None:
    """Timeline, inspector, What-if, statistics: one click each."""
    with gr.Accordion("Timeline: every measured span, per model, on one time axis", open=False,
                      elem_id="timeline-fold"):
        c["timeline"] = gr.Plot(None, show_label=False, elem_id="timeline")  # drawn after a run: nothing to render while one is timed
    with gr.Accordion("Step inspector: what happened inside one step", open=False,
                      elem_id="inspector-fold"):
        with gr.Row():
            drafting = [(label(m), m) for m in method_names() if m != baseline()]
            own = [m for _, m in drafting if m not in VARIANTS] or [m for _, m in drafting]
            # before a run: Mirror-SD, not a variant (after one, frames._inspect_target picks)
            c["which"] = gr.Radio(drafting, value=own[-1] if own else None, label="run", scale=1)
            c["step"] = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False,
                                  elem_id="step-slider", scale=4)
        c["inspector"] = gr.HTML(render_inspector(None, 0), elem_id="inspector", js_on_load=PICK_JS)
    with gr.Accordion("What if (projection): the same steps on other hardware", open=False,
                      elem_id="whatif-fold"):
        c["whatif"] = whatif.build_panel()
    with gr.Accordion("Statistics: every figure, the measured costs, the settings", open=False,
                      elem_id="statistics-fold"):
        c["statistics"] = gr.HTML("", elem_id="statistics")


def _about(c: dict) -> None:
    """How it works (the run's own figures after a run) and the glossary."""
    # open before the first run, where the page has room for it; Run folds it (_wire_run)
    with gr.Accordion("How it works", open=True, elem_id="how-fold") as c["how_fold"]:
        c["how"] = gr.HTML(render_how({}, {}), elem_id="how-it-works", js_on_load=CALC_JS)
        with gr.Accordion("In the paper's notation", open=False):
            gr.Markdown(HOW_IN_NOTATION)
    with gr.Accordion("Glossary: every term and symbol", open=False, elem_id="glossary"):
        gr.HTML(_glossary())


def _glossary() -> str:
    items = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in GLOSSARY.items())
    return f'<dl class="msd-glossary">{items}</dl>'


def build_demo(tiny: bool = False) -> gr.Blocks:
    """The app; `tiny`: test mode (every run gets the tiny random pair)."""
    app = AppState.tiny() if tiny else AppState()
    handlers, box = Handlers(app), PairBox(app)
    c: dict = {}
    with gr.Blocks(title="Mirror-SD visualizer") as demo:
        c["state"] = gr.State(None)
        gr.HTML(_header(tiny))
        _prompt_row(c)
        c["status"] = gr.HTML(render_status(handlers.ready_message()), elem_id="status")
        c["pair_check"] = gr.HTML(render_pair_check(None), elem_id="pair-check")
        c["preparing"] = gr.Timer(1.0, active=not tiny)
        c["check_poll"] = gr.Timer(1.0, active=False)  # a run's pair check, once loaded
        _results(c)
        _about(c)
        with gr.Accordion("Pair report: is this draft any good for this target?", open=False,
                          elem_id="pair-report-fold"):
            build_pair_report_tab(app.pairs)
        _wire_run(c, handlers, box)
        _wire_pair(c, handlers, box, demo)
        _wire_inspect(c, handlers)
        demo.load(None, None, c["presenter"], js=PRESENTER_FROM_URL_JS)
    demo.msd_handlers = handlers  # launch() starts the background preparation through it
    demo.msd_components = c  # tests inspect the built page
    return demo


def _outputs(c: dict) -> list:
    """status, one pane per registered method, then handlers' RESULT_OUTPUTS (same order)."""
    named = dict(c, trace=c["trace_file"])
    return [c["status"], *c["panes"], *(named[k] for k in RESULT_OUTPUTS)]


def _wire_run(c: dict, handlers: Handlers, box: PairBox) -> None:
    free = dict(concurrency_limit=None, queue=False)  # light: never waits behind a run
    pair_inputs = [c[k] for k in PAIR_INPUTS]
    layer_range = dict(fn=handlers.exit_layer_range, inputs=[c["target"], c["exit_layer"]],
                       outputs=c["exit_layer"], api_visibility="private", show_progress="hidden", **free)
    c["run_btn"].click(handlers.arm, None, [c["stop_btn"], c["preparing"], c["check_poll"], c["results"]],
                       api_visibility="private", **free).then(
        zerogpu.gpu_run(handlers.run), None, _outputs(c), inputs_kwargs={k: c[k] for k in RUN_INPUTS},
        api_name="run", concurrency_limit=1, concurrency_id="decode", show_progress="hidden").then(
        lambda: gr.update(interactive=False), None, c["stop_btn"], api_visibility="private", **free).then(
        box.after_run, [c["state"]] + pair_inputs, [c["pair_check"], c["check_poll"]],
        api_visibility="private", **free).then(**layer_range)  # the loaded pair's real layer count
    c["run_btn"].click(lambda: gr.Accordion(open=False), None, c["how_fold"], api_visibility="private", **free)
    c["stop_btn"].click(handlers.stop, None, c["status"], api_name="stop", **free)
    c["trace_upload"].upload(lambda path: (gr.update(visible=True), *handlers.load_trace(path)),
                             c["trace_upload"], [c["results"], *_outputs(c), c["prompt"]],
                             api_name="load_trace", concurrency_limit=None)
    c["whatif"].wire(c["state"])
    c["state"].change(_how_from_state, c["state"], c["how"], api_visibility="private", **free)
    c["example"].change(pick_example, c["example"], c["prompt"], api_visibility="private", **free)
    c["demo_layer_range"] = layer_range


def _how_from_state(state):
    state = state or {}
    return render_how(state.get("records") or {}, state.get("meta") or {}, state.get("replay_b"))


def _wire_pair(c: dict, handlers: Handlers, box: PairBox, demo: gr.Blocks) -> None:
    free = dict(concurrency_limit=None, queue=False)
    pair_inputs = [c[k] for k in PAIR_INPUTS]
    loads = dict(api_visibility="private", concurrency_limit=1, concurrency_id="decode",
                 show_progress="minimal")  # the status streams the load's progress
    c["preset"].change(_preset, c["preset"], [c["target"], c["draft"]], api_visibility="private",
                       **free).then(box_preset_check(box), [c["preset"]] + pair_inputs,
                                    [c["status"], c["pair_check"], c["preparing"]], **loads)
    c["check_btn"].click(lambda: gr.Timer(active=False), None, c["preparing"],
                         api_visibility="private", **free).then(
        box.check, pair_inputs, [c["status"], c["pair_check"]], **loads)
    demo.load(box.show, pair_inputs, c["pair_check"], api_visibility="private", **free)
    for control in pair_inputs:  # a user's edit (.input); a preset or a device configuration
        # sets fields and then shows the box itself, so no late answer for a half-set pair
        # overwrites its check
        control.input(box.show, pair_inputs, c["pair_check"], api_visibility="private",
                      show_progress="hidden", **free)
    c["check_poll"].tick(box.poll, pair_inputs, [c["pair_check"], c["check_poll"]],
                         api_visibility="private", show_progress="hidden", **free)
    demo.load(**c["demo_layer_range"])
    c["target"].change(**c["demo_layer_range"])
    c["device_config"].change(zerogpu.configuration_devices, c["device_config"],
                              [c["target_device"], c["draft_device"]], api_visibility="private",
                              **free).then(box.show, pair_inputs, c["pair_check"],
                                           api_visibility="private", show_progress="hidden", **free)
    for trigger in (demo.load, c["preparing"].tick):
        trigger(handlers.preparing_status, None, [c["status"], c["preparing"], c["pair_check"]],
                api_visibility="private", show_progress="hidden", **free)


def _wire_inspect(c: dict, handlers: Handlers) -> None:
    fast = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")
    c["step"].change(handlers.inspect, [c["state"], c["which"], c["step"]], c["inspector"],
                     trigger_mode="always_last", **fast)
    # a step cell or a token in a pane (steps.PICK_JS): the run and step it belongs to
    c["inspector"].select(pick, c["state"], [c["which"], c["step"], c["inspector"]], **fast)
    c["which"].input(handlers.inspect_run, [c["state"], c["which"]], [c["step"], c["inspector"]], **fast)


def box_preset_check(box: PairBox):
    def preset_check(name, target, draft, *rest):
        """The chosen preset's pair loaded and checked. Its names come from the preset itself,
        not from the two fields `_preset` has just set: an event chained after them can still
        read their old values, and would then check the pair the page just left."""
        preset_target, preset_draft = PAIR_PRESETS.get(name, (None, None))
        yield from box.preset_check(preset_target or target, preset_draft or draft, *rest)
    return preset_check


def _preset(name):
    target, draft = PAIR_PRESETS.get(name, (None, None))
    if target is None:
        return gr.skip(), gr.skip()
    return target, draft


def launch(demo: gr.Blocks, **kwargs):
    """Start preparing the default pair in the background (not in test mode), then queue (one
    run at a time, bounded, positions shown) and launch with the app's CSS."""
    if zerogpu.prepare_in_background():
        demo.msd_handlers.start_preparing()
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    kwargs.setdefault("css", CSS)
    kwargs.setdefault("theme", theme())
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME") or None)
    kwargs.setdefault("server_port", int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    return demo.launch(**kwargs)
