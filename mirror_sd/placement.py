"""Where the two models live and how many CPU threads each lane gets.

This is the only module that decides devices and threads: `models.loading.load_pair()` asks
`resolve_placement()` for device maps and calls `configure_cpu_threads()` for the two lanes;
a method runs inside `method_threads()` (`lane_alone()` where one lane works alone); code that
needs a set thread count for a stretch (row-exact attention's one-thread SDPA calls) uses
`torch_threads()`; a process that runs no pair (a trainer's `--threads`, tiny test models)
calls `set_process_threads()`. Timing code calls `lane_sync()` so GPU
work is finished before a clock is read.

Device configurations (`CONFIGURATIONS`: the CLI's `--placement`, the app's "Device
configuration", `python -m mirror_sd.gpu_check`) name the layouts a GPU host allows: both
models on one GPU (the draft lane on its own CUDA stream, `lane_stream`), the target on the GPU
with the draft on the CPU, or the other way round. `configuration_devices()` turns a name into
the (target, draft) devices that `resolve_placement()` takes, after checking it against a
`DeviceInventory` (what torch sees, or one a test builds) with a message saying why not.
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from mirror_sd.errors import MirrorSDError

GIB = 1024 ** 3
HEADROOM = 1.15  # weights plus KV cache, activations and allocator slack (models/memory.py too)


@dataclass
class Placement:
    target_device_map: str | dict  # for accelerate: "cpu", "cuda:0", "mps", "auto" or a dict
    draft_device: str  # the draft always sits whole on one device
    target_threads: int = 1  # torch CPU threads per lane (meaningful on CPU only)
    draft_threads: int = 1
    max_memory: dict | None = None  # accelerate's max_memory for an "auto" target split

    @property
    def target_device(self) -> str:
        """The device of the target's first layers (where its input ids go)."""
        m = self.target_device_map
        if m == "auto":
            keys = [k for k in (self.max_memory or {0: None}) if k not in ("cpu", "disk")]
            return f"cuda:{keys[0]}" if keys else "cpu"
        if isinstance(m, dict):
            first = next(iter(m.values()), "cpu")
            return f"cuda:{first}" if isinstance(first, int) else str(first)
        return str(m)

    @property
    def both_on_cpu(self) -> bool:
        return self.target_device == "cpu" and self.draft_device == "cpu"


@dataclass(frozen=True)
class GPU:
    name: str  # "cuda:0"
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class DeviceInventory:
    """What this process can place models on: the CPU's available RAM and each CUDA GPU."""
    ram_free_bytes: int
    gpus: tuple[GPU, ...] = ()
    mps: bool = False

    def free_bytes(self, device: str) -> int | None:
        """Free memory of the pool `device` draws on (the RAM for cpu and mps); None: unknown."""
        if device in ("cpu", "mps"):
            return self.ram_free_bytes
        return next((g.free_bytes for g in self.gpus if g.name == device), None)


def device_inventory() -> DeviceInventory:
    """The devices torch sees now, with free memory (RAM: psutil; GPUs: cudaMemGetInfo)."""
    import psutil
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = []
    for i in range(n):
        free, total = torch.cuda.mem_get_info(i)
        gpus.append(GPU(f"cuda:{i}", int(free), int(total)))
    return DeviceInventory(int(psutil.virtual_memory().available), tuple(gpus), _mps_available())


# name -> (target device, draft device, what it is); "gpu" is the first CUDA GPU
CONFIGURATIONS = {
    "auto": ("auto", "auto", "as `--target-device auto --draft-device auto`: both on the GPU "
                             "when there is one, else both on the CPU"),
    "cpu": ("cpu", "cpu", "both models on the CPU, one core per lane"),
    "gpu-streams": ("gpu", "gpu", "both models on one GPU, the draft lane on its own CUDA stream"),
    "target-gpu-draft-cpu": ("gpu", "cpu", "the target on the GPU, the draft on the CPU"),
    "draft-gpu-target-cpu": ("cpu", "gpu", "the draft on the GPU, the target on the CPU"),
}
GPU_CONFIGURATIONS = ("gpu-streams", "target-gpu-draft-cpu", "draft-gpu-target-cpu")


def configuration_devices(name: str, inventory: DeviceInventory | None = None,
                          needs: dict[str, float] | None = None) -> tuple[str, str]:
    """(target device, draft device) of the configuration `name`, checked before any model
    loads: the GPU it asks for is there and, given `needs` ({"target": bytes, "draft":
    bytes}, weights only), each device has the memory for what it holds (with the loader's
    headroom). Raises MirrorSDError saying why not."""
    if name not in CONFIGURATIONS:
        raise MirrorSDError(f"Unknown device configuration {name!r}: use one of "
                            f"{', '.join(CONFIGURATIONS)}.")
    tdev, ddev, _ = CONFIGURATIONS[name]
    if name == "auto":
        return tdev, ddev
    inv = inventory or device_inventory()
    if "gpu" in (tdev, ddev):
        if not inv.gpus:
            raise MirrorSDError(f"The device configuration {name!r} needs a CUDA GPU, but torch "
                                f"sees none on this machine: use 'cpu' (or 'auto').")
        gpu = inv.gpus[0].name
        tdev, ddev = (gpu if d == "gpu" else d for d in (tdev, ddev))
    if needs:
        _check_fit(name, {"target": tdev, "draft": ddev}, needs, inv)
    return tdev, ddev


def _check_fit(name: str, devices: dict[str, str], needs: dict[str, float],
               inv: DeviceInventory) -> None:
    per_pool: dict[str, float] = {}
    for role, dev in devices.items():
        pool = "cpu" if dev in ("cpu", "mps") else dev
        per_pool[pool] = per_pool.get(pool, 0.0) + float(needs.get(role, 0.0)) * HEADROOM
    for pool, need in per_pool.items():
        free = inv.free_bytes(pool)
        if free is not None and need > free:
            where = "RAM" if pool == "cpu" else f"memory on {pool}"
            raise MirrorSDError(f"The device configuration {name!r} needs about "
                                f"{need / GIB:.1f} GiB of {where} but only {free / GIB:.1f} GiB "
                                f"is free: pick another configuration, a lower precision or "
                                f"smaller models.")


def available_configurations(inventory: DeviceInventory | None = None) -> list[str]:
    """The configurations this machine can run: all of them with a GPU, else auto and cpu."""
    inv = inventory or device_inventory()
    return [n for n in CONFIGURATIONS if inv.gpus or n not in GPU_CONFIGURATIONS]


def cpu_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def _validate(device: str, role: str) -> str:
    """Normalise an explicit device name, or raise MirrorSDError."""
    d = device.strip().lower()
    if d == "cpu":
        return d
    if d == "mps":
        if not _mps_available():
            raise MirrorSDError(f"The {role} device 'mps' was asked for, but this machine has "
                                f"no Apple GPU (MPS) available to torch.")
        return d
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if m:
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(m.group(1) or 0)
        if index >= n:
            raise MirrorSDError(f"The {role} device {device!r} was asked for, but torch sees "
                                f"{n} CUDA GPU(s) on this machine.")
        return f"cuda:{index}"
    raise MirrorSDError(f"Unknown {role} device {device!r}: use 'auto', 'cpu', 'cuda', "
                        f"'cuda:N' or 'mps'.")


def resolve_placement(target_device: str = "auto", draft_device: str = "auto",
                      max_memory: dict | None = None) -> Placement:
    """Pick devices for both models.

    "auto": with 2+ GPUs the target gets all but the last GPU (one GPU: "cuda:0"; several:
    accelerate splits it) and the draft gets the last GPU; with 1 GPU both share cuda:0; with
    MPS both use mps; otherwise both run on the CPU."""
    n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if target_device == "auto":
        if n_gpu > 2:
            tmap = "auto"
            if max_memory is None:  # only the first n-1 GPUs: the last one is the draft's
                max_memory = {i: torch.cuda.mem_get_info(i)[0] for i in range(n_gpu - 1)}
        elif n_gpu >= 1:
            tmap = "cuda:0"
        else:
            tmap = "mps" if _mps_available() else "cpu"
    else:
        tmap = _validate(target_device, "target")
    if draft_device == "auto":
        ddev = f"cuda:{n_gpu - 1}" if n_gpu else ("mps" if _mps_available() else "cpu")
    else:
        ddev = _validate(draft_device, "draft")

    p = Placement(tmap, ddev, max_memory=max_memory)
    cores = cpu_cores()
    if p.both_on_cpu:
        # Two lanes share the cores: one thread each (measured: 1 thread decodes as fast as 2).
        p.target_threads = p.draft_threads = 1
    else:  # a lane alone on the CPU may use every core
        p.target_threads = cores if p.target_device == "cpu" else 1
        p.draft_threads = cores if p.draft_device == "cpu" else 1
    return p


def configure_cpu_threads(placement: Placement) -> None:
    """Set torch's CPU thread counts for running the two lanes side by side."""
    if not (placement.both_on_cpu and cpu_cores() >= 2):
        return
    # The target lane and the draft lane are two Python threads in one process: with one torch
    # thread each they own one core each instead of fighting over both, and a single thread
    # decodes a token as fast as two here (memory-bandwidth bound), so nothing is lost.
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # may only be set once, before any parallel work: keep what is there
        pass


def set_process_threads(n: int) -> None:
    """torch's CPU threads for a process that runs no pair: a trainer's --threads, or tiny
    models whose matmuls are too small to share (threads would only fight over the cores)."""
    torch.set_num_threads(max(1, int(n)))


@contextmanager
def torch_threads(n: int):
    """Within: the calling thread runs torch's CPU work on `n` threads; the count it had
    comes back after (torch's count is per calling thread here)."""
    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextmanager
def method_threads(pair, lanes: int):
    """Torch CPU threads while one method runs. Two lanes at once (Mirror-SD) keep one thread
    per lane; a method that runs one model at a time (AR, SD) gets every core the two lanes
    would have, so each method has the same cores (an int8 model decodes clearly faster on two
    threads than on one: docs/performance.md, the lanes' table)."""
    placement = (getattr(pair, "info", None) or {}).get("placement")
    if lanes != 1 or placement is None or not placement.both_on_cpu or cpu_cores() < 2:
        yield
        return
    with torch_threads(placement.target_threads + placement.draft_threads):
        yield


def lane_alone(pair):
    """Inside a two-lane method (Mirror-SD), a stretch where only one lane works (the target's
    prefill, the draft's first window, the draft's work after the target has delivered its
    verdict and waits): the working thread gets the cores of both lanes, as AR and SD have.
    Torch's thread count is per calling thread here, so the other lane keeps its one thread;
    the count goes back to one when the stretch ends, before the other lane resumes."""
    return method_threads(pair, 1)


def lanes_share_a_device(pair) -> bool:
    """Whether Mirror-SD's two lanes share one device while both work: one CPU's cores (each
    lane has part of them), or one GPU (a CUDA stream each, one Python process launching both
    lanes' kernels: measured on an H200 with transformers' eager forwards, a target and a
    draft forward launched at once from two threads took 206 ms against 38 ms one after the
    other, docs/hosting.md), rather than each running on a device of its own."""
    placement = (getattr(pair, "info", None) or {}).get("placement")
    if placement is None:
        return False
    if placement.both_on_cpu:
        return cpu_cores() >= 2
    return placement.target_device == placement.draft_device


def lane_split(pair) -> str:
    """How Mirror-SD's two lanes share this machine, in words (the Finish stats, the page)."""
    placement = (getattr(pair, "info", None) or {}).get("placement")
    if placement is None:
        return "one thread per lane"
    if not placement.both_on_cpu:
        return (f"target on {placement.target_device}, draft on {placement.draft_device}"
                f"{' (its own CUDA stream)' if placement.target_device == placement.draft_device else ''}")
    cores = cpu_cores()
    if cores < 2:
        return "1 core: the two lanes take turns on it"
    both = placement.target_threads + placement.draft_threads
    return (f"{cores} cores: target {placement.target_threads} thread and draft "
            f"{placement.draft_threads} while both work; a lane working alone (prefill, the draft "
            f"after the verdict, handed to the target's thread) {both}")


def lane_sync(device) -> None:
    """Wait until this lane's queued work on `device` is done, so a timer read afterwards is
    honest. On CUDA that is the calling thread's current stream only (see `lane_stream`): a
    whole-device synchronize would also wait for the other lane and serialize the two."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.current_stream(dev).synchronize()
    elif dev.type == "mps":
        torch.mps.synchronize()


def lane_join(device) -> None:
    """Make the calling thread's current CUDA stream wait for the default stream's queued work
    (the draft lane's worker, before it reads what the target lane's thread wrote there in the
    hand-off). Elsewhere a no-op."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.current_stream(dev).wait_stream(torch.cuda.default_stream(dev))


@contextmanager
def lane_stream(device, adopt=()):
    """Run the calling thread's work on `device` on a CUDA stream of its own, so the draft lane's
    kernels can run at the same time as the target's (which stay on the default stream) when
    both models share a GPU. `adopt`: tensors made on the default stream that this lane will
    read and drop (its KV cache): the lane waits for them and the allocator is told, so their
    memory is not reused under the lane's feet. Elsewhere (CPU, MPS) a no-op."""
    dev = torch.device(device)
    if dev.type != "cuda":
        yield
        return
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.default_stream(dev))
    for t in adopt:
        if t.is_cuda:
            t.record_stream(stream)
    with torch.cuda.stream(stream):
        yield
    stream.synchronize()


def cache_tensors(cache) -> list:
    """The key and value tensors of a transformers cache (for `lane_stream(adopt=...)`)."""
    return [t for layer in getattr(cache, "layers", [])
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
            if isinstance(t, torch.Tensor)]
