"""What a draft window is worth on this machine: its expected tokens over its measured cost.

Pure (no models, no threads of its own). A window of k drafted tokens, verified in one
target forward over k + 1 rows, commits 1 + sum_{i=1..k} a_1 * ... * a_i tokens on average
(a_i: the chance that position i is accepted once 1..i-1 were) and costs
k * t_draft + t_verify(k + 1) + t_host(drafted); drafting nothing (k = 0) is a plain target
decode step: one token for t_verify(1) + t_host(decoded). t_host is the step's time outside
the draft's and the target's forwards (the acceptance rule over the vocabulary, sampling,
the window's bookkeeping): measured at int8 on the default pair it is about a third of a
target decode for a drafted step, so a window priced without it looked cheaper than it was.
`best_window` picks the k with the most expected tokens per second.

The costs are the run's own, measured while it goes (`Costs`: running medians of the last
measurements of each verify size and of each proposer's cost per drafted token), seeded
conservatively before the first measurement: a draft forward at 60% of a target decode (this
pair measures 39-53%), each extra verify row at 10% of a decode. The acceptance per position
is a running estimate (`PositionAcceptance`: decayed counts with a prior), per proposer.
Costs kept from the pair's earlier runs are a prior: a run's first measurement of a figure
replaces their history (`Costs.begin_run`), and until it has measured the draft a probe
also hopes for the seeds' price, so a draft priced too dear on a busier machine is measured
again rather than never drafted.
Nothing here reads the target's distributions for a window not yet verified, so a length
chosen from these figures keeps the acceptance rule lossless.
"""
from __future__ import annotations

import copy
import statistics
import threading
from collections import deque
from dataclasses import dataclass

SEED_DRAFT_SHARE = 0.6  # draft forward / target decode before the run measured one
SEED_ROW_SHARE = 0.10  # each verify row past the first / target decode before measured
SEED_CATCHUP_SHARE = 0.2  # the draft's prefill per token / its forward per token before measured
PROBE_ACCEPT = 0.85  # the acceptance a probe hopes for: it must be able to pay its catch-up
PROBE_MARGIN = 0.1  # once the pair has shown its acceptance, a probe hopes for that much more
PROBE_EVIDENCE = 3.0  # decayed windows of a proposer before its shown acceptance bounds the hope
SEED_ACCEPT = {"draft": 0.6, "lookup": 0.4}  # per-position acceptance before any verdict
PRIOR_WEIGHT = 2.0  # windows the seed acceptance weighs as
DECAY = 0.9  # each verdict weighs the earlier ones down: the estimate follows the text
CAL_DECAY = 0.97  # the calibration's bins fill more slowly: a longer memory
SAMPLES = 9  # running medians over the last measurements
MAX_POSITIONS = 33


class RunningMedian:
    """The median of the last `SAMPLES` values (None before the first)."""

    def __init__(self, n: int = SAMPLES):
        self.values: deque = deque(maxlen=n)

    def add(self, x: float) -> None:
        self.values.append(float(x))

    def value(self) -> float | None:
        return statistics.median(self.values) if self.values else None


class Costs:
    """The run's measured costs in seconds: target forwards by rows (rows 1: a plain decode)
    and each proposer's time per drafted token. Fed by the decoder's lane (another thread
    than the draft lane that reads them under Mirror-SD): guarded by a lock."""

    def __init__(self):
        self._verify: dict[int, RunningMedian] = {}
        self._draft: dict[str, RunningMedian] = {}
        self._lock = threading.Lock()
        self._earlier: set = set()  # figures measured by earlier runs only (`begin_run`)

    def begin_run(self) -> None:
        """A new run reads these costs: what earlier runs measured stays its estimate until
        this run measures the same figure, whose first measurement then replaces their
        history (this machine's speed can change by 2x between runs: a median of stale
        figures would otherwise outlive it, and a draft priced too dear would never be
        measured again). The plain decode (rows 1) is shared and fed by every run: kept."""
        with self._lock:
            self._earlier = {("verify", r) for r in self._verify if r != 1} | {("draft", k) for k in self._draft}

    def from_earlier_runs(self, source: str) -> bool:
        """Whether `source`'s cost per drafted token comes from earlier runs only (or nowhere)."""
        with self._lock:
            return source not in self._draft or ("draft", source) in self._earlier

    def _median(self, table: dict, kind: str, key) -> RunningMedian:
        """`table[key]` for a new measurement, emptied first where it held earlier runs' only."""
        if (kind, key) in self._earlier:
            self._earlier.discard((kind, key))
            table[key] = RunningMedian()
        return table.setdefault(key, RunningMedian())

    def share_decode(self, decode: RunningMedian) -> None:
        """Read and feed the plain decode's cost (rows 1) from `decode`: one figure for every
        method on this pair (AR's steps measure it too), so a run that has not decoded yet
        prices decoding with what a decode costs here rather than a guess from its verifies
        (a 2-row verify at int8 costs about 1.3 decodes, not the seeded 1.1)."""
        with self._lock:
            self._verify[1] = decode

    def add_verify(self, rows: int, seconds: float) -> None:
        with self._lock:
            self._median(self._verify, "verify", int(rows)).add(seconds)

    def add_draft(self, source: str, seconds: float, tokens: int) -> None:
        if tokens > 0:
            with self._lock:
                self._median(self._draft, "draft", source).add(seconds / tokens)

    def add_host(self, drafted: bool, seconds: float) -> None:
        """A step's time outside its forwards (drafted: a window was verified; else a decode)."""
        with self._lock:
            self._median(self._draft, "draft", "host-drafted" if drafted else "host-decoded").add(max(0.0, seconds))

    def add_catchup(self, seconds: float, tokens: int) -> None:
        """The draft model's first forward of a window that fed `tokens` committed tokens at once
        (the prompt's prefill, or the tokens decoded while it was not drafting)."""
        if tokens > 2:
            with self._lock:
                self._median(self._draft, "draft", "catchup").add(seconds / tokens)

    def snapshot(self) -> "Prices":
        """The current estimates: every verify size, every proposer (seeds where unmeasured)."""
        with self._lock:
            points = {r: m.value() for r, m in self._verify.items() if m.values}  # a shared decode may be empty
            draft = {s: m.value() for s, m in self._draft.items()}
        return Prices(sorted(points.items()), draft)


@dataclass
class Prices:
    """Cost estimates from the measured points (rows, seconds), sorted by rows."""
    points: list
    draft: dict

    @property
    def decode_s(self) -> float:
        """A plain target decode: measured, or the smallest measured verify less the seeded
        per-row cost, or 1 (a unit: only ratios matter before anything is measured)."""
        if self.points and self.points[0][0] == 1:
            return self.points[0][1]
        if self.points:
            rows, t = self.points[0]
            return t / (1 + SEED_ROW_SHARE * (rows - 1))
        return 1.0

    def seeded(self) -> "Prices":
        """These prices with the draft's forwards and the verify past one row at the seeds
        (the plain decode, the host times and the catch-up kept): what a probe hopes for
        while the draft's cost comes from earlier runs only."""
        keep = {k: v for k, v in self.draft.items() if k.startswith("host-") or k == "catchup"}
        return Prices([(1, self.decode_s)], keep)

    def slope(self) -> float:
        """Seconds per extra verify row: least squares over the measured sizes, or the seed."""
        pts = [(1, self.decode_s)] + [p for p in self.points if p[0] > 1]
        if len({r for r, _ in pts}) < 2 or len(self.points) < 2:
            return SEED_ROW_SHARE * self.decode_s
        mr = sum(r for r, _ in pts) / len(pts)
        mt = sum(t for _, t in pts) / len(pts)
        var = sum((r - mr) ** 2 for r, _ in pts)
        return max(0.0, sum((r - mr) * (t - mt) for r, t in pts) / var)

    def verify_s(self, rows: int) -> float:
        """A target forward over `rows` rows: the measured median, else interpolated between
        the nearest measured sizes, else extrapolated along the slope."""
        pts = dict(self.points)
        if rows in pts:
            return pts[rows]
        pts.setdefault(1, self.decode_s)
        lower = max((r for r in pts if r < rows), default=None)
        upper = min((r for r in pts if r > rows), default=None)
        if lower is not None and upper is not None:
            w = (rows - lower) / (upper - lower)
            return pts[lower] + w * (pts[upper] - pts[lower])
        near = lower if lower is not None else upper
        return max(pts[near] + self.slope() * (rows - near), self.decode_s)

    def catchup_s(self, tokens: int) -> float:
        """The draft model's time to feed `tokens` committed tokens it lacks (measured per
        token, or the seed SEED_CATCHUP_SHARE of a draft forward per token); <= 2 tokens: 0
        (a window's first forward feeds them anyway)."""
        if tokens <= 2:
            return 0.0
        per = self.draft.get("catchup")
        return tokens * (per if per is not None else SEED_CATCHUP_SHARE * self.draft_s("draft"))

    def host_s(self, drafted: bool) -> float:
        """A step's time outside its forwards, measured (0 before the first measurement)."""
        return self.draft.get("host-drafted" if drafted else "host-decoded") or 0.0

    def draft_s(self, source: str) -> float:
        """Seconds per drafted token of a proposer: measured, or the seed (a lookup: 0)."""
        measured = self.draft.get(source)
        if measured is not None:
            return measured
        return 0.0 if source == "lookup" else SEED_DRAFT_SHARE * self.decode_s


class PositionAcceptance:
    """Running acceptance per window position: of the windows that reached position i
    (drafted it, accepted 1..i-1), the share that accepted it; counts decay by DECAY per
    window, with a prior of PRIOR_WEIGHT windows at the seed (position 1) or at the rate of
    the position before (later positions: where no window reached yet, the rate carries)."""

    def __init__(self, seed: float = 0.6):
        self.seed = seed
        self.reached = [0.0] * MAX_POSITIONS
        self.accepted = [0.0] * MAX_POSITIONS

    def observe(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        self.reached = [x * DECAY for x in self.reached]
        self.accepted = [x * DECAY for x in self.accepted]
        for i in range(min(drafted, MAX_POSITIONS)):
            if accepted >= i:
                self.reached[i] += 1
            if accepted > i:
                self.accepted[i] += 1

    def rates(self, k: int) -> list[float]:
        out, prior = [], self.seed
        for i in range(min(k, MAX_POSITIONS)):
            rate = (self.accepted[i] + PRIOR_WEIGHT * prior) / (self.reached[i] + PRIOR_WEIGHT)
            out.append(rate)
            prior = rate
        return out

    def pooled(self) -> float:
        """The acceptance over every position reached (the same prior at the seed)."""
        return (sum(self.accepted) + PRIOR_WEIGHT * self.seed) / (sum(self.reached) + PRIOR_WEIGHT)

    def copy(self) -> "PositionAcceptance":
        return copy.deepcopy(self)


class Calibration:
    """Running acceptance of a drafted token by the draft's own probability q of it (bins of
    q; counts decayed by CAL_DECAY per window, a prior of one token at 0.4 + 0.6 q): how far
    to trust a token the draft has just written. A lookup's q is always 1: its bin is the
    lookup's acceptance."""

    EDGES = (0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.99)

    def __init__(self):
        self.seen = [0.0] * (len(self.EDGES) + 1)
        self.kept = [0.0] * (len(self.EDGES) + 1)

    def _bin(self, q: float) -> int:
        return sum(q >= e for e in self.EDGES)

    def observe(self, q_probs: list[float], accepted: int) -> None:
        """A verified window: its tokens' q, `accepted` of them kept (the ones after the first
        rejection were never judged)."""
        self.seen = [x * CAL_DECAY for x in self.seen]
        self.kept = [x * CAL_DECAY for x in self.kept]
        for i, q in enumerate(q_probs[:accepted + 1]):
            b = self._bin(q)
            self.seen[b] += 1
            self.kept[b] += i < accepted

    def accept(self, q: float) -> float:
        b = self._bin(q)
        return (self.kept[b] + 0.4 + 0.6 * q) / (self.seen[b] + 1.0)

    def copy(self) -> "Calibration":
        return copy.deepcopy(self)


def worth_more(prices: Prices, source: str, survival: list[float], a_next: float) -> bool:
    """Whether drafting one more token raises the window's expected tokens per second.
    survival: the chance that each drafted token so far is accepted with all before it;
    a_next: the next token's acceptance once reached."""
    k = len(survival)
    tokens = 1.0 + sum(survival)
    seconds = k * prices.draft_s(source) + prices.verify_s(k + 1) + prices.host_s(True)
    more = tokens + (survival[-1] if survival else 1.0) * a_next
    more_s = seconds + prices.draft_s(source) + prices.verify_s(k + 2) - prices.verify_s(k + 1)
    return more / more_s > tokens / seconds


@dataclass(frozen=True)
class Option:
    """One priced window: k drafted tokens from `source` ("" for k = 0, a plain decode)."""
    k: int
    source: str
    tokens: float  # expected committed tokens
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


def expected_tokens(rates: list[float]) -> float:
    """1 + sum_i prod_{j<=i} a_j: the target's own token plus the expected accepted drafts."""
    total, alive = 1.0, 1.0
    for a in rates:
        alive *= a
        total += alive
    return total


def options(prices: Prices, rates: list[float], source: str, lo: int, hi: int,
            catchup: float = 0.0, room: int = 0) -> list[Option]:
    """Windows of lo..hi tokens from `source` (rates: its acceptance per position, >= hi).
    catchup: a one-time cost before this source can draft (the draft model's prefill of what
    it lacks), spread over the `room` tokens the run has left: each window carries the share
    of its expected tokens."""
    draft = prices.draft_s(source)
    out = []
    for k in range(max(1, lo), hi + 1):
        tokens = expected_tokens(rates[:k])
        share = catchup * tokens / room if catchup and room else 0.0
        out.append(Option(k, source, tokens, k * draft + prices.verify_s(k + 1) + prices.host_s(True) + share))
    return out


def best_window(prices: Prices, by_source: dict, zero: bool = True, behind: int = 0,
                room: int = 0) -> tuple[Option, list[Option]]:
    """(the best option, every option priced). by_source: source -> (rates, lo, hi); zero:
    whether a plain decode step (k = 0) is allowed; behind: committed tokens the draft model
    lacks (its catch-up is priced into its windows, spread over `room`)."""
    table = [Option(0, "", 1.0, prices.decode_s + prices.host_s(False))] if zero else []
    for source, (rates, lo, hi) in by_source.items():
        catchup = prices.catchup_s(behind) if source == "draft" else 0.0
        table += options(prices, rates, source, lo, hi, catchup, room)
    if not table:
        raise ValueError("no window to price")
    return max(table, key=lambda o: (o.rate, -o.k)), table


def _ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms"


def explain(best: Option, table: list[Option], probe: bool = False) -> str:
    """The decision in one line, e.g. 'drafting 3 would cost 120 ms for 1.9 expected tokens
    (decoding: 1 in 80 ms); decoded instead'."""
    decode = next((o for o in table if o.k == 0), None)
    drafted = [o for o in table if o.k > 0]
    if best.k == 0:
        alt = max(drafted, key=lambda o: o.rate, default=None)
        if alt is None:
            return f"decoded: 1 token in {_ms(best.seconds)}"
        return (f"drafting {alt.k} ({alt.source}) would cost {_ms(alt.seconds)} for "
                f"{alt.tokens:.1f} expected tokens (decoding: 1 in {_ms(best.seconds)}); decoded instead")
    head = "probing: " if probe else ""
    tail = f" (decoding: 1 in {_ms(decode.seconds)})" if decode else ""
    return (f"{head}drafting {best.k} ({best.source}): {best.tokens:.1f} expected tokens in "
            f"{_ms(best.seconds)}{tail}")
