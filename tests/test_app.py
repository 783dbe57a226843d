"""Every page of the Streamlit app (AppTest) on a tiny real run, plus the launcher and job helpers."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app import jobs, serve
from opsd_diag import jobs as job_protocol
from opsd_diag import prediction
from opsd_diag.run import Run
from opsd_diag.report import export

pytestmark = pytest.mark.slow  # runs models end to end: `make test` only, not `make test-fast`

REPO = Path(__file__).resolve().parents[1]
MAIN = str(REPO / "app" / "main.py")
PAGES = ("views/overview.py", "views/tokens.py", "views/signals.py", "views/evidence.py", "views/export.py",
         "views/new_run.py", "views/train.py", "views/compare.py", "views/track_record.py", "views/trajectory.py")


def _config(zoo: Path, data: Path) -> dict:
    return {"student": {"model": str(zoo / "student")}, "base": {"model": str(zoo / "base")},
            "teachers": [{"name": "teacher", "model": str(zoo / "teacher")},
                         {"name": "self_full", "context": "full_solution"}],
            "data": {"path": str(data)},
            "sampling": {"num_samples": 2, "max_completion_length": 8, "teacher_samples": 1},
            "analysis": {"bootstrap": 10, "checker": "toy", "pass_k": [1, 2]}, "shard_size": 2,
            "ideal": {"budget": 48, "k": 2, "m": 2}}


@pytest.fixture(scope="session")
def runs_root(ci_zoo, tmp_path_factory) -> Path:
    """``runs/`` with one finished tiny run (``tiny``) and one that is still running (``busy``)."""
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("app") / "runs"
    data = root.parent / "problems.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in task.generate(3, 5)))
    (root.parent / "tiny.yaml").write_text(yaml.safe_dump(_config(ci_zoo, data)))
    run_diagnosis(from_dict(_config(ci_zoo, data)), root / "tiny", show_progress=False)
    (root / "busy").mkdir()
    (root / "busy" / "manifest.json").write_text(json.dumps({"status": "running", "n_shards": 2}))
    # a live job (this test process) between shards, as status.json says
    job_protocol.write_status(root / "busy", "running", kind="diagnosis", stage="rollouts and scoring", done=0,
                              total=2)
    return root


def _app(runs_root: Path, run: str | None = "tiny") -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = str(runs_root)
    at.session_state["run_dir"] = str(runs_root / run) if run else None
    return at.run()


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_overview(runs_root):
    at = _app(runs_root)
    _ok(at)
    assert at.title[0].value == "Overview"
    assert {"config", "r_opd", "a_d2", "sign_agreement"} <= set(at.dataframe[0].value.columns)
    assert set(at.dataframe[0].value["config"]) == {"teacher", "self_full"}
    assert [m.label for m in at.metric] == ["Student accuracy", "pass@1", "pass@2"]
    assert len(at.get("plotly_chart")) == 1


def test_overview_shows_verdict_and_estimator(runs_root, tmp_path):
    run = tmp_path / "runs" / "judged"
    shutil.copytree(runs_root / "tiny", run)
    summary = json.loads((run / "summary.json").read_text())
    long = "A > 0 " + "and the reason goes on for a while " * 8 + "to its very end."
    summary["verdicts"] = {"teacher": {"r_opd": {"verdict": "helps", "reason": long, "score": 0.3}}}
    summary["ranking"] = [{"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.3}]
    summary["verdict_rule"] = "**hurts** if ..."
    summary["ideal"] = {"status": "ok", "estimator": "our estimator (docs/signals.md)", "budget": 32,
                        "continuations_used": 30, "n_nodes": 2, "n_prompts": 2, "k": 3, "m": 2}
    (run / "summary.json").write_text(json.dumps(summary))
    at = _app(run.parent, "judged")
    _ok(at)
    assert any(h.value.startswith("Verdict and ranking") for h in at.subheader)
    assert any(m.value == ":blue-background[:blue[**helps**]]" for m in at.markdown)  # coloured
    assert any(long in t.value for t in at.text)  # the whole reason, never cut off (as text, not markdown)
    assert [b.label for b in at.button if b.label == "Train this"] == ["Train this"]
    assert any("our estimator" in c.value and "budget 32" in c.value for c in at.caption)
    at.toggle(key="ov_compact").set_value(True).run()
    _ok(at)
    assert next(d.value for d in at.dataframe if "reason" in d.value.columns)["verdict"].tolist() == ["helps"]


def test_no_run_given_lists_runs_under_root(runs_root):
    at = _app(runs_root, run=None)
    _ok(at)
    assert set(at.sidebar.selectbox[0].options) == {str(runs_root / "tiny"), str(runs_root / "busy")}
    at.sidebar.selectbox[0].select(str(runs_root / "busy")).run()
    _ok(at)
    assert "not finished" in at.info[0].value and at.get("progress")


def test_tokens_page(runs_root):
    at = _app(runs_root).switch_page("views/tokens.py").run()
    _ok(at)
    html = at.html[0].value
    assert "class='opsd-hm'" in html and "student top-5" in html and "<script" not in html
    at.selectbox(key="tok_signal").select("rank_t").run()
    _ok(at)
    assert "sequential" in at.html[0].value  # a rank gets a sequential scale
    at.multiselect(key="tok_configs").set_value(["teacher", "self_full"]).run()
    _ok(at)
    assert at.html[0].value.count("class='opsd-hm'") == 2 and "config self_full" in at.html[0].value
    at.button(key="tok_jump").click().run()
    _ok(at)
    at.radio(key="tok_scale").set_value("run").run()
    at.radio(key="tok_correct").set_value("incorrect").run()
    _ok(at)
    assert "the whole run" in at.html[0].value
    at.text_input(key="tok_search").input("no such text anywhere").run()
    assert at.warning and "No rollout matches" in at.warning[0].value
    at.text_input(key="tok_search").input("").run()
    _ok(at)
    assert any(b.proto.label == "Heatmap HTML" for b in at.get("download_button"))
    assert "Token types" in [h.value for h in at.subheader]


def test_signals_page(runs_root):
    at = _app(runs_root).switch_page("views/signals.py").run()
    _ok(at)
    assert len(at.get("plotly_chart")) == 6
    at.selectbox(key="sig_signal").select("kl_rev").run()
    _ok(at)


def test_export_page(runs_root):
    at = _app(runs_root).switch_page("views/export.py").run()
    _ok(at)
    labels = [b.proto.label for b in at.get("download_button")]
    assert {"HTML (interactive, works offline)", "CSV", "PARQUET", "JSON", "summary.json"} <= set(labels)
    if export.image_export_available():
        assert at.button(key="render_img")
    else:
        assert "opsd-diag[export]" in at.info[0].value  # kaleido missing: said so, in place
    at.selectbox(key="exp_table").select("tokens").run()
    _ok(at)
    at.button(key="build_report").click().run()
    _ok(at)
    assert "HTML report" in [b.proto.label for b in at.get("download_button")]


def test_downloads_hold_their_bytes_and_are_named_per_table(runs_root):
    """Bug 3: deferred downloads failed about 1 click in 5 and two tables downloaded under one name."""
    at = _app(runs_root).switch_page("views/export.py").run()
    seen = {}
    for table in ("summary", "ci", "rollouts", "tokens"):
        at.selectbox(key="exp_table").select(table).run()
        _ok(at)
        for b in at.get("download_button"):
            assert not b.proto.deferred_file_id, b.proto.label  # bytes made before the click
            assert b.proto.ignore_rerun, b.proto.label  # the click does not rerun the page
            if b.proto.label in ("CSV", "PARQUET", "JSON"):
                seen.setdefault(b.proto.url, set()).add(table)
    assert all(len(tables) == 1 for tables in seen.values()) and len(seen) == 12


def test_new_run_bad_config_shows_error_in_place(runs_root, tmp_path):
    at = _app(runs_root).switch_page("views/new_run.py").run()
    _ok(at)
    at.radio(key="nr_mode").set_value("file").run()
    bad = tmp_path / "bad.yaml"
    for text, expected in (("student: [unclosed", "not valid YAML"),
                           (yaml.safe_dump({"student": {"model": "x"}, "teachers": [{"name": "t"}],
                                            "data": {"path": "d.jsonl"}, "sampling": {"num_sample": 2}}),
                            "sampling.num_sample: unknown key")):
        bad.write_text(text)
        at.text_input(key="config_path").input(str(bad)).run()
        at.button(key="validate").click().run()
        assert not at.exception
        assert expected in at.error[0].value and "Traceback" not in at.error[0].value
    at.text_input(key="config_path").input(str(runs_root.parent / "tiny.yaml")).run()
    at.button(key="validate").click().run()
    assert not at.exception and not at.error and "Valid" in at.success[0].value


def test_new_run_refuses_a_model_it_cannot_find_before_starting(runs_root, tmp_path):
    """A teacher model that is not there is an error in the form (Validate and Start alike); nothing starts."""
    cfg = yaml.safe_load((runs_root.parent / "tiny.yaml").read_text())
    cfg["teachers"][0]["model"] = str(tmp_path / "no_such_teacher")
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump(cfg))
    at = _app(runs_root).switch_page("views/new_run.py").run()
    at.radio(key="nr_mode").set_value("file").run()
    at.text_input(key="config_path").input(str(tmp_path / "missing.yaml")).run()
    at.text_input(key="out_dir").input(str(tmp_path / "runs" / "missing")).run()
    for button in ("validate", "start"):
        at.button(key=button).click().run()
        assert not at.exception and not at.success
        assert [e.value for e in at.error] == [f"teacher 'teacher': model directory {tmp_path / 'no_such_teacher'} "
                                               f"does not exist: check the path (relative paths start from "
                                               f"{Path.cwd()})"]
    assert not (tmp_path / "runs").exists()


def test_new_run_launch_failure_is_followed_from_the_run_dir(runs_root, tmp_path):
    """A model that is found but cannot load (its weights damaged) fails in the job, and the page follows it there."""
    cfg = yaml.safe_load((runs_root.parent / "tiny.yaml").read_text())
    broken = tmp_path / "no_such_model"
    shutil.copytree(cfg["student"]["model"], broken)
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    cfg["student"]["model"] = str(broken)
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(cfg))
    at = _app(runs_root).switch_page("views/new_run.py").run()
    at.radio(key="nr_mode").set_value("file").run()
    at.text_input(key="config_path").input(str(tmp_path / "broken.yaml")).run()
    at.text_input(key="out_dir").input(str(tmp_path / "runs" / "broken")).run()
    at.button(key="start").click().run()
    assert not at.exception
    run_dir = tmp_path / "runs" / "broken"
    st = job_protocol.read_status(run_dir)
    assert st["argv"][-4:] == ["run", str(tmp_path / "broken.yaml"), "--out", str(run_dir)]
    deadline = __import__("time").time() + 120
    while job_protocol.status(run_dir)["status"] in job_protocol.ACTIVE:
        assert __import__("time").time() < deadline
        __import__("time").sleep(0.2)
    at.run()
    assert not at.exception
    assert any(f"cannot load model '{broken}'" in e.value for e in at.error), [e.value for e in at.error]
    # the job directory holds only the job's own files: status, log and the (empty) lock file, no half-written run
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "status.json", "stdout.log"]
    assert (run_dir / ".lock").read_text() == ""


def test_new_run_opens_a_finished_job(runs_root):
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = str(runs_root)
    at.session_state["job"] = str(runs_root / "tiny")
    at.run().switch_page("views/new_run.py").run()
    _ok(at)
    assert at.get("progress")[0].proto.value == 100 and "Finished" in at.success[0].value
    at.button(key="open_run").click().run()
    _ok(at)
    assert at.title[0].value == "Overview" and at.session_state["run_dir"] == str(runs_root / "tiny")


def test_progress_counts_shards(runs_root, tmp_path):
    done = jobs.progress(runs_root / "tiny")
    assert done.status == "finished" and done.fraction == 1.0 and done.text == "finished"
    assert [p.state for p in done.phases] == ["done", "done", "done", "done"]
    busy = jobs.progress(runs_root / "busy")
    assert (busy.status, busy.done, busy.total) == ("running", 0, 2) and "0 of 2 shards" in busy.text
    assert jobs.progress(tmp_path / "none").status == "unknown"
    (tmp_path / "dead").mkdir()
    job_protocol.write_status(tmp_path / "dead", "running", owner=False, pid=2**22 + 7, start_time=1)  # gone
    dead = jobs.progress(tmp_path / "dead")
    assert dead.status == "died" and "ended without a result" in dead.error
    found = [p.name for p in job_protocol.find_runs(runs_root, "diagnosis")]
    assert {"tiny", "busy"} <= set(found) and job_protocol.find_runs(tmp_path / "missing") == []


def test_serve_binds_localhost_and_builds_the_example_first(monkeypatch, tmp_path):
    config = (REPO / ".streamlit" / "config.toml").read_text()
    assert 'address = "127.0.0.1"' in config and "headless = true" in config
    calls = []

    class Done:
        returncode = 0

    def fake_child(argv, cwd=None):
        assert isinstance(argv, list) and cwd == tmp_path
        calls.append(argv)
        return Done.returncode

    monkeypatch.setattr(serve, "REPO", tmp_path)
    monkeypatch.setattr(serve, "child", fake_child)
    assert serve.main([]) == 0
    assert calls[0][-4:] == ["run", "sample_data/configs/quickstart.yaml", "--out", "runs/quickstart"]
    st_argv = calls[1]
    assert st_argv[1:4] == ["-m", "streamlit", "run"]
    port = st_argv[st_argv.index("--server.port") + 1]
    assert st_argv[st_argv.index("--server.address") + 1] == "127.0.0.1" and int(port) > 0
    assert st_argv[-2:] == ["--run", "runs/quickstart"]
    calls.clear()
    assert serve.main(["--run", str(tmp_path), "--port", "8765"]) == 0
    assert len(calls) == 1 and "8765" in calls[0]  # an explicit run is opened as is, nothing built


def test_train_page_errors_in_place_then_starts_and_follows_a_run(runs_root, tmp_path):
    """One click starts `opsd-train` (argv list, own process group); the page follows it to the end."""
    import time

    from fixtures_trainer import build_world, config_dict

    at = _app(runs_root).switch_page("views/train.py").run()
    _ok(at)
    at.radio(key="train_mode").set_value("file").run()
    bad = tmp_path / "no_training.yaml"
    bad.write_text((runs_root.parent / "tiny.yaml").read_text())  # a diagnosis config without `training`
    at.text_input(key="train_config").input(str(bad)).run()
    at.button(key="train_start").click().run()
    assert not at.exception and at.error and "training" in at.error[0].value, [e.value for e in at.error]
    assert "Traceback" not in at.error[0].value and not list((runs_root).glob("train-*"))

    world = build_world(tmp_path / "world")
    good = tmp_path / "train.yaml"
    good.write_text(yaml.safe_dump(config_dict(world, max_steps=2)))
    at.text_input(key="train_config").input(str(good)).run()
    at.text_input(key="train_out").input(str(runs_root / "train-app")).run()
    at.button(key="train_start").click().run()
    _ok(at)
    run_dir = runs_root / "train-app"
    assert at.session_state["train_run"] == str(run_dir) and "Started" in at.success[0].value
    assert job_protocol.read_status(run_dir)["argv"][1:3] == ["-m", "trainer"]
    deadline = time.time() + 240
    while job_protocol.status(run_dir)["status"] in ("running", "starting") and time.time() < deadline:
        time.sleep(1)
    assert job_protocol.status(run_dir)["status"] == "finished", (run_dir / "stdout.log").read_text()[-2000:]
    at.run()
    _ok(at)
    assert "finished: step 2 of 2" in at.get("progress")[0].proto.text
    assert len(at.get("plotly_chart")) >= 1  # the loss curves of metrics.jsonl


# ----------------------------------------------------------------------------- issue 13: every page, the bugs


def _texts(at: AppTest) -> list[str]:
    return [e.value for kind in ("caption", "markdown", "info", "warning", "success", "error")
            for e in getattr(at, kind)]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_exception(runs_root, page):
    at = _app(runs_root)
    if page != PAGES[0]:
        at.switch_page(page).run()
    _ok(at)
    assert at.title[0].value  # the page's own title, no stException
    # every file a caption cites exists (the Overview once cited a file that did not)
    cited = {m for t in _texts(at) for m in re.findall(r"\b[\w.-]+/[\w./-]+\.(?:md|py|json|yaml|parquet)\b", t)}
    assert all((REPO / c).exists() or Path(c).exists() for c in cited), cited


def test_a_rewritten_summary_shows_at_once(runs_root, tmp_path):
    """Bug 1: runs were cached by the manifest's time while the predictor rewrites only summary.json."""
    run = tmp_path / "runs" / "late"
    shutil.copytree(runs_root / "tiny", run)
    summary = json.loads((run / "summary.json").read_text())
    summary.update(verdicts={}, ranking=[])
    (run / "summary.json").write_text(json.dumps(summary))
    at = _app(run.parent, "late")
    assert not any(b.label == "Train this" for b in at.button)
    summary["verdicts"] = {"teacher": {"r_opd": {"verdict": "hurts", "reason": "late verdict.", "score": -0.1}}}
    summary["ranking"] = [{"config": "teacher", "signal": "r_opd", "verdict": "hurts", "score": -0.1}]
    time.sleep(0.01)
    (run / "summary.json").write_text(json.dumps(summary))
    at.run()
    _ok(at)
    assert any("late verdict." in t.value for t in at.text)  # the reason is plain text (never markdown)


def test_manifest_says_finished_only_after_the_predictor(ci_zoo, tmp_path, monkeypatch):
    """Bug 1: the app showed "Finished" while the predictor still ran."""
    from opsd_diag.engine import diagnose
    from opsd_diag.config.spec import from_dict
    from opsd_diag.zoo import task

    seen = {}
    real = diagnose.run_predictor

    def spy(run_dir, *a, **k):
        seen["manifest"] = json.loads((run_dir / "manifest.json").read_text())["status"]
        seen["progress"] = jobs.progress(run_dir)
        return real(run_dir, *a, **k)

    real_shard = diagnose.run_shard

    def shard_spy(prep, index, on_scoring=None):  # what the page reads while a shard is scored
        def scoring():
            on_scoring()
            seen.setdefault("while_scoring", jobs.progress(tmp_path / "run"))
        return real_shard(prep, index, on_scoring=scoring)

    monkeypatch.setattr(diagnose, "run_predictor", spy)
    monkeypatch.setattr(diagnose, "run_shard", shard_spy)
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in task.generate(2, 9)))
    cfg = _config(ci_zoo, data)
    cfg["teachers"] = cfg["teachers"][:1]
    cfg["shard_size"] = 1  # two shards
    diagnose.run_diagnosis(from_dict(cfg), tmp_path / "run", show_progress=False)
    p = seen["progress"]
    assert seen["manifest"] == "running" and p.status == "running" and p.stage == "predictor"
    assert [ph.state for ph in p.phases] == ["done", "done", "done", "running"] and "predictor" in p.text
    assert jobs.progress(tmp_path / "run").status == "finished"
    rollouts, scoring = seen["while_scoring"].phases[:2]  # shard 1 sampled (and timed), being scored
    assert (rollouts.name, rollouts.done, scoring.name, scoring.done, scoring.total) == ("rollouts", 1, "scoring", 0, 2)
    assert rollouts.eta_s is not None and "rollouts 1 of 2 shards, scoring 0 of 2 shards" in seen["while_scoring"].text


def test_run_picker_lists_each_run_once_and_survives_a_reload(runs_root, monkeypatch):
    """Bug 7: one run listed twice (absolute and relative path); a reload reset the choice."""
    monkeypatch.chdir(runs_root.parent)
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = "runs"
    at.session_state["run_dir"] = "runs/tiny"
    at.run()
    _ok(at)
    options = at.sidebar.selectbox[0].options
    assert len(options) == len(set(options)) and str(runs_root / "tiny") in options
    assert at.query_params["run"] == [str(runs_root / "tiny")] or at.query_params["run"] == str(runs_root / "tiny")
    at.sidebar.selectbox[0].select(str(runs_root / "busy")).run()
    reloaded = AppTest.from_file(MAIN, default_timeout=60)  # a reload: a new session, the same URL
    reloaded.query_params["run"] = str(runs_root / "busy")
    reloaded.run()
    assert reloaded.session_state["run_dir"] == str(runs_root / "busy")


def test_evidence_page_shows_nodes_and_directions(runs_root):
    at = _app(runs_root).switch_page("views/evidence.py").run()
    _ok(at)
    assert (runs_root / "tiny" / "nodes.parquet").is_file()
    v2 = Run.load(runs_root / "tiny").predictions() is not None  # predictor v2's contribution figure comes first
    assert len(at.get("plotly_chart")) == 4 + v2
    cands = next(d.value for d in at.dataframe if "p_student" in d.value.columns)
    assert {"token", "p_student", "q_teacher", "success", "sampled"} <= set(cands.columns)
    at.selectbox(key="ev_signal").select("jsd").run()
    _ok(at)
    # a run without a predictor says so in place
    no_ideal = runs_root.parent / "no_ideal"
    if not no_ideal.exists():
        shutil.copytree(runs_root / "tiny", no_ideal)
        summary = json.loads((no_ideal / "summary.json").read_text())
        summary.pop("ideal", None)
        (no_ideal / "summary.json").write_text(json.dumps(summary))
        (no_ideal / "nodes.parquet").unlink()
    at = _app(runs_root.parent, "no_ideal").switch_page("views/evidence.py").run()
    _ok(at)
    assert "no ideal-gradient predictor" in at.info[0].value


def _training_run(root: Path, name: str, status: str, prediction: dict | None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("x: 1\n")
    recs = [{"kind": "eval", "step": 0, "pass@1": 0.3}, {"kind": "train", "step": 1, "loss": 1.0},
            {"kind": "train", "step": 2, "loss": 0.5}, {"kind": "eval", "step": 2, "pass@1": 0.4}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    job_protocol.write_status(run, status, owner=False, kind="training", step=2, max_steps=2, method="opd")
    if prediction:
        (run / "prediction.json").write_text(json.dumps(prediction))
    return run


def test_compare_and_track_record_pages(runs_root, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(runs_root / "tiny", root / "a")
    shutil.copytree(runs_root / "tiny", root / "b")
    for i, (verdict, score) in enumerate((("helps", 0.2), ("hurts", -0.1), ("helps", 0.05))):
        _training_run(root, f"train-{i}", "finished", {"config": "teacher", "signal": "r_opd", "verdict": verdict,
                                                       "score": score, "diagnosis": str(root / "a")})
    at = _app(root, "a").switch_page("views/compare.py").run()
    _ok(at)
    assert {"config", "r_opd (A)", "r_opd (B)", "r_opd (B − A)"} <= set(at.dataframe[0].value.columns)
    at.radio(key="cmp_what").set_value("training").run()
    _ok(at)
    assert at.get("plotly_chart")
    side = at.dataframe[0].value
    assert len(side) == 2 and side["gain"].round(3).tolist() == [0.1, 0.1] and set(side["predicted"]) <= {
        "helps", "hurts"}
    at.switch_page("views/track_record.py").run()
    _ok(at)
    assert [m.label for m in at.metric][:2] == ["Runs scored", "Spearman (score vs gain)"]
    assert at.metric[0].value == "3" and set(at.dataframe[1].value["status"]) >= {"finished"}


def _wait(run_dir: Path, until, timeout: float = 300) -> dict:
    deadline = time.time() + timeout
    while not until(job_protocol.status(run_dir)):
        assert time.time() < deadline, (Path(run_dir) / "stdout.log").read_text()[-3000:]
        time.sleep(0.5)
    return job_protocol.status(run_dir)


def _metrics(run_dir: Path) -> list[dict]:
    return job_protocol.read_jsonl(Path(run_dir) / "metrics.jsonl")[0]


def test_train_this_from_a_verdict_then_stop_and_resume(runs_root, tmp_path):
    """Item 2 and bug 2: "Train this" launches opsd-train --from-diagnosis as a job recorded in the track
    record; after a graceful stop the Stop button goes and Resume comes; the resumed run shows Stop."""
    root = tmp_path / "runs"
    shutil.copytree(runs_root / "tiny", root / "tiny")
    at = _app(root)
    _ok(at)
    first = next(b for b in at.button if b.label == "Train this")
    first.click().run()
    _ok(at)
    assert at.title[0].value == "Train" and at.radio(key="train_mode").value == "verdict"
    wanted = at.session_state["train_this"]
    assert at.selectbox(key="tt_config").value == wanted["config"] and at.selectbox(key="tt_signal").value == \
        wanted["signal"]
    assert any("--from-diagnosis" in c.value for c in at.code)  # the exact command, shown
    at.number_input(key="tt_steps").set_value(40).run()
    at.number_input(key="tt_batch").set_value(2).run()
    at.text_input(key="tt_eval").input(str(runs_root.parent / "problems.jsonl")).run()
    at.text_input(key="tt_out").input(str(root / "train-this")).run()
    at.button(key="tt_start").click().run()
    _ok(at)
    run_dir = root / "train-this"
    assert (run_dir / "prediction.json").is_file() or _wait(run_dir, lambda s: (run_dir / "prediction.json").is_file()
                                                            or s["status"] not in job_protocol.ACTIVE)
    _wait(run_dir, lambda s: any(r.get("kind") == "train" for r in _metrics(run_dir)) or
          s["status"] not in job_protocol.ACTIVE)
    at.run()
    _ok(at)
    assert at.button(key="train_stop") and not any(b.key == "train_resume_run" for b in at.button)
    at.button(key="train_stop").click().run()
    st = _wait(run_dir, lambda s: s["status"] not in job_protocol.ACTIVE)
    assert st["status"] == "stopped", (run_dir / "stdout.log").read_text()[-2000:]
    at.run()
    _ok(at)
    assert not any(b.key == "train_stop" for b in at.button) and at.button(key="train_resume_run")
    at.button(key="train_resume_run").click().run()
    _ok(at)
    assert job_protocol.status(run_dir)["status"] in job_protocol.ACTIVE
    assert at.button(key="train_stop") and "--resume" in job_protocol.read_status(run_dir)["argv"]
    st = _wait(run_dir, lambda s: s["status"] not in job_protocol.ACTIVE, timeout=600)
    assert st["status"] == "finished", (run_dir / "stdout.log").read_text()[-2000:]
    at.run()
    _ok(at)
    assert not any(b.key in ("train_stop", "train_resume_run") for b in at.button)
    assert "finished: step 40 of 40" in at.get("progress")[0].proto.text
    pred = json.loads((run_dir / "prediction.json").read_text())
    assert (pred["config"], pred["signal"]) == (wanted["config"], wanted["signal"])
    at.switch_page("views/track_record.py").run()
    _ok(at)
    assert "train-this" in set(at.dataframe[0].value["run"])


def test_new_diagnosis_form_previews_costs_saves_and_runs_to_a_verdict(ci_zoo, runs_root, tmp_path):
    """Item 1: the form, its previews, the YAML (saved as), the cost, and per-phase progress to the verdict."""
    root = tmp_path / "runs"
    root.mkdir()
    at = _app(root, run=None).switch_page("views/new_run.py").run()
    _ok(at)
    at.text_input(key="nr_student").input(str(ci_zoo / "student")).run()
    at.text_input(key="nr_base").input(str(ci_zoo / "base")).run()
    at.text_input(key="nr_t0_model").input(str(ci_zoo / "teacher")).run()
    at.selectbox(key="nr_t1_ctx").select("custom").run()
    at.text_area(key="nr_t1_tpl").input("{prompt}\n\nThe answer is {answer}.").run()
    at.radio(key="nr_source").set_value("path").run()
    at.text_input(key="nr_data_path").input(str(runs_root.parent / "problems.jsonl")).run()
    for key, value in (("nr_limit", 3), ("nr_samples", 2), ("nr_max_len", 8), ("nr_teacher_samples", 1),
                       ("nr_budget", 24), ("nr_k", 2), ("nr_m", 2)):
        at.number_input(key=key).set_value(value).run()
    _ok(at)
    yaml_text = next(c.value for c in at.code if c.language == "yaml")
    cfg = yaml.safe_load(yaml_text)
    assert cfg["teachers"][1]["context"].endswith("The answer is {answer}.") and cfg["data"]["limit"] == 3
    assert [m.label for m in at.metric][:1] == ["Rollouts"] and at.metric[0].value == "6"
    prompts = [c.value for c in at.code if c.language == "plaintext"]  # student, teacher, self view
    assert len(prompts) == 3 and all(p.startswith("<|im_start|>user") for p in prompts)  # chat template applied
    assert "The answer is" in prompts[2] and "The answer is" not in prompts[0]
    at.text_input(key="nr_save_as").input(str(tmp_path / "saved.yaml")).run()
    at.button(key="nr_save").click().run()
    _ok(at)
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text()) == cfg
    at.text_input(key="out_dir").input(str(root / "formrun")).run()
    at.button(key="start").click().run()
    _ok(at)
    st = _wait(root / "formrun", lambda s: s["status"] not in job_protocol.ACTIVE)
    assert st["status"] == "finished", (root / "formrun" / "stdout.log").read_text()[-2000:]
    at.run()
    _ok(at)
    assert "Finished" in at.success[-1].value
    assert [p.proto.text.split(":")[0] for p in at.get("progress")[1:]] == list(jobs.PHASES)
    at.button(key="open_run").click().run()
    _ok(at)
    assert at.title[0].value == "Overview" and at.session_state["run_dir"] == str(root / "formrun")


def test_cli_notes_a_finished_run_and_replaced_verdicts(runs_root, tmp_path, capsys):
    """Bug 8: `run` on a finished directory redid work silently; `predict` silently replaced the verdicts."""
    from opsd_diag import cli

    run = tmp_path / "again"
    shutil.copytree(runs_root / "tiny", run)
    before = (run / "summary.json").stat().st_mtime_ns
    assert cli.main(["run", str(runs_root.parent / "tiny.yaml"), "--out", str(run)]) == 0
    assert "already finished" in capsys.readouterr().out
    assert (run / "summary.json").stat().st_mtime_ns == before  # nothing redone
    verdicts = (run / "summary.json").read_bytes()
    assert cli.main(["predict", str(run), "--budget", "8"]) == 2  # verdicts are replaced only when asked
    assert "has verdicts already: pass --replace" in capsys.readouterr().err
    assert (run / "summary.json").read_bytes() == verdicts
    assert cli.main(["predict", str(run), "--budget", "8", "--replace"]) == 0
    assert "replacing the verdicts and ranking" in capsys.readouterr().err


# ----------------------------------------------------------------------------- issue 23: the app as a decision tool


def _download_names(monkeypatch) -> list[str]:
    """The file name of every download a page offers (recorded through app.common.download)."""
    from app import common

    names, original = [], common.download

    def record(label_text, data, file_name, key, mime=None, **kw):
        names.append(file_name)
        return original(label_text, data, file_name, key, mime, **kw)
    monkeypatch.setattr(common, "download", record)
    return names


def test_every_download_of_the_export_page_has_its_own_name(runs_root, monkeypatch):
    """Bug 5: the summary table's JSON and summary.json were both quickstart-summary.json."""
    names = _download_names(monkeypatch)
    at = _app(runs_root).switch_page("views/export.py").run()
    _ok(at)
    assert at.selectbox(key="exp_table").value == "summary"
    assert "tiny-summary.json" in names and "tiny-summary-file.json" in names
    assert len(names) == len(set(names)), names


def test_open_this_run_opens_the_new_run_not_the_pickers(runs_root):
    """Bug 1: 'Open this run' after a finished diagnosis opened the run the sidebar picker had stored."""
    at = _app(runs_root, "busy")  # the picker holds busy
    assert at.sidebar.selectbox[0].value == str(runs_root / "busy")
    at.session_state["job"] = str(runs_root / "tiny")  # a diagnosis just finished into tiny
    at.switch_page("views/new_run.py").run()
    at.button(key="open_run").click().run()
    _ok(at)
    assert at.title[0].value == "Overview" and at.session_state["run_dir"] == str(runs_root / "tiny")
    at.run()  # and it stays: the picker follows the new choice (AppTest reruns its own page, New diagnosis)
    _ok(at)
    assert at.session_state["run_dir"] == str(runs_root / "tiny")
    assert at.sidebar.selectbox[0].value == str(runs_root / "tiny")
    assert at.query_params["run"] in (str(runs_root / "tiny"), [str(runs_root / "tiny")])
    at.sidebar.selectbox[0].select(str(runs_root / "busy")).run()  # a change in the picker still opens
    assert at.session_state["run_dir"] == str(runs_root / "busy")


def test_train_this_never_swaps_the_signal_and_untrainable_rows_say_why(runs_root):
    """Bug 2: Train this on a self-teacher's a_d2 row prefilled r_opd without a word; bug 7: a stray None."""
    from trainer import from_diagnosis

    at = _app(runs_root)
    _ok(at)
    run = common_load(runs_root / "tiny")
    for r in run.summary.ranking:
        button = at.button(key=f"train-{r.config}-{r.signal}")
        why = from_diagnosis.why_not(run.config, r.config, r.signal)
        assert button.disabled == (why is not None), (r.config, r.signal)
        if why:
            assert "cannot be trained" in button.help
    assert at.button(key="train-self_full-a_d2").disabled and not at.button(key="train-teacher-a_d2").disabled
    at.button(key="train-teacher-a_d2").click().run()
    _ok(at)
    assert at.title[0].value == "Train"
    assert (at.selectbox(key="tt_config").value, at.selectbox(key="tt_signal").value) == ("teacher", "a_d2")
    assert "opd2" in " ".join(m.value for m in at.markdown)
    assert not any(m.value.strip() == "None" for m in at.markdown)  # Streamlit magic printed a ternary's None
    # a stored request for an untrainable pair (an old link, another page) is said, not swapped silently
    at.session_state["train_this"] = {"run": str(runs_root / "tiny"), "config": "self_full", "signal": "a_d2"}
    at.switch_page("views/overview.py").run()
    at.switch_page("views/train.py").run()
    _ok(at)
    assert at.selectbox(key="tt_config").value == "self_full"
    assert "a_d2" not in at.selectbox(key="tt_signal").options
    assert any("a_d2 cannot be trained with self_full" in w.value for w in at.warning)


def common_load(path):
    from opsd_diag.run import Run

    return Run.load(path)


def test_a_reload_keeps_the_form_entries_and_the_followed_diagnosis(runs_root):
    """Bug 3: a reload during a running diagnosis lost its progress panel and every form entry."""
    at = _app(runs_root).switch_page("views/new_run.py").run()
    _ok(at)
    draft_id = at.query_params["draft"]
    draft_id = draft_id[0] if isinstance(draft_id, list) else draft_id
    at.number_input(key="nr_limit").set_value(3).run()
    at.number_input(key="nr_samples").set_value(2).run()
    at.text_input(key="nr_t0_name").input("my_teacher").run()
    at.text_input(key="out_dir").input(str(runs_root / "busy")).run()
    at.session_state["job"] = str(runs_root / "busy")  # as Start diagnosis leaves it
    at.query_params["job"] = str(runs_root / "busy")
    at.run()
    _ok(at)
    assert f"Progress of {runs_root / 'busy'}" in [h.value for h in at.subheader]

    reloaded = AppTest.from_file(MAIN, default_timeout=60)  # a reload: a new session on the same URL
    reloaded.session_state["runs_root"] = str(runs_root)
    reloaded.query_params["draft"] = draft_id
    reloaded.query_params["job"] = str(runs_root / "busy")
    reloaded.run().switch_page("views/new_run.py").run()
    _ok(reloaded)
    assert reloaded.number_input(key="nr_limit").value == 3 and reloaded.number_input(key="nr_samples").value == 2
    assert reloaded.text_input(key="nr_t0_name").value == "my_teacher"
    assert reloaded.text_input(key="out_dir").value == str(runs_root / "busy")
    assert f"Progress of {runs_root / 'busy'}" in [h.value for h in reloaded.subheader]  # the panel is back
    assert reloaded.get("progress")

    fresh = AppTest.from_file(MAIN, default_timeout=60)  # another tab: its own draft, the defaults
    fresh.session_state["runs_root"] = str(runs_root)
    fresh.run().switch_page("views/new_run.py").run()
    _ok(fresh)
    assert fresh.number_input(key="nr_limit").value == 12
    assert any(f"A diagnosis is running in {runs_root / 'busy'}" in i.value for i in fresh.info)  # found on disk


def test_a_damaged_draft_restores_nothing_and_breaks_nothing(runs_root):
    draft_dir = runs_root / ".drafts"
    draft_dir.mkdir(exist_ok=True)
    (draft_dir / "0123456789ab.json").write_text('{"nr_limit": "not a number", "nr_save": true}')
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = str(runs_root)
    at.query_params["draft"] = "0123456789ab"
    at.run().switch_page("views/new_run.py").run()
    _ok(at)
    assert at.title[0].value == "New diagnosis" and at.number_input(key="nr_limit").value == 12


def test_train_form_sets_the_evaluation_and_follows_its_stage(runs_root, tmp_path):
    """Bug 4: the evaluation's size and samples are set in the form, its cost is estimated, and a run that is
    evaluating says so with its own progress and ETA (not 'step 0 of 6')."""
    root = tmp_path / "runs"
    shutil.copytree(runs_root / "tiny", root / "tiny")
    past = _training_run(root, "past", "finished", None)  # a timed past run: 2 steps, 2 evaluations
    recs = [{"kind": "eval", "step": 0, "pass@1": 0.3, "eval_s": 6.0, "eval_samples": 12},
            {"kind": "train", "step": 1, "loss": 1.0, "tokens": 100, "step_time_s": 0.5},
            {"kind": "train", "step": 2, "loss": 0.5, "tokens": 100, "step_time_s": 0.5},
            {"kind": "eval", "step": 2, "pass@1": 0.4, "eval_s": 6.0, "eval_samples": 12}]
    (past / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    held = tmp_path / "held.jsonl"
    held.write_text((REPO / "sample_data/problems/test.jsonl").read_text())
    at = _app(root)
    at.session_state["train_this"] = {"run": str(root / "tiny"), "config": "teacher", "signal": "r_opd"}
    at.switch_page("views/train.py").run()
    _ok(at)
    at.text_input(key="tt_eval").input(str(held)).run()
    at.number_input(key="tt_eval_n").set_value(10).run()
    at.number_input(key="tt_eval_k").set_value(2).run()
    at.number_input(key="tt_steps").set_value(4).run()
    _ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Held-out samples"] == f"{5 * 10 * 2:,}"  # the start and every quarter of 4 steps
    assert metrics["Estimated evaluation"] == "50 s"  # 100 samples x 0.5 s per sample (12 s over 24 samples)
    assert any("0.50 s per held-out sample" in c.value and str(past.resolve()) in c.value for c in at.caption)
    command = [c.value for c in at.code if "--from-diagnosis" in c.value][0]
    assert "--eval-problems 10" in command and "--eval-samples 2" in command and "--eval-steps 1" in command
    at.checkbox(key="tt_early").uncheck().run()
    _ok(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Held-out samples"] == f"{2 * 10 * 2:,}" and metrics["Estimated evaluation"] == "20 s"  # start, end
    assert "--eval-steps" not in [c.value for c in at.code if "--from-diagnosis" in c.value][0]

    busy = _training_run(root, "evaluating", "running", None)
    job_protocol.write_status(busy, "running", stage="evaluating", step=0, max_steps=6, eval_step=0, eval_done=100,
                              eval_total=400, eval_started=time.time() - 60)
    at.session_state["train_run"] = str(busy)
    at.run()
    _ok(at)
    texts = [p.proto.text for p in at.get("progress")]
    assert any(t.startswith("evaluating the held-out problems at step 0: 100 of 400 problems, about 3 min") for t in
               texts), texts


def test_links_from_an_evidence_node_and_a_disputed_token_to_its_heatmap(runs_root):
    """Issue 23 item 4: an Evidence node and a disagreement row open that token's heatmap, marked."""
    at = _app(runs_root).switch_page("views/evidence.py").run()
    _ok(at)
    node = at.session_state["ev_node"]
    from opsd_diag.run import Run

    run = Run.load(runs_root / "tiny")
    row = run.nodes[run.nodes["node_id"] == node].iloc[0]
    at.button(key="ev_to_tokens").click().run()
    _ok(at)
    at.switch_page("views/tokens.py").run()  # AppTest follows switch_page on the next run of its own page
    assert at.session_state["tok_rollout"] == int(row.rollout_id)
    html = at.html[0].value
    assert re.search(rf"<span class='t[^']* hot' data-pos='{int(row.pos)}'", html), "the node's token is marked"
    assert any(f"position {int(row.pos)}" in c.value for c in at.caption)

    at.multiselect(key="tok_configs").set_value(["teacher", "self_full"]).run()
    _ok(at)
    top = run.disagreement("r_opd", ["teacher", "self_full"], n=20)
    at.selectbox(key="tok_dispute").select(1).run()
    at.button(key="tok_dispute_go").click().run()
    _ok(at)
    assert at.session_state["tok_rollout"] == int(top.iloc[1]["rollout_id"])
    assert re.search(rf"<span class='t[^']* hot' data-pos='{int(top.iloc[1]['pos'])}'", at.html[0].value)


def test_the_picker_shows_the_run_that_is_open(runs_root, tmp_path):
    """Bug 7 (the picker's part): a path typed in the sidebar is what the picker shows, never the old run."""
    at = _app(runs_root)
    typed = tmp_path / "elsewhere"
    at.sidebar.text_input(key="typed_run").input(str(typed)).run()
    assert at.session_state["run_dir"] == str(typed.resolve())
    assert at.sidebar.selectbox[0].value == str(typed.resolve())  # the picker says which run the page is about
    at.sidebar.selectbox[0].select(str(runs_root / "tiny")).run()
    _ok(at)
    assert at.session_state["run_dir"] == str(runs_root / "tiny") and at.title[0].value == "Overview"


# ------------------------------------------------------------------------- issue 32: predictor v2's decision panel

def _with_calibration(monkeypatch, runs_root: Path, tmp_path: Path, name: str, **kw) -> Path:
    """A copy of the tiny run (a fresh cache key) and a synthetic model file in the place of the shipped one."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from calibration import model_file

    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: json.dumps(model_file(**kw)))
    run = tmp_path / "runs" / name
    shutil.copytree(runs_root / "tiny", run)
    return run


def test_overview_leads_with_the_v2_decision(runs_root, tmp_path, monkeypatch):
    run = _with_calibration(monkeypatch, runs_root, tmp_path, "v2")
    p = Run.load(run).predictions()
    from trainer import from_diagnosis

    cfg = Run.load(run).config
    text = prediction.panel(p, lambda c, sig: from_diagnosis.why_not(cfg, c, sig) is None)
    at = _app(run.parent, "v2")
    _ok(at)
    md = [m.value for m in at.markdown]
    head = next(i for i, m in enumerate(md) if m.startswith("#### "))
    assert md[head] == "#### " + common_md(text["headline"])  # the panel leads, with the reports' own text
    assert common_md(text["effects"]) in md and common_md(text["why"]) in md
    assert "collapse" in text["effects"] and "drift" in text["effects"].lower() and "forgetting" in text["effects"]
    captions = [c.value for c in at.caption]
    assert common_md(text["tiers"]) in captions and "v2_no_lookahead" in text["tiers"]  # the tiny run has no lookahead
    assert any("secondary evidence" in e.label for e in at.expander)  # the v1 rule stays, folded away below
    assert any(h.value == "Predicted effect per (config, method)" for h in at.subheader)
    table = next(d.value for d in at.dataframe if "predicted_gain" in d.value.columns)
    assert table["rank"].tolist() == [r.rank for r in p.rows] and table["predicted_gain"].tolist() == pytest.approx(
        [r.gain for r in p.rows])
    rec = p.recommended(lambda c, sig: from_diagnosis.why_not(cfg, c, sig) is None)
    assert [b.label for b in at.button if b.key == "decide-train"] == (["Train it"] if rec else [])


def test_overview_ranks_by_g_when_the_study_chose_it(runs_root, tmp_path, monkeypatch):
    looks = {"look2": {"summary": "look 2 (a rule): on the new world w +0.1: G stays"},
             "look10": {"summary": "look 10 (another): on the new world v +0.2: G stays"}}
    run = _with_calibration(monkeypatch, runs_root, tmp_path, "g", choice="accuracy_gap", later_looks=looks)
    at = _app(run.parent, "g")
    _ok(at)
    text = next(m.value for m in at.markdown if "v2 lost to G" in m.value)  # in the panel, not a caption
    assert "Ranked by the accuracy gap G" in text and not any("v2 lost to G" in c.value for c in at.caption)
    # the looks that chose the rule are folded away, in look order, not in the panel's running text
    box = next(e for e in at.expander if e.label == "How the rule in force was chosen")
    assert [c.value for c in box.caption] == [common_md(line) for line in (
        "2 later pre-registered looks, each judged on a world built after its plan:",
        "- look 2 (a rule): on the new world w +0.1: G stays.", "- look 10 (another): on the new world v +0.2: G stays.")]
    assert not any("look 2 (a rule)" in m.value for m in at.markdown)
    table = next(d.value for d in at.dataframe if "predicted_gain" in d.value.columns)
    gaps = table["accuracy_gap"].tolist()
    assert gaps == sorted(gaps, reverse=True)


def test_evidence_page_explains_a_v2_prediction(runs_root, tmp_path, monkeypatch):
    run = _with_calibration(monkeypatch, runs_root, tmp_path, "ev")
    p = Run.load(run).predictions()
    at = _app(run.parent, "ev").switch_page("views/evidence.py").run()
    _ok(at)
    assert at.subheader[0].value == "Predictor v2: why this predicted gain"
    frame = next(d.value for d in at.dataframe if "contribution" in d.value.columns)
    want = prediction.contribution_frame(p, p.rows[0].config, p.rows[0].method)
    assert frame["feature"].tolist() == want["feature"].tolist()
    assert frame["contribution"].sum() + p.rows[0].intercept == pytest.approx(p.rows[0].gain)
    at.selectbox(key="ev_v2_row").select(len(p.rows) - 1).run()
    _ok(at)
    frame = next(d.value for d in at.dataframe if "contribution" in d.value.columns)
    assert frame["contribution"].sum() + p.rows[-1].intercept == pytest.approx(p.rows[-1].gain)


def common_md(text: str) -> str:
    from app import common

    return common.md(text)
