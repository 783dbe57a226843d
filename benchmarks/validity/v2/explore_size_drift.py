"""Did the recommendations that realised nothing move the student at all? A descriptive exploration (committed before
it ran; it chooses and fits nothing).

Reading the rows of flint, cinder and shale (explore_size_floor.py's worlds where the recommended row realised about
nothing) suggested that training there hardly moved the policy: the recommended row's realised KL to the initial
student was 0.005 to 0.05, against about 0.09 to 0.13 in tallow and relay, which realised +0.70. If so, a diagnosis
that predicts how far training will move the student would say how much it can help. Per world (the recommended row,
as explore_recommended_size picks it): its realised KL to the initial student (an outcome, not a predictor: whether the
mechanism holds), v2's predicted drift (the shipped file's kl_to_initial model, the product's tier), its lookahead KL,
and that KL relative to the world's median over its rows (the scale of a world's lookahead differs). Per column: the
Spearman with the realised Δpass@1 across the worlds the first look never fitted on and across all, and the AUROC for
"realised below +0.02" (low values flag).

Reading of its output (explore_size_drift.txt): the mechanism holds, the diagnosis does not see it. Across the 28
never-fitted worlds, how far training moved the student (realised KL, an outcome) ranks what the recommended row
realised at +0.71 (AUROC 0.88 for "about nothing"): cinder, shale, crossed and hearth moved it by 0.002 to 0.009.
The diagnosis' columns for the same row do not: its lookahead KL +0.06, that KL relative to its world's median +0.22,
and v2's predicted drift -0.39 (it is fitted on G, so it predicts most drift where G is largest). A column that
predicts how far training will move the student would size the recommendation; four small steps do not
(explore_coherence.py tries whether the training signal agrees across problems).

    python benchmarks/validity/v2/explore_size_drift.py > benchmarks/validity/v2/explore_size_drift.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import recommended_rows  # noqa: E402
from benchmarks.validity.v2.explore_size_floor import across_worlds  # noqa: E402
from benchmarks.validity.v2.looks import before_look, by_tier, shipped_gain  # noqa: E402

COLUMNS = ("realised_kl", "predicted_drift", "lookahead_kl", "lookahead_kl_rel")


def table() -> dict[str, dict]:
    shipped = before_look(json.loads(v2.SHIPPED.read_text()), 13)  # the drift model this exploration read
    out = {}
    for w, rec in recommended_rows(shipped).items():
        rows = look2.load_rows({"worlds": [w]})
        drift = by_tier({t: shipped_gain(rows, shipped, t, "kl_to_initial") for t in ("v2", "v2_no_lookahead")},
                        rows)
        i = next(j for j, r in enumerate(rows) if f"{r['config']}/{r['method']}" == rec["row"])
        kl = np.array([v2._num(r["lookahead_kl"]) for r in rows])
        out[w] = {"row": rec["row"], "realised": rec["realised"], "fitted": w in look8.FITTED,
                  "realised_kl": v2._num(rows[i]["kl_to_initial"]["estimate"]),
                  "predicted_drift": float(drift[i]), "lookahead_kl": kl[i],
                  "lookahead_kl_rel": kl[i] / np.nanmedian(kl)}
    return out


def render(rows: dict[str, dict]) -> str:
    lines = ["Per world: the recommended row, what it realised, how far it moved the student (realised) and what the "
             "diagnosis said of that (* the shipped models were fitted on it)", "",
             f"{'world':<20}{'row':<22}{'realised':>9}" + "".join(f"{c[:16]:>17}" for c in COLUMNS)]
    for w, r in rows.items():
        lines.append(f"{w + (' *' if r['fitted'] else ''):<20}{r['row']:<22}{r['realised']:>+9.3f}"
                     + "".join(f"{r[c]:>+17.4f}" for c in COLUMNS))
    return "\n".join(lines + across_worlds(rows, COLUMNS))

if __name__ == "__main__":
    print(render(table()))
