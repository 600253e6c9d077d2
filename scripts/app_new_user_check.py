"""New-user check of the app: `python app.py` on the real default pair, driven in Debian's
chromium via Playwright: a run at the default settings (int8, 32 tokens), then Precision fp32
(32 tokens, set in the "Model pair and devices" accordion). Prints each run's
status and summary and any page errors; the app's log and full-page screenshots go to --out.

    python scripts/app_new_user_check.py [--out out/app-check]
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ui.handlers import DEFAULT_PRECISION  # noqa: E402
DONE = ("w => (document.querySelector('#summary').innerText.includes(w)"
        " && document.querySelector('#status').innerText.includes('Done'))"
        " || document.querySelector('#status').innerText.toLowerCase().includes('error')")


def run(page, out: Path, tokens: int, precision: str | None):
    if precision:
        page.get_by_role("button", name="Model pair and devices").click()
        page.get_by_label("Precision", exact=True).click()
        page.get_by_role("option", name=precision, exact=True).click()
    box = page.locator("#max-new-tokens input[type=number]")
    if not box.is_visible():  # the length slider sits in a folded group
        page.get_by_text("Sampling and length").first.click()
    box.fill(str(tokens))
    box.press("Enter")
    start = time.time()
    page.click("#run-btn")
    page.wait_for_function(DONE, arg=f"precision {precision or DEFAULT_PRECISION}", timeout=1_500_000)
    page.wait_for_timeout(3000)
    print(f"--- precision {precision or 'default'}, {tokens} tokens, {time.time() - start:.0f} s")
    print("STATUS:", page.inner_text("#status")[:400])
    print("SUMMARY:", page.inner_text("#summary")[:1200], flush=True)
    page.screenshot(path=str(out / f"{precision or 'default'}.png"), full_page=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out/app-check")
    ap.add_argument("--port", type=int, default=7861)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GRADIO_SERVER_PORT=str(args.port))
    app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env,
                           stdout=open(out / "app.log", "w"), stderr=subprocess.STDOUT)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            for _ in range(120):  # the app loads the pair first
                try:
                    page.goto(f"http://127.0.0.1:{args.port}/")
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    time.sleep(2)
            page.wait_for_selector("#run-btn", timeout=120_000)
            run(page, out, 32, None)
            run(page, out, 32, "fp32")
            print("page errors:", errors)
            browser.close()
    finally:
        app.terminate()


if __name__ == "__main__":
    main()
