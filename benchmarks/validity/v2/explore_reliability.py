"""An exploration (committed before it was run; it chooses nothing by itself): does the shipped ranking improve when
each lookahead feature is shrunk, within a diagnosis, by how reliably that diagnosis measured it?

The lookahead's estimates carry intervals over the measurement problems. Where a diagnosis' rows differ in a
lookahead feature by little more than that noise (a student that hardly learns, as in shale and cinder), the shipped
model still reads the differences as signal. The rule takes no fitted weight: per diagnosis and lookahead feature f
(lookahead_dv, lookahead_dll, lookahead_kl), with se_i = (hi_i - lo_i) / (2 x 1.96) of each row's 95% interval,
reliability lambda_f = clip(1 - mean(se_i^2) / var(x_f), 0, 1) (var over the rows, ddof 1), and each row's x_f is
replaced by mean(x_f) + lambda_f (x_f - mean(x_f)) before the shipped v2 model predicts; the product's ranking
(v2_config) then orders the rows as shipped. Per world: Spearman with the realised held-out delta pass@1 of the
shipped ranking, of the shrunk one and of G, with each feature's lambda; then the means over the worlds v2 was never
fitted on and over the nine checked since the ranking shipped. Anything chosen from it is judged on a world built
after its plan (plan_checks.yaml amendment 9: basalt).

Reading of its output (explore_reliability.txt): the lookahead's KL, the feature that carries most of the lookahead's
weight in the shipped model, is measured reliably in almost every diagnosis (lambda near 1), so shrinking leaves it
as it is; the success columns (dv, dll) are mostly noise and shrink to their means. The ranking barely moves: over
the 21 worlds v2 was never fitted on +0.737 against the shipped +0.734 (above it in 6, below in 5), over the nine
checked since it shipped +0.681 against +0.688. Where the shipped ranking loses to G (shale, hearth), the KL it reads
is reliable and still misleads. No look follows; basalt is a check only (amendment 9b).

    python benchmarks/validity/v2/explore_reliability.py > benchmarks/validity/v2/explore_reliability.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_tier_ranking import LATER  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.v2.looks import model_file, product_order, shipped_order  # noqa: E402

LOOKAHEAD = ("lookahead_dv", "lookahead_dll", "lookahead_kl")
Z = 1.959963984540054


def reliability(est: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> float:
    """1 - (mean squared standard error) / (variance between rows), clipped to [0, 1]; NaN under two finite rows."""
    k = np.isfinite(est) & np.isfinite(lo) & np.isfinite(hi)
    if k.sum() < 2 or np.var(est[k], ddof=1) == 0:
        return float("nan")
    se2 = ((hi[k] - lo[k]) / (2 * Z)) ** 2
    return float(np.clip(1.0 - se2.mean() / np.var(est[k], ddof=1), 0.0, 1.0))


def shrunk(rows: list[dict], intervals: dict) -> tuple[list[dict], dict[str, float]]:
    """The rows with each lookahead feature pulled toward its diagnosis mean by its reliability (NaN stays NaN)."""
    out, lam = [dict(r) for r in rows], {}
    for f in LOOKAHEAD:
        est = np.array([v2._num(r[f]) for r in rows])
        lo = np.array([v2._num(intervals[(r["config"], r["method"])][f].get("lo")) for r in rows])
        hi = np.array([v2._num(intervals[(r["config"], r["method"])][f].get("hi")) for r in rows])
        lam[f] = reliability(est, lo, hi)
        if np.isfinite(lam[f]):
            m = float(np.nanmean(est))
            for r, x in zip(out, est):
                r[f] = m + lam[f] * (x - m) if np.isfinite(x) else r[f]
    return out, lam


def main() -> int:
    shipped = model_file(16)
    worlds = list(dict.fromkeys([*WORLDS, *LATER]))
    print(f"{'world':34s} rows  shipped  shrunk  G      lambda dv   dll   kl")
    table = {}
    for w in worlds:
        rows = look2.load_rows({"worlds": [w]})
        intervals = {(x["config"], x["method"]): x for x in json.loads(look2.lookahead_file(w).read_text())["rows"]}
        y = v2.target(rows, "d_pass1")
        small, lam = shrunk(rows, intervals)
        rho = {"shipped": stats.spearman(shipped_order(rows, shipped), y),
               "shrunk": stats.spearman(product_order(small, look8.product_gain(small, shipped), "v2_config"), y),
               "G": stats.spearman(np.array([v2._num(r["accuracy_gap"]) for r in rows]), y)}
        table[w] = rho
        tag = " (fitted)" if w in look8.FITTED else " (after shipping)" if w in LATER else ""
        print(f"{w + tag:34s} {len(rows):4d}  {rho['shipped']:+.2f}    {rho['shrunk']:+.2f}   {rho['G']:+.2f}  "
              f"       {lam['lookahead_dv']:.2f}  {lam['lookahead_dll']:.2f}  {lam['lookahead_kl']:.2f}")
    for name, keep in (("worlds v2 was never fitted on", [w for w in worlds if w not in look8.FITTED]),
                       ("worlds checked since the ranking shipped", LATER), ("worlds", worlds)):
        m = {k: float(np.mean([table[w][k] for w in keep])) for k in ("shipped", "shrunk", "G")}
        up = sum(table[w]["shrunk"] > table[w]["shipped"] + 1e-9 for w in keep)
        down = sum(table[w]["shrunk"] < table[w]["shipped"] - 1e-9 for w in keep)
        print(f"mean over the {len(keep)} {name}: shipped {m['shipped']:+.3f}, shrunk {m['shrunk']:+.3f}, "
              f"G {m['G']:+.3f}; shrunk above shipped in {up}, below in {down} of {len(keep)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
