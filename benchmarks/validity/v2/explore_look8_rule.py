"""An exploration kept as a look (run once, before any result of the eighth look's added world, spindle): the eighth
look's rule as first pre-registered (v2_gain: rows by v2's predicted gain) and a variant that keeps the fifth look's
method order (configs by the mean of v2's predicted gains over their methods, then the sign-of-G method order, then
v2's gain), on the eighteen worlds already seen: within-world Spearman and method pairs more than 0.10 apart.

    python benchmarks/validity/v2/explore_look8_rule.py > benchmarks/validity/v2/explore_look8_rule.txt
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look7 as look7  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import model_file, product_order, shipped_gain  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

WORLDS = [*look7.worlds(), "kiln", "mill", "brine", "ember", "cinder"]
shipped = model_file(16)
rows = look2.load_rows({"worlds": WORLDS})
w = np.array([r["world"] for r in rows])
gain = look8.product_gain(rows, shipped)
score = {k: np.full(len(rows), np.nan) for k in ("shipped", "v2_gain", "v2_config")}
for name in WORLDS:
    k = np.flatnonzero(w == name)
    sub = [rows[i] for i in k]
    score["shipped"][k] = product_order(sub, shipped_gain(sub, shipped), "sign_of_g")
    score["v2_gain"][k] = product_order(sub, gain[k], "v2_gain")
    cfg = {c: float(np.mean([g for r, g in zip(sub, gain[k]) if r["config"] == c])) for c in {r["config"] for r in sub}}
    keys = [(-cfg[r["config"]], -model.method_term(r["method"], v2._num(r["accuracy_gap"])), -g)
            for r, g in zip(sub, gain[k])]
    order = sorted(range(len(sub)), key=lambda i: keys[i], reverse=True)
    s = np.empty(len(sub))
    s[order] = np.arange(len(sub), dtype=float)
    score["v2_config"][k] = s
pw = {k: v2.per_world(x, rows, "d_pass1") for k, x in score.items()}
print("world".ljust(20) + "".join(k.rjust(11) for k in score))
for name in WORLDS:
    print(name.ljust(20) + "".join(f"{pw[k]['worlds'][name]:+11.2f}" for k in score))
unseen = [x for x in WORLDS if x not in look8.FITTED]
for label, names in ((f"mean of {len(unseen)} unfitted", unseen), (f"mean of {len(WORLDS)}", WORLDS)):
    print(label.ljust(20) + "".join(f"{np.mean([pw[k]['worlds'][x] for x in names]):+11.2f}" for k in score))
print("method pairs".ljust(20) + "".join(
    f"{v2.method_order(x, rows)['n_right']:>6}/{v2.method_order(x, rows)['n_pairs']:<4}" for x in score.values()))
assert not any(math.isnan(v) for v in gain)
