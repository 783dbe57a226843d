"""Which tokenizer and template options render which view: one rule for the diagnosis, the trainer and the app.

- The student's view: the student's tokenizer, its ``chat_template_kwargs`` and ``prompt_format``.
- A teacher view: the teacher model's own tokenizer and chat template when it has one (a warning
  says so when that template differs from the student's); a self-teacher, or a teacher without a
  template (a -Base checkpoint), is shown the student's rendering. Its options are its own
  ``chat_template_kwargs``, else the student's. A teacher with another vocabulary (``engine.cross``)
  always reads its own tokens: without a template, in the student's ``prompt_format``.
- The base never renders: it scores the student's or each teacher's view (``scoring.base_view``),
  so a base needs no chat template.

Models of one vocabulary are checked equal (``io.models.check_compatible``), so ids rendered by one
tokenizer mean the same text to each of them; a teacher of another vocabulary is aligned span by span.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsd_diag.config.model_options import view_template_kwargs
from opsd_diag.io.models import has_chat_template
from opsd_diag.io.views import PROMPT_LIMIT, Format, student_view, teacher_view


@dataclass(frozen=True)
class ViewRenderer:
    """The tokenizer and format that render one view."""
    tok: object
    fmt: Format


def student_renderer(cfg, tok) -> ViewRenderer:
    s = cfg.student
    return ViewRenderer(tok, Format.of(s.prompt_format, s.chat_template_kwargs, f"the student model '{s.model}'"))


def teacher_renderer(cfg, teacher, student_tok, teacher_tok=None) -> ViewRenderer:
    """``teacher_tok``: the external teacher's own tokenizer (None for a self-teacher)."""
    kwargs = view_template_kwargs(cfg.student, teacher)
    own = teacher_tok is not None and has_chat_template(teacher_tok)
    if own:
        return ViewRenderer(teacher_tok, Format.of("chat", kwargs, f"teacher config '{teacher.name}' (model "
                                                                   f"'{teacher.model}')"))
    kind = cfg.student.prompt_format
    if teacher_tok is not None and teacher_tok.get_vocab() != student_tok.get_vocab():  # its own tokens
        return ViewRenderer(teacher_tok, Format.of(kind, kwargs, f"teacher config '{teacher.name}' (model "
                                                                 f"'{teacher.model}')"))
    return ViewRenderer(student_tok, Format.of(kind, kwargs, f"teacher config '{teacher.name}' (the student's "
                                                             "template)"))


def base_renderer(cfg, teacher, student: ViewRenderer, own: ViewRenderer, family_tok=None) -> ViewRenderer:
    """What renders the base's prompts next to a teacher config with another tokenizer (``own``: its renderer):
    the view ``scoring.base_view`` names, in the tokens of the base's family (``family_tok``: that teacher's
    tokenizer for a base of its family; None for a base of the student's). Each view keeps its format."""
    on_teacher = cfg.scoring.base_view == "teacher"
    if family_tok is not None:
        return own if on_teacher else ViewRenderer(family_tok, student.fmt)
    return teacher_renderer(cfg, teacher, student.tok) if on_teacher else student


def template_notes(cfg, student_tok, teacher_toks: dict) -> list[str]:
    """Warnings for teacher views whose template is not the student's (``teacher_toks``: name -> tokenizer)."""
    notes = []
    for t in cfg.teachers:
        tt = teacher_toks.get(t.name)
        if tt is None:
            continue
        if not has_chat_template(tt):
            how = ("in its own tokens, as the student's prompt_format says" if tt.get_vocab() != student_tok.get_vocab()
                   else "with the student's")
            notes.append(f"teacher config '{t.name}': model '{t.model}' has no chat template, so its view is "
                         f"rendered {how}")
        elif getattr(tt, "chat_template", None) != getattr(student_tok, "chat_template", None):
            notes.append(f"teacher config '{t.name}': model '{t.model}' has a chat template different from the "
                         "student's; its view is rendered with its own (docs/recipes.md, which template renders "
                         "which view)")
    return notes


@dataclass
class Views:
    student: list[list[int]]
    teachers: dict[str, list[list[int]]]
    truncated: dict[str, list[bool]]


def prompt_limit(cfg, room: int | None) -> int:
    """The teacher views' length limit: ``scoring.max_prompt_length``, else 2048 capped at ``room`` (the fewest
    positions a model reading them has for a prompt beside the completion): a default the models cannot hold
    would only turn a shortened context into an error."""
    return cfg.scoring.max_prompt_length or max(1, min(PROMPT_LIMIT, room or PROMPT_LIMIT))


def system_tokens(r: ViewRenderer, problem: dict, system: str | None) -> int:
    """The tokens ``system`` adds to ``problem``'s student view (0 without one): a prompt too long because of
    the system prompt is reported as the system prompt's (``io.models.check_fits``)."""
    if not system:
        return 0
    return len(student_view(r.tok, problem, system, r.fmt).ids) - len(student_view(r.tok, problem, None, r.fmt).ids)


def build_views(cfg, problems: list[dict], student: ViewRenderer, teachers: dict[str, ViewRenderer],
                system: str | None, teacher_specs=None, check_student=None, room: int | None = None) -> Views:
    """Every view of every problem as ids (``teacher_specs``: the teacher configs to render, default all).

    ``check_student(ids)`` runs on the student views before any teacher view is built, so a question
    too long for a model is reported as such rather than as a teacher context over its limit. ``room``:
    the fewest positions a model reading the views has for a prompt, when the models are loaded
    (``prompt_limit``)."""
    s_ids = [student_view(student.tok, p, system, student.fmt).ids for p in problems]
    if check_student is not None:
        check_student(s_ids)
    t_ids, truncated, limit = {}, {}, prompt_limit(cfg, room)
    for t in cfg.teachers if teacher_specs is None else teacher_specs:
        r = teachers[t.name]
        views = [teacher_view(r.tok, p, t.context, partial_fraction=t.partial_fraction,
                              system_prompt=t.system_prompt or system, max_length=limit, room=room, fmt=r.fmt)
                 for p in problems]
        t_ids[t.name] = [v.ids for v in views]
        truncated[t.name] = [v.context_truncated for v in views]
    return Views(s_ids, t_ids, truncated)


def rendered_text(views: Views, student: ViewRenderer, teachers: dict[str, ViewRenderer], i: int = 0) -> dict:
    """The exact text of problem ``i``'s views, special tokens included (what the manifest stores)."""
    out = {"student": student.tok.decode(views.student[i], skip_special_tokens=False)}
    for name, ids in views.teachers.items():
        out[name] = teachers[name].tok.decode(ids[i], skip_special_tokens=False)
    return out
