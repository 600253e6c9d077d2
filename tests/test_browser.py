"""The app in a real browser: Debian's chromium driven by Playwright (no browser download).

Load the page, run the default example, check the verdict (it names the winner), one card per
method with its time to first token, decode and end-to-end speedups, and that the cards, the
panes, the bars and the timeline agree with figures recomputed here from the run's trace; a
rejected draft token struck through in the SD pane when SD rejected one; the page at most
~2,600 px tall at 1600 x 1200 with the folds closed; the step inspector follows a click on a
step or a token; save screenshots under out/screens/. Once with the tiny random pair
(test mode: build_demo(tiny=True)), once with the real default pair (`real_pair`).
Set MIRROR_SD_SCREENSHOT=assets/screenshot.png to also save the real run's screenshot there.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
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
# each card as {method: {row label: value text}}
CARDS_JS = """() => Object.fromEntries([...document.querySelectorAll('#cards .msd-card')].map(c => [
  c.dataset.method, Object.fromEntries([...c.querySelectorAll('tr')].map(
    r => [r.querySelector('th').textContent.trim(), r.querySelector('td').textContent.trim()]))]))"""
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
# every visible text on the page (folds closed) at least 12 px, in a colour with WCAG AA
# contrast on what is behind it (4.5:1; 3:1 for large text), opacity included: the offenders
UNREADABLE_JS = """() => {
  const rgba = s => { const m = s.match(/[\\d.]+/g) || []; return m.map(Number).concat([1]).slice(0, 4); };
  const lum = c => { const f = v => { v /= 255; return v <= .03928 ? v / 12.92 : ((v + .055) / 1.055) ** 2.4; };
    return .2126 * f(c[0]) + .7152 * f(c[1]) + .0722 * f(c[2]); };
  const mix = (a, b, t) => a.map((v, i) => i < 3 ? v * t + b[i] * (1 - t) : 1);
  const behind = e => { for (let x = e; x; x = x.parentElement) { const b = rgba(getComputedStyle(x).backgroundColor);
      if (b[3] > 0) { const under = x.parentElement ? behind(x.parentElement) : [255, 255, 255, 1]; return mix(b, under, b[3]); } }
    return [255, 255, 255, 1]; };
  const out = [];
  const walker = document.createTreeWalker(document.querySelector('.gradio-container'), NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const e = n.parentElement; if (!n.textContent.trim() || !e || e.closest('svg, .js-plotly-plot, footer, button:disabled')) continue;  // disabled controls: exempt (WCAG 1.4.3)
    const r = e.getBoundingClientRect(); if (!r.width || !r.height || !e.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
    const st = getComputedStyle(e); const size = parseFloat(st.fontSize);
    let alpha = 1; for (let x = e; x; x = x.parentElement) alpha *= parseFloat(getComputedStyle(x).opacity);
    const bg = behind(e); const fg = rgba(st.color); const c = mix(fg, bg, fg[3] * alpha);
    const [hi, lo] = [lum(c), lum(bg)].sort((a, b) => b - a); const ratio = (hi + .05) / (lo + .05);
    const large = size >= 24 || (size >= 18.66 && parseInt(st.fontWeight) >= 700);
    if (size < 12 || ratio < (large ? 3 : 4.5))
      out.push(`${n.textContent.trim().slice(0, 40)} | ${size}px | ${ratio.toFixed(2)}:1 | ${e.className || e.tagName}`);
  }
  return [...new Set(out)].slice(0, 40);
}"""
LABELS = {"ar": "AR", "sd": "SD", "mirror": "Mirror-SD"}
MAX_PAGE_PX = 4700  # the default results at 1600 x 1200 with the folds closed: about four screens for three runs (the result on top, the race, the verdict with its chart, its seconds chart and an item per Mirror-SD, the zoomed step, the cards); the text's length moves it by about 200 px from run to run


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
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
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
        # the slider takes the typed value on Enter/blur; a fold that has just opened may drop
        # it, so type it again until the slider shows it (Run reads the slider)
        for attempt in range(4):
            box.fill(str(max_new_tokens))
            box.press("Enter")
            box.blur()
            try:
                page.wait_for_function(
                    "n => { const r = document.querySelector('#max-new-tokens input[type=range]');"
                    " return r && r.value === String(n); }", arg=max_new_tokens, timeout=10_000)
                break
            except sync_api.TimeoutError:
                assert attempt < 3, "the max-new-tokens slider never took the typed value"
        page.wait_for_timeout(300)  # let the slider's change event reach the app's state
        page.get_by_text("Sampling and length").first.click()  # folded again
    page.click("#run-btn")
    page.wait_for_selector('#pane-mirror .msd-pane:is([data-state="done"], [data-state="error"], '
                           '[data-state="stopped"])', state="attached", timeout=timeout_s * 1000)
    page.wait_for_selector("#verdict .msd-verdict-text", timeout=60_000)
    wait_settled(page, timeout_s)


def wait_settled(page, timeout_s: float = 120) -> None:
    """The race is over (or skipped): the full panes show."""
    page.wait_for_function("() => { const b = document.querySelector('#board .msd-board'); return b && !b.classList.contains('is-on'); }",
                           timeout=timeout_s * 1000)


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
             for k in ("accepted", "hit", "late", "fallback", "correction", "bonus")}
    assert sum(kinds.values()) >= 1, kinds
    colour = page.eval_on_selector("#pane-mirror .msd-tok:not(.k-plain)",
                                   "e => getComputedStyle(e).backgroundColor")
    assert colour not in ("rgba(0, 0, 0, 0)", "transparent"), colour
    # the legend, with tooltips
    assert page.locator("#legend .msd-legend-item").count() >= 6
    assert page.locator("#legend .msd-legend-item[title]").count() == page.locator(
        "#legend .msd-legend-item").count()
    # the verdict names the winner, in large type; a card per method with the three speeds
    verdict = page.evaluate("() => [...document.querySelectorAll('#verdict .msd-verdict-text, #verdict .msd-verdict-tell')]"
                            ".map(e => e.innerText).join(' ')")  # the large line, then what the runs cannot tell
    assert re.search(r"\b(AR|SD|Mirror-SD) won\b|tie for the lead: .*cannot tell .* (apart|from .* or )|"
                     r"No method clearly ahead: .*cannot tell|Plain decoding \(AR\) won", verdict), verdict
    assert re.search(r"SD \d+\.\d\d× AR", verdict), verdict  # each its own ratio, the tiles'
    for m, small in page.evaluate("() => [...document.querySelectorAll('#verdict .msd-tile')].map("
                                  "t => [t.dataset.method, t.querySelector('.msd-tile-small').textContent])"):
        if m != "ar":
            assert f"{LABELS[m]} {small.split(' ')[0]} AR" in verdict, (m, small, verdict)
    # the lead, largest: one plain sentence, then the cause in one step, then every ratio
    lead = page.inner_text("#verdict .msd-lead")
    assert re.match(r"(SD|Mirror-SD) wrote the same \d+ tokens as plain "
                    r"decoding, \d\.\d\d× as fast\.|No method was clearly faster|Plain decoding \(AR\) was the fastest", lead), lead
    size = page.eval_on_selector("#verdict .msd-lead", "e => parseFloat(getComputedStyle(e).fontSize)")
    assert size >= 20, size
    order = page.evaluate("() => [...document.querySelectorAll('#verdict .msd-lead, #verdict .msd-cause, "
                          "#verdict .msd-verdict-text, #verdict .msd-scoreboard')].map(e => e.className.split(' ')[0])")
    assert order[0] == "msd-lead" and order.index("msd-verdict-text") < order.index("msd-scoreboard"), order
    # the verdict sits right under the race, above the panes
    tops = page.evaluate("() => ['#board', '#verdict', '#panes'].map(s => document.querySelector(s).getBoundingClientRect().top)")
    assert tops[0] < tops[1] < tops[2], tops
    cards = page.evaluate(CARDS_JS)
    assert set(cards) == set(LABELS), cards  # the default run: its three methods
    for m, rows in cards.items():
        assert {"time to first token", "decode speed", "end to end"} <= set(rows), rows
        if m != "ar":
            assert "over AR, decode / end to end" in rows and "target forwards (verify steps)" in rows, rows
    assert "hits / misses" in cards["mirror"]
    unreadable = page.evaluate(UNREADABLE_JS)
    assert not unreadable, "\n".join(unreadable)
    assert not page.errors, page.errors


# the zoomed step's labels at the page's width: the marks' labels (verdict, next window ready)
# apart, and every bar label whole inside its bar
ZOOM_LABELS_JS = """() => {
  const marks = [...document.querySelectorAll('#zoom .msd-zmark span')].map(e => e.getBoundingClientRect());
  const apart = marks.every((a, i) => marks.slice(i + 1).every(b =>
    a.right <= b.left || b.right <= a.left || a.bottom <= b.top || b.bottom <= a.top));
  const cut = [...document.querySelectorAll('#zoom .msd-zbar span')].filter(e => e.offsetWidth && e.textContent)
    .filter(e => e.getBoundingClientRect().right > e.parentElement.getBoundingClientRect().right + 1)
    .map(e => e.textContent);
  return {marks: marks.length, apart, cut};
}"""


def check_zoom_labels(page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 1200})
    page.wait_for_timeout(300)
    found = page.evaluate(ZOOM_LABELS_JS)
    assert found["marks"] == 2 and found["apart"] and not found["cut"], (width, found)


def read_trace_from_page(page) -> dict:
    """The run's trace, downloaded through the page's own link."""
    import json
    page.get_by_text("Traces and cache").first.click()
    link = page.locator("#trace-download a[href]").first
    link.wait_for(state="attached", timeout=30_000)
    body = page.request.get(link.get_attribute("href")).body()
    page.get_by_text("Traces and cache").first.click()
    return json.loads(body)


def figures_from_trace(trace: dict) -> dict:
    """Each method's figures recomputed from the trace alone (the definitions the page states:
    time to first token = start to first commit; decode = tokens after the first commit over
    the time after it; end to end = tokens over wall time), without the app's own code."""
    out = {}
    for m, run in trace["runs"].items():
        events = run["events"]
        stats = next(e for e in events if e["type"] == "Finish")["stats"]
        first = next(e for e in events if e["type"] == "Commit")
        tokens, wall, ttft = stats["new_tokens"], stats["wall_s"], stats["prefill_s"]
        verifies = [e for e in events if e["type"] == "Verify"]
        out[m] = {"tokens": tokens, "wall": wall, "ttft": ttft, "e2e": tokens / wall,
                  "decode": (tokens - len(first["token_ids"])) / (wall - ttft),
                  "verify_steps": len(verifies),
                  "rejections": sum(v["kind"] == "correction" for v in verifies)}
    for m, f in out.items():
        f["decode_x"], f["e2e_x"] = f["decode"] / out["ar"]["decode"], f["e2e"] / out["ar"]["e2e"]
    return out


def late_tokens_from_trace(run: dict) -> int:
    """Accepted tokens of windows that came from a late hit, from the trace alone by the rule the
    legend states: the step's taken branch ready (the end of its branch forwards) more than 0.5 ms
    after its verdict (the end of its target forward and acceptance rule); that window is the
    next step's."""
    events = run["events"]

    def wait_ms(step: int) -> float:
        spans = [e for e in events if e["type"] == "Span" and e.get("step") == step]
        verdict = max((e["end_ns"] for e in spans if e["label"] in ("suffix", "verify_forward", "accept")), default=None)
        done = max((e["end_ns"] for e in spans if e["label"] == "branches"), default=None)
        return 0.0 if verdict is None or done is None else (done - verdict) / 1e6

    late = {e["step"] + 1 for e in events if e["type"] == "DraftBranch" and e["status"] == "taken"
            and wait_ms(e["step"]) > 0.5}
    return sum(source == "accepted" for e in events if e["type"] == "Commit" and e["step"] in late
               for source in e["sources"])


def close(text: str, value: float, digits: int = 2) -> bool:
    """`text` shows `value` rounded to `digits` places (one unit of rounding either way)."""
    found = [float(x) for x in re.findall(r"\d+\.\d+", text)]
    return any(abs(x - value) <= 1.01 * 10 ** -digits for x in found)


def shows(text: str, value: float) -> bool:
    """A card's figure: the run shown's value (the trace holds the runs shown), and over
    interleaved runs, a "[low–high]" range beside it that holds it."""
    rng = re.search(r"\[(\d+\.\d+)–(\d+\.\d+)\]", text)
    if rng is None:
        return close(text, value)
    return close(text.split("[")[0], value) and float(rng[1]) - 0.011 <= value <= float(rng[2]) + 0.011


def check_figures_agree(page, trace: dict) -> None:
    """Cards, panes, the bars and the timeline show the same figures, each recomputed here
    from the trace."""
    want = figures_from_trace(trace)
    cards = page.evaluate(CARDS_JS)
    for m, f in want.items():
        rows, name = cards[m], LABELS[m]
        assert shows(rows["time to first token"], f["ttft"]), (m, rows, f)
        assert shows(rows["decode speed"], f["decode"]), (m, rows, f)
        assert shows(rows["end to end"], f["e2e"]), (m, rows, f)
        if "[" not in rows["end to end"]:  # one run: its tokens and wall time
            assert f"{f['tokens']} tokens" in rows["end to end"], (m, rows, f)
        if m != "ar":
            x = rows["over AR, decode / end to end"]
            assert close(x, f["decode_x"]) and close(x, f["e2e_x"]), (m, x, f)  # the runs shown's ratios
            assert rows["target forwards (verify steps)"].startswith(f"{f['verify_steps']},"), (m, rows, f)
            assert rows["rejections"].startswith(f"{f['rejections']} of"), (m, rows, f)
        pane = page.inner_text(f"#pane-{m} .msd-pane-head")
        assert close(pane, f["ttft"]) and close(pane, f["e2e"]), (m, pane, f)
        late = page.locator(f"#pane-{m} .msd-tok.k-late:not(.is-cont)").count()  # the late hits' windows
        assert late == late_tokens_from_trace(trace["runs"][m]), (m, late)
        bar = page.locator(".msd-bk-row", has_text=name).first.inner_text()
        assert re.search(rf"to the first token {f['ttft']:.2f}", bar) or close(bar, f["ttft"]), (m, bar, f)
    # the timeline: each run ends at its wall time
    page.get_by_text("Timeline: every measured span").first.click()
    page.wait_for_selector("#timeline .js-plotly-plot .barlayer .point", timeout=30_000)
    ends = page.evaluate(TIMELINE_ENDS_JS)
    for m, f in want.items():
        for kind in ("end", "tokens committed"):
            assert abs(ends[f"{LABELS[m]}: {kind}"] - f["wall"]) <= 0.006, (m, kind, ends, f)
    ticks = page.locator("#timeline .ytick text").evaluate_all("ts => ts.map(t => t.textContent)")
    lanes = {"AR · target", "Mirror-SD · target"}
    if any(e.get("type") == "Span" and e.get("lane") == "draft" for e in trace["runs"]["mirror"]["events"]):
        lanes.add("Mirror-SD · draft")  # a short run whose priced windows all decoded drafts nothing
    assert lanes <= set(ticks), ticks
    page.get_by_text("Timeline: every measured span").first.click()


def check_rejections_struck_through(page, trace: dict) -> None:
    """When SD's run has a rejection, the rejected drafted token is in the SD pane, struck
    through, with q, p and the step on hover; the toggle hides it."""
    sd = figures_from_trace(trace)["sd"]
    struck = page.locator("#pane-sd s.msd-rej")
    if not sd["rejections"]:
        assert struck.count() == 0
        return
    assert struck.count() == sd["rejections"]
    assert page.eval_on_selector("#pane-sd s.msd-rej", "e => getComputedStyle(e).textDecorationLine") == "line-through"
    title = struck.first.get_attribute("title")
    assert "q = " in title and "p = " in title and "step" in title, title
    page.locator("#show-rejected input").uncheck()
    page.wait_for_function("() => !document.querySelector('#pane-sd s.msd-rej').offsetParent", timeout=5_000)
    page.locator("#show-rejected input").check()


def check_page_height(page) -> None:
    height = page.evaluate("() => document.documentElement.scrollHeight")
    if height > MAX_PAGE_PX:  # what made it long, for whoever reads the failure
        page.screenshot(path=str(Path(tempfile.gettempdir()) / "msd-too-tall.png"), full_page=True)
    assert height <= MAX_PAGE_PX, height


def open_inspector(page) -> None:
    if not page.locator(HEAD).is_visible():
        page.get_by_text("Step inspector: what happened").first.click()
    page.wait_for_selector(HEAD, timeout=30_000)
    assert page.locator("#inspector table.msd-verify").count() == 1
    # the early exit's table and the branches: the inspector opens on a step that read the exit,
    # unless no step did (every step's lanes ran in turn: the overlap gate's choice here)
    in_turn = ("No early exit in this step" in page.inner_text("#inspector")
               and not re.search(r"k-(hit|late)\b", page.inner_html("#inspector .msd-strip-cells"))
               and "k-miss" not in page.inner_html("#inspector .msd-strip-cells"))
    assert in_turn or page.locator("#inspector table.msd-ee").count() == 1
    assert in_turn or page.locator("#inspector table.msd-tree").count() == 1
    assert page.locator("#inspector .msd-narration").count() == 1
    assert page.locator("#inspector details.msd-all-steps tr[data-step]").count() >= 1


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
    # the run it opens on: the Mirror-SD run the zoom draws
    run = cells.nth(0).get_attribute("data-run")
    assert run == "mirror", run
    # a cell selects its step
    target = cells.nth(n - 1)
    number = int(target.get_attribute("aria-label").split(",")[0].split()[1])
    assert number == n
    target.click()
    wait_for_step(page, n, run)
    # a token in that run's pane jumps to the step that committed it
    token = page.locator(f"#pane-{run} .msd-tok[data-step]").nth(0)
    step = token.get_attribute("data-step")
    want = page.locator(f'#inspector .msd-step[data-step="{step}"]').get_attribute("aria-label")
    token.click()
    wait_for_step(page, int(want.split(",")[0].split()[1]), run)
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
    if not page.locator("#whatif-panel").is_visible():
        page.get_by_text("What if (projection): the same").first.click()
    page.wait_for_function("() => { const p = document.querySelector('#whatif-panel');"
                           " return p && p.querySelector('table'); }", timeout=30_000)
    text = page.inner_text("#whatif-panel")
    assert "projection" in text.lower()
    heads = page.locator("#whatif-panel table thead th").evaluate_all(
        "ths => ths.map(t => t.textContent.trim())")
    assert {"AR", "SD", "Mirror-SD"} <= set(heads), heads
    page.wait_for_selector("#whatif-timeline .js-plotly-plot .barlayer .point", timeout=30_000)


RUNS_CHOSEN_JS = "document.querySelector('#repeat input:checked')?.closest('label')?.textContent.trim()"


def check_presenter(page, url: str) -> None:
    """The presenter view keeps the race, the panes, the headline with its tiles and the
    projection bar (b), and hides the cards, the zoom, the folds and the prose; unticked, all
    of it is back; "?presenter" in the address opens the page in it."""
    full = page.evaluate("() => document.documentElement.scrollHeight")
    page.locator("#presenter input").check()
    page.wait_for_function("() => document.body.classList.contains('msd-presenter')", timeout=10_000)
    page.wait_for_function(f"() => ({RUNS_CHOSEN_JS}) === '1'", timeout=10_000)  # one run per method
    for shown in ("#board", "#verdict .msd-lead", "#verdict .msd-verdict-text", "#verdict .msd-scoreboard", "#pane-ar"):
        assert page.locator(shown).first.is_visible(), shown
    for hidden in ("#cards", "#zoom", "#statistics-fold", "#verdict .msd-takeaway", "#settings-row",
                   "#verdict .pc-note", "#legend-row", "#panes s.msd-rej", "#repeat"):
        assert all(not e.is_visible() for e in page.locator(hidden).all()), hidden
    for bar in ("#verdict .pc-b", "#verdict .pc-c"):  # both projections, an inconclusive one too
        if page.locator(bar).count():
            assert page.locator(bar).first.is_visible(), bar
    short = page.evaluate("() => document.documentElement.scrollHeight")
    assert short < full * 0.7, (short, full)
    page.locator("#presenter input").uncheck()
    page.wait_for_function("() => !document.body.classList.contains('msd-presenter')", timeout=10_000)
    assert page.locator("#cards").is_visible()
    page.wait_for_function(f"() => ({RUNS_CHOSEN_JS}).startsWith('3')", timeout=10_000)  # the default back
    page.goto(url + "?presenter")
    page.wait_for_function("() => document.body.classList.contains('msd-presenter')", timeout=60_000)
    assert page.locator("#presenter input").is_checked()


def test_a_page_closed_during_a_run_ends_it(browser, monkeypatch):
    """The handler's generator closes with the page: its run stops within a step."""
    import threading
    import time
    monkeypatch.setenv("MIRROR_SD_TINY_PACE_MS", "15")
    demo, url = start_app(tiny=True)
    jobs = lambda: [t for t in threading.enumerate() if t.name == "mirror-sd-job" and t.is_alive()]
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("#run-btn", timeout=60_000)
        page.click("#run-btn")
        page.wait_for_selector('#board .msd-bpane[data-state="running"] pre .msd-tok', timeout=60_000)
        assert jobs()
        context.close()
        deadline = time.time() + 20
        while jobs() and time.time() < deadline:
            time.sleep(0.05)
        assert not jobs(), "the run went on after its page closed"
    finally:
        demo.close()


LIVE_TOKENS_JS = """() => Object.fromEntries([...document.querySelectorAll('#board .msd-bpane')].map(
  p => [p.className.match(/\\bm-([\\w-]+)/)[1], [p.dataset.state, p.querySelectorAll('pre .msd-tok:not(.is-cont)').length,
          (p.querySelector('.msd-stat') || {}).textContent || '']]))"""


BOARD_AXIS_JS = """() => {
  const host = document.querySelector('#board-timeline .msd-btl-host');
  const axis = Number(getComputedStyle(host).getPropertyValue('--axis'));
  const track = host.querySelector('.msd-btl-track').getBoundingClientRect();
  const x = (ms) => track.left + track.width * ms / axis;
  const ticks = [...host.querySelectorAll('.msd-btl-tick')].map(t => {
    const r = t.getBoundingClientRect(), ms = Number(t.style.getPropertyValue('--a'));
    const at = ms === 0 ? r.left : ms === axis ? r.right : (r.left + r.right) / 2;
    return [t.textContent, Math.round(at - x(ms)), Math.abs(parseFloat(t.textContent) * 1000 - ms) < 1];
  });
  const bars = [...host.querySelectorAll('.msd-btl-bar, .msd-btl-flag')].slice(0, 40).map(b => {
    const r = b.getBoundingClientRect(), track = b.parentElement.getBoundingClientRect();
    return Math.round(r.left - (track.left + track.width * Number(b.style.getPropertyValue('--a')) / axis));
  });
  return {ticks, bars};
}"""


# the live timeline's lane labels cut short (text wider than its box), as shown
LANE_NAMES_CUT_JS = """() => [...document.querySelectorAll('#board-timeline .msd-btl-name, #board-timeline .msd-btl-group')]
  .filter(e => e.offsetWidth && e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)"""


# the board's panes at a phone's width (drawn again after the race, as they ended): each step's
# lines above the text and none of their pieces over another; the text in line boxes, none
# wider than its pane; the clocks named the run's; the key a list whose entries overlap nothing
NARROW_BOARD_JS = """() => {
  const board = document.querySelector('#board .msd-board');
  board.classList.add('is-on');
  const r = e => e.getBoundingClientRect();
  const apart = (a, b) => a.right <= b.left + .5 || b.right <= a.left + .5 || a.bottom <= b.top + .5 || b.bottom <= a.top + .5;
  const out = {steps: 0, under: [], overlaps: [], wide: [], cut: [], clocks: [], lines: 0};
  const mini = board.querySelector('.msd-bmini'), panesTop = r(board.querySelector('.msd-board-panes')).top;
  out.mini = [...mini.querySelectorAll('.bm-name')].filter(e => e.offsetWidth).map(e => e.textContent);
  out.miniAbove = !!mini.offsetHeight && r(mini).bottom <= panesTop + .5;
  for (const pane of board.querySelectorAll('.msd-bpane')) {
    const box = pane.querySelector('.msd-bstep'), pre = pane.querySelector('pre.msd-tokens');
    out.lines += pre.querySelectorAll(':scope > .msd-ln').length;
    if (pre.scrollWidth > pre.clientWidth + 1) out.wide.push(pane.className);
    out.clocks.push(pane.querySelector('.msd-clock').textContent);
    if (!box.offsetHeight) continue;
    out.steps += 1;
    if (r(box).bottom > r(pre).top + .5) out.under.push(pane.className);
    for (const line of box.querySelectorAll('.msd-bline')) {
      const kids = [...line.querySelectorAll('.msd-blab, .msd-chip, .msd-barrow, .msd-bsum')].filter(e => e.offsetWidth);
      kids.forEach((a, i) => kids.slice(i + 1).forEach(b => {
        if (!apart(r(a), r(b))) out.overlaps.push(a.textContent + ' / ' + b.textContent); }));
      if (r(line).right > r(pane).right + .5) out.wide.push(line.textContent);
      const st = getComputedStyle(line);  // wrapped, never cut or faded at the row's end
      if (line.offsetWidth && (line.scrollWidth > line.clientWidth + 1 || (st.maskImage || st.webkitMaskImage || 'none') !== 'none'))
        out.cut.push(line.textContent);
    }
  }
  const key = [...document.querySelectorAll('#board-timeline .msd-btl-k')].map(r);
  out.key = key.length;
  key.forEach((a, i) => key.slice(i + 1).forEach(b => { if (!apart(a, b)) out.overlaps.push('key entries'); }));
  const panes = [...board.querySelectorAll('.msd-bpane')];
  out.columns = new Set(panes.map(p => Math.round(r(p).left))).size;
  out.height = panes.length ? r(panes[panes.length - 1]).bottom - r(panes[0]).top : 0;
  board.classList.remove('is-on');
  return out;
}"""
# the board's builders on made-up items: a step that drafted nothing, a whitespace token
BOARD_WORDS_JS = """() => {
  const none = window.msdBoard.verdictLine({k: 'v', s: 57, a: 0, d: [], y: 'x', kd: 'bonus'}).textContent;
  const some = window.msdBoard.verdictLine({k: 'v', s: 3, a: 1, d: ['a', 'b'], y: 'c', kd: 'correction'}).textContent;
  const late = window.msdBoard.lateBadge(99).textContent;
  const lateVerdict = window.msdBoard.verdictLine({k: 'v', s: 4, a: 0, d: ['a', 'b'], y: 'c', kd: 'correction', h: 99}).textContent;
  const pre = document.createElement('pre'); pre.className = 'msd-tokens';
  document.querySelector('#board').append(pre);
  for (const [t] of window.msdBoard.tokPieces(' \\n    ', 'accepted')) pre.append(t);
  const nl = pre.querySelector('.msd-nl'), sp = pre.querySelector('.msd-sp');
  const got = {none, some, late, lateVerdict, text: pre.textContent, mark: nl && getComputedStyle(nl, '::before').content,
               dots: sp && getComputedStyle(sp).backgroundImage, pieces: pre.children.length};
  pre.remove();
  return got;
}"""


def check_tokens_chart(page) -> None:
    """After the race: the tokens-against-time chart draws a line per run, and its key gives each
    run's time and speed as the settled pane's head does (tokens over the run's whole time)."""
    lines = page.locator("#board .msd-tvt path.tvt-line").count()
    key = page.evaluate("() => [...document.querySelectorAll('#board .msd-tvt .tvt-key span')].map(s => s.textContent)")
    assert lines == len(key) == len(LABELS), (lines, key)
    for text in key:
        name, tokens, secs, rate = re.fullmatch(r"(.+): (\d+) tokens in (\d+\.\d\d) s, (\d+\.\d\d) tok/s", text).groups()
        m = next(k for k, v in LABELS.items() if v == name)
        head = page.inner_text(f"#pane-{m} .msd-pane-head")
        assert f"{tokens} tokens" in head and re.search(rf"{re.escape(rate)}\s*tok/s end to end", head), (text, head)
        wall = float(re.search(r"tokens in (\d+\.\d\d) s", head).group(1))  # the head's time
        assert abs(float(secs) - wall) <= 0.011, (text, head)  # one rounding apart at most


def check_narrow_board(page) -> None:
    got = page.evaluate(NARROW_BOARD_JS)
    assert got["steps"] >= 1 and got["lines"] >= 4 and got["key"] >= 6, got
    assert not got["under"] and not got["overlaps"] and not got["wide"] and not got["cut"], got
    # a phone: the three panes one under another, full width, together within one phone screen
    assert got["columns"] == 1 and 0 < got["height"] <= 700, got
    # and above the stacked panes the race in brief, a bar per run
    assert sorted(got["mini"]) == sorted(LABELS.values()) and got["miniAbove"], got
    assert all(re.fullmatch(r"(run|run took|t =) \d+\.\d+ s", c) for c in got["clocks"] if c), got
    words = page.evaluate(BOARD_WORDS_JS)
    assert "no draft" in words["none"] and "of 0" not in words["none"], words
    assert "verdict" in words["some"] and "kept 1 of 2 drafted" in words["some"], words
    # the late badge names the window's origin (runs.late_words); the verdict's line says only
    # what the target kept, so "hit" never sits beside "kept 0 of 2"
    assert "late hit +99 ms" in words["late"], words
    assert "hit" not in words["lateVerdict"] and "kept 0 of 2 drafted" in words["lateVerdict"], words
    assert words["text"] == " \n    " and words["pieces"] == 2, words  # the characters kept
    assert words["mark"] == '"↵"' and "radial-gradient" in words["dots"], words  # and marked


def check_board_axis(page) -> None:
    """The small timeline's ticks and its bars on one scale: each tick's mark sits where a bar
    at that time starts, and says that time."""
    got = page.evaluate(BOARD_AXIS_JS)
    assert 3 <= len(got["ticks"]) <= 6, got  # two to five round steps
    for text, off, says in got["ticks"]:
        assert abs(off) <= 2 and says, got
    assert got["bars"] and all(abs(off) <= 2 for off in got["bars"]), got


# a pane of a later round that still shows, faded, its run of the round before: (method, tokens, note)
CARRIED_JS = """() => [...document.querySelectorAll('#board .msd-bpane.is-stale')].map(p => [
  p.className.match(/\\bm-([\\w-]+)/)[1], p.querySelectorAll('pre .msd-tok').length,
  p.querySelector('.msd-note').textContent])"""


def watch_live(page, methods=tuple(LABELS), timeout_s: float = 120, carried: list | None = None) -> dict:
    """Polls the board while the runs go: for each run, the most tokens its pane showed while
    the pane still said running (its run not ended); `carried` collects the panes of a later
    round that still show the round before's run."""
    import time
    seen, ended = {m: 0 for m in methods}, {}
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if carried is not None:
            carried.extend(page.evaluate(CARRIED_JS))
            carried.append(("header", 0, page.inner_text("#board .msd-board-say")))
        for m, (state, n, stat) in page.evaluate(LIVE_TOKENS_JS).items():
            if state == "running" and m in seen:
                seen[m] = max(seen[m], n)
            elif state == "done" and m in seen:
                ended[m] = (n, stat)
        if page.locator('#board .msd-board-ctl').is_visible():  # the race: every run ended
            break
        page.wait_for_timeout(50)
    return seen, ended


def check_step_model(page):
    """How it works' model of one step: moving a slider rewrites its figures in the page, the same
    strings the Python model gives for the sliders' values; the reset button restores them."""
    box = "#how-it-works .msd-calc"
    page.wait_for_selector(box, timeout=30_000)
    before = page.inner_text(f"{box} [data-out='mirror']")
    page.evaluate("""() => { const i = document.querySelector('#how-it-works .msd-calc input[name="c"]');
                             i.value = '0.05'; i.dispatchEvent(new Event('input', {bubbles: true})); }""")
    values = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#how-it-works .msd-calc "
                           "input[type=range]')].map(i => [i.name, Number(i.value)]))")
    from ui.stepmodel import outputs
    shown = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#how-it-works .msd-calc "
                          "[data-out]')].map(o => [o.dataset.out, o.textContent]))")
    assert values["c"] == 0.05 and shown == outputs(values), (values, shown)
    assert page.inner_text(f"{box} [data-show='c']") == "0.05"
    page.click(f"{box} .mc-reset")
    assert page.inner_text(f"{box} [data-out='mirror']") == before
    # the paper's kind of pair: the draft forward a twentieth of the target's, the rest the run's
    from ui.stepmodel import PAPER_DRAFT
    page.click(f"{box} .mc-paper")
    paper = page.evaluate("() => Object.fromEntries([...document.querySelectorAll('#how-it-works .msd-calc "
                          "input[type=range]')].map(i => [i.name, Number(i.value)]))")
    assert paper == dict(values, c=PAPER_DRAFT), paper
    assert page.inner_text(f"{box} [data-out='gain']") == outputs(paper)["gain"]
    page.click(f"{box} .mc-reset")


def test_tiny_pair_in_the_browser(browser, page, monkeypatch, drafting_pays):
    OUT.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("MIRROR_SD_TINY_PACE_MS", "15")  # runs long enough to watch
    demo, url = start_app(tiny=True)
    try:
        page.goto(url)
        page.wait_for_selector("#run-btn", timeout=60_000)
        assert not page.locator("#verdict").is_visible()  # nothing empty before a run
        check_step_model(page)
        page.click("#run-btn")
        carried = []
        live, ended = watch_live(page, carried=carried)
        assert all(n >= 1 for n in live.values()), live  # each pane grew while its run ran
        # in rounds 2 and 3 a pane keeps the round before's run, faded, until its own run starts
        headers = {note for m, _, note in carried if m == "header"}
        carried = [c for c in carried if c[0] != "header"]
        assert carried and all(n >= 1 and note.startswith("Faded: its round ") for _, n, note in carried), carried[:5]
        # from round 2 on, the board's header gives the round before's times and when the race comes
        later = [h for h in headers if h.startswith("Round 2 of 3")]
        assert later and all(re.search(r"Round 1 took (.+ \d+\.\d s, ){2}.+ \d+\.\d s\. The race plays.+ in about \d+ s\.", h)
                             for h in later), headers
        # the race plays by itself after the last run, then the full panes show
        page.wait_for_selector('#board .msd-bpane[data-state="race"]', timeout=30_000)
        assert "Race replay" in page.inner_text("#board .msd-board-say")
        # while the first race plays, its outcome is not given away under it: the verdict, the
        # zoom and the cards wait, and the board says where they will be
        assert not page.locator("#verdict").is_visible() and not page.locator("#cards").is_visible()
        assert "when the race ends" in page.inner_text("#board .msd-board-wait")
        page.wait_for_selector("#board-timeline .msd-btl-flag", state="attached", timeout=30_000)
        wait_settled(page)
        page.wait_for_selector("#verdict .msd-verdict", timeout=10_000)  # back when it ended
        assert not page.locator("#board .msd-board-wait").is_visible()
        check_board_axis(page)
        page.set_viewport_size({"width": 400, "height": 1200})
        check_board_axis(page)
        check_narrow_board(page)
        cut = page.evaluate(LANE_NAMES_CUT_JS)
        assert not cut, cut  # a phone's lane labels whole: the method above its lanes
        page.set_viewport_size({"width": 1600, "height": 1200})
        cut = page.evaluate(LANE_NAMES_CUT_JS)
        assert not cut, cut  # and wide: each method's name beside its lanes, wrapped, not cut
        assert not page.locator("#board .msd-bmini").is_visible()  # wide, the panes side by side say it
        assert "Race over" in page.inner_text("#board .msd-board-say")
        check_tokens_chart(page)
        assert {"ar", "sd"} <= set(ended), ended  # ended while the next ones ran
        for m, (n, stat) in ended.items():  # a finished live pane holds every token of its run
            head = page.inner_text(f"#pane-{m} .msd-pane-head")  # the settled pane: the record's count
            total = int(re.search(r"(\d+) tokens", head).group(1))
            assert n == total and stat == f"{total} tokens", (m, n, stat, head)
        # Replay plays it again, at once with "instant"
        page.click("#board .msd-speed[data-speed='instant']")
        page.click("#board .msd-replay")
        wait_settled(page)
        run_default_example(page, url, 32, timeout_s=180)
        check_rendered(page, 32)
        small = page.evaluate("""() => Math.min(...[...document.querySelectorAll(
            '#cards .msd-cards-note, #cards .msd-bk-text, #cards .msd-bk-key, #cards .msd-checks li')]
            .map(e => parseFloat(getComputedStyle(e).fontSize)))""")
        assert small >= 13, small  # the text under the cards is readable
        page.screenshot(path=str(OUT / "tiny-page.png"), full_page=True)
        check_page_height(page)
        for width in (400, 1600):
            check_zoom_labels(page, width)
        trace = read_trace_from_page(page)
        check_figures_agree(page, trace)
        check_rejections_struck_through(page, trace)
        open_inspector(page)
        check_step_strip_and_token_jump(page)
        check_whatif(page)
        check_presenter(page, url)
        assert not page.errors, page.errors
    finally:
        demo.close()


def test_stop_during_a_live_run_says_so_in_the_pane(browser, page, monkeypatch):
    # forwards slow enough (AR's run takes seconds) that Stop lands while AR still runs on a
    # loaded machine
    monkeypatch.setenv("MIRROR_SD_TINY_PACE_MS", "80")
    demo, url = start_app(tiny=True)
    try:
        page.goto(url)
        page.wait_for_selector("#run-btn", timeout=60_000)
        page.click("#run-btn")
        page.wait_for_selector('#board .msd-bpane.m-ar[data-state="running"] pre .msd-tok', timeout=60_000)
        page.click("#stop-btn")
        # the run under way when Stop lands: AR's, or, where AR ended just before it, the next one's
        stopped = page.wait_for_selector('#board .msd-bpane[data-state="stopped"]', state="attached", timeout=30_000)
        m = next(c[2:] for c in stopped.get_attribute("class").split() if c.startswith("m-"))
        wait_settled(page)  # no race after a stop: the full panes at once
        pane = page.inner_text(f"#pane-{m}")
        assert "stopped" in pane and "Stopped" in pane, pane
        assert "Stopped" in page.inner_text("#status")
        assert not page.errors, page.errors
    finally:
        demo.close()


def test_a_loaded_trace_in_the_browser(browser, page, tmp_path):
    """A trace of tiny runs, loaded without models: cards, strip, token jump, timeline, what-if."""
    from mirror_sd.models.tiny import LAYERS
    from ui.traces import export_trace, write_trace
    from ui_records import PROMPT, tiny_records
    settings = {"temperature": 0.0, "gamma": 4, "kappa": 4, "branch_budget": 2, "max_new_tokens": 24}
    meta = {"target": "tiny-target", "draft": "tiny-draft", "target_layers": LAYERS,
            "exit_layer": LAYERS // 2, "precision": "fp32", "target_device": "cpu", "draft_device": "cpu"}
    path = write_trace(export_trace(tiny_records(), PROMPT, settings, meta), str(tmp_path))
    demo, url = start_app(tiny=True)
    try:
        page.goto(url)
        page.wait_for_selector("#run-btn", timeout=60_000)
        page.get_by_text("Traces and cache").first.click()
        page.set_input_files("#trace-upload input[type=file]", path)
        page.wait_for_function("() => (document.querySelector('#status')?.innerText || '').includes('trace')",
                               timeout=30_000)
        page.wait_for_selector("#verdict .msd-verdict-text", timeout=30_000)
        wait_settled(page)
        import json
        check_figures_agree(page, json.load(open(path)))
        open_inspector(page)
        check_step_strip_and_token_jump(page)
        check_whatif(page)
        assert not page.errors, page.errors
    finally:
        demo.close()


@pytest.mark.real_pair
def test_real_default_pair_in_the_browser(browser, page):
    OUT.mkdir(parents=True, exist_ok=True)
    # the app's default length: the default answer (58 tokens) ends by itself, and the run is
    # long enough for priced windows to pay for the draft's prompt prefill (a 24-token run may
    # decode every step on this machine: drafting measured not to pay for so few tokens)
    tokens = int(os.environ.get("MIRROR_SD_BROWSER_TOKENS", "64"))
    demo, url = start_app(tiny=False)
    try:
        run_default_example(page, url, tokens, timeout_s=1200)
        check_rendered(page, None)
        page.screenshot(path=str(OUT / "real-full.png"), full_page=True)
        check_page_height(page)
        trace = read_trace_from_page(page)
        check_figures_agree(page, trace)
        check_rejections_struck_through(page, trace)
        open_inspector(page)
        check_step_strip_and_token_jump(page)
        target = os.environ.get("MIRROR_SD_SCREENSHOT")
        if target:
            shutil.copy(OUT / "real-full.png", target)
    finally:
        demo.close()
        demo.msd_handlers.app.pairs.clear()  # ~10 GB: later tests load their own copy
