"""An exploration (not pre-registered as a look; it chooses nothing by itself, and pumice, the world plan_checks.yaml
amendment 7 built for a look, is not in it): does the lookahead's change of the log-likelihood of reference solutions
rank the configurations better than what ships? The lookahead's own success measures are noisy or undefined where a
measurement prompt lacks a correct or an incorrect rollout (``dll``), and four steps flip few samples; the reference
response of every measurement problem (``lookahead.reference``: ``reference_ll``, the mean per-token log-likelihood
change of it under the stepped student, docs/signals.md) is defined wherever the problems have solutions, scores no
sample, and asks whether the steps taught the student something that holds on problems it never trained on.

Each world with committed rows and models on this machine (marl's and sorrel's builds are not shipped: left out) is
rediagnosed as ``run_v2.py`` does (the worlds study's diagnosis configs and the v2 lookahead, same seeds) with one
addition, fixed before any run: ``lookahead.reference`` = "{solution}\\nAnswer: {answer}" (the toy task's response,
``zoo.task.reasoning_response``). The rediagnosis must reproduce the committed ``lookahead_kl`` of every row (printed).

Printed, all fixed before any run; per world the Spearman with the realised held-out Δpass@1 of:

- ``shipped``: the product's ranking (v2_config: configs by the mean of v2's predicted gains, methods by G's sign);
- ``G``: the accuracy gap alone;
- ``ref``: rows by ``reference_ll`` (here and below a missing value ranks last);
- ``ref_config``: configs by the mean of ``reference_ll`` over their methods, methods by G's sign (v2_config's order
  with ``reference_ll`` in place of v2's gain);
- ``v2_refit``: v2's Δpass@1 model refitted exactly as shipped (ridge, the file's alpha, on the rows of the seven
  worlds it was fitted on), ranked v2_config: a check that the refit reproduces ``shipped``;
- ``v2_ref``: the same refit with ``reference_ll`` as one more feature;
- ``v2_refz``: the same with ``reference_ll`` standardised within its world's rows (mean 0, SD 1: a diagnosis compares
  its own configurations, and the scale of a log-likelihood change follows the world's step size and model);
- ``ens_ref``: the mean of a row's within-world ranks under ``shipped`` and ``ref_config``.

Then each rule's mean over the worlds v2 was never fitted on (the refits are judged only there: the seven are their
training rows), over the five built after the ranking shipped, and over all, with how often each beats ``shipped``.

    python benchmarks/validity/v2/explore_reference_ll.py --out DIR [--worlds a,b]     # rediagnose
    python benchmarks/validity/v2/explore_reference_ll.py --out DIR --keep             # rows: reference_ll_rows.json
    python benchmarks/validity/v2/explore_reference_ll.py --report > benchmarks/validity/v2/explore_reference_ll.txt
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import explore_forgetting_lookahead as efl  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.v2.explore_movement import means  # noqa: E402
from benchmarks.validity.v2.looks import model_file, product_order  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

TEMPLATE = "{solution}\nAnswer: {answer}"
LATER = ["tallow", "wick", "flint", "hearth", "loam"]  # built after the eighth look shipped its ranking, shipped builds
KEPT = Path(__file__).resolve().parent / "reference_ll_rows.json"
KEYS = ("config", "method", "reference_ll", "reference_kl", "lookahead_kl")
RULES = ("shipped", "G", "ref", "ref_config", "v2_refit", "v2_ref", "v2_refz", "ens_ref")


def reference_section(plan: dict, world_dir: Path) -> dict:
    return {"reference": TEMPLATE}


def reference_columns(la: dict, res: dict) -> dict:
    return {k: (res.get(k) or {}).get("estimate") for k in ("reference_ll", "reference_kl")}


def rediagnose(name: str, plans: dict, out: Path) -> None:
    efl.rediagnose(name, plans, out, reference_section, reference_columns)


def with_reference(name: str, source: dict[str, list[dict]]) -> list[dict]:
    """The world's committed rows with ``reference_ll`` (and its within-world z-score ``reference_llz``) and the
    rediagnosed ``lookahead_kl`` (``kl_again``)."""
    la = {(r["config"], r["method"]): r for r in source[name]}
    rows = [{**r, "reference_ll": la[(r["config"], r["method"])]["reference_ll"],
             "kl_again": la[(r["config"], r["method"])]["lookahead_kl"]} for r in look2.load_rows({"worlds": [name]})]
    x = np.array([v2._num(r["reference_ll"]) for r in rows])
    z = (x - np.nanmean(x)) / np.nanstd(x) if np.nanstd(x) > 0 else np.zeros_like(x)
    return [{**r, "reference_llz": float(v)} for r, v in zip(rows, z)]


def report(source: dict[str, list[dict]]) -> int:
    shipped = model_file(16)
    base = shipped["models"]["v2"]["d_pass1"]
    worlds = [w for w in dict.fromkeys([*WORLDS, *LATER]) if w in source]
    rows = {w: with_reference(w, source) for w in worlds}
    kl_diff = max(abs(v2._num(r["lookahead_kl"]) - v2._num(r["kl_again"])) for w in worlds for r in rows[w]
                  if np.isfinite(v2._num(r["lookahead_kl"])))
    print(f"rediagnosis: {len(worlds)} worlds; every row's lookahead_kl within {kl_diff:.1e} of the committed value")
    feats = {"v2_refit": list(base["features"]), "v2_ref": [*base["features"], "reference_ll"],
             "v2_refz": [*base["features"], "reference_llz"]}
    train = [r for w in look8.FITTED for r in rows[w]]
    y_train = v2.target(train, "d_pass1")
    ok = np.isfinite(y_train)
    fits = {k: model.fit(v2.matrix(train, f)[ok], y_train[ok], f, base["alpha"]) for k, f in feats.items()}
    for k in ("v2_ref", "v2_refz"):
        print(f"{k} coefficients: " + ", ".join(f"{f} {c:+.3f}" for f, c in zip(fits[k]["features"],
                                                                                fits[k]["coef"])))
    print(f"{'world':34s} rows  " + "  ".join(f"{k:>10s}" for k in RULES))
    table = {}
    for w in worlds:
        r, y = rows[w], v2.target(rows[w], "d_pass1")
        ref = np.array([v2._num(x["reference_ll"]) for x in r])  # a missing one ranks last (as in product_order)
        out = {"shipped": product_order(r, look8.product_gain(r, shipped), "v2_config"),
               "G": np.array([v2._num(x["accuracy_gap"]) for x in r]), "ref": np.nan_to_num(ref, nan=-np.inf),
               "ref_config": product_order(r, ref, "v2_config")}
        for k, m in fits.items():
            out[k] = product_order(r, model.predict(m, v2.matrix(r, m["features"])), "v2_config")
        out["ens_ref"] = stats.ranks(out["shipped"]) + stats.ranks(out["ref_config"])
        table[w] = {k: stats.spearman(out[k], y) for k in RULES}
        tag = " (v2 fitted on it)" if w in look8.FITTED else " (after it shipped)" if w in LATER else ""
        print(f"{w + tag:34s} {len(r):4d}  " + "  ".join(f"{table[w][k]:+10.2f}" for k in RULES))
    means(table, worlds, RULES, LATER)
    return 0


def main(argv: list[str] | None = None) -> int:
    return efl.main(argv, __doc__, report, functools.partial(efl.keep, keys=KEYS, path=KEPT),
                    functools.partial(efl.kept, KEPT), rediagnose)


if __name__ == "__main__":
    sys.exit(main())
