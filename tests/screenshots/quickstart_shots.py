"""Screenshots of every page at 1440x900 on the bundled example run, for a reviewer (not a test).

    python -m opsd_diag.cli run sample_data/configs/quickstart.yaml --out runs/quickstart   # once
    python tests/screenshots/quickstart_shots.py [--run runs/quickstart]

Starts ``python -m app.serve --run RUN`` on a free port of 127.0.0.1, drives Debian's /usr/bin/chromium
with Playwright (no browser download) and writes ``tests/screenshots/23-quickstart-*.png``. The browser
tests (tests/test_e2e_browser.py) take the same pages on a tiny CI run; these show a real example.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path(__file__).resolve().parent
PAGES = ("Overview", "Tokens", "Signals", "Evidence", "Export", "New diagnosis", "Train", "Compare", "Track record")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="runs/quickstart")
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "app.serve", "--run", args.run, "--port", str(port)], cwd=REPO,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                         args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(180_000)
            page.goto(f"http://127.0.0.1:{port}/")
            for title in PAGES:
                page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
                page.get_by_role("heading", name=title, level=1).wait_for()
                time.sleep(1.0)
                page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                                       timeout=180_000)
                time.sleep(1.5)  # charts draw after the script run
                page.screenshot(path=str(SHOTS / f"23-quickstart-{title.lower().replace(' ', '-')}.png"))
                if title == "Overview":
                    page.get_by_text("Verdict and ranking").scroll_into_view_if_needed()
                    page.mouse.wheel(0, 1)  # the tables' canvases draw when a scroll event shows them
                    time.sleep(3.0)
                    page.screenshot(path=str(SHOTS / "23-quickstart-overview-verdicts.png"))
                if title == "Tokens":
                    token = page.locator(".opsd-hm .t").nth(6)
                    token.hover()
                    time.sleep(0.5)
                    page.screenshot(path=str(SHOTS / "23-quickstart-tokens-tooltip.png"))
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
