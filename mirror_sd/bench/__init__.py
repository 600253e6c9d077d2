"""The benchmark (`python -m mirror_sd.bench`): methods run interleaved per question, outputs
checked against AR, a latency-model calibration from the run.

Its public interface, the names other packages (the pair report) use, importable from here;
each is loaded from its module on first use, so `import mirror_sd.bench` costs nothing:
- `run_benchmark(pair, questions, methods, settings, ...)`: a benchmark run (harness.py);
- `records_from_results(results)`: a results.json's recorded steps, for the What-if;
- `default_runners(...)`, `engine_runner(method)`: what runs one method on one prompt;
- `label(method)`: a method's display name (variants and transformers' assisted generation too);
- `summarize_windows(...)`: acceptance per window position (window_acceptance.py).
"""
from __future__ import annotations

import importlib

_HOMES = {"run_benchmark": "harness", "records_from_results": "harness",
          "default_runners": "runners", "engine_runner": "runners", "label": "runners",
          "summarize_windows": "window_acceptance"}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
