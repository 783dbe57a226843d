"""An exploration (not pre-registered; it chooses nothing by itself), after the split of the shipped forgetting
model by what the forgetting set is (CHECKS.md): where the forgetting set is a second skill the training never shows,
does anything the diagnosis has rank the realised forgetting better than the shipped column, which follows the
predicted gain? A second skill is lost by moving the policy, not by learning the task, so the candidates are how far
a row moves the student: the shipped drift model's prediction, the lookahead's KL, the teacher's distance (mean JSD);
beside the gain's own proxies (predicted gain, G, teachability) and two ceilings no predictor has (the realised KL to
the initial student and the realised Δpass@1).

Rows: every world checked since the seventh look (report_checks), each with the shipped models as it was checked;
per forgetting set, the Spearman with the realised d_regression pooled over rows and as the mean of per-world
coefficients. A column where lower means more forgetting (a distance) is negated so that + means it ranks the
realised change the right way round.

    python benchmarks/validity/v2/explore_forgetting_skill.py > benchmarks/validity/v2/explore_forgetting_skill.txt

Reading of its output (explore_forgetting_skill.txt): where the forgetting set is a second skill, the realised
forgetting follows how far training moved the policy (the realised KL to the initial student ranks it at +0.73
pooled) and hardly the gain (the realised Δpass@1, +0.32); on the task's easy levels it is the other way round. The
diagnosis ranks the realised KL at +0.68, so the columns that see distance reach about +0.5 (the predicted drift +0.49,
mean JSD +0.52, teachability +0.53) against the shipped column's +0.47, and refitted on the second-skill worlds leave
one world out no model passes +0.53 pooled. A second skill's 0.70 needs a better prediction of how far a run moves the
policy, not a new weighting of these columns; no look follows.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_checks as rc  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.check_world import forgetting_by_set, second_skill  # noqa: E402
from benchmarks.validity.v2.looks import shipped_gain  # noqa: E402


REFITS = {"the shipped forgetting model's features": ["accuracy_gap", "lookahead_dv", "lookahead_dll", "lookahead_kl",
                                                      "teachability", "mean_jsd", "is_jsd"],
          "teachability and mean JSD": ["teachability", "mean_jsd"]}


LAST = "porphyry"  # the last world checked when this was written: later checks leave its output as it is


def worlds() -> list[str]:
    """The plan's five, then every world checked with the eighth look's ranking up to ``LAST`` and the ninth look's
    added world (report_checks' order)."""
    later = rc.since_look8()
    planned = [*yaml.safe_load(rc.PLAN.read_text())["worlds"], *later[:later.index(LAST) + 1], later[-1]]
    return [w for w in planned if rc.status(w) == "checked"]


def columns(rows: list[dict]) -> dict[str, np.ndarray]:
    """Each candidate, signed so that + ranks the realised forgetting-set change the right way round."""
    model = rc.as_checked()  # the forgetting and drift models no look replaced before these checks
    num = lambda k: np.array([v2._num(r[k]) for r in rows])  # noqa: E731
    return {"shipped forgetting": shipped_gain(rows, model, "v2", "d_regression"),
            "predicted gain": shipped_gain(rows, model, "v2", "d_pass1"),
            "G": num("accuracy_gap"), "teachability": num("teachability"),
            "-predicted drift": -shipped_gain(rows, model, "v2", "kl_to_initial"),
            "-lookahead KL": -num("lookahead_kl"),
            "-mean JSD": -num("mean_jsd"),
            "-realised KL (ceiling)": -v2.target(rows, "kl_to_initial"),
            "realised d_pass1 (ceiling)": v2.target(rows, "d_pass1")}


def main() -> int:
    names = worlds()
    rows = [r for w in names for r in rc.rows_of(w)]
    cols = columns(rows)
    by_set = {name: forgetting_by_set(rows, x) for name, x in cols.items()}  # the shipped column's split is CHECKS.md's
    print(f"Spearman with the realised d_regression, {len(rows)} rows of the {len(names)} worlds checked since the "
          "seventh look")
    print(f"{'forgetting set':28s} {'column':28s} {'pooled':>7s} {'mean of worlds':>15s}")
    for label, key in (("a second skill", "second_skill"), ("the task's easy levels", "easy_levels")):
        n = by_set["shipped forgetting"][key]["worlds"]
        for name, d in by_set.items():
            print(f"{label + f' ({n})':28s} {name:28s} {d[key]['spearman']:+7.2f} {d[key]['mean_of_worlds']:+15.2f}")
    skill = {w: second_skill(w) for w in names}
    k = np.array([skill[r["world"]] for r in rows])
    skilled = [r for r, kept in zip(rows, k) if kept]
    kl, drift = v2.target(skilled, "kl_to_initial"), -cols["-predicted drift"][k]
    k = np.isfinite(kl) & np.isfinite(drift)
    print(f"a second skill: the shipped drift model ranks the realised KL at {stats.spearman(drift[k], kl[k]):+.2f} "
          "pooled; refitted there leave one world out (ridge, standardised), the forgetting model ranks the "
          "realised forgetting at:")
    y = v2.target(skilled, "d_regression")
    for name, features in REFITS.items():
        for alpha in (1.0, 10.0):
            x = v2.lowo(skilled, features, "d_regression", alpha, inner=False)["pred"]
            k = np.isfinite(x) & np.isfinite(y)
            sub = [r for r, kept in zip(skilled, k) if kept]
            print(f"  {name + f', alpha {alpha:g}':52s} {stats.spearman(x[k], y[k]):+7.2f} pooled "
                  f"{v2.per_world(x[k], sub, 'd_regression')['mean']:+7.2f} mean of worlds")
    return 0


if __name__ == "__main__":
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    sys.exit(main())
