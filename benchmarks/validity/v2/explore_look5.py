"""An exploration after the fourth look, kept as a look (not pre-registered, no plan followed from it): could the
lookahead's own fresh pass@1 change, with or without the sign of G, make the verdict decisive? On the ten worlds
already seen (every row's realised class from its interval, as the looks count it). Not a result: anything chosen
from it would have to be judged on a world built after its plan.

    python benchmarks/validity/v2/explore_look5.py > benchmarks/validity/v2/explore_look5.txt
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402
import yaml  # noqa: E402

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

plan4 = yaml.safe_load(L.PLANS[4].read_text())
rows = L.load_rows(plan4)
la = {(w, r["config"], r["method"]): r for w in plan4["worlds"] for r in json.loads(L.lookahead_file(w).read_text())["rows"]}
x = [la[(r["world"], r["config"], r["method"])] for r in rows]
cls = np.array([stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"])) for r in rows])
w = np.array([r["world"] for r in rows])
lo, hi, est = (np.array([r.get(k, np.nan) for r in x], float)
               for k in ("lookahead_fresh_lo", "lookahead_fresh_hi", "lookahead_fresh"))
g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
print(f"{len(rows)} rows, {len(set(w))} worlds; realised classes:", {str(k): int((cls == k).sum()) for k in sorted(set(cls))})


def judge(name: str, v: np.ndarray) -> None:
    dec = v != "unclear"
    right = ((v == "helps") & (cls == "improves")) | ((v == "hurts") & (cls == "degrades"))
    helps = f"{((v == 'helps') & (cls == 'improves')).sum()}/{(v == 'helps').sum()}"
    hurts = f"{((v == 'hurts') & (cls == 'degrades')).sum()}/{(v == 'hurts').sum()}"
    print(f"{name:34s} decisive {dec.sum():3d}, right {right.sum():3d} ({right.sum() / max(1, dec.sum()):.2f}), "
          f"unclear {1 - dec.mean():.2f}; helps right {helps}, hurts right {hurts}")
    print("    per world (decisive, right):", {str(k): (int(dec[w == k].sum()), int(right[w == k].sum()))
                                               for k in sorted(set(w))})


judge("fresh interval", np.where(lo > 0, "helps", np.where(hi < 0, "hurts", "unclear")))
judge("fresh interval and the sign of G", np.where((lo > 0) & (g > 0), "helps",
                                                   np.where((hi < 0) & (g < 0), "hurts", "unclear")))
for t in (0.0, 0.05, 0.1):
    judge(f"fresh estimate beyond {t} and G", np.where((est > t) & (g > 0), "helps",
                                                       np.where((est < -t) & (g < 0), "hurts", "unclear")))
