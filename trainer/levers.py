"""The levers of a training run, step by step: the kept tokens (``training.token_mask``) and the teacher's
revealed share of the solution (``training.context_schedule``), with the running accuracy an adaptive
schedule reads (saved in every checkpoint, so a resumed run continues it exactly)."""

from __future__ import annotations

from opsd_diag.core import context_schedule as schedules
from opsd_diag.engine.train_step import rescale_to_kept
from opsd_diag.errors import OpsdError


class LeverState:
    def __init__(self, spec, checker: tuple[str, str] | None, saved: dict | None = None):
        self.mask = spec.token_mask.settings()
        self.schedule = spec.context_schedule.settings(spec.max_steps)
        self.running_accuracy = float((saved or {}).get("running_accuracy", 0.0))
        # rollouts are checked only where a lever reads their outcome
        self.checker = checker if (self.mask.needs_outcomes or self.schedule.needs_outcomes) else None
        # tokens each rollout is sampled to: a position window's end where no lever reads the whole completion
        self.sample_to = (spec.max_completion_length if self.schedule.needs_outcomes
                          else self.mask.sampled_length(spec.max_completion_length))

    def check_path(self, sharded: bool, cross: bool) -> None:
        if not self.mask.keeps_all and (sharded or cross):
            where = "with FSDP" if sharded else "with a teacher of another tokenizer"
            raise OpsdError(f"training.token_mask kind {self.mask.kind} (rollouts {self.mask.rollouts}) is not "
                            f"supported {where}: train on one process or with DDP, with a teacher of the "
                            "student's tokenizer, or remove token_mask")

    def fraction(self, step: int) -> float:
        """The share of each solution the teacher sees at ``step``."""
        return schedules.revealed_fraction(self.schedule, step, self.running_accuracy)

    def after_step(self, step: int, params, means: dict) -> tuple[float, float | None]:
        """Rescale the step's gradients to its kept tokens and update the running accuracy: (the step's revealed
        share, the running accuracy after it or None when no schedule reads it)."""
        rescale_to_kept(params, means.get("kept"))
        fraction = self.fraction(step)
        if not self.schedule.needs_outcomes:
            return fraction, None
        self.running_accuracy = schedules.update_accuracy(self.schedule, self.running_accuracy, means.get("correct"))
        return fraction, self.running_accuracy

    def state(self) -> dict:
        return {"running_accuracy": self.running_accuracy}
