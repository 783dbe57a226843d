"""An exploration after explore_harm.txt (committed before it ran; it chooses nothing, and no product change follows
from it alone): does the harm column add to v2 when fitted?

explore_harm.txt found the column alone near G and best where G is worst, but no gain averaged with the shipped
ranking without a fit. Here, on the 28 worlds whose harm is kept (harm_rows.json), leave-one-world-out exactly as the
tenth look (``report_look10.out_of_fold``: the first look's ridge design, alpha 1, each world ranked as the product
ranks, v2_config, by the model fitted on the other 27):

- ``v2_all``: the first look's features (the tenth look's refit, on these 28 worlds);
- ``v2_harm``: the same with one more feature in both tiers, ``log_harm`` = log(1 + harm) (harm is heavy-tailed: a
  base model as teacher pushes about 100 times harder than a self-teacher; the transform was fixed before this ran).

Per world the Spearman with the realised held-out Δpass@1 of both, of the shipped ranking and of G; the means over the
21 worlds the first look never fitted on and over all 28; how often v2_harm is above and below v2_all and the shipped
ranking, and the mean difference against v2_all with a bootstrap over worlds. A gain here would be a candidate for a
look judged on a world built after its plan, with harm as a tested column of the diagnosis.

Reading of its output (explore_harm_fit.txt): fitted, the column adds nothing. v2_harm reaches +0.748 over the 21
never-fitted worlds against v2_all's +0.746 (difference +0.002 [-0.003, +0.007]) and the shipped ranking's +0.736;
on quartz, where harm alone ranked best, +0.12 with or without it. What harm knows, G, teachability and the mean JSD
already carry in a linear model; where it helped alone (the preamble worlds) it is averaged away. No look follows.

    python benchmarks/validity/v2/explore_harm_fit.py > benchmarks/validity/v2/explore_harm_fit.txt
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_harm import KEPT  # noqa: E402
from benchmarks.validity.v2.looks import by_tier, model_file  # noqa: E402

RULES = ("accuracy_gap", "shipped", "v2_all", "v2_harm")


def rows_with_harm() -> list[dict]:
    kept = json.loads(KEPT.read_text())
    rows = look2.load_rows({"worlds": list(kept)})
    return [{**r, "log_harm": math.log1p(kept[r["world"]][r["diagnosis_run"]][r["diagnosis_config"]])} for r in rows]


def gains(rows: list[dict], extra: list[str]) -> np.ndarray:
    """Leave-one-world-out d_pass1 of the first look's design with ``extra`` features in both tiers, by the product's
    tier rule."""
    d = look10.design()
    folds = {t: v2.lowo(rows, [*f, *extra], "d_pass1", d["alpha"], inner=False)["pred"] for t, f in d["tiers"].items()}
    return by_tier(folds, rows)


def main() -> int:
    rows = rows_with_harm()
    shipped = model_file(16)
    ranked = look10.orders(rows, {"shipped": look8.product_gain(rows, shipped), "v2_all": gains(rows, []),
                                  "v2_harm": gains(rows, ["log_harm"])})
    per = {k: v2.per_world(x, rows, "d_pass1")["worlds"] for k, x in ranked.items()}
    worlds = list(per["shipped"])
    never = [w for w in worlds if w not in look8.FITTED]
    print(f"{'world':18s} " + " ".join(f"{k:>13s}" for k in RULES))
    for w in worlds:
        tag = " *" if w in look8.FITTED else ""
        print(f"{w + tag:18s} " + " ".join(f"{per[k][w]:+13.2f}" for k in RULES))
    for name, ws in ((f"mean of the {len(never)} never fitted", never), (f"mean of all {len(worlds)}", worlds)):
        print(f"{name:18s} " + " ".join(f"{np.mean([per[k][w] for w in ws]):+13.3f}" for k in RULES))
    print("(* the shipped models were fitted on it: in-sample for 'shipped' only)")
    for other in ("v2_all", "shipped"):
        d = look10.paired_mean(per["v2_harm"], per[other], never)
        print(f"v2_harm minus {other} over the {len(never)} never fitted: {d['estimate']:+.3f} "
              f"[{d['lo']:+.3f}, {d['hi']:+.3f}] (bootstrap over worlds), above in {d['above']}, below in {d['below']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
