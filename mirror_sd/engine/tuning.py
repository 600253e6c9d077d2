"""gamma and branch budget chosen from measured lane speeds (`--gamma auto`, `--branch-budget auto`).

A short probe decodes the prompt with AR, SD and Mirror-SD (a few tokens each, the settings
given), calibrates the latency model from those runs' spans (target forward by window size,
draft token, branch forwards, contention, acceptance, hit rate), and picks the (gamma, budget)
whose *projected* Mirror-SD speedup is highest. The projection is a model (latency_model.py),
not a measurement; the choice and its projected table are reported as such.

The budget is a trade-off: each extra branch costs a row of the batched draft forwards
(t_branch_row) and buys the hits of the verdicts ranked there (the probe's verdict ranks give
an estimated hit rate per budget, Calibration.hit_rates; a short probe gives few steps, so the
estimate is coarse). Without ranks the hit rate is held and more branches only cost.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from mirror_sd.latency import latency_model as lm

GAMMAS = range(1, 9)
BUDGETS = range(1, 9)
PROBE_TOKENS = 16


@dataclass
class Choice:
    gamma: int
    branch_budget: int
    projected_speedup: float | None  # the tuned method over AR, from the latency model
    probe_s: float
    table: list[dict] = field(default_factory=list)  # every (gamma, budget) tried
    note: str = lm.PROJECTION_NOTE

    def to_dict(self) -> dict:
        return {"gamma": self.gamma, "branch_budget": self.branch_budget,
                "projected_speedup": self.projected_speedup, "probe_s": round(self.probe_s, 2),
                "projection": True, "note": self.note, "table": self.table}


def choose(cal: lm.Calibration, gammas=GAMMAS, budgets=BUDGETS, method: str | None = None,
           fixed_gamma: int | None = None, fixed_budget: int | None = None) -> tuple[int, int, float | None, list[dict]]:
    """The (gamma, budget) with the best projected speedup of `method` (None: the modelled
    early-exit method, Mirror-SD); ties go to the smaller setting (less work wasted on a miss)."""
    method = method or _early_exit_method()
    table, best = [], None
    for g in ([fixed_gamma] if fixed_gamma else gammas):
        for b in ([fixed_budget] if fixed_budget else budgets):
            try:
                speedup = lm.what_if(cal, gamma=g, branch_budget=b)["projected"][method]["speedup"]
            except (ValueError, TypeError, ZeroDivisionError):
                speedup = None
            table.append({"gamma": g, "branch_budget": b, "speedup": speedup})
            if speedup is not None and (best is None or speedup > best[2] + 1e-9):
                best = (g, b, speedup)
    if best is None:
        raise ValueError("the latency model could not project any setting from the probe")
    return best[0], best[1], best[2], table


def probe(pair, prompt_ids: list[int], settings, tokens: int = PROBE_TOKENS) -> lm.Calibration:
    """Run the methods the latency model knows (AR, SD and Mirror-SD: the registry's
    `modelled`) for `tokens` tokens each and calibrate the latency model at the exit layer
    the early-exit method ran at (the prefix/suffix split of its target forwards)."""
    from mirror_sd.engine.mirror.exit_layer import choose_exit_layer_for, ran_at
    from mirror_sd.engine.registry import METHODS, having
    from mirror_sd.engine.windows import drafting_every_step

    # the draft model drafting every step: the latency model is calibrated on its drafting costs
    short = replace(drafting_every_step(settings), max_new_tokens=min(tokens, settings.max_new_tokens))
    records = []
    for method in having(modelled=True):
        events = list(METHODS[method](pair, short).generate(prompt_ids))
        records += lm.runs_from_events(events, method)
    early = having(modelled=True, early_exit=True)
    exit_layer = (ran_at(r["stats"] for r in records if r["method"] in early)
                  or choose_exit_layer_for(pair, short).layer)
    return lm.calibrate(records, target_layers=pair.target_layers, gamma=short.gamma,
                        exit_layer=exit_layer, branch_budget=short.branch_budget, kappa=short.kappa,
                        source="the auto-tuning probe")


def _early_exit_method() -> str:
    from mirror_sd.engine.registry import having
    return having(modelled=True, early_exit=True)[0]


def auto_settings(pair, prompt_ids: list[int], settings, gamma_auto: bool, budget_auto: bool,
                  method: str | None = None) -> tuple[object, Choice]:
    """`settings` with gamma and/or branch budget replaced by the probe's choice."""
    t0 = time.perf_counter()
    cal = probe(pair, prompt_ids, settings)
    gamma, budget, speedup, table = choose(cal, method=method,
                                           fixed_gamma=None if gamma_auto else settings.gamma,
                                           fixed_budget=None if budget_auto else settings.branch_budget)
    choice = Choice(gamma, budget, speedup, time.perf_counter() - t0, table)
    return replace(settings, gamma=gamma, branch_budget=budget), choice
