"""What Mirror-SD's target lane pays for running beside the draft on one CPU, in two parts.

On a 2-core CPU SD and AR give every forward both cores, while Mirror-SD's two lanes get one
core each while both work. Its target lane's verify, measured beside the draft, is slower than
SD's verify alone by the run's contention

    contention   c = Mirror-SD's target lane beside the draft / SD's verify forward alone
                     (both from the run's own spans: profile (b) removes it)

and that is the product of two costs named apart here:

    core split   s = the target's forward on one thread / on two, each alone
                     (research/thread_split.py, measured per precision on this machine)
    interference i = c / s: what is left, two jobs sharing one memory bus and its caches

Profile (d), a CPU host with more cores (8 vCPU, the larger CPU hardware of hosted
Spaces), is grounded in those two: every lane on cores of its own at its measured
two-thread speed alone (more threads are not assumed to help: a floor), the interference
kept as measured (the lanes still share one memory bus), the draft lane and the work a hit
leaves after its verdict as in profile (b). Every figure it gives is a projection.
"""
from __future__ import annotations

from mirror_sd.latency import latency_model as lm
from mirror_sd.bench.whatif import Profile

# The default pair as the engine loads it, one forward over `rows` new tokens after 100 tokens
# of context, median of 5 (1-thread ms / 2-thread ms), alone on an idle 2-core AMD EPYC (AVX2):
# python research/thread_split.py --precisions int8,fp32 --reps 5 (research/thread_split.json).
# int8 at 1 / 5 / 8 / 13 rows: 46.2/26.1, 88.4/48.3, 146.0/77.2, 225.5/118.6 ms (the machine
# of docs/performance.md's "Each lane at full speed"; on an earlier one 59.9/44.2, 105.9/56.9,
# 156.8/84.1, 246.5/128.2 ms: split 1.36 / 1.86 / 1.87 / 1.92x);
# fp32 (oneDNN): 186.6/159.6, 225.8/171.3, 277.8/210.6, 342.0/227.0 ms. On another machine of
# this kind (busy) int8 split 1.52 / 1.79 / 1.78 / 1.86x: the split, not the speed, is what
# the What-if uses, and it moved by up to 0.4 at one row between machines.
CORE_SPLIT = {
    "int8": {1: 1.771, 5: 1.829, 8: 1.891, 13: 1.901},
    "fp32": {1: 1.169, 5: 1.318, 8: 1.319, 13: 1.506},
}
CORE_SPLIT_SOURCE = ("one- against two-thread forwards of the default pair's target, measured alone "
                     "by research/thread_split.py on an idle 2-core CPU")
CORES_D = 8
PROFILE_D = f"CPU host with {CORES_D} vCPU, each lane on cores of its own"


def core_split(precision: str | None, rows: int) -> float | None:
    """The target's 1-thread / 2-thread forward time at the measured row count nearest `rows`
    (None: not measured at this precision)."""
    table = CORE_SPLIT.get(str(precision or ""))
    if not table:
        return None
    return table[min(table, key=lambda k: (abs(k - rows), k))]


def split_costs(profiles: dict, precision: str | None) -> dict:
    """{contention, core_split, interference, rows, source, note} for Mirror-SD's target
    lane in profile (a); None entries where the run or the table does not say."""
    a = profiles.get("a")
    pooled, mirror = (a.calibration, a.mirror) if a is not None else (None, None)
    out = {"projection": False, "contention": None, "core_split": None, "interference": None,
           "rows": None, "precision": precision, "source": CORE_SPLIT_SOURCE, "note": ""}
    if mirror is None or not mirror.t_target_k or pooled is None or not pooled.t_target_k:
        out["note"] = "the run has no Mirror-SD and SD verify forwards to compare"
        return out
    rows = (mirror.gamma_measured or mirror.gamma) + 1
    c = max(1.0, mirror.t_target_k / pooled.t_target_k)
    s = core_split(precision, rows)
    out.update(contention=c, rows=rows, core_split=s)
    if s is None:
        out["note"] = (f"no one- against two-thread measurement at precision {precision}: "
                       "the contention is not split")
        return out
    if c < s:  # the run's two-thread forwards did not have two free cores
        out["note"] = (f"Mirror-SD's verify beside the draft {c:.2f}x SD's alone, less than the core "
                       f"split alone ({s:.2f}x at {rows} rows, measured on an idle machine): this run's "
                       f"forwards did not show the whole split (a busy machine, or verifies of other "
                       f"lengths than {rows} rows), so the interference cannot be read from it")
        return out
    out["interference"] = c / s
    out["note"] = (f"Mirror-SD's verify beside the draft {c:.2f}x SD's alone: the core split "
                   f"{s:.2f}x (one thread instead of two, {rows} rows) times {c / s:.2f}x "
                   f"interference (the shared memory bus)")
    return out


def many_cores_profile(profiles: dict, costs: dict) -> Profile | None:
    """Profile (d) from profile (b) and the split costs (None when the contention is not
    split: without the thread scaling it would be a guess)."""
    b, a = profiles.get("b"), profiles.get("a")
    if b is None or a is None or a.mirror is None or costs.get("interference") is None:
        return None
    alone = b.mirror.t_target_k  # SD's verify alone (two threads), as profile (b) took it
    d_mirror = lm.apply_changes(b.mirror, target_scale=costs["interference"])
    notes = [f"Mirror-SD's target lane {a.mirror.t_target_k * 1e3:.0f} -> {alone * 1e3:.0f} x "
             f"{costs['interference']:.2f} = {d_mirror.t_target_k * 1e3:.0f} ms: no core split (each "
             f"lane keeps two threads or more; more are not assumed to help), the memory-bus "
             f"interference kept as measured",
             "AR and SD as measured (they never run two lanes at once); the draft lane and the work "
             "a hit leaves after its verdict as in (b)"]
    return Profile("d", PROFILE_D, b.calibration, dict(b.host_s), notes, mirror=d_mirror, tail=b.tail)
