"""A schedule's course looked ahead (``lookahead.schedule_points``): what a decaying or adaptive
``training.context_schedule`` does over a few steps, beside the fixed shares of ``engine.schedule_points``.

The lookahead's k steps follow the course compressed onto them: step i trains on the teacher view of the share the
trainer's own schedule (``core.context_schedule.revealed_fraction``) gives at training step ``floor(i * T / k)``,
T being the course's steps (the training section's ``max_steps`` for its own schedule; k for the candidates, whose
decay spans the lookahead). An adaptive course reads the running accuracy the trainer would (``update_accuracy``,
once per lookahead step, from that step's rollouts; the diagnosis' rollouts are the initial student's, so the
accuracy does not rise with the steps as it would in training). Each step's share is served by the diagnosed
schedule point nearest to it (the source itself for 1); the shares asked for and the views used are stored. The
stepped student is measured on the other half like the lookahead (Δll, dv, KL to the initial student).
"""

from __future__ import annotations

import math

from opsd_diag.config.levers import ContextScheduleSpec, point_name
from opsd_diag.core.context_schedule import revealed_fraction, update_accuracy
from opsd_diag.engine.train_step import Roles

# the courses every diagnosis with schedule points looks ahead on (the lever study's, benchmarks/validity/levers)
CANDIDATES = {"reveal_decay": {"kind": "decay", "start": 1.0, "end": 0.25},
              "reveal_adaptive": {"kind": "adaptive", "start": 1.0, "end": 0.25, "accuracy_ema": 0.5}}


def courses_of(cfg) -> dict[str, tuple[dict, int]]:
    """name -> (the ``context_schedule`` section, the steps T it spans): the candidates, and the training section's
    own schedule where it decays or adapts (``training``)."""
    out = {k: (v, cfg.lookahead.steps) for k, v in CANDIDATES.items()}
    tr = cfg.training
    if tr is not None and tr.context_schedule.kind != "fixed":
        out["training"] = (tr.context_schedule.model_dump(exclude_none=True), tr.max_steps)
    return out


def course_share(section: dict, span: int, steps: int, step: int, running_accuracy: float) -> float:
    """The share at lookahead step ``step`` of ``steps``: the trainer's schedule at training step
    ``floor(step * span / steps)`` of ``span``."""
    settings = ContextScheduleSpec(**section).settings(max_steps=span)
    return revealed_fraction(settings, (step * span) // steps, running_accuracy)


def nearest_view(source: str, points: list[float], share: float) -> tuple[float, str]:
    """(the diagnosed share nearest to ``share``, its config): a schedule point's copy, or the source for 1
    (the larger share on a tie)."""
    f = min([*points, 1.0], key=lambda x: (abs(x - share), -x))
    return f, (source if f == 1.0 else point_name(source, f))


def run(cfg, sources: list, student, teacher_models: dict, base, rollouts, pad_id: int, la) -> list[dict]:
    """Every (source, loss method, course) looked ahead; ``sources``: ``engine.schedule_points.schedule_sources``,
    ``la``: ``engine.lookahead`` (both passed in by the diagnosis, so this module's imports stay within the depth
    limit). [] when the lookahead has nothing to step on."""
    s, clip = la.settings(cfg)
    step_rows, measure_rows = la.split(rollouts)
    if step_rows.empty or measure_rows.empty:
        return []
    initial = la.measure_initial(student, measure_rows, pad_id, s.sampling_temperature)
    points = sorted(cfg.lookahead.schedule_points)
    out = []
    for src in sources:
        teacher = teacher_models[src.name]
        for method in cfg.lookahead.methods:
            if method == "opd2" and base is None:
                continue
            ref = cfg.scoring.exopd_reference if method == "exopd" else None
            for name, (section, span) in courses_of(cfg).items():
                asked, used, accuracy = [], [], [0.0]

                def view_of(step, batch, section=section, span=span, src=src.name):
                    share = course_share(section, span, s.steps, step, accuracy[0])
                    f, view = nearest_view(src, points, share)
                    asked.append(share)
                    used.append(f)
                    known = [bool(c) for c in batch["correct"] if c == c and c is not None]
                    accuracy[0] = update_accuracy(ContextScheduleSpec(**section).settings(max_steps=span),
                                                  accuracy[0], sum(known) / len(known) if known else None)
                    return view

                stepped, cost = la.take_steps(
                    student, lambda t: Roles(t, None, "external", teacher,
                                             base if (method == "opd2" or ref == "base") else None, student),
                    step_rows, src.name, la.loss_settings(cfg, method, clip), ref, s, pad_id, cfg.scoring.base_view,
                    view_of=view_of)
                measured = la.measure(stepped, initial, pad_id, s.sampling_temperature, cfg.analysis.bootstrap,
                                      cfg.sampling.seed)
                out.append({"source": src.name, "method": method, "course": name, "context_schedule": section,
                            "span": span, "shares": asked, "views": used,
                            **{k: measured[k] for k in ("dll", "dv", "kl")}, **cost})
                del stepped
    return out


def best(courses: list[dict]) -> dict | None:
    """The course with the largest finite lookahead Δll, or None."""
    ok = [c for c in courses if c["dll"].get("estimate") is not None and math.isfinite(c["dll"]["estimate"])]
    return max(ok, key=lambda c: c["dll"]["estimate"]) if ok else None
