"""The training run directory: config, command, metrics, checkpoints (status and lock: ``opsd_diag.jobs``).

``runs/train-<id>/``::

    config.yaml     the resolved config (diagnosis + training)    command.txt  the exact argv of every segment
    metrics.jsonl   one JSON record per line (kind: train / eval)  stdout.log   the run's output
    status.json     the job protocol's status (opsd_diag.jobs)      checkpoints/ step-NNNNNN/ (see checkpoint.py)
    STOP            touch to stop gracefully                       .lock        held while the run writes

Only the main process writes here, through ``opsd_diag.io.safe`` (never through a link, never into a
FIFO). Small files are replaced atomically; metrics are appended one line at a time, and on resume
the lines after the checkpoint's step are dropped.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from pathlib import Path

from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, store
from opsd_diag.scoreboard import PREDICTION


FILES = ("config.yaml", "command.txt", "metrics.jsonl", PREDICTION, jobs.STATUS, jobs.LOG, jobs.LOCK, jobs.STOP)


def default_dir(config_path: str | Path, root: str | Path = "runs") -> Path:
    return store.default_run_dir(config_path, root, prefix="train-")


def is_run_dir(path: Path) -> bool:
    return os.path.lexists(Path(path) / "config.yaml")


def attach_log_file(run_dir: Path, logger_name: str = "opsd-train"):
    """Copy the run's log lines into stdout.log, unless stdout already is that file (a launched job); returns the
    handler, which ``detach_log_file`` removes and closes when the run ends (an in-process caller may train again)."""
    import logging

    log_file = Path(run_dir) / jobs.LOG
    try:
        same = log_file.exists() and os.path.samestat(os.fstat(1), os.lstat(log_file))
    except OSError:
        same = False
    if same:
        return None
    handler = logging.StreamHandler(safe.open_append(log_file))  # a link or FIFO as stdout.log is refused
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logging.getLogger(logger_name).addHandler(handler)
    return handler


def detach_log_file(handler, logger_name: str = "opsd-train") -> None:
    """Remove the run's log-file handler and close its file."""
    import logging

    if handler is not None:
        logging.getLogger(logger_name).removeHandler(handler)
        handler.close()
        handler.stream.close()


def check(out_dir: Path, config_yaml: str, resume: bool) -> None:
    """Refuse, before anything is written, an out dir that cannot hold this run."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OpsdError(f"--out {out_dir} is a file, not a directory: choose a directory")
    if (out_dir / "manifest.json").is_file():
        raise OpsdError(f"{out_dir} is a diagnosis run (made by opsd-diag run), not a training run: choose another "
                        "--out" + (" (a training run from it: opsd-train --from-diagnosis)" if not resume else ""))
    safe.check_run_files(out_dir, FILES, ("checkpoints",))  # nothing here is written through a link or a FIFO
    if is_run_dir(out_dir):
        if not resume:
            raise OpsdError(f"{out_dir} already holds a training run: pass --resume to continue it, or choose "
                            "another --out")
        if _stored_config(out_dir) != config_yaml.encode():  # bytes: a damaged file just differs
            raise OpsdError(f"{out_dir} holds a run of a different config: resume with its own config.yaml "
                            f"({out_dir / 'config.yaml'}) or choose another --out")
    elif resume and not out_dir.exists():
        raise OpsdError(f"--resume: {out_dir} does not exist: pass the directory of the run to continue")
    elif resume and not store.is_job_dir(out_dir):
        raise OpsdError(f"--resume: {out_dir} is not a training run directory (no config.yaml)")
    elif out_dir.exists() and not store.is_job_dir(out_dir):
        raise OpsdError(f"{out_dir} exists and is not empty: choose a new or empty --out")
    store.check_writable(out_dir)


def _stored_config(out_dir: Path) -> bytes:
    try:
        return safe.read_bytes(out_dir / "config.yaml", 16 << 20)
    except OSError as e:
        raise OpsdError(f"cannot read {out_dir / 'config.yaml'} ({e.strerror}): resume a run you can read") from None


def create(out_dir: Path, config_yaml: str, argv: list[str], prediction: dict | None = None) -> None:
    """Make (or reuse, on resume) the run directory with its config, command and the prediction it
    was started from (``prediction.json``: the track record of ``opsd-diag scoreboard``)."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OpsdError(f"cannot create run directory {out_dir} ({e.strerror}): choose a writable --out") from None
    if not is_run_dir(out_dir):
        store.atomic_write_text(out_dir / "command.txt", shlex.join(argv) + "\n")
        if prediction is not None:
            store.atomic_write_json(out_dir / PREDICTION, prediction)
        store.atomic_write_text(out_dir / "config.yaml", config_yaml)
    else:  # a resume: keep every command that ran here
        safe.append_text(out_dir / "command.txt", shlex.join(argv) + "\n")


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
        safe.append_text(self.path, line + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (and a torn last line), atomically."""
        if not os.path.lexists(self.path):
            return
        keep = [r for r in jobs.read_jsonl(self.path)[0] if r.get("step", 0) <= step]
        store.atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))
