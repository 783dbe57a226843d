"""What the teacher sees, and when (``lookahead.schedule_points``): per share f of the reference solution a
self-teacher is shown, the accuracy gap, the teacher's mismatch with the student and the lookahead, beside the
whole solution's, and a schedule recommendation; stored in ``summary.json`` under ``schedule``
(``opsd_diag.schedule_points`` shows it: ``Run.schedule()`` and the report's line).

Nothing here runs a model. ``with_schedule_points`` adds, per point f and per self-teacher config that shows the
solution (its context uses ``{solution}``, ``{partial_solution}`` or ``{hint}``), a copy named ``NAME.revealF``
with ``reveal: F``, after the configs already there (so their seeds, and every number of theirs, stay as they
were). The ordinary diagnosis then samples, scores and looks ahead on each copy like on any config; its view
renders every problem through ``core.context_schedule.revealed_problem`` (``io.views.build_views``), the very cut
the trainer's ``training.context_schedule`` makes. ``table`` then gathers per (source, point, loss method):

- G: the copy's ``teacher_minus_student_accuracy`` with its interval (needs ``sampling.teacher_samples`` > 0);
- the mismatch: its token-weighted mean JSD and reverse KL to the student over the student's rollouts
  (its ``ci.jsd`` and ``ci.kl_rev``, intervals over prompts);
- the lookahead with that loss: Δll with its interval, the success change dv and the KL to the initial student;

the whole solution being the source config itself (f = 1). Showing less of the solution is a change away from
today's training, so the recommendation moves off the whole solution only on evidence, as the token masks' does
(``engine.levers``, rule 2 of the lever study): each share's lookahead Δll (the lookahead's lower-variance proxy of
the success change) is compared with the whole solution's, same source and loss, prompt by prompt (``dll_vs_full``,
a paired difference with its interval; the lookahead keeps per-prompt values when schedule points are on), and the
recommendation is the share with the largest difference among those whose interval lies above 0
(``core.stats.beyond_noise``), as the fixed share to train with, ``training.context_schedule: {kind: fixed, start:
f}``; else the whole solution. The lookahead steps a few times at one share, so a decaying or adaptive schedule is
not measured itself here; ``engine.schedule_courses`` looks ahead on the courses, and their rows are stored beside the points'
(``courses``).
"""

from __future__ import annotations

from pathlib import Path

from opsd_diag.config.levers import point_name
from opsd_diag.core.context_schedule import SOLUTION_FIELDS, reveal
from opsd_diag.core.stats import beyond_noise, jsonable, paired_difference
from opsd_diag.errors import OpsdError
from opsd_diag.io import store, templates

BASIS = ("largest lookahead Δll difference from the whole solution (same source and loss) whose 95% interval lies "
         "above 0")
WHOLE = ("no share's lookahead Δll beats the whole solution's (same source and loss) beyond its 95% interval: the "
         "whole solution")
BLIND = ("no measurement prompt has both a correct and an incorrect rollout, so the lookahead's Δll cannot compare the "
         "shares (more samples per prompt, sampling.num_samples, give it some): the whole solution")


def schedule_sources(cfg) -> list:
    """The teacher configs a schedule point copies: self-teachers shown the whole solution."""
    return [t for t in cfg.teachers if t.is_self and t.reveal == 1.0
            and templates.placeholders(templates.resolve(t.context)) & set(SOLUTION_FIELDS)]


def with_schedule_points(cfg):
    """``cfg`` with one teacher config per (schedule source, point), after the configs already there.

    Idempotent: a copy already present (the run directory's stored, resolved config) is kept; another config
    under a copy's name, or points without a source, is one OpsdError."""
    la = cfg.lookahead
    if la is None or not la.schedule_points:
        return cfg
    sources = schedule_sources(cfg)
    if not sources:
        raise OpsdError("lookahead.schedule_points needs a self-teacher config (model: self, shown the whole "
                        "solution) whose context shows the solution ({solution}, {partial_solution} or {hint}, "
                        "e.g. context: full_solution): add one to teachers, or remove schedule_points")
    teachers = list(cfg.teachers)
    for src in sources:
        for f in la.schedule_points:
            copy = src.model_copy(update={"name": point_name(src.name, f), "reveal": f})
            have = next((t for t in teachers if t.name == copy.name), None)
            if have is None:
                teachers.append(copy)
            elif have != copy:
                raise OpsdError(f"teachers: lookahead.schedule_points names the copy of '{src.name}' shown {f:g} of "
                                f"the solution '{copy.name}', and another teacher config has that name: rename it")
    return cfg.model_copy(update={"teachers": teachers})


def check_problems(cfg, problems: list[dict]) -> None:
    """Every config shown a share of the solution sees at least one word of each solution (an empty one would
    read as a problem without a solution)."""
    for n, t in enumerate(cfg.teachers):
        if t.reveal >= 1.0:
            continue
        for p in problems:
            if p.get("solution") and not reveal(p["solution"], t.reveal):
                words = len(p["solution"].split())
                raise OpsdError(f"teachers.{n} '{t.name}' (share {t.reveal:g} of the solution) shows no word of "
                                f"problem '{p['id']}''s solution ({words} words): use schedule points of at least "
                                f"{0.5 / words:.3g}, or drop that problem")


def _row(summary: dict, la: dict, source: str, share: float, config: str, method: str) -> dict:
    entry = (summary.get("configs") or {}).get(config) or {}
    ci = entry.get("ci") or {}
    r = (la.get(config) or {}).get(method) or {}
    return {"source": source, "share": share, "config": config, "method": method,
            "gap": entry.get("teacher_minus_student_accuracy"), "jsd": ci.get("jsd"), "kl_rev": ci.get("kl_rev"),
            "dll": r.get("dll"), "dv": r.get("dv"), "kl": r.get("kl"), "dll_prompts": r.get("dll_prompts")}


def paired_with_full(rows: list[dict], n_boot: int, seed: int) -> list[dict]:
    """Each share's ``dll_vs_full``: its per-prompt Δll minus the whole solution's (same source and loss), without
    the per-prompt values (they stay in the lookahead's entries)."""
    full = {(r["source"], r["method"]): r.get("dll_prompts") for r in rows if r["share"] == 1.0}
    out = []
    for r in rows:
        mine, whole = r.pop("dll_prompts", None), full.get((r["source"], r["method"]))
        if r["share"] < 1.0:
            r["dll_vs_full"] = paired_difference(mine, whole, n_boot, seed) if mine and whole else None
        out.append(r)
    return out


def table(cfg, summary: dict, courses: list[dict] | None = None) -> dict:
    """The ``schedule`` entry of ``summary`` (a diagnosis of ``with_schedule_points(cfg)``): one row per (source,
    share, loss method), shares ascending with the whole solution (1) last, and the recommendation; ``courses``:
    the decaying and adaptive courses looked ahead (``engine.schedule_courses``), stored beside them."""
    la = summary.get("lookahead") or {}
    looked = (la.get("configs") or {}) if la.get("status") == "ok" else {}
    methods = list(cfg.lookahead.methods)
    points = sorted(cfg.lookahead.schedule_points)
    rows = paired_with_full([_row(summary, looked, src.name, f, name, m) for src in schedule_sources(cfg)
                             for f, name in [*((f, point_name(src.name, f)) for f in points), (1.0, src.name)]
                             for m in methods], cfg.analysis.bootstrap, cfg.sampling.seed)
    out = {"status": "ok", "points": points, "methods": methods, "rows": rows, "recommendation": recommend(rows),
           **({"courses": courses} if courses is not None else {})}
    if not looked:  # why the lookahead columns are empty
        out["lookahead"] = la.get("reason") or "the lookahead did not run (lookahead.enabled: false)"
    return out


def recommend(rows: list[dict]) -> dict | None:
    """The share with the largest ``dll_vs_full`` among those whose interval lies above 0 (the first on a tie), with
    its Δll and the whole solution's with the same source and loss; else the whole solution (``share`` 1, no source
    or loss: nothing to change), with why (no share beat it, or nothing could be compared). None without rows."""
    if not rows:
        return None
    diffs = {i: r.get("dll_vs_full") for i, r in enumerate(rows) if r["share"] < 1.0}
    moved = beyond_noise(diffs)
    if moved is None:
        compared = any((d or {}).get("n_prompts") for d in diffs.values())
        return {"config": None, "source": None, "share": 1.0, "method": None,
                "context_schedule": {"kind": "fixed", "start": 1.0}, "basis": WHOLE if compared else BLIND}
    best = rows[moved]
    full = next((r for r in rows if r["source"] == best["source"] and r["method"] == best["method"]
                 and r["share"] == 1.0), None)
    return {"config": best["config"], "source": best["source"], "share": best["share"], "method": best["method"],
            "context_schedule": {"kind": "fixed", "start": best["share"]}, "dll": best["dll"], "gap": best["gap"],
            "dll_full": full and full["dll"], "dll_vs_full": best["dll_vs_full"], "basis": BASIS}


def for_diagnosis(run_dir, cfg, courses: list[dict] | None = None) -> dict:
    """The schedule table of a finished diagnosis in ``run_dir`` (after its lookahead), into ``summary.json``."""
    path = Path(run_dir) / "summary.json"
    result = jsonable(table(cfg, store.read_json(path), courses))
    store.atomic_write_json(path, {**store.read_json(path), "schedule": result})
    return result
