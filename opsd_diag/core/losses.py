"""Per-token training losses of every method, built only from ``opsd_diag.core.signals``.

Each loss is a pure function of one chunk of logits (``[N, V]``) and the sampled ids (``[N]``) and
returns the per-token loss ``[N]`` (graph-connected to the student logits) plus detached per-token
statistics for the metrics log. The caller sums with ``signals.masked_sum_and_count`` and divides by
the global token count, so nothing here averages.

Conventions, as in docs/signals.md: p student, q teacher, b base, all at the scoring temperature tau.
Sampled-token methods (opd, opd2, exopd, opsd with loss opd) are REINFORCE with a stop-gradient on
the advantage (``signals.policy_gradient_loss``); jsd is the full-vocabulary generalised JSD with the
teacher detached; sft is the plain token NLL at temperature 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from opsd_diag.core import signals
from opsd_diag.config.settings import LossSettings

# The advantage each sampled-token method trains on: a column of ``signals.advantages``, so the
# trained signal is exactly the diagnosed one.
ADVANTAGE = {"opd": "r_opd", "opd2": "a_d2", "exopd": "a_ex"}


def _common(student_logits: Tensor, teacher_logits: Tensor, token_ids: Tensor, tau: float):
    student_logp = signals.log_probs(student_logits, tau)  # [N, V] grad to the student
    teacher = signals.dist(signals.log_probs(teacher_logits.detach(), tau), token_ids)  # the teacher is a target
    student = signals.dist(student_logp.detach(), token_ids)  # detached: advantages carry no gradient
    r_opd = teacher.lp - student.lp  # [N] OPD reward, log q(y) - log p(y)
    stats = {
        "r_opd": r_opd,
        "k1": -r_opd,  # [N] Schulman's k1 estimate of KL(student || teacher) from student samples
        "k3": torch.expm1(r_opd) - r_opd,  # [N] k3 estimate (unbiased, always >= 0)
        "h_s": student.h,  # [N]
        "h_t": teacher.h,  # [N]
    }
    return student_logp, student, teacher, stats


def sampled_token_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits=None,
                       ref_logprob=None):
    """REINFORCE on the method's advantage (opd: r_opd, opd2: a_d2 = gate * a_delta, exopd: a_ex)."""
    student_logp, student, teacher, stats = _common(student_logits, teacher_logits, token_ids, s.temperature)
    base = None if base_logits is None else signals.distribution(base_logits.detach(), token_ids, s.temperature)
    adv = signals.advantages(student, teacher, token_ids, base=base, centering=s.centering,
                             exopd_lambda=s.exopd_lambda, ref_logprob=ref_logprob)
    advantage = adv[ADVANTAGE[s.method]]  # [N]
    if s.method == "opd2":
        stats["gate"] = adv["gate"]
    if s.clip is not None:
        stats["clipped"] = (advantage.abs() > s.clip).float()  # [N]
        advantage = advantage.clamp(-s.clip, s.clip)  # [N]
    else:
        stats["clipped"] = torch.zeros_like(advantage)  # [N]
    stats["advantage"] = advantage
    lp_s = signals.token_logprob(student_logp, token_ids)  # [N] with grad
    return signals.policy_gradient_loss(lp_s, advantage), stats  # [N] -(A.detach() * log p(y))


def jsd_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits=None, ref_logprob=None):
    """Full-vocabulary generalised JSD_beta(student, teacher) per position, the teacher detached."""
    student_logp, _, teacher, stats = _common(student_logits, teacher_logits, token_ids, s.temperature)
    stats["clipped"] = torch.zeros_like(stats["r_opd"])
    return signals.generalized_jsd(student_logp, teacher.logp, s.beta, teacher_p=teacher.p), stats  # [N]


def sft_loss(student_logits, token_ids, s: LossSettings, teacher_logits=None, base_logits=None,
             ref_logprob=None):
    """Token NLL of the reference response at temperature 1 (the baseline to beat)."""
    student_logp = signals.log_probs(student_logits, 1.0)  # [N, V]
    nll = -signals.token_logprob(student_logp, token_ids)  # [N]
    return nll, {"h_s": signals.entropy(student_logp.detach()), "nll": nll.detach()}


def uld_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits=None, ref_logprob=None):
    """ULD distance between the sorted probabilities of student and (detached) teacher at every position
    (``core.signals.uld``; against a teacher with another tokenizer, at span starts: trainer.cross_step)."""
    student_logp, _, teacher, stats = _common(student_logits, teacher_logits, token_ids, s.temperature)
    stats["clipped"] = torch.zeros_like(stats["r_opd"])
    per_token = signals.uld(student_logp, teacher.logp)  # [N]
    stats["uld"] = per_token.detach()
    return per_token, stats


LOSSES = {"opd": sampled_token_loss, "opd2": sampled_token_loss, "exopd": sampled_token_loss, "jsd": jsd_loss,
          "sft": sft_loss, "uld": uld_loss}


def token_loss(student_logits: Tensor, token_ids: Tensor, s: LossSettings, *, teacher_logits: Tensor | None = None,
               base_logits: Tensor | None = None, ref_logprob: Tensor | None = None) -> tuple[Tensor, dict]:
    """(per-token loss ``[N]``, detached per-token statistics) of method ``s.method``."""
    if s.method not in LOSSES:
        raise ValueError(f"unknown loss method {s.method!r}")
    if s.needs_teacher and teacher_logits is None:
        raise ValueError(f"method {s.method} needs teacher logits")
    if s.needs_base and base_logits is None:
        raise ValueError("method opd2 needs base logits")
    return LOSSES[s.method](student_logits, token_ids, s, teacher_logits, base_logits, ref_logprob)
