"""Would a quarter of every candidate run rank a world's rows as the issue asks? A descriptive exploration (committed
before it ran, with its reading rule; it ships nothing: a quarter of every run is far beyond the issue's cost bound).

explore_pilot_bound.py found that the early read of the rows with G > 0 (step 10 of 40), placed above the rows with
G <= 0, lifts the ranking only to +0.777 over the never-fitted worlds, because the rows with G <= 0 have no read. This
measures their read too, so that every row has one, and asks whether the information a quarter of a run carries is
enough for the issue's 0.80 at all. If even that is not enough, no diagnosis-time quantity that only approximates a
quarter of a run can reach it in these worlds; if it is, the target is a question of cost.

Definitions, fixed before any of it ran:
- worlds: explore_early_success's whose builds are in the repository (its 30, sable, tawny and ashlar; not clinker,
  whose build is not shipped);
- rows: every row with G <= 0 (seed 0), trained exactly as explore_early_read trains the rows with G > 0, for the
  first 10 of its 40 steps, and its step-10 checkpoint evaluated by the study's evaluator against the world's initial
  evaluation explore_early_success made (``early_eval/initial.json``); ``early_d1``, ``early_kl``, ``early_dreg`` as
  there. The rows with G > 0 keep their committed reads (early_success_rows.json);
- ``read_rows``: every row of a world by its read; ``read_configs``: configurations by the mean read over their
  methods, each one's methods in the shipped order; ``shipped`` and ``accuracy_gap`` (G) beside them.
Reported: per world the Spearman of each with the realised held-out Δpass@1 (the committed one; two seeds, 40 steps),
the means over the worlds the shipped models were never fitted on and over all; the pooled Spearman of the read over
every row; and among the rows with G <= 0 alone, the read's and the shipped ranking's within-world Spearman.
Reading rule (fixed now): if ``read_rows`` or ``read_configs`` reaches a mean of at least +0.80 over the never-fitted
worlds, the information the issue's 0.80 needs is in a quarter of every run, and the shortfall is the cost bound;
otherwise not even a quarter of every candidate run ranks the rows as the issue asks in these worlds. Nothing ships
either way.

Reading of its output (explore_early_all.txt; 428 runs of 10 steps in 1538 s and their evaluations in 905 s, in two
processes): no. With every row read after a quarter of its run, the read ranks a world's rows at +0.695 on average over
the 26 never-fitted worlds, and its configurations' mean with the shipped method order at +0.753, against the shipped
diagnosis ranking's +0.758 (G alone +0.678); among the rows with G <= 0 the read reaches +0.556 against the shipped
ranking's +0.617. Pooled over the 738 rows the read reaches +0.744. A quarter of every candidate run ranks the rows no
better than the diagnosis does: it helps most where the diagnosis is weakest (cinder +0.66 against +0.01, hearth +0.74
against +0.31, quartz +0.51 against +0.16) and loses where a quarter of a run has not yet separated rows the diagnosis
orders well (flint -0.05 against +0.86, ledger +0.64 against +0.85). The issue's 0.80 is not within reach of a read
after a quarter of every run in these worlds, and so not of any cheaper pilot.

    python benchmarks/validity/v2/explore_early_all.py --out DIR [--worlds a,b]   # train if needed, evaluate
    python benchmarks/validity/v2/explore_early_all.py --out DIR --keep           # rows: early_all_rows.json
    python benchmarks/validity/v2/explore_early_all.py --report > benchmarks/validity/v2/explore_early_all.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import explore_early_read as early  # noqa: E402
from benchmarks.validity.v2 import explore_early_success as success  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_rank_parts import lexical  # noqa: E402
from benchmarks.validity.v2.looks import explore_cli, model_file, shipped_order  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "early_all_rows.json"
ORDERS = ("shipped", "accuracy_gap", "read_rows", "read_configs")


def worlds() -> list[str]:
    return [w for w in success.worlds() if w not in success.LOOK2]  # clinker's build is not shipped


def keys(name: str) -> list[str]:
    """The world's rows with G <= 0 (seed 0)."""
    return [f"{r['config']}__{r['method']}__s0" for r in look2.load_rows({"worlds": [name]})
            if not v2._num(r["accuracy_gap"]) > 0]


def measure(out: Path, names: list[str]) -> None:
    success.train_and_evaluate(out, names, keys, early.STEPS)


def keep(out: Path) -> None:
    KEPT.write_text(look2.records_json(success.kept_rows(out, worlds(), keys)) + "\n")


def orders(rows: list[dict], shipped: dict, read: np.ndarray) -> dict[str, np.ndarray]:
    """Scores (higher: ranked first) of one world's rows."""
    product = shipped_order(rows, shipped)
    cfg = np.array([r["config"] for r in rows])
    per_config = np.array([np.nanmean(read[cfg == c]) for c in cfg])
    return {"shipped": product, "accuracy_gap": np.array([v2._num(r["accuracy_gap"]) for r in rows]),
            "read_rows": read, "read_configs": lexical(per_config, product)}


def report() -> dict:
    shipped = model_file(16)
    low, high = json.loads(KEPT.read_text()), json.loads(success.KEPT.read_text())
    per = {k: {} for k in ORDERS}
    per_low = {"read": {}, "shipped": {}}
    pooled_rows, pooled_read = [], []
    for w in [w for w in worlds() if w in low]:
        rows = look2.load_rows({"worlds": [w]})
        runs = {**high[w]["runs"], **low[w]["runs"]}
        read = np.array([runs.get(f"{r['config']}__{r['method']}__s0", {}).get("early_d1", np.nan) for r in rows])
        ranked = orders(rows, shipped, read)
        for k, x in ranked.items():
            per[k][w] = v2.per_world(x, rows, "d_pass1")["worlds"][w]
        k = np.flatnonzero([not v2._num(r["accuracy_gap"]) > 0 for r in rows])
        sub = [rows[i] for i in k]
        for name, x in (("read", read[k]), ("shipped", ranked["shipped"][k])):
            per_low[name][w] = v2.per_world(x, sub, "d_pass1")["worlds"][w]
        pooled_rows += rows
        pooled_read += list(read)
    never = [w for w in per["shipped"] if w not in look8.FITTED]

    def means(d: dict) -> dict:
        return {"all": float(np.nanmean(list(d.values()))), "never_fitted": float(np.nanmean([d[w] for w in never]))}
    res = {"per_world": per, "never_fitted": never, "means": {k: means(v) for k, v in per.items()},
           "low": {k: means(v) for k, v in per_low.items()}, "low_per_world": per_low,
           "missing": int(np.isnan(pooled_read).sum()),
           "pooled": stats.spearman(np.array(pooled_read), v2.target(pooled_rows, "d_pass1")),
           "n_rows": len(pooled_rows), "n_low": sum(len(v["runs"]) for v in low.values())}
    res["enough"] = bool(max(res["means"]["read_rows"]["never_fitted"], res["means"]["read_configs"]["never_fitted"])
                         >= 0.80)
    return res


def render(res: dict) -> str:
    n = len(res["never_fitted"])
    lines = [f"Every row of each world read after 10 of its 40 steps (seed 0; the {res['n_low']} rows with G <= 0 "
             "measured here, the rows with G > 0 as committed by explore_early_success): Spearman with the realised "
             "held-out Δpass@1 within each world (* the shipped models were fitted on it)", "",
             f"{'world':20s} " + " ".join(f"{k:>13s}" for k in ORDERS) + f" {'G<=0: read':>13s} {'G<=0: shipped':>14s}"]
    for w in res["per_world"]["shipped"]:
        mark = "" if w in res["never_fitted"] else " *"
        lines.append(f"{w + mark:20s} " + " ".join(f"{res['per_world'][k][w]:+13.2f}" for k in ORDERS)
                     + f" {res['low_per_world']['read'][w]:+13.2f} {res['low_per_world']['shipped'][w]:+14.2f}")
    lines += ["", f"mean over the {n} never-fitted worlds (over all {len(res['per_world']['shipped'])}):"]
    lines += [f"  {k:13s} {m['never_fitted']:+.3f} ({m['all']:+.3f})" for k, m in res["means"].items()]
    lines += [f"  among the rows with G <= 0: the read {res['low']['read']['never_fitted']:+.3f}, the shipped ranking "
              f"{res['low']['shipped']['never_fitted']:+.3f}",
              f"pooled over the {res['n_rows']} rows: the read's Spearman {res['pooled']:+.3f} ({res['missing']} rows "
              "without a read)", "",
              "reading rule (docstring): " + (
                  "a quarter of every run ranks the rows at the issue's 0.80: the shortfall is the cost bound"
                  if res["enough"] else
                  "not even a quarter of every candidate run ranks the rows at the issue's 0.80 in these worlds")]
    return "\n".join(lines)


def main(argv=None) -> int:
    return explore_cli(argv, __doc__, measure, keep, lambda: render(report()), worlds)


if __name__ == "__main__":
    sys.exit(main())
