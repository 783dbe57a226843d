"""Predictor v2's model: a ridge regression of the realised held-out gain on standardised diagnosis columns.

Small and explainable on purpose (benchmarks/validity/v2/plan.yaml): features are z-scored with the
fitting rows' mean and SD (a missing value is imputed with that mean, i.e. z = 0), the intercept is
not penalised, and a prediction is the intercept plus one additive contribution per feature, which
is what the product shows as "why". The interval is the prediction plus the 2.5% and 97.5%
quantiles of out-of-fold residuals; the verdict follows from the interval and a practical
threshold delta. The fourth look (benchmarks/validity/v2/plan_look4.yaml) also classifies a row's realised class
directly: two penalised logistic regressions on the same standardised features give P(improves) and
P(degrades), and a class verdict follows from a probability threshold. Pure functions of arrays and dicts: the
study fits, the package applies.
"""

from __future__ import annotations

import math

import numpy as np

LOSS_KIND = {"opd": 0.0, "opd2": 0.0, "exopd": 0.0, "opsd_opd": 0.0, "jsd": 1.0, "opsd_jsd": 1.0}  # is_jsd
ORDER_TEXT = {  # how the rows are ordered when G gates the recommendation, in the panel's words
    "predicted_gain": "v2's predictions below order the methods within a config and are shown as secondary evidence.",
    "sign_of_g": "Within a config, a full-distribution loss (jsd) ranks above the sampled-token ones where G > 0 and "
                 "below them where G <= 0 (the larger step: more gain where the config helps, more damage where it "
                 "hurts; predictor v2's fifth look), then v2's prediction, shown as secondary evidence.",
    "g_scaled": "G is scaled by the loss: a sampled-token loss (opd, opd2, exopd, opsd_opd) counts {scale:g} of its "
                "config's G, a full-distribution loss (jsd, opsd_jsd) all of it (it moves the student further in "
                "either direction; predictor v2's seventh look), so configs interleave; ties go by G, the fifth "
                "look's method order, then v2's prediction, shown as secondary evidence.",
    "v2_gain": "Ties go by G, then a full-distribution loss (jsd) first where G > 0 and last where G <= 0.",
    "v2_config": "Configs go by the mean of v2's predictions over their methods; within one, a full-distribution loss "
                 "(jsd) first where G > 0 and last where G <= 0 (predictor v2's fifth look), then v2's prediction."}
METHOD_ORDERS = tuple(ORDER_TEXT)
TARGETS = ("raw", "log")  # what a model was fitted to: its outcome, or the outcome's natural log (``target``)


DERIVED = ("g_far_teach", "g_far_jsd")  # features computed from other columns (``derived``), not read from a run


def derived(accuracy_gap: float, teachability: float, mean_jsd: float) -> dict[str, float]:
    """G's positive part times the teacher's distance from the student (predictor v2's twelfth look, shipped by the
    sixteenth): a teacher far above a student it is far from helps less than an additive model says. ``g_far_teach``
    = max(G, 0) x (1 - teachability), ``g_far_jsd`` = max(G, 0) x mean JSD; NaN where a factor is."""
    g = max(accuracy_gap, 0.0) if math.isfinite(accuracy_gap) else math.nan
    return {"g_far_teach": g * (1.0 - teachability), "g_far_jsd": g * mean_jsd}


def method_term(method: str, accuracy_gap: float) -> float:
    """The method order read from the sign of G (predictor v2's fifth look): a full-distribution loss is the larger
    step, more gain where the config helps and more damage where it hurts. +1 for a full-distribution method of a
    config with G > 0, -1 for one with G <= 0, 0 for a sampled-token method or an unknown G."""
    if not math.isfinite(accuracy_gap):
        return 0.0
    return LOSS_KIND[method] * (1.0 if accuracy_gap > 0 else -1.0)


def scaled_gap(method: str, accuracy_gap: float, sampled_scale: float) -> float:
    """G scaled by how far the method's loss moves the student (predictor v2's seventh look): all of G for a
    full-distribution loss, ``sampled_scale`` of it for a sampled-token one, which realised less than its config's G
    in either direction."""
    return accuracy_gap * (1.0 if LOSS_KIND[method] else sampled_scale)


def gap_rank_key(method: str, accuracy_gap: float, gain: float, rule: str, sampled_scale: float = 1.0,
                 config_gain: float = math.nan) -> tuple:
    """Sort key (ascending: ranked first) of a row when G gates the recommendation: G scaled by the loss (``g_scaled``
    only), then G, then the method order (``sign_of_g`` and ``g_scaled``), then v2's predicted ``gain``. Predictor
    v2's eighth look: ``v2_gain`` puts the gain first, then G and the sign-of-G order; ``v2_config`` the
    configuration's ``config_gain`` (the mean of v2's gains over its methods), then the sign-of-G order, then the
    gain. A missing value last."""
    def first(v: float) -> float:
        return -v if math.isfinite(v) else math.inf
    term = method_term(method, accuracy_gap) if rule in ("sign_of_g", "g_scaled", "v2_gain", "v2_config") else 0.0
    if rule == "v2_gain":
        return first(gain), first(accuracy_gap), -term, 0.0
    if rule == "v2_config":
        return first(config_gain), -term, first(gain), 0.0
    scaled = scaled_gap(method, accuracy_gap, sampled_scale) if rule == "g_scaled" else accuracy_gap
    return first(scaled), first(accuracy_gap), -term, first(gain)


def config_gains(configs: list[str], gains) -> list[float]:
    """Each row's configuration's mean predicted gain over its rows (the ``v2_config`` order; NaN rows left out)."""
    g, c = np.asarray(gains, dtype=np.float64), np.asarray(configs)
    means = {}
    for name in set(configs):
        v = g[(c == name) & np.isfinite(g)]
        means[name] = float(v.mean()) if v.size else math.nan
    return [means[x] for x in configs]


def fit(X: np.ndarray, y: np.ndarray, features: list[str], alpha: float) -> dict:
    """Ridge fit of ``y`` ``[n]`` on ``X`` ``[n, f]`` (NaN imputed by the column mean); returns the model as data."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    mean, sd = _scale(X)
    Z = _z(X, mean, sd)  # [n, f]
    y0 = y.mean()
    coef = np.linalg.solve(Z.T @ Z + alpha * np.eye(Z.shape[1]), Z.T @ (y - y0))  # [f]
    return {"features": list(features), "mean": mean.tolist(), "sd": sd.tolist(), "coef": coef.tolist(),
            "intercept": float(y0), "alpha": float(alpha), "range": fitted_range(X)}


def fitted_range(X: np.ndarray) -> list[list[float | None]]:
    """``[[min], [max]]`` of each column of ``X`` ``[n, f]`` over the fitting rows (None: no finite value): a
    prediction from values outside it extrapolates, which the fold residuals behind its interval never saw."""
    X = np.asarray(X, dtype=np.float64)
    lo = np.where(np.isfinite(X), X, np.inf).min(axis=0)  # [f]; inf where the column has no finite value
    hi = np.where(np.isfinite(X), X, -np.inf).max(axis=0)
    return [[float(v) if np.isfinite(v) else None for v in b] for b in (lo, hi)]


def outside(model: dict, X: np.ndarray) -> np.ndarray:
    """``[n, f]``: True where a finite value lies outside the model's fitted range (``fitted_range``; False
    everywhere for a model file written before ranges were recorded, and for a column without one)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    if "range" not in model:
        return np.zeros(X.shape, dtype=bool)
    lo, hi = (np.array([np.nan if v is None else float(v) for v in b]) for b in model["range"])  # [f] each
    with np.errstate(invalid="ignore"):
        return np.isfinite(X) & ((X < lo) | (X > hi))  # a NaN bound compares False


def fit_logistic(X: np.ndarray, y: np.ndarray, features: list[str], lam: float, tol: float = 1e-10,
                 max_iter: int = 100) -> dict:
    """P(y = 1) as a logistic regression of ``y`` ``[n]`` (0/1) on ``X`` ``[n, f]`` standardised as ``fit`` does, with an
    L2 penalty ``lam`` on the coefficients (not the intercept); Newton's method until the largest step is below
    ``tol``. The model is data of ``fit``'s form (``contributions`` reads it; the contributions are on the log-odds)."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    mean, sd = _scale(X)
    A = np.c_[np.ones(len(X)), _z(X, mean, sd)]  # [n, 1 + f]
    penalty = lam * np.eye(A.shape[1])
    penalty[0, 0] = 0.0
    b = np.zeros(A.shape[1])
    for _ in range(max_iter):
        p = _sigmoid(A @ b)  # [n]
        step = np.linalg.solve(A.T @ (A * (p * (1 - p))[:, None]) + penalty, A.T @ (p - y) + penalty @ b)
        b -= step
        if np.max(np.abs(step)) < tol:
            break
    return {"features": list(features), "mean": mean.tolist(), "sd": sd.tolist(), "coef": b[1:].tolist(),
            "intercept": float(b[0]), "lam": float(lam), "link": "logit"}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + e^-x), without overflow


def probability(model: dict, X: np.ndarray) -> np.ndarray:
    """``[n]`` P(y = 1) of a ``fit_logistic`` model."""
    return _sigmoid(predict(model, X))


def class_verdict(p_improves: float, p_degrades: float, threshold: float, helps: bool = True) -> str:
    """hurts when P(degrades) >= threshold, helps when P(improves) >= threshold (and ``helps`` is issued at all),
    unclear otherwise, and when both reach it."""
    up, down = p_improves >= threshold, p_degrades >= threshold
    if down and not up:
        return "hurts"
    if up and not down and helps:
        return "helps"
    return "unclear"


def centre(X: np.ndarray, centred, fill, groups) -> np.ndarray:
    """``X`` ``[n, f]`` with each ``centred`` column imputed (NaN -> ``fill``, the fitting rows' mean) and then centred
    on the mean of its group's rows (a world in the study, the rows of one diagnosis in the product): a feature
    written ``c(x)``, which acts only relative to the other rows of its diagnosis (benchmarks/validity/v2/
    plan_look2.yaml). Other columns are returned as they are."""
    X = np.array(X, dtype=np.float64, copy=True)
    groups = np.asarray(groups)
    for j in np.flatnonzero(np.asarray(centred, dtype=bool)):
        col = np.where(np.isfinite(X[:, j]), X[:, j], fill[j])  # [n]
        for g in np.unique(groups):
            col[groups == g] -= col[groups == g].mean()
        X[:, j] = col
    return X


def _scale(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fitting rows' column mean and SD ``[f]`` (NaN ignored; an all-NaN column 0 and 1, a constant one SD 1)."""
    mean = np.nanmean(X, axis=0)
    sd = np.nanstd(X, axis=0)
    return np.where(np.isfinite(mean), mean, 0.0), np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)


def _z(X: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    Z = (X - mean) / sd
    return np.where(np.isfinite(Z), Z, 0.0)  # a missing feature sits at the fitting rows' mean


def contributions(model: dict, X: np.ndarray) -> np.ndarray:
    """``[n, f]`` additive contribution of each feature: coef * z (the prediction is their sum + intercept)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    return _z(X, np.asarray(model["mean"]), np.asarray(model["sd"])) * np.asarray(model["coef"])


def _linear(model: dict, X: np.ndarray) -> np.ndarray:
    return model["intercept"] + contributions(model, X).sum(axis=1)  # [n]


def _outcome_scale(model: dict):
    """The map from the ridge's scale to the outcome's: exp for a model fitted to the log of a positive outcome
    (``target: log``, predictor v2's thirteenth look: the drift), else the identity."""
    return np.exp if model.get("target", "raw") == "log" else np.asarray


def predict(model: dict, X: np.ndarray) -> np.ndarray:
    """``[n]`` the model's prediction on the outcome's scale."""
    return _outcome_scale(model)(_linear(model, X))


def interval(model: dict, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[n]`` each: the prediction and its 95% interval, the residual band's quantiles added on the scale the model
    was fitted on (a factor, for a log target); a missing band quantile gives NaN."""
    lin = _linear(model, X)
    lo, hi = (math.nan if b is None else float(b) for b in model["residual_band"])
    back = _outcome_scale(model)
    return back(lin), back(lin + lo), back(lin + hi)


def residual_band(residuals, alpha: float = 0.05) -> tuple[float, float]:
    """(q_alpha/2, q_1-alpha/2) of out-of-fold residuals (realised - predicted)."""
    r = np.asarray(residuals, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(r, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def verdict(lo: float, hi: float, delta: float) -> str:
    """helps when the whole interval is above +delta, hurts when below -delta, else unclear."""
    if lo > delta:
        return "helps"
    if hi < -delta:
        return "hurts"
    return "unclear"
