"""Load and check everything a run needs, before its directory is written.

Models go through ``opsd_diag.io.models`` (the same offline rules, errors and compatibility checks as a
diagnosis); prompts go through ``opsd_diag.io.views``. Anything a user got wrong surfaces here as an
``OpsdError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from opsd_diag.errors import OpsdError
from opsd_diag.io import models as hub
from opsd_diag.io import templates
from opsd_diag.config.settings import LossSettings
from opsd_diag.config.training import TrainConfig
from trainer.cross_step import plan_partner
from trainer.evaluate import EvalSets
from opsd_diag.config.model_options import teacher_model_spec
from opsd_diag.io.view_set import student_renderer, system_tokens, teacher_renderer
from opsd_diag.engine.train_step import Roles, frozen_copy
from trainer.roles import add_lora, load_lora
from trainer.roles import load_trainable as load_student
from trainer.rollouts import ProblemSet, build_problem_set, load_set
from opsd_diag.engine.train_step import auto_chunk_size


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


def _frozen(spec, device: torch.device):
    return hub.load_spec(spec, str(device))


def build_roles(tc: TrainConfig, device: torch.device, ckpt: Path | None, tok) -> tuple[Roles, object]:
    """The roles, and the external teacher's tokenizer (None without one: it renders the teacher's view)."""
    cfg, spec = tc.cfg, tc.spec
    lora = spec.lora is not None

    def load_trainable(model_spec, dev, source=None):  # padded LM-head rows beyond the tokenizer never score
        return hub.limit_rows(load_student(model_spec, dev, source), len(tok))

    student = load_trainable(cfg.student, device, None if (ckpt is None or lora) else str(ckpt))
    named = {"student": (cfg.student.model, tok, student)}
    ref = spec.exopd_reference if spec.method == "exopd" else None
    need_initial = not lora and (
        (spec.method == "opsd" and spec.teacher_weights == "frozen") or ref == "student"
        or (spec.eval.kl_to_initial and spec.eval.data is not None))
    initial = None
    if need_initial:
        initial = frozen_copy(student) if ckpt is None else frozen_copy(load_trainable(cfg.student, device))
    peft_model = None
    if lora:
        peft_model = load_lora(student, str(ckpt)) if ckpt is not None else add_lora(student, spec.lora)
        student = peft_model.get_base_model()  # the HF model, LoRA layers injected in place
    teacher, mode, t_tok = None, "none", None
    if tc.teacher is not None and not tc.teacher.is_self:
        t_tok, teacher = _frozen(teacher_model_spec(cfg.student, tc.teacher), device)
        named[f"teacher '{tc.teacher.name}'"] = (tc.teacher.model, t_tok, teacher)
        mode = "external"
    elif tc.teacher is not None:
        mode = spec.teacher_weights
        if mode == "ema":
            source = ckpt / "ema" if ckpt is not None else None
            teacher = frozen_copy(load_trainable(cfg.student, device, str(source)) if source else student)
    base = None
    if cfg.base is not None and (spec.method == "opd2" or ref == "base"):
        b_tok, base = _frozen(cfg.base, device)
        named["base"] = (cfg.base.model, b_tok, base)
    stops = hub.stop_token_ids(student, tok, cfg.student.prompt_format == "chat")
    cross = plan_partner(named, spec.loss_method, tok, stops)  # or today's check (one vocabulary)
    return Roles(student, peft_model, mode, teacher, base, initial, cross), t_tok


def check_inputs(tc: TrainConfig) -> tuple[list[dict], list[dict] | None, list[dict] | None]:
    """(training, held-out, regression problems), checked against the contexts and targets that render
    them, before any model loads; errors name the config key."""
    cfg, spec, ev = tc.cfg, tc.spec, tc.spec.eval
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
    cfg, spec = tc.cfg, tc.spec
    train_problems, held_out, regression = check_inputs(tc)
    ev = spec.eval
    tok = hub.load_tokenizer(cfg.student.model, cfg.student.revision, cfg.student.allow_download,
                             cfg.student.trust_remote_code)
    roles, t_tok = build_roles(tc, device, ckpt, tok)
    views = (student_renderer(cfg, tok), tc.teacher and teacher_renderer(cfg, tc.teacher, tok, t_tok))
    if spec.gradient_checkpointing:
        # non-reentrant checkpointing works under DDP and with frozen (LoRA) base weights
        enable = getattr(roles.student, "activation_checkpointing_enable", None)  # transformers >= 5.x
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            roles.student.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    stop_ids = hub.stop_token_ids(roles.student, tok, cfg.student.prompt_format == "chat")  # end of turn first
    cross = roles.cross
    n_new, key = spec.max_completion_length, "training.max_completion_length"  # prompt + completion fit the models
    room = min((n - n_new for m in (roles.student, roles.teacher, roles.base) if m is not None
                and (n := hub.positions(m))), default=None)  # caps the default length of a teacher view
    system = ("data.system_prompt" if spec.data == cfg.data else "training.data.system_prompt",  # inherited or own
              system_tokens(views[0], train_problems[0], spec.data.system_prompt))

    def question_fits(prompts):  # the student's view first: a question too long is not a teacher context's fault
        hub.check_fits(roles.student, f"the student model '{cfg.student.model}'", prompts, train_problems, n_new, key,
                       system=system)
    train = build_problem_set(cfg, spec, views, train_problems, stop_ids, system=spec.data.system_prompt,
                              teacher=tc.teacher, with_targets=spec.method == "sft",
                              base_tok=cross and cross.base_side == "teacher" and cross.teacher_tok or None, room=room,
                              check_student=question_fits)
    if roles.teacher_mode == "external":
        hub.check_fits(roles.teacher, f"teacher '{tc.teacher.name}' (model '{tc.teacher.model}')",
                       train.teacher_prompts, train.problems, n_new, key, "lower scoring.max_prompt_length")
    first = f"training problem '{train.problems[0]['id']}'"
    hub.check_finite_logits(roles.student, train.student_prompts[0], f"the student model '{cfg.student.model}'",
                            f"the prompt of {first}")
    if roles.teacher_mode == "external":
        hub.check_finite_logits(roles.teacher, train.teacher_prompts[0],
                                f"teacher '{tc.teacher.name}' (model '{tc.teacher.model}')", f"its view of {first}")
    if roles.base is not None:
        hub.check_finite_logits(roles.base, train.base_prompts[0], f"the base model '{cfg.base.model}'",
                                f"its view of {first}")
    sets = EvalSets(
        build_problem_set(cfg, spec, views, held_out, stop_ids, system=ev.data.system_prompt, room=room)
        if held_out else None,
        build_problem_set(cfg, spec, views, regression, stop_ids, system=ev.regression.system_prompt,
                          with_targets=True, room=room) if regression else None)
    ref = spec.exopd_reference if spec.method == "exopd" else None
    vocab = roles.student.get_output_embeddings().weight.shape[0]
    chunk = spec.chunk_size or auto_chunk_size(vocab)
    return Setup(tc, tok, roles, train, sets, stop_ids, tc.spec.loss_settings(), ref, chunk)
