"""One setup for a diagnosis and a training run: problems -> models by role -> cross plan -> views -> checks.

``prepare(cfg, roles)`` loads the student, the base and every teacher model a run needs through
``io.models``, plans the teachers of another tokenizer (``plan_cross``), renders every view with the
model's own renderer (``io.views``), the base's prompts included, computes the student's stop ids, and checks
that every prompt fits its models and that their logits are finite: everything a user can get wrong surfaces
here, before a run directory is written. ``engine.diagnose`` calls it with its roles (``diagnose.for_diagnosis``); the trainer
(``trainer.setup``) with its own roles, and adds only what training adds (LoRA, the EMA or frozen teacher,
the initial-policy copy, evaluation sets, which it renders through ``render``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from opsd_diag.config.model_options import teacher_model_spec
from opsd_diag.engine.cross_scoring import CrossTeacher
from opsd_diag.errors import OpsdError
from opsd_diag.io.models import (check_compatible, check_finite_logits, check_fits, has_chat_template, load_spec,
                                 load_tokenizer, positions, stop_token_ids, vocab_fingerprint)
from opsd_diag.io.views import (ViewRenderer, Views, base_renderer, build_views, student_renderer, system_tokens,
                                teacher_renderer)


@dataclass(frozen=True)
class SetupRoles:
    """What one run loads and renders, and how its checks name things (``engine.diagnose.for_diagnosis``, ``trainer.setup``)."""
    problems: list[dict]  # checked against the contexts that render them
    teachers: tuple  # the teacher configs whose views are rendered (a non-self one loads its model)
    base: bool  # load cfg.base
    device: str
    n_new: int  # completion tokens every prompt leaves room for, and its setting
    key: str
    system_key: str  # the system prompt's setting, and the prompt itself
    system: str | None
    load_student: Callable | None = None  # tok -> the student model (the trainer's trainable copy); None: load_spec
    refuse_cross: Callable | None = None  # (role, model name): raises what a teacher of another tokenizer cannot do
    every_model_fits: bool = True  # the question fits every model of the student's family (else the student)
    check_finite: bool = True
    every_base_view: bool = False  # the base's prompts next to every teacher (else only a cross teacher's)
    problem: str = "problem"  # how errors name a problem, and a teacher config
    teacher_who: Callable = lambda t: f"teacher config '{t.name}' (model '{t.model}')"
    fits_who: Callable = lambda t: f"teacher config '{t.name}'"
    fits_fix: str = "lower scoring.max_prompt_length (its context is then shortened)"
    base_where: str = "the prompt of"


@dataclass
class Loaded:
    """What a run is set up with; ``teacher_models``: config -> model (a self-teacher's is the student)."""
    cfg: object
    problems: list[dict]
    tok: object
    student: torch.nn.Module
    base: torch.nn.Module | None
    teacher_models: dict[str, torch.nn.Module]
    stop_ids: list[int]
    student_prompts: list[list[int]]
    teacher_prompts: dict[str, list[list[int]]]
    truncated: dict[str, list[bool]]
    cross: dict[str, CrossTeacher] = field(default_factory=dict)  # configs with another tokenizer
    named: dict = field(default_factory=dict)  # role -> (model name, tokenizer, model)
    teacher_toks: dict = field(default_factory=dict)  # external teacher config -> its tokenizer
    renderers: tuple = (None, {})  # (the student's ViewRenderer, config -> the teacher's)
    base_prompts: dict[str, list[list[int]]] = field(default_factory=dict)  # config -> the base's prompts there
    room: int | None = None  # the fewest positions a model has for a prompt beside the completion
    views: Views | None = None


def _load_models(cfg, roles: SetupRoles):
    """(student tokenizer, role -> (name, tokenizer, model), config -> model, config -> teacher tokenizer)."""
    if roles.load_student is None:
        tok, student = load_spec(cfg.student, roles.device)
    else:
        s = cfg.student
        tok = load_tokenizer(s.model, s.revision, s.allow_download, s.trust_remote_code)
        student = roles.load_student(tok)
    named = {"student": (cfg.student.model, tok, student)}
    if roles.base:
        b_tok, b = load_spec(cfg.base, roles.device)
        named["base"] = (cfg.base.model, b_tok, b)
    models, toks = {}, {}
    for t in roles.teachers:
        if t.is_self:
            models[t.name] = student
            continue
        toks[t.name], models[t.name] = load_spec(teacher_model_spec(cfg.student, t), roles.device)
        named[f"teacher '{t.name}'"] = (t.model, toks[t.name], models[t.name])
    return tok, named, models, toks


def prepare(cfg, roles: SetupRoles) -> Loaded:
    """Load, plan, render and check everything ``roles`` names; no file is written."""
    problems = roles.problems
    tok, named, models, toks = _load_models(cfg, roles)
    student, base = named["student"][2], named.get("base", (None, None, None))[2]
    crossed = plan_cross(roles.teachers, named, toks, roles.refuse_cross)  # one vocabulary checked, or planned
    s_render = student_renderer(cfg, tok)
    renders = {t.name: teacher_renderer(cfg, t, tok, toks.get(t.name)) for t in roles.teachers}
    n_new, key = roles.n_new, roles.key
    other = {f"teacher '{n}'" for n in crossed} | ({"base"} if any(c.base_side == "teacher" for c in crossed.values())
                                                   else set())  # models of another family: their own prompts
    system = (roles.system_key, system_tokens(s_render, problems[0], roles.system))

    def question_fits(student_prompts):  # the question itself must fit every model, context aside
        for role, (name, _, model) in named.items():
            if role == "student" or (roles.every_model_fits and role not in other):
                check_fits(model, f"the {role} model '{name}'" if role in ("student", "base") else
                           f"{role} (model '{name}')", student_prompts, problems, n_new, key, system=system)
    room = min((n - n_new for _, _, m in named.values() if (n := positions(m))), default=None)  # caps the default
    families = {n: c.tok if c.base_side == "teacher" else None for n, c in crossed.items()}
    views, base_prompts = render(cfg, problems, (s_render, renders), roles.system, roles.teachers, room,
                                 families if cfg.base is not None else None, question_fits, every_base_view=roles.every_base_view)
    for t in roles.teachers:
        if roles.every_model_fits or not t.is_self:
            check_fits(models[t.name], roles.fits_who(t), views.teachers[t.name], problems, n_new, key, roles.fits_fix)
    for name, c in crossed.items():  # the base next to a teacher with another tokenizer reads its own family's tokens
        c.base_prompts = base_prompts.get(name)
        if c.base_side == "teacher" and roles.every_model_fits:
            check_fits(base, f"the base model '{cfg.base.model}'", c.base_prompts, problems, n_new, key)
    if roles.check_finite:  # broken weights fail here, before the run directory exists
        first = f"{roles.problem} '{problems[0]['id']}'"
        check_finite_logits(student, views.student[0], f"the student model '{cfg.student.model}'",
                            f"the prompt of {first}")
        if base is not None:  # a base of a cross teacher's family reads that family's ids
            own = next((p[0] for n, p in base_prompts.items()
                        if roles.every_base_view or crossed[n].base_side == "teacher"), views.student[0])
            check_finite_logits(base, own, f"the base model '{cfg.base.model}'", f"{roles.base_where} {first}")
        for t in roles.teachers:
            if not t.is_self:
                check_finite_logits(models[t.name], views.teachers[t.name][0], roles.teacher_who(t),
                                    f"its view of {first}")
    stops = stop_token_ids(student, tok, cfg.student.prompt_format == "chat")  # end of turn first
    for name, c in crossed.items():  # a teacher's own samples end on its own stop ids (its end of turn first)
        c.stop_ids = stop_token_ids(models[name], c.tok, has_chat_template(c.tok))
    return Loaded(cfg, problems, tok, student, base, models, stops, views.student, views.teachers, views.truncated,
                  crossed, named, toks, (s_render, renders), base_prompts, room, views)


def plan_cross(teachers, named: dict, teacher_toks: dict[str, object], refuse=None) -> dict[str, CrossTeacher]:
    """Check every model against the tokenizer(s) it must share; return the cross-tokenizer configs
    (their ``base_prompts`` and ``stop_ids`` are set by ``prepare`` once the views are rendered). The one planner
    of a diagnosis and of a training run (one teacher); docs/signals.md, teachers of another tokenizer.

    ``named`` is ``prepare``'s role -> (name, tokenizer, model) map (student first, then base and
    teachers); ``teacher_toks`` maps every non-self teacher config to its tokenizer; ``refuse(role, model)``
    raises what the caller cannot do with a teacher of another tokenizer (a training method's one line).
    """
    student_name, student_tok, _ = named["student"]
    ref = vocab_fingerprint(student_tok)
    cross = [t for t in teachers if not t.is_self and vocab_fingerprint(teacher_toks[t.name]) != ref]
    if not cross:
        check_compatible(named)  # today's check: every model shares the student's tokenizer
        return {}
    base = named.get("base")
    base_fp = None if base is None else vocab_fingerprint(base[1])
    same = {role: v for role, v in named.items()
            if not (role.startswith("teacher '") and role[9:-1] in {t.name for t in cross})
            and not (role == "base" and base_fp != ref)}
    check_compatible(same)  # everything that shares the student's tokenizer
    if base is not None and base_fp != ref and len(cross) < len(teachers):
        raise OpsdError(f"the base model '{base[0]}' has another tokenizer than the student '{student_name}' while some "
                        "teacher configs share the student's: give each family its own diagnosis")
    out = {}
    for t in cross:
        tok = teacher_toks[t.name]
        role = f"teacher '{t.name}'"
        if refuse is not None:
            refuse(role, t.model)
        if not getattr(tok, "is_fast", False):
            raise OpsdError(f"{role} (model '{t.model}') has another tokenizer than the student and it is not a fast "
                            "tokenizer: the alignment needs offset mappings (save it with a tokenizer.json)")
        side = None if base is None else "student" if base_fp == ref else "teacher"
        if side == "teacher" and base_fp != vocab_fingerprint(tok):
            raise OpsdError(f"the base model '{base[0]}' shares neither the student's tokenizer nor that of {role}: "
                            "a base must be of the student's or the teacher's family")
        check_compatible({role: named[role], **({"base": base} if side == "teacher" else {})})
        out[t.name] = CrossTeacher(tok, [], tok.eos_token_id, side)  # its stop ids: engine.setup, with the student's
    return out


def render(cfg, problems: list[dict], renderers: tuple, system: str | None, teachers, room: int | None,
           families: dict | None, check_student=None, *, every_base_view: bool = False) -> tuple[Views, dict]:
    """Every view of ``problems`` (``io.views.build_views``) and the base's prompts: ``families`` maps a
    teacher config to the tokenizer of the base's family next to it (None: the student's; ``families`` None:
    no base); the base's prompts are made next to every teacher with ``every_base_view``, else next to the
    teachers ``families`` names (those of another tokenizer)."""
    s_render, renders = renderers
    views = build_views(cfg, problems, s_render, renders, system, list(teachers), check_student, room)
    out = {}
    for t in teachers if families is not None else ():
        if every_base_view or t.name in families:
            out[t.name] = base_prompts(cfg, problems, t, views, s_render, renders[t.name], families.get(t.name),
                                       system, room)
    return views, out


def base_prompts(cfg, problems: list[dict], t, views: Views, s_render: ViewRenderer, t_render: ViewRenderer,
                 family_tok, system: str | None, room: int | None) -> list[list[int]]:
    """The base's prompt ids next to teacher config ``t`` (``io.views.base_renderer``; ``family_tok``: the
    teacher's tokenizer for a base of its family, None for one of the student's): the view
    ``scoring.base_view`` names, reusing the one already rendered where the base reads exactly that one."""
    if family_tok is None and t_render.tok.get_vocab() == s_render.tok.get_vocab():
        r = s_render if cfg.scoring.base_view == "student" else t_render  # one vocabulary: the view itself
    else:
        r = base_renderer(cfg, t, s_render, t_render, family_tok)
    if r is s_render or r is t_render:
        return views.student if r is s_render else views.teachers[t.name]
    on_teacher = cfg.scoring.base_view == "teacher"
    own = build_views(cfg, problems, r, {t.name: r}, system, [t] if on_teacher else [], room=room)
    return own.teachers[t.name] if on_teacher else own.student
