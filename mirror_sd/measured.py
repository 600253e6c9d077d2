"""Measured constants (mirror_sd/data/measured.json): each with what it is, the command that
regenerates it and where it was measured. `values(name)` gives one entry's values."""
from __future__ import annotations

import functools
import json
from pathlib import Path

FILE = Path(__file__).resolve().parent / "data" / "measured.json"


@functools.cache
def entries() -> dict:
    """Every entry of the file: {name: {what, command, measured_on, values, ...}}."""
    return {k: v for k, v in json.loads(FILE.read_text()).items() if isinstance(v, dict)}


def values(name: str) -> dict:
    """The values of one entry (a fresh copy: callers may change it)."""
    return json.loads(json.dumps(entries()[name]["values"]))
