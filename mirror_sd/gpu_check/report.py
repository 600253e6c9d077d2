"""The GPU check's two reports: OUT/gpu_check.json (everything) and OUT/gpu_check.md (tables)."""
from __future__ import annotations

import json
from pathlib import Path

METHOD_COLUMNS = ("tok_s", "speedup_vs_ar", "speedup_vs_sd", "wall_s", "mean_accepted", "hit_rate", "draft_hidden")


def _cell(v) -> str:
    return "" if v is None else str(v)


def markdown(report: dict) -> str:
    where = report["gpu"] or "no GPU (CPU only)"
    lines = [f"# GPU check ({report['mode']}: {where}, torch {report['torch']})", "",
             f"Pair: {report['pair']['source']} ({report['pair']['why']}). "
             f"{report['pair'].get('note', '')}".rstrip(),
             f"New tokens per run: {report['tokens']}. Elapsed: {report.get('elapsed_s')} s.", "",
             "| configuration | precision | target | draft | status | load s |",
             "|---|---|---|---|---|---|"]
    for r in report["runs"]:
        status = r["status"] if r["status"] == "ran" else f"{r['status']}: {r.get('reason', '')}"
        lines.append(f"| {r['configuration']} | {r['precision']} | {_cell(r.get('target_device'))} | "
                     f"{_cell(r.get('draft_device'))} | {status} | {_cell(r.get('load_s'))} |")
    ran = [r for r in report["runs"] if r["status"] == "ran"]
    if ran:
        lines += ["", "## Methods (medians; outputs against transformers' generate())", "",
                  "| configuration | precision | method | tok/s | vs AR | vs SD | wall s | mean accepted | "
                  "hit rate | draft hidden | mismatches |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in ran:
            for m, row in r["methods"].items():
                cells = " | ".join(_cell(row[c]) for c in METHOD_COLUMNS)
                lines.append(f"| {r['configuration']} | {r['precision']} | {m} | {cells} | "
                             f"{row['mismatches']} {_cell(row['first_mismatch'])} |")
        lines += ["", "## Overlap of the lanes (medians, ms; from timed spans)", "",
                  "| configuration | precision | clock | target span | draft span | back to back: "
                  "wall | at once: wall | at once: overlap | at once: draft hidden |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in ran:
            o = r["overlap"]
            lines.append(f"| {r['configuration']} | {r['precision']} | {o['clock']} | "
                         f"{o['target_span_ms']} | {o['draft_span_ms']} | {o['back_to_back_wall_ms']} | "
                         f"{o['at_once_wall_ms']} | {o['at_once_overlap_ms']} | {o['at_once_draft_hidden']} |")
    if report.get("forward_costs"):
        from mirror_sd.gpu_check.costs import markdown as costs_markdown
        lines += costs_markdown(report["forward_costs"])
    return "\n".join(lines) + "\n"


def write_reports(report: dict, out: Path) -> None:
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    (out / "gpu_check.md").write_text(markdown(report))
