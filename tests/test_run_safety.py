"""A received run directory is data, outputs never clobber, the lock holds, a full disk is one line (issue 19).

- the trust rule: a manifest asking for ``trust_remote_code`` runs no code through ``predict``,
  ``opsd-train --from-diagnosis`` or the app's Train this launch; the user's own flag decides;
- the one-writer lock: an flock on the run folder, which deleting ``.lock`` cannot break; FIFOs never
  hang; a reused pid is named as such;
- resource limits on a real, small tmpfs (mounted here when root; CI runs as root): a full disk or no
  inodes at start, mid run, in predict and at a training checkpoint is one line, status ``failed``,
  no temp file and no holder left.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from fixtures_trainer import build_world
from test_hardening import diag_config as hardening_config

from opsd_diag import cli as diag_cli
from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.io import models
from trainer import cli as train_cli
from app import launch


def diag_config(world: Path, **over) -> dict:
    """test_hardening's small diagnosis, shorter: 4 new tokens, shards of 2 problems."""
    return hardening_config(world, **{"sampling": {"num_samples": 2, "max_completion_length": 4, "teacher_samples": 0},
                                      "shard_size": 2, **over})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def finished(world, tmp_path_factory) -> Path:
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict

    out = tmp_path_factory.mktemp("finished") / "run"
    run_diagnosis(from_dict(diag_config(world)), out, show_progress=False)
    return out


def one_error(err: str, prog: str = "opsd-diag") -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("shards:", "ideal continuations"))]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------------------ the trust rule

MARKER_CODE = textwrap.dedent("""
    import os
    open(os.environ["OPSD_TEST_MARKER"], "w").write("remote code ran")
    from transformers import Qwen3Config, Qwen3ForCausalLM
    class EvilConfig(Qwen3Config):
        pass
    class EvilModel(Qwen3ForCausalLM):
        config_class = EvilConfig
""")


@pytest.fixture()
def evil(world, tmp_path, monkeypatch) -> tuple[Path, Path, list]:
    """(a copy of the student whose config names remote code that writes a marker file, the marker, the
    trust_remote_code value of every load)."""
    model = tmp_path / "evil_student"
    shutil.copytree(world / "student", model)
    (model / "evil.py").write_text(MARKER_CODE)
    for name, key in (("config.json", "AutoModelForCausalLM"), ("tokenizer_config.json", "AutoTokenizer")):
        cfg = json.loads((model / name).read_text())
        cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", key: "evil.EvilModel" if key != "AutoTokenizer"
                           else ["evil.EvilTokenizer", None]}
        (model / name).write_text(json.dumps(cfg))
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("OPSD_TEST_MARKER", str(marker))
    seen: list = []
    real = models._load

    def recording(loader, name, revision, allow_download, trust_remote_code, **extra):
        seen.append((Path(name).name, trust_remote_code))
        return real(loader, name, revision, allow_download, trust_remote_code, **extra)

    monkeypatch.setattr(models, "_load", recording)
    models.load_model.cache_clear()
    models.load_tokenizer.cache_clear()
    yield model, marker, seen
    models.load_model.cache_clear()
    models.load_tokenizer.cache_clear()


def crafted(finished: Path, model: Path, dst: Path) -> Path:
    """A copy of a finished run whose manifest loads the student from ``model`` with remote code on."""
    shutil.copytree(finished, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["config"]["student"] = {**m["config"]["student"], "model": str(model), "trust_remote_code": True}
    teacher = model.parent / f"{model.name}_as_teacher"  # another folder: opd against the student itself is refused
    if not teacher.exists():
        shutil.copytree(model, teacher)
    m["config"]["teachers"][0]["model"] = str(teacher)
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


def test_the_crafted_model_does_run_code_when_trusted(evil):
    """The control: the marker model really runs its code once remote code is on (so the tests below can fail)."""
    model, marker, _ = evil
    models.load_model(str(model), trust_remote_code=True)
    assert marker.read_text() == "remote code ran"


def test_predict_never_takes_remote_code_from_the_manifest(evil, finished, tmp_path, capsys):
    model, marker, seen = evil
    run = crafted(finished, model, tmp_path / "run")
    assert diag_cli.main(["predict", str(run), "--budget", "1"]) == 0
    err = capsys.readouterr().err
    assert not marker.exists(), "a run directory made predict run the model's own code"
    assert seen and all(trust is False for _, trust in seen), seen
    assert ("opsd-diag: note: " in err and "asks for trust_remote_code (student.trust_remote_code)" in err
            and "never enables code, so it stays off" in err), err


def test_predict_takes_remote_code_from_the_users_flag(evil, finished, tmp_path, monkeypatch, capsys):
    """--trust-remote-code is the user's to pass: then (and only then) the loader is asked for it."""
    model, marker, seen = evil

    def stop(*a, **k):
        raise OpsdError("stopped before loading")

    run = crafted(finished, model, tmp_path / "run")
    monkeypatch.setattr(models, "_load", lambda loader, name, revision, dl, trust, **extra:
                        seen.append((Path(name).name, trust)) or stop())
    assert diag_cli.main(["predict", str(run), "--trust-remote-code"]) == 2
    assert seen and seen[0][1] is True
    assert "it is on because you passed --trust-remote-code" in capsys.readouterr().err
    assert not marker.exists()


def test_from_diagnosis_never_takes_remote_code_from_the_manifest(evil, finished, tmp_path, capsys):
    model, marker, seen = evil
    run = crafted(finished, model, tmp_path / "run")
    code = train_cli.main(["--from-diagnosis", str(run), "--config", "teacher", "--signal", "r_opd", "--max-steps",
                           "1", "--out", str(tmp_path / "train")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert not marker.exists(), "a run directory made opsd-train run the model's own code"
    assert seen and all(trust is False for _, trust in seen), seen
    assert "opsd-train: note: " in err and "stays off" in err
    cfg = yaml.safe_load((tmp_path / "train" / "config.yaml").read_text())
    assert cfg["student"]["trust_remote_code"] is False


def test_train_this_launches_without_remote_code(evil, finished, tmp_path, monkeypatch):
    """The app's Train this -> Start (launch.start_from_diagnosis): the command carries no
    --trust-remote-code unless the user's setting asks, and the config it checks has remote code off."""
    model, marker, seen = evil
    run = crafted(finished, model, tmp_path / "run")
    started = []
    monkeypatch.setattr(jobs, "start", lambda argv, out, kind, env=None: started.append(argv))
    launch.start_from_diagnosis(run, "teacher", "r_opd", tmp_path / "t1", max_steps=1)
    launch.start_from_diagnosis(run, "teacher", "r_opd", tmp_path / "t2", max_steps=1, trust_remote_code=True)
    assert "--trust-remote-code" not in started[0] and "--trust-remote-code" in started[1]
    assert not marker.exists()


@pytest.mark.slow
def test_train_this_job_runs_no_remote_code(evil, finished, tmp_path):
    """The launched job itself (a separate process, as the app starts it) trains without the model's code."""
    model, marker, _ = evil
    run = crafted(finished, model, tmp_path / "run")
    job = launch.start_from_diagnosis(run, "teacher", "r_opd", tmp_path / "train", max_steps=1,
                                      env={"OPSD_TEST_MARKER": str(marker)})
    deadline = time.time() + 300
    while jobs.status(job.run_dir)["status"] in jobs.ACTIVE and time.time() < deadline:
        time.sleep(0.5)
    assert jobs.status(job.run_dir)["status"] == "finished", jobs.log_tail(job.run_dir)
    assert not marker.exists()
    assert "stays off" in jobs.log_tail(job.run_dir)


def test_resume_runs_only_opsd_train_on_its_own_run(tmp_path):
    """status.json's argv comes from the run directory: a crafted one never starts another program."""
    run = tmp_path / "train"
    run.mkdir()
    (run / "config.yaml").write_text("x: 1\n")
    marker = tmp_path / "MARKER"
    for argv in (["/bin/sh", "-c", f"touch {marker}"], [sys.executable, "-c", f"open('{marker}', 'w')"],
                 [sys.executable, "-m", "trainer", "c.yaml", "--out", str(tmp_path / "elsewhere")], "not a list"):
        (run / "status.json").write_text(json.dumps({"status": "stopped", "argv": argv}))
        with pytest.raises(OpsdError, match="its stored command is not opsd-train's on this run directory"):
            launch.resume(run)
    time.sleep(0.2)
    assert not marker.exists()
    ok = [sys.executable, "-m", "trainer", "c.yaml", "--out", str(run), "--trust-remote-code"]
    assert launch.resume_command(ok, run) == [*ok[:-1], "--resume"]  # remote code: the user's to allow again


# --------------------------------------------------------------------------------------------- the lock

HOLD = ("import sys, time; from opsd_diag import jobs; lock = jobs.acquire_lock(sys.argv[1], 'opsd-diag run'); "
        "print('held', flush=True); time.sleep(60)")


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        (run / jobs.LOCK).unlink()  # someone cleans up "stale" lock files
        with pytest.raises(OpsdError, match="is in use by"):
            jobs.check_free(run)
        with pytest.raises(OpsdError, match="is in use by"):
            jobs.acquire_lock(run, "a second writer")
        assert jobs.ours(run, holder.pid, jobs.process_start_time(holder.pid)) is False  # not its group leader
    finally:
        holder.kill()
        holder.wait()
    jobs.release_lock(jobs.acquire_lock(run, "after the holder died"))


def test_only_one_of_many_racing_writers_gets_the_lock(tmp_path):
    run = tmp_path / "run"
    race = ("import sys, time; from opsd_diag import jobs, errors\n"
            "try:\n    lock = jobs.acquire_lock(sys.argv[1], 'racer')\nexcept errors.OpsdError:\n    sys.exit(3)\n"
            "time.sleep(2)\n")
    procs = [subprocess.Popen([sys.executable, "-c", race, str(run)], cwd=REPO) for _ in range(6)]
    codes = sorted(p.wait(timeout=60) for p in procs)
    assert codes == [0, 3, 3, 3, 3, 3], codes


def test_a_stale_lock_whose_pid_was_reused_is_named_as_such(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        real = jobs.process_start_time(bystander.pid)
        (run / jobs.LOCK).write_text(f"opsd-diag run pid {bystander.pid} (started long ago)\n"
                                     + json.dumps({"pid": bystander.pid, "start_time": real - 1}) + "\n")
        jobs.release_lock(jobs.acquire_lock(run))
        err = capsys.readouterr().err
        assert (f"taking over {run} from opsd-diag run pid {bystander.pid} (started long ago), which has ended "
                f"(its pid {bystander.pid} now belongs to another process)") in err
    finally:
        bystander.kill()
        bystander.wait()
    (run / jobs.LOCK).write_text("opsd-diag run pid 999999999 (started long ago)\n"
                                 + json.dumps({"pid": 999999999, "start_time": 5}) + "\n")
    jobs.release_lock(jobs.acquire_lock(run))
    assert "which is no longer running" in capsys.readouterr().err


@pytest.mark.slow
def test_fifos_in_a_run_directory_never_hang_the_app_or_the_cli(finished, tmp_path):
    """What the app calls on every page (status, log tail, metrics, the run list) and the CLI's readers
    return at once on a run whose files are FIFOs (a child process, so a hang fails instead of blocking)."""
    run = tmp_path / "runs" / "r"
    shutil.copytree(finished, run)
    for name in (jobs.STATUS, jobs.LOG, jobs.LOCK, "metrics.jsonl", "summary.json"):
        (run / name).unlink(missing_ok=True)
        os.mkfifo(run / name)
    probe = textwrap.dedent(f"""
        from opsd_diag import jobs
        from opsd_diag.errors import OpsdError
        from opsd_diag.run import Run
        run = {str(run)!r}
        print(jobs.status(run)["status"], repr(jobs.log_tail(run)), jobs.read_jsonl(run + "/metrics.jsonl"),
              len(jobs.find_runs({str(run.parent)!r})))
        jobs.check_free(run)
        for call in (lambda: jobs.write_status(run, "running"), lambda: jobs.acquire_lock(run), lambda: Run.load(run)):
            try:
                call()
            except OpsdError as e:
                print("refused:", e)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "unknown '' ([], 0) 0"  # the run list skips it: its status.json is damaged
    assert out.stdout.count("refused:") == 3 and out.stdout.count("named pipe (FIFO)") == 3, out.stdout


# -------------------------------------------------------------------------------- resource limits (tmpfs)

@pytest.fixture()
def tmpfs(tmp_path):
    """A small tmpfs of its own (``size``, ``nr_inodes``), unmounted after the test."""
    mounts = []

    def mount(size: str = "64m", inodes: int = 4096) -> Path:
        if os.geteuid() != 0:
            pytest.skip("!!! NOT RUN: the full-disk tests mount a tmpfs and need root (CI runs them as root) !!!")
        where = tmp_path / f"fs{len(mounts)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},nr_inodes={inodes}", "tmpfs", str(where)],
                       check=True)
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(fs: Path, inodes: bool = False) -> None:
    """Use up the file system's space (or its inodes)."""
    if inodes:
        i = 0
        while True:
            try:
                (fs / f"f{i}").touch()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                return
            i += 1
    with open(fs / "filler", "ab") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC


def debris(run: Path) -> list[str]:
    """Hidden temp files or folders (anything hidden but the emptied .lock) and a lock that names a holder."""
    hidden = [str(p.relative_to(run)) for p in run.rglob(".*") if p.name != jobs.LOCK]
    if (run / jobs.LOCK).exists() and (run / jobs.LOCK).read_text():
        hidden.append(".lock names a holder")
    return hidden


def write_cfg(path: Path, cfg: dict) -> str:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


@pytest.mark.parametrize("inodes", [False, True], ids=["no-space", "no-inodes"])
def test_a_full_disk_at_start_is_one_line_and_leaves_nothing(world, tmpfs, tmp_path, inodes, capsys):
    fs = tmpfs(inodes=64)
    fill(fs, inodes=inodes)
    before = sorted(os.listdir(fs))
    cfg = write_cfg(tmp_path / "c.yaml", diag_config(world))
    assert diag_cli.main(["run", cfg, "--out", str(fs / "run")]) == 2
    line = one_error(capsys.readouterr().err)
    assert "no space (or no free inodes) left on its file system (ENOSPC)" in line, line
    assert sorted(os.listdir(fs)) == before


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_fails_the_run_cleanly_and_it_resumes(world, tmpfs, tmp_path, monkeypatch,
                                                                        capsys):
    from opsd_diag.io import store

    fs = tmpfs()
    real = store.write_shard
    monkeypatch.setattr(store, "write_shard", lambda run, i, tables: (fill(fs) if i == 1 else None,
                                                                      real(run, i, tables))[1])
    cfg = write_cfg(tmp_path / "c.yaml", diag_config(world))
    run = fs / "run"
    assert diag_cli.main(["run", cfg, "--out", str(run), "--quiet"]) == 2
    line = one_error(capsys.readouterr().err)
    assert "cannot write" in line and "(ENOSPC)" in line and "rerun the same command" in line, line
    st = json.loads((run / jobs.STATUS).read_text())
    assert st["status"] == "failed" and "ENOSPC" in st["error"]
    assert debris(run) == []
    assert sorted(os.listdir(run / "shards")) == ["00000"]  # the finished shard stays; nothing of the second
    (fs / "filler").unlink()
    monkeypatch.setattr(store, "write_shard", real)
    assert diag_cli.main(["run", cfg, "--out", str(run), "--quiet"]) == 0
    assert json.loads((run / jobs.STATUS).read_text())["status"] == "finished"
    assert debris(run) == []


def test_a_full_disk_in_predict_leaves_the_run_as_it_was(finished, tmpfs, monkeypatch, capsys):
    from opsd_diag.io import store

    fs = tmpfs()
    run = fs / "run"
    shutil.copytree(finished, run)
    summary = (run / "summary.json").read_bytes()
    real = store.write_table
    monkeypatch.setattr(store, "write_table", lambda d, name, frame: (fill(fs), real(d, name, frame))[1])
    assert diag_cli.main(["predict", str(run), "--budget", "12", "--k", "1", "--m", "1"]) == 2
    line = one_error(capsys.readouterr().err)
    assert "nodes.parquet: no space" in line, line
    assert (run / "summary.json").read_bytes() == summary and not (run / "nodes.parquet").exists()
    assert debris(run) == []


def test_a_full_disk_at_a_training_checkpoint_fails_the_run_cleanly(world, tmpfs, tmp_path, monkeypatch, capsys):
    from fixtures_trainer import config_dict

    from trainer import checkpoint

    fs = tmpfs()
    real = checkpoint.write_model
    monkeypatch.setattr(checkpoint, "write_model", lambda tmp, *a, **k: (fill(fs), real(tmp, *a, **k))[1])
    cfg = write_cfg(tmp_path / "t.yaml", config_dict(world, max_steps=1))
    run = fs / "train"
    assert train_cli.main([cfg, "--out", str(run)]) == 2
    line = one_error(capsys.readouterr().err, "opsd-train")
    assert "no space" in line and "(ENOSPC)" in line, line
    st = json.loads((run / jobs.STATUS).read_text())
    assert st["status"] == "failed" and "ENOSPC" in st["error"]
    assert debris(run) == [] and not list((run / "checkpoints").glob("*"))
    assert [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()] == [1]


# ------------------------------------------------------------------------------------ the safe write itself

def test_a_write_cut_short_leaves_no_temp_file_on_any_exit_path(tmp_path):
    from opsd_diag.io import safe

    target = tmp_path / "summary.json"
    target.write_text("old")

    def interrupted(f):
        f.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        safe.write_file(target, interrupted, own_run=True)
    with pytest.raises(ValueError):
        safe.write_file(target, lambda f: (f.write(b"half"), int("x")), own_run=True)
    assert target.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["summary.json"]


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space (or no free inodes) left on its file system"),
                                         (errno.EDQUOT, "the disk quota is used up"),
                                         (errno.EMFILE, "too many open files in this process"),
                                         (errno.ENFILE, "too many open files on this machine")])
def test_resource_errors_are_one_line_naming_the_file(tmp_path, monkeypatch, code, words):
    from opsd_diag.io import safe

    def failing(f):
        f.write(b"x")
        raise OSError(code, os.strerror(code))

    with pytest.raises(OpsdError) as e:
        safe.write_file(tmp_path / "t.parquet", failing, own_run=True)
    assert str(e.value).startswith(f"cannot write {tmp_path / 't.parquet'}: {words} ({errno.errorcode[code]})")
    assert "\n" not in str(e.value) and os.listdir(tmp_path) == []


def test_status_is_still_marked_failed_when_no_temp_file_fits(tmp_path, monkeypatch):
    """On a disk too full for a temp file, status.json is overwritten in place (its blocks are reused)."""
    import tempfile

    from opsd_diag.io import safe

    run = tmp_path / "run"
    run.mkdir()
    jobs.write_status(run, "running", kind="diagnosis")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    jobs.write_status(run, "failed", error="the disk is full")
    assert jobs.read_status(run)["status"] == "failed"
    with pytest.raises(OpsdError, match="no space"):  # any other file: the error, not a torn file
        safe.write_file(run / "x.json", b"{}", own_run=True)
    assert not (run / "x.json").exists()


def test_the_path_check_names_each_impossible_path(tmp_path):
    from opsd_diag.io import safe

    loop = tmp_path / "a"
    loop.symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(loop)
    for path, words in (("x\0y", "contains a NUL character"), (str(tmp_path / ("n" * 256)), "256 bytes, over"),
                        ("/".join(["d" * 100] * 41), "over the limit of 4095"),
                        (str(loop / "run"), "goes through a loop of symbolic links")):
        with pytest.raises(OpsdError, match=words):
            safe.check_path(path, "--out")
    assert safe.check_path(str(tmp_path / ("n" * 255)), "--out") == tmp_path / ("n" * 255)  # the limit itself is fine
