"""The settings each What-if profile would pick, searched among those the run can replay.

A profile that moves the draft to a device of its own (b), to more cores (d) or to an
accelerator pair (c) changes what the best settings are: with the draft's work off the
target's cores, more branches cost less, for instance. So for each of those profiles the
projection searches, per method, the settings it can replay from the recorded steps and
keeps the fastest:
- each recorded variant of a method as it ran (its gamma, window policy, branch length,
  exit layer: a benchmark may run `mirror:exit_layer=21` or `sd:gamma=6` beside the defaults);
- for Mirror-SD, every branch budget 1..16 from the verdict ranks each step recorded (a step
  hits at budget b when its verdict root ranked below b: whatif.at_budget). Hits and misses
  leave the windows as they were (a hit and a miss hand over the same window), so the replay
  keeps every window and verdict. At another budget the draft lane's rows per batched forward
  change; on this machine's profiles the work a hit still needed after its verdict is scaled
  by the cost of one batched forward (tail_at_budget).
A gamma, window policy or exit layer no variant ran cannot be replayed (the windows, verdicts
and hit rates would all change): the result names them instead of guessing.
Every figure is a projection.
"""
from __future__ import annotations

from dataclasses import replace

from mirror_sd.latency import latency_model as lm
from mirror_sd.latency import whatif as wi
from mirror_sd.latency.step_model import MAX_BUDGET

SEARCHED = ("gamma", "window", "branch_extend", "exit_layer", "branch_budget")
_TYPES = {"gamma": int, "branch_budget": int, "exit_layer": int, "window": str, "branch_extend": str,
          "kappa": int}


def variant_settings(method: str, base: dict, stats_list) -> dict:
    """The searched settings a recorded method name ran with: the run's `base` settings, the
    name's ':key=value' changes, the exit layer the runs report."""
    out = {k: base.get(k) for k in SEARCHED}
    for part in str(method).split(":")[1:]:
        key, _, value = part.partition("=")
        if key in _TYPES:
            out[key] = _TYPES[key](value)
    layers = [st.get("exit_layer") for st in stats_list if st.get("exit_layer")]
    if layers:
        out["exit_layer"] = layers[0]
    if wi.base_method(method) == "sd":
        for k in ("branch_extend", "exit_layer", "branch_budget"):
            out.pop(k, None)
    return out


def tail_at_budget(profile: wi.Profile, budget: int, run_budget: int, window: float) -> tuple | None:
    """The draft's work after a verdict (per hit, per miss) at `budget` branches, from the
    measured one at `run_budget`: each batched forward before the verdict costs
    t_batch(rows at budget) / t_batch(rows as run), so the taken branch has that many fewer
    (or more) of its `window` tokens drafted when the verdict comes; the rest costs one-row
    forwards after it. None: the profile has no measured tail (the latency model prices it)."""
    if profile.tail is None:
        return None
    cal = profile.calibration_for("mirror")
    if cal.t_branch_1 is None or budget == run_budget:
        return profile.tail
    one = cal.t_branch_1

    def batch(b):
        rows = min(float(b), max(1.0, cal.branch_rows) * b / max(1, run_budget))
        return one + (rows - 1.0) * cal.t_branch_row

    hit, miss = profile.tail
    before = max(0.0, window - hit / one)  # tokens of the taken branch drafted before the verdict
    now = min(window, before * batch(run_budget) / batch(budget))
    return max(0.0, hit + (before - now) * one), miss


def mirror_at_budget(recorded, profile: wi.Profile, budget: int, run_budget: int, gamma: int,
                     replayable: bool = True) -> tuple[dict | None, list]:
    """(Mirror-SD's projected row, its recorded steps) at `budget` branches under `profile`:
    the hits the verdict ranks give at that budget, the draft's rows and tail scaled to it."""
    mine = [r for r in recorded if r.method == "mirror"]
    others = [r for r in recorded if r.method != "mirror"]
    windows = [w for r in mine for w in r.windows]
    window = sum(windows) / len(windows) if windows else float(gamma or 1)
    steps = [wi.at_budget(r, budget) for r in mine] if replayable and budget != run_budget else mine
    cal = profile.calibration_for("mirror")
    if budget != run_budget:
        cal = lm.apply_changes(cal, branch_budget=budget)
    prof = replace(profile, mirror=cal if profile.mirror is not None else None,
                   calibration=profile.calibration if profile.mirror is not None else cal,
                   tail=tail_at_budget(profile, budget, run_budget, window))
    return wi.project(others + steps, prof).get("mirror"), steps


def _mirror_candidates(recorded, profile: wi.Profile, settings: dict, run_budget: int, group: str):
    """(candidates, can replay budgets) for one Mirror-SD variant under `profile`. A profile
    whose hit rate is not the run's own (profile.reweight) keeps the run's budget: that rate
    was measured at it, and the ranks of a few steps cannot move it."""
    mine = [r for r in recorded if r.method == "mirror"]
    replayable = all(wi.at_budget(r, 1) is not None for r in mine) and mine and not profile.reweight
    budgets = range(1, MAX_BUDGET + 1) if replayable else [run_budget]
    out = []
    for b in budgets:
        row, steps = mirror_at_budget(recorded, profile, b, run_budget, settings.get("gamma"), bool(replayable))
        if row and row.get("speedup"):
            out.append({"method": group, "settings": {**settings, "branch_budget": b},
                        "speedup": row["speedup"], "decode_s": row["decode_s"],
                        "hits": sum(s.hits for s in steps), "steps": sum(s.steps for s in steps),
                        "replayed": True})
    return out, bool(replayable)


def search(groups: dict, profile_for, settings_of: dict, run_budget: int) -> dict:
    """{method: [candidates]} over recorded variants. `groups`: {variant name: recorded steps
    (AR's and the variant's)}; `profile_for(name)`: the profile calibrated with that variant."""
    out = {"sd": [], "mirror": [], "unpriced": [], "budgets_held": False}
    budgets_ok = True
    # one draft, one acceptance: SD's windows priced again at every variant's drafted steps
    # pooled (an SD run whose pricing drafted nothing here says nothing of the draft's acceptance)
    alpha = wi.shared_alpha([r for recorded in groups.values() for r in recorded])
    for name, recorded in groups.items():
        base = wi.base_method(name)
        profile = profile_for(name)
        if profile is None:  # this profile could not be built from the variant's spans
            if base == "mirror":
                out["unpriced"].append(name)
            continue
        if base == "mirror":
            cands, ok = _mirror_candidates(recorded, profile, settings_of[name], run_budget, name)
            budgets_ok &= ok
            out["budgets_held"] |= bool(profile.reweight)
            out["mirror"] += cands
            if not cands:  # the run's spans could not price this variant on this profile
                out["unpriced"].append(name)
        elif base == "sd":
            row = wi.project(recorded, profile, alpha).get("sd")
            if row and row.get("speedup"):
                out["sd"].append({"method": name, "settings": settings_of[name], "speedup": row["speedup"],
                                  "decode_s": row["decode_s"], "replayed": True})
    out["budgets_replayed"] = budgets_ok
    return out


def not_replayable(settings_of: dict, budgets_ok: bool, run_budget: int, held: bool = False) -> list[str]:
    """What the search could not try, and why (said, not guessed)."""
    def seen(key, base=None):
        return sorted({str(s.get(key)) for n, s in settings_of.items()
                       if s.get(key) is not None and (base is None or wi.base_method(n) == base)})

    notes = [f"gamma: only {', '.join(seen('gamma'))} (another gamma changes every window and "
             f"verdict: run it as a variant, e.g. mirror:gamma=6, to search it)",
             f"window policy: only {', '.join(seen('window'))} as recorded",
             f"exit layer: only {', '.join(seen('exit_layer', 'mirror')) or 'the run`s'} as recorded (a hit "
             f"rate at another exit layer needs a run there, e.g. mirror:exit_layer=21)"]
    if held:
        notes.append(f"branch budget: only the run's {run_budget} (the hit rate is not this run's own: "
                     f"it was measured or set at that budget, and this run's few overlapped steps "
                     f"cannot say what another budget buys)")
    elif budgets_ok:
        notes.append(f"branch budget 1..{MAX_BUDGET} replayed from the verdict ranks (a root "
                     f"rolled out counts as ready in time; the profile prices the time)")
    else:
        notes.append(f"branch budget: the runs recorded no verdict rank per step, only the run's "
                     f"{run_budget} is replayed")
    return notes


def choose(candidates: dict, key: str, name: str, notes: list[str]) -> dict:
    """The profile's pick per method (its fastest candidate) and Mirror-SD over SD."""
    best = {m: max(candidates[m], key=lambda c: c["speedup"]) if candidates[m] else None
            for m in ("sd", "mirror")}
    ratio = (best["mirror"]["speedup"] / best["sd"]["speedup"]
             if best["sd"] and best["mirror"] else None)
    return {"projection": True, "profile": key, "name": name, "sd": best["sd"], "mirror": best["mirror"],
            "mirror_over_sd": ratio, "not_replayable": list(notes),
            "candidates": sorted(candidates["sd"] + candidates["mirror"], key=lambda c: -c["speedup"])}
