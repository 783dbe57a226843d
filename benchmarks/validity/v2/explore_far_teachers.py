"""Among the rows where the teacher is far above its student (G >= 0.55), what tells the rows training improved from
those where nothing happened? A descriptive exploration (it chooses and fits nothing), written after the eleventh
look's table showed that its top decile of predicted gain is 91% such rows, two thirds of which changed nothing.

Over the 44 seen worlds of plan_look11.yaml (their committed rows only; no world built after that plan), per
diagnosis column: its Spearman with the realised Δpass@1 over the rows with G >= 0.55, and the probability that an
improved row has a higher value than a row with no clear change (AUC, ties half).

Reading of its output (explore_far_teachers.txt): the lookahead does not separate them (AUC 0.52-0.53; its fresh
success change, measured on 34 of the rows, 0.34), but the teacher's closeness to the student does: teachability AUC
0.83 (Spearman +0.62 with the realised change), the mean JSD 0.13 (Spearman -0.60). A teacher far above its student
helps where its distribution stays near the student's. The shipped ridge is additive: it cannot say that closeness
matters more the larger G is. That reading is what the twelfth look (plan_look12.yaml) tests, on worlds built after
its plan; these 44 worlds suggested it, so they are no fair test of it.

    python benchmarks/validity/v2/explore_far_teachers.py > benchmarks/validity/v2/explore_far_teachers.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look11 as look11  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

FAR = 0.55
COLUMNS = ("lookahead_dv", "lookahead_dll", "lookahead_kl", "lookahead_fresh", "teachability", "mean_jsd", "is_jsd")


def auc(a: np.ndarray, b: np.ndarray) -> float:
    """P(a value of ``a`` > one of ``b``), ties half: the Mann-Whitney U of ``a`` over the pairs (NaN without any)."""
    if not len(a) or not len(b):
        return float("nan")
    return float(mannwhitneyu(a, b).statistic / (len(a) * len(b)))


def report() -> dict:
    p = look11.plan()["seen_worlds"]
    rows = look2.load_rows({"worlds": [*p["fitted_by_look1"], *p["never_fitted"]]})
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    y = v2.target(rows, "d_pass1")
    cls = np.array(look11.realised(rows))
    far = g >= FAR
    w = np.array([r["world"] for r in rows])
    both = [n for n in sorted(set(w[far])) if {"improves", "no clear change"} <= set(cls[far & (w == n)])]
    out = {"n_worlds": len({r["world"] for r in rows}), "n_far": int(far.sum()),
           "far_worlds": len(set(w[far])), "both_worlds": both,
           "classes": {c: int((cls[far] == c).sum()) for c in look11.CLASSES}, "columns": {}}
    for c in COLUMNS:
        x = np.array([v2._num(r.get(c)) for r in rows])
        k = far & np.isfinite(x) & np.isfinite(y)
        out["columns"][c] = {"n": int(k.sum()), "spearman": float(stats.spearman(x[k], y[k])),
                             "auc": auc(x[k & (cls == "improves")], x[k & (cls == "no clear change")]),
                             "within": float(np.nanmean([auc(x[k & (w == n) & (cls == "improves")],
                                                             x[k & (w == n) & (cls == "no clear change")])
                                                         for n in both]))}
    return out


def render(r: dict) -> str:
    lines = [f"Rows with G >= {FAR} over the {r['n_worlds']} seen worlds of plan_look11.yaml: {r['n_far']} "
             f"({', '.join(f'{k} {v}' for k, v in r['classes'].items())})", "",
             f"They come from {r['far_worlds']} worlds; {len(r['both_worlds'])} have both an improved row and one with no "
             f"clear change among them ({', '.join(r['both_worlds'])}): 'within' is the mean of the AUC inside each.",
             "", "column            rows  Spearman with realised  AUC improves vs no clear change  within"]
    for c, d in r["columns"].items():
        lines.append(f"{c:16s}  {d['n']:4d}  {d['spearman']:+.2f}                   {d['auc']:.2f}"
                     f"                             {d['within']:.2f}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(report()))
