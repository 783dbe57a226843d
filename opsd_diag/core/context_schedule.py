"""What the teacher sees, and when: the revealed share of the solution per step (``training.context_schedule``).

- ``fixed``: the share ``start`` at every step (default 1: the whole solution, what the trainer did
  before schedules existed);
- ``decay``: ``end + (start - end) * max(0, 1 - step / decay_steps)``: linear from ``start`` at the first
  step to ``end`` from step ``decay_steps`` on;
- ``adaptive``: ``end + (start - end) * (1 - a)``, ``a`` the student's running accuracy on its own
  training rollouts before the step (an exponential moving average with weight ``accuracy_ema`` on the
  past, starting at 0): the better the student does, the less it is shown.

A share f of a solution is its first ``floor(f * W + 1/2)`` whitespace-separated words, cut right after the
last kept word (the text in between unchanged); f = 1 is the solution unchanged. Every template field made
from the solution (``solution``, ``partial_solution``, ``hint``) follows; ``answer`` is not the solution.
"""

from __future__ import annotations

import math
import re

from opsd_diag.config.settings import ScheduleSettings

KINDS = ("fixed", "decay", "adaptive")
SOLUTION_FIELDS = ("solution", "partial_solution", "hint")  # the template fields made from the solution: cut


def revealed_fraction(s: ScheduleSettings, step: int, running_accuracy: float = 0.0) -> float:
    """The share of the solution the teacher sees at ``step`` (0-based)."""
    if s.kind == "fixed":
        return s.start
    if s.kind == "decay":
        return s.end + (s.start - s.end) * max(0.0, 1.0 - step / s.decay_steps)
    if s.kind == "adaptive":
        return s.end + (s.start - s.end) * (1.0 - min(1.0, max(0.0, running_accuracy)))
    raise ValueError(f"unknown context schedule {s.kind!r}")


def update_accuracy(s: ScheduleSettings, running: float, batch_accuracy: float | None) -> float:
    """The running accuracy after a step whose rollouts were right ``batch_accuracy`` of the time (None:
    no rollout with a known outcome, unchanged)."""
    if batch_accuracy is None or not math.isfinite(batch_accuracy):
        return running
    return s.accuracy_ema * running + (1.0 - s.accuracy_ema) * batch_accuracy


def reveal(text: str, fraction: float) -> str:
    """The first ``floor(fraction * W + 1/2)`` words of ``text`` (W its words), cut after the last one kept."""
    if fraction >= 1.0:
        return text
    words = list(re.finditer(r"\S+", text))
    k = int(math.floor(fraction * len(words) + 0.5))
    return text[:words[k - 1].end()] if k > 0 else ""


def revealed_problem(problem: dict, fraction: float) -> dict:
    """A copy of ``problem`` whose solution is cut to ``fraction`` of its words."""
    if fraction >= 1.0 or not problem.get("solution"):
        return problem
    return {**problem, "solution": reveal(problem["solution"], fraction)}
