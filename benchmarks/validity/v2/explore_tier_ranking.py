"""An exploration after flint and hearth were checked (not pre-registered; it chooses nothing by itself): does the
shipped ranking (v2_config: configurations by the mean of v2's predicted gains over their methods, then the sign of
G within one) rank as well from the model without the lookahead? On the four worlds built after the ranking shipped,
the tier without the lookahead ranked better than the shipped one (CHECKS.md: +0.77 against +0.70 as each model
alone); this asks whether that holds as the product ranks, on every world with committed rows. Rerun (2026-12-04)
with the five worlds checked since (loam, marl, sorrel, pumice, shale), the script otherwise unchanged, to decide
whether a tenth look is worth pre-registering on it (LATEST: its figures on those five alone).

Per world: the Spearman with the realised Δpass@1 of the v2_config ranking whose gains come from (a) the product's
tier (v2 with a lookahead result, as shipped), (b) v2_no_lookahead on every row, and of G alone; then the means over
the worlds v2 was never fitted on, over the four built after the ranking shipped, and over all.

    python benchmarks/validity/v2/explore_tier_ranking.py > benchmarks/validity/v2/explore_tier_ranking.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.v2.looks import model_file, product_order, shipped_gain  # noqa: E402

LATEST = ["loam", "marl", "sorrel", "pumice", "shale"]  # checked since this first ran (amendments 5 to 8)
LATER = ["tallow", "flint", "hearth", "wick", *LATEST]  # every world checked since the eighth look shipped its ranking


def main() -> int:
    shipped = model_file(16)
    worlds = list(dict.fromkeys([*WORLDS, *LATER]))
    print(f"{'world':38s} rows  shipped  no_lookahead  G")
    table = {}
    for w in worlds:
        rows = look2.load_rows({"worlds": [w]})
        y = v2.target(rows, "d_pass1")
        gains = {"shipped": look8.product_gain(rows, shipped),
                 "no_lookahead": shipped_gain(rows, shipped, "v2_no_lookahead")}
        rho = {k: stats.spearman(product_order(rows, g, "v2_config"), y) for k, g in gains.items()}
        rho["G"] = stats.spearman(np.array([v2._num(r["accuracy_gap"]) for r in rows]), y)
        table[w] = rho
        tag = " (v2 fitted on it)" if w in look8.FITTED else " (built after it shipped)" if w in LATER else ""
        print(f"{w + tag:38s} {len(rows):4d}  {rho['shipped']:+.2f}    {rho['no_lookahead']:+.2f}          "
              f"{rho['G']:+.2f}")
    for name, keep in (("worlds v2 was never fitted on", [w for w in worlds if w not in look8.FITTED]),
                       ("worlds built after the ranking shipped", LATER),
                       ("worlds checked since this exploration first ran", LATEST), ("worlds", worlds)):
        m = {k: float(np.mean([table[w][k] for w in keep])) for k in ("shipped", "no_lookahead", "G")}
        wins = sum(table[w]["no_lookahead"] > table[w]["shipped"] for w in keep)
        print(f"mean over the {len(keep)} {name}: shipped {m['shipped']:+.2f}, no_lookahead {m['no_lookahead']:+.2f}, "
              f"G {m['G']:+.2f}; no_lookahead above shipped in {wins} of {len(keep)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
