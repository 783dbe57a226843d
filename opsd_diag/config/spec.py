"""The typed configuration of a diagnosis and of the training run built on it: one YAML file.

One pydantic model feeds the YAML file, the CLI, the app and ``opsd-train``; every run directory stores the resolved
config that produced it. Unknown keys, bad values (NaN and inf included) and a ``training`` section that does not fit
the rest are rejected with the key named. Types are strict (``yes`` is no count, ``1.10`` no name: the error says to
quote it); seeds, temperatures, learning rate bounded. Every default is stated once, here; ``docs/config.md`` is
generated from the field descriptions below. The frozen settings the engine and the trainer run with are built from
these sections in one place (the ``settings`` methods), so no setting is re-derived elsewhere."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opsd_diag import schema
from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, templates
from opsd_diag.config.errors import format_error
from opsd_diag.config.levers import LeverFields, LeverLookahead, TeacherReveal
from opsd_diag.config.model_options import ModelOptions, TeacherOptions, check_base, check_self_teacher
from opsd_diag.config.rollouts_file import RolloutsOption
from opsd_diag.config.probe import ProbeOption
from opsd_diag.config.predictor_options import IdealOptions, LookaheadOptions
from opsd_diag.config.training_fit import training_teacher
from opsd_diag.config.yamlfile import read_mapping
from opsd_diag.config.settings import LossSettings, SamplingSettings, ScoreSettings

METHODS = ("opd", "jsd", "opsd", "opd2", "exopd", "sft", "uld")


class Strict(BaseModel):
    """Unknown keys, non-finite floats and values of another type are errors; assignments are validated too."""
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)
    _paths = field_validator(*safe.PATH_KEYS, check_fields=False)(safe.path_field)  # every path named


def _centering(v: str) -> str:
    if v != "full" and not re.fullmatch(r"topk=[1-9]\d*", v):
        raise ValueError("use 'full' or 'topk=N' with N >= 1")
    return v


def _user_error(check) -> AfterValidator:
    """A validator from a project check that raises OpsdError (its message becomes the key's error)."""
    def validate(v: str) -> str:
        try:
            check(v)
        except OpsdError as e:
            raise ValueError(str(e)) from None
        return v
    return AfterValidator(validate)


def _device(v: str) -> str:
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v):
        raise ValueError(f"unknown device {v!r}: use auto, cpu, cuda, cuda:N or mps")
    return v


Centering = Annotated[str, AfterValidator(_centering)]
Context = Annotated[str, _user_error(templates.resolve)]
Template = Annotated[str, _user_error(templates.placeholders)]
# below 1e-4 logits / τ overflow float32 (a subnormal τ gives inf and NaN probabilities)
Temperature = Annotated[float, Field(ge=1e-4, le=10.0)]
# numpy, torch and CUDA seed generators take 0 <= seed < 2**32
Seed = Annotated[int, Field(ge=0, lt=2 ** 32)]


def centering_k(centering: str) -> int | None:
    """``full`` -> None (the full vocabulary); ``topk=N`` -> N."""
    return None if centering == "full" else int(centering.split("=")[1])


class ModelSpec(Strict, ModelOptions):
    """A model: a hub id or a local directory. Offline unless ``allow_download``; more options in
    ``config.model_options``."""
    model: str = Field(description="hub id or local directory")
    revision: str | None = Field(None, description="hub revision")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="`auto`: bf16 on CUDA, float32 on CPU")
    trust_remote_code: bool = Field(False, description="load custom model code (off unless you turn it on)")
    allow_download: bool = Field(False, description="fetch a hub id that is not in the local cache")


class TeacherSpec(Strict, TeacherReveal, TeacherOptions):
    """One teacher configuration: a model (or ``self``: the student's weights) plus a context; its own
    loading and template options are in ``config.model_options``."""
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$", description="config name (letters, digits, `_-.`)")
    model: str = Field("self", description="`self` (the student's weights) or a hub id / directory")
    revision: str | None = Field(None, description="hub revision of the teacher model")
    context: Context = Field(
        "none", description="built-in `none`, `full_solution`, `answer_only`, `partial_solution`, `hint`, or "
                            "your own template with `{prompt}` and any of `{solution}`, `{answer}`, "
                            "`{partial_solution}`, `{hint}`")
    partial_fraction: float = Field(0.5, gt=0.0, le=1.0, description="share of solution lines in the partial one")
    system_prompt: str | None = Field(None, description="system prompt of this teacher view (default: the data's)")

    @model_validator(mode="after")
    def _reserved(self) -> TeacherSpec:
        if self.name in schema.RESERVED_NAMES:
            raise ValueError(f"'{self.name}' is reserved (a table column or the student's view): choose another name")
        if self.is_self:
            check_self_teacher(self)
        return self

    @property
    def is_self(self) -> bool:
        return self.model == "self"


class DataSpec(Strict):
    """A problem set: JSON Lines, CSV or Parquet, one problem per record (docs/design.md, formats)."""
    path: Annotated[str, AfterValidator(lambda v: str(Path(v).expanduser()) if v.startswith("~") else v)] = Field(
        description="JSONL, CSV or Parquet problem set (`~` is your home, as in model paths)")
    format: Literal["auto", "jsonl", "csv", "parquet"] = Field("auto", description="`auto`: from the extension")
    fields: dict[str, str] = Field(default_factory=dict, description="our name -> column, e.g. `{prompt: question}`")
    limit: int | None = Field(None, gt=0, description="first N problems")
    system_prompt: str | None = Field(None, description="system prompt of the student view")


class SamplingSpec(Strict):
    """How the student's rollouts (and each teacher view's accuracy samples) are drawn."""
    num_samples: int = Field(4, ge=1, le=1024, description="student rollouts per prompt")
    temperature: Temperature = Field(1.0, description="sampling temperature τ_sample")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling (1.0: exact on-policy samples)")
    max_completion_length: int = Field(128, ge=1, le=32768, description="new tokens per rollout")
    seed: Seed = Field(0, description="every random choice derives from it (0 <= seed < 2**32)")
    batch_size: int = Field(32, ge=1, description="rows per generate call")
    teacher_samples: int = Field(1, ge=0, le=1024, description="samples per prompt per teacher view (its accuracy)")
    backend: Literal["hf", "vllm"] = Field("hf", description="`vllm` on GPU machines with vLLM installed")
    vllm_gpu_memory_utilization: float | None = Field(
        None, gt=0.0, le=1.0, description="vllm only: share of GPU memory its engine may take (default vLLM's 0.9)")
    engine: Literal["hf", "static"] = Field("hf", description="hf: each role's reference sampler (engine.samplers);"
                                                              " static: static KV cache, CUDA-graph decode (engine.fast)")

    def settings(self, seed: int, *, num_samples: int | None = None, max_new_tokens: int | None = None,
                 batch_size: int | None = None) -> SamplingSettings:
        """This section as one sampling call's settings (``seed``: the call's own, derived seed)."""
        return SamplingSettings(num_samples=num_samples or self.num_samples, temperature=self.temperature,
                                top_p=self.top_p, max_new_tokens=max_new_tokens or self.max_completion_length,
                                seed=seed, batch_size=batch_size or self.batch_size)


class ScoringSpec(Strict):
    """How the sampled tokens are scored: temperature, centring and the signals' parameters."""
    temperature: Temperature | None = Field(None, description="scoring temperature τ_score; default: the "
                                                              "temperature the scored samples were drawn at")
    centering: Centering = Field("full", description="expectation of the centred advantages over the full "
                                                     "vocabulary, or `topk=N` (published OPD² code: N=1024)")
    jsd_beta: float = Field(0.5, ge=0.0, le=1.0, description="β of the generalised JSD (0 forward KL, 1 reverse KL)")
    exopd_lambda: float = Field(1.25, ge=0.0, le=100.0, description="ExOPD λ")
    exopd_reference: Literal["student", "base"] = Field("student", description="reference R of ExOPD")
    base_view: Literal["student", "teacher"] = Field("student", description="the base scores the completion after "
                                                     "the student's prompt (once) or after each teacher's prompt")
    top_k: int = Field(5, ge=0, le=100, description="alternatives kept per position for display")
    batch_size: int = Field(8, ge=1, description="rollouts per forward pass")
    chunk_size: int = Field(128, ge=1, description="positions per LM-head chunk (bounds memory)")
    engine: Literal["reference", "compiled"] = Field(
        "reference", description="per-chunk scoring: reference, or compiled (one function under torch.compile)")
    max_prompt_length: int | None = Field(None, ge=16, description="a longer teacher view has its privileged context "
        "shortened (never the question), and the run records it; default: 2048, at most what the models hold")
    allow_nonfinite: bool = Field(False, description="NaN/inf logits stop the run, naming the model and the position; "
                                                     "true: keep going, every column derived from them NaN")

    def settings(self, sampling_temperature: float) -> ScoreSettings:
        """This section as the scorer's settings (``sampling_temperature``: what the samples were drawn at)."""
        return ScoreSettings(temperature=scoring_temperature(self.temperature, sampling_temperature),
                             jsd_beta=self.jsd_beta, centering=centering_k(self.centering),
                             exopd_lambda=self.exopd_lambda, exopd_reference=self.exopd_reference, top_k=self.top_k,
                             chunk_size=self.chunk_size)


class AnalysisSpec(Strict):
    """The answer checker and the aggregates of summary.json."""
    checker: Literal["auto", "toy", "boxed", "gsm8k", "last_number", "exact"] = Field(
        "auto", description="answer extraction; the reference's final answer is compared (`#### N`, `\\boxed{}`)")
    entropy_edges: list[Annotated[float, Field(gt=0)]] | None = Field(
        None, description="entropy-bin edges in nats (default 0.1, 0.5, 1, 2)")
    entropy_quantiles: int | None = Field(None, ge=2, le=20, description="N quantile bins instead of edges")
    high_entropy: float = Field(2.0, gt=0, description="threshold (nats) of the high-entropy share")
    pass_k: list[Annotated[int, Field(ge=1)]] | None = Field(
        None, description="k of pass@k (default 1 and 4; a k above num_samples gives n/a)")
    bootstrap: int = Field(1000, ge=10, le=100_000, description="bootstrap replicates (over prompts) of every CI")
    truncated: Literal["incorrect", "check"] = Field(
        "incorrect", description="a rollout cut at max_completion_length or ending inside its thinking block: "
                                 "`incorrect`, or `check` its text like any other")

    @model_validator(mode="after")
    def _bins(self) -> AnalysisSpec:
        e = self.entropy_edges
        if e is not None and self.entropy_quantiles is not None:
            raise ValueError("give entropy_edges or entropy_quantiles, not both")
        if e is not None and (not e or sorted(set(e)) != e):
            raise ValueError("entropy_edges must be positive and strictly increasing")
        return self


class IdealSpec(Strict, IdealOptions):
    """The ideal-gradient predictor: targeted student continuations at chosen nodes."""
    enabled: bool = Field(True, description="run the predictor after scoring (when the section exists)")
    budget: int = Field(512, ge=1, le=10_000_000, description="student continuations in all")
    k: int = Field(3, ge=1, le=32, description="top-k candidates from the student and from each teacher config")
    m: int = Field(4, ge=1, le=256, description="continuations per candidate token")
    max_continuation_length: int | None = Field(None, ge=1, description="cap on each continuation (default: sampling's)")
    seed: Seed = Field(0, description="seed of the continuations")
    candidates: Literal["union", "per_config"] = Field(
        "union", description="a config's node maths on the union of every config's candidates, or on its own")
    calibration: Annotated[str, AfterValidator(safe.path_field), AfterValidator(lambda v: str(Path(v).absolute()))] \
        | None = Field(None, description="predictor v2's model file, e.g. `scoreboard --fit`'s; none: the shipped one")


class LookaheadSpec(Strict, LookaheadOptions, LeverLookahead):
    """A few optimiser steps of each method's loss on half the diagnosis rollouts, measured on the rest."""
    enabled: bool = Field(True, description="run the lookahead after scoring (when the section exists)")
    steps: int = Field(4, ge=1, le=64, description="optimiser steps")
    rollouts_per_step: int = Field(8, ge=1, le=4096, description="diagnosis rollouts per step (even problems)")
    learning_rate: float | None = Field(None, gt=0.0, le=1.0, description="default training.learning_rate")
    clip: float | None = Field(None, gt=0.0, description="clip sampled-token advantages; default training.clip")
    seed: Seed = Field(0, description="order of the rollouts the steps take")


class LoraSpec(Strict):
    """LoRA through peft (optional dependency); the frozen self-teacher is the adapter switched off."""
    r: int = Field(8, ge=1, description="LoRA rank")
    alpha: int = Field(16, ge=1, description="LoRA scaling alpha")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the LoRA branch")
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
                                      description="module names that get adapters")


class EvalSpec(Strict):
    """Held-out accuracy (pass@1, pass@k) and the forgetting check."""
    data: DataSpec | None = Field(None, description="held-out problems; none: no accuracy evaluation")
    num_samples: int = Field(4, ge=1, le=1024, description="samples per held-out problem")
    pass_k: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [1, 4], description="k of pass@k")
    temperature: Temperature | None = Field(None, description="default: the training sampling temperature")
    max_completion_length: int | None = Field(None, ge=1, description="default: the training one")
    regression: DataSpec | None = Field(None, description="frozen regression set: accuracy + NLL of references")
    kl_to_initial: bool = Field(True, description="KL(current || initial policy) on the held-out samples")
    batch_size: int = Field(32, ge=1, description="rows per sampling call (the rollouts' sampler)")
    seed: Seed = Field(0, description="seed of the evaluation samples (the same for every evaluation)")
    at_start: bool = Field(True, description="evaluate the initial student too (the baseline of every curve)")

    def settings(self, seed: int) -> SamplingSettings:
        """One evaluation sampling call (needs the resolved spec: temperature and length filled in)."""
        return SamplingSettings(num_samples=self.num_samples, temperature=self.temperature, top_p=1.0,
                                max_new_tokens=self.max_completion_length, seed=seed, batch_size=self.batch_size)

    @model_validator(mode="after")
    def _ks(self) -> EvalSpec:
        bad = [k for k in self.pass_k if not k <= self.num_samples]
        if bad:
            raise ValueError(f"pass_k {bad} must lie in [1, num_samples={self.num_samples}]")
        return self


class TrainingSpec(Strict, ProbeOption, LeverFields):
    """The training run of ``opsd-train``; a setting left out (None) is inherited from the diagnosis."""
    method: Literal["opd", "jsd", "opsd", "opd2", "exopd", "sft", "uld"] = Field(description="training method")
    teacher: str | None = Field(None, description="name of one `teachers` entry; default: the first that fits")
    loss: Literal["jsd", "opd"] = Field("jsd", description="opsd only: full-vocabulary JSD or the sampled-token "
                                                           "OPD reward")
    teacher_weights: Literal["frozen", "ema", "live"] = Field("frozen", description="opsd only: the self-teacher")
    ema_decay: float = Field(0.99, gt=0.0, lt=1.0, description="opsd with teacher_weights ema: the EMA decay")
    beta: float | None = Field(None, ge=0.0, le=1.0, description="JSD β; default scoring.jsd_beta")
    exopd_lambda: float | None = Field(None, ge=0.0, le=100.0, description="default scoring.exopd_lambda")
    exopd_reference: Literal["student", "base"] | None = Field(None, description="default scoring.exopd_reference")
    centering: Centering | None = Field(None, description="opd2 centring; default scoring.centering")
    clip: float | None = Field(None, gt=0.0, description="clip sampled-token advantages to [-clip, clip]")
    max_steps: int = Field(100, ge=1, description="optimizer steps")
    per_device_train_batch_size: int = Field(8, ge=1, description="prompts per micro-batch per process")
    num_generations: int = Field(1, ge=1, le=256, description="samples per prompt")
    generation_batch_size: int | None = Field(None, ge=1, description="completions per generate call (a micro-batch)")
    gradient_accumulation_steps: int = Field(1, ge=1, description="micro-batches per optimizer step")
    learning_rate: float = Field(1e-5, gt=0.0, le=1.0, description="AdamW learning rate")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field("constant", description="after the warm-up")
    warmup_steps: int = Field(0, ge=0, description="linear warm-up steps")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW beta1")
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0, description="AdamW beta2")
    adam_epsilon: float = Field(1e-8, gt=0.0, description="AdamW epsilon")
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="none: no clipping")
    temperature: Temperature | None = Field(None, description="sampling temperature; default sampling.temperature")
    scoring_temperature: Temperature | None = Field(None, description="default scoring.temperature, else `temperature`")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="default sampling.top_p")
    max_completion_length: int | None = Field(None, ge=1, le=32768, description="default sampling's")
    chunk_size: int | None = Field(None, ge=1, description="positions per LM-head chunk (from the vocabulary size)")
    data: DataSpec | None = Field(None, description="training prompts; default: the diagnosis' data")
    sft_target: Template = Field("{solution}", description="template of the reference response (sft, regression NLL)")
    eval: EvalSpec = Field(default_factory=EvalSpec)
    eval_steps: int = Field(0, ge=0, description="0: evaluate only at the start and the end")
    save_steps: int = Field(0, ge=0, description="0: save only at the end (and on a graceful stop)")
    save_total_limit: int | None = Field(2, ge=1, description="checkpoints kept (none: all)")
    seed: Seed = Field(0, description="problem order, sampling and initialisation of the run")
    mixed_precision: Literal["auto", "no", "bf16"] = Field("auto", description="`auto`: bf16 on CUDA when supported")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward: less memory")
    report_to: Literal["auto", "none"] | list[Literal["tensorboard", "wandb", "mlflow"]] = Field(
        "auto", description="`auto`: TensorBoard when installed")
    lora: LoraSpec | None = Field(None, description="train a LoRA adapter (needs peft) instead of every weight")

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

    def sampling_settings(self, seed: int) -> SamplingSettings:
        """One generation chunk (needs a resolved spec: see ``resolve_training``)."""
        return SamplingSettings(num_samples=self.num_generations, temperature=self.temperature, top_p=self.top_p,
                                max_new_tokens=self.max_completion_length, seed=seed,
                                batch_size=self.generation_batch_size)

    def loss_settings(self) -> LossSettings:
        return LossSettings(method=self.loss_method, temperature=self.scoring_temperature, beta=self.beta,
                            centering=centering_k(self.centering), exopd_lambda=self.exopd_lambda, clip=self.clip)


class DiagnosisConfig(Strict, RolloutsOption):
    student: ModelSpec
    base: ModelSpec | None = Field(None, description="the teacher's pre-reasoning checkpoint (for the delta signals)")
    teachers: list[TeacherSpec] = Field(min_length=1)
    data: DataSpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    scoring: ScoringSpec = Field(default_factory=ScoringSpec)
    analysis: AnalysisSpec = Field(default_factory=AnalysisSpec)
    device: Annotated[str, AfterValidator(_device)] = Field("auto", description="auto (CUDA when available), cpu, cuda, "
                                                                               "cuda:N or mps")
    shard_size: int = Field(8, ge=1, description="prompts per stored shard (the unit of resume and of sharding)")
    ideal: IdealSpec | None = Field(None, description="the ideal-gradient predictor; off when absent")
    lookahead: LookaheadSpec | None = Field(None, description="a few training steps per (config, method); off when absent")
    training: TrainingSpec | None = Field(None, description="the training run of `opsd-train`")

    @model_validator(mode="after")
    def _checks(self) -> DiagnosisConfig:
        names = [t.name for t in self.teachers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"teacher names must be unique; repeated: {', '.join(dup)}")
        if self.base is not None:
            check_base(self.base)
        if self.scoring.exopd_reference == "base" and self.base is None:
            raise ValueError("scoring.exopd_reference is 'base' but no base model is configured")
        bad = [k for k in self.analysis.pass_k or () if k > self.sampling.num_samples]
        if bad:
            raise ValueError(f"analysis.pass_k {bad} exceeds sampling.num_samples={self.sampling.num_samples}: "
                             "pass@k needs at least k samples per prompt")
        if self.training is not None:
            training_teacher(self)  # the training section must fit the teachers and models above
        return self

    @property
    def scoring_temperature(self) -> float:
        return scoring_temperature(self.scoring.temperature, self.sampling.temperature)

    def score_settings(self) -> ScoreSettings:
        return self.scoring.settings(self.sampling.temperature)


def scoring_temperature(explicit: float | None, sampling: float) -> float:
    """τ_score: the explicit setting, else the temperature the scored samples were drawn at."""
    return explicit if explicit is not None else sampling


def validate(model: type[Strict], data, source: str, section: str = ""):
    """``model.model_validate(data)`` with a user's mistake as one OpsdError (keys under ``section``)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise OpsdError(format_error(e, source, section)) from None


def from_dict(data: dict, source: str = "config") -> DiagnosisConfig:
    return validate(DiagnosisConfig, data, source)


def load_config(path: str | Path) -> DiagnosisConfig:
    """Read a YAML config; relative paths inside it are resolved against the current directory."""
    return from_dict(read_mapping(path, "config", "student, teachers, data, ..."), str(path))


def to_yaml(cfg: DiagnosisConfig) -> str:
    import yaml

    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)

