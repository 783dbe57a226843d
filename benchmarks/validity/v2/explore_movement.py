"""An exploration after loam and marl were checked (not pre-registered; it chooses nothing by itself): does the
accuracy gap G rank better once it is scaled by how far training moves the student? The rank errors
(explore_rank_errors.txt) are mostly self-teachers with a large G whose training barely moved the student (a tiny
lookahead KL) and realised about 0, and teachers with G < 0 that moved it little and lost little. A row's expected
change is read as direction times distance: G times the lookahead's KL relative to the median KL of its own
diagnosis (no fitted weight). Candidates, all fixed before this ran and all printed:

- ``gk``: rows by G x r, r = KL / median KL of the diagnosis's rows (a missing KL: r = 1);
- ``gk_sqrt``: rows by G x sqrt(r);
- ``gk_cap``: rows by G x min(r, 1) (movement can only shrink G);
- ``gk_config``: configurations by the mean of G x r over their methods, then the sign-of-G order within one (the
  shipped ``v2_config`` order with G x r in place of v2's gain).

Per world: the Spearman with the realised Δpass@1 of the shipped ranking, G and each candidate; then means over the
worlds v2 was never fitted on, the six built after the ranking shipped, and all.

    python benchmarks/validity/v2/explore_movement.py > benchmarks/validity/v2/explore_movement.txt
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
from benchmarks.validity.v2.looks import model_file, product_order, shipped_order  # noqa: E402

LATER = ["tallow", "wick", "flint", "hearth", "loam", "marl"]  # checked since the eighth look shipped its ranking
RULES = ("shipped", "G", "gk", "gk_sqrt", "gk_cap", "gk_config")


def movement(rows: list[dict]) -> np.ndarray:
    """Each row's lookahead KL over the median of its diagnosis's rows (1 where missing)."""
    kl = np.array([v2._num(r["lookahead_kl"]) for r in rows])
    med = np.nanmedian(kl) if np.isfinite(kl).any() else np.nan
    r = kl / med if np.isfinite(med) and med > 0 else np.ones_like(kl)
    return np.where(np.isfinite(r), r, 1.0)


def scores(rows: list[dict], shipped: dict) -> dict[str, np.ndarray]:
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    r = movement(rows)
    return {"shipped": shipped_order(rows, shipped), "G": g,
            "gk": g * r, "gk_sqrt": g * np.sqrt(r), "gk_cap": g * np.minimum(r, 1.0),
            "gk_config": product_order(rows, g * r, "v2_config")}


def main() -> int:
    shipped = model_file(16)
    worlds = list(dict.fromkeys([*WORLDS, *LATER]))
    print(f"{'world':34s} rows  " + "  ".join(f"{k:>9s}" for k in RULES))
    table = {}
    for w in worlds:
        rows = look2.load_rows({"worlds": [w]})
        y = v2.target(rows, "d_pass1")
        table[w] = {k: stats.spearman(s, y) for k, s in scores(rows, shipped).items()}
        tag = " (v2 fitted on it)" if w in look8.FITTED else " (after it shipped)" if w in LATER else ""
        print(f"{w + tag:34s} {len(rows):4d}  " + "  ".join(f"{table[w][k]:+9.2f}" for k in RULES))
    means(table, worlds, RULES)
    return 0


def means(table: dict, worlds: list[str], rules: tuple[str, ...], later: list[str] = LATER) -> None:
    """Print each rule's mean Spearman over the unfitted, the ``later`` and all worlds, and how often the rules after
    the first two (shipped, G) beat the shipped ranking."""
    for name, keep in (("worlds v2 was never fitted on", [w for w in worlds if w not in look8.FITTED]),
                       ("worlds built after the ranking shipped", later), ("worlds", worlds)):
        m = {k: float(np.mean([table[w][k] for w in keep])) for k in rules}
        wins = {k: sum(table[w][k] > table[w]["shipped"] for w in keep) for k in rules[2:]}
        print(f"mean over the {len(keep)} {name}: " + ", ".join(f"{k} {m[k]:+.3f}" for k in rules)
              + "; above shipped in " + ", ".join(f"{k} {wins[k]}/{len(keep)}" for k in wins))


if __name__ == "__main__":
    sys.exit(main())
