"""Per-token training losses of every method, built only from ``opsd_diag.signals``.

Each loss is a pure function of one chunk of logits (``[N, V]``) and the sampled ids (``[N]``) and
returns the per-token loss ``[N]`` (graph-connected to the student logits) plus detached per-token
statistics for the metrics log. The caller sums with ``signals.masked_sum_and_count`` and divides by
the global token count, so nothing here averages.

Conventions, as in SIGNALS.md: p student, q teacher, b base, all at the scoring temperature tau.
Sampled-token methods (opd, opd2, exopd, opsd with loss opd) are REINFORCE with a stop-gradient on
the advantage (``signals.policy_gradient_loss``); jsd is the full-vocabulary generalised JSD with the
teacher detached; sft is the plain token NLL at temperature 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from opsd_diag.core import signals


@dataclass(frozen=True)
class LossSettings:
    method: str  # opd | jsd | opd2 | exopd | sft (opsd is already mapped to its loss)
    temperature: float = 1.0  # scoring temperature tau
    beta: float = 0.5  # JSD beta: 0 forward KL(teacher || student), 1 reverse KL(student || teacher)
    centering: int | None = None  # opd2 centring: None full vocabulary, k the student's top-k
    exopd_lambda: float = 1.25
    clip: float | None = None  # clip sampled-token advantages to [-clip, clip]

    @property
    def needs_teacher(self) -> bool:
        return self.method != "sft"

    @property
    def needs_base(self) -> bool:
        return self.method == "opd2"


def _common(student_logits: Tensor, teacher_logits: Tensor, token_ids: Tensor, tau: float):
    student_logp = signals.log_probs(student_logits, tau)  # [N, V] grad to the student
    teacher_logp = signals.log_probs(teacher_logits.detach(), tau)  # [N, V] the teacher is a target
    lp_s = signals.token_logprob(student_logp, token_ids)  # [N] grad
    lp_t = signals.token_logprob(teacher_logp, token_ids)  # [N]
    r_opd = lp_t - lp_s.detach()  # [N] OPD reward, log q(y) - log p(y)
    stats = {
        "r_opd": r_opd,
        "k1": -r_opd,  # [N] Schulman's k1 estimate of KL(student || teacher) from student samples
        "k3": torch.expm1(r_opd) - r_opd,  # [N] k3 estimate (unbiased, always >= 0)
        "h_s": signals.entropy(student_logp.detach()),  # [N]
        "h_t": signals.entropy(teacher_logp),  # [N]
    }
    return student_logp, teacher_logp, lp_s, lp_t, stats


def _pg(lp_s: Tensor, advantage: Tensor, clip: float | None, stats: dict) -> Tensor:
    if clip is not None:
        stats["clipped"] = (advantage.abs() > clip).float()  # [N]
        advantage = advantage.clamp(-clip, clip)  # [N]
    else:
        stats["clipped"] = torch.zeros_like(advantage)  # [N]
    stats["advantage"] = advantage.detach()
    return signals.policy_gradient_loss(lp_s, advantage)  # [N] -(A.detach() * log p(y))


def opd_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits=None, ref_logprob=None):
    """Sampled-token reverse-KL policy gradient, advantage r_opd = lp_T - lp_S."""
    _, _, lp_s, _, stats = _common(student_logits, teacher_logits, token_ids, s.temperature)
    return _pg(lp_s, stats["r_opd"], s.clip, stats), stats


def jsd_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits=None, ref_logprob=None):
    """Full-vocabulary generalised JSD_beta(student, teacher) per position."""
    student_logp, teacher_logp, _, _, stats = _common(student_logits, teacher_logits, token_ids, s.temperature)
    stats["clipped"] = torch.zeros_like(stats["r_opd"])
    return signals.generalized_jsd(student_logp, teacher_logp, s.beta), stats  # [N]


def opd2_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits, ref_logprob=None):
    """OPD²: a_d2 = gate * a_delta, both advantages centred under the (detached) student."""
    student_logp, teacher_logp, lp_s, lp_t, stats = _common(student_logits, teacher_logits, token_ids,
                                                            s.temperature)
    p = student_logp.detach()  # [N, V] the centring weights carry no gradient
    base_logp = signals.log_probs(base_logits.detach(), s.temperature)  # [N, V]
    lp_b = signals.token_logprob(base_logp, token_ids)  # [N]
    a_opd = stats["r_opd"] - signals.centered_expectation(p, teacher_logp - p, token_ids,
                                                          centering=s.centering)  # [N]
    a_delta = (lp_t - lp_b) - signals.centered_expectation(p, teacher_logp - base_logp, token_ids,
                                                           centering=s.centering)  # [N]
    gate = (a_delta * a_opd > 0).float()  # [N] joint conditioning: delta only where it agrees with OPD
    stats["gate"] = gate
    return _pg(lp_s, gate * a_delta, s.clip, stats), stats


def exopd_loss(student_logits, token_ids, s: LossSettings, teacher_logits, base_logits=None, ref_logprob=None):
    """ExOPD: a_ex = lambda (lp_T - lp_R) - (lp_S - lp_R); the reference is the initial student by default."""
    _, _, lp_s, lp_t, stats = _common(student_logits, teacher_logits, token_ids, s.temperature)
    lp_ref = lp_s.detach() if ref_logprob is None else ref_logprob.float()  # [N]
    a_ex = s.exopd_lambda * (lp_t - lp_ref) - (lp_s.detach() - lp_ref)  # [N]
    return _pg(lp_s, a_ex, s.clip, stats), stats


def sft_loss(student_logits, token_ids, s: LossSettings, teacher_logits=None, base_logits=None,
             ref_logprob=None):
    """Token NLL of the reference response at temperature 1 (the baseline to beat)."""
    student_logp = signals.log_probs(student_logits, 1.0)  # [N, V]
    nll = -signals.token_logprob(student_logp, token_ids)  # [N]
    return nll, {"h_s": signals.entropy(student_logp.detach()), "nll": nll.detach()}


LOSSES = {"opd": opd_loss, "jsd": jsd_loss, "opd2": opd2_loss, "exopd": exopd_loss, "sft": sft_loss}


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
