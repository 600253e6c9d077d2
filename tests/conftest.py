"""Fixtures shared by the app's tests."""
from __future__ import annotations

import pytest


@pytest.fixture()
def drafting_pays(monkeypatch):
    """Priced windows as on a machine where a draft forward costs 15% of a target decode: the
    tiny models' own timings (a draft as dear as its target) would price every window out and
    both speculative methods would decode every step. The app runs in this process."""
    from mirror_sd.engine.pricing import Costs, Prices
    prices = Prices([(1, 1.0), (2, 1.05), (9, 1.4)], {"draft": 0.15, "lookup": 0.0, "catchup": 0.0})
    monkeypatch.setattr(Costs, "snapshot", lambda self: prices)
