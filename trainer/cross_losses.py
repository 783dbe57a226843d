"""Training losses against a teacher with another tokenizer, span by span (docs/signals.md, docs/training.md).

Built only from ``opsd_diag.core.span_signals`` (the diagnosis' span maths):

- sampled-span methods (``opd``: r_opd, ``exopd``: a_ex): the span's advantage A_j, a stop-gradient
  function of the sampled-span log-probs, is put on each of the span's student tokens, so the
  per-token REINFORCE terms of a span add up to −A_j · lp_s(j): the policy gradient of the span as
  one action, since lp_s(j) is the sum of its token log-probs;
- ``uld``: the ULD distance between the student's and the teacher's (detached) distributions at each
  span's first student position, 0 on the span's other tokens.

Per-token losses ``[N]`` are summed by the caller and divided by the global token count, as every loss.
"""

from __future__ import annotations

import torch
from torch import Tensor

from opsd_diag.core import signals
from opsd_diag.core import span_signals as spans_maths

SPAN_ADVANTAGE = {"opd": "r_opd", "exopd": "a_ex"}  # the span_signals column each sampled-span method trains on
METHODS = (*SPAN_ADVANTAGE, "uld")


def span_token_advantages(student_lp: Tensor, student_span: Tensor, teacher_lp: Tensor, teacher_span: Tensor,
                          n_spans: int, *, method: str, exopd_lambda: float, clip: float | None,
                          base_lp: Tensor | None = None, base_span: Tensor | None = None, ref: str = "student",
                          ref_lp: Tensor | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """(the method's span advantage on every student token ``[N_s]``, per-span statistics ``[S]``).

    Inputs are detached token log-probs of the sampled ids (student and ``ref_lp`` on the student's
    tokens, teacher on its own, base on its family's), each with its tokens' span index.
    """
    if method not in SPAN_ADVANTAGE:
        raise ValueError(f"no span advantage for method {method!r}")
    adv = spans_maths.span_signals(student_lp.detach(), student_span, teacher_lp.detach(), teacher_span, n_spans,
                                   base_lp=None if base_lp is None else base_lp.detach(), base_span=base_span,
                                   ref=ref, ref_lp=None if ref_lp is None else ref_lp.detach(),
                                   exopd_lambda=exopd_lambda)
    span_adv = adv[SPAN_ADVANTAGE[method]]  # [S]
    stats = {"r_opd": adv["r_opd"], "k1": -adv["r_opd"], "k3": torch.expm1(adv["r_opd"]) - adv["r_opd"]}
    if clip is not None:
        stats["clipped"] = (span_adv.abs() > clip).float()  # [S]
        span_adv = span_adv.clamp(-clip, clip)
    else:
        stats["clipped"] = torch.zeros_like(span_adv)
    return spans_maths.spread(span_adv, student_span), stats  # [N_s], {[S]}


def sampled_span_loss(student_token_logp: Tensor, token_advantage: Tensor) -> Tensor:
    """Per-token ``−A_span · log p(y_t)`` (stop-gradient on the advantage), ``[N]``."""
    return signals.policy_gradient_loss(student_token_logp, token_advantage)


def uld_loss(student_logp: Tensor, teacher_logp: Tensor) -> Tensor:
    """ULD distance ``[n]`` at span starts, with gradient to the student only (the teacher is a target)."""
    return signals.uld(student_logp, teacher_logp.detach())
