"""An exploration after the fifth look, kept as a look (not pre-registered): can the verdict be read from G and the
loss family alone? The fifth look found a full-distribution loss (jsd, opsd_jsd) to be the larger step, so it may be
called `hurts` at a milder negative G than a sampled-token loss, and `helps` where G > 0, while a sampled-token loss
is never called `helps`. Grid over four thresholds on the eleven worlds already seen (every row's realised class
from its interval, as the looks count it); rules meeting the issue's precisions on these worlds, fewest `unclear`
first. Not a result: the rule chosen from it must be judged on a world built after its plan.

    python benchmarks/validity/v2/explore_g_verdict.py > benchmarks/validity/v2/explore_g_verdict.txt
"""
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_look5 as R  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

BINS = [(-1, -0.4), (-0.4, -0.2), (-0.2, -0.05), (-0.05, 0.05), (0.05, 0.15), (0.15, 0.3), (0.3, 0.5), (0.5, 1.1)]


def main(worlds: list[str], shown: int = 12) -> None:
    """The table and the grid on ``worlds``' rows; the ``shown`` rules with the fewest `unclear` that meet the issue's
    precisions."""
    rows = L.load_rows({"worlds": worlds})
    cls = np.array([stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"])) for r in rows])
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    full = np.array([r["method"] in ("jsd", "opsd_jsd") for r in rows])
    print(f"{len(rows)} rows, {len({r['world'] for r in rows})} worlds; realised:", dict(collections.Counter(cls)))
    print("\nrealised classes by G and loss family:")
    for lo, hi in BINS:
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
    for r in ok[:shown]:
        print("  right %.2f, helps %.2f, hurts %.2f, unclear %.2f | hurts full G <= %s, sampled G <= %s; "
              "helps full G > %s, sampled G > %s | helps %d/%d, hurts %d/%d" % r)


if __name__ == "__main__":
    main(R.worlds())
