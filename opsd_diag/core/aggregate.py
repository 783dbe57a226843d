"""Aggregates of the per-token table: splits, entropy bins, alignment, pass@k, bootstrap CIs.

Every function is pure (frames in, floats/dicts/frames out). Confidence intervals resample whole
prompts, never tokens: tokens of one rollout, and rollouts of one prompt, are strongly correlated,
so a token-level bootstrap would give intervals that are far too narrow.

Bootstrap protocol (shared by every CI here, so a plain loop can reproduce it exactly): prompts
are sorted, ``rng = np.random.default_rng(seed)`` draws ``rng.integers(0, P, size=(n_boot, P))``
in one call, row b lists the prompts of replicate b, and the interval is the percentile interval
of the finite replicates. All CIs of one ``summarize`` call use the same seed, so they share
their resamples (common random numbers make differences between configs less noisy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from opsd_diag.errors import OpsdError

TOKEN_COLUMNS = (
    "lp_s", "lp_t", "lp_b", "r_opd", "r_delta", "kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta",
    "gate", "a_d2", "a_ex", "h_s", "h_t", "h_b", "rank_t", "top1_agree",
)
CI_COLUMNS = ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd", "gate")
HEADLINE_COLUMNS = ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd")
DEFAULT_ENTROPY_EDGES = (0.1, 0.5, 1.0, 2.0)
DEFAULT_POSITION_EDGES = (16, 32, 64, 128)


# ---------------------------------------------------------------------------------------- binning

def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def _bin_by_edges(h: pd.Series, edges: Sequence[float]) -> pd.Series:
    # -inf as the first cut keeps tiny negative entropies (float round-off) in the first bin.
    cuts = [-np.inf, *edges, np.inf]
    shown = [0.0, *edges, np.inf]
    labels = [f"[{_fmt(a)}, {_fmt(b)})" for a, b in zip(shown[:-1], shown[1:])]
    return pd.cut(h, bins=cuts, right=False, labels=labels, ordered=True)


def entropy_bins(
    h: pd.Series, edges: Sequence[float] | None = None, quantiles: int | None = None
) -> pd.Series:
    """Ordered bin labels of entropies in nats, so signals can be compared across certainty levels.

    Default: fixed edges 0.1/0.5/1/2 ("[0, 0.1)" ... "[2, inf)"). ``quantiles=q`` places the
    inner edges at the q-quantiles of the finite values of ``h`` (ties merge bins). NaN stays NaN.
    """
    if edges is not None and quantiles is not None:
        raise OpsdError("entropy bins: give either edges or quantiles, not both")
    h = pd.Series(h, dtype=float)
    if quantiles is not None:
        if quantiles < 1:
            raise OpsdError(f"entropy bins: quantiles must be >= 1, got {quantiles}")
        finite = h[np.isfinite(h)].to_numpy()
        inner = np.quantile(finite, np.arange(1, quantiles) / quantiles) if finite.size else []
        edges = sorted({float(e) for e in inner})
    else:
        edges = list(DEFAULT_ENTROPY_EDGES if edges is None else edges)
    if any(b <= a for a, b in zip(edges[:-1], edges[1:])):
        raise OpsdError(f"entropy bins: edges must increase strictly, got {edges}")
    return _bin_by_edges(h, edges)


def position_buckets(pos, edges: Sequence[int] = DEFAULT_POSITION_EDGES) -> pd.Series:
    """Ordered labels "0-15", "16-31", ..., "128+": signals drift along the completion."""
    pos = pd.Series(pos)
    edges = list(edges)
    starts = [0, *edges]
    labels = [f"{a}-{b - 1}" for a, b in zip(starts[:-1], starts[1:])] + [f"{starts[-1]}+"]
    return pd.cut(pos, bins=[-np.inf, *edges, np.inf], right=False, labels=labels, ordered=True)


# ---------------------------------------------------------------------------------------- pass@k

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k); NaN if k > n.

    Product form 1 - prod_{i=n-c+1}^{n} (1 - k/i) avoids huge binomials (Chen et al., 2021).
    """
    if not 0 <= c <= n or k < 1:
        raise OpsdError(f"pass@k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
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


# ------------------------------------------------------------------------------------- alignment

def alignment_stats(df: pd.DataFrame) -> dict:
    """How far the delta advantage agrees with the OPD one (sign, correlation, quadrants).

    Uses tokens where both a_opd and a_delta are finite. ``sign_agreement`` is the fraction with
    a_delta * a_opd > 0, which is exactly the OPD² gate keep fraction; a zero on either side is
    a disagreement there and falls in no quadrant (``n_zero`` counts those tokens).
    Quadrant keys: first letter the sign of a_opd, second the sign of a_delta.
    """
    a_opd = df["a_opd"].to_numpy(dtype=float)
    a_delta = df["a_delta"].to_numpy(dtype=float)
    ok = np.isfinite(a_opd) & np.isfinite(a_delta)
    x, y = a_opd[ok], a_delta[ok]
    n = int(x.size)
    out = {
        "n": n,
        "sign_agreement": float(np.mean(x * y > 0)) if n else math.nan,
        "pearson": math.nan,
        "spearman": math.nan,
        "large_gap_share": float(np.mean(np.abs(y - x) >= 1.0)) if n else math.nan,
        "q_pp": int(np.sum((x > 0) & (y > 0))),
        "q_pn": int(np.sum((x > 0) & (y < 0))),
        "q_np": int(np.sum((x < 0) & (y > 0))),
        "q_nn": int(np.sum((x < 0) & (y < 0))),
        "n_zero": int(np.sum((x == 0) | (y == 0))),
    }
    # Correlation is undefined for constant input; check first rather than silence scipy's warning.
    if n >= 2 and np.ptp(x) > 0 and np.ptp(y) > 0:
        out["pearson"] = float(stats.pearsonr(x, y)[0])
        out["spearman"] = float(stats.spearmanr(x, y)[0])
    return out


# ------------------------------------------------------------------------------------- bootstrap

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


def _ci_dict(est_lo_hi: tuple[float, float, float], n_prompts: int) -> dict:
    est, lo, hi = est_lo_hi
    return {"estimate": est, "lo": lo, "hi": hi, "n_prompts": int(n_prompts)}


def _accuracy_ci(frame: pd.DataFrame, n_boot: int, seed: int, alpha: float) -> dict:
    known = frame[frame["correct"].notna()]
    est = bootstrap_mean_over_prompts(
        known["correct"].astype(float), known["problem_id"], n_boot, seed, alpha
    )
    out = _ci_dict(est, known["problem_id"].nunique())
    out["n_samples"] = int(len(known))
    return out


def _gap_ci(teacher: pd.DataFrame, student: pd.DataFrame, n_boot: int, seed: int, alpha: float):
    """Teacher minus student accuracy on the prompts both sampled, resampling prompts jointly."""
    t_ids, t_sums, t_counts = _prompt_sums(teacher["correct"].astype(float), teacher["problem_id"])
    s_ids, s_sums, s_counts = _prompt_sums(student["correct"].astype(float), student["problem_id"])
    common, ti, si = np.intersect1d(t_ids, s_ids, return_indices=True)
    if common.size == 0:
        return _ci_dict((math.nan, math.nan, math.nan), 0)
    t_sums, t_counts, s_sums, s_counts = t_sums[ti], t_counts[ti], s_sums[si], s_counts[si]
    draws = prompt_draws(common.size, n_boot, seed)
    reps = _ratio_replicates(t_sums, t_counts, draws) - _ratio_replicates(s_sums, s_counts, draws)
    est = t_sums.sum() / t_counts.sum() - s_sums.sum() / s_counts.sum()
    return _ci_dict(_interval(float(est), reps, alpha), common.size)


# ------------------------------------------------------------------------------------- summaries

def _jsonable(obj):
    """Plain Python values for json.dumps(allow_nan=False): NaN/inf -> None, numpy -> builtins."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if obj is None or obj is pd.NA or isinstance(obj, str):
        return None if obj is pd.NA else obj
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _means_by(df: pd.DataFrame, labels: pd.Series) -> dict:
    """{label: {n_tokens, mean: {column: mean}}} for every category, empty ones included."""
    grouped = df.groupby(labels, observed=False, sort=True)
    sizes, means = grouped.size(), grouped[list(TOKEN_COLUMNS)].mean()
    return {
        str(label): {"n_tokens": int(sizes[label]), "mean": means.loc[label].to_dict()}
        for label in labels.cat.categories
    }


def _overall(df: pd.DataFrame) -> dict:
    cols = list(TOKEN_COLUMNS)
    q = df[cols].quantile([0.1, 0.5, 0.9])
    mean, n = df[cols].mean(), df[cols].notna().sum()
    per_col = {
        c: {"mean": mean[c], "median": q.at[0.5, c], "q10": q.at[0.1, c], "q90": q.at[0.9, c],
            "n": int(n[c])}
        for c in cols
    }
    return {"n_tokens": int(len(df)), "columns": per_col}


def _by_entropy(df: pd.DataFrame, bins: pd.Series) -> dict:
    n_binned = int(bins.notna().sum())
    out = _means_by(df, bins)
    for label, entry in out.items():
        in_bin = df[(bins == label).to_numpy()]
        entry["share"] = entry["n_tokens"] / n_binned if n_binned else math.nan
        entry["sign_agreement"] = alignment_stats(in_bin)["sign_agreement"]
        entry["kl_rev"] = entry["mean"]["kl_rev"]
    return out


def _share_at_least(h: pd.Series, threshold: float) -> float:
    h = h[np.isfinite(h)]
    return float((h >= threshold).mean()) if len(h) else math.nan


def _config_summary(df, entropy_edges, entropy_quantiles, high_entropy, n_boot, seed, alpha):
    correctness = pd.Categorical(
        np.where(df["correct"].isna(), "unknown",
                 np.where(df["correct"].fillna(False).astype(bool), "correct", "incorrect")),
        categories=["correct", "incorrect", "unknown"], ordered=True,
    )
    bins = entropy_bins(df["h_s"], edges=entropy_edges, quantiles=entropy_quantiles)
    return {
        "overall": _overall(df),
        "by_correctness": _means_by(df, pd.Series(correctness, index=df.index)),
        "by_position": _means_by(df, position_buckets(df["pos"])),
        "by_entropy_bin": _by_entropy(df, bins),
        "alignment": alignment_stats(df),
        "high_entropy_share": {
            "threshold": high_entropy,
            "student": _share_at_least(df["h_s"], high_entropy),
            "teacher": _share_at_least(df["h_t"], high_entropy),
        },
        "ci": {
            c: _ci_dict(bootstrap_mean_over_prompts(df[c], df["problem_id"], n_boot, seed, alpha),
                        df.loc[np.isfinite(df[c]), "problem_id"].nunique())
            for c in CI_COLUMNS
        },
    }


def _check_columns(frame: pd.DataFrame, needed: Sequence[str], name: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise OpsdError(f"{name} table lacks columns {missing}; re-run scoring to rebuild it")


def summarize(
    tokens: pd.DataFrame,
    rollouts: pd.DataFrame,
    teacher_rollouts: pd.DataFrame | None = None,
    *,
    entropy_edges: Sequence[float] | None = None,
    entropy_quantiles: int | None = None,
    high_entropy: float = 2.0,
    ks: Sequence[int] = (1, 4),
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict:
    """Every config-level number of the report, JSON-ready (NaN -> None), deterministic per seed.

    Keys: ``configs`` {config: overall, by_correctness, by_position, by_entropy_bin, alignment,
    high_entropy_share, ci, teacher_accuracy, teacher_minus_student_accuracy}, ``student_accuracy``,
    ``pass_at_k`` {"pass@k": value}, ``settings``. Teacher entries are None without teacher samples.
    """
    _check_columns(tokens, ["config", "rollout_id", "pos", *TOKEN_COLUMNS], "tokens")
    _check_columns(rollouts, ["rollout_id", "problem_id", "sample_idx", "correct", "length"],
                   "rollouts")
    unknown = set(tokens["rollout_id"].unique()) - set(rollouts["rollout_id"].unique())
    if unknown:
        raise OpsdError(f"tokens refer to rollouts {sorted(unknown)[:5]} missing from the rollouts "
                        "table; the two files come from different runs")
    joined = tokens.merge(rollouts[["rollout_id", "problem_id", "correct"]], on="rollout_id",
                          how="left", validate="many_to_one")
    has_teacher = teacher_rollouts is not None and len(teacher_rollouts) > 0
    if has_teacher:
        _check_columns(teacher_rollouts, ["config", "problem_id", "sample_idx", "correct"],
                       "teacher rollouts")
    student_known = rollouts[rollouts["correct"].notna()]

    configs = {}
    for config, df in joined.groupby("config", sort=True):
        entry = _config_summary(df, entropy_edges, entropy_quantiles, high_entropy, n_boot, seed,
                                alpha)
        entry["teacher_accuracy"] = entry["teacher_minus_student_accuracy"] = None
        if has_teacher:
            mine = teacher_rollouts[(teacher_rollouts["config"] == config)
                                    & teacher_rollouts["correct"].notna()]
            if len(mine):
                entry["teacher_accuracy"] = _accuracy_ci(mine, n_boot, seed, alpha)
                entry["teacher_minus_student_accuracy"] = _gap_ci(mine, student_known, n_boot,
                                                                  seed, alpha)
        configs[str(config)] = entry

    return _jsonable({
        "configs": configs,
        "student_accuracy": _accuracy_ci(rollouts, n_boot, seed, alpha),
        "pass_at_k": {f"pass@{k}": v for k, v in pass_at_k_table(rollouts, ks).items()},
        "settings": {
            "entropy_edges": None if entropy_edges is None else list(entropy_edges),
            "entropy_quantiles": entropy_quantiles, "high_entropy": high_entropy, "ks": list(ks),
            "n_boot": n_boot, "seed": seed, "alpha": alpha,
        },
    })


def summary_frame(summary: dict) -> pd.DataFrame:
    """One row per config with the headline numbers, for the CLI report table (None -> NaN)."""
    def est(d):
        return math.nan if d is None or d.get("estimate") is None else d["estimate"]

    rows = []
    for config, entry in summary["configs"].items():
        cols = entry["overall"]["columns"]
        row = {"config": config, "n_tokens": entry["overall"]["n_tokens"]}
        row.update({c: cols[c]["mean"] for c in HEADLINE_COLUMNS})
        row["sign_agreement"] = entry["alignment"]["sign_agreement"]
        row["teacher_accuracy"] = est(entry["teacher_accuracy"])
        row["student_accuracy"] = est(summary["student_accuracy"])
        row["accuracy_gap"] = est(entry["teacher_minus_student_accuracy"])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["config", "n_tokens", *HEADLINE_COLUMNS, "sign_agreement",
                                        "teacher_accuracy", "student_accuracy", "accuracy_gap"])
    num = frame.columns.drop(["config", "n_tokens"])
    frame[num] = frame[num].astype(float)  # None from JSON -> NaN
    return frame
