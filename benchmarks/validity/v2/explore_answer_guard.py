"""Would the answer-only failure check have kept the recommendation off its misses? A look at seen worlds (it ships
nothing), written after explore_recommended_miss.py found every recommended `self_answer` row far below its world's
best, and after the answer-only check (core.failure_checks.answer_signal) was added to the product.

The check reads a diagnosis' tokens, which the committed rows do not hold: only the worlds whose study directories
this machine still had when it was written (the checks of amendments 42 to 50), measured into answer_shares.json
(answer_shares.py), are here.

Per world: the configs the check flags; the product's recommended row (the best-ranked with G > 0) and the guarded
one (the best-ranked with G > 0 whose config is not flagged), each with what it realised; the per-world Spearman of
the product ranking and of the guarded ranking (every row of a flagged config moved below every other row, each part
in the product's order). Every world here was already read: this can suggest a candidate, never judge one.

Reading of its output (explore_answer_guard.txt): the check flags `self_answer` in 7 of the 16 worlds and nothing
else. Guarding the recommendation changed it in 2, each for the better (danburite -0.069 to +0.677, zincite -0.008
to +0.188; the mean recommended row +0.229 to +0.288), and in none for the worse. Moving the flagged rows to the bottom
of the ranking lowers the mean per-world Spearman (+0.795 to +0.758): a flagged config's rows are not always the
worst (rows with G < 0 realise worse). A candidate for the next look: the guard on the recommendation alone, the
ranking unchanged, judged on worlds built after its plan.

    python benchmarks/validity/v2/explore_answer_guard.py > benchmarks/validity/v2/explore_answer_guard.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import answer_shares  # noqa: E402
from benchmarks.validity.v2 import report_checks as rc  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import product_gain, product_order  # noqa: E402

WORLDS = ("anglesite", "axinite", "benitoite", "celestine", "cordierite", "danburite", "idocrase", "petalite", "rutile",
          "scheelite", "smithsonite", "sodalite", "sphalerite", "tremolite", "vanadinite", "zincite")  # measured then


def world(w: str, shares: dict) -> dict:
    rows = rc.rows_of(w)
    order = product_order(rows, product_gain(rows, rc.as_checked(w)), rc.LATER)
    flag = answer_shares.flagged(shares)
    guarded = order - len(rows) * np.array([r["config"] in flag for r in rows], float)  # flagged rows last
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    y = v2.target(rows, "d_pass1")

    def pick(score):
        k = np.flatnonzero(g > 0)
        return int(k[np.argmax(score[k])]) if k.size else None

    out = {"flagged": sorted(flag), "best": float(np.nanmax(y))}
    for name, score in (("product", order), ("guarded", guarded)):
        i = pick(score)
        out[name] = {"spearman": stats.spearman(score, y),
                     "row": None if i is None else f"{rows[i]['config']} with {rows[i]['method']}",
                     "realised": None if i is None else float(y[i])}
    return out


def report() -> dict:
    shares = answer_shares.load()
    return {w: world(w, shares[w]) for w in WORLDS}


def main() -> None:
    res = report()
    print(f"{'world':12} {'flagged':14} {'product':>8} {'guarded':>8}  recommended: product (realised) | guarded "
          "(realised) | best")
    for w, r in res.items():
        p, gd = r["product"], r["guarded"]
        print(f"{w:12} {','.join(r['flagged']) or '-':14} {p['spearman']:+8.2f} {gd['spearman']:+8.2f}  "
              f"{p['row']} ({p['realised']:+.3f}) | {gd['row']} ({gd['realised']:+.3f}) | {r['best']:+.3f}")
    n = len(res)
    mean = {k: float(np.mean([r[k]["spearman"] for r in res.values()])) for k in ("product", "guarded")}
    rec = {k: float(np.mean([r[k]["realised"] for r in res.values()])) for k in ("product", "guarded")}
    changed = [w for w, r in res.items() if r["product"]["row"] != r["guarded"]["row"]]
    print(f"\nover the {n} worlds: mean per-world Spearman product {mean['product']:+.3f}, guarded "
          f"{mean['guarded']:+.3f}; the recommended row realised product {rec['product']:+.3f}, guarded "
          f"{rec['guarded']:+.3f} on average; the guard changed the recommendation in {len(changed)} "
          f"({', '.join(changed) or 'none'}); flagged configs: "
          + ", ".join(f"{c} in {sum(c in r['flagged'] for r in res.values())}"
                      for c in sorted({c for r in res.values() for c in r['flagged']})))


if __name__ == "__main__":
    main()
