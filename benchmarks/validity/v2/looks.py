"""The later looks' model design and statistics (plan_look2.yaml, plan_look3.yaml): a centred feature ``c(x)``,
leave-one-world-out fits with the training folds' imputation, the within-diagnosis Spearman of the third look, and
the shipped model's gain and the product's order of rows (looks 5 and 6, check_world.py), and the explorations'
command line. ``report_look2.py`` runs them over the worlds and writes the reports."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np

from benchmarks.validity import stats
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag.core import predictor as model


def feature(name: str) -> tuple[str, bool]:
    """``c(x)`` -> (x, centred)."""
    return (name[2:-1], True) if name.startswith("c(") else (name, False)


def design(rows: list[dict], features: list[str], fill: dict[str, float]) -> np.ndarray:
    """``[n, f]``: raw columns as they are (NaN left to ``model.fit``'s imputation); a centred column is imputed
    with ``fill`` and then centred on the mean of its world's rows (``core.predictor.centre``; features only)."""
    parsed = [feature(f) for f in features]
    X = np.array([[v2._num(r[name]) for name, _ in parsed] for r in rows], dtype=np.float64).reshape(len(rows), -1)
    return model.centre(X, [c for _, c in parsed], [fill.get(name, 0.0) for name, _ in parsed],
                        [r["world"] for r in rows])


def fills(rows: list[dict], features: list[str]) -> dict[str, float]:
    """The fitting rows' mean of each centred feature (the imputation value)."""
    out = {}
    for f in features:
        name, centred = feature(f)
        if centred:
            x = np.array([v2._num(r[name]) for r in rows])
            out[name] = float(np.nanmean(x)) if np.isfinite(x).any() else 0.0
    return out


def lowo(rows: list[dict], features: list[str], outcome: str, alpha: float, inner: bool = True) -> dict:
    """``report_v2.lowo`` with the second look's design (the centred columns imputed from the training folds)."""
    worlds = sorted({r["world"] for r in rows})
    w = np.array([r["world"] for r in rows])
    y = v2.target(rows, outcome)
    pred = np.full(len(rows), np.nan)
    lo, hi = pred.copy(), pred.copy()
    for held in worlds:
        train, test = (w != held) & np.isfinite(y), w == held
        X = design(rows, features, fills([r for r, t in zip(rows, train) if t], features))
        m = model.fit(X[train], y[train], features, alpha)
        pred[test] = model.predict(m, X[test])
        if inner:
            sub = [r for r, t in zip(rows, train) if t]
            inner_pred = lowo(sub, features, outcome, alpha, inner=False)["pred"]
            q_lo, q_hi = model.residual_band(v2.target(sub, outcome) - inner_pred)
            lo[test], hi[test] = pred[test] + q_lo, pred[test] + q_hi
    return {"pred": pred, "lo": lo, "hi": hi}


def within(x, g, rows: list[dict], reps: np.ndarray, boot: dict, alpha: float = 0.05) -> dict:
    """The mean over worlds of the per-world Spearman of ``x`` with realised d_pass1, G's, and their paired
    difference, with a stratified cluster bootstrap: per replicate b, each world's configurations are drawn with
    replacement (all their rows), the realised values being column b of ``reps`` (rows finite in ``x`` and G)."""
    x, g = np.asarray(x, float), np.asarray(g, float)
    y = v2.target(rows, "d_pass1")
    w = np.array([r["world"] for r in rows])
    c = np.array([r["config"] for r in rows])
    keep = np.isfinite(x) & np.isfinite(g) & np.isfinite(y)
    worlds = sorted(set(w[keep]))
    members = {k: [np.flatnonzero(keep & (w == k) & (c == cfg)) for cfg in sorted(set(c[keep & (w == k)]))]
               for k in worlds}

    def means(idx_of, values) -> tuple[float, float]:
        px = [stats.spearman(x[idx_of[k]], values[idx_of[k]]) for k in worlds]
        pg = [stats.spearman(g[idx_of[k]], values[idx_of[k]]) for k in worlds]
        return float(np.nanmean(px)), float(np.nanmean(pg))

    est_x, est_g = means({k: np.concatenate(members[k]) for k in worlds}, y)
    rng = np.random.default_rng(boot["seed"])
    diff, rx = np.full(boot["n"], np.nan), np.full(boot["n"], np.nan)
    for b in range(min(boot["n"], reps.shape[1])):
        idx = {k: np.concatenate([members[k][i] for i in rng.integers(0, len(members[k]), len(members[k]))])
               for k in worlds}
        mx, mg = means(idx, reps[:, b])
        rx[b], diff[b] = mx, mx - mg
    lo, hi = stats.percentile_interval(rx, alpha)
    dlo, dhi = stats.percentile_interval(diff, alpha)
    return {"mean": {"estimate": est_x, "lo": lo, "hi": hi}, "accuracy_gap_mean": est_g,
            "vs_accuracy_gap": {"estimate": est_x - est_g, "lo": dlo, "hi": dhi}, "n_worlds": len(worlds)}


def realised_classes(rows: list[dict]) -> np.ndarray:
    """Each row's realised class (improves / no clear change / degrades) from its d_pass1 interval."""
    return np.array([stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"])) for r in rows])


def lowo_classes(rows: list[dict], features: list[str], lam: float) -> dict[str, np.ndarray]:
    """Leave-one-world-out P(improves) and P(degrades) (plan_look4.yaml): per held-out world, one penalised logistic
    regression per class on the other worlds' rows, with ``lowo``'s design (centred columns imputed from them)."""
    w = np.array([r["world"] for r in rows])
    cls = realised_classes(rows)
    out = {k: np.full(len(rows), np.nan) for k in ("improves", "degrades")}
    for held in sorted(set(w)):
        train, test = w != held, w == held
        X = design(rows, features, fills([r for r, t in zip(rows, train) if t], features))
        for k in out:
            m = model.fit_logistic(X[train], (cls[train] == k).astype(float), features, lam)
            out[k][test] = model.probability(m, X[test])
    return out


LOOKAHEAD = ("lookahead_dv", "lookahead_dll", "lookahead_kl")


def has_lookahead(rows: list[dict]) -> np.ndarray:
    """``[n]``: the rows with a lookahead result, which the product predicts with tier v2 (else v2_no_lookahead)."""
    return np.array([any(np.isfinite(v2._num(r[k])) for k in LOOKAHEAD) for r in rows], dtype=bool)


def by_tier(per_tier: dict[str, np.ndarray], rows: list[dict]) -> np.ndarray:
    """The product's choice of tier per row: ``per_tier["v2"]`` with a lookahead result, else v2_no_lookahead's."""
    return np.where(has_lookahead(rows), per_tier["v2"], per_tier["v2_no_lookahead"])


def _restored(shipped: dict, replaced: list[dict]) -> dict:
    out = copy.deepcopy(shipped)
    for r in replaced:
        for tier, models in r["models"].items():
            out["models"][tier].update(copy.deepcopy(models))
    return out


def _replacements(shipped: dict) -> dict[int, dict]:
    """Look number -> what that later look replaced in the model file (``later_looks.lookN.replaced``: the models it
    replaced, tier -> outcome -> model, and the worlds checked before it)."""
    return {int(k[4:]): v["replaced"] for k, v in (shipped.get("later_looks") or {}).items() if v.get("replaced")}


def last_replacing_look(shipped: dict) -> int | None:
    """The number of the last look that replaced a model in the file (None: no look has)."""
    return max(_replacements(shipped), default=None)


def before_look(shipped: dict, look: int) -> dict:
    """The model file as the looks before ``look`` read it: every model that look or a later one replaced, restored
    from the look's record (the file itself where no look replaced any)."""
    return _restored(shipped, [r for n, r in sorted(_replacements(shipped).items(), reverse=True) if n >= look])


def model_file(before: int) -> dict:
    """The package's model file as a script written before look ``before`` read it (``before_look``): a later look
    that replaced a model leaves that script's figures as they were printed."""
    return before_look(json.loads(v2.SHIPPED.read_text()), before)


def as_when_checked(shipped: dict, world: str) -> dict:
    """The model file as it stood when ``world`` was checked: the models of every later look whose record lists the
    world among those checked before it, restored."""
    return _restored(shipped, [r for _, r in sorted(_replacements(shipped).items(), reverse=True)
                               if world in r["checked_worlds"]])


def shipped_gain(rows: list[dict], shipped: dict, tier: str = "v2", outcome: str = "d_pass1") -> np.ndarray:
    """A shipped model file's predicted ``outcome`` of each row (``tier``: the one the product uses where a row
    has a lookahead)."""
    m = shipped["models"][tier][outcome]
    return model.predict(m, v2.matrix(rows, m["features"]))


def product_gain(rows: list[dict], shipped: dict) -> np.ndarray:
    """v2's predicted Δpass@1 as the product computes it: tier v2 with a lookahead result, v2_no_lookahead without."""
    return by_tier({t: shipped_gain(rows, shipped, t) for t in ("v2", "v2_no_lookahead")}, rows)


def tier_interval(models: dict, rows: list[dict], outcome: str = "d_pass1") -> tuple[np.ndarray, ...]:
    """``[n]`` each: the product's prediction of ``outcome`` and its 95% interval (``core.predictor.interval`` of each
    row's tier, ``by_tier``); ``models``: tier -> outcome -> model."""
    each = {t: model.interval(models[t][outcome], v2.matrix(rows, models[t][outcome]["features"]))
            for t in ("v2", "v2_no_lookahead")}
    return tuple(by_tier({t: each[t][i] for t in each}, rows) for i in range(3))


def product_verdicts(rows: list[dict], shipped: dict) -> list[str]:
    """The verdict the product shows: the interval rule on ``tier_interval``'s gain against +-delta."""
    _, lo, hi = tier_interval(shipped["models"], rows)
    return [model.verdict(a, b, shipped["delta"]) for a, b in zip(lo, hi)]


def product_order(rows: list[dict], gain, rule: str, sampled_scale: float = 1.0) -> np.ndarray:
    """Scores (higher: ranked first) that order ``rows`` as the product does when G ranks
    (``core.predictor.gap_rank_key``): ``sign_of_g`` orders by G, then a config's full-distribution methods first
    where G > 0 and last where G <= 0, then ``gain`` (the shipped model's prediction); ``g_scaled`` first by G times
    ``sampled_scale`` for a sampled-token loss (all of G for a full-distribution one), then as ``sign_of_g``;
    ``v2_config`` (the eighth look) first by a configuration's mean ``gain``, then as ``sign_of_g`` within it. Missing
    values rank last; exact ties go to the later row."""
    cg = (model.config_gains([r["config"] for r in rows], gain) if rule == "v2_config"  # a configuration's mean gain
          else [np.nan] * len(rows))
    keys = [model.gap_rank_key(r["method"], v2._num(r["accuracy_gap"]), float(p), rule, sampled_scale, c)
            for r, p, c in zip(rows, np.asarray(gain, float), cg)]
    order = sorted(range(len(rows)), key=lambda i: keys[i], reverse=True)  # the last is ranked first
    scores = np.empty(len(rows))
    scores[order] = np.arange(len(rows), dtype=float)
    return scores


def shipped_order(rows: list[dict], shipped: dict) -> np.ndarray:
    """The product's ranking of one world's ``rows`` as shipped since the eighth look (``v2_config`` on the model
    file's predicted gains); scores, higher ranked first."""
    return product_order(rows, product_gain(rows, shipped), "v2_config")


def explore_cli(argv, doc: str, measure, keep, text, worlds) -> int:
    """The command line of an exploration that measures worlds into ``--out DIR`` (resumable; ``--worlds a,b``),
    keeps their rows beside its script (``--keep``) and prints its report from the kept rows (``--report``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--worlds")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args(argv)
    if args.report:
        print(text())
        return 0
    if args.out is None:
        ap.error("--out DIR is needed to measure or to keep")
    if args.keep:
        keep(args.out)
    else:
        measure(args.out, args.worlds.split(",") if args.worlds else worlds())
    return 0
