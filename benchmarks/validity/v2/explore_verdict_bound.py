"""An exploration after the sixth look, kept as a look (not pre-registered): how close the issue's verdict target
(<= 40% `unclear` with >= 85% of decisive verdicts right) sits to what the realised outcomes allow. A verdict is
right where the realised class (from the realised Δpass@1's 95% interval over seeds) is `improves` for helps,
`degrades` for hurts; a row whose interval holds 0 (`no clear change`) can only be called right as `unclear`. Per
world and pooled over the twelve worlds seen so far: the share of such rows (the unclear share of a verdict that
knew every realised class), and the least number of clear rows a verdict meeting the target must call right.

    python benchmarks/validity/v2/explore_verdict_bound.py > benchmarks/validity/v2/explore_verdict_bound.txt
"""
import collections
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_look6 as R  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

rows = L.load_rows({"worlds": R.worlds()})
by = collections.defaultdict(collections.Counter)
for r in rows:
    by[r["world"]][stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"]))] += 1
by["pooled"] = sum(by.values(), collections.Counter())
print("scope | rows | no clear change (an oracle's unclear share) | clear rows | decisive calls needed (<= 40% unclear) "
      "| of them right (>= 85%) | clear rows called right, at least")
for w, c in sorted(by.items(), key=lambda kv: (kv[0] == "pooled", kv[0])):
    n, flat = sum(c.values()), c["no clear change"]
    need = math.ceil(0.6 * n - 1e-9)
    right = math.ceil(0.85 * need - 1e-9)
    print(f"{w} | {n} | {flat} ({flat / n:.0%}) | {n - flat} | {need} | {right} | "
          + (f"{right / (n - flat):.0%} of the clear rows" if n > flat else "n/a")
          + ("" if need <= n - flat + (need - right) else " (impossible)"))
