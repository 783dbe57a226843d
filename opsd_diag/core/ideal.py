"""The ideal-gradient maths of one node, and their aggregates (docs/signals.md, the predictor).

Does a teacher/context/signal push the student the right way?

At a node u = (x, y_<t) of a student rollout, candidate next tokens K get success probabilities S_k
estimated by m student continuations each (our estimator; the published one was not available).
With p̃, q̃ the student and teacher restricted to K and renormalised, the success of the student at
u is V = Σ p̃_k S_k, and its gradient w.r.t. the student's logits z_K is the ideal direction

    g*_k = ∂V/∂z_k = p̃_k (S_k − V)                      (softmax Jacobian applied to S).

Every distillation objective also moves z_K. We write each as the *descent* direction d = −∇_z D
of its loss D on the restricted support (or +∇_z of the policy-gradient surrogate), so "d aligned
with g*" means "training on this signal raises success" (derivations; checked by finite
differences in tests/test_ideal.py):

    reverse KL   D = KL(p̃ ‖ q̃):  d_k = p̃_k (f_k − Σ_j p̃_j f_j),  f = log q̃ − log p̃
    forward KL   D = KL(q̃ ‖ p̃):  d = q̃ − p̃        (the same form with f = q̃ / p̃)
    JSD_β        D = β KL(q̃‖m̃) + (1−β) KL(p̃‖m̃), m̃ = β q̃ + (1−β) p̃:
                 ∂D/∂p̃_k = (1−β) log(p̃_k/m̃_k) exactly (the other terms cancel), so the same
                 form with f = (1−β) log(m̃/p̃); β = 0 is forward KL and β = 1 reverse KL,
                 special-cased as in core.signals.generalized_jsd (the formula itself vanishes there)
    sampled      surrogate A log p̃(y_t), A a stop-gradient advantage (r_opd, a_d2, a_ex):
                 d = A (e_{y_t} − p̃)

Alignment = cos(g*, d) (NaN when either vector is zero: no information either way). The
first-order gain ⟨g*, d/|d|⟩ is the success gained per unit logit step along d (0 when d = 0);
it is the verdict's ranking score. Teacher advantage A_T = Σ_k (q̃_k − p̃_k) S_k: positive when
following the teacher at u raises success. Ŝ, ĝ*, V̂ and Â_T are unbiased, with errors O(1/√m).

Caveat (outcome-based): S only sees the final answer. After an early mistake, a compensating wrong
token can have the highest Ŝ while the teacher's correct step has Ŝ = 0, so on incorrect rollouts
a teacher that follows the correct solution can show A_T < 0 at nodes after the first error (seen
on the toy zoo's 6-step problems).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from opsd_diag.core.stats import bootstrap_mean_over_prompts, spearman

OBJECTIVES = ("rev_kl", "fwd_kl", "jsd", "r_opd", "a_d2", "a_ex")
SAMPLED = ("r_opd", "a_d2", "a_ex")  # single-sample signals, read from the tokens table


def restrict(logp_k) -> tuple[np.ndarray, float]:
    """Full-vocabulary log-probs of the candidates -> (renormalised log p̃ over K, mass of K)."""
    logp_k = np.asarray(logp_k, dtype=np.float64)  # [K]
    lse = float(logsumexp(logp_k))
    return logp_k - lse, math.exp(lse)


def node_value(p, s) -> float:
    """V = Σ p̃_k S_k: the student's success probability at the node (restricted to K)."""
    return float(np.dot(p, s))


def ideal_direction(p, s) -> np.ndarray:
    """g*_k = ∂V/∂z_k = p̃_k (S_k − V)."""
    p, s = np.asarray(p, dtype=np.float64), np.asarray(s, dtype=np.float64)
    return p * (s - np.dot(p, s))  # [K]


def objective_direction(p, f) -> np.ndarray:
    """d_k = p̃_k (f_k − Σ_j p̃_j f_j): the softmax Jacobian applied to a per-token signal f."""
    p, f = np.asarray(p, dtype=np.float64), np.asarray(f, dtype=np.float64)
    return p * (f - np.dot(p, f))  # [K]


def direction_reverse_kl(logp, logq) -> np.ndarray:
    """−∇_z KL(student ‖ teacher) on K: f = log q̃ − log p̃."""
    logp, logq = np.asarray(logp, dtype=np.float64), np.asarray(logq, dtype=np.float64)
    return objective_direction(np.exp(logp), logq - logp)


def direction_forward_kl(logp, logq) -> np.ndarray:
    """−∇_z KL(teacher ‖ student) on K: q̃ − p̃."""
    return np.exp(np.asarray(logq, dtype=np.float64)) - np.exp(np.asarray(logp, dtype=np.float64))


def direction_jsd(logp, logq, beta: float) -> np.ndarray:
    """−∇_z JSD_β(student, teacher) on K: f = (1−β) log(m̃/p̃); ends as in signals.generalized_jsd."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return direction_forward_kl(logp, logq)
    if beta == 1.0:
        return direction_reverse_kl(logp, logq)
    logp, logq = np.asarray(logp, dtype=np.float64), np.asarray(logq, dtype=np.float64)
    log_mix = np.logaddexp(math.log(beta) + logq, math.log1p(-beta) + logp)  # [K] log m̃
    return objective_direction(np.exp(logp), (1.0 - beta) * (log_mix - logp))


def direction_sampled(p, sampled_index: int, advantage: float) -> np.ndarray:
    """+∇_z of the surrogate A·log p̃(y_t), A held constant: A (e_{y_t} − p̃)."""
    p = np.asarray(p, dtype=np.float64)
    e = np.zeros_like(p)
    e[sampled_index] = 1.0
    return float(advantage) * (e - p)  # [K]; NaN advantage (no base model) gives NaN


def cosine(a, b) -> float:
    """cos(a, b); NaN when either vector is zero or not finite (nothing to align)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if not (np.isfinite(na) and np.isfinite(nb)) or na <= 1e-300 or nb <= 1e-300:
        return math.nan
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def gain(g, d) -> float:
    """⟨g*, d/|d|⟩: first-order success gain per unit logit step along d; 0 for d = 0."""
    g, d = np.asarray(g, dtype=np.float64), np.asarray(d, dtype=np.float64)
    nd = np.linalg.norm(d)
    if not np.isfinite(nd):
        return math.nan
    return 0.0 if nd <= 1e-300 else float(np.dot(g, d) / nd)


def teacher_advantage(p, q, s) -> float:
    """A_T = Σ_k (q̃_k − p̃_k) S_k: success of following the teacher minus the student's, at the node."""
    return float(np.dot(np.asarray(q, dtype=np.float64) - np.asarray(p, dtype=np.float64), s))


def value_spread(s) -> float:
    """max_k S_k − min_k S_k: how much the choice at this node matters."""
    s = np.asarray(s, dtype=np.float64)
    return float(s.max() - s.min()) if s.size else math.nan


def node_metrics(logp_k, logq_k, s, sampled_index: int, advantages: dict[str, float],
                 jsd_beta: float = 0.5) -> dict:
    """Every per-node quantity for one teacher config; ``logp_k``/``logq_k`` are full-vocabulary
    log-probs of the candidates (restricted and renormalised here), ``s`` the success estimates."""
    logp, p_mass = restrict(logp_k)
    logq, q_mass = restrict(logq_k)
    p, q = np.exp(logp), np.exp(logq)
    s = np.asarray(s, dtype=np.float64)
    g = ideal_direction(p, s)
    dirs = {"rev_kl": direction_reverse_kl(logp, logq), "fwd_kl": direction_forward_kl(logp, logq),
            "jsd": direction_jsd(logp, logq, jsd_beta)}
    for name in SAMPLED:
        dirs[name] = direction_sampled(p, sampled_index, advantages.get(name, math.nan))
    out = {"p_tilde": p, "q_tilde": q, "p_mass": p_mass, "q_mass": q_mass, "V": node_value(p, s),
           "V_teacher": node_value(q, s), "A_T": teacher_advantage(p, q, s), "spread": value_spread(s),
           "g_norm": float(np.linalg.norm(g))}
    for name, d in dirs.items():
        out[f"align_{name}"] = cosine(g, d)
        out[f"gain_{name}"] = gain(g, d)
    return out


def _ci(values, prompts, n_boot: int, seed: int) -> dict:
    values = np.asarray(values, dtype=float)
    est, lo, hi = bootstrap_mean_over_prompts(values, prompts, n_boot, seed)
    n = int(pd.Series(np.asarray(prompts))[np.isfinite(values)].nunique())
    return {"estimate": est, "lo": lo, "hi": hi, "n_prompts": n, "n_nodes": int(np.isfinite(values).sum())}


def aggregate_nodes(nodes: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict:
    """Per config: A_T, alignment (mean and P(> 0)) and gain per objective, on all / incorrect /
    correct rollouts, with bootstrap CIs over prompts; Spearman of kl_rev and jsd vs alignment."""
    out = {}
    for config, df in nodes.groupby("config", sort=True):
        split = {"all": df, "incorrect": df[~df["correct"].astype(bool)], "correct": df[df["correct"].astype(bool)]}
        entry = {"n_nodes": int(len(df)), "n_prompts": int(df["problem_id"].nunique()),
                 "n_informative": int((df["g_norm"] > 0).sum()),
                 "teacher_advantage": {s: _ci(d["A_T"], d["problem_id"], n_boot, seed) for s, d in split.items()},
                 "value": {s: _ci(d["V"], d["problem_id"], n_boot, seed) for s, d in split.items()},
                 "alignment": {}, "gain": {}, "spearman": {"kl_rev": {}, "jsd": {}}}
        for o in OBJECTIVES:
            a = f"align_{o}"
            entry["alignment"][o] = {
                s: {"mean": _ci(d[a], d["problem_id"], n_boot, seed),
                    "p_positive": _ci(np.where(np.isfinite(d[a]), d[a] > 0, np.nan), d["problem_id"], n_boot, seed)}
                for s, d in split.items()}
            entry["gain"][o] = {s: _ci(d[f"gain_{o}"], d["problem_id"], n_boot, seed) for s, d in split.items()}
            for div in ("kl_rev", "jsd"):
                entry["spearman"][div][o] = spearman(df[div], df[a])
        out[str(config)] = entry
    return out


RELIABLE = ("teacher_advantage", *(f"gain_{o}" for o in OBJECTIVES))  # the estimates whose reliability is reported


def _estimate_and_se(entry: dict, name: str) -> tuple[float, float]:
    """(estimate, bootstrap SE = (hi − lo) / (2 · 1.96)) of one config's estimate over all its nodes."""
    ci = entry["teacher_advantage"]["all"] if name == "teacher_advantage" else entry["gain"][name[5:]]["all"]
    est, lo, hi = (math.nan if ci[k] is None else float(ci[k]) for k in ("estimate", "lo", "hi"))
    return est, (hi - lo) / (2 * 1.959963984540054)


def reliability(configs: dict) -> dict:
    """Per config of ``aggregate_nodes``' result and per estimate of ``RELIABLE``: the spread of the estimate
    between the configs (SD over the configs with a finite one, n − 1) over this config's bootstrap SE.

    Above 1, the configs differ by more than one config's own noise, so ranking configs by it says
    something; near or below 1 it cannot tell them apart. NaN with fewer than two configs or a zero SE."""
    out: dict[str, dict] = {c: {} for c in configs}
    for name in RELIABLE:
        pairs = {c: _estimate_and_se(e, name) for c, e in configs.items()}
        ests = np.array([est for est, _ in pairs.values() if math.isfinite(est)])
        spread = float(np.std(ests, ddof=1)) if ests.size >= 2 else math.nan
        for c, (_, se) in pairs.items():
            out[c][name] = spread / se if math.isfinite(se) and se > 0 and math.isfinite(spread) else math.nan
    return out


def aggregate_with_reliability(nodes: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict:
    """``aggregate_nodes`` with each config's ``reliability`` (``reliability``) added."""
    configs = aggregate_nodes(nodes, n_boot, seed)
    for c, r in reliability(configs).items():
        configs[c]["reliability"] = r
    return configs
