"""Per-token distillation signals: the maths the diagnosis and the trainer share (docs/signals.md).

Pure module-level tensor functions, no I/O. The diagnosis calls them under no_grad to measure; the
trainer calls the same functions to optimise (``advantages`` on detached log-probs, the divergences
with grad).

Conventions:
- Inputs are one chunk of positions already flattened: logits ``[N, V]``, sampled token ids ``[N]``.
  Callers stream over chunks so a ``[batch, length, vocab]`` tensor never exists.
- ``p`` is the student distribution, ``q`` the teacher, ``b`` the base; all are scored at the same
  temperature ``tau`` (``softmax(logits / tau)``).
- Everything is computed in float32, even for bf16 logits: a bf16 log-softmax over a 150k vocabulary
  loses the small probabilities that KL and entropy are made of.
- Logits must be finite (mask unwanted vocabulary entries with a large negative number, not -inf):
  ``0 * (-inf)`` inside ``p (log p - log q)`` would be NaN.
- Settings (beta, lambda, centring) have no defaults here: they are stated once, in the config.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor


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


def kl(logp: Tensor, logq: Tensor, p: Tensor | None = None) -> Tensor:
    """``KL(p || q) = sum_v p_v (log p_v - log q_v)``, differentiable w.r.t. both arguments.

    ``kl(student_logp, teacher_logp)`` is the reverse KL ``KL(student || teacher)``;
    ``kl(teacher_logp, student_logp)`` is the forward KL ``KL(teacher || student)``. ``p``: the
    probabilities ``logp.exp()`` when the caller has them already (one pass less over the vocabulary).
    """
    return ((logp.exp() if p is None else p) * (logp - logq)).sum(-1)  # [N]


def generalized_jsd(student_logp: Tensor, teacher_logp: Tensor, beta: float, *, student_p: Tensor | None = None,
                    teacher_p: Tensor | None = None) -> Tensor:
    """Generalised Jensen-Shannon divergence (TRL's ``generalized_jsd_loss`` convention).

    With p = student, q = teacher and the mixture m = beta q + (1 - beta) p, for 0 < beta < 1::

        JSD_beta = beta KL(teacher || m) + (1 - beta) KL(student || m)

    The two ends are special-cased, as in TRL, because the formula itself tends to 0 there (m becomes
    p or q); they are a convention, not the limit of the formula:

        beta == 0  ->  KL(teacher || student)   (forward KL)
        beta == 1  ->  KL(student || teacher)   (reverse KL)

    ``log m`` is mixed in probability space through logaddexp, so no probability is formed and
    logged again. Differentiable w.r.t. both inputs; ``student_p``/``teacher_p`` are optional
    precomputed probabilities.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return kl(teacher_logp, student_logp, teacher_p)  # [N] KL(teacher || student)
    if beta == 1.0:
        return kl(student_logp, teacher_logp, student_p)  # [N] KL(student || teacher)
    mix_logp = torch.logaddexp(teacher_logp + math.log(beta),
                               student_logp + math.log1p(-beta))  # [N, V] log m
    return (beta * kl(teacher_logp, mix_logp, teacher_p)
            + (1.0 - beta) * kl(student_logp, mix_logp, student_p))  # [N]


# k of the two top-k compatibility columns (teachability, topk_overlap): one value for every run, so runs compare
COMPAT_K = 5


def top_k_ids(logp: Tensor, k: int) -> Tensor:
    """``[N, min(k, V)]`` ids of the largest entries of each row, ties at the k-th value broken toward the lower
    token id (``torch.topk`` leaves which tied entries it returns open; fixed here, so every device and chunking
    picks the same set). Ids, not a ``[N, V]`` mask: the compatibility columns then cost ``[N, k]`` work, and no
    pass over the vocabulary is a scan (Inductor cannot fuse a cumulative sum with the argmax beside it)."""
    k = min(k, logp.shape[-1])
    values, ids = logp.topk(k, dim=-1)  # [N, k] descending: the entries above the k-th value come first
    kth = values[..., -1:]  # [N, 1] the k-th largest value
    room = k - (values > kth).sum(-1, keepdim=True)  # [N, 1] how many tied entries fit, >= 1
    vocab = torch.arange(logp.shape[-1], device=logp.device)  # [V]
    tied = torch.where(logp == kth, vocab, logp.shape[-1]).topk(k, dim=-1, largest=False).values  # [N, k] ascending
    tied = tied.clamp(max=logp.shape[-1] - 1)  # a NaN row ties nothing (its columns are NaN anyway): ids stay ids
    slot = torch.arange(k, device=logp.device) - (k - room)  # [N, k] position among the tied ids, < 0: above
    return torch.where(slot < 0, ids, tied.gather(-1, slot.clamp(min=0)))  # [N, k]


def topk_compat(student_logp: Tensor, teacher_logp: Tensor, k: int = COMPAT_K, *,
                teacher_p: Tensor | None = None, student_ids: Tensor | None = None) -> dict[str, Tensor]:
    """The two top-k compatibility columns of one vocabulary (``[N]`` each, docs/signals.md):

    - ``teachability`` = Σ_{v ∈ top_k(p)} q_v, the teacher's mass on the student's own top-k tokens (TA-OPD);
    - ``topk_overlap`` = |top_k(p) ∩ top_k(q)| / k, the share of top-k tokens both models hold
      ("thinking-pattern" compatibility, Rethinking-OPD).

    k is clamped to the vocabulary; ties as in ``top_k_ids``. ``teacher_p``: ``teacher_logp.exp()`` if at hand;
    ``student_ids``: ``top_k_ids(student_logp, k)`` if at hand (a scorer computes it once for every teacher).
    """
    k = min(k, student_logp.shape[-1])
    top_s = top_k_ids(student_logp, k) if student_ids is None else student_ids  # [N, k]
    top_t = top_k_ids(teacher_logp, k)  # [N, k]
    q = teacher_logp.gather(-1, top_s).exp() if teacher_p is None else teacher_p.gather(-1, top_s)  # [N, k]
    return {"teachability": q.sum(-1),  # [N]
            "topk_overlap": (top_s.unsqueeze(-1) == top_t.unsqueeze(-2)).any(-1).sum(-1).float() / k}  # [N]


class Dist(NamedTuple):
    """One model's distribution on a chunk, computed once and reused by every teacher config."""
    logp: Tensor  # [N, V] float32 log-probs
    p: Tensor     # [N, V] probabilities
    lp: Tensor    # [N] log-prob of the sampled token
    h: Tensor     # [N] entropy (nats)
    top1: Tensor  # [N] argmax id
    top_ids: Tensor | None = None  # [N, COMPAT_K] top_k_ids, where a scorer shares it (with_top_ids)


def dist(logp: Tensor, token_ids: Tensor) -> Dist:
    """Everything per model that the signals need, from float32 log-probs ``[N, V]``.

    Grad follows ``logp``: the diagnosis calls it under no_grad, the trainer on detached log-probs.
    """
    p = logp.exp()  # [N, V]
    return Dist(logp, p, token_logprob(logp, token_ids), -(p * logp).sum(-1), logp.argmax(-1))


def with_top_ids(d: Dist) -> Dist:
    """``d`` with its top-k compatibility ids: for the student, whose ids every teacher config compares with."""
    return d._replace(top_ids=top_k_ids(d.logp, COMPAT_K))


def distribution(logits: Tensor, token_ids: Tensor, temperature: float = 1.0) -> Dist:
    """``dist`` of ``log_softmax(logits / temperature)``: one log-softmax per model and chunk."""
    return dist(log_probs(logits, temperature), token_ids)


def centred_advantage(student: Dist, f: Tensor, token_ids: Tensor, *, centering: int | None) -> Tensor:
    """``f(y_t) − E_p[f]``, the centring expectation under the student p, in a cancellation-free form.

    ``centering=None`` takes E_p over the full vocabulary; ``centering=k`` over the student's top-k plus
    the sampled token, with the weights p_v *not* renormalised (the published OPD² code, k = 1024).
    Written as ``Σ_{v ∈ S} p_v (f_y − f_v) + f_y · Σ_{v ∉ S} p_v`` (S the support, the y term is 0):
    the textbook ``f_y − Σ_v p_v f_v`` cancels to exactly 0 in float32 when p(y_t) rounds to 1, which
    flips the OPD² gate where the float64 value is positive.
    """
    tok = token_ids.long().unsqueeze(-1)  # [N, 1]
    f_y = f.gather(-1, tok)  # [N, 1]
    gap = f_y - f  # [N, V] f_y − f_v, exactly 0 at v = y
    if centering is None or centering >= f.shape[-1]:
        return (student.p * gap).sum(-1)  # [N]
    if centering < 1:
        raise ValueError(f"centering must be None or a positive top-k size, got {centering}")
    support = torch.zeros_like(gap, dtype=torch.bool)  # [N, V]
    support.scatter_(-1, student.logp.topk(centering, dim=-1).indices, True)
    support.scatter_(-1, tok, True)
    return (student.p * torch.where(support, gap, f_y.expand_as(gap))).sum(-1)  # [N]


def advantages(student: Dist, teacher: Dist, token_ids: Tensor, *, base: Dist | None, centering: int | None,
               exopd_lambda: float, ref_logprob: Tensor | None = None) -> dict[str, Tensor]:
    """The advantages every sampled-token method trains on, and the diagnosis measures (``[N]`` each).

    - ``r_opd`` = lp_t − lp_s and ``a_opd`` = r_opd − E_p[log q − log p] (= r_opd + KL(p‖q) with
      full centring);
    - ``r_delta`` = lp_t − lp_b, ``a_delta`` = r_delta − E_p[log q − log b], ``gate`` =
      1[a_delta · a_opd > 0] and ``a_d2`` = gate · a_delta (NaN without a base: never zeros);
    - ``a_ex`` = λ (lp_t − lp_ref) − (lp_s − lp_ref), ``lp_ref = ref_logprob`` (the reference model's
      log-prob of the token at the same temperature) or by default lp_s (the initial student: λ r_opd).

    Grad-agnostic: the trainer passes detached student log-probs (advantages carry no gradient).
    """
    out = sampled_rewards(student.lp, teacher.lp, None if base is None else base.lp, ref_logprob,
                          exopd_lambda=exopd_lambda)
    out["a_opd"] = centred_advantage(student, teacher.logp - student.logp, token_ids, centering=centering)
    if base is None:
        nan = torch.full_like(out["r_opd"], float("nan"))  # [N]
        out.update(a_delta=nan, gate=nan, a_d2=nan)
        return out
    a_delta = centred_advantage(student, teacher.logp - base.logp, token_ids, centering=centering)  # [N]
    joint = a_delta * out["a_opd"]  # [N]
    gate = (joint > 0).float().masked_fill(joint.isnan(), float("nan"))  # [N] OPD² joint conditioning; NaN stays
    out.update(a_delta=a_delta, gate=gate, a_d2=gate * a_delta)
    return out


def sampled_rewards(lp_s: Tensor, lp_t: Tensor, lp_b: Tensor | None, lp_ref: Tensor | None, *,
                    exopd_lambda: float) -> dict[str, Tensor]:
    """The advantages that need only sampled log-probs (of a token, or of a common span of text):

    ``r_opd`` = lp_t − lp_s, ``r_delta`` = lp_t − lp_b (NaN without a base), ``a_ex`` =
    λ (lp_t − lp_ref) − (lp_s − lp_ref), ``lp_ref`` by default lp_s (the initial student: λ r_opd).
    """
    r_opd = lp_t - lp_s  # [N]
    lp_ref = lp_s if lp_ref is None else lp_ref.float()  # [N]
    return {"r_opd": r_opd, "a_ex": exopd_lambda * (lp_t - lp_ref) - (lp_s - lp_ref),
            "r_delta": torch.full_like(r_opd, float("nan")) if lp_b is None else lp_t - lp_b}


def token_signals(student_logits: Tensor, teacher_logits: Tensor, token_ids: Tensor, *,
                  base_logits: Tensor | None = None, temperature: float, jsd_beta: float,
                  centering: int | None, exopd_lambda: float, ref_logprob: Tensor | None = None) -> dict[str, Tensor]:
    """Every per-token column of ``opsd_diag.schema`` for one chunk of logits (``[N]`` float32 each)."""
    base = None if base_logits is None else distribution(base_logits, token_ids, temperature)
    return signals_from(distribution(student_logits, token_ids, temperature),
                        distribution(teacher_logits, token_ids, temperature), token_ids, base=base,
                        jsd_beta=jsd_beta, centering=centering, exopd_lambda=exopd_lambda, ref_logprob=ref_logprob)


def signals_from(student: Dist, teacher: Dist, token_ids: Tensor, *, base: Dist | None, jsd_beta: float,
                 centering: int | None, exopd_lambda: float, ref_logprob: Tensor | None = None) -> dict[str, Tensor]:
    """The columns from precomputed distributions (the scorer reuses student and base per chunk).

    Keys are the columns of ``opsd_diag.schema.SIGNALS``; ``rank_t`` counts the tokens the teacher ranks strictly
    above the sampled one. The base-dependent columns are NaN without a base model.
    """
    diff = student.logp - teacher.logp  # [N, V] log p − log q, formed once (difference form: precise)
    out = advantages(student, teacher, token_ids, base=base, centering=centering, exopd_lambda=exopd_lambda,
                     ref_logprob=ref_logprob)
    nan = torch.full_like(student.lp, float("nan"))  # [N]
    out.update({
        "lp_s": student.lp, "lp_t": teacher.lp, "lp_b": nan if base is None else base.lp,
        "kl_rev": (student.p * diff).sum(-1),  # [N] KL(student || teacher)
        "kl_fwd": -(teacher.p * diff).sum(-1),  # [N] KL(teacher || student)
        "jsd": generalized_jsd(student.logp, teacher.logp, jsd_beta, student_p=student.p, teacher_p=teacher.p),
        "h_s": student.h, "h_t": teacher.h, "h_b": nan if base is None else base.h,
        "rank_t": (teacher.logp > teacher.lp.unsqueeze(-1)).sum(-1).float(),  # [N]
        "top1_agree": (student.top1 == teacher.top1).float(),  # [N]
        **topk_compat(student.logp, teacher.logp, teacher_p=teacher.p, student_ids=student.top_ids),
    })
    return _nan_where_nonfinite(out, {"student": student, "teacher": teacher, "base": base})


# The columns each model's distribution enters (docs/signals.md). A model whose logits at a position hold
# NaN or inf has a NaN entropy there (p log p is NaN for a NaN, +inf or -inf logit), and then every
# column it enters is NaN: comparisons would otherwise read 0 (rank_t = 0 claims the teacher's first
# choice, gate = 0 and top1_agree = 0 look like measurements), and a -inf logit would leave lp finite
# beside a NaN KL.
READS = {
    "student": ("lp_s", "r_opd", "kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta", "gate", "a_d2", "a_ex", "h_s",
                "top1_agree", "teachability", "topk_overlap"),
    "teacher": ("lp_t", "r_opd", "r_delta", "kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta", "gate", "a_d2", "a_ex",
                "h_t", "rank_t", "top1_agree", "teachability", "topk_overlap"),
    "base": ("lp_b", "r_delta", "a_delta", "gate", "a_d2", "h_b"),
}


def _nan_where_nonfinite(out: dict[str, Tensor], dists: dict[str, Dist | None]) -> dict[str, Tensor]:
    for role, d in dists.items():
        if d is not None:
            bad = d.h.isnan()  # [N] the position's logits were not all finite
            for key in READS[role]:
                out[key] = out[key].masked_fill(bad, float("nan"))
    return out


def topk(logp: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k most likely tokens per position, for display: (log-probs ``[N, k]``, ids ``[N, k]``)."""
    values, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)  # [N, k], [N, k]
    return values, ids


def policy_gradient_loss(student_token_logp: Tensor, advantage: Tensor) -> Tensor:
    """Per-token REINFORCE loss ``-(A * log p(y_t))`` with a stop-gradient on the advantage.

    The advantage is a reward, not a path for gradients: letting it carry grad (it contains lp_s)
    would add a second, unintended term to the update (docs/design.md, pitfall 10).
    """
    return -(advantage.detach() * student_token_logp)  # [N]


def masked_sum_and_count(per_token: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(float32 sum of ``per_token`` over ``mask``, int64 count of masked-in tokens).

    Returning raw sums lets the trainer divide by a *global* token count (summed over micro-batches
    and ranks). The sum stays graph-connected even for an empty mask, so every rank runs the same
    backward (a detached zero would leave parameters without grads and hang the all-reduce;
    docs/design.md, pitfall 9).
    Masked-out values never leak in, even NaN ones.
    """
    if per_token.shape != mask.shape:
        raise ValueError(f"per_token {tuple(per_token.shape)} and mask {tuple(mask.shape)} differ in shape")
    keep = mask.bool()  # [N]
    values = per_token.float()  # [N]
    total = torch.where(keep, values, torch.zeros_like(values)).sum()  # [] connected to per_token
    return total, keep.sum()


def uld(student_logp: Tensor, teacher_logp: Tensor) -> Tensor:
    """ULD distance ``Σ_i |p_(i) − q_(i)|``, p_(i) and q_(i) the i-th largest probabilities (``[N]``).

    The two vocabularies may differ in size: the shorter sorted vector is padded with zeros. It is
    the Wasserstein-1 distance between the two distributions under a cost that does not look at the
    token ids (Boizard et al., 2024, "Towards cross-tokenizer distillation: the Universal Logit
    Distillation loss"), so it needs no mapping between vocabularies; it is 0 iff the sorted
    probabilities agree, and at most 2. Differentiable w.r.t. both inputs.
    """
    p = student_logp.exp().sort(-1, descending=True).values  # [N, V_s]
    q = teacher_logp.exp().sort(-1, descending=True).values  # [N, V_t]
    width = max(p.shape[-1], q.shape[-1])
    p = torch.nn.functional.pad(p, (0, width - p.shape[-1]))  # [N, W]
    q = torch.nn.functional.pad(q, (0, width - q.shape[-1]))  # [N, W]
    return (p - q).abs().sum(-1)  # [N]
