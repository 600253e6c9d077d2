"""The What-if of a benchmark run: profiles (a)-(d) and each profile's own settings.

    python -m mirror_sd.bench.whatif_report OUT_DIR

reads OUT_DIR/results.json (a `python -m mirror_sd.bench` run), projects its recorded steps
with whatif_hardware.project_all (variants such as `mirror:branch_extend=off` enter the
per-profile settings search), prints a table and writes OUT_DIR/whatif.json. Every figure
is a projection, except the measured row and the contention measured in the run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mirror_sd.formats import times
from mirror_sd.latency import whatif_hits as wh
from mirror_sd.latency.whatif_hardware import project_all


def _settings(c: dict | None) -> str:
    if not c:
        return "-"
    s = c["settings"]
    keys = [k for k in ("gamma", "window", "branch_extend", "exit_layer", "branch_budget") if s.get(k) is not None]
    return f"{c['method']} (" + ", ".join(f"{k} {s[k]}" for k in keys) + ")"


def whatif_of_results(results: dict) -> dict:
    """project_all over a benchmark results dict."""
    from mirror_sd.bench.harness import records_from_results

    meta = results["meta"]
    s = meta["settings"]
    records = [r for r in records_from_results(results) if r["method"] != "hf-assisted"]
    return project_all(records, target_layers=meta["target_layers"], gamma=s["gamma"],
                       exit_layer=meta.get("exit_layer"), branch_budget=s["branch_budget"], kappa=s["kappa"],
                       settings=s, precision=meta.get("precision"),
                       pair={"target": meta.get("target"), "draft": meta.get("draft")},
                       source=f"benchmark {meta.get('started', '')}")


def render(out: dict) -> str:
    lines = ["PROJECTIONS (the measured row and the measured contention aside): a model, not measurements.",
             "", "profile | SD | Mirror-SD | Mirror-SD / SD",
             f"measured | {times(out['measured_speedup'].get('sd'), '-')} | {times(out['measured_speedup'].get('mirror'), '-')} | "
             + times(out["measured_speedup"].get("mirror") / out["measured_speedup"]["sd"]
                  if out["measured_speedup"].get("sd") and out["measured_speedup"].get("mirror") else None, '-')]
    for key, proj in out["projected"].items():
        sd, m = (proj.get(x, {}).get("speedup") for x in ("sd", "mirror"))
        prof = out["profiles"][key]
        how = ("this run's settings" if prof.acceptance_from_run else
               f"gamma {prof.calibration.gamma}, budget {prof.calibration.branch_budget}, "
               + ("windows priced again at the acceptance per drafted token" if prof.reprice_windows
                  else "expected steps from the fitted acceptance") + " (not a replay)")
        lines.append(f"({key}) {prof.name}, {how} | {times(sd, '-')} | {times(m, '-')} | {times(m / sd if sd and m else None, '-')}")
    for key, c in out["choices"].items():
        lines.append(f"({key}) {c['name']}, its own settings | {times(c['sd'] and c['sd']['speedup'], '-')} | "
                     f"{times(c['mirror'] and c['mirror']['speedup'], '-')} | {times(c['mirror_over_sd'], '-')}")
    lines.append("")
    for key, c in out["choices"].items():
        lines += [f"({key}) chose: SD {_settings(c['sd'])}; Mirror-SD {_settings(c['mirror'])}",
                  "    not searched: " + "; ".join(c["not_replayable"])]
    sources = {k: c["hit_source"] for k, c in out["choices"].items() if c.get("hit_source")}
    if sources:
        lines += ["", "Mirror-SD's hit rate in each profile's own settings: " + "; ".join(
            f"({k}) {words}" for k, words in sources.items())]
    for key, where in (("b", "With the draft on a device of its own"), ("c", "On the accelerator pair")):
        if (out.get("hit_series") or {}).get(key):
            lines.append(f"({key}) " + wh.series_words(out["hit_series"][key], where) + " (projection)")
    costs = out["costs"]
    lines += ["", f"costs of sharing the CPU: {costs['note']}",
              "windows (min / median / max): " + "; ".join(
                  f"{m} {w['min']} / {w['median']:g} / {w['max']}" for m, w in out["windows"].items())]
    return "\n".join(lines)


def to_json(out: dict) -> dict:
    """The result without its Python objects (profiles as name + notes, no recorded steps)."""
    return {"projection": True, "note": out["note"], "measured_speedup": out["measured_speedup"],
            "projected": out["projected"], "costs": out["costs"], "windows": out["windows"],
            "choices": out["choices"], "hit_series": out.get("hit_series") or {},
            "hit_source": {k: src.to_dict() for k, src in (out.get("hit_source") or {}).items()},
            "profiles": {k: {"name": p.name, "notes": p.notes} for k, p in out["profiles"].items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mirror_sd.bench.whatif_report", description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    args = ap.parse_args(argv)
    path = Path(args.out_dir) / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"Could not read {path}: {e}", file=sys.stderr)
        return 2
    out = whatif_of_results(results)
    print(render(out))
    (Path(args.out_dir) / "whatif.json").write_text(json.dumps(to_json(out), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
