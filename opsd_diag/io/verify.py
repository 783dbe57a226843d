"""Answer extraction and checking: decides whether a rollout is correct.

Extraction order (first that finds something wins): the toy format ``Answer: X`` (last one),
``\\boxed{...}`` (last one, nested braces allowed), then the last number in the text.
"""

from __future__ import annotations

import re
from fractions import Fraction

from opsd_diag.errors import OpsdError

_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:=]\s*([^\n]*)", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")

METHODS = ("auto", "toy", "boxed", "last_number", "exact")


def _last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}``, with balanced nested braces."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
        j += 1
    return None  # unbalanced: the box was cut off, so there is no answer


def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def _toy(text: str) -> str | None:
    found = _ANSWER_LINE.findall(text)
    if not found:
        return None
    value = found[-1].strip().rstrip(".").strip()
    return _last_boxed(value) or value or None


def extract_answer(text: str, method: str = "auto") -> str | None:
    """The final answer written in ``text``, or None if there is none."""
    if method == "toy":
        return _toy(text)
    if method == "boxed":
        return _last_boxed(text)
    if method == "last_number":
        return _last_number(text)
    if method == "exact":
        return text.strip()
    if method != "auto":
        raise OpsdError(f"unknown answer checker '{method}': use one of {', '.join(METHODS)}")
    return _toy(text) or _last_boxed(text) or _last_number(text)


def normalize(answer: str) -> str:
    """Canonical form: no spaces, $, thousands separators or trailing zeros; numbers as fractions."""
    s = answer.strip().strip("$").strip()
    s = re.sub(r"^\\text\{(.*)\}$", r"\1", s)
    s = s.replace(" ", "").rstrip(".")
    num = s.replace(",", "") if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s) else s
    try:
        return str(Fraction(num))
    except (ValueError, ZeroDivisionError):
        return s.lower()


def is_correct(response: str, reference: str, method: str = "auto") -> bool:
    """True when the answer extracted from ``response`` equals ``reference`` after normalisation."""
    got = extract_answer(response, method)
    return got is not None and normalize(got) == normalize(str(reference))
