"""Does the drift the product now predicts say how much the recommendation will help? A descriptive exploration
(committed before it ran; it chooses and fits nothing).

explore_size_drift.py found the mechanism and no predictor of it: across the worlds the first look never fitted on,
how far training moved the student (the recommended row's realised KL to the initial student, an outcome) ranked what
that row realised at +0.71, while the drift model then shipped ranked it at -0.39. The thirteenth look replaced that
model by the same ridge fitted to ln KL (plan_look13.yaml): on the 37 never-fitted worlds its prediction falls within a
factor of 3 of the realised KL on 70% of rows, so unlike the raw model it may also see a world's level of movement.
What the author had seen when writing this: everything in RESULTS_look13.md (row-level error and within-world
Spearman per world) and explore_size_drift.txt; no figure of the log model across worlds for the recommended row.

Per world with committed rows and a row with G > 0 (the recommended row as explore_recommended_size picks it, from the
model file as it is now): its predicted gain, its predicted drift (the shipped log model, the product's tier), G times
that drift, and its realised KL (an outcome: whether the mechanism holds on these worlds too). Across the worlds the
first look never fitted on (neither the gain nor the drift model was fitted on them) and across all: the Spearman of
each column with what the recommended row realised, and the AUROC for "realised below +0.02" (low values flag).

Rule, written before it ran (explore_size_floor.size_rule, the rule of explore_coherence and explore_early_read): if
predicted_drift or g_drift reaches Spearman >= +0.5 with AUROC >= 0.85 over the never-fitted worlds, a look follows
that sizes the recommendation by it, judged on worlds built after its plan; otherwise none.

Reading of its output (explore_size_logdrift.txt): no. Across the 42 never-fitted worlds the recommended row's
predicted drift ranks what it realised at -0.38 (AUROC 0.45 for "about nothing"), G times it at -0.33, and the
predicted gain itself at -0.30, while the realised KL still ranks it at +0.72. The log model orders a world's rows by
how far they will move the student (+0.78 within worlds, RESULTS_look13.md); it does not see which worlds' students
will move at all. The rule did not fire: no look follows.

    python benchmarks/validity/v2/explore_size_logdrift.py > benchmarks/validity/v2/explore_size_logdrift.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look11 as look11  # noqa: E402
from benchmarks.validity.v2 import report_look13 as look13  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import recommended_rows  # noqa: E402
from benchmarks.validity.v2.explore_size_floor import across_worlds, size_figures, size_rule  # noqa: E402
from benchmarks.validity.v2.looks import by_tier, model_file, shipped_gain  # noqa: E402

COLUMNS = ("predicted", "predicted_drift", "g_drift", "realised_kl")
PREDICTORS = ("predicted_drift", "g_drift")


def worlds() -> list[str]:
    """Every world with committed rows: the eleventh look's seen worlds, then those added by looks 11 to 13."""
    p = look11.plan()["seen_worlds"]
    return [*p["fitted_by_look1"], *p["never_fitted"], *look11.added_worlds()[1], *look13.added_worlds()[1]]


def table() -> dict[str, dict]:
    shipped = model_file(16)
    out = {}
    for w, rec in recommended_rows(shipped, list(dict.fromkeys(worlds()))).items():
        rows = look2.load_rows({"worlds": [w]})
        drift = by_tier({t: shipped_gain(rows, shipped, t, "kl_to_initial") for t in ("v2", "v2_no_lookahead")},
                        rows)
        i = next(j for j, r in enumerate(rows) if f"{r['config']}/{r['method']}" == rec["row"])
        out[w] = {"row": rec["row"], "realised": rec["realised"], "fitted": w in look8.FITTED,
                  "predicted": rec["predicted"], "predicted_drift": float(drift[i]),
                  "g_drift": max(rec["accuracy_gap"], 0.0) * float(drift[i]),
                  "realised_kl": v2._num(rows[i]["kl_to_initial"]["estimate"])}
    return out


def render(rows: dict[str, dict]) -> str:
    lines = ["Per world: the recommended row, what it realised, its predicted gain and drift (the model file as it is "
             "now), G times that drift, and how far it moved the student (realised; * the shipped models were fitted "
             "on it)", "", f"{'world':<20}{'row':<24}{'realised':>9}" + "".join(f"{c[:16]:>17}" for c in COLUMNS)]
    for w, r in rows.items():
        lines.append(f"{w + (' *' if r['fitted'] else ''):<20}{r['row']:<24}{r['realised']:>+9.3f}"
                     + "".join(f"{r[c]:>+17.4f}" for c in COLUMNS))
    never = [w for w, r in rows.items() if not r["fitted"]]
    fired = size_rule(size_figures(rows, never, PREDICTORS))
    return "\n".join(lines + across_worlds(rows, COLUMNS) + [
        "", f"rule (Spearman >= +0.5 and AUROC >= 0.85 over the never-fitted worlds, predicted_drift or g_drift): "
        f"{'fired: a look follows' if fired else 'did not fire: no look follows'}"])


if __name__ == "__main__":
    print(render(table()))
