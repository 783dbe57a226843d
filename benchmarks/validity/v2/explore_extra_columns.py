"""Would a column the diagnosis already writes, added to the shipped gain model, rank better? A look at seen worlds
(it ships nothing; written after explore_recommended_miss.py, whose misses had larger G, JSD and reverse KL than the
rows that helped).

Over the 87 worlds CHECKS.md held when it was written (explore_recommended_miss.worlds(): all already read), each
candidate is the sixteenth look's gain model (the first look's tiers plus max(G, 0) x (1 - teachability) and
max(G, 0) x mean JSD) with one more column, refitted leave-one-world-out over those worlds (ridge, alpha and
standardisation as shipped, no inner fold), and ranked as the product ranks (v2_config). Reported: the mean per-world
Spearman with the realised held-out Δpass@1, and its difference from the same refit without the column (worlds above
and below).

Reading of its output (explore_extra_columns.txt): no column moves the ranking by more than +0.006 on average (the
best, max(G, 0) x alignment, +0.006, above in 30 worlds and below in 15); a squared G lowers it. As the issue said of
reweighting today's columns, they hold little the gain model lacks: the misses of explore_recommended_miss.py need a
column that tells whether a teacher's lead comes from the answer or from the steps. Nothing here is a candidate.

    python benchmarks/validity/v2/explore_extra_columns.py > benchmarks/validity/v2/explore_extra_columns.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import explore_recommended_miss as miss  # noqa: E402
from benchmarks.validity.v2 import report_checks as rc  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_look12 as look12  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import by_tier  # noqa: E402

COLUMNS = ("mean_rev_kl", "alignment", "high_entropy_share", "topk_overlap")
PRODUCTS = {"g_sq": "accuracy_gap", "g_far_revkl": "mean_rev_kl", "g_align": "alignment",
            "g_hi_ent": "high_entropy_share"}  # max(G, 0) times the column (g_sq: max(G, 0) squared)
CANDIDATES = {"v2_far": [], **{f"+{c}": [c] for c in (*COLUMNS, *PRODUCTS)}}


def rows() -> list[dict]:
    out = [r for w in miss.worlds() for r in rc.rows_of(w)]
    for r in out:
        g = v2._num(r["accuracy_gap"])
        gp = max(g, 0.0) if np.isfinite(g) else np.nan
        for name, col in PRODUCTS.items():
            r[name] = gp * (gp if col == "accuracy_gap" else v2._num(r.get(col)))
    return out


def main() -> None:
    data, alpha = rows(), look10.design()["alpha"]
    preds = {}
    for name, extra in CANDIDATES.items():
        folds = {t: v2.lowo(data, [*f, *extra], "d_pass1", alpha, inner=False) for t, f in look12.tiers().items()}
        preds[name] = by_tier({t: folds[t]["pred"] for t in folds}, data)
    per = {k: v2.per_world(x, data, "d_pass1")["worlds"] for k, x in look10.orders(data, preds).items()}
    worlds = sorted(per["v2_far"])
    base = np.array([per["v2_far"][w] for w in worlds])
    print(f"{len(worlds)} worlds, {len(data)} rows; leave-one-world-out, ranked as the product ranks (v2_config)")
    for k in per:
        vals = np.array([per[k][w] for w in worlds])
        d = vals - base
        print(f"{k:22} mean per-world Spearman {np.nanmean(vals):+.4f}; minus v2_far refitted {np.nanmean(d):+.4f} "
              f"(above in {int((d > 1e-9).sum())}, below in {int((d < -1e-9).sum())})")


if __name__ == "__main__":
    main()
