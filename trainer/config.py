"""The ``training`` section of a diagnosis config, typed: one YAML file drives ``opsd-diag run`` and
``opsd-train``.

Settings the diagnosis already has (sampling and scoring temperatures, JSD beta, ExOPD lambda,
centring, completion length, data) are inherited when the training section leaves them out, so a
diagnosed configuration is trained with exactly the values it was diagnosed with. ``resolve`` fills
them in; the run directory stores the resolved config.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opsd_diag.io import templates
from opsd_diag.io.config import DataSpec, DiagnosisConfig, TeacherSpec, load_config, to_yaml
from opsd_diag.errors import OpsdError

METHODS = ("opd", "jsd", "opsd", "opd2", "exopd", "sft")
TRACKERS = ("tensorboard", "wandb", "mlflow")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSpec(_Strict):
    """LoRA through peft (optional dependency); the frozen self-teacher is the adapter switched off."""
    r: int = Field(8, ge=1)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


class EvalSpec(_Strict):
    """Held-out accuracy (pass@1, pass@k) and the forgetting check."""
    data: DataSpec | None = None  # held-out problems; None: no accuracy evaluation
    num_samples: int = Field(4, ge=1, le=1024)
    pass_k: list[int] = Field(default_factory=lambda: [1, 4])
    temperature: float | None = Field(None, gt=0.0, le=10.0)  # None: the training sampling temperature
    max_completion_length: int | None = Field(None, ge=1)  # None: the training one
    regression: DataSpec | None = None  # frozen regression set: accuracy + NLL of reference responses
    kl_to_initial: bool = True  # KL(current policy || initial policy) on the held-out samples
    batch_size: int = Field(32, ge=1)  # rows per generate call
    seed: int = 0
    at_start: bool = True  # evaluate the initial student too (the baseline of every curve)

    @model_validator(mode="after")
    def _ks(self) -> EvalSpec:
        bad = [k for k in self.pass_k if not 1 <= k <= self.num_samples]
        if bad:
            raise ValueError(f"pass_k {bad} must lie in [1, num_samples={self.num_samples}]")
        return self


class TrainingSpec(_Strict):
    """Every training setting; ``None`` means "inherit from the diagnosis sections" (see resolve)."""
    method: Literal["opd", "jsd", "opsd", "opd2", "exopd", "sft"]
    teacher: str | None = None  # name of one entry of ``teachers``; None: the first that fits the method
    loss: Literal["jsd", "opd"] = "jsd"  # opsd only: full-vocabulary JSD or the sampled-token OPD reward
    teacher_weights: Literal["frozen", "ema", "live"] = "frozen"  # opsd only
    ema_decay: float = Field(0.99, gt=0.0, lt=1.0)
    beta: float | None = Field(None, ge=0.0, le=1.0)  # JSD beta; None: scoring.jsd_beta
    exopd_lambda: float | None = None  # None: scoring.exopd_lambda
    exopd_reference: Literal["student", "base"] | None = None  # None: scoring.exopd_reference
    centering: str | None = None  # opd2 centring, "full" or "topk=N"; None: scoring.centering
    clip: float | None = Field(None, gt=0.0)  # clip sampled-token advantages to [-clip, clip]

    max_steps: int = Field(100, ge=1)
    per_device_train_batch_size: int = Field(8, ge=1)  # prompts per micro-batch per process
    num_generations: int = Field(1, ge=1, le=256)  # samples per prompt
    generation_batch_size: int | None = Field(None, ge=1)  # completions per generate call; None: a micro-batch
    gradient_accumulation_steps: int = Field(1, ge=1)
    learning_rate: float = Field(1e-5, gt=0.0)
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.0, ge=0.0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    adam_epsilon: float = Field(1e-8, gt=0.0)
    max_grad_norm: float | None = Field(1.0, gt=0.0)  # None: no clipping

    temperature: float | None = Field(None, gt=0.0, le=10.0)  # sampling; None: sampling.temperature
    scoring_temperature: float | None = Field(None, gt=0.0, le=10.0)  # None: the diagnosis' scoring one
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_completion_length: int | None = Field(None, ge=1, le=32768)
    chunk_size: int | None = Field(None, ge=1)  # positions per LM-head chunk; None: from the vocabulary size

    data: DataSpec | None = None  # training prompts; None: the diagnosis' data
    sft_target: str = "{solution}"  # template of the reference response (sft, regression NLL)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    eval_steps: int = Field(0, ge=0)  # 0: evaluate only at the start and the end
    save_steps: int = Field(0, ge=0)  # 0: save only at the end (and on a graceful stop)
    save_total_limit: int | None = Field(2, ge=1)
    seed: int = 0
    mixed_precision: Literal["auto", "no", "bf16"] = "auto"  # auto: bf16 on CUDA with bf16 support
    gradient_checkpointing: bool = False  # recompute decoder activations in backward: less memory, more time
    report_to: Literal["auto", "none"] | list[Literal["tensorboard", "wandb", "mlflow"]] = "auto"
    lora: LoraSpec | None = None

    @field_validator("centering")
    @classmethod
    def _centering(cls, v: str | None) -> str | None:
        if v is not None and v != "full" and not re.fullmatch(r"topk=[1-9]\d*", v):
            raise ValueError("use 'full' or 'topk=N' with N >= 1")
        return v

    @field_validator("sft_target")
    @classmethod
    def _target(cls, v: str) -> str:
        try:
            templates.placeholders(v)
        except OpsdError as e:
            raise ValueError(str(e)) from None
        return v

    @property
    def centering_k(self) -> int | None:
        return None if self.centering in (None, "full") else int(self.centering.split("=")[1])

    @property
    def loss_method(self) -> str:
        """The per-token loss that runs: opsd trains with its ``loss``, the others with their own."""
        return self.loss if self.method == "opsd" else self.method

    @property
    def rows_per_micro_batch(self) -> int:
        return self.per_device_train_batch_size * self.num_generations

    @model_validator(mode="after")
    def _generation_batch(self) -> TrainingSpec:
        g = self.generation_batch_size
        if g is not None and (g % self.num_generations or self.rows_per_micro_batch % g):
            raise ValueError(f"generation_batch_size {g} must be a multiple of num_generations "
                             f"({self.num_generations}) and divide the completions of a micro-batch "
                             f"({self.rows_per_micro_batch} = per_device_train_batch_size x num_generations)")
        return self


@dataclass(frozen=True)
class TrainConfig:
    """The resolved pair: the diagnosis config (training section resolved) and its typed view."""
    cfg: DiagnosisConfig
    spec: TrainingSpec
    teacher: TeacherSpec | None  # None for sft

    def to_yaml(self) -> str:
        return to_yaml(self.cfg)


def _format(e: ValidationError, source: str) -> str:
    err = e.errors()[0]
    key = ".".join(["training", *(str(p) for p in err["loc"])])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check its spelling against the training reference in README.md)"
    elif err["type"] == "literal_error" and err["loc"] == ("method",):
        msg = f"unknown method {err['input']!r}: use one of {', '.join(METHODS)}"
    more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
    return f"{source}: {key}: {msg}{more}"


def _pick_teacher(cfg: DiagnosisConfig, spec: TrainingSpec, source: str) -> TeacherSpec | None:
    if spec.method == "sft":
        return None
    wants_self = spec.method == "opsd"
    if spec.teacher is not None:
        found = [t for t in cfg.teachers if t.name == spec.teacher]
        if not found:
            names = ", ".join(t.name for t in cfg.teachers)
            raise OpsdError(f"{source}: training.teacher: '{spec.teacher}' is not a configured teacher; "
                            f"use one of: {names}")
        teacher = found[0]
    else:
        fits = [t for t in cfg.teachers if t.is_self == wants_self]
        if not fits:
            kind = "a self-teacher (model: self with a context)" if wants_self else "a teacher model"
            raise OpsdError(f"{source}: training.method '{spec.method}' needs {kind} in teachers")
        teacher = fits[0]
    if wants_self and not teacher.is_self:
        raise OpsdError(f"{source}: training.method 'opsd' trains against the student's own weights, but "
                        f"teacher '{teacher.name}' is the model {teacher.model}: use method opd, or a teacher "
                        "with model: self")
    if not wants_self and teacher.is_self:
        raise OpsdError(f"{source}: teacher '{teacher.name}' is the student itself: use method opsd for "
                        "self-distillation")
    if teacher.is_self and teacher.context == "none":
        raise OpsdError(f"{source}: teacher '{teacher.name}' is the student with no context, so every signal "
                        "is zero: give it a privileged context such as full_solution")
    return teacher


def resolve(cfg: DiagnosisConfig, source: str = "config") -> TrainConfig:
    """Validate the training section against the rest of the config and fill inherited values."""
    if cfg.training is None:
        raise OpsdError(f"{source} has no 'training' section: add one with at least 'method' "
                        f"({', '.join(METHODS)})")
    try:
        spec = TrainingSpec.model_validate(cfg.training)
    except ValidationError as e:
        raise OpsdError(_format(e, source)) from None
    teacher = _pick_teacher(cfg, spec, source)
    fill = {
        "beta": cfg.scoring.jsd_beta, "exopd_lambda": cfg.scoring.exopd_lambda,
        "exopd_reference": cfg.scoring.exopd_reference, "centering": cfg.scoring.centering,
        "temperature": cfg.sampling.temperature, "top_p": cfg.sampling.top_p,
        "max_completion_length": cfg.sampling.max_completion_length, "data": cfg.data,
    }
    fill["generation_batch_size"] = spec.rows_per_micro_batch
    spec = spec.model_copy(update={k: v for k, v in fill.items() if getattr(spec, k) is None})
    if spec.scoring_temperature is None:
        # the diagnosis default: score at the sampling temperature (SIGNALS.md, "Temperature")
        spec = spec.model_copy(update={"scoring_temperature": cfg.scoring.temperature or spec.temperature})
    ev = spec.eval
    spec.eval = ev.model_copy(update={"temperature": ev.temperature or spec.temperature,
                                      "max_completion_length": ev.max_completion_length
                                      or spec.max_completion_length})
    if spec.method == "opd2" and cfg.base is None:
        raise OpsdError(f"{source}: training.method 'opd2' needs a base model (the teacher before its reasoning "
                        "training): add a 'base: {model: PATH}' section")
    if spec.method == "exopd" and spec.exopd_reference == "base" and cfg.base is None:
        raise OpsdError(f"{source}: training.exopd_reference is 'base' but no base model is configured: add a "
                        "'base' section or use exopd_reference: student")
    if spec.lora is not None and importlib.util.find_spec("peft") is None:
        raise OpsdError(f"{source}: training.lora needs the peft package, which is not installed: "
                        "pip install 'opsd-diag[peft]', or remove training.lora")
    if spec.lora is not None and spec.teacher_weights == "ema" and spec.method == "opsd":
        raise OpsdError(f"{source}: training.teacher_weights 'ema' is not supported with LoRA: use frozen "
                        "(the adapter switched off) or live")
    trackers = spec.report_to
    if isinstance(trackers, list):
        missing = [t for t in trackers if importlib.util.find_spec(t) is None]
        if missing:
            raise OpsdError(f"{source}: training.report_to names {missing} but that package is not installed: "
                            "install it or use report_to: auto")
    resolved = cfg.model_copy(update={"training": spec.model_dump(mode="json")})
    return TrainConfig(resolved, spec, teacher)


def load(path: str | Path) -> TrainConfig:
    """Read a diagnosis YAML with a training section; every user mistake is one OpsdError."""
    return resolve(load_config(path), str(path))


def trackers(spec: TrainingSpec) -> list[str]:
    """accelerate tracker names: ``auto`` is TensorBoard when installed, else none."""
    if spec.report_to == "none":
        return []
    if spec.report_to == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else []
    return list(spec.report_to)
