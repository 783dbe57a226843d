"""The study's statistics, as pure numpy functions (each unit-tested against a slow reference).

- ``pass_at_k``: the unbiased pass@k estimator from n samples with c correct.
- ``spearman``: rank correlation with average ranks for ties (NaN when either side is constant).
- ``seed_problem_replicates``: bootstrap replicates of a mean over seeds x problems, resampling both.
- ``spearman_bootstrap``: Spearman of a predictor with realised gains, resampling configurations
  (clusters of rows) and, inside each replicate, the realised gains.
- ``verdict_accuracy``: helps / hurts verdicts against the realised class, with a Wilson interval.
- ``paired_mean``: the mean over worlds of one per-world figure minus another, with a percentile bootstrap over worlds.
- ``near_zero_alignment``: sign agreement and correlations of a_opd and a_delta among tokens whose
  advantages are not numerically zero, with the near-zero share reported apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

VERDICT_VALUE = {"helps": 1, "unclear": 0, "hurts": -1}
REALISED = ("improves", "no clear change", "degrades")


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k): the chance that k of the n samples drawn without replacement hold a correct one."""
    if k > n:
        return math.nan
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=float)))


def ranks(x) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    sx = x[order]
    r = np.empty(len(x), dtype=float)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return r


def spearman(x, y) -> float:
    """Pearson correlation of the (average) ranks; NaN for fewer than 3 pairs or a constant side."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y):
        raise ValueError("spearman needs two sequences of the same length")
    if len(x) < 3:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum()) * float((ry * ry).sum()))
    return math.nan if den == 0 else float((rx * ry).sum() / den)


def percentile_interval(reps, alpha: float) -> tuple[float, float]:
    reps = np.asarray(reps, dtype=float)
    reps = reps[np.isfinite(reps)]
    if reps.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def draw_counts(rng: np.random.Generator, n: int, n_boot: int) -> np.ndarray:
    """[n_boot, n] multiplicities of a resample of n items with replacement."""
    idx = rng.integers(0, n, size=(n_boot, n))
    counts = np.zeros((n_boot, n))
    np.add.at(counts, (np.repeat(np.arange(n_boot), n), idx.ravel()), 1.0)
    return counts


def seed_problem_replicates(values: np.ndarray, seed_counts: np.ndarray, problem_counts: np.ndarray,
                            weights: np.ndarray | None = None) -> np.ndarray:
    """Replicates of the (weighted) mean of ``values[seed, problem]`` under resampled seeds and problems.

    ``seed_counts`` [B, S] and ``problem_counts`` [B, P] are resample multiplicities.  With
    ``weights`` (same shape as values, e.g. token counts) the replicate is the ratio
    sum(w * v) / sum(w) over the resample, otherwise the plain mean.
    """
    v = np.asarray(values, dtype=float)
    if weights is None:
        num = np.einsum("bs,sp,bp->b", seed_counts, v, problem_counts)
        return num / (seed_counts.sum(1) * problem_counts.sum(1))
    w = np.asarray(weights, dtype=float)
    num = np.einsum("bs,sp,bp->b", seed_counts, v * w, problem_counts)
    den = np.einsum("bs,sp,bp->b", seed_counts, w, problem_counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def spearman_bootstrap(predictor, gain, gain_reps, clusters, n_boot: int, seed: int, alpha: float,
                       other=None, replicates: bool = False) -> dict:
    """Spearman of ``predictor`` with ``gain`` over rows, with a cluster bootstrap interval.

    ``gain_reps`` [rows, B] holds each row's realised gain under replicate b's resample of seeds and
    problems; ``clusters`` labels rows (a configuration: rows of one cluster share config-level
    predictors and are drawn together).  Rows with a non-finite predictor are left out.  With
    ``other`` (a second predictor on the same rows) the paired difference
    rho(predictor) - rho(other) is bootstrapped on the same replicates (rows finite in both).
    ``replicates``: also return the replicate coefficients (``[n_boot]``, NaN where undefined).
    """
    x = np.asarray(predictor, dtype=float)
    g = np.asarray(gain, dtype=float)
    reps = np.asarray(gain_reps, dtype=float)
    keep = np.isfinite(x) & np.isfinite(g)
    if other is not None:
        o = np.asarray(other, dtype=float)
        keep &= np.isfinite(o)
    idx = np.flatnonzero(keep)
    clusters = np.asarray(clusters)
    labels = sorted(set(clusters[idx].tolist()))
    members = [idx[clusters[idx] == c] for c in labels]
    est = spearman(x[idx], g[idx])
    if other is not None:
        est = est - spearman(o[idx], g[idx])
    rng = np.random.default_rng(seed)
    out = np.full(n_boot, np.nan)
    n_b = min(n_boot, reps.shape[1]) if reps.ndim == 2 else 0
    for b in range(n_b):
        pick = rng.integers(0, len(labels), size=len(labels)) if labels else np.array([], dtype=int)
        rows = np.concatenate([members[i] for i in pick]) if len(pick) else np.array([], dtype=int)
        r = spearman(x[rows], reps[rows, b])
        if other is not None:
            r = r - spearman(o[rows], reps[rows, b])
        out[b] = r
    lo, hi = percentile_interval(out, alpha)
    res = {"estimate": est, "lo": lo, "hi": hi, "n_rows": int(len(idx)), "n_clusters": len(labels),
           "n_left_out": int(len(x) - len(idx)), "n_valid_replicates": int(np.isfinite(out).sum())}
    if replicates:
        res["replicates"] = out
    return res


def realised_class(lo: float, hi: float) -> str:
    if lo > 0:
        return "improves"
    if hi < 0:
        return "degrades"
    return "no clear change"


def wilson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    from scipy.stats import norm

    z = float(norm.ppf(1 - alpha / 2))
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def verdict_accuracy(verdicts: Sequence[str], lo: Sequence[float], hi: Sequence[float], alpha: float = 0.05) -> dict:
    """Decisive verdicts (helps / hurts) against the realised class of each row.

    helps is right when the realised gain's interval lies above 0, hurts when it lies below 0.
    ``table[verdict][realised class]`` counts every row, unclear verdicts included.
    """
    table = {v: {r: 0 for r in REALISED} for v in VERDICT_VALUE}
    k = n = 0
    for v, a, b in zip(verdicts, lo, hi):
        cls = realised_class(a, b)
        table[v][cls] += 1
        if v == "helps":
            n += 1
            k += cls == "improves"
        elif v == "hurts":
            n += 1
            k += cls == "degrades"
    wlo, whi = wilson(k, n, alpha)
    agree3 = table["helps"]["improves"] + table["unclear"]["no clear change"] + table["hurts"]["degrades"]
    return {"n_decisive": n, "n_correct": int(k), "accuracy": k / n if n else math.nan, "lo": wlo, "hi": whi,
            "n_unclear": sum(table["unclear"].values()), "three_way_agreement": agree3 / max(1, len(verdicts)),
            "table": table}


def near_zero_alignment(a_opd, a_delta, threshold: float) -> dict:
    """Delta-vs-OPD alignment among tokens where |a_opd| > threshold and |a_delta| > threshold.

    ``near_zero_share``: share of the finite tokens with either advantage within the threshold;
    ``opd_near_zero_share``: the same for a_opd alone.  Sign agreement, Pearson and Spearman are
    computed on the other tokens only (NaN when none are left).
    """
    x, y = np.asarray(a_opd, dtype=float), np.asarray(a_delta, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    big = (np.abs(x) > threshold) & (np.abs(y) > threshold)
    n = int(x.size)
    xs, ys = x[big], y[big]
    out = {"n_tokens": n, "n_informative": int(big.sum()),
           "near_zero_share": float(1 - big.mean()) if n else math.nan,
           "opd_near_zero_share": float(np.mean(np.abs(x) <= threshold)) if n else math.nan,
           "sign_agreement": float(np.mean(xs * ys > 0)) if xs.size else math.nan,
           "pearson": math.nan, "spearman": math.nan}
    if xs.size >= 3 and np.ptp(xs) > 0 and np.ptp(ys) > 0:
        out["pearson"] = float(np.corrcoef(xs, ys)[0, 1])
        out["spearman"] = spearman(xs, ys)
    return out


def paired_mean(a: dict[str, float], b: dict[str, float], worlds: list[str], n_boot: int, seed: int) -> dict:
    """Mean over ``worlds`` of a - b, with a 95% percentile bootstrap over worlds, and how often a is above."""
    d = np.array([a[w] - b[w] for w in worlds])
    rng = np.random.default_rng(seed)
    reps = np.array([d[rng.integers(0, len(d), len(d))].mean() for _ in range(n_boot)])
    return {"estimate": float(d.mean()), "lo": float(np.quantile(reps, 0.025)), "hi": float(np.quantile(reps, 0.975)),
            "above": int((d > 0).sum()), "below": int((d < 0).sum()), "n": len(d)}
