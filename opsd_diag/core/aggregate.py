"""The config-level aggregates of a diagnosis: splits by correctness, position and entropy bin,
delta-vs-OPD alignment, accuracy and pass@k, each with bootstrap CIs over prompts (``core.stats``).

Pure: frames in, a JSON-ready dict (the ``summary.json`` schema of ``opsd_diag.summary``) out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from opsd_diag.core.stats import accuracy_ci, bootstrap_mean_over_prompts, ci_dict, gap_ci, jsonable, pass_at_k_table
from opsd_diag.errors import OpsdError
from opsd_diag.schema import CI_COLUMNS, SIGNAL_COLUMNS

NEAR_ZERO = 1e-4  # |advantage| at or below this is numerically zero for the alignment statistics
DEFAULT_ENTROPY_EDGES = (0.1, 0.5, 1.0, 2.0)
DEFAULT_POSITION_EDGES = (16, 32, 64, 128)


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


def alignment_stats(df: pd.DataFrame, near_zero: float = NEAR_ZERO) -> dict:
    """How far the delta advantage agrees with the OPD one, among the tokens where both say something.

    Of the tokens with finite a_opd and a_delta (``n``), ``gate_keep`` is the fraction the OPD² gate
    lets through (a_delta * a_opd > 0, over all of them). Most tokens of a confident student have
    both advantages numerically zero, and agreement there is noise, so the sign agreement, the
    correlations and the quadrant counts use only the *informative* tokens, where |a_opd| and
    |a_delta| both exceed ``near_zero``; ``near_zero_share`` is the share left out. Quadrant keys:
    first letter the sign of a_opd, second the sign of a_delta. (a_delta − a_opd involves only the
    student and the base, so no statistic of it is reported: it cannot tell teachers apart.)
    """
    a_opd = df["a_opd"].to_numpy(dtype=float)
    a_delta = df["a_delta"].to_numpy(dtype=float)
    ok = np.isfinite(a_opd) & np.isfinite(a_delta)
    informative = ok & (np.abs(a_opd) > near_zero) & (np.abs(a_delta) > near_zero)
    x, y = a_opd[informative], a_delta[informative]
    n, n_info = int(ok.sum()), int(informative.sum())
    out = {
        "n": n,
        "gate_keep": float(np.mean(a_opd[ok] * a_delta[ok] > 0)) if n else math.nan,
        "near_zero_share": 1.0 - n_info / n if n else math.nan,
        "n_informative": n_info,
        "sign_agreement": float(np.mean(x * y > 0)) if n_info else math.nan,
        "pearson": math.nan,
        "spearman": math.nan,
        "q_pp": int(np.sum((x > 0) & (y > 0))),
        "q_pn": int(np.sum((x > 0) & (y < 0))),
        "q_np": int(np.sum((x < 0) & (y > 0))),
        "q_nn": int(np.sum((x < 0) & (y < 0))),
    }
    # Correlation is undefined for constant input; check first rather than silence scipy's warning.
    if n_info >= 2 and np.ptp(x) > 0 and np.ptp(y) > 0:
        out["pearson"] = float(stats.pearsonr(x, y)[0])
        out["spearman"] = float(stats.spearmanr(x, y)[0])
    return out


def _means_by(df: pd.DataFrame, labels: pd.Series) -> dict:
    """{label: {n_tokens, mean: {column: mean}}} for every category, empty ones included."""
    grouped = df.groupby(labels, observed=False, sort=True)
    sizes, means = grouped.size(), grouped[list(SIGNAL_COLUMNS)].mean()
    return {
        str(label): {"n_tokens": int(sizes[label]), "mean": means.loc[label].to_dict()}
        for label in labels.cat.categories
    }


def _overall(df: pd.DataFrame) -> dict:
    cols = list(SIGNAL_COLUMNS)
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
            c: ci_dict(bootstrap_mean_over_prompts(df[c], df["problem_id"], n_boot, seed, alpha),
                        df.loc[np.isfinite(df[c]), "problem_id"].nunique())
            for c in CI_COLUMNS
        },
    }


def level_gaps(teacher: pd.DataFrame, student: pd.DataFrame, n_boot: int, seed: int, alpha: float) -> dict:
    """G per problem level: ``gap_ci`` on the problems of each level (the student rollouts' ``difficulty``, a
    problem's ``meta.difficulty``; a teacher row takes its problem's level), keyed by the level as text;
    {} when no problem has a level."""
    if "difficulty" not in student.columns:
        return {}
    level = student.dropna(subset=["difficulty"]).groupby("problem_id")["difficulty"].first()
    out = {}
    for lv in sorted(level.unique(), key=str):
        ids = set(level.index[level == lv])
        key = str(int(lv)) if isinstance(lv, (int, float, np.number)) and float(lv).is_integer() else str(lv)
        out[key] = gap_ci(teacher[teacher["problem_id"].isin(ids)], student[student["problem_id"].isin(ids)],
                          n_boot, seed, alpha)
    return out


def normalised_gap(gap: float | None, student_accuracy: float | None) -> float:
    """G over the room the student has to move in G's direction: G / (1 − a_s) for G > 0 (the share of the
    student's failures the teacher view solves, net), G / a_s for G < 0, 0 for G = 0; in [−1, 1]; NaN
    without a gap or without room (a_s = 1 with G > 0, a_s = 0 with G < 0)."""
    if gap is None or student_accuracy is None or not (math.isfinite(gap) and math.isfinite(student_accuracy)):
        return math.nan
    room = 1.0 - student_accuracy if gap > 0 else student_accuracy
    return 0.0 if gap == 0 else (gap / room if room > 0 else math.nan)


def _check_columns(frame: pd.DataFrame, needed: Sequence[str], name: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise OpsdError(f"{name} table lacks columns {missing}; re-run scoring to rebuild it")


def truncated_share(rollouts: pd.DataFrame) -> float | None:
    """Share of rollouts cut at max_completion_length or ending inside their thinking block (None: not recorded)."""
    if "truncated" not in rollouts.columns or not len(rollouts):
        return None
    return float(rollouts["truncated"].astype(bool).mean())


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
    high_entropy_share, ci, teacher_accuracy, teacher_minus_student_accuracy, accuracy_gap_by_level,
    normalised_accuracy_gap}, ``student_accuracy``,
    ``pass_at_k`` {"pass@k": value}, ``settings``. Teacher entries are None without teacher samples.
    """
    _check_columns(tokens, ["config", "rollout_id", "pos", *SIGNAL_COLUMNS], "tokens")
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
    student_acc = accuracy_ci(rollouts, n_boot, seed, alpha)

    configs = {}
    for config, df in joined.groupby("config", sort=True):
        entry = _config_summary(df, entropy_edges, entropy_quantiles, high_entropy, n_boot, seed,
                                alpha)
        entry["teacher_accuracy"] = entry["teacher_minus_student_accuracy"] = entry["teacher_truncated_share"] = None
        entry["accuracy_gap_by_level"], entry["normalised_accuracy_gap"] = {}, None
        if has_teacher:
            mine = teacher_rollouts[(teacher_rollouts["config"] == config)
                                    & teacher_rollouts["correct"].notna()]
            entry["teacher_truncated_share"] = truncated_share(teacher_rollouts[teacher_rollouts["config"] == config])
            if len(mine):
                entry["teacher_accuracy"] = accuracy_ci(mine, n_boot, seed, alpha)
                entry["teacher_minus_student_accuracy"] = gap_ci(mine, student_known, n_boot,
                                                                  seed, alpha)
                entry["accuracy_gap_by_level"] = level_gaps(mine, student_known, n_boot, seed, alpha)
                entry["normalised_accuracy_gap"] = normalised_gap(
                    entry["teacher_minus_student_accuracy"]["estimate"], student_acc["estimate"])
        configs[str(config)] = entry

    return jsonable({
        "configs": configs,
        "student_accuracy": student_acc,
        "student_truncated_share": truncated_share(rollouts),
        "pass_at_k": {f"pass@{k}": v for k, v in pass_at_k_table(rollouts, ks).items()},
        "settings": {
            "entropy_edges": list(entropy_edges) if entropy_edges is not None else (
                None if entropy_quantiles else list(DEFAULT_ENTROPY_EDGES)),
            "entropy_quantiles": entropy_quantiles, "high_entropy": high_entropy, "ks": list(ks),
            "n_boot": n_boot, "seed": seed, "alpha": alpha,
        },
    })


