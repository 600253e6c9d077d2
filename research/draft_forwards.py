"""Draft forwards per step and what one costs, from a benchmark run's spans.

    python research/draft_forwards.py OUT_DIR [OUT_DIR ...]

OUT_DIR holds a `python -m mirror_sd.bench` run's results.json with `sd` and `mirror`. Per
Mirror-SD decode step (the first and last step of each question left out), split by hit and
miss: draft forwards in all (reading d_gamma, branch forwards, the serial rollout's forwards
after a miss), the branch forwards before and after the verdict, and the median ms of a
one-row branch forward that ran wholly beside the target's verify forward against one that ran
after the verdict (alone, both cores) and SD's draft forwards (alone, both cores). SD: draft
forwards per step (one per drafted token). Means per step; forwards' ms are medians.
"""
import collections
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mirror_sd.bench.harness import records_from_results  # noqa: E402


def _tokens(detail: str) -> int:
    m = re.match(r"(\d+) tokens", detail or "")
    return int(m.group(1)) if m else 1


def mirror_steps(records: list[dict]) -> dict:
    rows = collections.defaultdict(list)
    beside, after = [], []
    for rec in records:
        spans = rec["spans"]
        verdicts = {s.step: s.end_ns for s in spans if s.lane == "verify"}
        target = {s.step: (s.start_ns, s.end_ns) for s in spans if s.lane == "target" and s.label == "prefix"}
        suffix = {s.step: s.end_ns for s in spans if s.lane == "target" and s.label == "suffix"}
        misses = {s.step for s in spans if s.label == "fallback"}
        for step in sorted(target)[1:-1]:
            v = verdicts.get(step)
            if v is None:
                continue
            mine = [s for s in spans if s.lane == "draft" and s.step == step]
            branch = [s for s in mine if s.label == "branches"]
            pre = [s for s in branch if s.end_ns <= v]
            rows["miss" if step in misses else "hit"].append({
                "draft forwards": sum(_tokens(s.detail) if s.label == "fallback" else 1
                                      for s in mine if s.label in ("extend", "branches", "fallback", "read")),
                "reading d_gamma": sum(1 for s in mine if s.label == "extend"),
                "branch forwards before the verdict": len(pre),
                "branch forwards after it": len(branch) - len(pre),
                "branch rows per forward": statistics.mean(_tokens(s.detail.replace("rows", "tokens"))
                                                           for s in branch) if branch else 0.0,
                "serial rollout forwards": sum(_tokens(s.detail) for s in mine if s.label == "fallback")})
            for s in branch:
                one_row = s.detail.startswith("1 row")
                if one_row and s.end_ns <= suffix.get(step, 0) and s.start_ns >= target[step][0]:
                    beside.append((s.end_ns - s.start_ns) / 1e6)
                elif one_row and s.start_ns >= v:
                    after.append((s.end_ns - s.start_ns) / 1e6)
    out = {k: {"steps": len(v), **{f: round(statistics.mean(r[f] for r in v), 2) for f in v[0]}}
           for k, v in rows.items()}
    out["one-row branch forward ms"] = {
        "beside the target": round(statistics.median(beside), 2) if beside else None,
        "after the verdict (alone)": round(statistics.median(after), 2) if after else None}
    return out


def sd_steps(records: list[dict]) -> dict:
    forwards, per_forward = [], []
    for rec in records:
        for s in rec["spans"]:
            if s.step > 0 and s.lane == "draft" and s.label == "draft":
                n = _tokens(s.detail)
                forwards.append(n)
                per_forward.append((s.end_ns - s.start_ns) / 1e6 / n)
    return {"steps": len(forwards), "draft forwards": round(statistics.mean(forwards), 2),
            "draft ms per forward (alone, both cores)": round(statistics.median(per_forward), 2)}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        results = json.load(open(os.path.join(path, "results.json")))
        records = records_from_results(results)
        out = {"run": path, "sd": sd_steps([r for r in records if r["method"] == "sd"])}
        for method in sorted({r["method"] for r in records if r["method"].startswith("mirror")}):
            out[method] = mirror_steps([r for r in records if r["method"] == method])
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
