"""Start, find, follow and stop training runs as separate processes (what the app uses).

The app never imports training internals: it writes a config, shows the exact command from
``command``, starts it with ``start`` (an argument list, never a shell, in a new process group,
output to the run's stdout.log), and follows it only through ``status.json`` and ``metrics.jsonl``,
so a browser refresh or an app restart loses nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from opsd_diag.errors import OpsdError
from trainer import config as train_config
from trainer import rundir
from trainer.cli import COMMAND_ENV


def command(config_path: str | Path, out_dir: str | Path, *, num_processes: int = 1, resume: bool = False,
            accelerate_config: str | Path | None = None, python: str | None = None) -> list[str]:
    """The exact argv of a run: ``python -m trainer`` for one process, ``accelerate launch`` for more."""
    python = python or sys.executable
    tail = [str(config_path), "--out", str(out_dir), *(["--resume"] if resume else [])]
    if num_processes < 1:
        raise OpsdError(f"num_processes must be >= 1, got {num_processes}")
    if num_processes == 1 and accelerate_config is None:
        return [python, "-m", "trainer", *tail]
    head = [python, "-m", "accelerate.commands.launch"]
    if accelerate_config is not None:  # FSDP, DeepSpeed, several machines: the user's accelerate config
        return [*head, "--config_file", str(accelerate_config), "--num_processes", str(num_processes),
                "-m", "trainer", *tail]
    # --multi_gpu selects accelerate's torchrun launcher; on a CPU machine the trainer then runs its
    # processes on gloo (``--cpu`` would select the single-process launcher instead).
    return [*head, "--multi_gpu", "--num_machines", "1", "--num_processes", str(num_processes),
            "-m", "trainer", *tail]


@dataclass
class Run:
    run_dir: Path
    pid: int | None = None  # the launched process; it leads its own process group

    def status(self) -> dict:
        return status(self.run_dir)


def start(config_path: str | Path, out_dir: str | Path | None = None, *, num_processes: int = 1,
          resume: bool = False, accelerate_config: str | Path | None = None, runs_root: str | Path = "runs",
          env: dict | None = None) -> Run:
    """Validate the config and the run directory here, then start the run in a new process group."""
    tc = train_config.load(config_path)
    run_dir = Path(out_dir) if out_dir else rundir.default_dir(config_path, runs_root)
    rundir.check(run_dir, tc.to_yaml(), resume)
    argv = command(config_path, run_dir, num_processes=num_processes, resume=resume,
                   accelerate_config=accelerate_config)
    run_dir.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {}), COMMAND_ENV: json.dumps(argv)}
    with open(run_dir / "stdout.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=full_env)
    (run_dir / "launch.json").write_text(json.dumps({"pid": proc.pid, "pgid": proc.pid, "argv": argv,
                                                     "started": time.time()}, indent=2))
    return Run(run_dir, proc.pid)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (finished, not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def launch_info(run_dir: str | Path) -> dict:
    """launch.json of a run started by ``start`` (pid, pgid, argv), or {}."""
    try:
        return json.loads((Path(run_dir) / "launch.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def status(run_dir: str | Path) -> dict:
    """status.json, plus ``alive``; a run that says running but whose process is gone reads ``died``."""
    run_dir = Path(run_dir)
    st = rundir.read_status(run_dir) or {"status": "starting" if launch_info(run_dir) else "unknown"}
    pid = st.get("pid") or launch_info(run_dir).get("pid")
    st["alive"] = _alive(pid)
    if st["status"] in ("running", "starting") and not st["alive"]:
        st["status"] = "died"
    return st


def find_runs(root: str | Path = "runs") -> list[Path]:
    """Training run directories under ``root``, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("train-")
            and (rundir.is_run_dir(p) or (p / "launch.json").is_file())]
    return sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True)


class Follower:
    """Incremental reader of a run's metrics.jsonl: each ``poll`` reads and returns only the new
    records; ``records`` holds all of them so far (a live view keeps one Follower per run)."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.offset = 0
        self.records: list[dict] = []

    def poll(self) -> list[dict]:
        if self.path.is_file() and self.path.stat().st_size < self.offset:
            self.offset, self.records = 0, []  # rewritten by a resume: read it again from the start
        new, self.offset = rundir.read_new(self.path, self.offset)
        self.records += new
        return new


def follow(run_dir: str | Path, *, interval: float = 1.0, timeout: float | None = None):
    """Yield metrics records as they appear until the run leaves ``running``."""
    f = Follower(run_dir)
    deadline = None if timeout is None else time.time() + timeout
    while True:
        yield from f.poll()
        if status(run_dir)["status"] not in ("running", "starting"):
            yield from f.poll()
            return
        if deadline is not None and time.time() > deadline:
            return
        time.sleep(interval)


def stop(run_dir: str | Path, *, grace_s: float = 0.0, poll_s: float = 0.2) -> dict:
    """Ask for a graceful stop: the STOP file, then (after ``grace_s``) SIGTERM to the process group.

    Both make the trainer save a checkpoint at the next step boundary and end with ``stopped``.
    """
    run_dir = Path(run_dir)
    rundir.stop_file(run_dir).touch()
    deadline = time.time() + grace_s
    while time.time() < deadline and status(run_dir)["status"] in ("running", "starting"):
        time.sleep(poll_s)
    st = status(run_dir)
    pgid = st.get("pgid") or launch_info(run_dir).get("pgid")
    if st["alive"] and pgid:
        try:
            os.killpg(int(pgid), signal.SIGTERM)
        except ProcessLookupError:
            pass
    return st
