"""The diagnosis' predictors as tables: one row per teacher config (``config_frame``), one per (config, loss
method) of the lookahead (``lookahead_frame``).

Pure functions of a ``Summary`` (every number is read from ``summary.json``, computed where it is stored:
``core.aggregate``, ``core.ideal``, ``engine.lookahead``); ``Run.features()`` and ``Run.lookahead_frame()``
give them. The columns are documented in docs/signals.md, generated from ``CONFIG_COLUMNS`` and
``LOOKAHEAD_COLUMNS``. A number the run did not measure is NaN.
"""

from __future__ import annotations

import math

import pandas as pd

from opsd_diag.core.ideal import OBJECTIVES
from opsd_diag.summary import CI, IdealConfig, Summary

CONFIG_COLUMNS = {
    "config": "teacher config",
    "accuracy_gap": "G: teacher-with-context accuracy minus student accuracy (`configs.<c>.teacher_minus_student_"
                    "accuracy`)",
    "normalised_accuracy_gap": "G over the student's room in G's direction: G / (1 − student accuracy) when G > 0, "
                               "G / student accuracy when G < 0, in [−1, 1] (`configs.<c>.normalised_accuracy_gap`)",
    "accuracy_gap_level_<L>": "G on the problems of level L (their `meta.difficulty`), one column per level "
                              "(`configs.<c>.accuracy_gap_by_level`)",
    "teachability": "mean of the `teachability` column (the teacher's mass on the student's top-5)",
    "topk_overlap": "mean of the `topk_overlap` column",
    "high_entropy_student": "share of tokens with h_s ≥ `analysis.high_entropy` (`configs.<c>.high_entropy_share`)",
    "high_entropy_teacher": "share of tokens with h_t ≥ `analysis.high_entropy`",
    "teacher_advantage": "A_T over the predictor's nodes (the student's uncertain positions; `ideal.configs`)",
    "teacher_advantage_reliability": "its spread between the run's configs over this config's bootstrap SE "
                                     "(`ideal.configs.<c>.reliability`; ≤ 1: it cannot tell configs apart)",
    "teacher_advantage_acting": "A_T at the nodes where training acts (largest reverse KL, correct and incorrect "
                                "rollouts alike; `ideal.acting`, needs `ideal.acting_budget`)",
    "teacher_advantage_acting_correct": "the same on correct rollouts only",
    "teacher_advantage_acting_incorrect": "the same on incorrect rollouts only",
    "teacher_advantage_acting_reliability": "its spread between configs over this config's bootstrap SE",
    "gain_acting_<objective>": "the mean first-order gain of each objective (`rev_kl`, `fwd_kl`, `jsd`, `r_opd`, "
                               "`a_d2`, `a_ex`) at the nodes where training acts",
}
LOOKAHEAD_COLUMNS = {
    "config": "teacher config",
    "method": "the loss the lookahead stepped with (`opd`, `jsd`, `opd2`, `exopd`)",
    "dv": "success change on the measurement half by importance weighting (`lookahead.configs.<c>.<m>.dv`)",
    "dv_lo": "its 95% interval over prompts, lower end",
    "dv_hi": "upper end",
    "dll": "correct-minus-incorrect log-likelihood change",
    "kl": "KL(stepped ‖ initial student) per token",
    "pass<k>_fresh": "change of pass@k (k = 1 and `analysis.pass_k` up to n) from n fresh samples of every "
                     "measurement prompt by each student, same seeds (`...fresh`, needs `lookahead.fresh_samples`)",
    "pass<k>_fresh_lo": "its 95% interval over prompts, lower end",
    "pass<k>_fresh_hi": "upper end",
    "forgetting_pass1": "change of pass@1 on the forgetting set from `lookahead.forgetting_samples` samples of every "
                        "problem by each student, same seeds; negative: forgetting (`...forgetting`, needs "
                        "`lookahead.forgetting`; the three columns only where it was given)",
    "forgetting_pass1_lo": "its 95% interval over problems, lower end",
    "forgetting_pass1_hi": "upper end",
    "forgetting_ll": "mean per-token log-likelihood change of the initial student's correct forgetting samples under "
                     "the stepped student, mean over problems; negative: forgetting, seen where no sample flips "
                     "(`...forgetting_ll`, with `lookahead.forgetting`)",
    "forgetting_kl": "KL(stepped ‖ initial student) per token at the forgetting samples' positions",
    "reference_ll": "mean per-token log-likelihood change of each measurement problem's reference response under the "
                    "stepped student, mean over problems; positive: the step made a known-good solution of an unseen "
                    "problem likelier (`...reference_ll`, with `lookahead.reference`; both columns only then)",
    "reference_kl": "KL(stepped ‖ initial student) per token at the reference responses' positions",
}


def _est(ci: CI | None) -> float:
    return math.nan if ci is None or ci.estimate is None else float(ci.estimate)


def _acting(entry: IdealConfig | None) -> dict:
    if entry is None:
        return {}
    return {"teacher_advantage_acting": _est(entry.teacher_advantage.get("all")),
            "teacher_advantage_acting_correct": _est(entry.teacher_advantage.get("correct")),
            "teacher_advantage_acting_incorrect": _est(entry.teacher_advantage.get("incorrect")),
            "teacher_advantage_acting_reliability": _num(entry.reliability.get("teacher_advantage")),
            **{f"gain_acting_{o}": _est(entry.gain.get(o, {}).get("all")) for o in OBJECTIVES}}


def _num(v) -> float:
    return math.nan if v is None else float(v)


def config_frame(s: Summary) -> pd.DataFrame:
    """One row per teacher config with ``CONFIG_COLUMNS`` (levels and objectives expanded)."""
    ideal = s.ideal if s.ideal is not None and s.ideal.status == "ok" else None
    levels = sorted({lv for e in s.configs.values() for lv in e.accuracy_gap_by_level},
                    key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit() else 0, v))
    fixed = [c for c in CONFIG_COLUMNS if "<" not in c]
    columns = [*fixed[:3], *(f"accuracy_gap_level_{lv}" for lv in levels), *fixed[3:], *(f"gain_acting_{o}"
                                                                                           for o in OBJECTIVES)]
    rows = []
    for c, e in s.configs.items():
        cols = e.overall.columns
        mean = {k: _num(cols[k].mean) if k in cols else math.nan for k in ("teachability", "topk_overlap")}
        today = ideal.configs.get(c) if ideal else None
        rows.append({"config": c, "accuracy_gap": _est(e.teacher_minus_student_accuracy),
                     "normalised_accuracy_gap": _num(e.normalised_accuracy_gap),
                     **{f"accuracy_gap_level_{lv}": _est(ci) for lv, ci in e.accuracy_gap_by_level.items()}, **mean,
                     "high_entropy_student": _num(e.high_entropy_share.student),
                     "high_entropy_teacher": _num(e.high_entropy_share.teacher),
                     "teacher_advantage": _est(today.teacher_advantage.get("all")) if today else math.nan,
                     "teacher_advantage_reliability": _num(today.reliability.get("teacher_advantage"))
                     if today else math.nan,
                     **_acting(ideal.acting.get(c) if ideal else None)})
    frame = pd.DataFrame(rows, columns=columns)
    frame[columns[1:]] = frame[columns[1:]].astype(float)  # None -> NaN, a missing acting result NaN too
    return frame


def lookahead_frame(s: Summary) -> pd.DataFrame | None:
    """One row per (config, loss method) looked ahead with ``LOOKAHEAD_COLUMNS``, or None without a lookahead."""
    la = s.lookahead
    if la is None or la.status != "ok":
        return None
    ks = sorted({int(k.removeprefix("pass@")) for c in la.configs for m in la.configs[c]
                 if (r := la.result(c, m)) is not None for k in r.fresh})
    forgets = la.forgetting_prompts is not None  # the columns of a lookahead that measured a forgetting set
    refs = la.reference_prompts is not None  # ... that scored reference responses
    columns = ["config", "method", "dv", "dv_lo", "dv_hi", "dll", "kl",
               *(f"pass{k}_fresh{x}" for k in ks for x in ("", "_lo", "_hi")),
               *([f"forgetting_pass1{x}" for x in ("", "_lo", "_hi")] + ["forgetting_ll", "forgetting_kl"]
                 if forgets else []), *(["reference_ll", "reference_kl"] if refs else [])]
    rows = []
    for c, methods in la.configs.items():
        for m in methods:
            r = la.result(c, m)
            if r is None:
                continue
            row = {"config": c, "method": m, "dv": _est(r.dv), "dv_lo": _num(r.dv and r.dv.lo),
                   "dv_hi": _num(r.dv and r.dv.hi), "dll": _est(r.dll), "kl": _est(r.kl)}
            for k in ks:
                ci = r.fresh.get(f"pass@{k}")
                row.update({f"pass{k}_fresh": _est(ci), f"pass{k}_fresh_lo": _num(ci and ci.lo),
                            f"pass{k}_fresh_hi": _num(ci and ci.hi)})
            if forgets:
                ci = r.forgetting.get("pass@1")
                row.update({"forgetting_pass1": _est(ci), "forgetting_pass1_lo": _num(ci and ci.lo),
                            "forgetting_pass1_hi": _num(ci and ci.hi), "forgetting_ll": _est(r.forgetting_ll),
                            "forgetting_kl": _est(r.forgetting_kl)})
            if refs:
                row.update({"reference_ll": _est(r.reference_ll), "reference_kl": _est(r.reference_kl)})
            rows.append(row)
    frame = pd.DataFrame(rows, columns=columns)
    frame[columns[2:]] = frame[columns[2:]].astype(float)
    return frame
