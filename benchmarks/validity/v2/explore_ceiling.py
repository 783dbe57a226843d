"""How far the shipped ranking is from what the outcomes allow: per world, the agreement of the two training seeds
and the ceiling it puts on any ranking's Spearman with their mean, beside the shipped ranking's and G's. Descriptive
(it chooses nothing), run on the committed rows of every world studied so far.

    python benchmarks/validity/v2/explore_ceiling.py > benchmarks/validity/v2/explore_ceiling.txt

Per world: ``seeds``, the Spearman between the realised held-out pass@1 of seed 0 and seed 1 over the world's rows
(the initial student is shared, so it ranks the realised changes); ``ceiling``, sqrt(2 s / (1 + s)) for that s: the
Spearman-Brown reliability of the two-seed mean, whose square root bounds the correlation a predictor without error
can reach with it (the attenuation bound, read for ranks); then the Spearman of the shipped ranking (v2_config, the
eighth look) and of G with the realised Δpass@1, and the shipped ranking's share of the ceiling. The seven worlds the
v2 model was fitted on are marked: in-sample for v2.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import model_file  # noqa: E402

WORLDS = [*look8.worlds(), "tallow", "wick"]  # every world with committed rows, in the order they were built


def seed_agreement(rows: list[dict]) -> float:
    """Spearman between the two seeds' realised held-out pass@1 over the rows that have both."""
    s = np.array([r["final_pass@1_per_seed"] for r in rows if len(r.get("final_pass@1_per_seed") or []) == 2], float)
    return stats.spearman(s[:, 0], s[:, 1]) if len(s) >= 3 else math.nan


def ceiling(s: float) -> float:
    return math.sqrt(2 * s / (1 + s)) if s > 0 else math.nan


def main() -> int:
    shipped = model_file(16)
    print(f"{'world':38s} rows  seeds  ceiling  shipped  G      shipped/ceiling")
    table = {}
    for w in WORLDS:
        rows = look2.load_rows({"worlds": [w]})
        ranked = look8.orders(rows, shipped)
        s = seed_agreement(look2.world_rows(w))
        y = v2.target(rows, "d_pass1")
        rho = {k: stats.spearman(ranked[k], y) for k in ("v2_config", "accuracy_gap")}
        table[w] = (ceiling(s), rho["v2_config"], rho["accuracy_gap"])
        tag = " (v2 fitted on it)" if w in look8.FITTED else ""
        print(f"{w + tag:38s} {len(rows):4d}  {s:+.2f}  {ceiling(s):6.2f}  {rho['v2_config']:+.2f}    "
              f"{rho['accuracy_gap']:+.2f}  {rho['v2_config'] / ceiling(s):.2f}")
    for name, keep in (("worlds v2 was never fitted on", [w for w in WORLDS if w not in look8.FITTED]),
                       ("worlds", WORLDS)):
        c, p, g = (float(np.mean([table[w][i] for w in keep])) for i in range(3))
        print(f"mean of the {len(keep)} {name}: ceiling {c:.2f}, shipped {p:+.2f}, G {g:+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
