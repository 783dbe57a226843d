"""Start a training run as a job (``opsd_diag.jobs``) after checking its config and run directory here.

Following, status and stop are the job protocol's own (``opsd_diag.jobs``); this module only adds
what is particular to training: the config is resolved and the run directory checked *before*
anything starts, so a mistake is one error in the caller, not a failed job.
"""

from __future__ import annotations

from pathlib import Path

from opsd_diag import jobs
from trainer import config as train_config
from trainer import rundir


def start(config_path: str | Path, out_dir: str | Path | None = None, *, num_processes: int = 1,
          resume: bool = False, accelerate_config: str | Path | None = None, runs_root: str | Path = "runs",
          env: dict | None = None) -> jobs.Job:
    """Validate the config and the run directory, then start ``opsd-train`` in a new process group."""
    tc = train_config.load(config_path)
    run_dir = Path(out_dir) if out_dir else rundir.default_dir(config_path, runs_root)
    jobs.check_free(run_dir)
    rundir.check(run_dir, tc.to_yaml(), resume)
    argv = jobs.training_command(config_path, run_dir, num_processes=num_processes, resume=resume,
                                 accelerate_config=accelerate_config)
    return jobs.start(argv, run_dir, "training", env=env)
