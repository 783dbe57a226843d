"""The trainer as separate processes: 2-process gloo DDP, kill -9 + resume, launch/stop by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from fixtures_trainer import build_world, one_thread, read_metrics, without_time, world, write_config  # noqa: F401 (fixtures)

from opsd_diag import jobs
from app import launch
from trainer import cli

ENV = {"OMP_NUM_THREADS": "1"}  # as torchrun sets it; the in-process runs below use one thread too


def _wait(proc_pid: int, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        pid, _ = os.waitpid(proc_pid, os.WNOHANG)
        if pid:
            return
        time.sleep(0.2)
    raise AssertionError("the run did not end in time")


@pytest.mark.slow
def test_two_process_gloo_ddp_equals_one_process_with_the_same_global_batch(world, tmp_path):
    single = write_config(tmp_path / "single.yaml", world, method="jsd", max_steps=5, per_device_train_batch_size=2,
                          gradient_accumulation_steps=2, generation_batch_size=2)
    ddp = write_config(tmp_path / "ddp.yaml", world, method="jsd", max_steps=5, per_device_train_batch_size=2,
                       generation_batch_size=2)
    argv = jobs.training_command(ddp, tmp_path / "ddp", num_processes=2)
    assert "--num_processes" in argv
    done = subprocess.run(argv, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "2 process(es)" in (tmp_path / "ddp" / "stdout.log").read_text()
    assert cli.main([str(single), "--out", str(tmp_path / "single")]) == 0
    a, b = read_metrics(tmp_path / "single"), read_metrics(tmp_path / "ddp")
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5]  # one record per step: only the main process writes
    for x, y in zip(a, b):
        assert x["tokens"] == y["tokens"]
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4, abs=1e-6)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("rollouts", ["incorrect", "correct"])
def test_two_process_ddp_with_a_token_mask_equals_one_process(world, tmp_path, rollouts):
    """A mask known before the models run drops rows and cuts each after its last kept token; where a process'
    micro-batch keeps nothing (the tiny world's student solves nothing: ``correct`` keeps no row) it still runs
    its zero backward, so DDP neither hangs nor changes the step."""
    mask = {"kind": "position", "positions": [0, 6], "rollouts": rollouts}
    kw = dict(method="jsd", max_steps=3, per_device_train_batch_size=2, generation_batch_size=2, token_mask=mask)
    single = write_config(tmp_path / "single.yaml", world, gradient_accumulation_steps=2, **kw)
    ddp = write_config(tmp_path / "ddp.yaml", world, **kw)
    done = subprocess.run(jobs.training_command(ddp, tmp_path / "ddp", num_processes=2), env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert cli.main([str(single), "--out", str(tmp_path / "single")]) == 0
    a, b = read_metrics(tmp_path / "single"), read_metrics(tmp_path / "ddp")
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert (x["tokens"], x["kept_tokens"]) == (y["tokens"], y["kept_tokens"])
        if rollouts == "correct":
            assert x["kept_tokens"] == 0 and x["grad_norm"] == y["grad_norm"] == 0.0
        else:
            assert 0.0 < x["kept_ratio"] < 1.0
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4, abs=1e-6)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-4, abs=1e-7)


@pytest.mark.slow
def test_kill_9_then_resume_ends_like_an_uninterrupted_run(world, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", world, method="opd", max_steps=8, save_steps=2, num_generations=2,
                       lr_scheduler_type="cosine", warmup_steps=2)
    assert cli.main([str(cfg), "--out", str(tmp_path / "ref")]) == 0
    out = tmp_path / "run"
    run = launch.start(cfg, out, env=ENV)
    deadline = time.time() + 180
    while not (out / "checkpoints" / "step-000002").is_dir():
        assert time.time() < deadline, (out / "stdout.log").read_text()[-2000:]
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)  # mid-run: no chance to save or to write a status
    _wait(run.pid, 30)
    assert jobs.read_status(out)["status"] == "running"
    assert jobs.status(out)["status"] == "died"
    assert cli.main([str(cfg), "--out", str(out), "--resume"]) == 0
    assert jobs.read_status(out)["status"] == "finished"
    assert without_time(read_metrics(out)) == without_time(read_metrics(tmp_path / "ref"))
    assert len((out / "command.txt").read_text().splitlines()) == 2  # the start and the resume


@pytest.mark.slow
def test_launch_start_then_stop_by_sigterm_saves_and_reports_stopped(world, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", world, method="opd", max_steps=500)
    run = launch.start(cfg, None, runs_root=tmp_path / "runs", env=ENV)
    assert run.run_dir.parent == tmp_path / "runs" and run.run_dir.name.startswith("train-c-")
    follower = jobs.Follower(run.run_dir)
    deadline = time.time() + 180
    seen = []
    while not seen:
        assert time.time() < deadline, (run.run_dir / "stdout.log").read_text()[-2000:]
        seen = follower.poll()
        time.sleep(0.1)
    jobs.stop(run.run_dir)  # STOP file, then SIGTERM to the process group
    _wait(run.pid, 60)
    st = jobs.status(run.run_dir)
    assert st["status"] == "stopped" and not st["alive"]
    ckpt = sorted((run.run_dir / "checkpoints").iterdir())[-1]
    assert int(ckpt.name.split("-")[1]) == st["step"] >= 1
    command = (run.run_dir / "command.txt").read_text().split()
    assert command[:3] == [sys.executable, "-m", "trainer"]
    assert jobs.find_runs(tmp_path / "runs", "training") == [run.run_dir]


def test_in_process_runs_each_log_into_their_own_file_and_close_it(world, tmp_path):
    """Two trainings in one process: each run's stdout.log gets its own lines, and its file is closed at the end
    (a handler left behind logged the next run into the first run's file and leaked an open file)."""
    import gc
    import logging
    import warnings

    cfg = write_config(tmp_path / "c.yaml", world, max_steps=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for name in ("a", "b"):
            assert cli.main([str(cfg), "--out", str(tmp_path / name)]) == 0
        logging.getLogger("opsd-train").handlers.clear()
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    for name in ("a", "b"):
        log = (tmp_path / name / jobs.LOG).read_text()
        assert str(tmp_path / name) in log or "step" in log, log
    a, b = ((tmp_path / n / jobs.LOG).read_text() for n in ("a", "b"))
    assert len(a.splitlines()) == len(b.splitlines()), "the second run's lines went elsewhere"
