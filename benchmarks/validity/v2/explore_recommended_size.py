"""Does the headline number say how much the recommendation will help? A descriptive exploration (committed before it
ran; it chooses and fits nothing).

The decision panel leads with one row, the best-ranked with G > 0, and its predicted held-out Δpass@1 with a 95%
interval ("v2 predicts +0.203 [-0.174, +0.763]"). The ranking's Spearman asks whether the rows of one world come in the
right order; a user deciding whether to spend the run at all also needs the size. Per world with committed rows and a
row with G > 0: that row's predicted gain and interval (the shipped model file, the product's tier), its G, and its
realised Δpass@1. Across the worlds the first look never fitted on (and across all, the seven in-sample): the Spearman
of the predicted gain and of G with the realised change of the recommended row; the mean predicted and realised; the
share of the recommended rows whose interval covers what they realised; and the worlds where the recommendation
realised less than +0.02 (about nothing) beside what was predicted for them.

Reading of its output (explore_recommended_size.txt): no, it points the wrong way. Across the 28 worlds the first look
never fitted on, the recommended row's predicted gain ranks what it realised at -0.46 (its G -0.26): the larger the
prediction, the less the recommendation realised. The seven worlds where it realised less than +0.02 (crossed, cinder,
flint, hearth, marl, shale, umber) had predictions of +0.10 to +0.29, and five of them a G of +0.55 or more: a teacher
shown the solution, far above a student that does not learn from it. The mean prediction (+0.126) is half the mean
realised (+0.241); the interval covers 27 of 28 because it is about 0.94 wide. The predicted gain orders the rows of a
diagnosis; it does not say how much the best of them will help. CHECKS.md and the decision panel now say so
(report_checks.recommended_size, over the worlds built after the ranking shipped).

    python benchmarks/validity/v2/explore_recommended_size.py > benchmarks/validity/v2/explore_recommended_size.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_rank_parts import worlds  # noqa: E402
from benchmarks.validity.v2.looks import model_file, product_order, tier_interval  # noqa: E402

SMALL = 0.02


def recommended_rows(shipped: dict, names: list[str] | None = None) -> dict[str, dict]:
    """Per world (``names``, default ``worlds()``), the recommended row's predicted gain, interval, G and realised
    Δpass@1."""
    out = {}
    for w in worlds() if names is None else names:
        rows = look2.load_rows({"worlds": [w]})
        gain, lo, hi = tier_interval(shipped["models"], rows)
        score = product_order(rows, gain, "v2_config")
        k = [i for i, r in enumerate(rows) if v2._num(r["accuracy_gap"]) > 0]
        if k:
            i = max(k, key=lambda j: score[j])
            out[w] = {"row": f"{rows[i]['config']}/{rows[i]['method']}", "predicted": float(gain[i]),
                      "lo": float(lo[i]), "hi": float(hi[i]), "accuracy_gap": float(rows[i]["accuracy_gap"]),
                      "realised": float(rows[i]["d_pass1"]["estimate"]), "source": rows[i]}
    return out


def summary(rec: dict[str, dict], names: list[str]) -> dict:
    p, g, y = (np.array([rec[w][k] for w in names]) for k in ("predicted", "accuracy_gap", "realised"))
    covered = [rec[w]["lo"] <= rec[w]["realised"] <= rec[w]["hi"] for w in names]
    return {"n": len(names), "spearman_predicted": stats.spearman(p, y), "spearman_g": stats.spearman(g, y),
            "mean_predicted": float(p.mean()), "mean_realised": float(y.mean()), "covered": int(sum(covered)),
            "small": [w for w in names if rec[w]["realised"] < SMALL]}


def report() -> dict:
    rec = recommended_rows(model_file(16))
    never = [w for w in rec if w not in look8.FITTED]
    return {"rows": rec, "never_fitted": summary(rec, never), "all": summary(rec, list(rec))}


def render(res: dict) -> str:
    lines = ["The row the product recommends (best-ranked with G > 0) per world: its predicted held-out Δpass@1 [95%], "
             "its G and what it realised", ""]
    for w, r in res["rows"].items():
        tag = " *" if w in look8.FITTED else ""
        lines.append(f"{w + tag:20s} {r['row']:24s} predicted {r['predicted']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]  "
                     f"G {r['accuracy_gap']:+.3f}  realised {r['realised']:+.3f}")
    lines.append("(* the shipped models were fitted on it)")
    for name in ("never_fitted", "all"):
        s = res[name]
        lines += ["", f"{name.replace('_', ' ')} ({s['n']} worlds): Spearman with what the recommended row realised: "
                  f"its predicted gain {s['spearman_predicted']:+.2f}, its G {s['spearman_g']:+.2f}; mean predicted "
                  f"{s['mean_predicted']:+.3f}, mean realised {s['mean_realised']:+.3f}; its interval covers "
                  f"{s['covered']} of {s['n']}",
                  f"  realised below +{SMALL:.2f} in {len(s['small'])}: " + ", ".join(
                      f"{w} (predicted {res['rows'][w]['predicted']:+.3f}, G {res['rows'][w]['accuracy_gap']:+.3f})"
                      for w in s["small"])]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(report()))
