"""Token views: the exact prompt ids each model sees, and the completion spliced in as ids.

Every view goes through the same ``apply_chat_template(..., add_generation_prompt=True)`` call (with
the model's ``chat_template_kwargs``) and is tokenised with ``add_special_tokens=False`` (the
template already holds any BOS), so special tokens are never added twice; a ``raw`` prompt (a Base
student) is the text with BOS as the tokenizer adds it. Completions are spliced as token ids, never
re-tokenised text.

Special tokens come only from the chat template (or the tokenizer's own BOS): a prompt, system prompt
or solution that spells ``<|im_end|>`` (or any special token of the tokenizer) is encoded as that text,
never as the token, so a data file cannot forge a turn (``encode_chat``, ``encode_text``).

Which tokenizer and template options render which view (``ViewRenderer``), one rule for the diagnosis, the
trainer and the app:

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

import re
from dataclasses import dataclass

from opsd_diag.config.model_options import view_template_kwargs
from opsd_diag.core.context_schedule import revealed_problem
from opsd_diag.errors import OpsdError
from opsd_diag.io import chat_template, templates
from opsd_diag.io.chat_template import has_chat_template
from opsd_diag.io.chat_template import FIXED_DATE  # noqa: F401 - the day every view is rendered on


PROMPT_LIMIT = 2048  # tokens of a teacher view, unless scoring.max_prompt_length or the models' positions say fewer


@dataclass(frozen=True)
class PromptView:
    ids: list[int]
    context_truncated: bool = False


def _messages(problem: dict, user_text: str | None, system_prompt: str | None) -> list[dict]:
    prompt = problem["prompt"]
    msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if user_text is not None:
        msgs[-1] = {"role": "user", "content": user_text}
    if system_prompt and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def special_tokens(tok) -> list[str]:
    """The spellings of the tokenizer's added tokens, special or not (Qwen3's ``<think>`` is an added token
    that is not special, and is parsed from text all the same), longest first (a longer one wins a match)."""
    return sorted({t.content for t in tok.added_tokens_decoder.values() if t.content}, key=len, reverse=True)


def encode_text(tok, text: str) -> list[int]:
    """A user's text as ids: no special or added token is parsed from it, and none is added.

    ``split_special_tokens`` covers the special ones; an added token that is not special is matched in
    any text, so its spelling is encoded in two pieces (its first character, then the rest)."""
    def plain(part: str) -> list[int]:
        return tok(part, add_special_tokens=False, split_special_tokens=True)["input_ids"] if part else []

    added = [a for a in special_tokens(tok) if a in text]
    if not added:
        return plain(text)
    ids: list[int] = []
    for i, part in enumerate(re.split("(" + "|".join(map(re.escape, added)) + ")", text)):
        ids += plain(part[:1]) + plain(part[1:]) if i % 2 else plain(part)
    return ids


def reference_ids(tok, problem: dict, target_template: str, stop_id: int) -> list[int]:
    """The reference response as ids: the template rendered, tokenised as plain text (a special token the
    solution spells stays text), plus a stop id (``stop_ids[0]``: the template's end-of-turn token,
    ``<|eot_id|>`` / ``<end_of_turn>``, where there is one)."""
    return encode_text(tok, templates.render(target_template, templates.context_fields(problem))) + [stop_id]


def encode_segments(tok, text: str, specials: list[str], literal=lambda part: part) -> list[int]:
    """``text`` split at the ``specials`` (each becomes its id, as the tokenizer itself splits at added tokens)
    and every piece between them encoded as plain text after ``literal`` (which puts masked user text back)."""
    if not specials:
        return encode_text(tok, literal(text))
    ids: list[int] = []
    for i, part in enumerate(re.split("(" + "|".join(map(re.escape, specials)) + ")", text)):
        if i % 2:
            ids.append(tok.convert_tokens_to_ids(part))
        elif part:
            ids += encode_text(tok, literal(part))
    return ids


@dataclass(frozen=True)
class Format:
    """How one model's prompts are rendered: its chat template with options, or ``raw`` text."""
    kind: str = "chat"  # chat | raw
    template_kwargs: tuple = ()  # sorted (name, value) pairs passed to the chat template
    who: str = "the student"  # names the model in errors

    @staticmethod
    def of(kind: str = "chat", kwargs: dict | None = None, who: str = "the student") -> Format:
        return Format(kind, tuple(sorted((kwargs or {}).items())), who)


def render_chat(tok, messages: list[dict], fmt: Format = Format(), where: str = "") -> str:
    """The chat template's text with the generation prompt (``io.chat_template``: the fixed day, one-line failures)."""
    if not getattr(tok, "chat_template", None):
        raise OpsdError(f"{fmt.who} has no chat template in its tokenizer: use an instruct/chat checkpoint, add a "
                        "chat_template to its tokenizer_config.json, or set prompt_format: raw (a -Base student)")
    return chat_template.render(tok, messages, dict(fmt.template_kwargs), fmt.who, where or "the prompt")


def encode_chat(tok, messages: list[dict], fmt: Format = Format(), where: str = "") -> list[int]:
    """The prompt as ids: the chat template's own special tokens are special, the messages' text is text.

    When no message spells a special token (the usual case) this is one plain tokenizer call. Otherwise
    each spelled token is masked with a private-use marker before the template runs, the template's text
    is split at its special tokens, and the masked spellings are put back as text. A ``raw`` prompt (a
    Base model's) is the text as is, after the specials the tokenizer itself adds to a text (its BOS).
    """
    if fmt.kind == "raw":
        text = "\n\n".join(m["content"] for m in messages)
        return tok("", add_special_tokens=True)["input_ids"] + encode_text(tok, text)
    specials = special_tokens(tok)
    spelled = [s for s in specials if any(s in m["content"] for m in messages)]
    if not spelled:
        return tok(render_chat(tok, messages, fmt, where), add_special_tokens=False)["input_ids"]
    contents = "".join(m["content"] for m in messages)
    mark = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in contents)  # Unicode private use area
    found = re.compile("|".join(map(re.escape, spelled)))
    masked = [{**m, "content": found.sub(lambda x: f"{mark}{spelled.index(x.group())}{mark}", m["content"])}
              for m in messages]
    text = render_chat(tok, masked, fmt, where)
    back = re.compile(f"{mark}(\\d+){mark}")
    return encode_segments(tok, text, specials, lambda part: back.sub(lambda x: spelled[int(x.group(1))], part))


def student_view(tok, problem: dict, system_prompt: str | None = None, fmt: Format = Format()) -> PromptView:
    return PromptView(encode_chat(tok, _messages(problem, None, system_prompt), fmt,
                                  f"problem '{problem['id']}' (student view)"))


def teacher_view(tok, problem: dict, context: str, *, partial_fraction: float = 0.5,
                 system_prompt: str | None = None, max_length: int = PROMPT_LIMIT, room: int | None = None,
                 fmt: Format = Format()) -> PromptView:
    """The teacher's prompt: the question with the privileged context rendered in.

    When it is longer than ``max_length`` only the privileged fields are shortened (never the
    question, never the completion), and the view records that it happened. ``room``: the fewest
    positions a model reading this view has for a prompt (beside the completion), when known: a view
    that cannot fit in it is never met with "raise the limit".
    """
    template = templates.resolve(context)
    fields = templates.context_fields(problem, partial_fraction)

    def build(keep: float, system: str | None = system_prompt) -> list[int]:
        cut = {k: (v[:max(1, int(len(v) * keep))] if k in templates.PRIVILEGED and keep < 1 else v)
               for k, v in fields.items()}
        return encode_chat(tok, _messages(problem, templates.render(template, cut), system), fmt,
                           f"problem '{problem['id']}' (teacher view)")

    ids = build(1.0)
    if len(ids) <= max_length:
        return PromptView(ids)
    if not templates.placeholders(template) & set(templates.PRIVILEGED):
        raise _too_long(problem, "the teacher prompt alone (it has no privileged context to shorten)", len(ids),
                        max_length, room, system_prompt and len(build(1.0, None)))
    if len(shortest := build(0.0)) > max_length:
        raise _too_long(problem, "the teacher prompt even without its context", len(shortest), max_length, room,
                        system_prompt and len(build(0.0, None)))
    lo, hi = 0.0, 1.0  # bisect the kept share of the privileged text
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if len(build(mid)) <= max_length else (lo, mid)
    return PromptView(build(lo), context_truncated=True)


def _too_long(problem: dict, what: str, n: int, limit: int, room: int | None, bare: int | None) -> OpsdError:
    """A teacher view over ``limit`` tokens, with the fix that can work: shorten the system prompt when it is
    what pushes the view over (``bare``: the view's length without it), raise the limit only when the models
    hold more (``room``), else shorten the question or the template."""
    head = f"problem {problem['id']}: {what} is {n} tokens, over scoring.max_prompt_length={limit}"
    if bare and bare <= limit:
        return OpsdError(f"{head}: its system prompt (the teacher's system_prompt, else data.system_prompt) "
                         f"takes {n - bare} of them: shorten the system prompt")
    if room is None or room >= n:
        return OpsdError(f"{head}: raise the limit" + (f" (the models hold {room} prompt tokens)" if room else ""))
    return OpsdError(f"{head}, and the models hold at most {room} prompt tokens beside the completion, so a higher "
                     "limit cannot help: shorten the question or the teacher's context template, or lower the "
                     "completion length")


# ------------------------------------------------------------------ which renderer renders which view

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
    """Every view of every problem as ids (``teacher_specs``: the teacher configs to render, default all); a
    teacher config's ``reveal`` < 1 shows that share of each solution (``core.context_schedule.revealed_problem``,
    the cut of the trainer's ``context_schedule``, which renders its revealed problems here too).

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
        views = [teacher_view(r.tok, revealed_problem(p, t.reveal), t.context, partial_fraction=t.partial_fraction,
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
