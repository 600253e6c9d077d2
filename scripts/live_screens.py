"""Screenshots of a default run as it happens, in Debian's chromium (Playwright): the panes
growing during the runs (the second round: a pane not yet rerun shows the first, faded), the race after the last one, and the page once it has settled, at
1600 px and at a phone's 400 px. Saves PNGs under --out (docs/screenshots by default).

    python scripts/live_screens.py [--out docs/screenshots] [--tiny] [--widths 1600,400]
"""
from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

# Playwright polls a waited-for condition on every animation frame unless told otherwise: in a
# browser on the engine's own 2 cores that steals time from the timed runs, so it polls once a second
POLL_MS = 1000

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
READY = "() => /loaded and warm|Ready/.test(document.querySelector('#status')?.innerText || '')"
# SD running in the second round: Mirror-SD's pane after it still shows, faded, its first round's run
RUNNING = ("m => document.querySelector(`#board .msd-bpane.m-${m}[data-state=\"running\"] pre .msd-tok`)"
           " && document.querySelector('#board .msd-bpane.is-stale')")
# the method's pane a dozen tokens into its run
GROWN = ("m => document.querySelectorAll(`#board .msd-bpane.m-${m}[data-state=\"running\"] pre .msd-tok`).length >= 12")
# the race's clock in its header ("t = 3.10 s of 9.50 s") past 45% of the race
RACE_MID = ("() => { const m = ((document.querySelector('#board .msd-board-say') || {}).textContent || '')"
            ".match(/t = ([\\d.]+) s of ([\\d.]+) s/); return !!m && +m[1] >= 0.45 * +m[2]; }")
SETTLED = "() => { const b = document.querySelector('#board .msd-board'); return b && b.classList.contains('has-race') && !b.classList.contains('is-on'); }"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shoot(browser, url: str, width: int, out: Path, live: bool) -> None:
    page = browser.new_page(viewport={"width": width, "height": 1100 if width > 800 else 860})
    page.goto(url)
    page.wait_for_function(READY, timeout=900_000, polling=POLL_MS)
    page.get_by_text("Traces and cache").first.click()  # measure again: no cached result
    page.get_by_label("Reuse cached results for identical settings").uncheck()
    page.get_by_text("Traces and cache").first.click()
    page.click("#run-btn")
    if live:
        page.wait_for_function(RUNNING, arg="sd", timeout=900_000, polling=250)
        try:  # several steps in: a dozen tokens written (a warm SD run takes 5-12 s here)
            page.wait_for_function(GROWN, arg="sd", timeout=30_000, polling=250)
        except Exception:  # a run too short to catch there: its pane as it is
            pass
        page.locator("#board").scroll_into_view_if_needed()
        page.screenshot(path=str(out / f"live-{width}-running.png"))
        page.wait_for_function(f"() => document.querySelector('#board .msd-bpane[data-state=\"race\"]') || ({SETTLED})()",
                               timeout=900_000)
        if page.locator('#board .msd-bpane[data-state="race"]').count():  # not over yet
            page.wait_for_function(RACE_MID, timeout=120_000)  # mid-race: every pane under way
            page.locator("#board").scroll_into_view_if_needed()
            page.screenshot(path=str(out / f"live-{width}-race.png"))
    page.wait_for_function(SETTLED, timeout=900_000, polling=POLL_MS)
    page.wait_for_timeout(500)
    page.screenshot(path=str(out / f"live-{width}-settled.png"), full_page=True)
    page.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    ap.add_argument("--tiny", action="store_true", help="the app's test mode (tiny random pair)")
    ap.add_argument("--widths", default="1600,400")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from ui.layout import build_demo, launch
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    demo = build_demo(tiny=args.tiny)
    port = free_port()
    launch(demo, prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for width in (int(w) for w in args.widths.split(",")):
                t = time.time()
                shoot(browser, f"http://127.0.0.1:{port}/", width, out, live=True)
                print(f"{width} px: {time.time() - t:.0f} s", flush=True)
            browser.close()
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
