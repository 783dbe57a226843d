"""An exploration after the sixth look, kept as a look (not pre-registered): the rank errors of the product's
ranking (explore_rank_errors.txt) sit where a sampled-token loss (opd, opd2, exopd, opsd_opd) realises far less than
its configuration's G says, in either direction, while a full-distribution loss (jsd, opsd_jsd) follows G. The
product ranks by G first, so a configuration's methods stay together. Tried here: score = G x (1 for a
full-distribution loss, c for a sampled-token one), ties broken by the shipped order, for c on a grid; per world
Spearman with the realised Δpass@1 on the twelve worlds seen so far, against the product's order. Not a result: a
rule chosen from it must be judged on a world built after its plan.

    python benchmarks/validity/v2/explore_shrink.py > benchmarks/validity/v2/explore_shrink.txt
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_look6 as R  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import product_order, shipped_gain  # noqa: E402

shipped = json.loads((Path(__file__).resolve().parents[3] / "opsd_diag/data/predictor_v2.json").read_text())
rows = L.load_rows({"worlds": R.worlds()})
world = np.array([r["world"] for r in rows])
worlds = sorted(set(world))
gain = shipped_gain(rows, shipped)
y = np.array([v2._num(r["d_pass1"]["estimate"]) for r in rows])
g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
full = np.array([r["method"] in ("jsd", "opsd_jsd") for r in rows])


def per_world(score) -> list[float]:
    return [float(spearmanr(score[world == w], y[world == w])[0]) for w in worlds]


base = np.concatenate([product_order([rows[i] for i in np.flatnonzero(world == w)], gain[world == w], "sign_of_g")
                       for w in worlds])
order_idx = np.concatenate([np.flatnonzero(world == w) for w in worlds])
prod = np.empty(len(rows))
prod[order_idx] = base
ref = per_world(prod)
print("Spearman with the realised Δpass@1 per world (" + ", ".join(worlds) + ") | mean | pooled")
print("  product order        " + " ".join(f"{p:+.2f}" for p in ref) + f" | {np.mean(ref):+.2f} | "
      f"{spearmanr(prod, y)[0]:+.2f} (within-world ranks pooled are not comparable; pooled uses G: "
      f"{spearmanr(g, y)[0]:+.2f})")
for c in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0):
    s = g * np.where(full, 1.0, c) + 1e-6 * prod / len(rows)  # ties: the product's order
    pw = per_world(s)
    better = sum(a > b + 1e-12 for a, b in zip(pw, ref))
    worse = sum(a < b - 1e-12 for a, b in zip(pw, ref))
    print(f"  c = {c:.1f}              " + " ".join(f"{p:+.2f}" for p in pw) + f" | {np.mean(pw):+.2f} | "
          f"{spearmanr(s, y)[0]:+.2f}   above the product in {better}, below in {worse} of {len(worlds)}")
