"""Where the training signal is placed: which generated tokens a step's loss keeps (``training.token_mask``).

Pure functions of per-token scores. Every rule is applied within each rollout (a completion), so the kept
set does not depend on how rollouts are cut into micro-batches, chunks or processes:

- ``all``: every token (the default, what the trainer did before masks existed);
- ``opd2_gate``: tokens where the OPD² joint condition holds (``gate = 1[a_delta * a_opd > 0]``,
  ``core.signals.advantages``; it needs a base model);
- ``entropy``: tokens whose student-entropy quantile within the rollout lies in ``(lo, hi]``, the
  quantile of the token of ascending rank r (ties by position) among L being ``(r + 0.5) / L``;
- ``advantage``: the ``ceil(x * L)`` tokens of largest |signal| in the rollout, the signal being the
  method's advantage for sampled-token methods (opd, opd2, exopd, opsd with loss opd) and the
  per-token loss (the divergence) for full-distribution ones (jsd, uld);
- ``confident_disagreement``: tokens where the teacher's top-1 probability is at least ``c`` and its
  top-1 token is not the sampled one;
- ``position``: completion positions ``start <= t < end``.
``rollouts`` further keeps only the tokens of verified-correct (``correct``) or incorrect (``incorrect``)
rollouts; a rollout whose outcome is unknown is in neither. ``surprising`` keeps the rollouts of largest mean
surprisal (minus the mean of the sampler's log-probs of their ids, ``engine.sampling.Completion.logprobs``), taken
in that order (ties by position) while their tokens together stay within ``rollouts_share`` of the sampled tokens;
a rollout that would pass the budget is skipped and the next one tried. It ranks the rollouts of one micro-batch
(a step often samples one rollout per prompt), so unlike every other rule its kept set depends on the micro-batch
size; it is known before any model runs, so a step never runs the rollouts it drops. A token whose score is not
finite is never kept by a scored rule.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from opsd_diag.config.settings import MaskSettings
from opsd_diag.core import signals

KINDS = ("all", "opd2_gate", "entropy", "advantage", "confident_disagreement", "position")


ALL = MaskSettings(kind="all", entropy_quantiles=(0.0, 1.0), advantage_top=1.0, teacher_confidence=0.0,
                   positions=(0, None), rollouts="all", rollouts_share=1.0)


def token_scores(student_logits: Tensor, teacher_logits: Tensor | None, base_logits: Tensor | None,
                 token_ids: Tensor, signal: Tensor, *, temperature: float, centering: int | None) -> dict[str, Tensor]:
    """Detached per-token scores ``[N]`` of one chunk: student entropy, |signal|, the OPD² gate (NaN without a
    base), the teacher's top-1 probability and whether its top-1 differs from the sampled token."""
    with torch.no_grad():
        student = signals.distribution(student_logits.detach().float(), token_ids, temperature)
        out = {"h_s": student.h, "signal": signal.detach().float().abs()}
        if teacher_logits is None:
            return out
        teacher = signals.distribution(teacher_logits.detach().float(), token_ids, temperature)
        base = None if base_logits is None else signals.distribution(base_logits.detach().float(), token_ids,
                                                                     temperature)
        adv = signals.advantages(student, teacher, token_ids, base=base, centering=centering, exopd_lambda=1.0)
        out.update(gate=adv["gate"], teacher_top1_p=teacher.logp.max(-1).values.exp(),
                   disagree=(teacher.top1 != token_ids).float())
        return out


def _ranks(values: Tensor) -> Tensor:
    """Ascending rank of each value within one rollout (ties by position), ``[L]`` int64."""
    order = torch.sort(values, stable=True).indices  # [L]
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(values.numel(), device=values.device)
    return ranks


def _per_rollout(values: Tensor, lengths: list[int], rule) -> Tensor:
    out = [rule(v) if v.numel() else v.bool() for v in torch.split(values, lengths)]
    return torch.cat(out) if out else values.bool()


def surprising_rollouts(logprobs: list, share: float) -> list[bool]:
    """Per rollout, whether ``rollouts: surprising`` keeps it (``logprobs``: the sampler's, per rollout of the
    micro-batch). A rollout with no tokens is never kept."""
    budget = share * sum(len(lp) for lp in logprobs)
    mean = {r: -float(sum(lp)) / len(lp) for r, lp in enumerate(logprobs) if len(lp)}
    kept, used = [False] * len(logprobs), 0
    for r in sorted(mean, key=lambda r: -mean[r]):  # stable: ties by position
        if used + len(logprobs[r]) <= budget:
            kept[r], used = True, used + len(logprobs[r])
    return kept


def keep(m: MaskSettings, scores: dict[str, Tensor] | None, lengths: list[int],
         correct: list[bool | None] | None = None, logprobs: list | None = None) -> Tensor:
    """The kept tokens ``[N]`` bool of rollouts of ``lengths`` (concatenated), ``scores`` from
    ``token_scores`` (concatenated over chunks; None when ``m`` needs none); ``correct`` and ``logprobs`` (the
    sampler's) per rollout, where ``m.rollouts`` reads them."""
    n = sum(lengths)
    if m.kind == "all" or m.kind == "position":
        device = "cpu" if scores is None else next(iter(scores.values())).device
        pos = torch.cat([torch.arange(L, device=device) for L in lengths]) if lengths else torch.zeros(0)
        lo, hi = m.positions if m.kind == "position" else (0, None)
        kept = (pos >= lo) & (pos < (hi if hi is not None else n + 1))
    elif m.kind == "opd2_gate":
        kept = scores["gate"] == 1
    elif m.kind == "confident_disagreement":
        kept = (scores["teacher_top1_p"] >= m.teacher_confidence) & (scores["disagree"] == 1)
    else:
        key = "h_s" if m.kind == "entropy" else "signal"
        values = scores[key].double()
        finite = torch.isfinite(values)
        values = torch.where(finite, values, torch.full_like(values, -math.inf))  # never among the top
        if m.kind == "entropy":
            lo, hi = m.entropy_quantiles
            kept = _per_rollout(values, lengths, lambda v: ((_ranks(v) + 0.5) / v.numel() > lo)
                                & ((_ranks(v) + 0.5) / v.numel() <= hi))
        else:
            kept = _per_rollout(values, lengths, lambda v: _ranks(v) >= v.numel() - math.ceil(m.advantage_top
                                                                                              * v.numel()))
        kept = kept & finite
    if m.rollouts == "surprising":
        if logprobs is None or any(lp is None for lp in logprobs):
            raise ValueError("token_mask rollouts=surprising needs the sampler's log-probs of every rollout")
        row = torch.tensor(surprising_rollouts(logprobs, m.rollouts_share), device=kept.device)  # [R]
        kept = kept & torch.repeat_interleave(row, torch.tensor(lengths, device=kept.device))
    elif m.rollouts != "all":
        if correct is None:
            raise ValueError(f"token_mask rollouts={m.rollouts} needs each rollout's outcome")
        want = m.rollouts == "correct"
        row = torch.tensor([c is not None and bool(c) == want for c in correct], device=kept.device)  # [R]
        kept = kept & torch.repeat_interleave(row, torch.tensor(lengths, device=kept.device))
    return kept.bool()


def shares(kept: Tensor, signal: Tensor) -> tuple[float, float]:
    """(share of the tokens kept, share of the summed |signal| on them); NaN signals count as 0."""
    mag = torch.nan_to_num(signal.double().abs(), nan=0.0)  # [N]
    total = float(mag.sum())
    n = kept.numel()
    return (float(kept.sum()) / n if n else float("nan"),
            float(mag[kept.bool()].sum()) / total if total > 0 else float("nan"))
