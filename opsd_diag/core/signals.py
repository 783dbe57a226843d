"""Per-token distillation signals: the maths the diagnostic and the trainer share (see SIGNALS.md).

Pure module-level tensor functions, no classes and no I/O. The diagnostic calls them under no_grad
to measure; the trainer calls the same functions with grad to optimise.

Conventions:
- Inputs are one chunk of positions already flattened: logits ``[N, V]``, sampled token ids ``[N]``.
  Callers stream over chunks so a ``[batch, length, vocab]`` tensor never exists.
- ``p`` is the student distribution, ``q`` the teacher, ``b`` the base; all are scored at the same
  temperature ``tau`` (``softmax(logits / tau)``).
- Everything is computed in float32, even for bf16 logits: a bf16 log-softmax over a 150k vocabulary
  loses the small probabilities that KL and entropy are made of.
- Logits must be finite (mask unwanted vocabulary entries with a large negative number, not -inf):
  ``0 * (-inf)`` inside ``p (log p - log q)`` would be NaN.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

SIGNAL_KEYS = (
    "lp_s", "lp_t", "lp_b", "r_opd", "r_delta", "kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta",
    "gate", "a_d2", "a_ex", "h_s", "h_t", "h_b", "rank_t", "top1_agree",
)
BASE_KEYS = ("lp_b", "r_delta", "a_delta", "gate", "a_d2", "h_b")  # NaN when no base model is given


def log_probs(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """float32 ``log_softmax(logits / temperature)`` over the last (vocabulary) dimension."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = logits.float()  # [N, V] float32 (a no-op for float32 input)
    if temperature != 1.0:
        z = z / temperature  # [N, V]
    return torch.log_softmax(z, dim=-1)  # [N, V]


def token_logprob(logp: Tensor, token_ids: Tensor) -> Tensor:
    """Log-probability of each sampled token: ``logp[n, token_ids[n]]``."""
    return logp.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)  # [N]


def entropy(logp: Tensor) -> Tensor:
    """Shannon entropy ``H(p) = -sum_v p_v log p_v`` in nats."""
    return -(logp.exp() * logp).sum(-1)  # [N]


def kl(logp: Tensor, logq: Tensor) -> Tensor:
    """``KL(p || q) = sum_v p_v (log p_v - log q_v)``, differentiable w.r.t. both arguments.

    ``kl(student_logp, teacher_logp)`` is the reverse KL ``KL(student || teacher)``;
    ``kl(teacher_logp, student_logp)`` is the forward KL ``KL(teacher || student)``.
    """
    return (logp.exp() * (logp - logq)).sum(-1)  # [N]


def generalized_jsd(student_logp: Tensor, teacher_logp: Tensor, beta: float) -> Tensor:
    """Generalised Jensen-Shannon divergence (TRL's ``generalized_jsd_loss`` convention).

    With p = student, q = teacher and the mixture m = beta q + (1 - beta) p, for 0 < beta < 1::

        JSD_beta = beta KL(teacher || m) + (1 - beta) KL(student || m)

    The two ends are special-cased, as in TRL and SIGNALS.md, because the formula itself tends to
    0 there (m becomes p or q); they are a convention, not the limit of the formula:

        beta == 0  ->  KL(teacher || student)   (forward KL)
        beta == 1  ->  KL(student || teacher)   (reverse KL)

    ``log m`` is mixed in probability space through logaddexp, so no probability is formed and
    logged again. Differentiable w.r.t. both inputs.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return kl(teacher_logp, student_logp)  # [N] KL(teacher || student)
    if beta == 1.0:
        return kl(student_logp, teacher_logp)  # [N] KL(student || teacher)
    mix_logp = torch.logaddexp(teacher_logp + math.log(beta),
                               student_logp + math.log1p(-beta))  # [N, V] log m
    return beta * kl(teacher_logp, mix_logp) + (1.0 - beta) * kl(student_logp, mix_logp)  # [N]


def centered_expectation(student_logp: Tensor, f: Tensor, token_ids: Tensor, *,
                         centering: int | None = None) -> Tensor:
    """The centring baseline ``E_p[f] = sum_v p_v f_v`` under the student p.

    ``centering=None`` sums over the full vocabulary. ``centering=k`` sums over the student's top-k
    tokens plus the sampled token (added when it falls outside the top-k), with the weights p_v
    *not* renormalised: what the published OPD² code does (k = 1024 there).
    """
    if centering is None or centering >= student_logp.shape[-1]:
        return (student_logp.exp() * f).sum(-1)  # [N]
    if centering < 1:
        raise ValueError(f"centering must be None or a positive top-k size, got {centering}")
    top_ids = student_logp.topk(centering, dim=-1).indices  # [N, k]
    top_sum = (student_logp.gather(-1, top_ids).exp() * f.gather(-1, top_ids)).sum(-1)  # [N]
    tok = token_ids.long().unsqueeze(-1)  # [N, 1]
    tok_term = (student_logp.gather(-1, tok).exp() * f.gather(-1, tok)).squeeze(-1)  # [N]
    outside = ~(top_ids == tok).any(-1)  # [N] sampled token not among the top-k
    return top_sum + torch.where(outside, tok_term, torch.zeros_like(tok_term))  # [N]


class Dist(NamedTuple):
    """One model's distribution on a chunk, computed once and reused by every teacher config."""
    logp: Tensor  # [N, V] float32 log-probs
    p: Tensor     # [N, V] probabilities
    lp: Tensor    # [N] log-prob of the sampled token
    h: Tensor     # [N] entropy (nats)
    top1: Tensor  # [N] argmax id


@torch.no_grad()
def distribution(logits: Tensor, token_ids: Tensor, temperature: float = 1.0) -> Dist:
    """log-softmax once, then everything per-model that the signals need (no grad)."""
    logp = log_probs(logits, temperature)  # [N, V]
    p = logp.exp()  # [N, V]
    return Dist(logp, p, token_logprob(logp, token_ids), -(p * logp).sum(-1), logp.argmax(-1))


@torch.no_grad()
def token_signals(student_logits: Tensor, teacher_logits: Tensor, token_ids: Tensor, *,
                  base_logits: Tensor | None = None, temperature: float = 1.0, jsd_beta: float = 0.5,
                  centering: int | None = None, exopd_lambda: float = 1.25,
                  ref_logprob: Tensor | None = None) -> dict[str, Tensor]:
    """Every per-token quantity of SIGNALS.md for one chunk, as float32 ``[N]`` tensors (no grad).

    Keys are exactly ``SIGNAL_KEYS``. Without ``base_logits`` the base-dependent keys
    (``BASE_KEYS``) are NaN-filled, never zeros, so an aggregate cannot mistake them for data.
    See ``signals_from`` for the definitions; this wrapper computes the distributions first.
    """
    base = None if base_logits is None else distribution(base_logits, token_ids, temperature)
    return signals_from(distribution(student_logits, token_ids, temperature),
                        distribution(teacher_logits, token_ids, temperature), token_ids, base=base,
                        jsd_beta=jsd_beta, centering=centering, exopd_lambda=exopd_lambda, ref_logprob=ref_logprob)


@torch.no_grad()
def signals_from(student: Dist, teacher: Dist, token_ids: Tensor, *, base: Dist | None = None,
                 jsd_beta: float = 0.5, centering: int | None = None, exopd_lambda: float = 1.25,
                 ref_logprob: Tensor | None = None) -> dict[str, Tensor]:
    """The signals from precomputed distributions (the scorer reuses student and base per chunk).

    - ``kl_rev`` = KL(student || teacher), ``kl_fwd`` = KL(teacher || student),
      ``jsd`` = generalized_jsd(student, teacher, jsd_beta).
    - ``a_opd`` = r_opd - E_p[log q - log p] and ``a_delta`` = r_delta - E_p[log q - log b], the
      expectation under the student taken as ``centered_expectation(..., centering=centering)``.
    - ``a_ex`` = lambda (lp_t - lp_ref) - (lp_s - lp_ref), with ``lp_ref = ref_logprob`` (the
      reference model's log-prob of the sampled token, scored at the same temperature) or, by
      default, ``lp_s`` (the student's initial model), which makes ``a_ex = lambda * r_opd``.
    - ``rank_t`` counts vocabulary entries the teacher ranks strictly above the sampled token.
    """
    full = centering is None or centering >= student.logp.shape[-1]
    diff = student.logp - teacher.logp  # [N, V] log p - log q, formed once (difference form: precise)
    kl_rev = (student.p * diff).sum(-1)  # [N] KL(student || teacher)
    kl_fwd = -(teacher.p * diff).sum(-1)  # [N] KL(teacher || student)
    r_opd = teacher.lp - student.lp  # [N]
    # E_p[log q - log p] = -KL(p || q) over the full vocabulary
    a_opd = r_opd + kl_rev if full else r_opd - centered_expectation(
        student.logp, -diff, token_ids, centering=centering)  # [N]
    if jsd_beta == 0.0:
        jsd = kl_fwd
    elif jsd_beta == 1.0:
        jsd = kl_rev
    else:
        mix = torch.logaddexp(teacher.logp + math.log(jsd_beta), student.logp + math.log1p(-jsd_beta))  # [N, V]
        jsd = (jsd_beta * (teacher.p * (teacher.logp - mix)).sum(-1)
               + (1.0 - jsd_beta) * (student.p * (student.logp - mix)).sum(-1))  # [N]
    lp_ref = student.lp if ref_logprob is None else ref_logprob.float()  # [N]
    out = {
        "lp_s": student.lp, "lp_t": teacher.lp, "r_opd": r_opd, "kl_rev": kl_rev, "kl_fwd": kl_fwd, "jsd": jsd,
        "a_opd": a_opd,
        "a_ex": exopd_lambda * (teacher.lp - lp_ref) - (student.lp - lp_ref),  # [N]
        "h_s": student.h, "h_t": teacher.h,
        "rank_t": (teacher.logp > teacher.lp.unsqueeze(-1)).sum(-1).float(),  # [N]
        "top1_agree": (student.top1 == teacher.top1).float(),  # [N]
    }
    if base is None:
        out.update({key: torch.full_like(student.lp, float("nan")) for key in BASE_KEYS})  # [N] each
    else:
        r_delta = teacher.lp - base.lp  # [N]
        t_minus_b = teacher.logp - base.logp  # [N, V]
        expect = (student.p * t_minus_b).sum(-1) if full else centered_expectation(
            student.logp, t_minus_b, token_ids, centering=centering)  # [N]
        a_delta = r_delta - expect  # [N]
        gate = (a_delta * a_opd > 0).float()  # [N] OPD² joint conditioning
        out.update(lp_b=base.lp, r_delta=r_delta, a_delta=a_delta, gate=gate, a_d2=gate * a_delta, h_b=base.h)
    return {key: out[key] for key in SIGNAL_KEYS}


def topk(logp: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k most likely tokens per position, for display: (log-probs ``[N, k]``, ids ``[N, k]``)."""
    values, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)  # [N, k], [N, k]
    return values, ids


def policy_gradient_loss(student_token_logp: Tensor, advantage: Tensor) -> Tensor:
    """Per-token REINFORCE loss ``-(A * log p(y_t))`` with a stop-gradient on the advantage.

    The advantage is a reward, not a path for gradients: letting it carry grad (it contains lp_s)
    would add a second, unintended term to the update (DESIGN.md pitfall 10).
    """
    return -(advantage.detach() * student_token_logp)  # [N]


def masked_sum_and_count(per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(float32 sum of ``per_token`` over ``mask``, int64 count of masked-in tokens).

    Returning raw sums lets the trainer divide by a *global* token count (summed over micro-batches
    and ranks). The sum stays graph-connected even for an empty mask, so every rank runs the same
    backward (a detached zero would leave parameters without grads and hang the all-reduce;
    DESIGN.md pitfall 9).
    Masked-out values never leak in, even NaN ones.
    """
    if per_token.shape != mask.shape:
        raise ValueError(f"per_token {tuple(per_token.shape)} and mask {tuple(mask.shape)} differ in shape")
    keep = mask.bool()  # [N]
    values = per_token.float()  # [N]
    total = torch.where(keep, values, torch.zeros_like(values)).sum()  # [] connected to per_token
    return total, keep.sum()
