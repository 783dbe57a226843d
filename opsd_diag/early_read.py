"""The early read of a training run: its held-out pass@1 change at the first evaluation at or after a quarter of its
steps, beside what the study's runs with such a read realised by their end.

Nothing the diagnosis computes before training says how much a run will gain (docs/verdict.md, Limitations); the
run's own evaluation after a quarter of its steps did on the worlds that chose it, and not on the five of its fourth
look (``benchmarks/validity/v2/explore_early_success.py``: four looks, each rule fixed before its world existed;
docs/verdict.md#the-early-read). Its figures ship in the model file's ``early_read`` record, written by that script,
never typed, and only while its looks hold: the fourth failed, so the shipped file holds none and nothing here is
shown. This module only reads a run's evaluation records (``metrics.jsonl``, any of which may be damaged) and words the
read.
"""

from __future__ import annotations

import math

from opsd_diag import prediction
from opsd_diag.scoreboard import check_eval, gain_interval, number


def shipped_figures() -> dict | None:
    """The study's figures: the shipped model file's ``early_read`` record, None where it has none (a withdrawn read)."""
    cal = prediction.load()
    return cal.early_read if cal is not None else None


def _usable(r) -> bool:
    """An evaluation record the Track record would also use (``scoreboard.check_eval``)."""
    return isinstance(r, dict) and r.get("kind") == "eval" and check_eval(r) is None


def read(records: list, max_steps: int, figures: dict, running: bool = True) -> dict | None:
    """The early read of a run's metrics ``records`` under the study's ``figures``, or None where there is none: no
    evaluation at step 0, none at or after ``figures['fraction']`` of ``max_steps`` and before its last step, or no
    usable ``max_steps``. The change is paired over the held-out problems where both evaluations carry their
    per-problem counts. ``running``: the run can still be stopped (the advice to stop is given only then)."""
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps <= 0:
        return None
    evals = sorted(((r["step"], r) for r in records if _usable(r)), key=lambda sr: sr[0])
    start = next((r for s, r in evals if s == 0), None)
    first = max(1, math.ceil(figures["fraction"] * max_steps))
    at = next(((s, r) for s, r in evals if first <= s < max_steps), None)
    if start is None or at is None:
        return None
    change, lo, hi, n = gain_interval(start, at[1])
    if not n:  # evaluations without per-problem counts: the change of the means, no interval
        change = number(at[1]["pass@1"]) - number(start["pass@1"])
    r = {"step": at[0], "max_steps": max_steps, "change": change, "lo": lo, "hi": hi, "problems": n,
         "low": change < figures["threshold"]}
    return {**r, "text": sentence(r, figures, running)}


def sentence(r: dict, f: dict, running: bool) -> str:
    interval = f" [{r['lo']:+.3f}, {r['hi']:+.3f}]" if math.isfinite(r["lo"]) else ""
    thr, first, total = f["threshold"], *f["steps"]
    head = (f"Early read at step {r['step']} of {r['max_steps']}: held-out pass@1 {r['change']:+.3f}{interval} since "
            "the start")
    if r["low"]:
        body = (f", below {thr:+.2f}. Of the study's runs read below {thr:+.2f} after a quarter of their steps, "
                f"{f['low']['realised_below']} of {f['low']['runs']} realised below {thr:+.2f} by their end: this run "
                "is likely to gain little" + (", and stopping it now saves the rest of its steps." if running else "."))
    else:
        body = (f". Of the study's runs read at least {thr:+.2f} after a quarter of their steps, "
                f"{f['high']['realised_at_least']} of {f['high']['runs']} realised at least {thr:+.2f} by their end.")
    return (head + body + f" (The study: {f['runs']} runs over {f['worlds']} tiny worlds, read at step {first} of "
            f"{total}; the read ranked what they realised at {f['spearman']:+.2f}.)")

