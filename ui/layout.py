"""The Gradio Blocks: controls on the left, the runs and their anatomy on the right.

`build_demo()` builds the app (no model is loaded until the first Run); `launch(demo)` starts
it with the queue (one run at a time, a bounded queue whose position the page shows).
"""
from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from . import handlers, pairbox, whatif, zerogpu
from .inspector import follow_replay, pick, render_inspector
from .paircheck import render_pair_check
from .render import render_legend, render_pane, render_status, render_summary
from .runs import METHOD_ORDER, SHORT_NAMES
from .steps import PICK_JS
from .texts import (DRAFT_PRECISION_INFO, DRAFT_PRECISIONS, PRECISION_INFO, TARGET_PRECISIONS)
from .texts import DEFAULT_EXAMPLE, EXAMPLES, HOW_IN_NOTATION, HOW_IT_WORKS, SEQUENTIAL_NOTE
from .timeline import build_timeline

CSS = "\n".join(Path(__file__).with_name(name).read_text(encoding="utf-8")
                for name in ("style.css", "panes.css"))  # panes.css: panes, legend, the why
QUEUE_SIZE = int(os.environ.get("MIRROR_SD_QUEUE_SIZE", "16"))

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
METHOD_CHOICES = [(SHORT_NAMES[m], m) for m in METHOD_ORDER]
DEFAULT_TOKENS = 48  # the default run of all three at int8 stays within about 30 s here

HEADER = """
<div class="msd-header">
  <h1>Mirror Speculative Decoding, live</h1>
  <p>A real Mirror-SD engine next to a measured autoregressive baseline: watch the draft model
  write ahead <i>while</i> the target verifies, token by token, on this machine.</p>
  {banner}
</div>
"""


def _header() -> str:
    banner = ('<p class="msd-banner">Test mode: tiny random models, the text is noise; the '
              'mechanics are real.</p>' if handlers.tiny_models() else "")
    return HEADER.format(banner=banner)


def build_demo(tiny: bool = False) -> gr.Blocks:
    """The app; `tiny`: test mode for the whole process (every run gets the tiny random pair)."""
    if tiny:
        handlers.use_tiny_models()
    with gr.Blocks(title="Mirror-SD visualizer") as demo:
        state = gr.State(None)
        gr.HTML(_header())
        with gr.Row(equal_height=False):
            with gr.Column(scale=4, min_width=340, elem_id="controls"):
                example = gr.Dropdown(list(EXAMPLES), value=DEFAULT_EXAMPLE, label="Example prompt",
                                      info="One per task: code, math, summarization, translation, QA, multi-turn chat.")
                prompt = gr.Textbox(EXAMPLES[DEFAULT_EXAMPLE], lines=5, max_lines=16, label="Prompt",
                                    info="For a multi-turn chat, start lines with “User:” and “Assistant:”.",
                                    elem_id="prompt")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", elem_id="run-btn")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn", interactive=False)
                with gr.Accordion("Methods and speculation", open=False):
                    methods = gr.CheckboxGroup(METHOD_CHOICES, value=[v for _, v in METHOD_CHOICES],
                                               label="Methods", elem_id="methods",
                                               info="Each runs alone, one after another, on the same weights.")
                    gamma = gr.Slider(1, 12, value=4, step=1, label="γ (gamma): drafted tokens per window",
                                      info="Longer windows win more per step when the draft is right, cost more when it is wrong.")
                    kappa = gr.Slider(1, 32, value=8, step=1, label="κ (kappa): early-exit candidates per position",
                                      info="How many of the target's half-way guesses are sent to the draft.")
                    # the range follows the target (handlers.exit_layer_range, on page load, on
                    # a new target and after each run); the run checks it against the model
                    exit_layer = gr.Slider(0, handlers.EXIT_LAYER_CEILING, value=0, step=1,
                                           label=handlers.EXIT_LAYER_LABEL,
                                           info=handlers.EXIT_LAYER_INFO)
                    branch_budget = gr.Slider(1, 8, value=2, step=1, label="Branch budget",
                                              info="Branch-complete rollouts the draft writes in parallel per step (batched).")
                    auto_tune = gr.Checkbox(False, label="Choose γ and branch budget automatically",
                                            info="A short probe (AR, SD, Mirror-SD, 16 tokens each) calibrates the latency model; the setting with the best projected speedup is used (a projection, shown in the summary).",
                                            elem_id="auto-tune")
                with gr.Accordion("Sampling and length", open=False):
                    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)",
                                            info="Greedy runs must reproduce the baseline token for token; the summary checks it.")
                    top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="Top-p")
                    seed = gr.Number(0, precision=0, label="Seed", minimum=0)
                    max_new_tokens = gr.Slider(4, 512, value=DEFAULT_TOKENS, step=4, label="Max new tokens", elem_id="max-new-tokens",
                                               info="On 2 CPU cores the default pair writes about 9 tokens/s alone at int8, 3 at fp32.")
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
                    precision = gr.Dropdown(TARGET_PRECISIONS, value=zerogpu.default_precision(handlers.DEFAULT_PRECISION), label="Precision",
                                            info=PRECISION_INFO)
                    draft_precision = gr.Dropdown(["same"] + DRAFT_PRECISIONS, value="same",
                                                  label="Draft precision", info=DRAFT_PRECISION_INFO)
                    streams = gr.Dropdown(["off", "auto"], value="off", label="Draft streams",
                                          info="auto: the draft's trained stream heads propose several "
                                               "tokens per draft forward (SD and Mirror-SD; lossless).")
                    draft_vocab = gr.Dropdown(["full", "auto"], value="full", label="Draft vocabulary",
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
                with gr.Accordion("Traces and cache", open=False):
                    use_cache = gr.Checkbox(True, label="Reuse cached results for identical settings")
                    trace_file = gr.File(label="Download the last run as a JSON trace", interactive=False,
                                         elem_id="trace-download")
                    trace_upload = gr.File(label="Load a JSON trace (replays without models)",
                                           file_types=[".json"], type="filepath", elem_id="trace-upload")
                with gr.Group(elem_id="how-it-works"):
                    gr.Markdown(HOW_IT_WORKS)
                    with gr.Accordion("In the paper's notation", open=False):
                        gr.Markdown(HOW_IN_NOTATION)
            with gr.Column(scale=8, elem_id="results"):
                status = gr.HTML(render_status(handlers.ready_message()), elem_id="status")
                pair_check = gr.HTML(render_pair_check(None), elem_id="pair-check")
                preparing = gr.Timer(1.0, active=not handlers.tiny_models())
                check_poll = gr.Timer(1.0, active=False)  # a run's pair check, once loaded
                gr.HTML(render_legend(), elem_id="legend")
                with gr.Row(equal_height=False):
                    ar_pane = gr.HTML(render_pane("ar", None, "waiting", note="Press Run."),
                                      elem_id="pane-ar")
                    sd_pane = gr.HTML(render_pane("sd", None, "waiting", note="Press Run."),
                                      elem_id="pane-sd")
                    mirror_pane = gr.HTML(render_pane("mirror", None, "waiting", note="Press Run."),
                                          elem_id="pane-mirror")
                gr.Markdown(SEQUENTIAL_NOTE, elem_classes=["msd-small"])
                with gr.Row():
                    race_btn = gr.Button("Race replay: the runs together at their measured pace",
                                         elem_id="race-btn", scale=3)
                    speed = gr.Dropdown(["1×", "2×", "4×", "8×"], value="1×", label="replay speed",
                                        scale=1, min_width=120)
                summary = gr.HTML(render_summary({}), elem_id="summary")
                gr.Markdown("### Latency timeline\nEvery measured span, per lane; hover for "
                            "details. Where a run's draft bars sit under its target bars, the "
                            "draft's time is hidden.")
                timeline = gr.Plot(build_timeline({}), show_label=False, elem_id="timeline")
                gr.Markdown("### Step inspector")
                with gr.Row():
                    which = gr.Radio([("Mirror-SD", "mirror"), ("SD", "sd")], value="mirror",
                                     label="run", scale=1)
                    step = gr.Slider(0, 1, value=0, step=1, label="step", interactive=False,
                                     elem_id="step-slider", scale=4)
                inspector = gr.HTML(render_inspector(None, 0), elem_id="inspector", js_on_load=PICK_JS)
                whatif_panel = whatif.build_panel()  # after a finished run or a loaded trace

        outputs = [status, ar_pane, mirror_pane, sd_pane, summary, timeline, step, inspector,
                   trace_file, state]
        inputs = [prompt, target, draft, precision, target_device, draft_device, gamma, kappa,
                  exit_layer, branch_budget, temperature, top_p, seed, max_new_tokens, methods,
                  use_cache, draft_precision, auto_tune, streams, draft_vocab]
        free = dict(concurrency_limit=None, queue=False)  # light: never waits behind a run
        example.change(handlers.pick_example, example, prompt, api_visibility="private", **free)
        pair_inputs = [target, draft, precision, target_device, draft_device, draft_precision]
        loads = dict(api_visibility="private", concurrency_limit=1, concurrency_id="decode",
                     show_progress="minimal")  # the status streams the load's progress
        preset.change(_preset, preset, [target, draft], api_visibility="private", **free).then(
            _preset_check, [preset] + pair_inputs, [status, pair_check, preparing], **loads)
        check_btn.click(handlers.arm_check, None, preparing, api_visibility="private", **free).then(
            pairbox.check, pair_inputs, [status, pair_check], **loads)
        demo.load(pairbox.show, pair_inputs, pair_check, api_visibility="private", **free)
        for control in pair_inputs:  # the box names the pair the controls name: a user's edit
            # (.input); a preset or a device configuration sets fields and then shows the box
            # itself, so that no late answer for a half-set pair overwrites its check
            control.input(pairbox.show, pair_inputs, pair_check, api_visibility="private",
                          show_progress="hidden", **free)
        check_poll.tick(pairbox.poll, pair_inputs, [pair_check, check_poll], api_visibility="private",
                        show_progress="hidden", **free)
        layer_range = dict(fn=handlers.exit_layer_range, inputs=[target, exit_layer],
                           outputs=exit_layer, api_visibility="private", show_progress="hidden",
                           **free)
        demo.load(**layer_range)
        target.change(**layer_range)
        device_config.change(zerogpu.configuration_devices, device_config, [target_device, draft_device],
                             api_visibility="private", **free).then(
            pairbox.show, pair_inputs, pair_check, api_visibility="private", show_progress="hidden",
            **free)
        demo.load(handlers.preparing_status, None, [status, preparing, pair_check],
                  api_visibility="private", show_progress="hidden", **free)
        preparing.tick(handlers.preparing_status, None, [status, preparing, pair_check],
                       api_visibility="private", show_progress="hidden", **free)
        run_btn.click(handlers.arm, None, [stop_btn, preparing, check_poll], api_visibility="private",
                      **free).then(
            zerogpu.gpu_run(handlers.run), inputs, outputs, api_name="run", concurrency_limit=1,
            concurrency_id="decode", show_progress="full", show_progress_on=[status]).then(
            handlers.idle, None, stop_btn, api_visibility="private", **free).then(
            pairbox.after_run, [state] + pair_inputs, [pair_check, check_poll],
            api_visibility="private", **free).then(
            **layer_range)  # the pair is loaded now: its real layer count
        race_event = race_btn.click(handlers.race, [state, speed],
                                    [status, ar_pane, mirror_pane, sd_pane], api_name="race",
                                    concurrency_limit=8, concurrency_id="replay",
                                    show_progress="hidden")
        follow_event = race_btn.click(follow_replay, [state, speed, which], inspector,  # narration follows
                                      api_visibility="private", concurrency_limit=8,
                                      concurrency_id="replay", show_progress="hidden")
        stop_btn.click(handlers.stop, None, status, api_name="stop",
                       cancels=[race_event, follow_event], **free)
        step.change(handlers.inspect, [state, which, step], inspector, api_visibility="private",
                    concurrency_limit=None, show_progress="hidden", trigger_mode="always_last")
        # a step cell or a token in a pane (steps.PICK_JS): the run and step it belongs to
        inspector.select(pick, state, [which, step, inspector], api_visibility="private",
                         concurrency_limit=None, show_progress="hidden")
        which.input(handlers.inspect_run, [state, which], [step, inspector],
                     api_visibility="private", concurrency_limit=None, show_progress="hidden")
        trace_upload.upload(handlers.load_trace, trace_upload, outputs + [prompt],
                            api_name="load_trace", concurrency_limit=None)
        whatif_panel.wire(state)
    return demo


def _preset(name):
    target, draft = PAIR_PRESETS.get(name, (None, None))
    if target is None:
        return gr.skip(), gr.skip()
    return target, draft


def _preset_check(name, target, draft, *rest):
    """The chosen preset's pair loaded and checked (pairbox.preset_check). Its names come from
    the preset itself, not from the two fields `_preset` has just set: an event chained after
    them can still read their old values, and would then check the pair the page just left."""
    preset_target, preset_draft = PAIR_PRESETS.get(name, (None, None))
    yield from pairbox.preset_check(preset_target or target, preset_draft or draft, *rest)


def launch(demo: gr.Blocks, **kwargs):
    """Start preparing the default pair in the background (not in test mode), then queue (one
    run at a time, bounded, positions shown) and launch with the app's CSS."""
    if zerogpu.prepare_in_background():
        handlers.start_preparing()
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    kwargs.setdefault("css", CSS)
    kwargs.setdefault("server_name", os.environ.get("GRADIO_SERVER_NAME") or None)
    kwargs.setdefault("server_port", int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    return demo.launch(**kwargs)
