"""Privileged-context templates: what a self-teacher is shown besides the question.

Templates are plain text with ``{field}`` placeholders, rendered by a tiny substitution (not
``str.format``, not Jinja): a template can name a field and nothing else, so template text from a
user file can never reach attributes, indexing or code.
"""

from __future__ import annotations

import re

from opsd_diag.errors import OpsdError

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
    """The values a template can use, derived from one problem record."""
    solution = problem.get("solution") or ""
    lines = solution.splitlines()
    keep = max(1, int(round(len(lines) * partial_fraction))) if lines else 0
    return {
        "prompt": prompt_text(problem),
        "solution": solution,
        "answer": "" if problem.get("answer") is None else str(problem["answer"]),
        "partial_solution": "\n".join(lines[:keep]),
        "hint": lines[0] if lines else "",
    }


def render(template: str, fields: dict[str, str]) -> str:
    """Fill a resolved template; a privileged field the problem lacks is an error, never blank."""
    out = []
    for kind, value in _parse(template):
        if kind == "text":
            out.append(value)
            continue
        if value in PRIVILEGED and not fields.get(value):
            raise OpsdError(
                f"context template needs {{{value}}} but the problem has no "
                f"{'solution' if value != 'answer' else 'answer'}: map that field in the data config "
                "or choose a template without it")
        out.append(fields[value])
    return "".join(out)
