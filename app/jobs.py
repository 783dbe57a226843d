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
from opsd_diag.config.spec import load_config

RUNS_ROOT = Path("runs")
REPO = Path(__file__).resolve().parents[1]
PHASES = ("rollouts", "scoring", "aggregates", "predictor")
SHARDS = "rollouts and scoring"  # the diagnosis' stage while shards run: each shard samples, then scores


def env() -> dict:
    """The environment of a launched job: this checkout first on PYTHONPATH."""
    rest = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(REPO) + (os.pathsep + rest if rest else "")}


def checked_config(config: str | Path):
    """The diagnosis config, read and validated, whose every model can be found (a local directory with its
    config.json, or a hub id in the local cache unless downloads are on): a typo is an error here, not a failed job."""
    from opsd_diag.io.models import check_sources, config_models  # imports torch: only on a check or a start

    cfg = load_config(config)
    check_sources(config_models(cfg))
    return cfg


def start(config: str | Path, out_dir: str | Path) -> jobs.Job:
    """Check the config, its models and the run directory here (a mistake is an error in place), then start the
    job."""
    cfg = checked_config(config)
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
        running = [p for p in self.phases if p.state == "running"]
        if self.status == "running" and running:
            parts = []
            for ph in running:
                unit = "continuations" if ph.name == "predictor" else "shards"
                parts.append(ph.name + (f" {ph.done} of {ph.total} {unit}" if ph.total and ph.name != "aggregates"
                                        else ""))
            eta = running[-1].eta_s  # the last running phase ends the stage
            return f"running: {', '.join(parts)}" + (f", about {_left(eta)} left" if eta is not None else "")
        if self.status == "running":
            return f"running: {self.stage}"
        return f"{self.status}: {self.stage}, {self.done} of {self.total} shards" if self.total else self.status


def _left(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds} s" if seconds < 90 else f"{seconds // 60} min"


def eta(started, done: int, total: int) -> float | None:
    """Seconds left of a stage that started at ``started`` (epoch s) and did ``done`` of ``total``."""
    return _eta(started, done, total, time.time())


def _eta(started, done: int, total: int, now: float) -> float | None:
    if not started or done <= 0 or total <= done:
        return None
    return (now - float(started)) / done * (total - done)


def _per_shard(st: dict, step: str) -> float | None:
    """Mean seconds of one shard's ``step`` (rollouts | scoring) in the main process, once one was timed."""
    n = int(st.get(f"{step}_n") or 0)
    return float(st.get(f"{step}_s") or 0.0) / n if n else None


def _shard_phases(st: dict, now: float) -> list[Phase]:
    """The rollouts and scoring phases while shards run: a shard samples, then scores, so both advance
    together; each ETA from the main process' timings (split over the processes), else from the start."""
    done, total = int(st.get("done") or 0), int(st.get("total") or 0)
    sampled = min(total, done + (st.get("shard_step") == "scoring"))  # the shard being scored was sampled
    procs = max(1, int(st.get("processes") or 1))
    r, c = _per_shard(st, "rollouts"), _per_shard(st, "scoring")
    fallback = _eta(st.get("started"), done, total, now)
    eta_r = r * (total - sampled) / procs if r is not None else fallback
    eta_c = (r * (total - sampled) + c * (total - done)) / procs if r is not None and c is not None else fallback
    return [Phase("rollouts", "done" if total and sampled >= total else "running", sampled, total,
                  eta_r if sampled < total else None),
            Phase("scoring", "running", done, total, eta_c)]


def phases(st: dict, predictor: bool | None, now: float | None = None) -> list[Phase]:
    """Each phase of a diagnosis (rollouts, scoring, aggregates, predictor) from its status.json;
    ``predictor``: whether the config has one (None: not known yet, before the manifest is written)."""
    now = time.time() if now is None else now
    status, stage = st.get("status"), st.get("stage") or ""
    done, total = int(st.get("done") or 0), int(st.get("total") or 0)
    order = {SHARDS: 0, "aggregates": 2, "predictor": 3}
    current = order.get(stage, len(PHASES) if status == "finished" else -1)
    out = []
    for i, name in enumerate(PHASES):
        if name == "predictor" and predictor is False:
            out.append(Phase(name, "skipped"))
        elif status == "finished" or i < current:
            out.append(Phase(name, "done"))
        elif current == 0 and i < 2 and status in jobs.ACTIVE:
            out.append(_shard_phases(st, now)[i])
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
