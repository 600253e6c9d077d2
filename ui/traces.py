"""Traces: a run saved as JSON (every event with its time, the prompt, the settings) and
loaded back to be replayed and inspected without any model."""
from __future__ import annotations

import json
import os
import tempfile
import time

from .runs import RunRecord

FORMAT = "mirror-sd-trace"
VERSION = 1
KEEP_FILES = 200  # downloads written by a long-running server: the oldest go first


class TraceError(ValueError):
    """A file that is not a readable mirror-sd trace (the message says why)."""


def export_trace(records: dict[str, RunRecord], prompt: str, settings: dict, meta: dict) -> dict:
    return {"format": FORMAT, "version": VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "prompt": prompt, "settings": settings, "pair": meta,
            "runs": {m: r.to_dict() for m, r in records.items() if r is not None}}


def write_trace(data: dict, directory: str | None = None) -> str:
    directory = directory or os.path.join(tempfile.gettempdir(), "mirror-sd-traces")
    os.makedirs(directory, exist_ok=True)
    methods = "-".join(data["runs"])
    fd, path = tempfile.mkstemp(prefix=f"mirror-sd-{methods}-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    _prune(directory)
    return path


def _prune(directory: str) -> None:
    try:
        files = sorted((os.path.join(directory, n) for n in os.listdir(directory)
                        if n.startswith("mirror-sd-") and n.endswith(".json")), key=os.path.getmtime)
        for old in files[:-KEEP_FILES]:
            os.remove(old)
    except OSError:  # another process pruned the same file: nothing to do
        pass


def parse_trace(data) -> tuple[dict[str, RunRecord], str, dict, dict]:
    """(records, prompt, settings, pair meta) from a trace dict; TraceError if malformed."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TraceError("This file is not a mirror-sd trace (no \"format\": "
                         f"\"{FORMAT}\" field): download one with the Download button first.")
    if int(data.get("version", 0)) > VERSION:
        raise TraceError(f"This trace has version {data.get('version')}; this app reads up to "
                         f"version {VERSION}.")
    try:
        records = {m: RunRecord.from_dict(r) for m, r in data["runs"].items()}
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(f"The trace is damaged: {type(e).__name__}: {e}") from None
    if not records:
        raise TraceError("The trace holds no runs.")
    return records, str(data.get("prompt", "")), dict(data.get("settings") or {}), dict(data.get("pair") or {})


def read_trace(path: str) -> tuple[dict[str, RunRecord], str, dict, dict]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(f"Could not read the trace: {e}") from None
    return parse_trace(data)
