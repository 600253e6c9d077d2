"""The app on a ZeroGPU Space and everywhere else, from one code path.

On a ZeroGPU Space (the platform sets SPACES_ZERO_GPU=true and the `spaces` package is
installed) `gpu(fn)` returns `spaces.GPU(fn, duration=...)`: each call of the run handler gets
a GPU for the call, in a worker process that the arguments and every yielded frame cross
pickled. Anywhere else (a local run, CPU Basic, the Dockerfile, the tests) `gpu(fn)` returns
`fn` itself: no wrapper, nothing changed.

`run_duration` is the `duration=` callable: it takes the handler's own arguments and returns
the seconds to ask for, projected from the latency model (`mirror_sd.latency.latency_model`) for
the requested tokens and methods, plus an allowance for loading and the warm-up.

What crosses the process boundary is plain data: the frames the handler yields are strings,
numbers, dicts and lists (and Gradio's update dicts), and the engine's events have a plain
form (`plain_events` / `events_from_plain`, the same dicts as a saved trace). The models are
placed inside the call: `placement.resolve_placement("auto", "auto")` sees the call's GPU.

On ZeroGPU the main process has no GPU: `spaces` makes torch report one, but anything that
initialises CUDA there (`torch.cuda.mem_get_info`, a model moved to it) breaks the forked
workers, and `spaces` must be imported before that can happen. So this module imports it when
it is itself imported (ui.layout imports it before building anything), the app's device menu
takes the worker's GPU from the platform's settings instead of asking torch, and no pair is
prepared in the main process (`prepare_in_background`).
"""
from __future__ import annotations

import importlib
import inspect
import os
from typing import Callable

SPACES_ENV = "SPACES_ZERO_GPU"  # set to "true" by the platform on a ZeroGPU Space
GPU_PRECISION = "bf16"  # the reduced precisions of mirror_sd.cpu run on a CPU only
# Seconds asked for on top of the decoding projection: loading the pair onto the GPU and the
# untimed warm-up of each method. An allowance, not a measurement: no ZeroGPU run exists yet.
LOAD_ALLOWANCE_S = 30.0
# The platform checks the requested duration against a visitor's remaining quota before the
# call starts (only the time used is counted): a floor for the worker's start and first
# forward, and a ceiling so a long request does not turn visitors with some quota left away.
MIN_DURATION_S = 15
MAX_DURATION_S = 300
DEFAULT_METHODS = ("ar", "sd", "mirror")  # the default run's, each variant as its method


def on_zerogpu() -> bool:
    """True on a ZeroGPU Space (the platform's environment variable says so)."""
    return os.environ.get(SPACES_ENV, "").strip().lower() in ("1", "t", "true")


def spaces_module():
    """The `spaces` package when it is installed, else None."""
    try:
        return importlib.import_module("spaces")
    except ImportError:
        return None


if on_zerogpu():
    spaces_module()  # before anything can initialise CUDA (see the module's docstring)


def prepare_in_background() -> bool:
    """Whether launch() may load the default pair ahead of the first run: not on ZeroGPU,
    where a run's pair loads inside the call, on its GPU."""
    return not on_zerogpu()


def gpu(fn: Callable, duration: Callable | int | None = None) -> Callable:
    """`spaces.GPU(fn, duration=duration)` on a ZeroGPU Space, else `fn` unchanged."""
    spaces = spaces_module() if on_zerogpu() else None
    if spaces is None:
        return fn
    return spaces.GPU(fn, duration=duration)


def default_precision(cpu_default: str) -> str:
    """The precision the app starts with: the CPU default, or bf16 where runs get a GPU."""
    return GPU_PRECISION if on_zerogpu() else cpu_default


def projected_seconds(max_new_tokens: int, methods=DEFAULT_METHODS, calibration=None) -> float:
    """Projection: seconds to decode `max_new_tokens` with each of `methods` one after
    another, from the latency model's calibration (the built-in one by default)."""
    from mirror_sd.latency.latency_model import default_calibration, predict
    cal = calibration or default_calibration()
    methods = tuple(methods) or DEFAULT_METHODS
    rates = predict(cal, methods)
    total = 0.0
    for m in methods:
        tps = rates[m]["tokens_per_s"]
        if not tps:  # a method the calibration cannot price: at AR's rate
            tps = rates.get("ar", {}).get("tokens_per_s") or predict(cal, ("ar",))["ar"]["tokens_per_s"]
        total += max(0, int(max_new_tokens)) / tps
    return total


def duration_s(max_new_tokens: int, methods=DEFAULT_METHODS, calibration=None) -> int:
    """Seconds to ask ZeroGPU for: the projection plus LOAD_ALLOWANCE_S, within the bounds."""
    est = projected_seconds(max_new_tokens, methods, calibration) + LOAD_ALLOWANCE_S
    return int(min(MAX_DURATION_S, max(MIN_DURATION_S, round(est))))


def run_duration(fn: Callable) -> Callable:
    """The `duration=` callable for the run handler `fn`: it binds the same arguments as `fn`
    (by name, or a `**controls` catch-all) and reads `max_new_tokens`, `methods` and `repeat`."""
    sig = inspect.signature(fn)

    def duration(*args, **kwargs) -> int:
        bound = sig.bind_partial(*args, **kwargs).arguments
        for p in sig.parameters.values():  # a **controls catch-all: the controls by name
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                bound = {**bound, **bound.pop(p.name, {})}
        tokens = bound.get("max_new_tokens") or 0
        chosen = dict.fromkeys(str(m).strip().lower() for m in (bound.get("methods") or []))
        # each run priced as its method: a variant ("mirror-gated") as the method it changes
        names = {"ar": "ar", "sd": "sd", "mirror": "mirror", "mirror-sd": "mirror",
                 "mirror-gated": "mirror", "mirror-noexit": "mirror"}
        methods = tuple(names[m] for m in chosen if m in names) or DEFAULT_METHODS
        return duration_s(int(tokens) * max(1, int(bound.get("repeat") or 1)), methods)

    return duration


def gpu_run(fn: Callable) -> Callable:
    """The run handler as the app binds it: `gpu(fn, duration=run_duration(fn))`."""
    return gpu(fn, duration=run_duration(fn))


def plain_events(events) -> list[dict]:
    """Events as plain dicts (picklable and JSON-ready): what may cross a process boundary."""
    return [e.to_dict() for e in events]


def events_from_plain(dicts) -> list:
    """The events back from `plain_events`."""
    from mirror_sd.engine.events import event_from_dict
    return [event_from_dict(d) for d in dicts]


def device_configurations() -> tuple[list[str], str, bool]:
    """The app's "Device configuration" menu: (choices, value, interactive). With a GPU every
    configuration placement.py allows here, starting at auto; without one the CPU
    configuration alone, shown but fixed."""
    from mirror_sd.placement import available_configurations
    inv = _inventory()
    if not inv.gpus:
        return ["cpu"], "cpu", False
    return available_configurations(inv), "auto", True


def configuration_devices(name: str) -> tuple[str, str]:
    """(target device, draft device) for the app's two device menus; placement.py checks the
    configuration (a MirrorSDError says why it cannot run here)."""
    from mirror_sd.placement import configuration_devices as devices
    return devices(name, _inventory())


ZEROGPU_MEMORY = 70 * 1024 ** 3  # a ZeroGPU workload's GPU memory, where the platform does not say


def _inventory():
    """The devices a run will have: torch's here; on ZeroGPU the worker's one GPU, from the
    platform's settings (asking torch in the main process would initialise CUDA)."""
    from mirror_sd.placement import GPU, DeviceInventory, device_inventory
    if not on_zerogpu():
        return device_inventory()
    import psutil
    config = getattr(getattr(spaces_module(), "config", None), "Config", None)
    total = int(getattr(config, "zerogpu_cuda_total_memory", 0) or ZEROGPU_MEMORY)
    return DeviceInventory(int(psutil.virtual_memory().available), (GPU("cuda:0", total, total),))
