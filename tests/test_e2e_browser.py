"""The app in a real browser: Playwright for Python driving Debian's headless Chromium against a live
``python -m app.serve`` on 127.0.0.1 (issue 13's "Must show").

One diagnosis is made through the form and run to a verdict; its tokens are hovered; a heatmap is
exported and opened offline; a verdict is trained ("Train this"), stopped, resumed and finished; every
table is downloaded ten times. Screenshots go to ``tests/screenshots/`` (README.md names it). No page
may show a Streamlit exception (``stException``). The browser is never downloaded: without
``/usr/bin/chromium`` (or Playwright) these tests are skipped with a loud warning, and in CI they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "tests" / "screenshots"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run"]
LONG = 600_000  # ms: a diagnosis or a training run on a shared 2-core machine
STEPS = 60  # long enough to be stopped after its first metric (a step of the bundled student: ~0.5 s)


def _missing() -> str | None:
    if not CHROMIUM.is_file():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is missing (pip install playwright; no browser download needed)"
    return None


@pytest.fixture(scope="module")
def env_ok():
    why = _missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"BROWSER TESTS CANNOT RUN IN CI: {why}")
        msg = f"BROWSER END-TO-END TESTS SKIPPED: {why}"
        warnings.warn(msg, stacklevel=1)
        print(f"\n{'!' * 80}\n{msg}\n{'!' * 80}", file=sys.stderr)
        pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(root: Path):
    """``app.serve`` over ``root`` on a free 127.0.0.1 port, from this checkout; its log beside ``root``."""
    port = _free_port()
    log = open(root.parent / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "app.serve", "--runs-root", str(root), "--port", str(port)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.time() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.time() < deadline, (root.parent / "server.log").read_text()
            time.sleep(0.5)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _prebuilt_runs(root: Path, zoo: Path) -> None:
    """Runs the app lists from its start: ``tiny`` (a real diagnosis of the CI zoo), ``tiny-judged`` (the
    same with one verdict set to helps and the ranking redone, so the decision panel has a recommendation
    to show), ``tiny-copy`` (a second finished run) and ``busy`` (a diagnosis this test process "runs")."""
    import shutil

    import yaml

    from opsd_diag import jobs
    from opsd_diag.core.verdict import rank
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict
    from opsd_diag.zoo import task

    data = root.parent / "problems.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in task.generate(3, 5)))
    cfg = {"student": {"model": str(zoo / "student")}, "base": {"model": str(zoo / "base")},
           "teachers": [{"name": "teacher", "model": str(zoo / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": str(data)}, "sampling": {"num_samples": 2, "max_completion_length": 8, "teacher_samples": 1},
           "analysis": {"bootstrap": 10, "checker": "toy", "pass_k": [1, 2]}, "shard_size": 2,
           "ideal": {"budget": 48, "k": 2, "m": 2}}
    (root.parent / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    run_diagnosis(from_dict(cfg), root / "tiny", show_progress=False)
    shutil.copytree(root / "tiny", root / "tiny-copy")
    shutil.copytree(root / "tiny", root / "tiny-judged")
    summary = json.loads((root / "tiny-judged" / "summary.json").read_text())
    summary["verdicts"]["teacher"]["jsd"]["verdict"] = "helps"
    for r in summary["ranking"]:
        if (r["config"], r["signal"]) == ("teacher", "jsd"):
            r["verdict"] = "helps"
    summary["ranking"] = rank(summary["ranking"])
    (root / "tiny-judged" / "summary.json").write_text(json.dumps(summary))
    (root / "busy").mkdir()
    (root / "busy" / "manifest.json").write_text(json.dumps({"status": "running", "n_shards": 2}))
    jobs.write_status(root / "busy", "running", kind="diagnosis", stage="rollouts and scoring", done=1, total=2)


@pytest.fixture(scope="module")
def server(env_ok, tmp_path_factory, ci_zoo):
    root = tmp_path_factory.mktemp("e2e") / "runs"
    root.mkdir()
    _prebuilt_runs(root, ci_zoo)
    held_out = root.parent / "held_out.jsonl"
    held_out.write_text("".join(ln + "\n" for ln in (REPO / "sample_data/problems/test.jsonl").read_text()
                                .splitlines()[:3]))
    with serve_app(root) as url:
        yield {"url": url, "root": root, "held_out": held_out, "log": root.parent / "server.log"}
    # every job the app started is ended too (they run in their own process groups)
    for st in root.glob("*/status.json"):
        pgid = json.loads(st.read_text()).get("pgid")
        if pgid:
            try:
                os.killpg(int(pgid), signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        ctx = browser.new_context(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
        pg = ctx.new_page()
        pg.set_default_timeout(60_000)
        yield pg
        ctx.close()
        browser.close()


STATE: dict = {}


def shot(page, name: str, at=None) -> None:
    """A screenshot of the viewport (Streamlit scrolls its own container), ``at`` scrolled into view."""
    if at is not None:
        at.scroll_into_view_if_needed()
    time.sleep(0.8)  # charts draw after the script run
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def no_exception(page) -> None:
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator(
        '[data-testid="stException"]').first.inner_text()


def settle(page, seconds: float = 0.6) -> None:
    """Let a rerun start and finish (the running indicator goes away)."""
    time.sleep(seconds)
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120_000)


def fill(page, label: str, value) -> None:
    box = page.get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")
    settle(page)


def select(page, label: str, option: str) -> None:
    page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text(label, exact=True)).click()
    page.get_by_role("option", name=option, exact=True).click()
    settle(page)


def nav(page, title: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_text(title, exact=True).click()
    page.get_by_role("heading", name=title, level=1).wait_for()
    settle(page, 1.0)


def test_form_runs_a_diagnosis_to_a_verdict(server, page):
    from playwright.sync_api import expect

    page.goto(server["url"] + "/new_run")
    page.get_by_role("heading", name="New diagnosis").wait_for()
    for label, value in (("First N problems", 3), ("Samples per prompt", 2), ("Max new tokens", 24),
                         ("Teacher samples per prompt", 1), ("Predictor budget (continuations)", 60),
                         ("Candidates per model (k)", 2), ("Continuations per candidate (m)", 2)):
        fill(page, label, value)
    page.get_by_text("The exact prompt each model sees (chat template applied)").click()
    expect(page.get_by_text("<|im_start|>user").first).to_be_visible(timeout=60_000)  # the tokenizer loads first
    fill(page, "Run directory", server["root"] / "e2e-form")
    shot(page, "01-diagnosis-form")
    page.get_by_role("button", name="Start diagnosis").click()
    expect(page.get_by_text("predictor:").first).to_be_visible(timeout=LONG)  # the phases are shown
    shot(page, "02-diagnosis-progress", page.get_by_text("predictor:").first)
    expect(page.get_by_text("Finished:").first).to_be_visible(timeout=LONG)
    no_exception(page)
    page.get_by_role("button", name="Open this run").click()
    page.get_by_role("heading", name="Overview", level=1).wait_for()
    expect(page.get_by_text("Verdict and ranking")).to_be_visible()
    expect(page.get_by_role("button", name="Train this").first).to_be_visible()
    no_exception(page)
    shot(page, "03-overview-verdict", page.get_by_text("Verdict and ranking"))
    STATE["diagnosis"] = server["root"] / "e2e-form"


def test_hover_a_token_reads_its_tooltip(server, page):
    if "diagnosis" not in STATE:
        pytest.skip("needs the diagnosis of the form test")
    nav(page, "Tokens")
    token = page.locator(".opsd-hm .t").nth(4)
    token.scroll_into_view_if_needed()
    token.hover()
    tip = token.locator(".tip")
    tip.wait_for(state="visible")
    text = tip.inner_text()
    assert "pos 4" in text and "r_opd" in text and "student top-" in text, text
    box = tip.bounding_box()
    tokens = page.locator(".opsd-hm").first.locator(".t")
    tokens.last.wait_for()
    right = max(b["x"] + b["width"] for b in (tokens.nth(i).bounding_box() for i in range(tokens.count())))
    assert box["x"] >= right - 1, (box, right)  # in the gutter: it hides no token, the next line stays hoverable
    page.locator(".opsd-hm .t").nth(5).hover()
    assert page.locator(".opsd-hm .t").nth(5).locator(".tip").is_visible()
    no_exception(page)
    shot(page, "04-token-tooltip")


def test_export_a_heatmap_html_that_makes_no_network_request(server, page, tmp_path):
    if "diagnosis" not in STATE:
        pytest.skip("needs the diagnosis of the form test")
    with page.expect_download() as dl:
        page.locator('[data-testid="stDownloadButton"]').filter(has_text="Heatmap HTML").click()
    assert dl.value.failure() is None
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert path.name.endswith(".html") and "rollout" in path.name
    offline = page.context.new_page()
    requests = []
    offline.on("request", lambda r: requests.append(r.url))
    offline.goto(path.as_uri())
    offline.locator(".opsd-hm .t").nth(2).hover()
    assert offline.locator(".opsd-hm .t").nth(2).locator(".tip").is_visible()
    time.sleep(1)
    assert requests == [path.as_uri()], requests  # the file itself, nothing else
    offline.screenshot(path=str(SHOTS / "05-exported-heatmap.png"), full_page=True)
    offline.close()


def test_train_this_first_metric_stop_resume_finish(server, page):
    from playwright.sync_api import expect

    if "diagnosis" not in STATE:
        pytest.skip("needs the diagnosis of the form test")
    nav(page, "Overview")
    page.locator('[data-testid="stButton"] button:not([disabled])').filter(has_text="Train this").first.click()
    page.get_by_role("heading", name="Train", level=1).wait_for()
    settle(page, 1.0)
    for label, value in (("Steps", STEPS), ("Prompts per step", 2)):
        fill(page, label, value)
    fill(page, "Held-out problems (scored at the start and the end: the realised gain)", server["held_out"])
    fill(page, "Run directory", server["root"] / "e2e-train")
    shot(page, "06-train-this-form")
    page.get_by_role("button", name="Start training").click()
    stop = page.get_by_role("button", name="Stop (saves a checkpoint first)")
    resume = page.get_by_role("button", name="Resume", exact=True)
    expect(page.get_by_text(re.compile(r"^step \d+: loss")).first).to_be_visible(timeout=LONG)  # a first metric
    shot(page, "07-first-metric", page.get_by_text(re.compile(r"^step \d+: loss")).first)
    stop.click()
    expect(resume).to_be_visible(timeout=LONG)  # no reload: the fragment follows the run
    expect(stop).to_have_count(0)
    expect(page.get_by_text(re.compile(r"^stopped: step \d+ of")).first).to_be_visible()
    shot(page, "08-stopped", resume)
    resume.click()
    expect(stop).to_be_visible(timeout=120_000)
    expect(page.get_by_text(f"finished: step {STEPS} of {STEPS}").first).to_be_visible(timeout=LONG)
    expect(stop).to_have_count(0)
    expect(resume).to_have_count(0)
    no_exception(page)
    shot(page, "09-finished")
    assert (server["root"] / "e2e-train" / "prediction.json").is_file()
    nav(page, "Track record")
    expect(page.get_by_text("Runs scored")).to_be_visible()
    no_exception(page)
    shot(page, "10-track-record")


def test_download_each_table_ten_times(server, page):
    if "diagnosis" not in STATE:
        pytest.skip("needs the diagnosis of the form test")
    nav(page, "Export")
    box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text("Table", exact=True))
    box.click()
    tables = page.get_by_role("option").all_inner_texts()
    page.keyboard.press("Escape")
    assert {"summary", "tokens", "topk", "verdicts", "nodes"} <= set(tables)
    names = {}
    for table in tables:
        select(page, "Table", table)
        page.get_by_text(re.compile(f"^{table}: \\d+ rows")).wait_for()  # the page shows this table now
        settle(page)
        prepare = page.get_by_role("button", name=f"Prepare the {table} files")
        if prepare.count():
            prepare.click()
            settle(page)
        for fmt, times in (("CSV", 10), ("PARQUET", 1), ("JSON", 1)):
            button = page.locator('[data-testid="stDownloadButton"]').filter(has_text=fmt).first
            for _ in range(times):
                with page.expect_download(timeout=30_000) as dl:
                    button.click()
                assert dl.value.failure() is None, (table, fmt)
                assert dl.value.suggested_filename.endswith(f"-{table}.{fmt.lower()}"), (table, fmt)
                assert Path(dl.value.path()).stat().st_size > 0
                # a person's pace: Chromium drops a download started within a burst of more than ten
                time.sleep(0.5)
                names.setdefault(dl.value.suggested_filename, set()).add(table)
    assert all(len(t) == 1 for t in names.values()) and len(names) == 3 * len(tables)  # one name per table
    no_exception(page)
    log = server["log"].read_text()
    assert "MediaFileStorageError" not in log and "Traceback" not in log, log[-3000:]
    shot(page, "11-export")


# ----------------------------------------------------------------------------- issue 23: the app as a decision tool


def _open(page, server, path: str = "", **params) -> None:
    from urllib.parse import urlencode

    page.goto(server["url"] + "/" + path + ("?" + urlencode(params) if params else ""))
    settle(page, 1.0)


def _selected(page, label: str) -> str:
    """What a selectbox shows: its text and its input's value (a searchable selectbox shows it there)."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has=page.get_by_text(label, exact=True)).first
    shown = box.evaluate("e => e.textContent + ' ' + [...e.querySelectorAll('input')].map(i => i.value + ' ' + "
                         "(i.getAttribute('aria-label') || '')).join(' ')")
    return shown.replace(label, "", 1)


def test_decision_panel_recommends_and_trains_it(server, page):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, server, run=str(server["root"] / "tiny-judged"))
    page.get_by_role("heading", name="Overview", level=1).wait_for()
    from opsd_diag.run import Run

    # with predictor v2's model file the panel leads with v2 and the v1 rule's call follows as secondary evidence
    v2 = Run.load(server["root"] / "tiny-judged").predictions() is not None
    if v2:
        expect(page.get_by_text("Predicted effect per (config, method)")).to_be_visible(timeout=60_000)
        page.get_by_text("The v1 rule's call").click()  # folded away under v2's decision
    expect(page.get_by_text(("The v1 rule recommends" if v2 else "Recommended") + ": teacher · jsd")).to_be_visible(
        timeout=60_000)
    expect(page.get_by_text("Runner-up (best of another config)")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("Cheap baselines pick")).to_be_visible(timeout=60_000)
    expect(page.get_by_text(re.compile("In a pre-registered study .* toy world.* helps verdicts"))).to_be_visible(timeout=60_000)
    expect(page.get_by_text(re.compile("Symbols of the rule"))).to_be_visible(timeout=60_000)
    no_exception(page)
    shot(page, "23-overview-decision")
    page.locator(".st-key-decide-train-v1 button" if v2 else ".st-key-decide-train button").first.click()
    page.get_by_role("heading", name="Train", level=1).wait_for()
    settle(page, 1.0)
    assert "teacher" in _selected(page, "Teacher config") and "jsd" in _selected(page, "Signal")
    no_exception(page)


def test_train_this_on_every_row_kind(server, page):
    """Bug 2: a self-teacher's a_d2 row prefilled r_opd; rows that cannot be trained offered the button."""
    _open(page, server, run=str(server["root"] / "tiny"))
    page.get_by_role("heading", name="Overview", level=1).wait_for()
    untrainable = page.locator(".st-key-train-self_full-a_d2 button").first
    assert untrainable.is_disabled()
    for config, signal in (("teacher", "a_d2"), ("teacher", "rev_kl"), ("self_full", "jsd")):
        nav(page, "Overview")
        page.locator(f".st-key-train-{config}-{signal} button").first.click()
        page.get_by_role("heading", name="Train", level=1).wait_for()
        settle(page, 1.0)
        assert config in _selected(page, "Teacher config"), (config, signal)
        shown = {"rev_kl": "kl_rev"}.get(signal, signal)  # one name per signal: the schema's
        assert shown in _selected(page, "Signal"), (config, signal, _selected(page, "Signal"))
        assert page.get_by_text("None", exact=True).count() == 0  # no stray None badge
        no_exception(page)


def test_open_this_run_opens_the_new_run(server, page):
    """Bug 1: the sidebar's stored selection (tiny) won over Open this run (tiny-copy)."""
    from playwright.sync_api import expect

    root = server["root"]
    _open(page, server, "new_run", run=str(root / "tiny"), job=str(root / "tiny-copy"))
    expect(page.get_by_text("Finished:").first).to_be_visible(timeout=60_000)
    page.get_by_role("button", name="Open this run").click()
    page.get_by_role("heading", name="Overview", level=1).wait_for()
    settle(page, 1.0)
    expect(page.get_by_text(str(root / "tiny-copy") + " ·")).to_be_visible(timeout=60_000)
    assert f"run={root / 'tiny-copy'}".replace("/", "%2F") in page.url or str(root / "tiny-copy") in page.url
    nav(page, "Tokens")  # and it stays open on the next page
    nav(page, "Overview")
    expect(page.get_by_text(str(root / "tiny-copy") + " ·")).to_be_visible(timeout=60_000)
    no_exception(page)


def _draft_saved(root: Path, url: str, wanted: set, timeout: float = 120.0) -> None:
    """Wait until the tab's draft file (``.drafts/ID.json``, ID from the URL) holds every ``wanted`` value."""
    from urllib.parse import parse_qs, urlparse

    path = root / ".drafts" / f"{parse_qs(urlparse(url).query)['draft'][0]}.json"
    deadline = time.time() + timeout
    while True:
        try:
            values = {v for v in json.loads(path.read_text()).values() if isinstance(v, (str, int, float))}
        except (OSError, ValueError):
            values = set()
        if wanted <= values:
            return
        assert time.time() < deadline, f"the draft {path} never held {wanted}: {values}"
        time.sleep(0.3)


def test_reload_mid_diagnosis_keeps_progress_and_entries(server, page):
    """Bug 3: a reload during a running diagnosis lost its progress panel and every form entry."""
    from playwright.sync_api import expect

    busy = server["root"] / "busy"
    _open(page, server, "new_run", job=str(busy))
    expect(page.get_by_text(f"Progress of {busy}")).to_be_visible(timeout=60_000)
    fill(page, "First N problems", 3)
    fill(page, "Samples per prompt", 2)
    fill(page, "Run directory", busy)
    assert "draft=" in page.url and "job=" in page.url
    _draft_saved(server["root"], page.url, {3, 2, str(busy)})  # a loaded machine may not have rerun yet
    page.reload()
    page.get_by_role("heading", name="New diagnosis").wait_for()
    settle(page, 1.5)
    expect(page.get_by_text(f"Progress of {busy}")).to_be_visible(timeout=60_000)
    assert page.get_by_label("First N problems", exact=True).input_value() == "3"
    assert page.get_by_label("Samples per prompt", exact=True).input_value() == "2"
    assert page.get_by_label("Run directory", exact=True).input_value() == str(busy)
    no_exception(page)


def test_download_names_are_distinct(server, page):
    """Bug 5: the summary table's JSON and summary.json downloaded under one name."""
    _open(page, server, run=str(server["root"] / "tiny"))
    nav(page, "Export")
    names = []
    for label in ("JSON", "summary.json"):
        with page.expect_download(timeout=30_000) as dl:
            page.locator('[data-testid="stDownloadButton"]').filter(
                has=page.get_by_text(label, exact=True)).first.click()
        names.append(dl.value.suggested_filename)
        time.sleep(0.5)
    assert names == ["tiny-summary.json", "tiny-summary-file.json"], names


PAGES_23 = ("Overview", "Tokens", "Signals", "Evidence", "Export", "New diagnosis", "Train", "Compare", "Track record")


def test_screenshots_of_every_page(server, page):
    """tests/screenshots/23-page-*.png: every page at 1440x900 on the judged tiny run, for a reviewer."""
    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, server, run=str(server["root"] / "tiny-judged"))
    for title in PAGES_23:
        nav(page, title)
        no_exception(page)
        shot(page, f"23-page-{title.lower().replace(' ', '-')}")


def test_tooltip_near_the_bottom_stays_inside_the_viewport(server, page, tmp_path):
    """Item 8: a ~400 px tooltip of a token near the bottom edge ran below a 1440x900 viewport; it flips
    above its token (and is clamped to the viewport, scrolling inside, where it fits neither way)."""
    from test_report import fake_run

    long = fake_run(tmp_path / "long", n_prompts=1, n_samples=1, length=300)  # one tall heatmap, outside the root
    page.set_viewport_size({"width": 1440, "height": 900})
    _open(page, server, "tokens", run=str(long.path))
    page.get_by_role("heading", name="Tokens", level=1).wait_for()
    tokens = page.locator(".opsd-hm").first.locator(".t")
    tokens.last.wait_for()
    right = max(b["x"] + b["width"] for b in (tokens.nth(i).bounding_box() for i in range(tokens.count())))
    for height, n in ((900, tokens.count() - 1), (300, tokens.count() // 2)):
        page.set_viewport_size({"width": 1440, "height": height})
        token = tokens.nth(n)
        token.evaluate("e => e.scrollIntoView({block: 'end'})")  # the token on the viewport's bottom edge
        time.sleep(0.3)
        box = token.bounding_box()
        assert box["y"] + box["height"] > height - 60, (height, box)  # the case that ran below
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        tip = token.locator(".tip")
        tip.wait_for(state="visible")
        b = tip.bounding_box()
        assert b["height"] > 200 or height == 300, b  # a tall tooltip: every signal and both top-k rows
        assert 0 <= b["y"] and b["y"] + b["height"] <= height + 0.5, (height, b)  # inside the viewport
        assert 0 <= b["x"] and b["x"] + b["width"] <= 1440 and b["x"] >= right - 1, (b, right)  # in the gutter
        text = tip.inner_text()
        assert f"config {long.top_config()} · coloured by r_opd" in text and f"pos {n}" in text, text
        if height == 300:  # taller than the viewport: capped to it, the rest scrolls inside
            assert tip.evaluate("e => e.scrollHeight > e.clientHeight"), b
        else:
            assert b["y"] + b["height"] <= box["y"] + box["height"] + 0.5, (b, box)  # flipped above its token
            shot(page, "23-tokens-tooltip-bottom")
    no_exception(page)
