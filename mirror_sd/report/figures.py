"""The report's figures for one (target, draft) pair, read off one benchmark run.

`measure_pair` runs the benchmark's harness (bench/harness.py `run_benchmark`: every method
on every question, interleaved, with the harness's warm-up and its mismatch check) and
`pair_figures` turns its results into the report: nothing here runs or times a method.
- acceptance: tau (tokens per target forward, the target's own token included) per method
  and task group; SD's and Mirror-SD's windows per position and as a histogram
  (acceptance.py);
- costs on this machine: the latency model's calibration from the same run (latency_model.py);
- speed over AR, measured: the harness's summary (median of per-question tokens/s ratios);
- projections, labelled: the What-if replay of the recorded steps (whatif.py, profiles (a)
  this machine, (b) the draft on a device of its own, (c) the accelerator pair), each at
  the run's settings and at the best settings the latency model finds for it (tuning.choose);
- the recommendation for this machine: the best projected gamma and branch budget, and SD's
  window priced as the priced windows price it (engine/pricing.py).
"""
from __future__ import annotations

from mirror_sd.latency import latency_model as lm
from mirror_sd.bench import summarize_windows

METHODS = ("ar", "sd", "mirror", "hf-assisted")
DEFAULT_TOKENS = 32
DEFAULT_PER_CATEGORY = 1
SPECULATIVE = ("sd", "mirror")  # the engine's methods with draft windows


def counted_runners(methods, hf_assistant_tokens, tick):
    """The harness's own runners, each calling tick() after a run (the progress bar)."""
    from mirror_sd.bench import default_runners, engine_runner

    table = default_runners(hf_assistant_tokens)

    def wrap(runner):
        def run(pair, prompt_ids, settings):
            try:
                return runner(pair, prompt_ids, settings)
            finally:
                tick()
        run.method = getattr(runner, "method", None)
        return run

    return {m: wrap(table.get(m) or engine_runner(m)) for m in methods}


def measure_pair(pair, questions, settings, *, methods=METHODS, out_dir=None, progress=None,
                 meta=None) -> dict:
    """The benchmark's results for this pair. `progress(done, total)` after every run (the
    harness's warm-up runs included)."""
    from mirror_sd.bench import run_benchmark

    methods = list(dict.fromkeys(["ar", *methods]))
    total = len(methods) * (1 + sum(len(q.turns) for q in questions))
    done = [0]

    def tick():
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    return run_benchmark(pair, questions, methods, settings, out_dir=out_dir, progress=False,
                         runners=counted_runners(methods, None, tick), meta=meta or {})


def _turn_stats(results: dict, method: str, category: str | None = None):
    for q in results["questions"]:
        if category is not None and q["category"] != category:
            continue
        rec = q["methods"].get(method)
        if rec is None or rec.get("error"):
            continue
        for t in rec.get("turns", []):
            if t.get("stats"):
                yield t["stats"]


def acceptance_of(results: dict, method: str, category: str | None = None) -> dict:
    """The windows of `method` (all questions, or one task group) summarized."""
    stats = list(_turn_stats(results, method, category))
    windows = [w for st in stats for w in st.get("window_verdicts") or []]
    cover = [c for st in stats for c in st.get("exit_cover") or []]
    return summarize_windows(windows, cover)


def acceptance_figures(results: dict) -> dict:
    summ = results["summary"]
    methods = results["meta"]["methods"]
    out = {"tau": {m: summ["overall"][m]["mean_accepted"] for m in methods},
           "by_method": {m: acceptance_of(results, m) for m in SPECULATIVE if m in methods},
           "by_task_group": {}}
    for cat, cells in summ["by_category"].items():
        group = {"tau": {m: cells[m]["mean_accepted"] for m in methods}}
        for m in SPECULATIVE:
            if m in methods:
                acc = acceptance_of(results, m, cat)
                group[m] = {k: acc[k] for k in ("acceptance_rate", "position_rates",
                                                "accepted_histogram", "windows")}
        out["by_task_group"][cat] = group
    return out


def cost_figures(cal: dict) -> dict:
    """Measured costs on this machine (seconds), from the run's latency-model calibration."""
    t1, tk, td = cal.get("t_target_1"), cal.get("t_target_k"), cal.get("t_draft_token")
    k = (cal.get("gamma_measured") or cal.get("gamma")) + 1
    return {"target_forward_s": t1, "draft_forward_s": td,
            "draft_share_of_target": td / t1 if td and t1 else None,
            "verify_tokens": k, "verify_s": tk,
            "verify_over_decode": tk / t1 if tk and t1 else None,
            "contention": cal.get("contention"), "source": cal.get("source")}


def speed_figures(results: dict, acceptance: dict) -> dict:
    overall = results["summary"]["overall"]
    out = {}
    for m in results["meta"]["methods"]:
        c = overall[m]
        out[m] = {"speedup_over_ar": 1.0 if m == "ar" else c["speedup_median"],
                  "speedup_mean": 1.0 if m == "ar" else c["speedup_mean"],
                  "tokens_per_s": c["tokens_per_s"], "tau": c["mean_accepted"],
                  "mismatches": c["mismatches"], "checked": c["checked"], "errors": c["errors"],
                  "error": next((q["methods"][m]["error"] for q in results["questions"]
                                 if q["methods"].get(m, {}).get("error")), None)}
    if "mirror" in out:
        out["mirror"].update(hit_rate=overall["mirror"]["hit_rate"],
                             draft_hidden=overall["mirror"]["draft_hidden_fraction"],
                             exit_top_kappa_coverage=acceptance["by_method"]["mirror"][
                                 "exit_top_kappa_coverage"])
    return out


def best_settings(profile, replayed: dict) -> dict:
    """The latency model's best gamma (SD) and gamma + branch budget (Mirror-SD) for a What-if
    profile; the gain is over the replay of the recorded steps at the run's settings
    (`replayed`: method -> projected speedup), the profile's own estimate of the run."""
    from dataclasses import replace

    from mirror_sd.engine.tuning import choose

    out = {}
    for m in SPECULATIVE:
        cal = profile.calibration_for(m)
        if cal.t_target_1 is None:  # Mirror-SD's own costs carry no AR decode: the pooled one's
            cal = replace(cal, t_target_1=profile.calibration.t_target_1)
        try:
            g, b, s, _ = choose(cal, method=m, fixed_budget=cal.branch_budget if m == "sd" else None)
        except (ValueError, TypeError, ZeroDivisionError):
            continue
        here = replayed.get(m)
        out[m] = {"gamma": g, **({"branch_budget": b} if m == "mirror" else {}),
                  "projected_speedup": s, "projected_gain": s / here if s and here else None}
    return out


def projection_figures(results: dict) -> dict:
    """Profiles (a), (b), (c) of the What-if: the recorded steps replayed at the run's
    settings, and each profile's best settings by the latency model. All projections."""
    from mirror_sd.bench import records_from_results
    from mirror_sd.latency.whatif_hardware import project_all

    meta, s = results["meta"], results["meta"]["settings"]
    out = project_all(records_from_results(results), target_layers=meta["target_layers"],
                      gamma=s["gamma"], exit_layer=meta["exit_layer"],
                      branch_budget=s["branch_budget"], kappa=s["kappa"], settings=s,
                      pair={"target": meta.get("target"), "draft": meta.get("draft")},
                      source="the pair report's run")
    profiles = {}
    for key, prof in out["profiles"].items():
        proj = out["projected"][key]
        profiles[key] = {"name": prof.name, "projection": True,
                         "speedup_at_run_settings": {m: proj[m]["speedup"] for m in proj},
                         "replayed": all(p["replayed"] for p in proj.values()),
                         "best_settings": best_settings(prof, {m: proj[m]["speedup"] for m in proj}),
                         "notes": list(prof.notes),
                         # where Mirror-SD's hit rate comes from here, and the steps behind it
                         "hit_source": prof.hit_source.words() if prof.hit_source is not None else None}
    return {"projection": True, "note": lm.PROJECTION_NOTE,
            "settings_note": "(a) and (b) replay the recorded steps at the run's settings; (c) "
                             "uses its own window (gamma 7, the paper's) with the run's "
                             "acceptance; best_settings is the latency model's search over gamma "
                             "and branch budget for each profile (expected values), its "
                             "gain over the replay at the run's settings",
            "measured_decode_speedup": out["measured_speedup"], "profiles": profiles}


def recommendation(results: dict, projections: dict) -> dict:
    """Settings for this machine (profile (a)) with the projected gain of each change."""
    s, meta = results["meta"]["settings"], results["meta"]
    best = projections["profiles"]["a"]["best_settings"]
    rec = {"precision": {"value": meta["precision"], "projected_gain": None,
                         "why": "the precision this report measured: the latency model does "
                                "not project precisions, so run the report again with another "
                                "--precision to compare"}}
    sd, mirror = best.get("sd"), best.get("mirror")
    if sd:
        rec["gamma_sd"] = {"value": sd["gamma"], "run": s["gamma"], "projected_gain": sd["projected_gain"],
                           "projected_speedup": sd["projected_speedup"]}
    if mirror:
        rec["gamma_mirror"] = {"value": mirror["gamma"], "run": s["gamma"],
                               "projected_speedup": mirror["projected_speedup"]}
        rec["branch_budget"] = {"value": mirror["branch_budget"], "run": s["branch_budget"],
                                "projected_gain": mirror["projected_gain"],
                                "projected_speedup": mirror["projected_speedup"]}
    rec["window"] = priced_window(cost_figures(results["latency_model"]["calibration"]),
                                  acceptance_of(results, "sd") if "sd" in results["meta"]["methods"] else None,
                                  s["window"])
    speeds = {m: results["summary"]["overall"][m]["speedup_median"] for m in ("sd", "mirror", "hf-assisted")
              if m in results["meta"]["methods"]}
    fastest = max((m for m in speeds if speeds[m]), key=lambda m: speeds[m], default=None)
    rec["method"] = {"value": fastest if fastest and speeds[fastest] > 1 else "ar",
                     "fastest": fastest, "measured_speedup": speeds.get(fastest) if fastest else None}
    rec["projection"] = True
    return rec


def priced_window(costs: dict, acceptance: dict | None, ran: str) -> dict:
    """SD's window length for this machine by the priced windows' own pricing
    (engine/pricing.py best_window): the run's measured costs (decode, draft forward, verify at
    the measured rows) and SD's acceptance per window position; 0: drafting does not pay here,
    decode. A projection (expected values)."""
    from mirror_sd.engine import pricing

    t1, td, tk = costs.get("target_forward_s"), costs.get("draft_forward_s"), costs.get("verify_s")
    rates = [r["rate"] for r in (acceptance or {}).get("position_rates", [])]
    if not (t1 and td and tk and rates and rates[0] is not None):
        return {"value": ran, "length": None, "why": "the run measured too little to price a window"}
    for i in range(1, len(rates)):  # a position no window reached: the rate before it carries
        rates[i] = rates[i - 1] if rates[i] is None else rates[i]
    prices = pricing.Prices([(1, t1), (costs["verify_tokens"], tk)], {"draft": td})
    best, table = pricing.best_window(prices, {"draft": (rates, 1, len(rates))})
    return {"value": "priced", "ran": ran, "length": best.k, "projected_speedup": best.rate * t1,
            "why": "priced on this run's costs and SD's acceptance per position: "
                   + pricing.explain(best, table)}


def cross_figures(results: dict) -> dict | None:
    cross = results["meta"].get("cross_tokenizer")
    if not cross:
        return None
    cov = [q["shared_coverage"] for q in results["questions"] if "shared_coverage" in q]
    return {**cross, "output_coverage": sum(cov) / len(cov) if cov else None,
            "output_coverage_min": min(cov) if cov else None}


def pair_figures(results: dict) -> dict:
    """Everything the report says about one pair, from one benchmark results dict."""
    meta = results["meta"]
    acceptance = acceptance_figures(results)
    try:
        projections = projection_figures(results)
    except (ValueError, TypeError, KeyError, ZeroDivisionError) as e:
        projections = {"projection": True, "error": f"{type(e).__name__}: {e}", "profiles": {}}
    return {
        "target_model": meta["target"], "draft_model": meta["draft"], "precision": meta["precision"],
        "draft_precision": meta.get("draft_precision"), "settings": meta["settings"],
        "questions": meta["questions"], "task_groups": meta["categories"],
        "methods": meta["methods"], "exit_layer": meta["exit_layer"],
        "acceptance": acceptance,
        "costs": cost_figures(results["latency_model"]["calibration"]),
        "speed": speed_figures(results, acceptance),
        "projections": projections,
        "recommendation": (recommendation(results, projections)
                           if projections.get("profiles", {}).get("a") else None),
        "cross_tokenizer": cross_figures(results),
    }

