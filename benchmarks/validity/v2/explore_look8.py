"""An exploration after the seventh look, kept as a look (not pre-registered): does the teacher's implicit reward on
the student's own rollouts (the summed log-ratio log p_T(y) − log p_S(y), which sampled-token OPD ascends) rank the
verified-correct rollouts of a prompt above its incorrect ones, and does that *discrimination* rank the worlds' rows
better than the accuracy gap G? G asks whether the teacher solves the problem when it samples itself; training never
sees the teacher's samples, only its scores of the student's: a teacher that solves less often than the student can
still reward the right rollouts (the external teacher with the solution in chains, ledger, rule_vs_instance2), and
one that solves everything can reward nothing the student can learn (explore_rank_errors.txt).

On the thirteen worlds seen so far (every row chosen from here must be judged on a world built after its plan):
rediagnoses each world with its study's own diagnosis configs (same seeds, the same student rollouts; about 30 s a
world, resumable), computes per teacher config

- ``disc_auc``: over the prompts with both correct and incorrect rollouts, the share of (correct, incorrect) pairs
  whose mean per-token log-ratio is higher on the correct one, minus 0.5;
- ``disc_cov``: the mean over all prompts of the within-prompt covariance of success and the summed log-ratio (the
  first-order policy-gradient term of the sequence-level implicit reward; prompts all right or all wrong give 0);
- ``disc_cov_mean``: the same with the mean per-token log-ratio;

and prints, per world and as the mean of the per-world Spearman coefficients with the realised Δpass@1, the shipped
order (G, then the method order by the sign of G, then v2's gain), each column in G's place (method order by its
own sign), and the sum of G's and each column's within-world z-scores (method order by the sign of G).

    python benchmarks/validity/v2/explore_look8.py --diag /work/runs/re13 > benchmarks/validity/v2/explore_look8.txt
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_look7 as R  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import product_order, shipped_gain  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
COLUMNS = ("disc_auc", "disc_cov", "disc_cov_mean")


def rediagnose(world: str, out: Path) -> None:
    """The world's study diagnoses (run_worlds' own layout and configs) into ``out/<world>/diag/<run>``."""
    subprocess.run([sys.executable, str(HERE.parent / "worlds" / "run_worlds.py"), "--layout-only", "--out", str(out),
                    "--worlds", world], check=True, stdout=subprocess.DEVNULL)
    for cfg in sorted((out / world / "configs").glob("diag.*.yaml")):
        run = out / world / "diag" / cfg.stem.removeprefix("diag.")
        if not (run / "summary.json").is_file():
            subprocess.run(["opsd-diag", "run", str(cfg), "--out", str(run)], check=True, stdout=subprocess.DEVNULL)


def discrimination(run: Path) -> pd.DataFrame:
    """Per teacher config of one diagnosis run: the three discrimination columns."""
    tok = pd.read_parquet(run / "tokens.parquet", columns=["rollout_id", "config", "r_opd"])
    ro = pd.read_parquet(run / "rollouts.parquet", columns=["rollout_id", "problem_id", "correct"])
    seq = tok.groupby(["config", "rollout_id"])["r_opd"].agg(["sum", "mean"]).reset_index()
    seq = seq.merge(ro, on="rollout_id")
    seq["y"] = seq["correct"].astype(float)
    out = []
    for c, g in seq.groupby("config"):
        wins = pairs = 0.0
        covs, covs_mean = [], []
        for _, p in g.groupby("problem_id"):
            y = p["y"].to_numpy()
            covs.append(np.mean((y - y.mean()) * (p["sum"] - p["sum"].mean())))
            covs_mean.append(np.mean((y - y.mean()) * (p["mean"] - p["mean"].mean())))
            a, b = p.loc[p["correct"], "mean"].to_numpy(), p.loc[~p["correct"], "mean"].to_numpy()
            if len(a) and len(b):
                d = a[:, None] - b[None, :]
                wins += float((d > 0).sum() + 0.5 * (d == 0).sum())
                pairs += d.size
        out.append({"config": c, "disc_auc": wins / pairs - 0.5 if pairs else np.nan,
                    "disc_cov": float(np.mean(covs)), "disc_cov_mean": float(np.mean(covs_mean))})
    return pd.DataFrame(out)


def order_by(rows: list[dict], score: np.ndarray, sign: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """Scores that rank ``rows`` by ``score``, then a config's full-distribution methods first where ``sign`` > 0 and
    last otherwise, then ``gain`` (the product's tie-breaks, with ``score`` in G's place)."""
    keys = [model.gap_rank_key(r["method"], float(s), float(p), "sign_of_g") for r, s, p in zip(rows, sign, gain)]
    order = sorted(range(len(rows)), key=lambda i: (-score[i], keys[i]), reverse=True)  # the last ranked first
    out = np.empty(len(rows))
    out[order] = np.arange(len(rows), dtype=float)
    return out


def z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() or 1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diag", type=Path, required=True, help="where the rediagnoses go (resumable)")
    args = ap.parse_args(argv)
    shipped = json.loads((HERE.parents[2] / "opsd_diag/data/predictor_v2.json").read_text())
    worlds = R.worlds()
    rows = L.load_rows({"worlds": worlds})
    gain = shipped_gain(rows, shipped)
    y = np.array([v2._num(r["d_pass1"]["estimate"]) for r in rows])
    feats = {}
    for w in worlds:
        rediagnose(w, args.diag.resolve())
        for run in sorted((args.diag / w / "diag").iterdir()):
            for _, f in discrimination(run).iterrows():
                feats[(w, run.name, f["config"])] = f
    world = np.array([r["world"] for r in rows])
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    x = {c: np.array([feats[(r["world"], r["diagnosis_run"], r["diagnosis_config"])][c] for r in rows]) for c in COLUMNS}
    rules = {"shipped (G)": lambda k: product_order([rows[i] for i in k], gain[k], "sign_of_g")}
    for c in COLUMNS:
        rules[c] = lambda k, c=c: order_by([rows[i] for i in k], x[c][k], x[c][k], gain[k])
        rules[f"z(G)+z({c})"] = lambda k, c=c: order_by([rows[i] for i in k], z(g[k]) + z(x[c][k]), g[k], gain[k])
    for w in worlds:  # order_by with G in G's place is the shipped order
        k = np.flatnonzero(world == w)
        assert np.array_equal(order_by([rows[i] for i in k], g[k], g[k], gain[k]), rules["shipped (G)"](k)), w
    per = {name: [] for name in rules}
    print("Spearman with the realised Δpass@1 within each world (rows: rules; columns: worlds)")
    print(f"{'rule':24s} " + " ".join(f"{w[:8]:>8s}" for w in worlds) + "     mean")
    for name, rule in rules.items():
        for w in worlds:
            k = np.flatnonzero(world == w)
            per[name].append(float(spearmanr(rule(k), y[k])[0]))
        print(f"{name:24s} " + " ".join(f"{v:+8.2f}" for v in per[name]) + f"   {np.mean(per[name]):+.3f}")
    print("\nper config (world, run, config): G and the columns")
    seen = set()
    for r in rows:
        key = (r["world"], r["diagnosis_run"], r["diagnosis_config"])
        if key in seen:
            continue
        seen.add(key)
        f = feats[key]
        print(f"  {key[0]:17s} {key[2]:15s} G {v2._num(r['accuracy_gap']):+.2f}  "
              + "  ".join(f"{c} {f[c]:+.3f}" for c in COLUMNS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
