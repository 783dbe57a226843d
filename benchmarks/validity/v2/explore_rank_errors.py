"""An exploration after the sixth look, kept as a look (not pre-registered): where does the product's ranking (G, the
shipped method order, v2's gain: ``looks.product_order``) misplace rows within a world? Per world of the twelve seen
so far: its Spearman with the realised Δpass@1, and the rows whose rank error (product rank minus realised rank,
both within the world, 1 = best) is largest, with the columns a new rule could read. Not a result: a rule chosen from
it must be judged on a world built after its plan.

    python benchmarks/validity/v2/explore_rank_errors.py > benchmarks/validity/v2/explore_rank_errors.txt
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402
from scipy.stats import rankdata, spearmanr  # noqa: E402

from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_look6 as R  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import product_order, shipped_gain  # noqa: E402

shipped = json.loads((Path(__file__).resolve().parents[3] / "opsd_diag/data/predictor_v2.json").read_text())
rows = L.load_rows({"worlds": R.worlds()})
world = np.array([r["world"] for r in rows])
gain = shipped_gain(rows, shipped)
y = np.array([v2._num(r["d_pass1"]["estimate"]) for r in rows])
per = []
for w in sorted(set(world)):
    k = np.flatnonzero(world == w)
    sub = [rows[i] for i in k]
    s = product_order(sub, gain[k], "sign_of_g")
    rp, ry = rankdata(-s), rankdata(-y[k])
    rho = float(spearmanr(s, y[k])[0])
    per.append(rho)
    print(f"\n{w}: Spearman {rho:+.2f}, {len(k)} rows (rank error = product rank - realised rank; + = ranked too low)")
    for j in np.argsort(-np.abs(rp - ry))[:5]:
        r = sub[j]
        print(f"  {r['config']:16s} {r['method']:9s} err {rp[j] - ry[j]:+5.1f}  realised {y[k][j]:+.3f} "
              f"[{r['d_pass1']['lo']:+.2f}, {r['d_pass1']['hi']:+.2f}]  G {v2._num(r['accuracy_gap']):+.2f}  "
              f"teach {v2._num(r['teachability']):+.2f}  jsd {v2._num(r['mean_jsd']):.3f}  "
              f"fresh {v2._num(r['lookahead_fresh']):+.3f}  kl {v2._num(r['lookahead_kl']):.4f}  v2 {gain[k][j]:+.3f}")
print(f"\nmean of worlds {np.mean(per):+.2f}")
