"""Answer extraction and checking: decides whether a rollout is correct.

Extraction from a response (first that finds something wins): ``auto`` tries GSM8K's ``#### N``
(last one), the toy format ``Answer: X`` (last one), ``\\boxed{...}`` (last one, nested braces
allowed), then the last number in the text; ``gsm8k`` tries ``#### N``, ``Answer: X``, the last
number; ``toy``, ``boxed``, ``last_number`` and ``exact`` use only their own rule.

The reference is parsed too (``reference_answer``): a GSM8K answer column holds the whole rationale
ending in ``#### N`` and a MATH solution ends in ``\\boxed{...}``, so the checker compares against
that final answer, never against the whole reference string (``exact`` compares the whole string).
"""

from __future__ import annotations

import re
from fractions import Fraction

from opsd_diag.errors import OpsdError
from opsd_diag.io.answers import after_hashes, answer_line, final_answer, last_boxed

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")

METHODS = ("auto", "toy", "boxed", "gsm8k", "last_number", "exact")

def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def extract_answer(text: str, method: str = "auto") -> str | None:
    """The final answer written in ``text``, or None if there is none."""
    if method == "toy":
        return answer_line(text)
    if method == "boxed":
        return last_boxed(text)
    if method == "gsm8k":
        return after_hashes(text) or answer_line(text) or _last_number(text)
    if method == "last_number":
        return _last_number(text)
    if method == "exact":
        return text.strip()
    if method != "auto":
        raise OpsdError(f"unknown answer checker '{method}': use one of {', '.join(METHODS)}")
    return after_hashes(text) or answer_line(text) or last_boxed(text) or _last_number(text)


def reference_answer(reference, method: str = "auto") -> str:
    """The final answer of a reference (``#### N``, ``\\boxed{}``, ...); ``exact``: the whole string."""
    return str(reference).strip() if method == "exact" else final_answer(str(reference))


_FRAC = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")


def _latex(s: str) -> str:
    """The LaTeX spellings MATH answers vary in, reduced to one: \\dfrac -> \\frac -> a/b, no \\left."""
    for old, new in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""), ("\\!", ""),
                     ("\\,", ""), ("\\;", ""), ("^\\circ", ""), ("^{\\circ}", ""), ("\\%", ""), ("\\$", "")):
        s = s.replace(old, new)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    return _FRAC.sub(lambda m: f"{m.group(1)}/{m.group(2)}" if re.fullmatch(r"-?\d+", m.group(1))
                     and re.fullmatch(r"\d+", m.group(2)) else m.group(0), s)


def normalize(answer: str) -> str:
    """Canonical form: no spaces, $, thousands separators or trailing zeros; numbers as fractions."""
    s = answer.strip().strip("$").strip()
    s = re.sub(r"^\\text\{(.*)\}$", r"\1", s)
    s = _latex(s).replace(" ", "").rstrip(".")
    num = s.replace(",", "") if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?", s) else s
    try:
        return str(Fraction(num))
    except (ValueError, ZeroDivisionError):
        return s.lower()


def is_correct(response: str, reference, method: str = "auto") -> bool:
    """True when the answer extracted from ``response`` equals the reference's final answer, normalised."""
    got = extract_answer(response, method)
    return got is not None and normalize(got) == normalize(reference_answer(reference, method))
