"""explore_g_verdict.py's grid rerun on the twenty-one worlds seen after the ninth look (an exploration: it chose
nothing, and no look was built on it). The ninth look's rule (hurts at G <= -0.2 full-distribution / -0.4
sampled-token, helps at G > 0.1 full-distribution) was right on 0.845 of its calls on the nine worlds it was judged on;
this asks whether any rule of the same grid meets the issue's precisions on all twenty-one with room to spare.

    python benchmarks/validity/v2/explore_g_verdict_21.py > benchmarks/validity/v2/explore_g_verdict_21.txt
"""
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
rows = L.load_rows({"worlds": WORLDS})
cls = np.array([stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"])) for r in rows])
g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
full = np.array([r["method"] in ("jsd", "opsd_jsd") for r in rows])
print(f"{len(rows)} rows, {len({r['world'] for r in rows})} worlds; realised:", dict(collections.Counter(cls)))
print("\nrealised classes by G and loss family:")
for lo, hi in [(-1, -0.4), (-0.4, -0.2), (-0.2, -0.05), (-0.05, 0.05), (0.05, 0.15), (0.15, 0.3), (0.3, 0.5), (0.5, 1.1)]:
    for fam, m in (("full", full), ("sampled", ~full)):
        k = (g > lo) & (g <= hi) & m
        print(f"  G in ({lo:+.2f}, {hi:+.2f}] {fam:8s} n={k.sum():3d}",
              {str(c): int(n) for c, n in collections.Counter(cls[k]).items()})
res = []
NEVER = 9.0
for hf in (-0.05, -0.1, -0.15, -0.2, -0.3):  # hurts at G <= hf, full-distribution
    for hs in (-0.1, -0.2, -0.3, -0.4, -NEVER):  # hurts at G <= hs, sampled-token
        for pf in (0.05, 0.1, 0.15, 0.2, 0.3, NEVER):  # helps at G > pf, full-distribution
            for ps in (0.3, 0.5, NEVER):  # helps at G > ps, sampled-token
                hurts = np.where(full, g <= hf, g <= hs)
                helps = np.where(full, g > pf, g > ps) & ~hurts
                nh, nH = int(helps.sum()), int(hurts.sum())
                rh, rH = int((helps & (cls == "improves")).sum()), int((hurts & (cls == "degrades")).sum())
                dec = nh + nH
                res.append(((rh + rH) / max(dec, 1), rh / max(nh, 1), rH / max(nH, 1), 1 - dec / len(rows),
                            hf, hs, pf, ps, rh, nh, rH, nH))
ok = sorted((r for r in res if r[1] >= 0.7 and r[2] >= 0.9 and r[0] >= 0.85), key=lambda r: r[3])
print(f"\n{len(res)} rules tried; {len(ok)} meet decisive >= 0.85, helps precision >= 0.7, hurts precision >= 0.9 "
      "on these worlds (9: never):")
for r in ok[:20]:
    print("  right %.2f, helps %.2f, hurts %.2f, unclear %.2f | hurts full G <= %s, sampled G <= %s; helps full G > %s, "
          "sampled G > %s | helps %d/%d, hurts %d/%d" % r)
