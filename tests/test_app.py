"""Every page of the Streamlit app (AppTest) on a tiny real run, plus the launcher and job helpers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from streamlit.testing.v1 import AppTest

from app import jobs, serve
from opsd_diag import jobs as job_protocol
from opsd_diag.report import export

pytestmark = pytest.mark.slow  # runs models end to end: `make test` only, not `make test-fast`

REPO = Path(__file__).resolve().parents[1]
MAIN = str(REPO / "app" / "main.py")
PAGES = ("views/tokens.py", "views/signals.py", "views/export.py", "views/new_run.py")


def _config(zoo: Path, data: Path) -> dict:
    return {"student": {"model": str(zoo / "student")}, "base": {"model": str(zoo / "base")},
            "teachers": [{"name": "teacher", "model": str(zoo / "teacher")},
                         {"name": "self_full", "context": "full_solution"}],
            "data": {"path": str(data)},
            "sampling": {"num_samples": 2, "max_completion_length": 8, "teacher_samples": 1},
            "analysis": {"bootstrap": 10, "checker": "toy", "pass_k": [1, 2]}, "shard_size": 2}


@pytest.fixture(scope="session")
def runs_root(ci_zoo, tmp_path_factory) -> Path:
    """``runs/`` with one finished tiny run (``tiny``) and one that is still running (``busy``)."""
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.io.config import from_dict
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
    summary["verdicts"] = {"teacher": {"r_opd": {"verdict": "helps", "reason": "A > 0.", "score": 0.3}}}
    summary["ranking"] = [{"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.3}]
    summary["verdict_rule"] = "**hurts** if ..."
    summary["ideal"] = {"status": "ok", "estimator": "our estimator (docs/signals.md)", "budget": 32,
                        "continuations_used": 30, "n_nodes": 2, "n_prompts": 2, "k": 3, "m": 2}
    (run / "summary.json").write_text(json.dumps(summary))
    at = _app(run.parent, "judged")
    _ok(at)
    assert "Verdict and ranking" in [h.value for h in at.subheader]
    assert at.dataframe[1].value["verdict"].tolist() == ["helps"]
    assert any("our estimator" in c.value and "budget 32" in c.value for c in at.caption)


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
    at.selectbox(key="tok_signal").select("a_d2").run()
    at.selectbox(key="tok_config").select("self_full").run()
    _ok(at)
    assert "a_d2" in at.html[0].value and "config self_full" in at.html[0].value
    assert len(at.dataframe) == 1


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
    assert {"HTML (interactive, works offline)", "CSV", "PARQUET", "JSON", "HTML report"} <= set(labels)
    if export.image_export_available():
        assert at.button(key="render_img")
    else:
        assert "opsd-diag[export]" in at.info[0].value  # kaleido missing: said so, in place
    at.selectbox(key="exp_table").select("tokens").run()
    _ok(at)


def test_new_run_bad_config_shows_error_in_place(runs_root, tmp_path):
    at = _app(runs_root).switch_page("views/new_run.py").run()
    _ok(at)
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


def test_new_run_launch_failure_is_followed_from_the_run_dir(runs_root, tmp_path):
    cfg = yaml.safe_load((runs_root.parent / "tiny.yaml").read_text())
    cfg["student"]["model"] = str(tmp_path / "no_such_model")
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(cfg))
    at = _app(runs_root).switch_page("views/new_run.py").run()
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
    assert any("no_such_model does not exist" in e.value for e in at.error), [e.value for e in at.error]
    # the job directory holds only the job's own files: status and log, no half-written run
    assert sorted(p.name for p in run_dir.iterdir()) == ["status.json", "stdout.log"]


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
    assert done.status == "finished" and done.fraction == 1.0 and done.total == 2 == done.done
    busy = jobs.progress(runs_root / "busy")
    assert (busy.status, busy.done, busy.total) == ("running", 0, 2)
    assert jobs.progress(tmp_path / "none").status == "unknown"
    (tmp_path / "dead").mkdir()
    job_protocol.write_status(tmp_path / "dead", "running", owner=False, pid=2**22 + 7, start_time=1)  # gone
    dead = jobs.progress(tmp_path / "dead")
    assert dead.status == "died" and "ended without a result" in dead.error
    found = [p.name for p in job_protocol.find_runs(runs_root, "diagnosis")]
    assert set(found) == {"tiny", "busy"} and job_protocol.find_runs(tmp_path / "missing") == []


def test_serve_binds_localhost_and_builds_the_example_first(monkeypatch, tmp_path):
    config = (REPO / ".streamlit" / "config.toml").read_text()
    assert 'address = "127.0.0.1"' in config and "headless = true" in config
    calls = []

    class Done:
        returncode = 0

    def fake_run(argv, cwd=None):
        assert isinstance(argv, list) and cwd == tmp_path
        calls.append(argv)
        return Done()

    monkeypatch.setattr(serve, "REPO", tmp_path)
    monkeypatch.setattr(serve.subprocess, "run", fake_run)
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
