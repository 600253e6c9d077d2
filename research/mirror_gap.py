"""Where does Mirror-SD's step time go, against the bandwidth bound? (docs/performance.md,
"The bandwidth bound")

    python research/mirror_gap.py out/bench/results.json

From one benchmark run's spans (AR, SD and Mirror-SD interleaved on the same questions):
  - AR: one target forward per token (both cores);
  - SD: the target's verify forward by window length (alone, both cores);
  - Mirror-SD: the target lane's verify (prefix + early-exit head + suffix) by window length,
    while the draft lane runs beside it (one core each), and the draft lane's time after the
    verdict while the target waits (exposed);
and the step time and speedup that Mirror-SD would have with (a) its verify at SD's alone cost,
(b) nothing exposed, (c) both: projections from measured parts, labelled so.
"""
import json
import statistics
import sys
from collections import defaultdict

TARGET_PARTS = ("prefix", "exit_head", "suffix")


def turns(results, method):
    for q in results["questions"]:
        rec = q["methods"].get(method)
        for t in (rec or {}).get("turns", []):
            yield t


def steps_of(spans):
    by = defaultdict(list)
    for lane, label, start, end, step, detail in spans:
        by[step].append((lane, label, start, end, detail))
    return by


def window_len(detail: str) -> int:
    return int(detail.split()[0]) - 1 if detail and detail.split()[0].isdigit() else -1


def main(path):
    results = json.load(open(path))
    ar = [end - start for t in turns(results, "ar") for lane, label, start, end, step, d in t["spans"]
          if lane == "target" and label == "decode"]
    sd_verify = defaultdict(list)  # drafted tokens -> ms
    for t in turns(results, "sd"):
        for lane, label, start, end, step, detail in t["spans"]:
            if label == "verify_forward" and step > 0:
                sd_verify[window_len(detail)].append(end - start)
    mirror_verify = defaultdict(list)
    exposed, step_ms = [], []
    for t in turns(results, "mirror"):
        st = t["stats"]
        lens = st.get("window_lengths") or []
        by = steps_of(t["spans"])
        for step in sorted(by):
            if step == 0:
                continue
            parts = [s for s in by[step] if s[0] == "target" and s[1] in TARGET_PARTS]
            if not parts:
                continue
            t0, t1 = min(s[2] for s in parts), max(s[3] for s in parts)
            k = lens[step] if step < len(lens) else -1
            mirror_verify[k].append(t1 - t0)
            nxt = by.get(step + 1)
            if nxt:
                n0 = min(s[2] for s in nxt if s[0] == "target" and s[1] in TARGET_PARTS) if any(
                    s[0] == "target" and s[1] in TARGET_PARTS for s in nxt) else None
                if n0 is not None:
                    exposed.append(n0 - t1)
                    step_ms.append(n0 - t0)
    med = statistics.median
    print(f"AR: target forward {med(ar):.1f} ms (median of {len(ar)})")
    print("window | SD verify alone ms | Mirror verify beside the draft ms | ratio")
    for k in sorted(set(sd_verify) & set(mirror_verify)):
        if k < 1 or len(mirror_verify[k]) < 5:
            continue
        a, b = med(sd_verify[k]), med(mirror_verify[k])
        print(f"{k} | {a:.1f} (n={len(sd_verify[k])}) | {b:.1f} (n={len(mirror_verify[k])}) | {b / a:.2f}x")
    steps = len(step_ms)
    mean_step, mean_exp = statistics.mean(step_ms), statistics.mean(exposed)
    mean_ver = statistics.mean(x for v in mirror_verify.values() for x in v)
    sd_alone = {k: med(v) for k, v in sd_verify.items() if v}
    # the same steps with each verify at SD's alone cost for its window length
    alone = statistics.mean(sd_alone.get(k, mean_ver) for k, v in mirror_verify.items() for _ in v)
    tps = statistics.mean(t["stats"]["mean_accepted"] for t in turns(results, "mirror"))
    ar_tok = med(ar)
    other = mean_step - mean_ver - mean_exp
    print(f"Mirror-SD decode steps {steps}: step {mean_step:.1f} ms = verify {mean_ver:.1f} + exposed draft "
          f"{mean_exp:.1f} + other {other:.1f}; tokens per step {tps:.2f}")
    print(f"speedup from these parts: {tps * ar_tok / mean_step:.2f}x")
    for name, step in (("(a) verify at SD's alone cost (projection)", alone + mean_exp + other),
                       ("(b) nothing exposed (projection)", mean_ver + other),
                       ("(c) both (projection)", alone + other)):
        print(f"{name}: step {step:.1f} ms, {tps * ar_tok / step:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/bench/results.json")
