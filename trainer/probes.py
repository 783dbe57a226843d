"""Probes during training: a small diagnosis of the live policy every ``training.diagnose_every`` steps.

One function for both trainers: ``probe`` runs the probe (``opsd_diag.engine.probe``) into ``root/step-N``,
writes its HTML report with token heatmaps on the main process and returns the probe's numbers
(``opsd_diag.trajectory.scalars``) for the trackers. ``opsd-train`` calls ``in_training`` from its loop
(probes under ``probes/`` in the run directory, logged with the run's own trackers);
``trainer.trl_callback`` calls ``probe`` from a ``transformers`` callback.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from accelerate import PartialState

from opsd_diag import jobs, trajectory
from opsd_diag.config.probe import ProbeSpec
from opsd_diag.config.spec import DiagnosisConfig
from opsd_diag.engine.probe import probe_config, run_probe
from opsd_diag.run import Run
from trainer import sharded

log = logging.getLogger("opsd-train")
PROBES = "probes"  # the folder of an opsd-train run's probes


def probe(cfg: DiagnosisConfig, spec: ProbeSpec, root: Path, step: int, policy, meta: dict) -> dict[str, float]:
    """Probe ``policy`` after ``step`` steps with ``cfg`` (a ``probe_config``); on the main process its
    report is written and its numbers returned (``diagnosis/...`` plus ``diagnosis/probe_step``), else {}."""
    out = run_probe(cfg, root, step, policy, meta)
    if not PartialState().is_main_process:
        return {}
    run = Run.load(out)
    if spec.heatmaps and not (out / trajectory.REPORT).is_file():
        trajectory.write_report(run, spec.heatmaps, step)
    return {**trajectory.scalars(run), f"{trajectory.PREFIX}/probe_step": float(step)}


def in_training(acc, st, run_dir: Path, step: int, wrapped=None, last: bool = False) -> None:
    """``opsd-train``'s hook: probe when ``training.diagnose_every`` says so, and log the numbers at ``step``."""
    spec = st.tc.spec.diagnose_every
    if spec is None or not spec.due(step, last):
        return
    teachers = [st.tc.teacher.name] if st.tc.teacher is not None else None  # the trained teacher (sft: all)
    cfg = probe_config(st.tc.cfg, spec, teachers, str(acc.device))
    if acc.is_main_process:
        jobs.write_status(run_dir, stage="diagnosing", probe_step=step)
    with sharded.full_params(wrapped) if wrapped is not None else contextlib.nullcontext():
        values = probe(cfg, spec, Path(run_dir) / PROBES, step, st.roles.student, {"source": "opsd-train"})
    if acc.is_main_process:
        acc.log(values, step=step)
        jobs.write_status(run_dir, stage="train")
        log.info("probe step %d: %s", step, Path(run_dir) / PROBES / ProbeSpec.step_dir(step))
