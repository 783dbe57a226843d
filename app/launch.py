"""Start a training run as a job (``opsd_diag.jobs``) after checking its config and run directory here.

Following, status and stop are the job protocol's own (``opsd_diag.jobs``); this module only adds
what is particular to training: the config is resolved, its data files (training, held-out,
regression) read and checked, and the run directory checked *before* anything starts, so a mistake is
one error in the caller, not a failed job.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.io import safe
from opsd_diag.config import training as train_config
from opsd_diag.config.levers import named_mask
from trainer import rundir


def start(config_path: str | Path, out_dir: str | Path | None = None, *, num_processes: int = 1,
          resume: bool = False, accelerate_config: str | Path | None = None, runs_root: str | Path = "runs",
          env: dict | None = None) -> jobs.Job:
    """Validate the config and the run directory, then start ``opsd-train`` in a new process group."""
    tc = train_config.load(config_path)
    _check_data(tc)
    run_dir = Path(out_dir) if out_dir else rundir.default_dir(config_path, runs_root)
    jobs.check_free(run_dir)
    rundir.check(run_dir, tc.to_yaml(), resume)
    argv = jobs.training_command(config_path, run_dir, num_processes=num_processes, resume=resume,
                                 accelerate_config=accelerate_config)
    return jobs.start(argv, run_dir, "training", env=env)


def _check_data(tc) -> None:
    """The problem sets the run reads (a held-out path that does not exist...), as the run itself checks them."""
    from trainer.setup import check_inputs  # imports torch: only when a run is about to start

    check_inputs(tc)


def from_diagnosis_command(run_dir: str | Path, config: str, signal: str, out_dir: str | Path, *,
                           max_steps: int | None = None, learning_rate: float | None = None,
                           batch_size: int | None = None, seed: int | None = None,
                           eval_data: str | Path | None = None, eval_problems: int | None = None,
                           eval_samples: int | None = None, eval_steps: int | None = None,
                           token_mask: str | None = None,
                           reveal: float | None = None, trust_remote_code: bool = False) -> list[str]:
    """The argv of ``opsd-train --from-diagnosis RUN --config C --signal S --out DIR [overrides]``."""
    argv = [sys.executable, "-m", "trainer", "--from-diagnosis", str(run_dir), "--config", config, "--signal", signal,
            "--out", str(out_dir), *(["--trust-remote-code"] if trust_remote_code else [])]
    for flag, value in (("--max-steps", max_steps), ("--learning-rate", learning_rate), ("--batch-size", batch_size),
                        ("--seed", seed), ("--eval-data", eval_data), ("--eval-problems", eval_problems),
                        ("--eval-samples", eval_samples), ("--eval-steps", eval_steps), ("--token-mask", token_mask),
                        ("--reveal", reveal)):
        if value is not None and value != "":
            argv += [flag, str(value)]
    return argv


def start_from_diagnosis(run_dir: str | Path, config: str, signal: str, out_dir: str | Path | None = None, *,
                         runs_root: str | Path = "runs", env: dict | None = None, trust_remote_code: bool = False,
                         **overrides) -> jobs.Job:
    """Train (config, signal) of a finished diagnosis as a job; its prediction goes into the run's
    ``prediction.json`` (the track record). Everything is checked here first: a mistake is one error.
    Remote code only with ``trust_remote_code`` (the user's own setting), never from the diagnosis."""
    from trainer.from_diagnosis import from_diagnosis

    names = {"max_steps": "max_steps", "learning_rate": "learning_rate", "batch_size": "per_device_train_batch_size",
             "seed": "seed", "eval_steps": "eval_steps"}
    cfg_over = {names[k]: v for k, v in overrides.items() if k in names and v is not None}
    from trainer.cli import eval_overrides, reveal_schedule

    ev = eval_overrides(overrides.get("eval_data"), overrides.get("eval_problems"), overrides.get("eval_samples"))
    if ev:
        cfg_over["eval"] = ev
    if overrides.get("token_mask"):
        cfg_over["token_mask"] = named_mask(overrides["token_mask"])
    if overrides.get("reveal") is not None:
        cfg_over["context_schedule"] = reveal_schedule(overrides["reveal"])
    cfg, _, _ = from_diagnosis(run_dir, config, signal, trust_remote_code=trust_remote_code, **cfg_over)
    tc = train_config.resolve_training(cfg, f"training from {run_dir}")
    train_config.check_environment(tc.spec, f"training from {run_dir}")
    _check_data(tc)
    out = Path(out_dir) if out_dir else rundir.default_dir(f"{config}-{signal}", runs_root)
    rundir.check(out, tc.to_yaml(), False)
    argv = from_diagnosis_command(run_dir, config, signal, out, trust_remote_code=trust_remote_code, **overrides)
    return jobs.start(argv, out, "training", env=env)


def resume(run_dir: str | Path, env: dict | None = None) -> jobs.Job:
    """Continue a stopped (or died) training run with the command it was started with, plus ``--resume``."""
    run_dir = Path(run_dir)
    st = jobs.status(run_dir)
    if st["status"] in jobs.ACTIVE:
        raise OpsdError(f"{run_dir} is still running: stop it first, or follow it")
    if st["status"] == "finished":
        raise OpsdError(f"{run_dir} has finished: start a new run to train further")
    argv = st.get("argv")
    if not argv and (run_dir / "command.txt").is_file():
        argv = shlex.split(safe.read_bytes(run_dir / "command.txt", 1 << 20).decode(errors="replace").splitlines()[0])
    if not argv or not rundir.is_run_dir(run_dir):
        raise OpsdError(f"{run_dir} is not a training run that can be resumed (no config.yaml or command)")
    return jobs.start(resume_command(argv, run_dir), run_dir, "training", env=env)


def resume_command(stored, run_dir: Path) -> list[str]:
    """The stored command of a run, checked to be opsd-train's on this very run (it is read from the run
    directory, which may come from anywhere: it never names another program), plus ``--resume``.
    Remote code is the user's to allow: a stored ``--trust-remote-code`` is dropped."""
    heads = ([sys.executable, "-m", "trainer"], [sys.executable, "-m", "accelerate.commands.launch"])
    ok = (isinstance(stored, list) and all(isinstance(a, str) for a in stored) and "trainer" in stored
          and any(stored[:len(h)] == h for h in heads) and "--out" in stored[:-1])
    if ok:
        out = Path(stored[stored.index("--out") + 1])
        ok = out == Path(run_dir) or out.resolve() == Path(run_dir).resolve()
    if not ok:
        raise OpsdError(f"{run_dir}: its stored command is not opsd-train's on this run directory (made elsewhere, "
                        "or edited): start it again from its config with the Train page or opsd-train --resume")
    return [*[a for a in stored if a not in ("--resume", "--trust-remote-code")], "--resume"]
