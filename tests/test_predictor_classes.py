"""The fourth look's class model (``core.predictor.fit_logistic``, ``probability``, ``class_verdict``) against
explicit float64 loops: the fitted coefficients solve the penalised score equations, probabilities are the
logistic of the intercept plus the per-feature contributions, and the verdict follows the threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opsd_diag.core import predictor


def _standardised(X):
    """Column by column, by hand: mean, population SD, z (a NaN sits at the mean)."""
    n, f = len(X), len(X[0])
    Z = [[0.0] * f for _ in range(n)]
    for j in range(f):
        vals = [X[i][j] for i in range(n) if math.isfinite(X[i][j])]
        mu = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / len(vals)) or 1.0
        for i in range(n):
            Z[i][j] = (X[i][j] - mu) / sd if math.isfinite(X[i][j]) else 0.0
    return Z


@pytest.mark.parametrize("seed,lam", [(0, 1.0), (1, 0.1), (2, 5.0)])
def test_coefficients_solve_the_penalised_score_equations(seed, lam):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3)) * [1.0, 3.0, 0.2] + [0.0, 2.0, -1.0]
    X[3, 1] = np.nan  # a missing value
    y = (X[:, 0] - 0.5 * np.nan_to_num(X[:, 1]) + rng.normal(size=40) > 0).astype(float)
    m = predictor.fit_logistic(X, y, ["a", "b", "c"], lam)
    Z = _standardised(X.tolist())
    b0, b = m["intercept"], m["coef"]
    p = [1.0 / (1.0 + math.exp(-(b0 + sum(bj * zj for bj, zj in zip(b, z))))) for z in Z]
    # d/d b0: sum (p - y) = 0; d/d b_j: sum (p - y) z_j + lam b_j = 0
    assert abs(sum(pi - yi for pi, yi in zip(p, y))) < 1e-8
    for j in range(3):
        assert abs(sum((pi - yi) * z[j] for pi, yi, z in zip(p, y, Z)) + lam * b[j]) < 1e-8
    got = predictor.probability(m, X)
    for i in range(len(X)):
        assert got[i] == pytest.approx(p[i], rel=1e-12, abs=1e-12)


def test_separable_classes_stay_finite_under_the_penalty():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    m = predictor.fit_logistic(X, np.array([0.0, 0.0, 1.0, 1.0]), ["x"], 1.0)
    assert all(math.isfinite(v) for v in [m["intercept"], *m["coef"]])
    p = predictor.probability(m, X)
    assert p[0] < 0.5 < p[3]


@pytest.mark.parametrize("up,down,helps,want", [
    (0.9, 0.05, True, "helps"), (0.9, 0.05, False, "unclear"), (0.1, 0.8, True, "hurts"),
    (0.79, 0.79, True, "unclear"), (0.85, 0.85, True, "unclear"), (0.8, 0.0, True, "helps")])
def test_class_verdict_follows_the_threshold(up, down, helps, want):
    assert predictor.class_verdict(up, down, 0.8, helps=helps) == want
