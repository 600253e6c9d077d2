"""The Pair report tab in a real browser (Debian's chromium via Playwright), on the tiny test
pairs: run the report for two drafts (the tiny pair's and the tiny cross-tokenizer one) and
check that the table, both acceptance curves on one plot and the histogram show the report's
own numbers; save a screenshot to out/screens/pair-report.png."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
OUT = Path(__file__).resolve().parent.parent / "out" / "screens"

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed")
sync_api = pytest.importorskip("playwright.sync_api")

# every trace of a plot: name and y values
TRACES_JS = """sel => [...document.querySelector(sel + ' .js-plotly-plot').data].map(
  t => ({name: t.name, y: Array.from(t.y)}))"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    import torch

    from ui.pair_report import demo
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out_root = tmp_path_factory.mktemp("reports")
    blocks = demo(out_root=str(out_root))
    port = free_port()
    blocks.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    yield f"http://127.0.0.1:{port}/", out_root
    blocks.close()
    torch.set_num_threads(before)


def test_pair_report_tab_two_drafts(app):
    url, out_root = app
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1400})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        page.wait_for_selector("#pair-report-run", timeout=60_000)
        page.fill("#pair-report-drafts textarea", "default, tiny-cross")
        box = page.locator("#pair-report-tokens input[type=number]")
        box.fill("16")
        box.press("Enter")
        box.blur()
        page.wait_for_function("() => document.querySelector('#pair-report-tokens input[type=range]')"
                               ".value === '16'", timeout=10_000)
        page.click("#pair-report-run")
        page.wait_for_selector("#pair-report-status li", timeout=600_000)
        page.wait_for_selector("#pair-report-curve .js-plotly-plot", timeout=60_000)
        page.wait_for_selector("#pair-report-hist .js-plotly-plot", timeout=60_000)
        (report_path,) = list(Path(out_root).glob("pair-report-*/report.json"))
        report = json.loads(report_path.read_text())
        status = page.inner_text("#pair-report-status")
        page.wait_for_function("() => (document.querySelector('#pair-report-table')?.innerText || '')"
                               ".includes('tiny-cross')", timeout=60_000)
        table = page.inner_text("#pair-report-table")
        curve = page.evaluate(TRACES_JS, "#pair-report-curve")
        hist = page.evaluate(TRACES_JS, "#pair-report-hist")
        OUT.mkdir(parents=True, exist_ok=True)
        page.locator("#pair-report").screenshot(path=str(OUT / "pair-report.png"))
        browser.close()
    assert not errors, errors
    pairs = report["pairs"]
    assert [p["status"] for p in pairs] == ["measured", "measured"]
    assert pairs[1]["cross_tokenizer"]["shared_tokens"] > 0  # the tiny cross pair
    assert all(p["settings"]["max_new_tokens"] == 16 for p in pairs)
    assert "default:" in status and "tiny-cross:" in status
    # the table: one row per draft, with the report's numbers as shown (the page's text holds
    # the header cells, then each row's cells, one per line)
    from ui.pair_report import TABLE_HEADERS
    cells = [c.strip() for c in table.splitlines() if c.strip()]
    start = cells.index("default")
    n = len(TABLE_HEADERS)
    rows = [cells[start:start + n], cells[start + n:start + 2 * n]]
    assert [r[0] for r in rows] == ["default", "tiny-cross"], table
    for row, p in zip(rows, pairs):
        assert row[2] == f"{p['speed']['sd']['tau']:.2f}"
        assert row[3] == f"{p['speed']['mirror']['tau']:.2f}"
        assert row[6] == f"{p['speed']['mirror']['speedup_over_ar']:.2f}x"
        assert row[8] == f"{p['speed']['mirror']['hit_rate']:.0%}"
    # both drafts' curves on one plot, each point the rate per window position
    by_name = {t["name"]: t["y"] for t in curve}
    for p in pairs:
        rates = [r["rate"] for r in p["acceptance"]["by_method"]["sd"]["position_rates"]]
        shown = by_name[f"{p['draft']}, SD"]
        assert len(shown) == len(rates)
        assert all((a is None and b is None) or abs(a - b) < 1e-9 for a, b in zip(shown, rates))
    # the histogram: one bar set per draft, the share of windows per accepted count
    assert [t["name"] for t in hist] == ["default", "tiny-cross"]
    for t, p in zip(hist, pairs):
        counts = p["acceptance"]["by_method"]["sd"]["accepted_histogram"]
        assert t["y"] == pytest.approx([c / sum(counts) for c in counts])
