"""The training section's levers: where the signal is placed (``token_mask``) and what the teacher sees when
(``context_schedule``). The rules themselves are in ``core.token_mask`` and ``core.context_schedule``.

The diagnosis measures the second lever with ``lookahead.schedule_points``: per point f, a copy of each
self-teacher config that shows the solution, whose view shows only the share f of it (a teacher config's
``reveal``, cut by ``core.context_schedule.revealed_problem`` as the trainer's schedule cuts it;
``engine.schedule_points`` adds the copies and reads their results)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from opsd_diag.config.settings import MaskSettings, ScheduleSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)


class TokenMaskSpec(_Section):
    """Which generated tokens the loss keeps (per rollout); the loss is normalised by the kept tokens."""
    kind: Literal["all", "opd2_gate", "entropy", "advantage", "confident_disagreement", "position"] = Field(
        "all", description="all tokens, the OPD² gate, a student-entropy quantile range, the top share by "
                           "|advantage|, teacher-confident disagreement, or a position window")
    entropy_quantiles: list[float] = Field([0.5, 1.0], min_length=2, max_length=2,
                                           description="entropy: keep quantiles in (lo, hi] within each rollout")
    advantage_top: float = Field(0.2, gt=0.0, le=1.0, description="advantage: share of each rollout's tokens kept")
    teacher_confidence: float = Field(0.5, ge=0.0, le=1.0,
                                      description="confident_disagreement: least teacher top-1 probability")
    positions: list[int | None] = Field([0, None], min_length=2, max_length=2,
                                        description="position: completion positions [start, end) (end none: all)")
    rollouts: Literal["all", "correct", "incorrect", "surprising"] = Field(
        "all", description="keep only tokens of verified-correct or incorrect rollouts, or of each micro-batch's "
                           "most surprising rollouts (largest mean surprisal of their ids when they were sampled)")
    rollouts_share: float = Field(0.5, gt=0.0, le=1.0, description="surprising: at most this share of each "
                                  "micro-batch's sampled tokens is kept (the rollouts dropped are never run)")

    @model_validator(mode="after")
    def _ranges(self) -> TokenMaskSpec:
        lo, hi = self.entropy_quantiles
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"entropy_quantiles {self.entropy_quantiles} must satisfy 0 <= lo < hi <= 1")
        start, end = self.positions
        if start is None or start < 0 or (end is not None and end <= start):
            raise ValueError(f"positions {self.positions} must be [start, end) with 0 <= start < end (end may be none)")
        return self

    def settings(self) -> MaskSettings:
        return MaskSettings(kind=self.kind, entropy_quantiles=tuple(self.entropy_quantiles),
                            advantage_top=self.advantage_top, teacher_confidence=self.teacher_confidence,
                            positions=tuple(self.positions), rollouts=self.rollouts,
                            rollouts_share=self.rollouts_share)


# The named token masks the diagnosis looks ahead on (engine.levers) and ``opsd-train --token-mask`` takes.
CANDIDATES = {"all": {}, "entropy_top50": {"kind": "entropy", "entropy_quantiles": [0.5, 1.0]},
              "advantage_top20": {"kind": "advantage", "advantage_top": 0.2},
              "confident_disagreement": {"kind": "confident_disagreement", "teacher_confidence": 0.5},
              "correct_only": {"rollouts": "correct"}, "incorrect_only": {"rollouts": "incorrect"},
              "surprising_half": {"rollouts": "surprising", "rollouts_share": 0.5}}


def named_mask(name: str | None) -> dict | None:
    """``training.token_mask`` in full for a named candidate (every key set, so it replaces a config's mask)."""
    return None if name is None else TokenMaskSpec(**CANDIDATES[name]).model_dump()


class ContextScheduleSpec(_Section):
    """The share of the solution a teacher context reveals, per step."""
    kind: Literal["fixed", "decay", "adaptive"] = Field(
        "fixed", description="fixed share, linear decay over steps, or adaptive on the student's running accuracy")
    start: float = Field(1.0, ge=0.0, le=1.0, description="share at the first step (fixed: at every step)")
    end: float = Field(0.0, ge=0.0, le=1.0, description="decay: share from decay_steps on; adaptive: at accuracy 1")
    decay_steps: int | None = Field(None, ge=1, description="decay: steps to reach `end` (default max_steps)")
    accuracy_ema: float = Field(0.9, ge=0.0, lt=1.0, description="adaptive: weight of the past in the running "
                                                                 "accuracy")

    @model_validator(mode="after")
    def _order(self) -> ContextScheduleSpec:
        if self.kind != "fixed" and self.end > self.start:
            raise ValueError(f"end {self.end} must not exceed start {self.start}: a schedule reveals less over time")
        return self

    def settings(self, max_steps: int) -> ScheduleSettings:
        return ScheduleSettings(kind=self.kind, start=self.start, end=self.end,
                                decay_steps=self.decay_steps or max_steps, accuracy_ema=self.accuracy_ema)


class LeverFields(_Section):
    """The two lever keys of ``training`` (``config.spec.TrainingSpec`` inherits them)."""
    token_mask: TokenMaskSpec = Field(default_factory=TokenMaskSpec)
    context_schedule: ContextScheduleSpec = Field(default_factory=ContextScheduleSpec)


class LeverLookahead(_Section):
    """``lookahead.levers`` (``config.spec.LookaheadSpec`` inherits it)."""
    levers: bool = Field(False, description="also look ahead on each candidate token mask for the training's "
                                            "(config, method): kept shares and a lever recommendation (engine.levers)")
    schedule_points: list[float] = Field(
        default_factory=list, description="shares f of the solution, each strictly between 0 and 1: per point, every "
        "self-teacher config that shows the solution gets a copy `NAME.revealF` shown only that share (accuracy "
        "gap, mismatch, lookahead) and a schedule recommendation (engine.schedule_points); []: none")

    @field_validator("schedule_points")
    @classmethod
    def _points(cls, v: list[float]) -> list[float]:
        bad = [f for f in v if not 0.0 < f < 1.0]
        if bad:
            raise ValueError(f"{bad[0]} is not a share strictly between 0 and 1 (the whole solution, f = 1, is "
                             "always in the table: it is the self-teacher config itself)")
        names = [point_name("", f) for f in v]
        if len(set(names)) < len(names):
            raise ValueError(f"{v} repeats a point (points are named to 6 significant digits)")
        return v


class TeacherReveal(BaseModel):
    """A teacher config's ``reveal`` (a mixin of ``config.spec.TeacherSpec``, kept here for spec.py's size)."""
    reveal: float = Field(1.0, gt=0.0, le=1.0, description="share f of the solution this view shows: its first "
                          "⌊f·W + ½⌋ words, as `training.context_schedule` cuts it (`lookahead.schedule_points` "
                          "makes such configs); 1: the whole solution")


def point_name(name: str, f: float) -> str:
    """The config of ``name`` shown the share ``f`` of the solution (a valid config name)."""
    return f"{name}.reveal{f:g}"
