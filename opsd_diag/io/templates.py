"""Privileged-context templates: what a self-teacher is shown besides the question.

Templates are plain text with ``{field}`` placeholders, rendered by a tiny substitution (not
``str.format``, not Jinja): a template can name a field and nothing else, so template text from a
user file can never reach attributes, indexing or code.
"""

from __future__ import annotations

import re

from opsd_diag.errors import OpsdError
from opsd_diag.io.answers import final_answer, is_rationale

FIELDS = ("prompt", "solution", "answer", "partial_solution", "hint")
PRIVILEGED = ("solution", "answer", "partial_solution", "hint")

_CLOSE = "\n\nNow solve the problem yourself, step by step."
BUILTIN = {
    "none": "{prompt}",
    "full_solution": "{prompt}\n\nA correct solution, for reference:\n{solution}" + _CLOSE,
    "answer_only": "{prompt}\n\nThe correct final answer is {answer}." + _CLOSE,
    "partial_solution": "{prompt}\n\nThe beginning of a correct solution:\n{partial_solution}" + _CLOSE,
    "hint": "{prompt}\n\nHint: {hint}" + _CLOSE,
}

# {{ and }} are literal braces; {name} is a placeholder; any other brace use is an error.
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def _parse(template: str) -> list[tuple[str, str]]:
    """Split a template into ("text", s) and ("field", name) parts, rejecting anything else."""
    parts: list[tuple[str, str]] = []
    pos = 0
    for m in _TOKEN.finditer(template):
        parts.append(("text", template[pos:m.start()]))
        pos = m.end()
        tok = m.group(0)
        if tok in ("{{", "}}"):
            parts.append(("text", tok[0]))
        elif m.group(1) is None:
            raise OpsdError(f"template has an unmatched '{tok}': write '{tok}{tok}' for a literal brace")
        elif m.group(1) not in FIELDS:
            raise OpsdError(
                f"template placeholder '{{{m.group(1)}}}' is not allowed: use only "
                + ", ".join("{" + f + "}" for f in FIELDS) + " (no attribute access, indexing or expressions)")
        else:
            parts.append(("field", m.group(1)))
    parts.append(("text", template[pos:]))
    return parts


def placeholders(template: str) -> set[str]:
    """The fields a template uses (validates it as a side effect of parsing)."""
    return {v for kind, v in _parse(template) if kind == "field"}


def resolve(name_or_text: str) -> str:
    """A built-in name (``full_solution``) or the user's own template text, validated."""
    template = BUILTIN.get(name_or_text, name_or_text)
    used = placeholders(template)
    if "prompt" not in used:
        raise OpsdError(
            f"context template {name_or_text[:60]!r} has no {{prompt}} placeholder: the teacher must see the "
            "question; add {prompt} to the template or use a built-in: " + ", ".join(BUILTIN))
    return template


def prompt_text(problem: dict) -> str:
    """The question as plain text (the last user message of a chat prompt)."""
    p = problem["prompt"]
    return p if isinstance(p, str) else p[-1]["content"]


def context_fields(problem: dict, partial_fraction: float = 0.5) -> dict[str, str]:
    """The values a template can use, derived from one problem record.

    ``answer`` is the reference's final answer (GSM8K's ``#### N``, MATH's ``\\boxed{}``), never the
    rationale an answer column may hold around it.
    """
    solution = problem.get("solution") or ""
    lines = solution.splitlines()
    keep = max(1, int(round(len(lines) * partial_fraction))) if lines else 0
    return {
        "prompt": prompt_text(problem),
        "solution": solution,
        "answer": "" if problem.get("answer") is None else final_answer(problem["answer"]),
        "partial_solution": "\n".join(lines[:keep]),
        "hint": lines[0] if lines else "",
    }


class MissingField(OpsdError):
    """A template needs a field the problem lacks (``field``: the template's name for it)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def render(template: str, fields: dict[str, str]) -> str:
    """Fill a resolved template; a privileged field the problem lacks is an error, never blank, and an
    answer that is a whole solution (several lines, no ``#### N`` or ``\\boxed{}``) is never shown."""
    out = []
    for kind, value in _parse(template):
        if kind == "text":
            out.append(value)
            continue
        source = "answer" if value == "answer" else "solution"
        if value in PRIVILEGED and not fields.get(value):
            raise MissingField(value, f"context template needs {{{value}}} but the problem has no {source}: map "
                                      "that field in the data config or choose a template without it")
        if value == "answer" and is_rationale(fields[value]):
            raise MissingField(value, "context template needs {answer} but the problem's answer is a whole "
                                      "solution (several lines, no final '#### N' or \\boxed{...}): map a column "
                                      "holding only the final answer, or end the solution with '#### N'")
        out.append(fields[value])
    return "".join(out)


def check_problems(template: str, problems: list[dict], who: str, columns: dict[str, str],
                   partial_fraction: float = 0.5) -> None:
    """Render ``template`` for every problem before any model loads; an error names ``who`` (the teacher
    config or setting), the problem and the data column the missing field comes from (``columns``:
    data.fields, our name -> the file's column)."""
    for p in problems:
        try:
            render(template, context_fields(p, partial_fraction))
        except MissingField as e:
            source = "answer" if e.field == "answer" else "solution"
            col = columns.get(source, source)
            mapped = f"column '{col}' (data.fields maps {source} to it)" if source in columns else f"column '{col}'"
            what = "holds a whole solution" if p.get(source) else "is missing or empty"
            raise OpsdError(f"{who} needs {{{e.field}}}, but in problem '{p['id']}' the {mapped} {what}: "
                            + ("map a column holding only the final answer, or end the solution with '#### N'"
                               if p.get(source) else f"fill it, map another column with data.fields, or use a template "
                               f"without {{{e.field}}}")) from None
