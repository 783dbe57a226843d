"""Signals of a teacher with another tokenizer, per common span of text (docs/signals.md).

A common span (``opsd_diag.core.align``) is a piece of the completion's text that the student and
the teacher each cover with whole tokens of their own. Both then give it a probability, the
product of their token probabilities inside it, conditioned on the same text before it: the
sampled-span log-probs ``lp_s``, ``lp_t`` (and ``lp_b`` of a base, on its own tokens) are sums of
token log-probs, and every sampled advantage is ``signals.sampled_rewards`` of them.

Signals that compare the two distributions id by id (KL, JSD, the centred advantages and the
OPD² gate, top-1 agreement, teachability and top-k overlap) have no meaning across two vocabularies
and are NaN (not available), never computed on mismatched ids. In their place: ``signals.uld``, the
Universal Logit Distillation distance between the sorted probability vectors at the span's first
position, where both models predict the start of the same text from the same text before it.
Entropies and ``rank_t`` are read at that position too, each within its own model's vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from opsd_diag.core import signals

# The per-token columns that compare two distributions id by id: NaN on span rows.
NOT_AVAILABLE = ("kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta", "gate", "a_d2", "top1_agree", "teachability",
                 "topk_overlap")


def span_sum(values: Tensor, span_index: Tensor, n_spans: int) -> Tensor:
    """``out[j] = Σ_{i : span_index[i] = j} values[i]``: the log-prob of span j from its token log-probs."""
    out = torch.zeros(n_spans, dtype=values.dtype, device=values.device)  # [S]
    return out.index_add(0, span_index.to(values.device).long(), values)  # [S] differentiable in values


def span_signals(student_lp: Tensor, student_span: Tensor, teacher_lp: Tensor, teacher_span: Tensor, n_spans: int,
                 *, base_lp: Tensor | None = None, base_span: Tensor | None = None, ref: str = "student",
                 ref_lp: Tensor | None = None, exopd_lambda: float) -> dict[str, Tensor]:
    """Sampled-span log-probs and advantages (``[S]`` each) from token log-probs of the sampled ids.

    ``student_lp`` ``[N_s]`` with ``student_span`` ``[N_s]`` (each token's span), likewise for the
    teacher (on its own re-tokenisation) and the base (on the tokens of its tokenizer, the student's
    or the teacher's). ``ref``: the ExOPD reference, the initial student (``student``: ``ref_lp``, its
    token log-probs on the student's tokens, or by default the student itself) or ``base``.
    """
    lp_s = span_sum(student_lp.float(), student_span, n_spans)  # [S]
    lp_t = span_sum(teacher_lp.float(), teacher_span, n_spans)  # [S]
    lp_b = None if base_lp is None else span_sum(base_lp.float(), base_span, n_spans)  # [S]
    if ref == "base":
        lp_ref = lp_b
    else:
        lp_ref = None if ref_lp is None else span_sum(ref_lp.float(), student_span, n_spans)  # [S]
    out = signals.sampled_rewards(lp_s, lp_t, lp_b, lp_ref, exopd_lambda=exopd_lambda)
    out.update(lp_s=lp_s, lp_t=lp_t, lp_b=torch.full_like(lp_s, float("nan")) if lp_b is None else lp_b)
    return out


def first_positions(span_index: Tensor, n_spans: int) -> Tensor:
    """The index of each span's first token (``[S]``; spans are contiguous and in order)."""
    idx = span_index.long()  # [N]
    starts = torch.ones_like(idx, dtype=torch.bool)  # [N]
    starts[1:] = idx[1:] != idx[:-1]
    first = starts.nonzero().squeeze(-1)  # [S]
    if first.numel() != n_spans or not torch.equal(idx[first], torch.arange(n_spans, device=idx.device)):
        raise ValueError("span indices must be contiguous, in order, and cover every span")
    return first


def spread(span_values: Tensor, span_index: Tensor) -> Tensor:
    """A per-span value on each of the span's tokens (``[N]``): the trainer's span advantage on every
    student token of the span, so the REINFORCE term is A_span · Σ_{tokens} log p = A_span · lp_s(span)."""
    return span_values[span_index.to(span_values.device).long()]  # [N]


def start_signals(student_logp: Tensor, teacher_logp: Tensor, teacher_ids: Tensor) -> dict[str, Tensor]:
    """At each span's first position (``[S, V_s]``, ``[S, V_t]``, the teacher's first sampled id ``[S]``):
    the entropies ``h_s``, ``h_t``, the teacher's rank of its own first token ``rank_t`` (within its own
    vocabulary) and ``uld``."""
    t_lp = signals.token_logprob(teacher_logp, teacher_ids)  # [S]
    return {"h_s": signals.entropy(student_logp), "h_t": signals.entropy(teacher_logp),
            "rank_t": (teacher_logp > t_lp.unsqueeze(-1)).sum(-1).float(), "uld": signals.uld(student_logp, teacher_logp)}


def span_rows(student_lp: Tensor, student_h: Tensor, student_span: Tensor, teacher_lp: Tensor, teacher_h: Tensor,
              teacher_span: Tensor, start: dict[str, Tensor], n_spans: int, *, base_lp: Tensor | None = None,
              base_h: Tensor | None = None, base_span: Tensor | None = None, ref: str = "student",
              exopd_lambda: float) -> dict[str, Tensor]:
    """Every column of ``opsd_diag.schema.SIGNALS`` plus ``uld`` for the spans of one row (``[S]`` each).

    ``*_h`` are each model's per-token entropies: a span where a model's logits were not all finite
    (NaN entropy at one of its tokens) gets NaN in every column that model enters
    (``signals.READS``), as on token rows. ``start`` is ``start_signals`` at the spans' first positions.
    """
    out = span_signals(student_lp, student_span, teacher_lp, teacher_span, n_spans, base_lp=base_lp,
                       base_span=base_span, ref=ref, exopd_lambda=exopd_lambda)
    nan = torch.full((n_spans,), float("nan"), device=out["lp_s"].device)  # [S]
    out.update({c: nan for c in NOT_AVAILABLE}, **start)
    out["h_b"] = nan if base_h is None else base_h[first_positions(base_span, n_spans)].float()
    bad = {"student": span_sum(student_h.isnan().float(), student_span, n_spans) > 0,
           "teacher": span_sum(teacher_h.isnan().float(), teacher_span, n_spans) > 0}
    if base_h is not None:
        bad["base"] = span_sum(base_h.isnan().float(), base_span, n_spans) > 0
    for role, mask in bad.items():
        for key in (*signals.READS[role], "uld") if role != "base" else signals.READS[role]:
            out[key] = out[key].masked_fill(mask, float("nan"))
    return out
