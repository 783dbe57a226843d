"""The engine-vs-trainer check: the sampler's per-token log-probs (a rollouts file's) against the student's own
scoring of the same ids (``lp_s``). Pure numpy.

Per token d = lp_s − lp_sampler (nats). An inference engine and a trainer that compute the same distribution
differ by rounding only (|d| ~ 1e-3 in bf16); a systematic gap (another temperature, another chat template,
stale weights, a kernel bug) biases every importance ratio and every on-policy signal built on them.
The check fires when the mean |d| exceeds ``MEAN_ABS_MAX`` or more than ``SHARE_MAX`` of the tokens have
|d| > ``TOKEN_TOL`` (docs/design.md#rollouts-from-a-file states these).
"""

from __future__ import annotations

import numpy as np

TOKEN_TOL = 0.1      # nats: a token whose two log-probs differ by more is a mismatched token
SHARE_MAX = 0.01     # the check fires above this share of mismatched tokens ...
MEAN_ABS_MAX = 0.02  # ... or above this mean |d| (nats)
BUCKETS = (0, 16, 64, 256, 1024)  # lower edges of the completion-position buckets (the last one is open)


def _stats(d: np.ndarray) -> dict:
    a = np.abs(d)
    return {"n_tokens": int(d.size), "mean": float(d.mean()), "mean_abs": float(a.mean()), "max_abs": float(a.max()),
            "share_over": float((a > TOKEN_TOL).mean())}


def summarize(student: list[np.ndarray], sampler: list[np.ndarray]) -> dict:
    """Per-token and per-position-bucket statistics of d = student − sampler over rollouts (one array per
    rollout, equal lengths pairwise), the mean |Σ_t d| per rollout (the sequence log-ratio), and ``fired``."""
    d = [np.asarray(s, np.float64) - np.asarray(q, np.float64) for s, q in zip(student, sampler)]
    flat = np.concatenate(d)
    pos = np.concatenate([np.arange(x.size) for x in d])
    buckets = []
    for lo, hi in zip(BUCKETS, (*BUCKETS[1:], None)):
        sel = (pos >= lo) & (pos < hi) if hi is not None else pos >= lo
        if sel.any():
            buckets.append({"positions": f"{lo}-{hi - 1}" if hi is not None else f"{lo}+", **_stats(flat[sel])})
    overall = _stats(flat)
    fired = overall["mean_abs"] > MEAN_ABS_MAX or overall["share_over"] > SHARE_MAX
    return {**overall, "n_rollouts": len(d), "sequence_mean_abs": float(np.mean([abs(x.sum()) for x in d])),
            "buckets": buckets, "fired": bool(fired),
            "thresholds": {"token_tol": TOKEN_TOL, "share_max": SHARE_MAX, "mean_abs_max": MEAN_ABS_MAX}}
