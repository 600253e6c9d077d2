"""Per decode step, the draft lane's work in a benchmark run: Mirror-SD's hits and misses
against SD's whole step.

    python research/draft_lane_work.py OUT_DIR

OUT_DIR holds a `python -m mirror_sd.bench` run's results.json with `sd` and `mirror` (and
any `mirror:...` variant). For each Mirror-SD method, means over its decode steps (the first
and last step of each question left out), split by hit and miss: the draft lane's busy time
before the verdict and after it (its serial rollout apart), the target lane from its first
span to the verdict, the draft's reading of d_gamma, the number of branch forwards and the
serial rollout after a miss. For SD: its draft and verify-forward time per step. All in ms,
from the run's measured spans.
"""
import collections
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.bench.harness import records_from_results  # noqa: E402


def mirror_steps(records: list[dict]) -> dict:
    rows = collections.defaultdict(list)
    for rec in records:
        spans = rec["spans"]
        verdicts = {s.step: s.end_ns for s in spans if s.lane == "verify"}
        starts = {s.step: s.start_ns for s in spans if s.lane == "target" and s.label == "prefix"}
        misses = {s.step for s in spans if s.label == "fallback"}
        for step in sorted(starts)[1:-1]:
            v, t0 = verdicts.get(step), starts[step]
            if v is None:
                continue
            mine = [s for s in spans if s.lane == "draft" and s.step == step and s.label != "fallback"]
            rows["miss" if step in misses else "hit"].append({
                "draft before the verdict": sum(max(0, min(s.end_ns, v) - max(s.start_ns, t0)) for s in mine) / 1e6,
                "draft after it": sum(max(0, s.end_ns - max(s.start_ns, v)) for s in mine) / 1e6,
                "target lane": (v - t0) / 1e6,
                "reading d_gamma": sum(s.end_ns - s.start_ns for s in mine if s.label == "extend") / 1e6,
                "branch forwards": sum(1 for s in mine if s.label == "branches"),
                "serial rollout": sum(s.end_ns - s.start_ns for s in spans
                                      if s.step == step and s.label == "fallback") / 1e6})
    return {k: {"steps": len(v), **{f: round(statistics.mean(r[f] for r in v), 1) for f in v[0]}}
            for k, v in rows.items()}


def sd_steps(records: list[dict]) -> dict:
    per = collections.defaultdict(lambda: [0.0, 0.0])
    for rec in records:
        for s in rec["spans"]:
            if s.step > 0 and s.lane == "draft":
                per[(rec["question_id"], s.step)][0] += (s.end_ns - s.start_ns) / 1e6
            elif s.step > 0 and s.label == "verify_forward":
                per[(rec["question_id"], s.step)][1] += (s.end_ns - s.start_ns) / 1e6
    return {"steps": len(per), "draft": round(statistics.mean(v[0] for v in per.values()), 1),
            "verify forward": round(statistics.mean(v[1] for v in per.values()), 1)}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    results = json.load(open(os.path.join(sys.argv[1], "results.json")))
    records = records_from_results(results)
    out = {"sd": sd_steps([r for r in records if r["method"] == "sd"])}
    for method in sorted({r["method"] for r in records if r["method"].startswith("mirror")}):
        out[method] = mirror_steps([r for r in records if r["method"] == method])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
