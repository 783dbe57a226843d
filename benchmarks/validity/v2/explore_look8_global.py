"""A second exploration after the seventh look, kept as a look (not pre-registered), following explore_look8.txt:
there two worlds had no prompt with both a correct and an incorrect rollout, so the within-prompt discrimination was
undefined. Here the teacher's reward is compared across all rollouts of the run: ``disc_global`` is the mean
per-token log-ratio log p_T − log p_S on the correct rollouts minus that on the incorrect ones (mixing prompts: a
teacher can also reward easy prompts). Sampled-token losses ascend exactly that reward, full-distribution losses do
not, so per world it prints Spearman with the realised Δpass@1 of G and of ``disc_global`` on each loss family's rows
apart (a config's rows of one family share both columns; ties broken by nothing).

    python benchmarks/validity/v2/explore_look8_global.py --diag /work/runs/re13 > benchmarks/validity/v2/explore_look8_global.txt
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_look7 as R  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_look8 import rediagnose  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402


def disc_global(run: Path) -> dict[str, float]:
    tok = pd.read_parquet(run / "tokens.parquet", columns=["rollout_id", "config", "r_opd"])
    ro = pd.read_parquet(run / "rollouts.parquet", columns=["rollout_id", "correct"])
    t = tok.merge(ro, on="rollout_id")
    m = t.groupby(["config", "correct"])["r_opd"].mean().unstack()
    return {c: float(m.loc[c].get(True, np.nan) - m.loc[c].get(False, np.nan)) for c in m.index}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diag", type=Path, required=True)
    args = ap.parse_args(argv)
    worlds = R.worlds()
    rows = L.load_rows({"worlds": worlds})
    feats = {}
    for w in worlds:
        rediagnose(w, args.diag.resolve())
        for run in sorted((args.diag / w / "diag").iterdir()):
            feats.update({(w, run.name, c): v for c, v in disc_global(run).items()})
    y = np.array([v2._num(r["d_pass1"]["estimate"]) for r in rows])
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    d = np.array([feats[(r["world"], r["diagnosis_run"], r["diagnosis_config"])] for r in rows])
    world = np.array([r["world"] for r in rows])
    full = np.array([bool(model.LOSS_KIND[r["method"]]) for r in rows])
    print("Spearman with the realised Δpass@1 within each world, per loss family (n: rows)")
    print(f"{'world':18s} {'family':8s} {'n':>3s} {'G':>6s} {'disc_global':>12s}")
    acc = {(f, c): [] for f in ("full", "sampled") for c in ("G", "disc")}
    for w in worlds:
        for fam, sel in (("full", full), ("sampled", ~full)):
            k = np.flatnonzero((world == w) & sel)
            rg, rd = (float(spearmanr(x[k], y[k])[0]) for x in (g, d))
            acc[(fam, "G")].append(rg)
            acc[(fam, "disc")].append(rd)
            print(f"{w:18s} {fam:8s} {len(k):3d} {rg:+6.2f} {rd:+12.2f}")
    for fam in ("full", "sampled"):
        print(f"mean of worlds     {fam:8s}     {np.nanmean(acc[(fam, 'G')]):+6.2f} {np.nanmean(acc[(fam, 'disc')]):+12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
