"""New-user check of the app: `python app.py` on the real default pair, driven in Debian's
chromium via Playwright at 1600 x 1200, as a new user would: wait for the models, Run the
default example at the default settings, then open each fold. Prints the status, the verdict,
the cards and each method's figures from the run's trace (decode speed: tokens after the first
commit over the time after it); saves the top of the page, the full page and each fold opened
as PNGs under --out, and the app's log.

    python scripts/app_new_user_check.py [--out out/app-check] [--port 7861] [--repeat 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

# Playwright polls a waited-for condition on every animation frame unless told otherwise: in a
# browser on the engine's own 2 cores that steals time from the timed runs, so it polls once a second
POLL_MS = 1000

ROOT = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1600, 1200
FOLDS = {  # screenshot name -> the fold's title (its first words) and its element
    "timeline": ("Timeline: every measured span", "#timeline-fold"),
    "inspector": ("Step inspector: what happened", "#inspector-fold"),
    "whatif": ("What if (projection): the same", "#whatif-fold"),
    "statistics": ("Statistics: every figure", "#statistics-fold"),
    "how": ("How it works", "#how-fold"),
}
DONE = ("() => { const s = document.querySelector('#status').textContent.trim();"  # hidden in the presenter view
        " return (s.startsWith('Done') && document.querySelector('#verdict .msd-verdict-text'))"
        " || s.toLowerCase().includes('error'); }")
READY = "() => document.querySelector('#status').innerText.includes('loaded and warm')"
SETTLED = ("() => { const b = document.querySelector('#board .msd-board');"
           " return b && !b.classList.contains('is-on'); }")


def figures(trace: dict) -> dict:
    out = {}
    for m, run in trace["runs"].items():
        events = run["events"]
        stats = next(e for e in events if e["type"] == "Finish")["stats"]
        first = next(e for e in events if e["type"] == "Commit")
        decode_s = stats["wall_s"] - stats["prefill_s"]
        out[m] = {"tokens": stats["new_tokens"], "wall_s": round(stats["wall_s"], 3),
                  "ttft_s": round(stats["prefill_s"], 3),
                  "decode_tok_s": round((stats["new_tokens"] - len(first["token_ids"])) / decode_s, 2)}
    return out


def shoot_folds(page, out: Path, prefix: str) -> None:
    for name, (title, fold) in FOLDS.items():
        page.get_by_text(title).first.click()
        page.wait_for_timeout(2500)  # plotly draws on opening
        page.locator(fold).screenshot(path=str(out / f"{prefix}-{name}.png"))
        page.get_by_text(title).first.click()
        page.wait_for_timeout(500)


def run_once(page, out: Path, prefix: str, repeat: int) -> dict:
    if repeat > 1:
        page.get_by_text("3, interleaved").click()
    else:
        page.locator("#repeat").get_by_label("1", exact=True).check()
    start = time.time()
    page.click("#run-btn")
    page.wait_for_function(DONE, timeout=3_000_000, polling=POLL_MS)
    page.wait_for_function(SETTLED, timeout=600_000, polling=POLL_MS)  # the race has played
    page.wait_for_timeout(1000)
    print(f"--- default run, {time.time() - start:.0f} s in all")
    print("STATUS:", page.inner_text("#status"))
    print("VERDICT:", page.inner_text("#verdict"))
    print("CARDS:", page.inner_text("#cards")[:2500], flush=True)
    page.screenshot(path=str(out / f"{prefix}-top.png"))
    page.screenshot(path=str(out / f"{prefix}-full.png"), full_page=True)
    print("page height:", page.evaluate("() => document.documentElement.scrollHeight"))
    page.get_by_text("Traces and cache").first.click()
    href = page.locator("#trace-download a[href]").first.get_attribute("href")
    body = page.request.get(href).body()
    (out / f"{prefix}-trace.json").write_bytes(body)  # the run as the page saw it (the What-if reads it)
    trace = json.loads(body)
    page.get_by_text("Traces and cache").first.click()
    shoot_folds(page, out, prefix)
    found = figures(trace)
    print("FIGURES FROM THE TRACE:", json.dumps(found), flush=True)
    shoot_presenter(page, out, prefix)
    return found


def shoot_presenter(page, out: Path, prefix: str) -> None:
    """The presenter view as an audience sees it: switched on, then Run (each method once)."""
    page.locator("#presenter input").check()
    page.wait_for_timeout(500)
    start = time.time()
    page.click("#run-btn")
    # the status still says the last run's "Done" until this one starts
    page.wait_for_function("() => !document.querySelector('#status').textContent.trim().startsWith('Done')", polling=POLL_MS,
                           timeout=60_000)
    page.wait_for_function(DONE, timeout=3_000_000, polling=POLL_MS)
    page.wait_for_function(SETTLED, timeout=600_000, polling=POLL_MS)
    page.wait_for_timeout(1000)
    print(f"--- presenter run, {time.time() - start:.0f} s in all")
    page.screenshot(path=str(out / f"{prefix}-presenter.png"), full_page=True)
    print("presenter view height:", page.evaluate("() => document.documentElement.scrollHeight"))
    page.locator("#presenter input").uncheck()
    page.wait_for_timeout(500)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/app-check")
    ap.add_argument("--port", type=int, default=7861)
    ap.add_argument("--prefix", default="default-run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per method: 3 (the default, interleaved) or 1")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GRADIO_SERVER_PORT=str(args.port))
    log = open(out.parent / f"{args.prefix}-app.log" if out.name == "screenshots" else out / "app.log", "w")
    app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log,
                           stderr=subprocess.STDOUT)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            for _ in range(120):  # the server starts listening after its imports
                try:
                    page.goto(f"http://127.0.0.1:{args.port}/")
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    time.sleep(2)
            page.wait_for_selector("#run-btn", timeout=120_000)
            page.screenshot(path=str(out / f"{args.prefix}-before.png"))
            page.wait_for_function(READY, timeout=3_000_000, polling=POLL_MS)  # the background preparation
            run_once(page, out, args.prefix, args.repeat)
            print("page errors:", errors)
            browser.close()
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
