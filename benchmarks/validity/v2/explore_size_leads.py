"""After explore_recommended_size.txt (the recommended row's predicted gain runs against what it realises across
worlds): does any column the diagnosis already has say how much the recommendation will help? A descriptive
exploration (committed before it ran; it chooses and fits nothing): a lead for a later look, not a rule.

Per world with committed rows, the recommended row of explore_recommended_size.py and, fixed before this ran, these
columns of it: its predicted gain and G (for reference), the handoff of its configuration (explore_handoff.py's kept
rows; worlds measured there only), and its own teachability, mean JSD, lookahead success change (``lookahead_dv``) and
lookahead KL. For each, the Spearman across the worlds the first look never fitted on with what the recommended row
realised, and the number of worlds it covers.

Reading of its output (explore_size_leads.txt): three columns point the right way, none strongly. The handoff of the
recommended configuration reaches +0.39 (21 worlds measured), the row's teachability +0.39 and its lookahead success
change +0.34, against the predicted gain's -0.46 and G's -0.26. A size worth showing would need a look of its own,
fitted across worlds and judged on new ones; these are where it could start.

    python benchmarks/validity/v2/explore_size_leads.py > benchmarks/validity/v2/explore_size_leads.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import explore_handoff as handoff  # noqa: E402
from benchmarks.validity.v2 import explore_recommended_size as size  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import model_file  # noqa: E402

COLUMNS = ("predicted", "accuracy_gap", "handoff", "teachability", "mean_jsd", "lookahead_dv", "lookahead_kl")


def leads() -> dict:
    rec = size.recommended_rows(model_file(16))
    kept = json.loads(handoff.KEPT.read_text())
    values = {}
    for w, r in rec.items():
        row = r["source"]
        h = handoff.config_row(kept, w, row)
        values[w] = {"realised": r["realised"], "predicted": r["predicted"], "accuracy_gap": r["accuracy_gap"],
                     "handoff": h.get("handoff", np.nan),
                     **{c: v2._num(row[c]) for c in ("teachability", "mean_jsd", "lookahead_dv", "lookahead_kl")}}
    never = [w for w in values if w not in look8.FITTED]
    out = {}
    for c in COLUMNS:
        ws = [w for w in never if np.isfinite(values[w][c])]
        x, y = (np.array([values[w][k] for w in ws]) for k in (c, "realised"))
        out[c] = {"spearman": stats.spearman(x, y) if len(ws) > 2 else None, "n": len(ws)}
    return {"per_column": out, "n_never_fitted": len(never)}


def render(res: dict) -> str:
    lines = [f"Across the {res['n_never_fitted']} worlds the first look never fitted on: Spearman of a column of the "
             "recommended row with what it realised (n: worlds where the column is measured)", ""]
    for c, d in res["per_column"].items():
        rho = "n/a" if d["spearman"] is None else f"{d['spearman']:+.2f}"
        lines.append(f"{c:14s} {rho:>6s}  (n = {d['n']})")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(leads()))
