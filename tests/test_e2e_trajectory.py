"""The Trajectory page in a real browser: a TRL GKDTrainer run of 2 steps on the toy models with the
DiagnosisCallback, its probe folder opened as a trajectory (signals, verdicts, predicted gain, collapse
detectors over steps), and one probe opened as an ordinary run. Chromium and Playwright as in
tests/test_e2e_browser.py (skipped loudly without them, failing in CI)."""

from __future__ import annotations

import pytest
from test_e2e_browser import CHROMIUM, FLAGS, SHOTS, env_ok, no_exception, serve_app, settle, shot  # noqa: F401 (fixture)
from test_trl_callback import train_gkd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(env_ok, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("traj") / "runs"
    root.mkdir()
    probes = train_gkd(root / "gkd")["tmp"] / "probes"
    with serve_app(root) as url:
        yield {"url": url, "probes": probes}


def test_a_trl_run_s_probes_open_as_a_trajectory(served):
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.set_default_timeout(120_000)
        page.goto(f"{served['url']}/trajectory?probes={served['probes']}")
        page.get_by_role("heading", name="Trajectory", level=1).wait_for()
        settle(page, 2.0)  # the whole page drawn (a shared machine may take a while)
        expect(page.get_by_text("2 probes, steps 0 to 2; teacher configs: teacher")).to_be_visible(timeout=120_000)
        for heading in ("Signals", "Verdicts and predicted gain", "Collapse detectors", "Probe runs"):
            expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=120_000)
        no_exception(page)
        charts = page.locator('[data-testid="stPlotlyChart"]')
        expect(charts.first).to_be_visible(timeout=120_000)
        assert charts.count() >= 5  # signals, verdicts, predicted gain, and the detectors
        for name, heading in (("01-signals", "Signals"), ("02-verdicts", "Verdicts and predicted gain"),
                              ("03-collapse", "Collapse detectors")):
            page.get_by_role("heading", name=heading).evaluate("e => e.scrollIntoView({block: 'start'})")
            shot(page, f"trajectory-{name}")
        page.get_by_role("button", name="Open step 2").click()
        page.get_by_role("heading", name="Overview", level=1).wait_for()
        settle(page, 2.0)
        no_exception(page)
        assert "step-0000002" in page.url
        shot(page, "trajectory-04-probe-overview")
        browser.close()
