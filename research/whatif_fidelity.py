"""How well the what-if projection's profile (a) reproduces a benchmark run, and what profile (c)
gives for the paper's setting. Every projected number is a projection, not a measurement.

    python research/whatif_fidelity.py OUT_DIR                  # reads OUT_DIR/results.json
    python research/whatif_fidelity.py OUT_DIR --run "--per-category 1 --max-new-tokens 48 \
        --methods ar,sd,mirror --precision int8"                # runs the benchmark first

Fidelity table: per method and question (turns pooled), the measured decode time, profile
(a)'s projection of the same recorded steps and their ratio; two calibrations: "pooled" (costs
from every question's spans) and "held out" (costs from the other questions only, so the
question's own spans never set its projection). Then profile (c): the paper's setting (gamma
7, kappa 8, exit at N/2, Qwen3-14B / 32B targets with the 0.6B draft) fed the run's own
acceptance and paper-like ones (tau 4-6 tokens per step), with the costs it assumed.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from mirror_sd.latency import whatif as wi  # noqa: E402
from mirror_sd.bench.harness import records_from_results  # noqa: E402
from mirror_sd.latency.whatif_hardware import Accelerators, accelerator_profile  # noqa: E402


def load(out_dir: str, run_args: str | None) -> dict:
    path = os.path.join(out_dir, "results.json")
    if run_args is not None:
        cmd = [sys.executable, "-m", "mirror_sd.bench", *shlex.split(run_args), "--out", out_dir]
        print("running:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    with open(path) as f:
        return json.load(f)


def setup(results: dict) -> dict:
    meta = results["meta"]
    s = meta.get("settings") or {}
    return dict(target_layers=meta["target_layers"], gamma=int(s.get("gamma") or 4),
                exit_layer=meta.get("exit_layer"), branch_budget=int(s.get("branch_budget") or 2),
                kappa=int(s.get("kappa") or 8))


def profile_a(records: list[dict], kw: dict) -> wi.Profile:
    return wi.this_machine(records, **kw)["a"]


def speedups(records: list[dict], kw: dict) -> None:
    """Decode speed over AR, summed over the questions: measured, (a) and (b), each question
    calibrated from its own spans."""
    ok = [r for r in records if not r.get("error") and wi.base_method(r["method"]) in wi.METHODS]
    time = {k: {m: 0.0 for m in wi.METHODS} for k in ("measured", "a", "b")}
    tokens = {m: 0 for m in wi.METHODS}
    gains = []  # per question: Mirror-SD's decode time, (a) over (b)
    for q in dict.fromkeys(r["question_id"] for r in ok):
        mine = [r for r in ok if r["question_id"] == q]
        profiles = wi.this_machine(mine, **kw)
        for rec in (wi.recorded_steps(r, kw["gamma"]) for r in mine):
            if rec is None or not rec.steps or not rec.decode_s:
                continue
            tokens[rec.method] += rec.tokens
            time["measured"][rec.method] += rec.decode_s
            proj = {k: wi.project_run(rec, profiles[k])["decode_s"] for k in ("a", "b")}
            for k in ("a", "b"):
                time[k][rec.method] += proj[k]
            if rec.method == "mirror":
                gains.append(proj["a"] / proj["b"])
    print("\n## Decode speed over AR over the whole run: measured and projected\n")
    print("| | " + " | ".join(wi.METHODS) + " |")
    print("|---|" + "---|" * len(wi.METHODS))
    for k, name in (("measured", "measured"), ("a", "projection (a), this machine"),
                    ("b", "projection (b), draft on its own device")):
        ar = tokens["ar"] / time[k]["ar"]
        print(f"| {name} | " + " | ".join(f"{tokens[m] / time[k][m] / ar:.2f}" for m in wi.METHODS) + " |")
    if gains:
        print(f"\nMirror-SD with the draft on its own device, (b) over (a) per question (projection): "
              f"median {statistics.median(gains):.2f}x, range {min(gains):.2f}-{max(gains):.2f}x. "
              "The methods ran one after another on a shared machine, so ratios across methods carry "
              "its load; ratios within a question and method do not.")


def fidelity(records: list[dict], kw: dict) -> list[dict]:
    """Per (question, method): measured decode s, pooled and held-out projections."""
    ok = [r for r in records if not r.get("error") and wi.base_method(r["method"]) in wi.METHODS]
    pooled = profile_a(ok, kw)
    rows = []
    questions = list(dict.fromkeys(r["question_id"] for r in ok))
    for q in questions:
        own = profile_a([r for r in ok if r["question_id"] == q], kw)
        held = profile_a([r for r in ok if r["question_id"] != q], kw) if len(questions) > 1 else None
        for m in wi.METHODS:
            mine = [wi.recorded_steps(r, kw["gamma"]) for r in ok if r["question_id"] == q
                    and wi.base_method(r["method"]) == m]
            mine = [r for r in mine if r is not None and r.steps and r.decode_s]
            if not mine:
                continue
            measured = sum(r.decode_s for r in mine)
            row = {"question": q, "method": m, "measured_s": measured,
                   "steps": sum(r.steps for r in mine)}
            for name, prof in (("own", own), ("pooled", pooled), ("held_out", held)):
                if prof is None:
                    continue
                proj = [wi.project_run(r, prof)["decode_s"] for r in mine]
                row[name] = None if None in proj else sum(proj)
            rows.append(row)
    return rows


CALIBRATIONS = {"own": "the question's own spans (as the app calibrates a run)",
                "pooled": "every question's spans",
                "held_out": "the other questions' spans only"}


def print_fidelity(rows: list[dict]) -> None:
    print("\n## Profile (a) against measured decode time (ratio = projection / measured)\n")
    print("Costs calibrated from: " + "; ".join(f"{k}: {v}" for k, v in CALIBRATIONS.items()) + ".\n")
    print("| question | method | steps | measured s | " + " | ".join(
        f"projection (a), {k} s | ratio" for k in CALIBRATIONS) + " |")
    print("|---|---|---|---|" + "---|---|" * len(CALIBRATIONS))
    for r in rows:
        cells = [f"{r[k]:.2f} | {r[k] / r['measured_s']:.3f}" if r.get(k) is not None else "– | –"
                 for k in CALIBRATIONS]
        print(f"| {r['question']} | {r['method']} | {r['steps']} | {r['measured_s']:.2f} | "
              + " | ".join(cells) + " |")
    print("\n| method | " + " | ".join(f"median ratio, {k}" for k in CALIBRATIONS)
          + " | total ratio, own | within 10%, own |")
    print("|---|" + "---|" * (len(CALIBRATIONS) + 2))
    for m in wi.METHODS:
        rs = [r for r in rows if r["method"] == m]
        if not rs:
            continue
        medians = []
        for k in CALIBRATIONS:
            ratios = [r[k] / r["measured_s"] for r in rs if r.get(k) is not None]
            medians.append(f"{statistics.median(ratios):.3f}" if ratios else "–")
        total = sum(r["own"] for r in rs) / sum(r["measured_s"] for r in rs)
        within = sum(abs(r["own"] / r["measured_s"] - 1) <= 0.10 for r in rs)
        print(f"| {m} | " + " | ".join(medians) + f" | {total:.3f} | {within} of {len(rs)} |")


def _speedups(recorded, cal, run_gamma, **hw) -> tuple[float, float]:
    proj = wi.project(recorded, accelerator_profile(Accelerators(**hw), cal, run_gamma))
    return proj["sd"]["speedup"], proj["mirror"]["speedup"]


PAPER = dict(draft="0.6B", gamma=7, kappa=8, exit_fraction=0.5)


def paper_setting(records: list[dict], kw: dict) -> None:
    """Profile (c) at gamma 7, kappa 8, exit N/2 for 14B and 32B targets with the 0.6B draft."""
    ok = [r for r in records if not r.get("error") and wi.base_method(r["method"]) in wi.METHODS]
    cal = wi.calibrate_machine(ok, **kw)
    recorded = [r for r in (wi.recorded_steps(x, kw["gamma"]) for x in ok) if r]
    run_tau = wi.lm.tau_from_alpha(cal.alpha_mirror, 7)
    print("\n## Profile (c), the paper's setting (gamma 7, kappa 8, exit at N/2, 0.6B draft): projection\n")
    print(f"Fed: the run's own acceptance (alpha {cal.alpha_mirror:.3f} per token: tau {run_tau:.2f} "
          f"at gamma 7; hit rate {cal.hit_rate:.0%}, measured at gamma {kw['gamma']}), or a paper-like "
          "tau with a 90% hit rate.\n")
    print("| target | tau fed | hit rate | draft tokens / forward | SD over AR | Mirror-SD over AR | "
          "Mirror-SD over SD |")
    print("|---|---|---|---|---|---|---|")
    notes = {}
    for target in ("14B", "32B"):
        for tau, hit in ((None, None), (4.0, 0.9), (5.0, 0.9), (6.0, 0.9)):
            for tpf in (1.0, 3.0):
                hw = dict(PAPER, target=target, tau=tau, hit_rate=hit, draft_tokens_per_forward=tpf)
                sd, m = _speedups(recorded, cal, kw["gamma"], **hw)
                notes.setdefault((target, tpf), accelerator_profile(Accelerators(**hw), cal).notes)
                print(f"| {target} | {'run' if tau is None else f'{tau:g}'} | "
                      f"{'run' if hit is None else f'{hit:.0%}'} | {tpf:g} | {sd:.2f} | {m:.2f} | {m / sd:.2f} |")
    print("\nCosts assumed (projection):")
    for (target, tpf), n in notes.items():
        print(f"- {target}, {tpf:g} draft tokens per forward: " + "; ".join(n))
    print("\n### What the draft device must do (14B, tau 5, hit rate 90%): projection\n")
    print("| draft bandwidth GB/s | draft tokens / forward | SD over AR | Mirror-SD over AR | "
          "Mirror-SD over SD |")
    print("|---|---|---|---|---|")
    for bw in (640.0, 1280.0, 2680.0, 5360.0):
        for tpf in (1.0, 3.0):
            sd, m = _speedups(recorded, cal, kw["gamma"], **PAPER, target="14B", tau=5.0, hit_rate=0.9,
                              draft_bw_gbs=bw, draft_tokens_per_forward=tpf)
            print(f"| {bw:g} | {tpf:g} | {sd:.2f} | {m:.2f} | {m / sd:.2f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--run", default=None, metavar="ARGS",
                   help="benchmark arguments: run `python -m mirror_sd.bench ARGS --out OUT_DIR` first")
    p.add_argument("--methods", default=None, metavar="A,B,C",
                   help="the benchmark's method names to read, one per base method (e.g. "
                        "ar,sd:window=fixed,mirror:window=fixed); default: every record, variants "
                        "pooled with their base method")
    args = p.parse_args(argv)
    results = load(args.out_dir, args.run)
    kw = setup(results)
    records = records_from_results(results)
    if args.methods:
        keep = args.methods.split(",")
        records = [dict(r, method=wi.base_method(r["method"])) for r in records if r["method"] in keep]
    print(f"benchmark: {results['meta'].get('target')} / {results['meta'].get('draft')}, "
          f"{results['meta'].get('precision')}, {len(results['questions'])} questions, settings {kw}")
    print_fidelity(fidelity(records, kw))
    speedups(records, kw)
    paper_setting(records, kw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
