"""How far could a pilot of every candidate run lift the ranking? A descriptive exploration (committed before it ran;
it chooses and fits nothing) that decides whether a cheaper pilot is worth measuring.

explore_rank_parts.py found the ranking's shortfall in the order of the configurations, and explore_early_success.py
found that a run's own held-out evaluation after a quarter of its steps (``early_d1``, step 10 of 40) ranks what it
realises at +0.82 pooled; explore_early_tenth.py found the same read after a tenth (``tenth_d1``, step 4) at +0.51.
Both reads exist only for the rows with G > 0 (seed 0). A pilot cheaper than a quarter (fewer problems a step, say)
would at best read as well as ``early_d1``, so the ranking ``early_d1`` gives is the ceiling of any such pilot.

Definitions, fixed before any of it ran:
- worlds: those with both reads committed (early_success_rows.json and early_tenth_rows.json), every row of each
  (``report_look2.load_rows``), its realised held-out Δpass@1 the committed one (two seeds, 40 steps);
- ``shipped``: the product's ranking (``looks.product_order``, v2_config);
- ``read_rows`` (per read): the rows with G > 0 by the read, highest first, all above the rows with G <= 0, which keep
  the shipped order among themselves;
- ``read_configs`` (per read): the configurations with G > 0 by the mean read over their methods, each one's methods in
  the shipped order, all above the rows with G <= 0 in the shipped order.
Reported: per world the Spearman of each order with the realised change, the means over every world and over the
worlds the shipped models were never fitted on, and in how many of those each order is above the shipped one.
What follows (fixed now): a pilot cheaper than a quarter of a run is pre-registered and measured only if
``read_configs`` or ``read_rows`` with ``early_d1`` reaches a mean of at least +0.80 over the never-fitted worlds and
is above the shipped ranking in at least two thirds of them; otherwise no pilot is measured, because no pilot reading
worse than a quarter of a run could reach the issue's 0.80 through this ranking.

Added after the first output was read (descriptive; it decides nothing): ``read_rows`` with the realised change itself
as the read (``oracle``), the ceiling of any order that puts every row with G > 0 above every row with G <= 0.

Reading of its output (explore_pilot_bound.txt, 34 worlds): no. A read of every candidate run after a quarter of it,
the best read the study has, lifts the ranking from +0.760 to +0.777 over the 27 never-fitted worlds (read_rows; above
the shipped ranking in 17 of 27), its configurations' mean to +0.767 (8 of 27); after a tenth +0.767 and +0.760. Even the
realised change itself as the read reaches only +0.827 (26 of 27 above), and stays far below 0.80 where rows with
G <= 0 realise more than rows with G > 0 (cinder +0.18, quartz +0.45, ember +0.58, loam +0.64): what is left lies in
the order of the rows with G <= 0 and in that split itself. So no cheaper pilot is measured: a pilot of every run
with G > 0 reading no better than a quarter of it cannot carry this ranking to 0.80.

    python benchmarks/validity/v2/explore_pilot_bound.py > benchmarks/validity/v2/explore_pilot_bound.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_rank_parts import lexical  # noqa: E402
from benchmarks.validity.v2.looks import model_file, shipped_order  # noqa: E402

HERE = Path(__file__).resolve().parent
READS = {"early_d1": HERE / "early_success_rows.json", "tenth_d1": HERE / "early_tenth_rows.json"}


def reads() -> dict[str, dict[str, dict[str, float]]]:
    """world -> run key -> each read."""
    out: dict = {}
    for col, path in READS.items():
        for w, rec in json.loads(path.read_text()).items():
            for key, cols in rec["runs"].items():
                out.setdefault(w, {}).setdefault(key, {})[col] = cols[col]
    return {w: runs for w, runs in out.items() if all(c in r for r in runs.values() for c in READS)}


def orders(rows: list[dict], shipped: dict, read: np.ndarray) -> dict[str, np.ndarray]:
    """The shipped order and the two read orders of one world's rows (higher: ranked first)."""
    product = shipped_order(rows, shipped)
    positive = np.array([v2._num(r["accuracy_gap"]) > 0 for r in rows])
    cfg = np.array([r["config"] for r in rows])
    per_config = np.array([np.nanmean(read[cfg == c]) if positive[i] else np.nan for i, c in enumerate(cfg)])
    tier = positive.astype(float)  # every row with G > 0 above every row with G <= 0
    return {"shipped": product,
            "read_rows": lexical(tier, np.where(positive, np.nan_to_num(read, nan=-np.inf), product)),
            "read_configs": lexical(tier * 2 + rank_of(per_config), product)}


def rank_of(x: np.ndarray) -> np.ndarray:
    """Dense ranks of the finite values of ``x`` scaled into [0, 1) (higher: larger); NaN -> 0."""
    out = np.zeros(len(x))
    k = np.isfinite(x)
    if k.any():
        out[k] = rankdata(x[k], method="dense") / (k.sum() + 1)
    return out


def report() -> dict:
    shipped, measured = model_file(16), reads()
    per: dict = {}
    for w in sorted(measured):
        rows = look2.load_rows({"worlds": [w]})
        for col in READS:
            read = np.array([measured[w].get(f"{r['config']}__{r['method']}__s0", {}).get(col, np.nan) for r in rows])
            for name, x in orders(rows, shipped, read).items():
                key = name if name == "shipped" else f"{name}:{col}"
                per.setdefault(key, {})[w] = v2.per_world(x, rows, "d_pass1")["worlds"][w]
        oracle = orders(rows, shipped, v2.target(rows, "d_pass1"))["read_rows"]  # added after the first output
        per.setdefault("read_rows:oracle", {})[w] = v2.per_world(oracle, rows, "d_pass1")["worlds"][w]
    never = [w for w in per["shipped"] if w not in look8.FITTED]
    means = {k: {"all": float(np.nanmean(list(v.values()))), "never_fitted": float(np.nanmean([v[w] for w in never])),
                 "above_shipped": int(sum(v[w] > per["shipped"][w] + 1e-12 for w in never))} for k, v in per.items()}
    best = max(means[f"{n}:early_d1"]["never_fitted"] for n in ("read_rows", "read_configs"))
    follow = any(means[f"{n}:early_d1"]["never_fitted"] >= 0.80 and
                 means[f"{n}:early_d1"]["above_shipped"] >= 2 * len(never) / 3 for n in ("read_rows", "read_configs"))
    return {"per_world": per, "never_fitted": never, "means": means, "best_early": best, "follow": bool(follow)}


def render(res: dict) -> str:
    keys = list(res["per_world"])
    lines = ["Spearman with the realised held-out Δpass@1 within each world (* the shipped models were fitted on it): the "
             "shipped ranking, and the rows with G > 0 ordered by a read of their own runs (read_rows) or their "
             "configurations by its mean (read_configs), above the rows with G <= 0", "",
             f"{'world':20s} " + " ".join(f"{k:>22s}" for k in keys)]
    for w in res["per_world"]["shipped"]:
        mark = "" if w in res["never_fitted"] else " *"
        lines.append(f"{w + mark:20s} " + " ".join(f"{res['per_world'][k][w]:+22.2f}" for k in keys))
    lines.append("")
    n = len(res["never_fitted"])
    for k, m in res["means"].items():
        lines.append(f"{k:24s} mean {m['all']:+.3f} over all, {m['never_fitted']:+.3f} over the {n} never fitted, "
                     f"above the shipped ranking in {m['above_shipped']} of {n}")
    lines += ["", f"rule (docstring): a cheaper pilot is measured only if an early_d1 order reaches +0.80 over the never "
                  f"fitted worlds and beats the shipped ranking in two thirds of them: "
                  f"{'it does' if res['follow'] else 'it does not'} (best early_d1 order {res['best_early']:+.3f})"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(report()))
