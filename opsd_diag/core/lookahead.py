"""What a few training steps did to the student, measured on rollouts it was not trained on.

The lookahead (``engine.lookahead``) takes a few optimiser steps of a method's own loss on one half
of the diagnosis prompts and scores the other half's rollouts, which the initial student ``pi_0``
sampled, under the stepped student ``pi_1``. From those log-probabilities alone (no new samples):

- ``dv``: the change of success. For a prompt with rollouts y_i ~ pi_0 and outcomes c_i, the
  self-normalised importance-sampling estimate of pi_1's success is Σ w_i c_i / Σ w_i with
  w_i = pi_1(y_i) / pi_0(y_i) (whole completions); minus pi_0's own estimate, mean c_i. Consistent
  as the number of rollouts grows and exact when pi_1 = pi_0 (gives 0); its bias shrinks with the
  step, which is small by design.
- ``dll``: the mean per-token log-likelihood change of correct completions minus that of incorrect
  ones, per prompt with both kinds: a lower-variance proxy that asks "did the step favour what
  succeeds?".
- ``kl``: the mean per-token KL(pi_1 || pi_0) over the full vocabulary at the rollouts' positions:
  how far the step moved the policy.

On a forgetting set, the initial student's own verified-correct samples are scored under both students:
``loglik_change`` gives a prompt's mean per-token log-likelihood change of them (negative: the step made what
the student got right less likely), a low-variance proxy of forgetting where a few steps flip no sample.

With ``lookahead.fresh_samples`` = n, both students also draw n fresh samples of every measurement
prompt (the same seeds), and ``pass_change`` gives each prompt's pass@k of pi_1's samples minus pi_0's:
unbiased for the change of pass@k, at the price of sampling.
"""

from __future__ import annotations

import math

import numpy as np
from torch import Tensor

from opsd_diag.core.stats import pass_at_k


def success_change(delta_logp: np.ndarray, correct: np.ndarray) -> float:
    """One prompt's Σ w c / Σ w − mean c, with w = exp(delta_logp) (``delta_logp``: log pi_1 − log pi_0 of
    each whole completion, ``correct`` 0/1), computed stably (weights shifted by their max)."""
    d = np.asarray(delta_logp, dtype=np.float64)  # [n]
    c = np.asarray(correct, dtype=np.float64)  # [n]
    w = np.exp(d - d.max())  # [n] the common factor cancels in the ratio
    return float((w * c).sum() / w.sum() - c.mean())


def loglik_gap(delta_per_token: np.ndarray, correct: np.ndarray) -> float:
    """One prompt's mean per-token log-likelihood change of its correct completions minus its incorrect
    ones (NaN unless it has both)."""
    d = np.asarray(delta_per_token, dtype=np.float64)
    c = np.asarray(correct, dtype=bool)
    if c.all() or not c.any():
        return math.nan
    return float(d[c].mean() - d[~c].mean())


def loglik_change(delta_per_token: np.ndarray, correct: np.ndarray) -> float:
    """One prompt's mean per-token log-likelihood change of its correct completions (NaN without one)."""
    d = np.asarray(delta_per_token, dtype=np.float64)
    c = np.asarray(correct, dtype=bool)
    return float(d[c].mean()) if c.any() else math.nan


def kl_per_token(new_logp: Tensor, old_logp: Tensor) -> Tensor:
    """KL(pi_1 || pi_0) per position over the full vocabulary; inputs ``[N, V]`` log-probs -> ``[N]``."""
    return (new_logp.exp() * (new_logp - old_logp)).sum(-1)  # [N]


def pass_change(old: np.ndarray, new: np.ndarray, k: int) -> np.ndarray:
    """Per prompt, pass@k of the new samples minus that of the old (``core.stats.pass_at_k``); ``old``, ``new``:
    ``[P, n]`` 0/1 outcomes of each prompt's samples -> ``[P]`` (NaN where k > n)."""
    old, new = np.asarray(old, dtype=bool), np.asarray(new, dtype=bool)
    return np.array([pass_at_k(len(b), int(b.sum()), k) - pass_at_k(len(a), int(a.sum()), k)
                     for a, b in zip(old, new)], dtype=np.float64)
