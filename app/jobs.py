"""Start ``opsd-diag run`` as a separate process and follow it only through its run directory.

The app never runs a diagnosis in its own process: a refresh or a restart of the UI loses nothing,
and progress is whatever the run directory says (manifest status, finished shards) plus the log.
No Streamlit here, so this is testable directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from opsd_diag.io import store
from opsd_diag.errors import OpsdError

RUNS_ROOT = Path("runs")
ERROR_PREFIX = "opsd-diag: error:"


def cli_argv() -> list[str]:
    """``opsd-diag`` of this very interpreter (the console script may be absent or another env's)."""
    return [sys.executable, "-m", "opsd_diag.cli"]


def run_command(config: str | Path, out_dir: str | Path) -> list[str]:
    return [*cli_argv(), "run", str(config), "--out", str(out_dir)]


def default_run_dir(config: str | Path, root: str | Path = RUNS_ROOT) -> Path:
    """``<root>/<config name>-<UTC time>``, as ``opsd-diag run`` names it without --out."""
    return Path(root) / f"{Path(config).stem}-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}"


def log_path(run_dir: str | Path) -> Path:
    # Beside the run directory, not inside: `opsd-diag run` refuses a new --out that is not empty.
    run_dir = Path(run_dir)
    return run_dir.with_name(run_dir.name + ".log")


def list_runs(root: str | Path = RUNS_ROOT) -> list[Path]:
    """Run directories (those with a manifest) under ``root``, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if (p / "manifest.json").is_file()]
    return sorted(runs, key=lambda p: (p / "manifest.json").stat().st_mtime, reverse=True)


def start(config: str | Path, out_dir: str | Path, cwd: str | Path | None = None) -> subprocess.Popen:
    """Launch the diagnosis in a new process group, stdout and stderr into ``log_path(out_dir)``."""
    cwd = Path(cwd or os.getcwd())
    out_dir = Path(out_dir)
    log = log_path(out_dir if out_dir.is_absolute() else cwd / out_dir)
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:  # the child keeps its own descriptor
            return subprocess.Popen(run_command(config, out_dir), cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except OSError as e:
        raise OpsdError(f"cannot start the diagnosis ({e.strerror}): check that {log.parent} is writable") from None


@dataclass
class Progress:
    status: str  # starting | running | finished | failed
    done: int
    total: int
    error: str | None
    log_tail: str

    @property
    def fraction(self) -> float:
        if self.status == "finished":
            return 1.0
        return self.done / self.total if self.total else 0.0

    @property
    def text(self) -> str:
        if self.status == "starting":
            return "starting: loading models and data"
        return f"{self.status}: {self.done} of {self.total} shards"


def _tail(path: Path, n_lines: int = 40) -> str:
    if not path.is_file():
        return ""
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 16_000))
        text = f.read().decode("utf-8", errors="replace")
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]  # tqdm redraws with \r
    return "\n".join(lines[-n_lines:])


def progress(run_dir: str | Path, returncode: int | None = None) -> Progress:
    """Where a run stands, from its directory and log (``returncode``: the process's, when known)."""
    run_dir = Path(run_dir)
    tail = _tail(log_path(run_dir))
    error = next((ln.removeprefix(ERROR_PREFIX).strip() for ln in reversed(tail.splitlines())
                  if ln.startswith(ERROR_PREFIX)), None)
    if error is None and "Traceback (most recent call last)" in tail:  # a crash, not a user error
        error = f"the diagnosis crashed: {tail.splitlines()[-1]}"
    status, done, total = "starting", 0, 0
    if (run_dir / "manifest.json").is_file():
        m = store.read_manifest(run_dir)
        status, total = m.get("status", "running"), int(m.get("n_shards") or 0)
        done = sum(store.shard_done(run_dir, i) for i in range(total))
    if status != "finished" and (error or returncode not in (None, 0)):
        status = "failed"
        error = error or f"the diagnosis process exited with status {returncode}; see the log"
    return Progress(status, done, total, error, tail)
