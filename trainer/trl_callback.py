"""``DiagnosisCallback``: the diagnosis inside someone else's training run (TRL, or any ``transformers.Trainer``).

Every ``every`` optimizer steps it diagnoses the live policy (the trainer's ``model``) against the teachers
of a diagnosis config (and its base, if it names one) on a fixed probe set: the first ``problems`` problems
of the config's data. Each probe is an ordinary diagnosis run directory, ``out/step-NNNNNNN``, with the same
signals, verdicts and predicted gain as ``opsd-diag run`` on a saved checkpoint of the same weights
(``opsd_diag.engine.probe``), plus ``report.html`` with token heatmaps; the app opens ``out`` as a trajectory.
Its numbers (``opsd_diag.trajectory.scalars``) go to the trainer's own ``report_to`` trackers (TensorBoard,
W&B, trackio, ...) with the next log the trainer writes, which the callback asks for at every probe.

Only the public ``transformers`` callback API is used; nothing of TRL. The trackers see the probe's numbers
only if this callback runs before them: add it with ``callback.attach(trainer)`` (it goes first), not
through ``callbacks=[...]`` (which puts it after the trackers: the numbers then reach only the trainer's
``log_history`` and the probe directories)::

    trainer = GKDTrainer(model=student, teacher_model=teacher, args=args, train_dataset=ds, processing_class=tok)
    DiagnosisCallback("probe.yaml", out="runs/probes", every=50).attach(trainer)
    trainer.train()
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import TrainerCallback

from opsd_diag import trajectory
from opsd_diag.config.probe import ProbeSpec
from opsd_diag.config.spec import DiagnosisConfig, load_config, validate
from opsd_diag.engine.probe import probe_config
from trainer import probes


class DiagnosisCallback(TrainerCallback):
    """Probe the policy every ``every`` steps (an int, or a ``diagnose_every`` mapping / ``ProbeSpec``).

    ``config``: a diagnosis config (a YAML path or a ``DiagnosisConfig``) whose student is the model the
    training starts from (its tokenizer is read from there) and whose teachers (or the ones named in
    ``teachers``) are scored against the live policy; ``out``: the folder of the probe run directories.
    """

    def __init__(self, config: str | Path | DiagnosisConfig, out: str | Path, every: int | dict | ProbeSpec,
                 teachers: list[str] | None = None):
        self.cfg = config if isinstance(config, DiagnosisConfig) else load_config(config)
        self.spec = every if isinstance(every, ProbeSpec) else validate(ProbeSpec, every, "DiagnosisCallback every",
                                                                        "every")
        self.teachers, self.out = teachers, Path(out)
        probe_config(self.cfg, self.spec, teachers)  # a wrong teacher name or setting fails now, not at step N
        self.pending: dict[str, float] = {}  # the last probe's numbers, until the next log
        self.report: Path | None = None  # the last probe's report.html, until the next log
        self.logged: list[dict[str, float]] = []  # every probe's numbers, as handed to the trackers

    def attach(self, trainer):
        """Add this callback to ``trainer`` ahead of its other callbacks (its trackers among them)."""
        others = list(trainer.callback_handler.callbacks)
        for cb in others:
            trainer.remove_callback(cb)
        for cb in [self, *others]:
            trainer.add_callback(cb)
        return trainer

    def _probe(self, step: int, model, state, control) -> None:
        device = str(next(model.parameters()).device)
        cfg = probe_config(self.cfg, self.spec, self.teachers, device)
        values = probes.probe(cfg, self.spec, self.out, step, model, {"source": "transformers", "epoch": state.epoch})
        if values:
            self.pending = values
            report = self.out / ProbeSpec.step_dir(step) / trajectory.REPORT
            self.report = report if report.is_file() else None
            control.should_log = True  # the trainer logs at the end of this step: the numbers go with it

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0 and self.spec.due(0):
            self._probe(0, model, state, control)  # logged with the first log of the run

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if step > 0 and self.spec.due(step, last=step == state.max_steps):
            self._probe(step, model, state, control)
        elif self.pending:  # the initial policy's probe: logged with the first step's log
            control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending and logs is not None:
            logs.update(self.pending)  # seen by every tracker callback after this one
            if state.log_history:
                state.log_history[-1].update(self.pending)  # trainer_state.json keeps them too
            self.logged.append(self.pending)
            self.pending = {}
            self._report_to_wandb(args)

    def _report_to_wandb(self, args) -> None:
        """The probe's HTML report (its token heatmaps) as a W&B HTML panel, logged with the step's numbers; the
        other trackers (TensorBoard, trackio, MLflow) show no HTML: they get the numbers, the file stays in the
        probe directory."""
        report, self.report = self.report, None
        wandb = sys.modules.get("wandb")  # imported by the trainer's WandbCallback when report_to names it
        wanted = args.report_to in ("all", "wandb") or "wandb" in (args.report_to or ())
        if report is not None and wanted and wandb is not None and getattr(wandb, "run", None) is not None:
            wandb.log({f"{trajectory.PREFIX}/report": wandb.Html(report.read_text())}, commit=False)
