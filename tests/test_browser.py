"""The app in a real browser: Debian's chromium driven by Playwright (no browser download).

Load the page, run the default example, check that the coloured tokens, the legend, the step
inspector and the timeline are on screen, and save a screenshot under test-output/. Once with
the tiny random pair (MIRROR_SD_TINY=1), once with the real default pair (`real_pair`).
Set MIRROR_SD_SCREENSHOT=assets/screenshot.png to also save the real run's screenshot there.
"""
from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
OUT = Path(__file__).resolve().parent.parent / "test-output"

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed "
                                "(apt-get install -y chromium)")
sync_api = pytest.importorskip("playwright.sync_api")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app():
    from ui.layout import build_demo, launch
    demo = build_demo()
    port = free_port()
    launch(demo, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture()
def page(browser):
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    try:
        yield pg
    finally:
        context.close()


def run_default_example(page, url: str, max_new_tokens: int | None, timeout_s: float) -> None:
    page.goto(url)
    page.wait_for_selector("#run-btn", timeout=60_000)
    assert page.input_value("#prompt textarea").startswith("Write a Python function")
    if max_new_tokens is not None:
        box = page.locator("#max-new-tokens input[type=number]")
        box.fill(str(max_new_tokens))
        box.press("Enter")
    page.click("#run-btn")
    page.wait_for_selector('#pane-mirror .msd-pane:is([data-state="done"], [data-state="error"], '
                           '[data-state="stopped"])', timeout=timeout_s * 1000)
    page.wait_for_selector("#inspector .msd-step-head", timeout=60_000)
    page.wait_for_selector("#timeline .js-plotly-plot .barlayer", timeout=60_000)


def check_rendered(page, n_tokens: int | None) -> None:
    status = page.inner_text("#status")
    assert "Done" in status, status
    mirror = page.locator('#pane-mirror .msd-pane[data-state="done"]')
    assert mirror.count() == 1
    if n_tokens is not None:
        assert f"{n_tokens} tokens" in mirror.inner_text()
    # coloured tokens: the AR pane is plain, the Mirror-SD pane shows the draft's work
    assert page.locator("#pane-ar .msd-tok.k-plain").count() >= 1
    kinds = {k: page.locator(f"#pane-mirror .msd-tok.k-{k}").count()
             for k in ("accepted", "hit", "fallback", "correction", "bonus")}
    assert sum(kinds.values()) >= 1, kinds
    colour = page.eval_on_selector("#pane-mirror .msd-tok:not(.k-plain)",
                                   "e => getComputedStyle(e).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), colour
    # the legend, with tooltips
    assert page.locator("#legend .msd-legend-item").count() == 6
    assert page.locator("#legend .msd-legend-item[title]").count() == 6
    # the step inspector: early exit, branch tree, verification
    for part in ("table.msd-ee", "table.msd-tree", "table.msd-verify"):
        assert page.locator(f"#inspector {part}").count() == 1, part
    assert page.locator("#inspector .msd-ee .msd-chip small").count() >= 1  # probabilities
    # the timeline: plotly bars on named lanes
    assert page.locator("#timeline .barlayer .point").count() >= 3
    ticks = page.locator("#timeline .ytick text").evaluate_all("ts => ts.map(t => t.textContent)")
    assert {"AR · target", "Mirror-SD · target", "Mirror-SD · draft"} <= set(ticks), ticks
    # the summary
    assert "the speed of AR" in page.inner_text("#summary")
    assert not page.errors, page.errors


def test_tiny_pair_in_the_browser(browser, page):
    OUT.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MIRROR_SD_TINY", "1")
        demo, url = start_app()
        try:
            run_default_example(page, url, 32, timeout_s=180)
            check_rendered(page, 32)
            # the step slider moves the inspector
            before = page.inner_text("#inspector .msd-step-head")
            slider = page.locator("#step-slider input[type=number]")
            slider.fill("0")
            slider.press("Enter")
            page.wait_for_function("b => document.querySelector('#inspector .msd-step-head')"
                                   ".innerText !== b", arg=before, timeout=20_000)
            assert page.inner_text("#inspector .msd-step-head").startswith("Step 0")
            # race replay ends with both runs complete again
            page.click("#race-btn")
            page.wait_for_function("() => document.querySelector('#status').innerText"
                                   ".includes('Race replay')", timeout=20_000)
            page.wait_for_selector('#pane-mirror .msd-pane[data-state="done"]', timeout=60_000)
            page.screenshot(path=str(OUT / "browser-tiny.png"), full_page=True)
        finally:
            demo.close()


@pytest.mark.real_pair
def test_real_default_pair_in_the_browser(browser, page, monkeypatch):
    OUT.mkdir(exist_ok=True)
    monkeypatch.delenv("MIRROR_SD_TINY", raising=False)
    tokens = int(os.environ.get("MIRROR_SD_BROWSER_TOKENS", "24"))
    demo, url = start_app()
    try:
        run_default_example(page, url, tokens, timeout_s=1200)
        check_rendered(page, tokens)
        page.screenshot(path=str(OUT / "browser-real.png"), full_page=True)
        target = os.environ.get("MIRROR_SD_SCREENSHOT")
        if target:
            shutil.copy(OUT / "browser-real.png", target)
    finally:
        demo.close()
        from ui import handlers
        handlers.PAIRS.clear()  # ~10 GB: later tests load their own copy
