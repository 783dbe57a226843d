"""A verdict classifier on the diagnosis' own columns (the eighteenth look's model, plan_look18.yaml).

The realised class of a row (improves / no clear change / degrades, the studies' ``realised``) is modelled by a
multinomial logistic regression on standardised columns with an L2 penalty on the slopes (not the intercepts); the
verdict is helps where P(improves) >= t_help, hurts where P(degrades) >= t_hurt, unclear otherwise. Every column is
one the product's diagnosis computes for a (config, method) row.
"""

from __future__ import annotations

import glob
import json
import math
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

HERE = Path(__file__).resolve().parent
DEGRADES, UNCLEAR, IMPROVES = 0, 1, 2
CLASS = {"degrades": DEGRADES, "no clear change": UNCLEAR, "improves": IMPROVES}
FULL = ("jsd", "opsd_jsd")  # the full-distribution losses
COLUMNS = ("G", "full", "G*full", "|G|", "teachability", "topk_overlap", "log1p mean_jsd", "log1p mean_rev_kl",
           "alignment", "teacher_advantage", "high_entropy_share", "opd2_sign_agreement")
LAMBDA = 1.0


def columns(r: dict) -> dict[str, float]:
    """A check row's columns. A sign agreement with no informative token (the base as its own teacher: its delta is
    zero everywhere) is 0."""
    g, full = float(r["accuracy_gap"]), float(r["method"] in FULL)
    sa = r.get("opd2_sign_agreement")
    return {"G": g, "full": full, "G*full": g * full, "|G|": abs(g), "teachability": float(r["teachability"]),
            "topk_overlap": float(r["topk_overlap"]), "log1p mean_jsd": math.log1p(float(r["mean_jsd"])),
            "log1p mean_rev_kl": math.log1p(float(r["mean_rev_kl"])), "alignment": float(r["alignment"]),
            "teacher_advantage": float(r["teacher_advantage"]), "high_entropy_share": float(r["high_entropy_share"]),
            "opd2_sign_agreement": 0.0 if sa is None or sa != sa else float(sa)}


def check_rows(pattern: str = str(HERE / "checks" / "*_analysis.json"), only: set[str] | None = None
               ) -> tuple[list[dict], list[str]]:
    """Every product row of the checked worlds (file order), and each row's world."""
    rows, worlds = [], []
    for f in sorted(glob.glob(pattern)):
        for w, v in json.loads(Path(f).read_text())["worlds"].items():
            if only is not None and w not in only:
                continue
            for r in v.get("rows", []):
                if r.get("kind") == "product":
                    rows.append(r)
                    worlds.append(w)
    return rows, worlds


def matrix(rows: list[dict], cols=COLUMNS) -> np.ndarray:
    return np.array([[columns(r)[c] for c in cols] for r in rows], dtype=np.float64)


def fit(X: np.ndarray, y: np.ndarray, lam: float = LAMBDA) -> dict:
    """{mean, sd, coef [3, 1 + f]} minimising the multinomial log-loss plus lam * |slopes|^2 (standardised X)."""
    mean, sd = X.mean(0), X.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    Z = np.c_[np.ones(len(X)), (X - mean) / sd]
    k, p = 3, Z.shape[1]
    onehot = np.eye(k)[y]

    def loss(b):
        B = b.reshape(k, p)
        L = Z @ B.T
        L = L - L.max(1, keepdims=True)
        logp = L - np.log(np.exp(L).sum(1, keepdims=True))
        grad = (np.exp(logp) - onehot).T @ Z
        grad[:, 1:] += 2 * lam * B[:, 1:]
        return -(logp * onehot).sum() + lam * (B[:, 1:] ** 2).sum(), grad.ravel()

    res = minimize(loss, np.zeros(k * p), jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-8})
    return {"mean": mean, "sd": sd, "coef": res.x.reshape(k, p)}


def probabilities(model: dict, X: np.ndarray) -> np.ndarray:
    """[n, 3]: P(degrades), P(no clear change), P(improves)."""
    L = np.c_[np.ones(len(X)), (X - model["mean"]) / model["sd"]] @ model["coef"].T
    L = L - L.max(1, keepdims=True)
    e = np.exp(L)
    return e / e.sum(1, keepdims=True)


def cross_validated(X: np.ndarray, y: np.ndarray, groups: np.ndarray, lam: float = LAMBDA) -> np.ndarray:
    """Each row's probabilities from the model fitted without its group."""
    out = np.zeros((len(y), 3))
    for g in np.unique(groups):
        m = groups == g
        out[m] = probabilities(fit(X[~m], y[~m], lam), X[m])
    return out


def verdicts(p: np.ndarray, t_help: float, t_hurt: float) -> np.ndarray:
    """helps (IMPROVES) where P(improves) >= t_help, else hurts (DEGRADES) where P(degrades) >= t_hurt, else UNCLEAR."""
    return np.where(p[:, IMPROVES] >= t_help, IMPROVES, np.where(p[:, DEGRADES] >= t_hurt, DEGRADES, UNCLEAR))
