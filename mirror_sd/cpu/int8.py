"""A row-exact int8 linear kernel for AVX2 CPUs, built on first use (kernels/row_int8.cpp).

fbgemm's dynamic int8 kernel reads one activation scale per call, so `RowInt8Linear` has to
pin each call's range with two extra columns and scale the rows around it, and at one or a
few rows fbgemm streams the weights at well under the machine's read bandwidth
(docs/performance.md). This kernel quantizes each row on its own (symmetric 7-bit,
one scale per row; weights symmetric int8, one scale per output channel) and computes exact
int32 dot products with AVX2: a row's output is bit-identical whatever else is in the call.

Built with torch.utils.cpp_extension (g++ and ninja; about a minute, once, cached under
`<cache>/torch_extensions` (`$MIRROR_SD_CACHE`, else ~/.cache/mirror-sd; `$MIRROR_SD_EXT_DIR`
overrides) in a folder named by a hash of the sources, the flags and torch's version, with the
sources copied in, so every checkout shares one build). `start_build()` builds it in a
background thread, one compiler job at a time, so that a model conversion can use the other
core meanwhile; `quantize_weight` makes the kernel's int8 weights without the extension, bit
for bit, so a conversion need not wait for the build. A build is
guarded by an OS file lock, released if its process dies: a `lock` file that torch's own guard
left behind (a build killed half-way, which would make torch wait on it forever) is removed
under it. Where it cannot be built or the CPU lacks AVX2,
`available()` says why and the int8 precision keeps fbgemm's `RowInt8Linear` (as it does when
the loader is asked for kernels="fbgemm": then this module is never loaded).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from mirror_sd.paths import exclusive

SOURCES = [Path(__file__).with_name("kernels") / f for f in ("module.cpp", "row_int8.cpp", "row_int4.cpp", "fast_layer.cpp")]
_lock = threading.Lock()
_start_lock = threading.Lock()
_state: dict = {}


def _cpu_has_avx2() -> bool:
    try:
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    except Exception:  # noqa: BLE001 - an old torch: read the flags
        try:
            return " avx2 " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
        except OSError:
            return False


CFLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp"]
LDFLAGS = ["-fopenmp"]


def build_root() -> Path:
    if os.environ.get("MIRROR_SD_EXT_DIR"):
        return Path(os.environ["MIRROR_SD_EXT_DIR"]).expanduser()
    cache = os.environ.get("MIRROR_SD_CACHE") or "~/.cache/mirror-sd"
    return Path(cache).expanduser() / "torch_extensions"


def build_dir(root: Path | None = None) -> Path:
    """This build's folder: named by the sources, the flags and torch's version (torch's
    `load` appends to the flag lists it is given: it gets copies)."""
    h = hashlib.sha256(" ".join(CFLAGS + LDFLAGS + [torch.__version__]).encode())
    for src in SOURCES:
        h.update(src.name.encode() + b"\0" + src.read_bytes())
    return (root or build_root()) / f"mirror_sd_avx2-{h.hexdigest()[:16]}"


@contextmanager
def build_lock(folder: Path):
    """One builder per folder across processes. Under it no other process of ours is building,
    so torch's own `lock` file, if there is one, was left by a build that died, and is removed
    (torch would wait on it forever)."""
    with exclusive(folder / "build.flock"):
        (folder / "lock").unlink(missing_ok=True)
        yield


def _build():
    from torch.utils import cpp_extension
    folder = build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with build_lock(folder):
        src = folder / "src"
        src.mkdir(exist_ok=True)
        copies = []
        for path in SOURCES:  # the same paths from every checkout: ninja rebuilds nothing
            copy = src / path.name
            if not copy.exists() or copy.read_bytes() != path.read_bytes():
                shutil.copyfile(path, copy)
            copies.append(str(copy))
        return cpp_extension.load(name="mirror_sd_avx2", sources=copies, build_directory=str(folder),
                                  extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS), verbose=False)


def load():
    """The compiled extension module, or None (see `unavailable_reason`)."""
    module = _state.get("module")
    if module is not None:
        return module
    with _lock:
        if "module" in _state:
            return _state["module"]
        module, reason = None, None
        if not _cpu_has_avx2():
            reason = "this CPU has no AVX2"
        else:
            try:
                module = _build()
            except Exception as e:  # noqa: BLE001 - no compiler, no ninja, a build error
                reason = f"could not build the AVX2 int8 kernel ({type(e).__name__}: " \
                         f"{str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''})"
        _state["module"], _state["reason"] = module, reason
        return module


def available() -> bool:
    return load() is not None


def built() -> bool:
    """Whether load() has finished (built or not), without waiting for it."""
    return "module" in _state


def start_build(jobs: int | None = 1) -> threading.Thread | None:
    """Build (or load) the extension in a background thread, once per process; None when it is
    done already. `jobs`: compiler processes at a time (torch's MAX_JOBS; None: ninja's
    default, one per core and two more). One job leaves the other core of a 2-core machine to
    a model conversion running meanwhile; the build then takes longer but off the critical
    path."""
    with _start_lock:  # not _lock: load() holds that for the whole build
        if "module" in _state:
            return None
        if _state.get("thread") is not None:
            return _state["thread"]
        if jobs is not None and "MAX_JOBS" not in os.environ:
            os.environ["MAX_JOBS"] = str(jobs)  # read by torch's build; the user's value wins
        thread = threading.Thread(target=load, name="mirror-sd-kernel-build", daemon=True)
        _state["thread"] = thread
        _state["build_started"] = time.monotonic()
        thread.start()
    return thread


def build_seconds_so_far() -> float | None:
    """Seconds since start_build() started the build, while it runs; else None."""
    started = _state.get("build_started")
    return None if started is None or built() else time.monotonic() - started


def quantize_weight(weight: torch.Tensor) -> list[torch.Tensor]:
    """The extension's `quantize_weight` in torch, bit for bit (tested): per output channel
    scale = max|w| / 127 (1 where the row is zero), q = round-half-even(w / scale) clamped to
    +-127, K padded with zeros to a multiple of 32, and each row's sum of q. Returns
    [q int8 [N, Kp], scale float32 [N], sum int32 [N]]."""
    w = weight.detach().float()
    n, k = w.shape
    peak = torch.linalg.vector_norm(w, float("inf"), dim=1)
    scale = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak))
    levels = torch.div(w, scale[:, None]).round_().clamp_(-127, 127)
    # a float32 sum of integers is exact below 2^24 (K <= 132,104), and torch's int8 sum is
    # several times slower
    total = levels.sum(dim=1).to(torch.int32) if 127 * k < 1 << 24 else \
        levels.to(torch.int32).sum(dim=1, dtype=torch.int32)
    if k % ALIGN == 0:
        return [levels.to(torch.int8), scale, total]
    q = torch.zeros(n, -(-k // ALIGN) * ALIGN, dtype=torch.int8)
    q[:, :k] = levels
    return [q, scale, total]


ALIGN = 32  # kernels/row_int8.cpp's kAlign: K is padded to whole 32-byte vectors


def unavailable_reason() -> str | None:
    load()
    return _state.get("reason")


def over_rows(x: torch.Tensor, out_features: int, kernel) -> torch.Tensor:
    """Run `kernel` ([M, K] float32 -> [M, N] float32) over the rows of x [..., K], in x's
    dtype."""
    shape, dtype = x.shape, x.dtype
    rows = x.reshape(-1, shape[-1])
    if dtype != torch.float32:
        rows = rows.float()
    y = kernel(rows).view(*shape[:-1], out_features)
    return y if dtype == torch.float32 else y.to(dtype)


class NativeInt8Linear(torch.nn.Module):
    """y = x W^T + b: int8 weights (a scale per output channel), int8 activations (a scale
    per row), AVX2 kernel; rows never affect one another."""

    def __init__(self, linear: torch.nn.Linear | None, *, _q=None, _scale=None, _sum=None,
                 _bias=None):
        super().__init__()
        ext = load()  # held by this module, not the layer: layers stay deep-copyable
        if ext is None:
            raise RuntimeError(unavailable_reason())
        if linear is not None:
            _q, _scale, _sum = ext.quantize_weight(linear.weight.detach().float())
            _bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.in_features = linear.in_features if linear is not None else None
        self.out_features = _q.shape[0]
        self.register_buffer("qweight", _q, persistent=False)
        self.register_buffer("scale", _scale, persistent=False)
        self.register_buffer("wsum", _sum, persistent=False)
        self.register_buffer("bias", _bias, persistent=False)
        self._empty = torch.empty(0)

    def rows(self, ids: torch.Tensor) -> "NativeInt8Linear":
        """The layer restricted to output channels `ids`: the same int8 weights and scales."""
        bias = self.bias[ids].clone() if self.bias is not None else None
        out = NativeInt8Linear(None, _q=self.qweight[ids].contiguous(),
                               _scale=self.scale[ids].contiguous(),
                               _sum=self.wsum[ids].contiguous(), _bias=bias)
        out.in_features = self.in_features
        return out

    def kernel_args(self) -> list[torch.Tensor]:
        """What the extension's int8 kernel takes after the input (fast_layers passes it on)."""
        return [self.qweight, self.scale, self.wsum, self.bias if self.bias is not None else self._empty]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return over_rows(x, self.out_features, lambda rows: load().row_int8_linear(rows, *self.kernel_args()))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows (AVX2)"
