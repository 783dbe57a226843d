"""Stops (Ctrl+C, SIGTERM) say what they leave: only `run` has something to resume; `python -m app.serve`
stops its children with it, so no Streamlit keeps serving the port (issue 19, class 10)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import serve
from opsd_diag import cli as diag_cli
from opsd_diag.run import Run

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """Python's own Ctrl+C handler, whatever started pytest: a shell's background job (``make test &``) inherits
    SIGINT ignored, and then no stop test here could see a Ctrl+C."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _signal_self(signum: int):
    """A stand-in for a slow step that receives ``signum`` from outside while it works."""
    def slow(*args, **kwargs):
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("the signal did not interrupt the command")
    return slow


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
@pytest.mark.parametrize("command", ["export", "predict"])
def test_a_stop_of_export_or_predict_does_not_promise_a_resume(command, signum, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(Run, "load", _signal_self(signum))
    out = tmp_path / "h.html"
    argv = ["export", str(tmp_path), "--out", str(out)] if command == "export" else ["predict", str(tmp_path)]
    before = sorted(tmp_path.rglob("*"))
    assert diag_cli.main(argv) == 130
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opsd-diag: interrupted; "), lines
    assert "resume" not in lines[0].replace("cannot be resumed", "").replace("nothing to resume", "")
    assert ("nothing was written" in lines[0]) if command == "export" else ("keeps the verdicts it had" in lines[0])
    assert sorted(tmp_path.rglob("*")) == before and not out.exists()


def test_a_stop_of_run_still_says_it_resumes(tmp_path, monkeypatch, capsys):
    import opsd_diag.config.spec as config

    monkeypatch.setattr(config, "load_config", _signal_self(signal.SIGTERM))
    assert diag_cli.main(["run", "c.yaml", "--out", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err.strip() == "opsd-diag: interrupted; rerun the same command to resume"


def test_ctrl_c_while_serve_builds_the_example_is_one_line(tmp_path, monkeypatch, capsys):
    calls = []

    def child(argv, cwd):
        calls.append(argv)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C while the example diagnosis runs
        time.sleep(5)
        raise AssertionError("SIGINT did not interrupt the build")

    monkeypatch.setattr(serve, "REPO", tmp_path)
    monkeypatch.setattr(serve, "child", child)
    assert serve.main([]) == 130
    out, err = capsys.readouterr()
    assert len(calls) == 1 and calls[0][-4:] == ["run", "sample_data/configs/quickstart.yaml", "--out",
                                                 "runs/quickstart"]  # Streamlit never started
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted while building the example run" in lines[0] and "Traceback" not in err


def test_serve_stops_its_child_on_a_stop(tmp_path):
    """``child`` on a stop: a child that ignores the first signal is terminated (never left running)."""
    script = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    pid_file = tmp_path / "pid"

    def stop_soon():
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    import threading
    threading.Thread(target=stop_soon, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        serve.child([sys.executable, "-c", script + f"; open({str(pid_file)!r}, 'w').write('x')"], tmp_path)
    assert time.monotonic() - started < 20
    assert not pid_file.exists()  # it did not sleep on to its end


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((serve.HOST, port)) == 0


@pytest.mark.slow
def test_sigterm_to_serve_stops_streamlit_and_frees_the_port(tmp_path):
    port = serve.free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.serve", "--runs-root", str(tmp_path), "--port", str(port)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not _listening(port):
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "Streamlit did not start serving"
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)  # to app.serve only, as a service manager would
        assert proc.wait(timeout=30) == 0
        deadline = time.monotonic() + 15
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(port), "Streamlit still serves the port after app.serve was stopped"
        with pytest.raises(ProcessLookupError):  # nothing of its process group is left
            for _ in range(50):
                os.killpg(proc.pid, 0)
                time.sleep(0.2)
        output = proc.stdout.read().decode()
        assert "Traceback" not in output, output
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this test started, if anything survived
        except ProcessLookupError:
            pass
