"""A schedule's course looked ahead (issue 33, item 2; ``engine.schedule_courses``): the per-step shares against the
trainer's schedule at the compressed training step (explicit loops), the nearest diagnosed view, a constant course
equal to the fixed point's lookahead, the stored courses against a by-hand stepping with the same per-step views,
``Run.schedule_courses()`` and the report's line."""

from __future__ import annotations

import math

import pytest
from test_schedule_points import diagnosed, world  # noqa: F401 (module fixtures: a diagnosis with schedule points)

from opsd_diag.engine import lookahead, schedule_courses, schedule_points
from opsd_diag.engine.train_step import Roles
from opsd_diag.io import store


@pytest.mark.parametrize("span, steps", [(4, 4), (10, 4), (3, 5)])
def test_decay_shares_are_the_trainers_at_the_compressed_step(span, steps):
    section = {"kind": "decay", "start": 0.9, "end": 0.2}
    for i in range(steps):
        t = math.floor(i * span / steps)
        want = 0.2 + (0.9 - 0.2) * max(0.0, 1.0 - t / span)
        assert schedule_courses.course_share(section, span, steps, i, 0.0) == pytest.approx(want, abs=1e-12)


def test_adaptive_share_reads_the_running_accuracy():
    section = {"kind": "adaptive", "start": 1.0, "end": 0.25, "accuracy_ema": 0.5}
    for acc in (0.0, 0.3, 1.0):
        assert schedule_courses.course_share(section, 4, 4, 2, acc) == pytest.approx(0.25 + 0.75 * (1 - acc))


@pytest.mark.parametrize("share, want", [(0.9, (1.0, "s")), (0.6, (0.5, "s.reveal0.5")), (0.375, (0.5, "s.reveal0.5")),
                                         (0.3, (0.25, "s.reveal0.25")), (0.0, (0.25, "s.reveal0.25"))])
def test_each_step_is_served_by_the_nearest_diagnosed_share(share, want):
    assert schedule_courses.nearest_view("s", [0.25, 0.5], share) == want


def _stepped(stored, student, pad: int, out, views=None, config="self_full"):
    """The lookahead of (config, jsd) stepped with ``views`` per step (None: ``config`` at every step), measured."""
    s, clip = lookahead.settings(stored)
    step_rows, measure_rows = lookahead.split(store.read_table(out, "rollouts"))
    stepped, _ = lookahead.take_steps(
        student, lambda t: Roles(t, None, "external", student, None, student), step_rows, config,
        lookahead.loss_settings(stored, "jsd", clip), None, s, pad, stored.scoring.base_view,
        view_of=None if views is None else (lambda step, batch: views[step]))
    m = lookahead.measure_initial(student, measure_rows, pad, s.sampling_temperature)
    return lookahead.measure(stepped, m, pad, s.sampling_temperature, stored.analysis.bootstrap, stored.sampling.seed)


def test_a_constant_view_per_step_is_the_fixed_lookahead(diagnosed):
    from opsd_diag.io.models import load_spec

    stored, out, _ = diagnosed
    tok, student = load_spec(stored.student, "cpu")
    fixed = _stepped(stored, student, tok.pad_token_id, out, config="self_full.reveal0.5")
    course = _stepped(stored, student, tok.pad_token_id, out, views=["self_full.reveal0.5"] * stored.lookahead.steps)
    assert course["dll"] == fixed["dll"] and course["kl"] == fixed["kl"]


def test_the_courses_equal_a_stepping_with_their_views_by_hand(diagnosed):
    from opsd_diag.io.models import load_spec
    from opsd_diag.run import Run

    stored, out, _ = diagnosed
    tok, student = load_spec(stored.student, "cpu")
    courses = schedule_courses.run(stored, schedule_points.schedule_sources(stored), student,
                                   {t.name: student for t in stored.teachers}, None,
                                   store.read_table(out, "rollouts"), tok.pad_token_id, lookahead)
    assert [(c["course"], c["method"]) for c in courses] == [("reveal_decay", "jsd"), ("reveal_adaptive", "jsd")]
    decay = courses[0]
    k = stored.lookahead.steps
    assert decay["shares"] == pytest.approx([1.0 - 0.75 * i / k for i in range(k)])
    assert decay["views"] == [schedule_courses.nearest_view("self_full", [0.25, 0.5], x)[0] for x in decay["shares"]]
    names = ["self_full" if f == 1.0 else f"self_full.reveal{f:g}" for f in decay["views"]]
    by_hand = _stepped(stored, student, tok.pad_token_id, out, views=names)
    for key in ("dll", "kl", "dv"):
        assert decay[key]["estimate"] == pytest.approx(by_hand[key]["estimate"], abs=1e-9), key
    adaptive = courses[1]  # its first step shows the whole solution (running accuracy 0)
    assert adaptive["shares"][0] == 1.0 and all(0.25 <= x <= 1.0 for x in adaptive["shares"])
    schedule_points.for_diagnosis(out, stored, courses)
    run = Run.load(out)
    frame = run.schedule_courses()
    assert list(frame["course"]) == ["reveal_decay", "reveal_adaptive"]
    assert frame["dll"].tolist() == pytest.approx([c["dll"]["estimate"] for c in courses])
    assert "schedule_courses" in run.table_names() and run.export_table("schedule_courses").equals(frame)
    from opsd_diag import schedule_points as view
    lines = view.text(run.summary.schedule)
    rec = run.summary.schedule["recommendation"]
    head = "schedule courses: self_full / jsd reveal_decay" if rec["source"] is None else \
        "schedule courses, same loss: reveal_decay"  # beside the whole solution: every course, named
    assert any(line.startswith(head) for line in lines), lines


def test_a_diagnosis_with_schedule_points_stores_its_courses(world, tmp_path):
    from test_schedule_points import _cfg

    from opsd_diag.config.spec import from_dict
    from opsd_diag.engine.diagnose import run_diagnosis

    out = run_diagnosis(from_dict(_cfg(world, schedule_points=[0.5])), tmp_path / "run", show_progress=False)
    sched = store.read_json(out / "summary.json")["schedule"]
    assert [c["course"] for c in sched["courses"]] == ["reveal_decay", "reveal_adaptive"]
    assert all(set(c["views"]) <= {0.5, 1.0} for c in sched["courses"])


def test_the_training_sections_own_course_spans_its_max_steps():
    from types import SimpleNamespace

    from opsd_diag.config.levers import ContextScheduleSpec

    def cfg(kind):
        tr = SimpleNamespace(context_schedule=ContextScheduleSpec(kind=kind, start=1.0, end=0.5, decay_steps=20),
                             max_steps=40)
        return SimpleNamespace(lookahead=SimpleNamespace(steps=4), training=tr)
    section, span = schedule_courses.courses_of(cfg("decay"))["training"]
    assert span == 40 and section["decay_steps"] == 20
    # training steps 0, 10, 20, 30 of a decay over 20 steps from 1 to 0.5
    assert [schedule_courses.course_share(section, span, 4, i, 0.0) for i in range(4)] == pytest.approx(
        [1.0, 0.75, 0.5, 0.5])
    assert "training" not in schedule_courses.courses_of(cfg("fixed"))  # a fixed share is a point, not a course
