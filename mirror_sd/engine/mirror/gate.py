"""Per step: overlap Mirror-SD's two lanes, or run them one after the other.

Overlapping pays where the draft's work beside the target costs the target nothing: on a
device of its own (another GPU, the CPU beside a GPU target) the lanes always overlap. Where
the two lanes share a CPU's cores, each lane has half the cores while both work, and the
target's verify forward on half the cores can take longer than the draft's whole window on
all of them (docs/performance.md, "Each lane at full speed"); where they share one GPU, one
Python process launches both lanes' kernels and eager forwards are launch-bound, so two at
once can take far longer than one after the other (placement.lanes_share_a_device). There,
under `lane_overlap` "auto", each step goes the way this pair's own measured steps favour:
overlapped (the target on its cores, the draft racing the verdict on the others) or one lane
after the other with every core (the target verifies, then the draft rolls the next window
out from the verdict, as plain SD does). The measure is a step's wall time beyond what a plain
decode costs (the run's shared decode figure), per drafted token (the window verified and the
next one drafted): the marginal price of drafting in that mode, which holds across window
lengths (a step's time per verified row would not: the verify's fixed part makes short windows
look dear, so a mode measured on short windows would lose whatever it costs). It is smoothed,
kept with the pair across runs (`pair.info["lane_costs"]`, per drafting settings), and the
mode that lost is tried again after `PROBE_EVERY` steps so that its figure stays current; each
try that loses again doubles the gap (up to `PROBE_MAX`, kept with the pair too), since a try
costs a step of the slower mode.
Both modes verify the same windows with the same acceptance rule: output is unchanged.
"""
from __future__ import annotations

OVERLAP_CHOICES = ("auto", "always")
PROBE_EVERY = 8  # steps between two tries of the mode that measured slower (at first)
PROBE_MAX = 64  # the longest gap: each try that loses again doubles it
SMOOTHING = 0.3  # weight of the newest step in a mode's running figure


class OverlapGate:
    def __init__(self, choice: str, shared_cores: bool, memory: dict):
        self.auto = choice == "auto" and shared_cores
        self.memory = memory  # {"overlap": ms, "serial": ms (per drafted token, beyond a decode), "gap": steps between tries}
        self.since_probe = 0
        self._trying = None  # during a try of the slower mode: the mode that was best before it
        self.counts = {"overlap": 0, "serial": 0}

    def overlap(self) -> bool:
        """Whether the next step overlaps the lanes."""
        if not self.auto:
            return True
        m = self.memory
        if "overlap" not in m:  # measure each mode once, overlap first
            return True
        if "serial" not in m:
            return False
        best = m["overlap"] <= m["serial"]
        self.since_probe += 1
        if self.since_probe >= m.get("gap", PROBE_EVERY):
            self.since_probe = 0
            self._trying = best  # the mode that was best before the try
            return not best
        return best

    def favoured(self) -> bool:
        """Whether the windows are priced for overlapped steps (else for steps one lane after
        the other): the mode the next steps will mostly run in. Where the lanes share a device,
        the mode measured cheaper once both are measured, before that the lanes one after the
        other (the target at full speed); elsewhere (a device each, or `always`) overlapped.
        Each mode's steps feed costs of their own (decoder.py): a verify forward on half the
        cores beside the draft costs up to three times one with every core, so one such figure
        in the other mode's running medians could price every longer window out."""
        if not self.auto:
            return True
        m = self.memory
        if "overlap" in m and "serial" in m:
            return m["overlap"] <= m["serial"]
        return False

    def record(self, overlapped: bool, wall_ms: float, tokens: int, decode_ms: float = 0.0) -> None:
        """A finished step: its mode, wall time from the verify's start to the next window
        being ready, its drafted tokens (the window verified and the next one) and what a plain
        decode costs (0: unknown), so that the figure is the step's price beyond a decode per
        drafted token."""
        key = "overlap" if overlapped else "serial"
        self.counts[key] += 1
        if not self.auto or tokens < 1:
            return
        per_row = max(wall_ms - decode_ms, 0.0) / tokens
        m = self.memory
        old = m.get(key)
        m[key] = per_row if old is None else (1 - SMOOTHING) * old + SMOOTHING * per_row
        tried = self._trying is not None and overlapped != self._trying
        if tried and "overlap" in m and "serial" in m:  # a try of the slower mode
            lost = per_row > m["overlap" if self._trying else "serial"]  # the try alone, against the best
            m["gap"] = min(2 * m.get("gap", PROBE_EVERY), PROBE_MAX) if lost else PROBE_EVERY
            self._trying = None

    def describe(self) -> str:
        n = self.counts
        line = f"lanes overlapped in {n['overlap']} of {n['overlap'] + n['serial']} steps"
        if self.auto and "overlap" in self.memory and "serial" in self.memory:
            line += (f" (the gate's step cost, a step's time beyond a plain decode per drafted token: "
                     f"{self.memory['overlap']:.1f} ms with the lanes overlapped, "
                     f"{self.memory['serial']:.1f} ms one after the other)")
        return line
