"""Diagnoses started from the app: checked here, then run as jobs (``opsd_diag.jobs``), followed by status.json.

The app never runs a diagnosis in its own process: a refresh or a restart of the UI loses nothing,
and progress is whatever the run directory's status.json says, plus the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.config import load_config

RUNS_ROOT = Path("runs")


def start(config: str | Path, out_dir: str | Path) -> jobs.Job:
    """Check the config and the run directory here (a mistake is an error in place), then start the job."""
    cfg = load_config(config)
    out_dir = Path(out_dir)
    store.check_run_dir(out_dir, cfg.model_dump(mode="json"))
    if (out_dir / "manifest.json").is_file() and store.read_manifest(out_dir).get("status") == "finished":
        raise OpsdError(f"{out_dir} holds this diagnosis already finished: open it, or choose a new run directory")
    return jobs.start(jobs.diagnosis_command(config, out_dir), out_dir, "diagnosis")


@dataclass
class Progress:
    status: str  # starting | running | finished | failed | stopped | died | unknown
    stage: str
    done: int
    total: int
    error: str | None
    log_tail: str

    @property
    def active(self) -> bool:
        return self.status in jobs.ACTIVE

    @property
    def fraction(self) -> float:
        if self.status == "finished":
            return 1.0
        return min(1.0, self.done / self.total) if self.total else 0.0

    @property
    def text(self) -> str:
        if self.status == "starting":
            return "starting: loading models and data"
        if self.status == "running" and self.stage != "rollouts and scoring":
            return f"running: {self.stage}"
        return f"{self.status}: {self.stage}, {self.done} of {self.total} shards" if self.total else self.status


def progress(run_dir: str | Path) -> Progress:
    """Where a diagnosis stands, from its status.json (a run made before status.json: its manifest)."""
    st = jobs.status(run_dir)
    status = st["status"]
    if status == "unknown" and (Path(run_dir) / "manifest.json").is_file():
        status = store.read_manifest(Path(run_dir)).get("status", "unknown")
    error = st.get("error")
    if status == "died":
        error = error or "the diagnosis process ended without a result: see the log"
    return Progress(status, st.get("stage") or "", int(st.get("done") or 0), int(st.get("total") or 0), error,
                    jobs.log_tail(run_dir))
