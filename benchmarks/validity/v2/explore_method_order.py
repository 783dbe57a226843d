"""An exploration after the fourth look, kept as a look (not pre-registered): is the method order within a
configuration read from the sign of G? In the seen worlds a full-distribution loss (jsd, opsd_jsd) looked like a
larger step than a sampled-token one: more gain where the configuration helps, more damage where it hurts. The
rule tried: rank by G, and within one configuration put the jsd-family methods above the sampled-token ones when
G > 0 and below them otherwise (``amplified``). On the ten worlds already seen, so not a result: anything chosen
from it must be judged on a world built after its plan.

    python benchmarks/validity/v2/explore_method_order.py > benchmarks/validity/v2/explore_method_order.txt
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402
import yaml  # noqa: E402

from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

JSD_FAMILY = {"jsd", "opsd_jsd"}
EPS = 1e-6  # a tie-break only: smaller than any difference of G between configurations

plan4 = yaml.safe_load(L.PLANS[4].read_text())
rows = L.load_rows(plan4)
g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
jsd = np.array([r["method"] in JSD_FAMILY for r in rows], float)
print(f"{len(rows)} rows, {len({r['world'] for r in rows})} worlds")
for t in (0.0, 0.05, 0.10):
    amplified = g + EPS * np.where(g > t, 1.0, -1.0) * jsd
    mo = v2.method_order(amplified, rows)
    pw = v2.per_world(amplified, rows, "d_pass1")
    print(f"amplified (threshold {t:.2f}): method order {mo['n_right']}/{mo['n_pairs']}; mean within-world Spearman "
          f"{pw['mean']:+.3f}; per world " + ", ".join(f"{k} {v:+.2f}" for k, v in pw["worlds"].items()))
for name, x in (("G alone (methods tied)", g), ("G, jsd always first", g + EPS * jsd),
                ("G, jsd always last", g - EPS * jsd)):
    mo = v2.method_order(x, rows)
    pw = v2.per_world(x, rows, "d_pass1")
    print(f"{name}: method order {mo['n_right']}/{mo['n_pairs']}; mean within-world Spearman {pw['mean']:+.3f}")
print("\npairs more than 0.10 apart (world, config: methods by realised d_pass1; G):")
seen = set()
for r in rows:
    key = (r["world"], r["config"])
    if key in seen:
        continue
    seen.add(key)
    ms = sorted(((v2._num(q["d_pass1"]["estimate"]), q["method"]) for q in rows if (q["world"], q["config"]) == key),
                reverse=True)
    if len(ms) > 1 and ms[0][0] - ms[-1][0] > 0.10:
        print(f"  {key[0]:18s} {key[1]:22s} G {v2._num(r['accuracy_gap']):+.3f}: "
              + ", ".join(f"{m} {d:+.3f}" for d, m in ms))
