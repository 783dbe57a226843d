"""A training run set up: ``opsd_diag.engine.setup.prepare`` (the diagnosis' own setup: models, cross plan,
views, stop ids, every check) plus what training adds: the trainable student with its LoRA adapter, the EMA
or frozen teacher, the initial-policy copy and the evaluation sets. Anything a user got wrong surfaces here
as an ``OpsdError``, before the run directory is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from opsd_diag.engine import setup as shared
from opsd_diag.engine.train_step import Roles, auto_chunk_size, frozen_copy
from opsd_diag.errors import OpsdError
from opsd_diag.io import models as hub
from opsd_diag.io import templates
from opsd_diag.config.settings import LossSettings
from opsd_diag.config.training import TrainConfig
from trainer import cross_losses
from trainer.cross_step import CrossPartner
from trainer.evaluate import EvalSets
from trainer.roles import add_lora, load_lora
from trainer.roles import load_trainable as load_student
from trainer.rollouts import ProblemSet, build_problem_set, load_set


@dataclass
class Setup:
    tc: TrainConfig
    tok: object
    roles: Roles
    train: ProblemSet
    evals: EvalSets
    stop_ids: list[int]
    loss: LossSettings
    reference: str | None  # ExOPD reference: "student" (initial), "base", or None
    chunk_size: int  # positions per LM-head chunk (training.chunk_size, or sized from the vocabulary)

    @property
    def pad_id(self) -> int:
        return self.tok.pad_token_id


def _student_loader(tc: TrainConfig, device: torch.device, ckpt: Path | None, made: dict):
    """The trainable student (``engine.setup``'s ``load_student``), with the initial-policy copy, the LoRA adapter
    and the EMA teacher made right after it (in ``made``), in the order they always were."""
    cfg, spec = tc.cfg, tc.spec
    lora = spec.lora is not None

    def load(tok):
        def load_trainable(model_spec, dev, source=None):  # padded LM-head rows beyond the tokenizer never score
            return hub.limit_rows(load_student(model_spec, dev, source), len(tok))

        student = load_trainable(cfg.student, device, None if (ckpt is None or lora) else str(ckpt))
        ref = spec.exopd_reference if spec.method == "exopd" else None
        need_initial = not lora and (
            (spec.method == "opsd" and spec.teacher_weights == "frozen") or ref == "student"
            or (spec.eval.kl_to_initial and spec.eval.data is not None))
        made["initial"] = None
        if need_initial:
            made["initial"] = frozen_copy(student) if ckpt is None else frozen_copy(load_trainable(cfg.student, device))
        made["peft"] = None
        if lora:
            made["peft"] = load_lora(student, str(ckpt)) if ckpt is not None else add_lora(student, spec.lora)
            student = made["peft"].get_base_model()  # the HF model, LoRA layers injected in place
        made["teacher"], made["mode"] = None, "none"
        if tc.teacher is not None and tc.teacher.is_self:
            made["mode"] = spec.teacher_weights
            if made["mode"] == "ema":
                source = ckpt / "ema" if ckpt is not None else None
                made["teacher"] = frozen_copy(load_trainable(cfg.student, device, str(source)) if source else student)
        return student
    return load


def _refuse(method: str):
    def refuse(role: str, model: str) -> None:
        if method not in cross_losses.METHODS:
            raise OpsdError(f"training.method '{method}' needs one vocabulary, and {role} (model '{model}') has "
                            f"another tokenizer than the student: use {', '.join(cross_losses.METHODS)}")
    return refuse


def loads_base(tc: TrainConfig) -> bool:
    """Whether the run loads the teacher's base model: OPD² always, ExOPD when its reference is the base."""
    spec = tc.spec
    return tc.cfg.base is not None and (spec.method == "opd2" or (spec.method == "exopd"
                                                                   and spec.exopd_reference == "base"))


def check_inputs(tc: TrainConfig) -> tuple[list[dict], list[dict] | None, list[dict] | None]:
    """(training, held-out, regression problems), checked against the contexts and targets that render
    them, and the models the run loads found, before any model loads; errors name the config key."""
    cfg, spec, ev = tc.cfg, tc.spec, tc.spec.eval
    hub.check_sources(hub.config_models(cfg, [tc.teacher.name] if tc.teacher is not None else [], base=loads_base(tc)))
    train_key = "data" if spec.data == cfg.data else "training.data"  # left out: inherited from data
    train = load_set(spec.data, train_key)
    held_out = load_set(ev.data, "training.eval.data") if ev.data is not None else None
    regression = load_set(ev.regression, "training.eval.regression") if ev.regression is not None else None
    t = tc.teacher
    if t is not None:
        templates.check_problems(templates.resolve(t.context), train, f"teacher '{t.name}' (context "
                                 f"{t.context[:40]!r}), the training section's teacher", spec.data.fields,
                                 t.partial_fraction)
    if spec.method == "sft":
        templates.check_problems(spec.sft_target, train, "training.sft_target", spec.data.fields)
    if regression is not None:
        templates.check_problems(spec.sft_target, regression, "training.sft_target (on training.eval.regression)",
                                 ev.regression.fields)
    if held_out is not None and not any(p.get("answer") is not None for p in held_out):
        raise OpsdError("training.eval.data has no answers, so accuracy cannot be measured: map its answer "
                        "field with fields: {answer: ...}")
    return train, held_out, regression


def prepare(tc: TrainConfig, device: torch.device, ckpt: Path | None = None) -> Setup:
    cfg, spec, ev = tc.cfg, tc.spec, tc.spec.eval
    train_problems, held_out, regression = check_inputs(tc)
    ref = spec.exopd_reference if spec.method == "exopd" else None
    made: dict = {}
    teachers = (tc.teacher,) if tc.teacher is not None else ()
    own = "data.system_prompt" if spec.data == cfg.data else "training.data.system_prompt"  # inherited or own
    roles = shared.SetupRoles(
        train_problems, teachers, loads_base(tc), str(device),
        spec.max_completion_length, "training.max_completion_length", own, spec.data.system_prompt,
        _student_loader(tc, device, ckpt, made), _refuse(spec.loss_method), every_model_fits=False,
        every_base_view=True, problem="training problem", teacher_who=lambda t: f"teacher '{t.name}' (model '{t.model}')",
        fits_who=lambda t: f"teacher '{t.name}' (model '{t.model}')", fits_fix="lower scoring.max_prompt_length",
        base_where="its view of")
    run = shared.prepare(cfg, roles)
    t = tc.teacher
    ct = run.cross.get(t.name) if t is not None else None
    cross = ct and CrossPartner(run.tok, ct.tok, tuple(run.stop_ids), ct.base_side)
    external = t is not None and not t.is_self
    roles_ = Roles(run.student, made["peft"], "external" if external else made["mode"],
                   run.teacher_models[t.name] if external else made["teacher"], run.base, made["initial"], cross)
    if spec.gradient_checkpointing:
        # non-reentrant checkpointing works under DDP and with frozen (LoRA) base weights
        enable = getattr(roles_.student, "activation_checkpointing_enable", None)  # transformers >= 5.x
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            roles_.student.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    families = {t.name: ct.tok if ct.base_side == "teacher" else None} if ct is not None else {}
    train = build_problem_set(cfg, spec, run.renderers, train_problems, run.stop_ids, teacher=t,
                              with_targets=spec.method == "sft", rendered=(run.views, run.base_prompts))

    def eval_set(problems, system, **kw):
        return build_problem_set(cfg, spec, run.renderers, problems, run.stop_ids, system=system, room=run.room,
                                 families=families, **kw) if problems else None
    sets = EvalSets(eval_set(held_out, ev.data and ev.data.system_prompt),
                    eval_set(regression, ev.regression and ev.regression.system_prompt, with_targets=True))
    vocab = roles_.student.get_output_embeddings().weight.shape[0]
    chunk = spec.chunk_size or auto_chunk_size(vocab)
    return Setup(tc, run.tok, roles_, train, sets, run.stop_ids, tc.spec.loss_settings(), ref, chunk)
