"""The training run's config: a diagnosis config whose ``training`` section is resolved for this machine.

The section itself is typed and cross-checked in ``opsd_diag.config.spec`` (so ``opsd-diag run`` validates
it too); here every setting it leaves out is inherited from the diagnosis sections, so a diagnosed
configuration is trained with exactly the values it was diagnosed with, and the packages it asks for
(peft, trackers) are checked. The run directory stores the resolved config.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from opsd_diag.core.context_schedule import SOLUTION_FIELDS
from opsd_diag.errors import OpsdError
from opsd_diag.io import templates
from opsd_diag.config.spec import (
    METHODS,
    DiagnosisConfig,
    TeacherSpec,
    TrainingSpec,
    load_config,
    scoring_temperature,
    to_yaml,
    training_teacher,
    validate,
)


@dataclass(frozen=True)
class TrainConfig:
    """A diagnosis config whose training section is resolved: every inherited value filled in."""
    cfg: DiagnosisConfig
    spec: TrainingSpec
    teacher: TeacherSpec | None  # None for sft

    def to_yaml(self) -> str:
        return to_yaml(self.cfg)


def resolve_training(cfg: DiagnosisConfig, source: str = "config") -> TrainConfig:
    """Fill the training settings left out from the diagnosis sections, so a diagnosed configuration
    is trained with exactly the values it was diagnosed with."""
    if cfg.training is None:
        raise OpsdError(f"{source} has no 'training' section: add one with at least 'method' ({', '.join(METHODS)})")
    spec = cfg.training
    s, d = cfg.scoring, cfg.sampling
    inherited = {"beta": s.jsd_beta, "exopd_lambda": s.exopd_lambda, "exopd_reference": s.exopd_reference,
                 "centering": s.centering, "temperature": d.temperature, "top_p": d.top_p,
                 "max_completion_length": d.max_completion_length, "data": cfg.data,
                 "generation_batch_size": spec.rows_per_micro_batch}
    spec = spec.model_copy(update={k: v for k, v in inherited.items() if getattr(spec, k) is None})
    spec = spec.model_copy(update={"scoring_temperature": scoring_temperature(
        spec.scoring_temperature if spec.scoring_temperature is not None else s.temperature, spec.temperature)})
    ev = spec.eval
    spec.eval = ev.model_copy(update={"temperature": ev.temperature or spec.temperature,
                                      "max_completion_length": ev.max_completion_length or spec.max_completion_length})
    check_levers(cfg, training_teacher(cfg), source)
    return TrainConfig(cfg.model_copy(update={"training": spec}), spec, training_teacher(cfg))


def check_levers(cfg, teacher, source: str) -> None:
    """The levers fit the rest of the config (one OpsdError naming the key and the fix)."""
    spec = cfg.training
    mask, schedule = spec.token_mask.settings(), spec.context_schedule.settings(spec.max_steps)
    changed = [k for k, off in (("token_mask", mask.keeps_all), ("context_schedule", schedule.is_full)) if not off]
    if spec.method == "sft" and changed:
        raise OpsdError(f"{source}: training.{changed[0]} does not apply to method sft (it has no teacher): remove it")
    if mask.needs_base and cfg.base is None:
        raise OpsdError(f"{source}: training.token_mask kind opd2_gate needs a base model: add `base` or pick "
                        "another kind")
    if not schedule.is_full:
        used = templates.placeholders(templates.resolve(teacher.context)) if teacher.context else set()
        if not used & set(SOLUTION_FIELDS):
            raise OpsdError(f"{source}: training.context_schedule: teacher '{teacher.name}' sees no solution "
                            f"({', '.join('{' + f + '}' for f in SOLUTION_FIELDS)}), so a schedule would change "
                            "nothing: remove it or train from a teacher whose context shows the solution")


def check_environment(spec: TrainingSpec, source: str) -> None:
    """The optional packages the section asks for are installed (config validity is not enough)."""
    if spec.lora is not None and importlib.util.find_spec("peft") is None:
        raise OpsdError(f"{source}: training.lora needs the peft package, which is not installed: "
                        "pip install 'opsd-diag[peft]', or remove training.lora")
    if spec.lora is not None and spec.teacher_weights == "ema" and spec.method == "opsd":
        raise OpsdError(f"{source}: training.teacher_weights 'ema' is not supported with LoRA: use frozen "
                        "(the adapter switched off) or live")
    if isinstance(spec.report_to, list):
        missing = [t for t in spec.report_to if importlib.util.find_spec(t) is None]
        if missing:
            raise OpsdError(f"{source}: training.report_to names {missing} but that package is not installed: "
                            "install it or use report_to: auto")


def with_training(cfg: DiagnosisConfig, changes: dict, source: str) -> DiagnosisConfig:
    """``cfg`` with its training section updated by ``changes`` (nested keys merged, None values ignored),
    validated again: the command-line options of ``opsd-train``."""
    def merge(a: dict, b: dict) -> dict:
        out = dict(a)
        for k, v in b.items():
            if v is not None:
                out[k] = merge(out.get(k) or {}, v) if isinstance(v, dict) else v
        return out

    base = cfg.model_dump(mode="json", exclude_none=False)
    training = merge(base.get("training") or {}, changes)
    held_out = (training.get("eval") or {}).get("data") or {}
    if held_out and not held_out.get("path"):
        raise OpsdError(f"{source}: training.eval.data.limit is set but no held-out file is: set "
                        "training.eval.data.path (opsd-train --eval-data FILE)")
    return validate(DiagnosisConfig, {**base, "training": training}, source)


def load(path: str | Path, **changes) -> TrainConfig:
    """Read a diagnosis YAML with a training section, ``changes`` (command-line options) applied to it;
    every user mistake is one OpsdError."""
    cfg = load_config(path)
    if cfg.training is not None and any(v is not None for v in changes.values()):
        cfg = with_training(cfg, changes, f"{path} with the command-line options")
    tc = resolve_training(cfg, str(path))
    check_environment(tc.spec, str(path))
    return tc


def trackers(spec: TrainingSpec) -> list[str]:
    """accelerate tracker names: ``auto`` is TensorBoard when installed, else none."""
    if spec.report_to == "none":
        return []
    if spec.report_to == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else []
    return list(spec.report_to)
