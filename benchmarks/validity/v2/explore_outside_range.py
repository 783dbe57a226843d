"""An exploration (committed before it was run; it chooses nothing): on worlds the shipped models were never fitted
on, how many rows lie outside the range of the rows they were fitted on (``core.predictor.outside``, the product's
``outside_range``), and are those rows' predictions worse?

Per world v2 was never fitted on: the rows, the share with any feature of the product's tier (v2 with a lookahead
result, v2_no_lookahead without) outside the model's fitted range, and which features. Pooled over those worlds:
the mean absolute error of the predicted held-out delta pass@1 (realised minus predicted) inside and outside the
range, with a cluster bootstrap over worlds of the difference, and the share of each group whose realised change
lies inside the 95% interval the product shows.

    python benchmarks/validity/v2/explore_outside_range.py > benchmarks/validity/v2/explore_outside_range.txt

Reading of its output (explore_outside_range.txt): on worlds built after the fit, two rows in five lie outside the
range on some feature (most often G above the seven worlds' largest gap, or a lookahead column), and their
predictions err more: mean absolute error 0.210 against 0.143 inside, a difference whose cluster-bootstrap interval
lies above 0, with coverage of the shown interval 93% against 99%. So the flag the product shows marks predictions
to trust less; it changes no prediction, ranking or verdict (nothing here was chosen on these worlds).
"""
from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.v2.explore_tier_ranking import LATER  # noqa: E402
from benchmarks.validity.v2.looks import has_lookahead, model_file  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

def rows_of(w: str, shipped: dict) -> list[dict]:
    """Each row with the product's tier, its predicted gain and interval, the features outside the range."""
    out = []
    rows = look2.load_rows({"worlds": [w]})
    for r, has in zip(rows, has_lookahead(rows)):
        tier = "v2" if has else "v2_no_lookahead"
        m = shipped["models"][tier]["d_pass1"]
        X = v2.matrix([r], m["features"])
        gain = float(model.predict(m, X)[0])
        far = [f for f, o in zip(m["features"], model.outside(m, X)[0]) if o]
        out.append({"world": w, "gain": gain, "lo": gain + m["residual_band"][0], "hi": gain + m["residual_band"][1],
                    "realised": v2._num(r["d_pass1"]["estimate"]), "outside": far})
    return out


def main() -> int:
    shipped = model_file(16)
    worlds = [w for w in dict.fromkeys([*WORLDS, *LATER]) if w not in look8.FITTED]
    print(f"{'world':12s} rows  outside  features outside the fitted range (rows)")
    rows = []
    for w in worlds:
        rs = rows_of(w, shipped)
        rows += rs
        n_out = sum(bool(r["outside"]) for r in rs)
        names = Counter(f for r in rs for f in r["outside"])
        print(f"{w:12s} {len(rs):4d}  {n_out:4d}     " + (", ".join(f"{f} {k}" for f, k in sorted(names.items()))
                                                          or "-"))
    ok = [r for r in rows if math.isfinite(r["realised"])]
    err = {k: [abs(r["realised"] - r["gain"]) for r in ok if bool(r["outside"]) == k] for k in (False, True)}
    cover = {k: np.mean([r["lo"] <= r["realised"] <= r["hi"] for r in ok if bool(r["outside"]) == k])
             for k in (False, True) if err[k]}
    rng = np.random.default_rng(0)
    by = {w: [r for r in ok if r["world"] == w] for w in worlds}
    diffs = []
    for _ in range(2000):
        pick = [r for w in rng.choice(worlds, len(worlds)) for r in by[w]]
        a = [abs(r["realised"] - r["gain"]) for r in pick if r["outside"]]
        b = [abs(r["realised"] - r["gain"]) for r in pick if not r["outside"]]
        if a and b:
            diffs.append(np.mean(a) - np.mean(b))
    lo, hi = np.quantile(diffs, [0.025, 0.975]) if diffs else (math.nan, math.nan)
    print(f"\npooled over the {len(worlds)} worlds v2 was never fitted on ({len(ok)} rows):")
    for k, name in ((False, "inside"), (True, "outside")):
        if err[k]:
            print(f"  {name:8s} {len(err[k]):4d} rows: mean |realised - predicted| {np.mean(err[k]):.3f}; "
                  f"95% interval covers {cover[k]:.0%}")
    print(f"  outside minus inside, mean |error|: {np.mean(err[True]) - np.mean(err[False]):+.3f} "
          f"[{lo:+.3f}, {hi:+.3f}] (cluster bootstrap over worlds, 2000 draws)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
