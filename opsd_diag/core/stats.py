"""Statistics every aggregate shares: bootstrap intervals over prompts, pass@k, Spearman, JSON values.

Pure functions (arrays and frames in, floats out). Confidence intervals resample whole prompts,
never tokens: tokens of one rollout, and rollouts of one prompt, are strongly correlated, so a
token-level bootstrap would give intervals that are far too narrow.

Bootstrap protocol (shared by every CI, so a plain loop can reproduce it exactly): prompts are
sorted, ``rng = np.random.default_rng(seed)`` draws ``rng.integers(0, P, size=(n_boot, P))`` in one
call, row b lists the prompts of replicate b, and the interval is the percentile interval of the
finite replicates. All CIs of one summary use the same seed, so they share their resamples (common
random numbers make differences between configs less noisy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k); NaN if k > n.

    Product form 1 - prod_{i=n-c+1}^{n} (1 - k/i) avoids huge binomials (Chen et al., 2021).
    """
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass@k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        return math.nan
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=float)))


def pass_at_k_table(rollouts: pd.DataFrame, ks: Sequence[int]) -> dict[int, float]:
    """Mean pass@k over problems, from rollouts with a known correctness.

    A k larger than some problem's sample count gives NaN for that k: averaging over only the
    problems with enough samples would compare different problem sets across k.
    """
    known = rollouts[rollouts["correct"].notna()]
    per_problem = known.groupby("problem_id")["correct"].agg(
        n="size", c=lambda s: int(s.astype(bool).sum())
    )
    out: dict[int, float] = {}
    for k in ks:
        if per_problem.empty:
            out[int(k)] = math.nan
            continue
        vals = [pass_at_k(int(n), int(c), int(k)) for n, c in per_problem.itertuples(index=False)]
        out[int(k)] = float(np.mean(vals))  # any NaN (k > n) makes the mean NaN on purpose
    return out


def prompt_draws(n_prompts: int, n_boot: int, seed: int) -> np.ndarray:
    """Prompt indices [n_boot, n_prompts] of every replicate; the one place randomness enters."""
    return np.random.default_rng(seed).integers(0, n_prompts, size=(n_boot, n_prompts))


def _interval(estimate: float, reps: np.ndarray, alpha: float) -> tuple[float, float, float]:
    reps = reps[np.isfinite(reps)]
    if not np.isfinite(estimate) or reps.size == 0:
        return float(estimate), math.nan, math.nan
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return float(estimate), float(lo), float(hi)


def bootstrap_over_prompts(
    frame: pd.DataFrame,
    prompt_col: str,
    stat_fn: Callable[[pd.DataFrame], float],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """(estimate, lo, hi) of any statistic, resampling whole prompts with replacement.

    Generic and slow-ish (one ``stat_fn`` call per replicate); prefer
    ``bootstrap_mean_over_prompts`` for means.
    """
    codes, _ = pd.factorize(frame[prompt_col], sort=True)
    if codes.size == 0:
        return math.nan, math.nan, math.nan
    n_prompts = int(codes.max()) + 1
    order = np.argsort(codes, kind="stable")
    rows_of = np.split(order, np.cumsum(np.bincount(codes, minlength=n_prompts))[:-1])
    reps = np.array(
        [
            stat_fn(frame.iloc[np.concatenate([rows_of[i] for i in draw])])
            for draw in prompt_draws(n_prompts, n_boot, seed)
        ],
        dtype=float,
    )
    return _interval(float(stat_fn(frame)), reps, alpha)


def _ratio_replicates(sums: np.ndarray, counts: np.ndarray, draws: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums[draws].sum(axis=1) / counts[draws].sum(axis=1)


def _prompt_sums(values, prompt_ids) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted prompt ids with the sum and count of their finite values (prompts without any dropped)."""
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    grouped = pd.Series(v[ok]).groupby(np.asarray(prompt_ids)[ok], sort=True)
    sums, counts = grouped.sum(), grouped.size()
    return sums.index.to_numpy(), sums.to_numpy(dtype=float), counts.to_numpy(dtype=float)


def bootstrap_mean_over_prompts(
    values, prompt_ids, n_boot: int = 1000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float, float]:
    """(estimate, lo, hi) of the token-weighted mean (sum / count) with prompts resampled.

    Non-finite values are ignored. Per-prompt sums and counts are computed once, so a replicate
    costs O(prompts), not O(tokens); same draws as ``bootstrap_over_prompts``.
    """
    _, sums, counts = _prompt_sums(values, prompt_ids)
    if sums.size == 0:
        return math.nan, math.nan, math.nan
    reps = _ratio_replicates(sums, counts, prompt_draws(sums.size, n_boot, seed))
    return _interval(float(sums.sum() / counts.sum()), reps, alpha)


def ci_dict(est_lo_hi: tuple[float, float, float], n_prompts: int) -> dict:
    est, lo, hi = est_lo_hi
    return {"estimate": est, "lo": lo, "hi": hi, "n_prompts": int(n_prompts)}


def ci_text(d: dict | None, digits: int = 4) -> str:
    """``ci_dict``'s interval as text, "estimate [lo, hi]"; "n/a" without a finite estimate."""
    if not d or d.get("estimate") is None or not math.isfinite(d["estimate"]):
        return "n/a"
    return f"{d['estimate']:+.{digits}f} [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}]"


def paired_difference(a: dict, b: dict, n_boot: int, seed: int, alpha: float = 0.05) -> dict:
    """Mean over prompts of ``a[p] - b[p]`` (per-prompt values keyed by prompt id) on the prompts where both are
    finite (None counts as missing), with a percentile bootstrap over those prompts: a comparison of two
    measurements of the same prompts."""
    def known(v) -> bool:  # stored values come back from JSON with None for NaN
        return v is not None and math.isfinite(v)

    common = sorted(p for p in set(a) & set(b) if known(a[p]) and known(b[p]))
    diff = np.array([a[p] - b[p] for p in common], dtype=float)
    return ci_dict(bootstrap_mean_over_prompts(diff, np.arange(diff.size), n_boot, seed, alpha), diff.size)


def beyond_noise(diffs: dict):
    """The key whose paired difference (``paired_difference``'s dict, or None) has the largest estimate among those
    whose interval lies above 0 (the first on a tie); None when none does: the rule by which a recommendation moves
    off today's default (all tokens, the whole solution) only on evidence."""
    above = {k: d["estimate"] for k, d in diffs.items()
             if d and d.get("lo") is not None and math.isfinite(d["lo"]) and d["lo"] > 0}
    return max(above, key=above.get) if above else None


def accuracy_ci(frame: pd.DataFrame, n_boot: int, seed: int, alpha: float) -> dict:
    known = frame[frame["correct"].notna()]
    est = bootstrap_mean_over_prompts(
        known["correct"].astype(float), known["problem_id"], n_boot, seed, alpha
    )
    out = ci_dict(est, known["problem_id"].nunique())
    out["n_samples"] = int(len(known))
    return out


def gap_ci(teacher: pd.DataFrame, student: pd.DataFrame, n_boot: int, seed: int, alpha: float):
    """Teacher minus student accuracy on the prompts both sampled, resampling prompts jointly."""
    t_ids, t_sums, t_counts = _prompt_sums(teacher["correct"].astype(float), teacher["problem_id"])
    s_ids, s_sums, s_counts = _prompt_sums(student["correct"].astype(float), student["problem_id"])
    common, ti, si = np.intersect1d(t_ids, s_ids, return_indices=True)
    if common.size == 0:
        return ci_dict((math.nan, math.nan, math.nan), 0)
    t_sums, t_counts, s_sums, s_counts = t_sums[ti], t_counts[ti], s_sums[si], s_counts[si]
    draws = prompt_draws(common.size, n_boot, seed)
    reps = _ratio_replicates(t_sums, t_counts, draws) - _ratio_replicates(s_sums, s_counts, draws)
    est = t_sums.sum() / t_counts.sum() - s_sums.sum() / s_counts.sum()
    return ci_dict(_interval(float(est), reps, alpha), common.size)


def spearman(x, y) -> float:
    """Spearman correlation over the pairs where both are finite; NaN with < 3 pairs or a constant side."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return math.nan
    return float(sps.spearmanr(x[ok], y[ok])[0])


def jsonable(obj):
    """Plain Python values for json.dumps(allow_nan=False): NaN/inf -> None, numpy -> builtins."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if obj is None or obj is pd.NA or isinstance(obj, str):
        return None if obj is pd.NA else obj
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")
