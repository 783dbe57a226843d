"""Exploration before the eighteenth look: can a classifier on the diagnosis' own columns make the verdict decisive?

Every row of every world checked so far (``checks/*_analysis.json``: each row's diagnosis columns and its realised
class, improves / no clear change / degrades) is the data. A multinomial logistic regression on standardised columns
(L2 penalty, ``decisive.fit``) gives each row P(improves) and P(degrades); the verdict is helps where
P(improves) >= t_help, hurts where P(degrades) >= t_hurt, unclear otherwise. Judged out of sample twice: leaving one
world out, and leaving one recipe out (worlds that share a student shape, task family, contexts and number of
errors), over a grid of column sets and thresholds, against the issue's targets (decisive calls >= 85% right, helps
precision >= 0.7, hurts precision >= 0.9, <= 40% unclear). The pick: the column set and thresholds that meet the
three precision targets under both schemes with the smallest unclear share (the larger of the two), fewer columns on
a tie. Seen data only: this chooses what a look would test; it tests nothing.

    python benchmarks/validity/v2/explore_decisive.py > benchmarks/validity/v2/explore_decisive.txt
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.validity.v2 import decisive  # noqa: E402

GRID = [round(0.5 + 0.05 * i, 2) for i in range(9)]  # 0.50 .. 0.90
SETS = {
    "all": decisive.COLUMNS,
    "no sign agreement": tuple(c for c in decisive.COLUMNS if c != "opd2_sign_agreement"),
    "no alignment, no A_T": tuple(c for c in decisive.COLUMNS if c not in ("alignment", "teacher_advantage")),
    "G, loss, compat, divergences": ("G", "full", "G*full", "|G|", "teachability", "log1p mean_jsd",
                                     "log1p mean_rev_kl"),
    "G and loss": ("G", "full", "G*full", "|G|"),
}


@functools.lru_cache(None)
def spec(world: str) -> dict:
    for p in (REPO / "sample_data" / "worlds" / f"{world}.yaml", HERE / "checks" / f"{world}.yaml"):
        if p.is_file():
            return yaml.safe_load(p.read_text())
    raise FileNotFoundError(world)


def recipe(world: str) -> str:
    s = spec(world)
    st = s["student"]
    second = "second" in json.dumps(s) or "skills" in st
    return str((s["task"].get("family", "arith"), st["shape"]["hidden"], tuple(sorted(st["contexts"])),
                len(st["misconceptions"]), second))


def judge(p: np.ndarray, y: np.ndarray, t_help: float, t_hurt: float) -> dict:
    v = decisive.verdicts(p, t_help, t_hurt)
    dec = v != decisive.UNCLEAR
    helps, hurts = v == decisive.IMPROVES, v == decisive.DEGRADES
    return {"n": int(len(y)), "decisive": int(dec.sum()), "right": float(((v == y) & dec).sum() / max(dec.sum(), 1)),
            "unclear": float(1 - dec.mean()), "helps": int(helps.sum()),
            "helps_precision": float((helps & (y == decisive.IMPROVES)).sum() / helps.sum()) if helps.any() else math.nan,
            "hurts": int(hurts.sum()),
            "hurts_precision": float((hurts & (y == decisive.DEGRADES)).sum() / hurts.sum()) if hurts.any() else math.nan}


def meets(j: dict) -> bool:
    return (j["right"] >= 0.85 and j["helps"] > 0 and j["helps_precision"] >= 0.7 and j["hurts"] > 0
            and j["hurts_precision"] >= 0.9)


def main() -> None:
    rows, worlds = decisive.check_rows()
    y = np.array([decisive.CLASS[r["realised"]] for r in rows])
    groups = {"world": np.array(worlds), "recipe": np.array([recipe(w) for w in worlds])}
    print(f"{len(rows)} rows, {len(set(worlds))} worlds, {len(set(groups['recipe']))} recipes; realised: "
          + ", ".join(f"{k} {int((y == v).sum())}" for k, v in decisive.CLASS.items()))
    best = None
    for name, cols in SETS.items():
        X = decisive.matrix(rows, cols)
        probs = {g: decisive.cross_validated(X, y, groups[g]) for g in groups}
        print(f"\n{name} ({len(cols)}: {', '.join(cols)})")
        for th in GRID:
            for td in GRID:
                js = {g: judge(probs[g], y, th, td) for g in groups}
                ok = all(meets(j) for j in js.values())
                unclear = max(j["unclear"] for j in js.values())
                if th in (0.6, 0.7, 0.8) and td in (0.8, 0.85, 0.9) or ok:
                    print(f"  help >= {th:.2f}, hurt >= {td:.2f}: " + " | ".join(
                        f"{g}: right {j['right']:.3f} unclear {j['unclear']:.2f} helps {j['helps_precision']:.2f} of "
                        f"{j['helps']} hurts {j['hurts_precision']:.2f} of {j['hurts']}" for g, j in js.items())
                        + ("  meets" if ok else ""))
                if ok and (best is None or (unclear, len(cols)) < (best[0], len(best[1]))):
                    best = (unclear, cols, th, td, name)
    if best is None:
        print("\nno column set and thresholds meet the precision targets under both schemes")
    else:
        print(f"\npick: {best[4]} with help >= {best[2]:.2f}, hurt >= {best[3]:.2f} (unclear {best[0]:.2f} at the "
              "worse scheme)")


if __name__ == "__main__":
    main()
