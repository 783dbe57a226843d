"""One micro-batch against a teacher with another tokenizer: align, score both sides, span losses, backward.

Each completion is re-tokenised for the teacher (``opsd_diag.io.retokenize``, the diagnosis' alignment and
checks); the tokens after a row's cut get a zero loss, and a row with nothing aligned trains nothing
(counted in ``left_out``). The
teacher, the base and the initial student score under no_grad; the student's detached token
log-probs give the span advantages before its LM head runs with gradient, chunk by chunk, through
``opsd_diag.engine.train_step.backward_by_chunks`` (the same normalisation and one decoder backward as every loss).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor

from opsd_diag.core import signals
from opsd_diag.core import span_signals as spans_maths
from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.io.retokenize import Retokenized, retokenize
from opsd_diag.config.settings import LossSettings
from trainer import cross_losses
from opsd_diag.engine.train_step import Roles
from opsd_diag.engine.train_step import MicroBatch
from opsd_diag.engine.step_sums import StepSums
from opsd_diag.engine.train_step import _checked, backward_by_chunks


@dataclass(frozen=True)
class CrossPartner:
    """What aligning with the teacher needs: both tokenizers, the student's stop ids, the teacher's EOS (made by
    ``trainer.setup`` from ``opsd_diag.engine.setup.plan_cross``, the diagnosis' one planner)."""
    student_tok: object
    teacher_tok: object
    stop_ids: tuple[int, ...]
    base_side: str | None  # the base scores on the "student"'s or the "teacher"'s tokens; None: no base


def _token_lp(model, hidden: Tensor, ids: Tensor, tau: float, chunk: int) -> Tensor:
    """Detached log-prob of each sampled id ``[N]``, one LM-head chunk at a time."""
    out = []
    for lo in range(0, hidden.shape[0], chunk):
        logp = signals.log_probs(lm_logits(model, hidden[lo:lo + chunk].detach()), tau)  # [n, V]
        out.append(signals.token_logprob(logp, ids[lo:lo + chunk].to(logp.device)))
    return torch.cat(out) if out else hidden.new_zeros(0)


@dataclass
class _Aligned:
    kept: list[int]  # rows that round-trip, wholly or up to a cut
    mask: Tensor  # [N] bool: the student token is aligned (in a kept row, before its cut)
    s_span: Tensor  # [N_kept] span of each kept student token
    t_span: Tensor  # [N_t]
    t_comps: list[list[int]]
    n_spans: int
    s_comps: list[list[int]]  # the kept rows' student tokens, up to their cut


def align(mb: MicroBatch, cross: CrossPartner) -> _Aligned:
    results = [retokenize(c, cross.student_tok, cross.teacher_tok, list(cross.stop_ids), cross.teacher_tok.eos_token_id)
               for c in mb.completions]
    kept = [i for i, r in enumerate(results) if isinstance(r, Retokenized) and len(r.spans)]
    mask, s_idx, t_idx, base = [], [], [], 0
    for i, (c, r) in enumerate(zip(mb.completions, results)):
        n_kept = r.n_student if i in kept else 0  # a row cut short trains up to its cut
        mask += [True] * n_kept + [False] * (len(c) - n_kept)
        if i in kept:
            s_idx += [base + j for j, (lo, hi) in enumerate(r.spans.student) for _ in range(lo, hi)]
            t_idx += [base + j for j, (lo, hi) in enumerate(r.spans.teacher) for _ in range(lo, hi)]
            base += len(r.spans)
    return _Aligned(kept, torch.tensor(mask, dtype=torch.bool), torch.tensor(s_idx, dtype=torch.long),
                    torch.tensor(t_idx, dtype=torch.long), [results[i].teacher_ids for i in kept], base,
                    [mb.completions[i][:results[i].n_student] for i in kept])


def cross_micro_batch_backward(hidden_model, roles: Roles, mb: MicroBatch, s: LossSettings, *, pad_id: int,
                               chunk_size: int, scale: float, ref: str | None = None, autocast=contextlib.nullcontext,
                               sums: StepSums | None = None, cross: CrossPartner) -> StepSums:
    """``opsd_diag.engine.train_step.micro_batch_backward`` for a teacher with another tokenizer (methods opd, exopd, uld)."""
    sums = sums or StepSums()
    n = mb.n_tokens
    h_s = _checked(hidden_model(mb.student_prompts, mb.completions, pad_id), n, "student")  # [N, H] grad
    al = align(mb, cross)
    sums.add_stats({"left_out": torch.tensor([0.0 if i in al.kept else 1.0 for i in range(len(mb.completions))])})
    if not al.kept:
        return backward_by_chunks(roles, mb, h_s, chunk_size, scale, autocast, sums, _zero_loss)
    device = h_s.device
    s_comps = al.s_comps
    s_ids = torch.tensor([t for c in mb.completions for t in c], dtype=torch.long)  # [N]
    t_ids = torch.tensor([t for c in al.t_comps for t in c], dtype=torch.long)  # [N_t]
    mask = al.mask.to(device)
    with torch.no_grad(), autocast():
        with roles.teacher_model() as teacher:
            h_t = completion_hidden(teacher, [mb.teacher_prompts[i] for i in al.kept], al.t_comps,
                                    cross.teacher_tok.pad_token_id)  # [N_t, H]
            lp_t = _token_lp(teacher, h_t, t_ids, s.temperature, chunk_size)  # [N_t]
        lp_s = _token_lp(roles.student, h_s, s_ids, s.temperature, chunk_size)[mask]  # [N_kept] detached
        extra = {}
        if ref == "base":
            on_student = cross.base_side == "student"
            b_comps, b_ids, b_span, b_pad = ((s_comps, s_ids[al.mask], al.s_span, pad_id) if on_student
                                             else (al.t_comps, t_ids, al.t_span, cross.teacher_tok.pad_token_id))
            h_b = completion_hidden(roles.base, [mb.base_prompts[i] for i in al.kept], b_comps, b_pad)
            extra = {"base_lp": _token_lp(roles.base, h_b, b_ids, s.temperature, chunk_size),
                     "base_span": b_span.to(device), "ref": "base"}
        elif ref == "student":
            with roles.initial_model() as initial:
                h_r = completion_hidden(initial, [mb.student_prompts[i] for i in al.kept], s_comps, pad_id)
                extra = {"ref_lp": _token_lp(initial, h_r, s_ids[al.mask], s.temperature, chunk_size)}
    s_span, t_span = al.s_span.to(device), al.t_span.to(device)
    adv_kept, span_stats = cross_losses.span_token_advantages(  # uld logs the span r_opd too, as every method
        lp_s, s_span, lp_t, t_span, al.n_spans, method="opd" if s.method == "uld" else s.method,
        exopd_lambda=s.exopd_lambda, clip=s.clip, **extra)
    sums.add_stats(span_stats if s.method != "uld" else {k: span_stats[k] for k in ("r_opd", "k1", "k3")})
    if s.method == "uld":
        first_s = mask.nonzero().squeeze(-1)[spans_maths.first_positions(s_span, al.n_spans)]  # [S] in [0, N)
        first_t = spans_maths.first_positions(t_span, al.n_spans)  # [S] teacher position of each span start

        def loss_of_chunk(logits, ids, sl):
            local = ((first_s >= sl.start) & (first_s < sl.stop)).nonzero().squeeze(-1)  # spans starting here
            student_logp = signals.log_probs(logits, s.temperature)  # [n, V_s] grad
            with torch.no_grad(), roles.teacher_model() as teacher:
                teacher_logp = signals.log_probs(lm_logits(teacher, h_t[first_t[local]]), s.temperature)  # [k, V_t]
            values = cross_losses.uld_loss(student_logp[first_s[local] - sl.start], teacher_logp)  # [k]
            per_token = torch.zeros(ids.numel(), device=device).index_add(0, first_s[local] - sl.start, values)
            return _finish(per_token, student_logp, {"uld": values.detach()})
        return backward_by_chunks(roles, mb, h_s, chunk_size, scale, autocast, sums, loss_of_chunk)
    advantage = torch.zeros(n, device=device).masked_scatter(mask, adv_kept)  # [N] 0 on rows left out

    def loss_of_chunk(logits, ids, sl):
        student_logp = signals.log_probs(logits, s.temperature)  # [n, V_s] grad
        lp = signals.token_logprob(student_logp, ids)  # [n] grad
        return _finish(cross_losses.sampled_span_loss(lp, advantage[sl]), student_logp, {})
    return backward_by_chunks(roles, mb, h_s, chunk_size, scale, autocast, sums, loss_of_chunk)


def _finish(per_token: Tensor, student_logp: Tensor, stats: dict) -> tuple[Tensor, dict]:
    total, _ = signals.masked_sum_and_count(per_token, torch.ones_like(per_token, dtype=torch.bool))
    h = signals.entropy(student_logp.detach())  # [n]
    return total, {**stats, "h_s": h, "nonfinite": {"student": ~torch.isfinite(h)}}


def _zero_loss(logits, ids, sl):
    return _finish(logits.sum(-1) * 0.0, signals.log_probs(logits), {})
