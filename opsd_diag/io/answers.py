"""Final answers written in text: GSM8K's ``#### N``, MATH's ``\\boxed{...}``, ``Answer: X``, plain strings.

Pure string functions (no project imports), shared by the answer checker (``io.verify``) and the
privileged contexts (``io.templates``): a dataset's answer column often holds a whole worked
solution that ends in its final answer, and both the checker and the ``answer_only`` context need
that final answer alone, never the rationale.
"""

from __future__ import annotations

import re

_GSM8K = re.compile(r"####\s*([^\n]*)")
_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:=]\s*([^\n]*)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
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


def after_hashes(text: str) -> str | None:
    """GSM8K's final answer: what follows the last ``####`` on its line (thousands separators kept)."""
    found = _GSM8K.findall(text)
    value = found[-1].strip().rstrip(".").strip() if found else ""
    return value or None


def answer_line(text: str) -> str | None:
    """The value of the last ``Answer: X`` / ``the answer is X`` line (a box inside it is unwrapped)."""
    found = _ANSWER_LINE.findall(text)
    if not found:
        return None
    value = found[-1].strip().rstrip(".").strip()
    return last_boxed(value) or value or None


def final_answer(reference: str) -> str:
    """The final answer a reference states: after GSM8K's ``####``, inside MATH's last ``\\boxed{}``,
    on a worked solution's last ``Answer:`` line, or else the whole (stripped) string."""
    text = str(reference).strip()
    found = after_hashes(text) or last_boxed(text)
    if found is None and "\n" in text:
        found = answer_line(text)
    return found if found is not None else text


def is_rationale(answer: str) -> bool:
    """A final answer never spans lines: one that does is a whole solution without a final-answer marker."""
    return "\n" in str(answer).strip()
