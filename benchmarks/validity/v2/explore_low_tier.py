"""Can the rows with G <= 0 be ordered better? An exploration (committed before it ran, with its rule; it fits nothing).

explore_pilot_bound.py found that ordering the rows with G > 0 perfectly, above the rows with G <= 0, would lift the
ranking only to +0.827 over the never-fitted worlds: what is left lies in the rows with G <= 0. The product orders
them as every row, by their configuration's mean predicted gain and the fifth look's method order. Three columns the
worlds' committed rows already have could order them with no weight fitted:
- ``low_g``: their configuration's G, highest first (least behind the student first);
- ``low_kl``: their configuration's mean lookahead KL to the initial student over its methods, lowest first (a
  teacher the student trails pulls it least far in a few steps);
- ``low_harm``: their configuration's harm (explore_harm.py: how hard the teacher pushes the student off the tokens of
  its correct answers), lowest first; worlds without committed harm rows keep the shipped order.
Within a configuration the methods keep the shipped order.

Definitions, fixed before any of it ran:
- worlds: every world with committed rows (explore_rank_parts.WORLDS and the worlds checked since the ranking shipped,
  ``report_checks.since_look8``, with rows), the realised held-out Δpass@1 the committed one;
- ``shipped``: the product's ranking (``looks.product_order``, v2_config); a candidate keeps the places the shipped
  ranking gives the rows with G <= 0 and reorders those rows among them (every row with G > 0 stays where it is);
- ``low_oracle``: the same places filled in realised order (the room); ``tiered``: every row with G > 0 above every
  row with G <= 0, both in the shipped order (what the split alone does; descriptive).
Reported: per world the Spearman of each order with the realised change; over the worlds the shipped models were
never fitted on, the mean and in how many each order is above and below the shipped ranking.
Rule (fixed now): a candidate qualifies if over the never-fitted worlds its mean is at least +0.02 above the shipped
ranking's and it is above the shipped ranking in more worlds than below. If one or more qualify, the one with the
largest mean is judged on a world built after this ran (a plan_checks.yaml amendment written before its build), where
it ships only if it is at least the shipped ranking's Spearman there. Otherwise no look follows.

Reading of its output (explore_low_tier.txt, 41 worlds): none qualifies. Over the 34 never-fitted worlds the shipped
ranking reaches +0.743; reordering its rows with G <= 0 by G gives +0.695 (above it in 7, below in 21), by the lookahead
KL +0.724 (12, 15), by harm +0.696 (3, 14). The room there is as large as among the rows with G > 0 (the rows with
G <= 0 in realised order: +0.842), and the shipped order, which weighs G, the lookahead and teachability together, is
already better than any one of them alone. Putting every row with G > 0 above every row with G <= 0 costs a little
(+0.735), most in `ember` (+0.56 against +0.88). No look follows.

    python benchmarks/validity/v2/explore_low_tier.py > benchmarks/validity/v2/explore_low_tier.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_checks  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_rank_parts import WORLDS, lexical  # noqa: E402
from benchmarks.validity.v2.looks import model_file, shipped_order  # noqa: E402

HERE = Path(__file__).resolve().parent
CANDIDATES = ("low_g", "low_kl", "low_harm")
ORDERS = ("shipped", *CANDIDATES, "low_oracle", "tiered")
SMALL_GAIN = 0.02


def world_rows() -> dict[str, list[dict]]:
    """Every world with committed rows when this ran, with its rows (an excluded world has none; the checks up to
    amendment 23)."""
    checked = report_checks.since_look8()
    out = {}
    for w in dict.fromkeys([*WORLDS, *checked[:checked.index("tuff") + 1]]):
        try:
            rows = look2.load_rows({"worlds": [w]})
        except (FileNotFoundError, KeyError):
            continue
        if rows:
            out[w] = rows
    return out


def config_means(rows: list[dict], values) -> np.ndarray:
    """Each row's configuration's mean of ``values`` over its rows with a finite value (NaN if none)."""
    x, cfg = np.asarray(values, float), np.array([r["config"] for r in rows])
    out = np.full(len(rows), np.nan)
    for c in set(cfg):
        k = (cfg == c) & np.isfinite(x)
        out[cfg == c] = x[k].mean() if k.any() else np.nan
    return out


def reorder(product: np.ndarray, low: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``product`` with the rows where ``low`` is true moved among their own places so that a larger ``key`` sits
    higher (ties and NaN keys keep the product's order among themselves; NaN below every finite key)."""
    out = product.copy()
    idx = np.flatnonzero(low)
    places = np.sort(product[idx])  # ascending: the lowest place goes to the smallest key
    k = np.where(np.isfinite(key[idx]), key[idx], -np.inf)
    order = idx[np.argsort(lexical(np.nan_to_num(k, neginf=-1e300), product[idx]), kind="stable")]
    out[order] = places
    return out


def orders(rows: list[dict], shipped: dict, harm: dict[str, float] | None) -> dict[str, np.ndarray]:
    """The shipped order, the candidates, the oracle and the tiered order of one world's rows (higher: first)."""
    product = shipped_order(rows, shipped)
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    low = ~(g > 0)
    kl = config_means(rows, [v2._num(r.get("lookahead_kl")) for r in rows])
    h = np.array([harm.get(r["config"], np.nan) if harm else np.nan for r in rows])
    return {"shipped": product,
            "low_g": reorder(product, low, g),
            "low_kl": reorder(product, low, -kl),
            "low_harm": reorder(product, low, -h) if harm else product,
            "low_oracle": reorder(product, low, v2.target(rows, "d_pass1")),
            "tiered": lexical((~low).astype(float), product)}


def harm_of(world: str) -> dict[str, float] | None:
    """The world's harm per configuration (explore_harm.py's committed rows, its main split), or None."""
    kept = json.loads((HERE / "harm_rows.json").read_text())
    return kept[world]["main"] if world in kept else None


def report() -> dict:
    shipped = model_file(16)
    per = {k: {} for k in ORDERS}
    for w, rows in world_rows().items():
        for k, x in orders(rows, shipped, harm_of(w)).items():
            per[k][w] = v2.per_world(x, rows, "d_pass1")["worlds"][w]
    never = [w for w in per["shipped"] if w not in look8.FITTED]
    base = per["shipped"]
    means = {k: {"all": float(np.nanmean(list(v.values()))), "never_fitted": float(np.nanmean([v[w] for w in never])),
                 "above": int(sum(v[w] > base[w] + 1e-9 for w in never)),
                 "below": int(sum(v[w] < base[w] - 1e-9 for w in never))} for k, v in per.items()}
    qualify = [k for k in CANDIDATES if means[k]["never_fitted"] >= means["shipped"]["never_fitted"] + SMALL_GAIN
               and means[k]["above"] > means[k]["below"]]
    best = max(qualify, key=lambda k: means[k]["never_fitted"]) if qualify else None
    return {"per_world": per, "never_fitted": never, "means": means, "qualify": qualify, "look": best,
            "harm_worlds": sorted(w for w in per["shipped"] if harm_of(w))}


def render(res: dict) -> str:
    lines = ["Spearman with the realised held-out Δpass@1 within each world (* the shipped models were fitted on it; "
             "- no committed harm rows, low_harm keeps the shipped order): the rows with G <= 0 reordered among the "
             "shipped ranking's places for them", "", f"{'world':22s} " + " ".join(f"{k:>11s}" for k in ORDERS)]
    for w in res["per_world"]["shipped"]:
        mark = ("" if w in res["never_fitted"] else " *") + ("" if w in res["harm_worlds"] else " -")
        lines.append(f"{w + mark:22s} " + " ".join(f"{res['per_world'][k][w]:+11.2f}" for k in ORDERS))
    n = len(res["never_fitted"])
    lines.append("")
    for k, m in res["means"].items():
        lines.append(f"{k:11s} mean {m['all']:+.3f} over all {len(res['per_world']['shipped'])}, "
                     f"{m['never_fitted']:+.3f} over the {n} never fitted (above the shipped ranking in {m['above']}, "
                     f"below in {m['below']})")
    lines += ["", "rule (docstring): a candidate qualifies with a mean at least +0.02 above the shipped ranking's over "
                  "the never-fitted worlds and more worlds above than below: " +
              (f"{', '.join(res['qualify'])} qualif{'ies' if len(res['qualify']) == 1 else 'y'}; {res['look']} is "
               "judged on a world built after this ran" if res["look"] else "none qualifies; no look follows")]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(report()))
