"""The What-if's profiles from a benchmark run's overlapped Mirror-SD steps.

    python research/whatif_overlap.py OUT_DIR [--variant mirror:lane_overlap=always]

Under `lane_overlap` auto on a 2-core CPU most Mirror-SD steps run the lanes one after the
other (engine/mirror/gate.py), so the run's `mirror` spans say little about the overlap that
profiles (b) (the draft on a device of its own) and (d) (an 8-vCPU host) project. This takes
the variant that overlapped every step in the same interleaved run as Mirror-SD, projects
profiles (a)-(d) with whatif_hardware.project_all, and prints per profile the projected speedup
over AR of SD and Mirror-SD and Mirror-SD over SD. Every number is a projection.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.bench.harness import records_from_results  # noqa: E402
from mirror_sd.bench.whatif_hardware import project_all  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--variant", default="mirror:lane_overlap=always")
    args = ap.parse_args()
    results = json.load(open(os.path.join(args.out_dir, "results.json")))
    records = []
    for r in records_from_results(results):
        if r["method"] == "mirror" and args.variant != "mirror":
            continue  # the gated run: replaced by the overlapped variant
        if r["method"] == args.variant:
            r = {**r, "method": "mirror"}
        records.append(r)
    if not any(r["method"] == "mirror" for r in records):
        sys.exit(f"no {args.variant} runs in {args.out_dir}")
    meta = results["meta"]
    s = meta["settings"]
    out = project_all(records, target_layers=meta["target_layers"], gamma=s["gamma"],
                      exit_layer=meta.get("exit_layer"), branch_budget=s["branch_budget"],
                      kappa=s["kappa"], settings=s, precision=meta.get("precision"))
    table = {"run": args.out_dir, "variant": args.variant, "projection": True,
             "measured": {m: round(v, 3) for m, v in out["measured_speedup"].items() if v}}
    for key, proj in out["projected"].items():
        sd, mirror = (proj.get(m, {}).get("speedup") for m in ("sd", "mirror"))
        table[key] = {"profile": out["profiles"][key].name, "SD over AR": sd and round(sd, 3),
                      "Mirror-SD over AR": mirror and round(mirror, 3),
                      "Mirror-SD over SD": round(mirror / sd, 3) if sd and mirror else None}
    table["costs"] = out["costs"]["note"]
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
