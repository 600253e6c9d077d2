"""Plain-text formatters of figures, shared by the benchmark's summary, the pair report, the
What-if report and the command line: a missing figure (None) is written as `none`."""
from __future__ import annotations


def number(x, spec: str = ".2f", none: str = "n/a") -> str:
    """`x` formatted with `spec` ("1.23", "45%"), `none` for None."""
    return none if x is None else format(x, spec)


def times(x, none: str = "n/a") -> str:
    """A ratio as "1.23x" (a speedup), `none` for None."""
    return none if x is None else f"{x:.2f}x"


def percent(x, none: str = "n/a") -> str:
    """A share as "45%", `none` for None."""
    return none if x is None else f"{x:.0%}"
