"""One micro-batch: score the rollouts, compute the method's loss chunk by chunk, and backpropagate.

Shared by the trainer and the diagnosis' lookahead (``engine.lookahead``), with the models a step holds
(``Roles``): the trainable student; the teacher, an external model (frozen) or for a self-teacher the
``frozen`` initial student (with LoRA: the adapter switched off), an ``ema`` copy or the ``live`` student
under no_grad; the frozen base (opd2, ExOPD with a base reference); the frozen initial student, kept only
when something needs it. Loading the trainable copy is the trainer's (``trainer.roles``).

Normalisation (docs/design.md, pitfall 9): the loss of a step is sum over every generated token of every
micro-batch on every process, divided by that global count ``N``. Each micro-batch contributes
``sum / N`` and, since DDP averages gradients over ``world`` processes, is scaled by ``world / N``.

Memory: the student's LM head runs chunk by chunk on detached hidden states; each chunk's gradient
w.r.t. its hidden states and the head's weights is taken at once, so at most one chunk of
``[chunk, vocab]`` logits lives at a time. One final ``backward`` carries the collected gradients
through the decoder (and into the head's weights, tied or not) so DDP sees one ordinary backward.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from opsd_diag.core import signals, token_mask
from opsd_diag.core.losses import token_loss
from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.engine.step_sums import StepSums
from opsd_diag.errors import OpsdError
from opsd_diag.config.settings import LossSettings


def frozen_copy(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).eval().requires_grad_(False)


class CompletionHidden(nn.Module):
    """The student's forward as one module, so DDP syncs it: completion hidden states ``[N, H]`` with grad.

    The LM head is applied outside, chunk by chunk (no ``[batch, length, vocab]`` tensor), by the caller.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> torch.Tensor:
        return completion_hidden(self.model, prompts, completions, pad_id)  # [N, H]


@dataclass
class Roles:
    student: nn.Module  # the HF causal LM that trains (LoRA layers injected when peft is used)
    peft_model: nn.Module | None
    teacher_mode: str  # external | frozen | ema | live | none
    teacher: nn.Module | None  # external teacher or the EMA copy
    base: nn.Module | None
    initial: nn.Module | None  # frozen initial student (None with LoRA: adapter off instead)
    cross: object = None  # trainer.cross_step.CrossPartner: the teacher has another tokenizer

    @contextlib.contextmanager
    def teacher_model(self):
        """The model that scores the teacher view, for the duration of a no_grad block."""
        if self.teacher_mode in ("external", "ema"):
            yield self.teacher
        elif self.teacher_mode == "live":
            yield self.student
        elif self.teacher_mode == "frozen":
            with self.initial_model() as m:
                yield m
        else:
            raise RuntimeError("this method has no teacher")

    @contextlib.contextmanager
    def initial_model(self):
        """The initial student: a frozen copy, or the LoRA student with its adapter switched off."""
        if self.peft_model is not None:
            with self.peft_model.disable_adapter():
                yield self.student
        elif self.initial is not None:
            yield self.initial
        else:
            raise RuntimeError("the initial student was not kept for this run")

    @property
    def has_initial(self) -> bool:
        return self.peft_model is not None or self.initial is not None

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.student.parameters() if p.requires_grad]

    @torch.no_grad()
    def ema_update(self, decay: float) -> None:
        """teacher <- decay * teacher + (1 - decay) * student, over the trained parameters."""
        if self.teacher_mode != "ema":
            return
        ema = dict(self.teacher.named_parameters())
        for name, p in self.student.named_parameters():
            if p.requires_grad:
                src = p.detach()
                src = src.full_tensor() if hasattr(src, "full_tensor") else src  # FSDP shard: gather (collective)
                ema[name].lerp_(src.to(ema[name].dtype), 1.0 - decay)


@dataclass
class MicroBatch:
    index: int  # global micro-batch index j within its step
    problem_idx: list[int]  # per row
    student_prompts: list[list[int]]
    teacher_prompts: list[list[int]] | None
    base_prompts: list[list[int]] | None
    completions: list[list[int]]
    finished: list[bool]
    correct: list[bool | None] | None = None  # per row: verified correct (None: unknown); only where a lever needs it
    sampler_logprobs: list | None = None  # per row: the sampler's log-prob of each id (Completion.logprobs)

    @property
    def n_tokens(self) -> int:
        return sum(len(c) for c in self.completions)


def logprobs_of(rows) -> list | None:
    """A rollouts table's ``sampler_logprobs`` per row, for ``MicroBatch.sampler_logprobs`` (None without the
    column; a row's None where it has none: vLLM sampling, a rollouts file without them)."""
    if "sampler_logprobs" not in rows:
        return None
    return [None if x is None or (isinstance(x, float) and x != x) else [float(v) for v in x]
            for x in rows["sampler_logprobs"]]


LOGITS_BUDGET = 2 ** 24  # elements of one [chunk, vocab] float32 tensor (64 MiB) when chunk_size is auto


def auto_chunk_size(vocab_size: int) -> int:
    """Positions per LM-head chunk: a fixed memory budget per logits tensor, at least 128 positions.

    A 152k vocabulary gets 128-position chunks; a toy vocabulary runs a whole micro-batch at once
    (small chunks only add per-chunk overhead there).
    """
    return max(128, LOGITS_BUDGET // max(1, vocab_size))


def _checked(h: Tensor, n: int, role: str) -> Tensor:
    if h.shape[0] != n:  # pitfall 6: a missing position is an error, never a zero log-prob
        raise OpsdError(f"the {role} view produced {h.shape[0]} scored positions instead of {n}")
    return h


@torch.no_grad()
def partner_hidden(roles: Roles, mb: MicroBatch, s: LossSettings, pad_id: int, ref: str | None, base: bool = False):
    """Hidden states of teacher, base (also when ``base``: a mask reads it) and the ExOPD reference at the
    completion positions."""
    n = mb.n_tokens
    h_t = h_b = h_r = None
    if s.needs_teacher:
        with roles.teacher_model() as teacher:
            h_t = (teacher, _checked(completion_hidden(teacher, mb.teacher_prompts, mb.completions, pad_id), n,
                                     "teacher"))
    if s.needs_base or ref == "base" or base:
        h_b = (roles.base, _checked(completion_hidden(roles.base, mb.base_prompts, mb.completions, pad_id), n,
                                    "base"))
    if ref == "student":
        with roles.initial_model() as initial:
            h_r = (initial, _checked(completion_hidden(initial, mb.student_prompts, mb.completions, pad_id), n,
                                     "reference"))
    return h_t, h_b, h_r


def _partner_logits(pair, sl: slice, ctx) -> Tensor | None:
    if pair is None:
        return None
    model, h = pair
    with torch.no_grad(), ctx():
        return lm_logits(model, h[sl])  # [n, V]


def chunk_loss(student_logits: Tensor, ids: Tensor, sl: slice, s: LossSettings, partners: tuple, ref: str | None,
               autocast) -> tuple[Tensor, dict]:
    """(summed loss, per-token statistics) of one chunk: the partners' logits at ``sl`` and the method's loss.

    ``partners`` is ``partner_hidden``'s (teacher, base, reference) triple; ``ref`` names the ExOPD
    reference (``student``: the initial student, ``base``) or None. Shared by the one-process/DDP
    step below and the sharded (FSDP) step of ``trainer.sharded``. Every token of the chunk is summed (a
    token mask selects the tokens before: ``micro_batch_backward``).
    """
    h_t, h_b, h_r = partners
    teacher_logits = _partner_logits(h_t, sl, autocast)  # [n, V] or None
    base_logits = _partner_logits(h_b, sl, autocast)  # [n, V] or None
    ref_lp = None
    if ref is not None:  # ExOPD's reference: the initial student, or the base
        ref_logits = base_logits if ref == "base" else _partner_logits(h_r, sl, autocast)  # [n, V]
        ref_lp = signals.token_logprob(signals.log_probs(ref_logits, s.temperature), ids)  # [n]
    loss_base = base_logits if s.needs_base or ref == "base" else None  # a mask's base does not enter the loss
    per_token, stats = token_loss(student_logits, ids, s, teacher_logits=teacher_logits, base_logits=loss_base,
                                  ref_logprob=ref_lp)
    keep = torch.ones_like(ids, dtype=torch.bool)  # [n]
    total, _ = signals.masked_sum_and_count(per_token, keep)
    stats["kept"] = keep.float()
    stats["_signal"] = stats.get("advantage", per_token).detach()  # what the advantage mask ranks
    stats["_partners"] = (teacher_logits, base_logits)  # what a scored mask reads
    # where a model's logits were NaN or inf (its entropy is NaN exactly then): read only on a non-finite loss
    flags = {"student": ~torch.isfinite(stats["h_s"])}
    if teacher_logits is not None:
        flags["teacher"] = ~torch.isfinite(stats["h_t"])
    if base_logits is not None:
        flags["base"] = ~torch.isfinite(base_logits).all(-1)
    if ref_lp is not None:
        flags["reference"] = ~torch.isfinite(ref_lp)
    stats["nonfinite"] = flags
    return total, stats


def micro_batch_backward(hidden_model, roles: Roles, mb: MicroBatch, s: LossSettings, *, pad_id: int,
                         chunk_size: int, scale: float, ref: str | None = None, autocast=contextlib.nullcontext,
                         sums: StepSums | None = None, mask: token_mask.MaskSettings | None = None) -> StepSums:
    """Forward, loss and backward of one micro-batch; gradients accumulate in the student's ``.grad``.

    ``hidden_model`` is the (possibly DDP-wrapped) ``CompletionHidden``; ``scale`` is ``world / N_global``.
    ``ref`` names the ExOPD reference (``student``: the initial student, ``base``) or None. ``mask``: the
    tokens kept (``core.token_mask``; None: all); the step rescales to the kept count (``rescale_to_kept``).

    A masked step costs less than an all-token one where it can: a mask known before any model runs (rollouts,
    positions) drops the rollouts with no kept token and cuts each after its last kept one (a causal model's
    later positions change nothing before them); every mask then runs the LM heads, the loss and their
    backward on the kept tokens alone, so the per-token statistics are means over the kept tokens.
    """
    sums = sums or StepSums()
    if mb.correct is not None:
        sums.add_stats({"correct": torch.tensor([float(c) for c in mb.correct if c is not None])})
    masked = mask is not None and not mask.keeps_all
    run, kept = mb, None
    if masked and not mask.needs_scores:
        kept = token_mask.keep(mask, None, [len(c) for c in mb.completions], mb.correct, mb.sampler_logprobs)  # [N]
        sums.add_stats({"kept": kept.float()})
        run, kept = trimmed(mb, kept)
    h_s = _checked(hidden_model(run.student_prompts, run.completions, pad_id), run.n_tokens, "student")  # [n, H]
    partners = partner_hidden(roles, run, s, pad_id, ref, base=masked and mask.needs_base)
    if not masked:
        return backward_by_chunks(roles, mb, h_s, chunk_size, scale, autocast, sums,
                                  lambda logits, ids, sl: chunk_loss(logits, ids, sl, s, partners, ref, autocast))
    if mask.needs_scores:
        kept = kept_tokens(roles, run, h_s, s, partners, ref, chunk_size, autocast, mask)
        sums.add_stats({"kept": kept.float()})
    index = kept.nonzero().squeeze(1).to(h_s.device)  # [K] the kept tokens' flat positions in ``run``
    on_kept = tuple(None if p is None else (p[0], p[1].index_select(0, index)) for p in partners)

    def loss_of_chunk(logits, ids, sl):
        total, stats = chunk_loss(logits, ids, sl, s, on_kept, ref, autocast)
        stats.pop("kept")  # counted over every token above
        return total, stats
    return backward_by_chunks(roles, run, h_s, chunk_size, scale, autocast, sums, loss_of_chunk, index=index,
                              counted=mb)


def trimmed(mb: MicroBatch, kept: Tensor) -> tuple[MicroBatch, Tensor]:
    """(the rows of ``mb`` with a kept token, each cut after its last kept token; their kept flags).

    With nothing kept, the first non-empty row's first token, kept by none: the step still runs a forward and a
    (zero) backward, as every process of a DDP step must."""
    rows, flags = [], []
    for r, f in enumerate(torch.split(kept, [len(c) for c in mb.completions])):
        hit = f.nonzero()
        if hit.numel():
            end = int(hit[-1, 0]) + 1
            rows.append((r, end))
            flags.append(f[:end])
    if not rows:
        first = next((r for r, c in enumerate(mb.completions) if c), None)
        if first is None:
            return mb, kept
        rows, flags = [(first, 1)], [torch.zeros(1, dtype=torch.bool, device=kept.device)]

    def pick(xs):
        return None if xs is None else [xs[r] for r, _ in rows]
    sub = MicroBatch(mb.index, pick(mb.problem_idx), pick(mb.student_prompts), pick(mb.teacher_prompts),
                     pick(mb.base_prompts), [mb.completions[r][:end] for r, end in rows], pick(mb.finished),
                     pick(mb.correct), None if mb.sampler_logprobs is None else
                     [mb.sampler_logprobs[r][:end] for r, end in rows])
    return sub, torch.cat(flags)


@torch.no_grad()
def kept_tokens(roles: Roles, mb: MicroBatch, h_s: Tensor, s: LossSettings, partners: tuple, ref: str | None,
                chunk_size: int, autocast, mask: token_mask.MaskSettings) -> Tensor:
    """The micro-batch's kept tokens ``[N]`` bool of a scored mask: it first reads each token's scores without
    gradient, chunk by chunk: an entropy mask the student's head alone, the others the loss (``chunk_loss``)."""
    if mask.kind == "entropy":
        scores = {"h_s": student_entropy(roles, mb, h_s, s, chunk_size, autocast)}
    else:
        scores = token_scores(roles, mb, h_s, s, partners, ref, chunk_size, autocast)
    return token_mask.keep(mask, scores, [len(c) for c in mb.completions], mb.correct, mb.sampler_logprobs)


def _flat_ids(mb: MicroBatch) -> Tensor:
    return torch.tensor([t for c in mb.completions for t in c], dtype=torch.long)  # [N]


@torch.no_grad()
def student_entropy(roles: Roles, mb: MicroBatch, h_s: Tensor, s: LossSettings, chunk_size: int,
                    autocast=contextlib.nullcontext) -> Tensor:
    """The student's entropy at every token ``[N]`` (what an entropy mask ranks), chunk by chunk."""
    ids_all, parts = _flat_ids(mb), []
    for lo in range(0, mb.n_tokens, chunk_size):
        sl = slice(lo, min(mb.n_tokens, lo + chunk_size))
        with autocast():
            logits = lm_logits(roles.student, h_s[sl].detach())  # [n, V]
        parts.append(signals.distribution(logits.float(), ids_all[sl].to(h_s.device), s.temperature).h)
    return torch.cat(parts) if parts else torch.zeros(0, device=h_s.device)


@torch.no_grad()
def token_scores(roles: Roles, mb: MicroBatch, h_s: Tensor, s: LossSettings, partners: tuple, ref: str | None,
                 chunk_size: int, autocast=contextlib.nullcontext) -> dict[str, Tensor] | None:
    """``core.token_mask.token_scores`` of every token of the micro-batch, concatenated over chunks."""
    ids_all = _flat_ids(mb)
    parts = []
    for lo in range(0, mb.n_tokens, chunk_size):
        sl = slice(lo, min(mb.n_tokens, lo + chunk_size))
        ids = ids_all[sl].to(h_s.device)
        with autocast():
            logits = lm_logits(roles.student, h_s[sl].detach())  # [n, V]
        _, stats = chunk_loss(logits, ids, sl, s, partners, ref, autocast)
        parts.append(token_mask.token_scores(logits, *stats["_partners"], ids, stats["_signal"],
                                             temperature=s.temperature, centering=s.centering))
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]} if parts else None


def rescale_to_kept(params, kept_ratio: float | None) -> None:
    """Micro-batches were scaled by ``1 / N`` (every generated token of the step); a masked step's loss is
    normalised by its kept tokens instead: its gradients times ``N / N_kept`` (none kept: unchanged, zero)."""
    if kept_ratio is not None and 0.0 < kept_ratio < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(1.0 / kept_ratio)


def backward_by_chunks(roles: Roles, mb: MicroBatch, h_s: Tensor, chunk_size: int, scale: float, autocast,
                       sums: StepSums, loss_of_chunk, index: Tensor | None = None,
                       counted: MicroBatch | None = None) -> StepSums:
    """The student's LM head chunk by chunk on ``h_s`` ``[N, H]``, ``loss_of_chunk(logits, ids, slice)`` ->
    (summed loss, statistics), then one backward through the decoder. Shared by every loss path.

    ``index`` ``[K]``: only these flat positions of ``mb`` (a token mask's kept tokens; the slices then run over
    them); ``counted``: the micro-batch the step's token, row and finished counts are of (default ``mb``)."""
    token_ids_all = _flat_ids(mb)  # [N]
    if index is not None:
        token_ids_all = token_ids_all[index.cpu()]
        h_s = h_s.index_select(0, index)  # [K, H], still in the decoder's graph
    n = h_s.shape[0]
    # the student's LM head runs per chunk below; its weights get their gradient with the decoder's
    head_params = [p for p in roles.student.get_output_embeddings().parameters() if p.requires_grad]
    grad_h = torch.zeros_like(h_s, dtype=torch.float32)  # [N, H]
    grad_head = [torch.zeros_like(p) for p in head_params]
    device = h_s.device
    for lo in range(0, n, chunk_size):
        sl = slice(lo, min(n, lo + chunk_size))
        ids = token_ids_all[sl].to(device)  # [n]
        h_chunk = h_s[sl].detach().requires_grad_(True)  # [n, H] a leaf: this chunk's graph ends here
        with autocast():
            student_logits = lm_logits(roles.student, h_chunk)  # [n, V] float32
        total, stats = loss_of_chunk(student_logits, ids, sl)
        grads = torch.autograd.grad(total * scale, [h_chunk, *head_params])
        grad_h[sl] += grads[0].float()
        for acc, g in zip(grad_head, grads[1:]):
            acc += g
        sums.loss = sums.loss + total.detach().double()
        sums.add_stats(stats)
        sums.note(mb, lo if index is None else index[sl], stats)
    # One backward through the decoder; the head's weight gradient joins as a root so a tied
    # embedding/head weight gets its single, summed gradient (one DDP hook per parameter).
    torch.autograd.backward([h_s, *head_params], [grad_h.to(h_s.dtype), *grad_head])
    counted = counted or mb
    sums.tokens += counted.n_tokens  # every position of a completion is a generated token
    sums.rows += len(counted.completions)
    sums.finished += sum(counted.finished)
    return sums
