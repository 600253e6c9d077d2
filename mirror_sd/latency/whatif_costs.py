"""What Mirror-SD's target lane pays for running beside the draft on one CPU, in two parts.

On a 2-core CPU SD and AR give every forward both cores, while Mirror-SD's two lanes get one
core each while both work. Its target lane's verify, measured beside the draft, is slower than
SD's verify alone by the run's contention

    contention   c = Mirror-SD's target lane beside the draft / SD's verify forward alone
                     (means over all verify steps, from the run's own spans, as a total needs;
                     the verdict's figure is a median at one window length; profile (b) removes it)

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

from mirror_sd import measured
from mirror_sd.latency import latency_model as lm
from mirror_sd.latency.whatif import Profile

# The default pair's target, one forward over `rows` new tokens, 1-thread / 2-thread time, per
# precision: measured by research/thread_split.py (mirror_sd/data/measured.json "core_split"
# holds the values, the command and the machine).
CORE_SPLIT = {precision: {int(rows): split for rows, split in table.items()}
              for precision, table in measured.values("core_split").items()}
CORE_SPLIT_SOURCE = measured.entries()["core_split"]["source"]
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
    shown = f"{rows:.0f}" if float(rows).is_integer() else f"{rows:.1f}"  # a mean window: one decimal
    out.update(contention=c, rows=rows, core_split=s)
    if s is None:
        out["note"] = (f"no one- against two-thread measurement at precision {precision}: "
                       "the contention is not split")
        return out
    if c < s:  # the run's two-thread forwards did not have two free cores
        out["note"] = (f"the contention factor {c:.2f}x is less than the core "
                       f"split alone ({s:.2f}x at {shown} rows, measured on an idle machine): this run's "
                       f"forwards did not show the whole split (a busy machine, or verifies of other "
                       f"lengths than {shown} rows), so the interference cannot be read from it")
        return out
    out["interference"] = c / s
    out["note"] = (f"the contention factor {c:.2f}x: the core split "
                   f"{s:.2f}x (one thread instead of two, {shown} rows) times {c / s:.2f}x "
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
