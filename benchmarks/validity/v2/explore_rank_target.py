"""Would the gain model rank a world's rows better if it were fitted to their order instead of their size? An
exploration (kept as a look; nothing ships from it), written after the twelfth look: an ad-hoc run of the same
computation came first, and this file reprints it.

The shipped ridge is fitted to the raw realised Δpass@1 pooled over worlds, so worlds with large changes weigh most,
while the product is judged on the order of rows within a world. Over the 44 seen worlds of plan_look11.yaml (their
committed rows only), leave one world out with the first look's design (tiers, alpha), fitted to:

- ``raw``: the realised Δpass@1 (what the first look and the tenth look's refit used);
- ``rank``: its rank within the world, scaled to [-0.5, +0.5];
- ``z``: its z-score within the world;

each with the features as they are or standardised within the world (``_ws``). Every candidate is ranked as the
product ranks (``v2_config``) and compared, world by world, with the shipped ranking over the 37 worlds the shipped
models were never fitted on.

Reading of its output (explore_rank_target.txt): no target or standardisation moves the mean by more than about 0.01
from the shipped ranking's +0.73, within the bootstrap's noise. What the ranking lacks is information, not a better
fit of the columns it has: the tenth look's refit on every seen world said the same.

    python benchmarks/validity/v2/explore_rank_target.py > benchmarks/validity/v2/explore_rank_target.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_look11 as look11  # noqa: E402
from benchmarks.validity.v2.looks import model_file  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import by_tier  # noqa: E402

TARGETS = ("raw", "rank", "z")


def within(x: np.ndarray, worlds: np.ndarray, how: str) -> np.ndarray:
    """``x`` transformed within each world over its finite values: ``rank`` (scaled to [-0.5, +0.5], ties averaged)
    or ``z`` (mean 0, SD 1; 0 where the world's values are all equal); NaN stays NaN."""
    out = np.full(len(x), np.nan)
    for w in sorted(set(worlds)):
        k = np.flatnonzero((worlds == w) & np.isfinite(x))
        if len(k) < 2:
            continue
        if how == "rank":
            out[k] = (rankdata(x[k]) - 1.0) / (len(k) - 1.0) - 0.5
        else:
            sd = x[k].std()
            out[k] = (x[k] - x[k].mean()) / sd if sd > 0 else 0.0
    return out


def candidates(rows: list[dict]) -> dict[str, np.ndarray]:
    """Each candidate's leave-one-world-out predicted gain, as the product applies a model (tier v2 with a lookahead
    result, else v2_no_lookahead); the rows gain the transformed target and features they fit on."""
    d = look10.design()
    w = np.array([r["world"] for r in rows])
    y = v2.target(rows, "d_pass1")
    for how in ("rank", "z"):
        for r, v in zip(rows, within(y, w, how)):
            r[f"d_pass1_{how}"] = {"estimate": float(v)}
    for f in sorted({f for fs in d["tiers"].values() for f in fs}):
        for r, v in zip(rows, within(np.array([v2._num(r[f]) for r in rows]), w, "z")):
            r[f"ws_{f}"] = float(v)
    out = {}
    for t in TARGETS:
        for ws in (False, True):
            tiers = {k: [f"ws_{f}" if ws else f for f in fs] for k, fs in d["tiers"].items()}
            target = "d_pass1" if t == "raw" else f"d_pass1_{t}"
            folds = {k: v2.lowo(rows, fs, target, d["alpha"], inner=False) for k, fs in tiers.items()}
            out[t + ("_ws" if ws else "")] = by_tier({k: folds[k]["pred"] for k in folds}, rows)
    return out


def main() -> None:
    p = look11.plan()["seen_worlds"]
    seven, never = list(p["fitted_by_look1"]), list(p["never_fitted"])
    rows = look2.load_rows({"worlds": [*seven, *never]})
    shipped = model_file(16)["models"]
    gain = {"shipped": look10.applied({t: {"d_pass1": shipped[t]["d_pass1"]} for t in shipped}, rows)["d_pass1"]["pred"],
            **candidates(rows)}
    per = {k: v2.per_world(x, rows, "d_pass1")["worlds"] for k, x in look10.orders(rows, gain).items()}
    print(f"{len(rows)} rows, {len(seven) + len(never)} seen worlds; leave one world out, ranked as the product ranks "
          f"(v2_config); Spearman with the realised Δpass@1 within each world")
    print()
    print(f"{'candidate':14s} {'mean, 37 never fitted':>22s} {'mean, all 44':>13s}   minus shipped over the 37 "
          f"[95%, bootstrap over worlds]  above/below")
    for k, x in per.items():
        line = f"{k:14s} {np.mean([x[w] for w in never]):>+22.3f} {np.mean(list(x.values())):>+13.3f}"
        if k not in ("accuracy_gap", "shipped"):
            d = look10.paired_mean(x, per["shipped"], never)
            line += f"   {d['estimate']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]  {d['above']}/{d['below']}"
        print(line)


if __name__ == "__main__":
    main()
