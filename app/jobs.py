"""Work started from the app: checked here, then run as jobs (``opsd_diag.jobs``), followed by status.json.

The app never runs a diagnosis or a training run in its own process: a refresh or a restart of the
UI loses nothing, and progress is whatever the run directory's status.json says, plus the log. Jobs
run this very checkout's code: the repository root leads the child's PYTHONPATH.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.config import load_config

RUNS_ROOT = Path("runs")
REPO = Path(__file__).resolve().parents[1]
PHASES = ("rollouts and scoring", "aggregates", "predictor")


def env() -> dict:
    """The environment of a launched job: this checkout first on PYTHONPATH."""
    rest = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + rest if rest else "")}


def start(config: str | Path, out_dir: str | Path) -> jobs.Job:
    """Check the config and the run directory here (a mistake is an error in place), then start the job."""
    cfg = load_config(config)
    out_dir = Path(out_dir)
    store.check_run_dir(out_dir, cfg.model_dump(mode="json"))
    if (out_dir / "manifest.json").is_file() and store.read_manifest(out_dir).get("status") == "finished":
        raise OpsdError(f"{out_dir} holds this diagnosis already finished: open it, or choose a new run directory")
    return jobs.start(jobs.diagnosis_command(config, out_dir), out_dir, "diagnosis", env=env())


@dataclass
class Phase:
    name: str
    state: str  # done | running | waiting | skipped
    done: int = 0
    total: int = 0
    eta_s: float | None = None  # seconds left, while running and measurable

    @property
    def fraction(self) -> float:
        if self.state in ("done", "skipped"):
            return 1.0
        return min(1.0, self.done / self.total) if self.total else 0.0


@dataclass
class Progress:
    status: str  # starting | running | finished | failed | stopped | died | unknown
    stage: str
    done: int
    total: int
    error: str | None
    log_tail: str
    phases: list[Phase]

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
        if self.status == "finished":
            return "finished"
        running = next((p for p in self.phases if p.state == "running"), None)
        if self.status == "running" and running is not None:
            unit = "shards" if running.name == PHASES[0] else "continuations"
            count = f", {running.done} of {running.total} {unit}" if running.total and running.name != "aggregates" else ""
            eta = f", about {_left(running.eta_s)} left" if running.eta_s is not None else ""
            return f"running: {running.name}{count}{eta}"
        if self.status == "running":
            return f"running: {self.stage}"
        return f"{self.status}: {self.stage}, {self.done} of {self.total} shards" if self.total else self.status


def _left(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds} s" if seconds < 90 else f"{seconds // 60} min"


def _eta(started, done: int, total: int, now: float) -> float | None:
    if not started or done <= 0 or total <= done:
        return None
    return (now - float(started)) / done * (total - done)


def phases(st: dict, predictor: bool | None, now: float | None = None) -> list[Phase]:
    """Each phase of a diagnosis (rollouts and scoring, aggregates, predictor) from its status.json;
    ``predictor``: whether the config has one (None: not known yet, before the manifest is written)."""
    now = time.time() if now is None else now
    status, stage = st.get("status"), st.get("stage") or ""
    done, total = int(st.get("done") or 0), int(st.get("total") or 0)
    current = PHASES.index(stage) if stage in PHASES else (len(PHASES) if status == "finished" else -1)
    out = []
    for i, name in enumerate(PHASES):
        if name == "predictor" and predictor is False:
            out.append(Phase(name, "skipped"))
        elif i < current or status == "finished":
            out.append(Phase(name, "done"))
        elif i == current and status in jobs.ACTIVE:
            started = st.get("stage_started") if name == "predictor" else st.get("started")
            out.append(Phase(name, "running", done, total, _eta(started, done, total, now)))
        else:
            out.append(Phase(name, "waiting"))
    return out


def progress(run_dir: str | Path) -> Progress:
    """Where a diagnosis stands, from its status.json (a run made before status.json: its manifest)."""
    st = jobs.status(run_dir)
    status = st["status"]
    manifest = {}
    if (Path(run_dir) / "manifest.json").is_file():
        try:
            manifest = store.read_manifest(Path(run_dir))
        except OpsdError:
            manifest = {}
    if status == "unknown" and manifest:
        status = manifest.get("status", "unknown")
    error = st.get("error")
    if status == "died":
        error = error or "the diagnosis process ended without a result: see the log"
    ideal = (manifest.get("config") or {}).get("ideal")
    predictor = (bool(ideal) and ideal.get("enabled", True) is not False) if manifest else None
    return Progress(status, st.get("stage") or "", int(st.get("done") or 0), int(st.get("total") or 0), error,
                    jobs.log_tail(run_dir), phases({**st, "status": status}, predictor))
