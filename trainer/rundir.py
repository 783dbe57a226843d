"""The training run directory: what the app and ``launch`` read while a run goes on.

``runs/train-<id>/``::

    config.yaml     the resolved config (diagnosis + training)    command.txt  the exact argv
    metrics.jsonl   one JSON record per line (kind: train / eval)  stdout.log   the run's output
    status.json     running / finished / failed / stopped, step, error, pid/pgid
    checkpoints/    step-NNNNNN/ (see checkpoint.py)                STOP         touch to stop gracefully

Only the main process writes here. Small files are replaced atomically; metrics are appended one
line at a time, and on resume the lines after the checkpoint's step are dropped.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from opsd_diag.io import store
from opsd_diag.errors import OpsdError

LAUNCHER_FILES = {"stdout.log", "launch.json", "STOP"}  # what a run dir may hold before the process writes
STATUSES = ("running", "finished", "failed", "stopped")


def default_dir(config_path: str | Path, root: str | Path = "runs") -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"train-{Path(config_path).stem}-{stamp}"


def _check_writable(out_dir: Path) -> None:
    parent = out_dir if out_dir.exists() else out_dir.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OpsdError(f"--out {out_dir}: {parent} is a file, not a directory: choose another --out")
    try:
        with tempfile.NamedTemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise OpsdError(f"cannot write the run directory {out_dir} ({e.strerror}): choose a writable --out") from None


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "config.yaml").is_file()


def is_launcher_dir(path: Path) -> bool:
    """A folder ``launch.start`` prepared for a run that has not written anything yet."""
    path = Path(path)
    if not path.is_dir() or is_run_dir(path):
        return False
    names = set(os.listdir(path))
    return "stdout.log" in names and names <= LAUNCHER_FILES | {"status.json"}


def attach_log_file(run_dir: Path, logger_name: str = "opsd-train") -> None:
    """Copy the run's log lines into stdout.log, unless stdout already is that file (launch.start)."""
    import logging

    log_file = Path(run_dir) / "stdout.log"
    try:
        same = log_file.exists() and os.path.samestat(os.fstat(1), os.stat(log_file))
    except OSError:
        same = False
    logger = logging.getLogger(logger_name)
    if same or any(isinstance(h, logging.FileHandler) for h in logger.handlers):
        return
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)


def check(out_dir: Path, config_yaml: str, resume: bool) -> None:
    """Refuse, before anything is written, an out dir that cannot hold this run."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OpsdError(f"--out {out_dir} is a file, not a directory: choose a directory")
    if is_run_dir(out_dir):
        if not resume:
            raise OpsdError(f"{out_dir} already holds a training run: pass --resume to continue it, or choose "
                            "another --out")
        if (out_dir / "config.yaml").read_text() != config_yaml:
            raise OpsdError(f"{out_dir} holds a run of a different config: resume with its own config.yaml "
                            f"({out_dir / 'config.yaml'}) or choose another --out")
    elif resume and not out_dir.exists():
        raise OpsdError(f"--resume: {out_dir} does not exist: pass the directory of the run to continue")
    elif resume and not is_launcher_dir(out_dir):
        raise OpsdError(f"--resume: {out_dir} is not a training run directory (no config.yaml)")
    elif out_dir.exists() and os.listdir(out_dir) and not is_launcher_dir(out_dir):
        raise OpsdError(f"{out_dir} exists and is not empty: choose a new or empty --out")
    _check_writable(out_dir)


def create(out_dir: Path, config_yaml: str, argv: list[str]) -> None:
    """Make (or reuse, on resume) the run directory with its config and command."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OpsdError(f"cannot create run directory {out_dir} ({e.strerror}): choose a writable --out") from None
    if not is_run_dir(out_dir):
        store.atomic_write_text(out_dir / "command.txt", shlex.join(argv) + "\n")
        store.atomic_write_text(out_dir / "config.yaml", config_yaml)
    else:
        with open(out_dir / "command.txt", "a") as f:  # a resume: keep every command that ran here
            f.write(shlex.join(argv) + "\n")


def write_status(run_dir: Path, status: str, **fields) -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown status {status}")
    old = read_status(run_dir) or {}
    rec = {**old, **fields, "status": status, "updated": time.time(), "pid": os.getpid(), "pgid": os.getpgrp()}
    if status == "running":
        rec.pop("error", None)
    store.atomic_write_json(Path(run_dir) / "status.json", rec)


def read_status(run_dir: Path) -> dict | None:
    path = Path(run_dir) / "status.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Append-only ``metrics.jsonl``; each record is one complete line, flushed at once."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / "metrics.jsonl"

    def write(self, record: dict) -> None:
        line = json.dumps({k: _clean(v) for k, v in record.items()}, allow_nan=False)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (and a torn last line), atomically."""
        if not self.path.is_file():
            return
        keep = [r for r in read_metrics(self.path) if r.get("step", 0) <= step]
        store.atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))


def read_metrics(path: Path, offset: int = 0) -> list[dict]:
    """Records from byte ``offset``; an unfinished last line (a run writing or killed) is skipped."""
    return read_new(path, offset)[0]


def read_new(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """(complete records after ``offset``, the offset to continue from)."""
    path = Path(path)
    if not path.is_file():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    records, used = [], 0
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is not complete yet
        used += len(line) + 1
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records, offset + used


def stop_file(run_dir: Path) -> Path:
    return Path(run_dir) / "STOP"
