"""The CPU kernels a precision runs on, built ahead of a load.

`int8` and `int4` on a CPU run the AVX2 extension (mirror_sd/cpu/int8.py), compiled on first
use (about a minute, once per machine). A caller that knows a load is coming (the app's
background start) builds it beside the model conversion, on the other core, so that the load
does not wait for the compiler.
"""
from __future__ import annotations

NATIVE_PRECISIONS = ("int8", "int4")  # converted with the AVX2 extension


def needs_native_kernel(precision: str, device: str = "auto") -> bool:
    return precision in NATIVE_PRECISIONS and device in ("auto", "cpu")


def build_native_kernel() -> None:
    """Start building the AVX2 extension in the background with one compiler job, so the
    other core stays with the conversion (a load waits for the build); raises what starting
    it raises."""
    from mirror_sd.cpu import int8
    int8.start_build(jobs=1)
