"""The app in a real browser: Debian's chromium driven by Playwright (no browser download).

Load the page, run the default example, check that the coloured tokens, the legend, the step
strip, the narrated step inspector and the timeline are on screen; click a step cell and a
token and see the inspector follow; check that each run's timeline ends at the wall time the
summary reports; save screenshots under out/screens/. Once with the tiny random pair
(test mode: build_demo(tiny=True)), once with the real default pair (`real_pair`).
Set MIRROR_SD_SCREENSHOT=assets/screenshot.png to also save the real run's screenshot there.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
OUT = Path(__file__).resolve().parent.parent / "out" / "screens"

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed "
                                "(apt-get install -y chromium)")
sync_api = pytest.importorskip("playwright.sync_api")

HEAD = "#inspector .msd-step-head"
# the summary's "wall time (s)" row as {run name: seconds}
WALL_TIMES_JS = """() => {
  for (const t of document.querySelectorAll('#summary table')) {
    const row = [...t.querySelectorAll('tbody tr')].find(
      r => r.querySelector('th') && r.querySelector('th').textContent.startsWith('wall time'));
    if (!row) continue;
    const heads = [...t.querySelectorAll('thead th')].slice(1).map(th => th.textContent.trim());
    const vals = [...row.querySelectorAll('td')].map(td => parseFloat(td.textContent));
    return Object.fromEntries(heads.map((h, i) => [h, vals[i]]));
  }
  return null;
}"""
# the timeline's last x per run (its "<run>: end" mark and its committed-tokens line)
TIMELINE_ENDS_JS = """() => {
  const plot = document.querySelector('#timeline .js-plotly-plot');
  const out = {};
  for (const t of plot.data) {
    const m = /^(.*): (end|tokens committed)$/.exec(t.name || '');
    if (m) out[t.name] = Math.max(...t.x);
  }
  return out;
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(tiny: bool):
    from ui.layout import build_demo, launch
    demo = build_demo(tiny=tiny)
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
        if not box.is_visible():  # controls start folded
            page.get_by_text("Sampling and length").first.click()
        box.fill(str(max_new_tokens))
        box.press("Enter")
        box.blur()
        # the slider takes the typed value on Enter/blur: give it time, or Run may read the old
        # one (check_rendered asserts the token count, so a run at the old value still fails)
        try:
            page.wait_for_function(
                "n => { const r = document.querySelector('#max-new-tokens input[type=range]');"
                " return r && r.value === String(n); }", arg=max_new_tokens, timeout=10_000)
        except sync_api.TimeoutError:
            page.wait_for_timeout(2_000)
    page.click("#run-btn")
    page.wait_for_selector('#pane-mirror .msd-pane:is([data-state="done"], [data-state="error"], '
                           '[data-state="stopped"])', timeout=timeout_s * 1000)
    page.wait_for_selector(HEAD, timeout=60_000)
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
    assert page.locator("#legend .msd-legend-item").count() >= 6
    assert page.locator("#legend .msd-legend-item[title]").count() == page.locator(
        "#legend .msd-legend-item").count()
    # the step strip, the narration, then early exit, branch tree, verification
    assert page.locator("#inspector .msd-strip .msd-step").count() >= 2
    assert page.locator("#inspector .msd-narration").count() == 1
    for part in ("table.msd-ee", "table.msd-tree", "table.msd-verify"):
        assert page.locator(f"#inspector {part}").count() == 1, part
    small = page.eval_on_selector("#inspector .msd-ee .msd-chip small",
                                  "e => parseFloat(getComputedStyle(e).fontSize)")
    assert small >= 12, small  # early-exit probabilities stay readable
    # the timeline: plotly bars on named lanes
    assert page.locator("#timeline .barlayer .point").count() >= 3
    ticks = page.locator("#timeline .ytick text").evaluate_all("ts => ts.map(t => t.textContent)")
    assert {"AR · target", "Mirror-SD · target", "Mirror-SD · draft"} <= set(ticks), ticks
    assert not page.errors, page.errors


def check_timeline_ends_at_wall_times(page) -> None:
    walls = page.evaluate(WALL_TIMES_JS)
    ends = page.evaluate(TIMELINE_ENDS_JS)
    assert walls and {"AR", "Mirror-SD"} <= set(walls), walls
    for name, wall in walls.items():
        for kind in ("end", "tokens committed"):
            # the table shows two decimals
            assert abs(ends[f"{name}: {kind}"] - wall) <= 0.006, (name, kind, ends, walls)


def wait_for_step(page, number: int, run: str) -> None:
    page.wait_for_function(
        "([n, run]) => { const h = document.querySelector('#inspector .msd-step-head');"
        " const c = document.querySelector('#inspector .msd-step.is-selected');"
        " return h && h.innerText.startsWith('Step ' + n + ' of') && c && c.dataset.run === run; }",
        arg=[number, run], timeout=20_000)


def check_step_strip_and_token_jump(page) -> None:
    cells = page.locator("#inspector .msd-strip .msd-step")
    n = cells.count()
    head = page.inner_text(HEAD)
    assert re.match(rf"Step \d+ of {n}\b", head), head
    # a cell selects its step
    target = cells.nth(n - 1)
    number = int(target.get_attribute("aria-label").split(",")[0].split()[1])
    assert number == n
    target.click()
    wait_for_step(page, n, "mirror")
    page.screenshot(path=str(OUT / "tiny-step-strip.png"), full_page=False,
                    clip=page.locator("#inspector").bounding_box())
    # a token in the Mirror-SD pane jumps to the step that committed it
    token = page.locator("#pane-mirror .msd-tok[data-step]").nth(0)
    step = token.get_attribute("data-step")
    want = page.locator(f'#inspector .msd-step[data-step="{step}"]').get_attribute("aria-label")
    token.click()
    wait_for_step(page, int(want.split(",")[0].split()[1]), "mirror")
    # a token in the SD pane shows SD's step
    tokens = page.locator("#pane-sd .msd-tok[data-step]")
    if tokens.count():
        sd_token = tokens.nth(tokens.count() - 1)
        sd_step = int(sd_token.get_attribute("data-step"))
        sd_token.click()
        page.wait_for_function("s => { const c = document.querySelector('#inspector .msd-step.is-selected');"
                               " return c && c.dataset.run === 'sd' && c.dataset.step === String(s); }",
                               arg=sd_step, timeout=20_000)


def check_whatif(page) -> None:
    """The What if panel: projections (so labelled) for every run, and a projected timeline."""
    page.wait_for_function("() => { const p = document.querySelector('#whatif-panel');"
                           " return p && p.querySelector('table'); }", timeout=30_000)
    text = page.inner_text("#whatif-panel")
    assert "projection" in text.lower()
    heads = page.locator("#whatif-panel table thead th").evaluate_all(
        "ths => ths.map(t => t.textContent.trim())")
    assert {"AR", "SD", "Mirror-SD"} <= set(heads), heads
    page.wait_for_selector("#whatif-timeline .js-plotly-plot .barlayer .point", timeout=30_000)


def test_tiny_pair_in_the_browser(browser, page):
    OUT.mkdir(parents=True, exist_ok=True)
    demo, url = start_app(tiny=True)
    try:
        run_default_example(page, url, 32, timeout_s=180)
        check_rendered(page, 32)
        page.screenshot(path=str(OUT / "tiny-page.png"), full_page=True)
        check_timeline_ends_at_wall_times(page)
        page.locator("#timeline").screenshot(path=str(OUT / "tiny-timeline.png"))
        check_step_strip_and_token_jump(page)
        # the race replay: the narration follows it, and the runs end complete again
        page.click("#race-btn")
        page.wait_for_selector("#inspector .msd-replay-tag", timeout=20_000)
        page.wait_for_selector('#pane-mirror .msd-pane[data-state="done"]', timeout=60_000)
        page.screenshot(path=str(OUT / "tiny-after-replay.png"), full_page=True)
        check_whatif(page)
        assert not page.errors, page.errors
    finally:
        demo.close()


def test_a_loaded_trace_in_the_browser(browser, page, tmp_path):
    """A trace of tiny runs, loaded without models: strip, token jump, timeline, what-if."""
    from mirror_sd.models.tiny import LAYERS
    from ui.traces import export_trace, write_trace
    from ui_records import PROMPT, tiny_records
    settings = {"temperature": 0.0, "gamma": 4, "kappa": 4, "branch_budget": 2, "max_new_tokens": 24}
    meta = {"target": "tiny-target", "draft": "tiny-draft", "target_layers": LAYERS,
            "exit_layer": LAYERS // 2, "precision": "fp32"}
    path = write_trace(export_trace(tiny_records(), PROMPT, settings, meta), str(tmp_path))
    demo, url = start_app(tiny=True)
    try:
        page.goto(url)
        page.wait_for_selector("#run-btn", timeout=60_000)
        upload = page.locator("#trace-upload input[type=file]")
        if not upload.count() or not page.locator("#trace-upload").is_visible():
            page.get_by_text("Traces and cache").first.click()
        page.set_input_files("#trace-upload input[type=file]", path)
        page.wait_for_function("() => document.querySelector('#status').innerText.includes('trace')",
                               timeout=30_000)
        page.wait_for_selector(HEAD, timeout=30_000)
        check_timeline_ends_at_wall_times(page)
        check_step_strip_and_token_jump(page)
        check_whatif(page)
        page.screenshot(path=str(OUT / "tiny-trace.png"), full_page=True)
        assert not page.errors, page.errors
    finally:
        demo.close()


@pytest.mark.real_pair
def test_real_default_pair_in_the_browser(browser, page, monkeypatch):
    OUT.mkdir(parents=True, exist_ok=True)
    from ui import handlers, session
    if handlers.tiny_models():  # test mode is per process: back to the real pair
        monkeypatch.setattr(handlers, "PAIRS", session.PairCache())
    tokens = int(os.environ.get("MIRROR_SD_BROWSER_TOKENS", "24"))
    demo, url = start_app(tiny=False)
    try:
        run_default_example(page, url, tokens, timeout_s=1200)
        check_rendered(page, tokens)
        check_timeline_ends_at_wall_times(page)
        page.screenshot(path=str(OUT / "real-full.png"), full_page=True)
        page.locator("#inspector").screenshot(path=str(OUT / "real-inspector.png"))
        page.locator("#timeline").screenshot(path=str(OUT / "real-timeline.png"))
        check_step_strip_and_token_jump(page)
        target = os.environ.get("MIRROR_SD_SCREENSHOT")
        if target:
            shutil.copy(OUT / "real-full.png", target)
    finally:
        demo.close()
        handlers.PAIRS.clear()  # ~10 GB: later tests load their own copy
