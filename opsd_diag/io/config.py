"""Typed configuration of one diagnosis (and, later, of the training run built on it).

One pydantic object feeds the YAML file, the CLI and the app; every run directory stores the
resolved config that produced it. Unknown keys and bad values are rejected with the key named.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opsd_diag.io import templates
from opsd_diag.errors import OpsdError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelSpec(_Strict):
    """A model: a hub id or a local directory. Offline unless ``allow_download``."""
    model: str
    revision: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False
    allow_download: bool = False


class TeacherSpec(_Strict):
    """One teacher configuration: a model (or ``self``: the student's weights) plus a context."""
    name: str
    model: str = "self"
    revision: str | None = None
    context: str = "none"
    partial_fraction: float = Field(0.5, gt=0.0, le=1.0)
    system_prompt: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", v):
            raise ValueError("use letters, digits, '_', '-' or '.' only")
        return v

    @field_validator("context")
    @classmethod
    def _context(cls, v: str) -> str:
        try:
            templates.resolve(v)
        except OpsdError as e:
            raise ValueError(str(e)) from None
        return v

    @property
    def is_self(self) -> bool:
        return self.model == "self"


class DataSpec(_Strict):
    path: str
    format: Literal["auto", "jsonl", "csv", "parquet"] = "auto"
    fields: dict[str, str] = Field(default_factory=dict)  # our name -> name in the file
    limit: int | None = Field(None, gt=0)
    system_prompt: str | None = None


class SamplingSpec(_Strict):
    num_samples: int = Field(4, ge=1, le=1024)
    temperature: float = Field(1.0, gt=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_completion_length: int = Field(128, ge=1, le=32768)
    seed: int = 0
    batch_size: int = Field(32, ge=1)
    teacher_samples: int = Field(1, ge=0, le=1024)  # samples per prompt from each teacher view (accuracy)
    backend: Literal["hf", "vllm"] = "hf"


class ScoringSpec(_Strict):
    temperature: float | None = Field(None, gt=0.0, le=10.0)  # None: same as sampling.temperature
    centering: str = "full"  # "full" or "topk=N"
    jsd_beta: float = Field(0.5, ge=0.0, le=1.0)
    exopd_lambda: float = 1.25
    exopd_reference: Literal["student", "base"] = "student"
    base_view: Literal["student", "teacher"] = "student"
    top_k: int = Field(5, ge=0, le=100)
    batch_size: int = Field(8, ge=1)
    chunk_size: int = Field(128, ge=1)  # 128 keeps vocab-152k scoring memory small (benchmarks/)
    max_prompt_length: int = Field(2048, ge=16)

    @field_validator("centering")
    @classmethod
    def _centering(cls, v: str) -> str:
        if v != "full" and not re.fullmatch(r"topk=[1-9]\d*", v):
            raise ValueError("use 'full' or 'topk=N' with N >= 1")
        return v

    @property
    def centering_k(self) -> int | None:
        return None if self.centering == "full" else int(self.centering.split("=")[1])


class AnalysisSpec(_Strict):
    checker: Literal["auto", "toy", "boxed", "last_number", "exact"] = "auto"
    entropy_edges: list[float] = Field(default_factory=lambda: [0.1, 0.5, 1.0, 2.0])
    entropy_quantiles: int | None = Field(None, ge=2, le=20)
    high_entropy: float = Field(2.0, gt=0)
    pass_k: list[int] = Field(default_factory=lambda: [1, 4])
    bootstrap: int = Field(1000, ge=10)

    @field_validator("entropy_edges")
    @classmethod
    def _edges(cls, v: list[float]) -> list[float]:
        if sorted(v) != v or len(set(v)) != len(v) or any(e <= 0 for e in v):
            raise ValueError("entropy edges must be positive and strictly increasing")
        return v


class IdealSpec(_Strict):
    """The ideal-gradient predictor (SIGNALS.md): targeted student continuations at chosen nodes."""
    enabled: bool = True
    budget: int = Field(512, ge=1)  # student continuations per diagnosis, all nodes together
    k: int = Field(3, ge=1, le=32)  # top-k candidates from the student and from each teacher config
    m: int = Field(4, ge=1, le=256)  # continuations per candidate token
    max_continuation_length: int | None = Field(None, ge=1)  # None: sampling.max_completion_length
    seed: int = 0


class DiagnosisConfig(_Strict):
    student: ModelSpec
    base: ModelSpec | None = None
    teachers: list[TeacherSpec] = Field(min_length=1)
    data: DataSpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)
    device: str = "auto"  # auto: CUDA when available, else CPU
    shard_size: int = Field(8, ge=1)  # prompts per stored shard (the unit of resume)
    ideal: IdealSpec | None = None  # the ideal-gradient predictor; off when absent
    training: dict[str, Any] | None = None  # the trainer's section

    @model_validator(mode="after")
    def _checks(self) -> DiagnosisConfig:
        names = [t.name for t in self.teachers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"teacher names must be unique; repeated: {', '.join(sorted(dup))}")
        if self.scoring.exopd_reference == "base" and self.base is None:
            raise ValueError("scoring.exopd_reference is 'base' but no base model is configured")
        return self

    @property
    def scoring_temperature(self) -> float:
        return self.scoring.temperature or self.sampling.temperature


def format_error(e: ValidationError, source: str) -> str:
    err = e.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check its spelling against the config reference in README.md)"
    more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
    return f"{source}: {key}: {msg}{more}"


def from_dict(data: dict, source: str = "config") -> DiagnosisConfig:
    try:
        return DiagnosisConfig.model_validate(data)
    except ValidationError as e:
        raise OpsdError(format_error(e, source)) from None


def load_config(path: str | Path) -> DiagnosisConfig:
    """Read a YAML config; relative paths inside it are resolved against the current directory."""
    path = Path(path)
    if not path.is_file():
        raise OpsdError(f"config file {path} not found: pass the path of a YAML config, e.g. "
                        "sample_data/configs/quickstart.yaml")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise OpsdError(f"{path} is not valid YAML ({str(e).splitlines()[0]}): fix the file") from None
    if not isinstance(data, dict):
        raise OpsdError(f"{path} must contain a YAML mapping with keys student, teachers, data, ...")
    return from_dict(data, str(path))


def to_yaml(cfg: DiagnosisConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
