"""What the teacher sees, and when, in a diagnosis (``lookahead.schedule_points``, computed by
``engine.schedule_points``) as a table and as the report's line: ``Run.schedule()`` (``ScheduleView``) and
``opsd-diag report``."""

from __future__ import annotations

import pandas as pd

from opsd_diag.core.stats import ci_text

# Run.schedule(): one row per (self-teacher config, share of the solution, loss method)
# (docs/training.md#the-diagnosis-schedule-recommendation)
COLUMNS = {
    "source": "the self-teacher config shown the whole solution",
    "share": "share f of the solution the teacher view shows (its first ⌊f·W + ½⌋ words; 1: the source itself)",
    "config": "the teacher config of that share (`SOURCE.revealF`; the source for f = 1)",
    "method": "the loss the lookahead steps with",
    "gap": "accuracy gap G: the view's sampled accuracy minus the student's (needs `sampling.teacher_samples`)",
    "gap_lo": "its 95% interval over prompts, low end",
    "gap_hi": "its 95% interval, high end",
    "jsd": "the mismatch: mean JSD between the view and the student over the student's rollouts' tokens",
    "kl_rev": "the mismatch: mean reverse KL(student ‖ view) over the same tokens",
    "dll": "lookahead Δll: change of the correct-minus-incorrect log-likelihood gap",
    "dll_lo": "its 95% interval, low end",
    "dll_hi": "its 95% interval, high end",
    "dll_vs_full": "dll minus the whole solution's (same source and loss), prompt by prompt (the mean over the "
                   "measurement prompts where both are finite; NaN for the whole solution)",
    "dll_vs_full_lo": "its 95% interval over those prompts, low end",
    "dll_vs_full_hi": "its 95% interval, high end",
    "dv": "lookahead success change (importance-weighted)",
    "kl": "lookahead KL to the initial student per token",
    "recommended": "the recommendation: the largest dll_vs_full whose interval lies above 0 (else none: the whole "
                   "solution, as today)",
}
_NUMBERS = ["share", "gap", "gap_lo", "gap_hi", "jsd", "kl_rev", "dll", "dll_lo", "dll_hi", "dll_vs_full",
            "dll_vs_full_lo", "dll_vs_full_hi", "dv", "kl"]

# Run.schedule_courses(): one row per (self-teacher config, loss method, course) (engine.schedule_courses)
COURSE_COLUMNS = {
    "source": "the self-teacher config shown the whole solution",
    "method": "the loss the lookahead steps with",
    "course": "reveal_decay, reveal_adaptive (the candidates), or training (the training section's own schedule)",
    "context_schedule": "its `training.context_schedule` section, as YAML flow text",
    "shares": "the share the trainer's schedule gives at each lookahead step, compressed onto the lookahead's steps",
    "views": "the diagnosed share that served each step (the nearest schedule point; 1: the source)",
    "dll": "lookahead Δll with that course",
    "dll_lo": "its 95% interval, low end",
    "dll_hi": "its 95% interval, high end",
    "dv": "lookahead success change (importance-weighted)",
    "kl": "lookahead KL to the initial student per token",
}


def _get(d: dict | None, key: str = "estimate"):
    return None if not d else d.get(key)


def frame(schedule: dict | None) -> pd.DataFrame | None:
    """The table of a summary's ``schedule`` entry, or None without one."""
    if not schedule or schedule.get("status") != "ok":
        return None
    best = schedule.get("recommendation") or {}
    rows = [{"source": r["source"], "share": r["share"], "config": r["config"], "method": r["method"],
             "gap": _get(r["gap"]), "gap_lo": _get(r["gap"], "lo"), "gap_hi": _get(r["gap"], "hi"),
             "jsd": _get(r["jsd"]), "kl_rev": _get(r["kl_rev"]), "dll": _get(r["dll"]), "dll_lo": _get(r["dll"], "lo"),
             "dll_hi": _get(r["dll"], "hi"), "dll_vs_full": _get(r.get("dll_vs_full")),
             "dll_vs_full_lo": _get(r.get("dll_vs_full"), "lo"), "dll_vs_full_hi": _get(r.get("dll_vs_full"), "hi"),
             "dv": _get(r["dv"]), "kl": _get(r["kl"]),
             "recommended": best.get("config") is not None
             and (r["config"], r["method"]) == (best.get("config"), best.get("method"))}
            for r in schedule["rows"]]
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out[_NUMBERS] = out[_NUMBERS].astype(float)  # None -> NaN
    return out


def _flow(d: dict) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" if isinstance(v, float) else f"{k}: {v}" for k, v in d.items()) + "}"


def courses_frame(schedule: dict | None) -> pd.DataFrame | None:
    """The courses of a summary's ``schedule`` entry, or None without them."""
    if not schedule or schedule.get("status") != "ok" or not schedule.get("courses"):
        return None
    rows = [{"source": c["source"], "method": c["method"], "course": c["course"],
             "context_schedule": _flow(c["context_schedule"]), "shares": ", ".join(f"{x:.3g}" for x in c["shares"]),
             "views": ", ".join(f"{x:g}" for x in c["views"]), "dll": _get(c["dll"]), "dll_lo": _get(c["dll"], "lo"),
             "dll_hi": _get(c["dll"], "hi"), "dv": _get(c["dv"]), "kl": _get(c["kl"])} for c in schedule["courses"]]
    out = pd.DataFrame(rows, columns=list(COURSE_COLUMNS))
    numbers = ["dll", "dll_lo", "dll_hi", "dv", "kl"]
    out[numbers] = out[numbers].astype(float)
    return out


def text(schedule: dict | None) -> list[str]:
    """The report's line: the recommended share with its lookahead interval, beside the whole solution's."""
    if not schedule:
        return []
    if schedule.get("status") != "ok":
        return [f"schedule recommendation: {schedule.get('reason', 'not computed')}"]
    r = schedule.get("recommendation")
    if r is None:
        why = schedule.get("lookahead") or "no share has a finite lookahead Δll"
        return [f"schedule recommendation: none ({why}) (table: Run.schedule())"]
    courses = schedule.get("courses") or []
    if r.get("source") is None:  # rule 2: nothing beat the whole solution; every course beside it
        lines = [f"schedule recommendation: show the whole solution, as today ({r.get('basis', '')}) "
                 "(table: Run.schedule())"]
        named = [(f"{c['source']} / {c['method']} ", c) for c in courses]
        head = "schedule courses: "
    else:
        lines = [f"schedule recommendation for {r['source']} / {r['method']}: show {r['share']:g} of the solution "
                 f"(training.context_schedule {{kind: fixed, start: {r['share']:g}}}): lookahead Δll "
                 f"{ci_text(r['dll'])}, whole solution {ci_text(r.get('dll_full'))}"
                 + (f", difference {ci_text(r['dll_vs_full'])}" if r.get("dll_vs_full") else "")
                 + f"; accuracy gap there {ci_text(r.get('gap'))} (table: Run.schedule())"]
        named = [("", c) for c in courses if (c["source"], c["method"]) == (r["source"], r["method"])]
        head = "schedule courses, same loss: "
    if named:
        lines.append(head + "; ".join(f"{who}{c['course']} {_flow(c['context_schedule'])} Δll {ci_text(c['dll'])}"
                                      for who, c in named) + " (table: Run.schedule_courses())")
    return lines


class ScheduleView:
    """``Run.schedule()`` (a mixin of ``run.Run``)."""

    def schedule(self) -> pd.DataFrame | None:
        """One row per (self-teacher config, share of the solution, loss method) of the schedule points
        (``COLUMNS``), or None without them."""
        return frame(self.summary.schedule)

    def schedule_courses(self) -> pd.DataFrame | None:
        """One row per (self-teacher config, loss method, decaying or adaptive course) looked ahead
        (``COURSE_COLUMNS``), or None without them."""
        return courses_frame(self.summary.schedule)
