"""Where did the fourteenth look's `hurts` calls miss? A descriptive exploration (committed before it ran; it chooses and
fits nothing, and no look follows from it alone).

The fourteenth look's candidate B (hurts where G <= -0.2 for a full-distribution loss) was right on 0.97 of its calls
on the 21 worlds that chose it and on 0.890 on the 28 judged worlds (RESULTS_look14.md). Per judged world and call:
the rows it called `hurts` that did not degrade (their realised Δpass@1 interval reaches 0 or above), with G, the
realised change, the predicted drift (the shipped log model, the product's tier), the lookahead KL and the realised KL
(an outcome); then, over all its calls on the judged worlds, the median of each column for the calls that degraded and
for those that did not. A later look may use what this shows only if judged on worlds built after its plan.

Reading of its output (explore_hurts_misses.txt): of B's 91 calls, 10 did not degrade, and 7 of those improved
clearly: a self-teacher shown a hint, part of the solution, another problem's or a wrong solution, G far below 0, whose
full-distribution training still raised the student's pass@1 (sorrel three times, basalt, hearth, talus, chert). The
calls that missed had moved the student less in the lookahead (median lookahead KL 0.0085 against 0.0418 for those
that degraded) and were predicted to drift less (0.24 against 0.57). A hurts call conditioned on the lookahead having
moved the student is a candidate for a later look, judged only on worlds built after its plan.

    python benchmarks/validity/v2/explore_hurts_misses.py > benchmarks/validity/v2/explore_hurts_misses.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look14 as look14  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import by_tier, model_file, shipped_gain  # noqa: E402

COLUMNS = ("accuracy_gap", "predicted_drift", "lookahead_kl", "realised_kl")


def calls() -> list[dict]:
    """B's hurts calls on the judged worlds, each with its columns and whether it degraded."""
    shipped = model_file(16)
    out = []
    for w in look14.plan()["worlds"]["judged"]:
        rows = look2.load_rows({"worlds": [w]})
        drift = by_tier({t: shipped_gain(rows, shipped, t, "kl_to_initial") for t in ("v2", "v2_no_lookahead")},
                        rows)
        said = look14.g_verdicts(rows, look14.candidates()["g_hurts"])
        for r, v, d in zip(rows, said, drift):
            if v == "hurts":
                out.append({"world": w, "row": f"{r['config']}/{r['method']}", "degraded": r["d_pass1"]["hi"] < 0,
                            "realised": r["d_pass1"]["estimate"], "lo": r["d_pass1"]["lo"], "hi": r["d_pass1"]["hi"],
                            "accuracy_gap": v2._num(r["accuracy_gap"]), "predicted_drift": float(d),
                            "lookahead_kl": v2._num(r["lookahead_kl"]),
                            "realised_kl": v2._num(r["kl_to_initial"]["estimate"])})
    return out


def render(c: list[dict]) -> str:
    missed = [x for x in c if not x["degraded"]]
    lines = [f"{len(c)} hurts calls on the {len(look14.plan()['worlds']['judged'])} judged worlds; {len(missed)} did "
             "not degrade:", "", f"{'world':<10}{'row':<26}{'realised [95%]':>26}" + "".join(f"{k:>17}" for k in COLUMNS)]
    for x in missed:
        lines.append(f"{x['world']:<10}{x['row']:<26}{x['realised']:>+10.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"
                     + "".join(f"{x[k]:>+17.4f}" for k in COLUMNS))
    lines += ["", "median over the calls:", f"{'':<26}{'n':>4}" + "".join(f"{k:>17}" for k in COLUMNS)]
    for label, group in (("degraded", [x for x in c if x["degraded"]]), ("did not degrade", missed)):
        med = [np.nanmedian([x[k] for x in group]) if group else np.nan for k in COLUMNS]
        lines.append(f"{label:<26}{len(group):>4}" + "".join(f"{m:>+17.4f}" for m in med))
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(calls()))
