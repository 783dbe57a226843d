"""The models a training run holds: the trainable student and its frozen or moving partners.

- student: a fresh, trainable copy (never the cached eval model of ``opsd_diag.models``), float32
  master weights unless the config names a dtype; optionally wrapped with a peft LoRA adapter.
- teacher: an external model (cached, frozen), or for a self-teacher the ``frozen`` initial student
  (with LoRA: the adapter switched off), an ``ema`` copy, or the ``live`` student under no_grad.
- base: frozen (opd2, ExOPD with a base reference).
- initial: the frozen initial student, kept only when something needs it (frozen self-teacher,
  ExOPD's default reference, KL to the initial policy); with LoRA it costs nothing.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from opsd_diag import models as hub
from opsd_diag.config import ModelSpec
from opsd_diag.errors import OpsdError


def load_trainable(spec: ModelSpec, device: torch.device, source: str | None = None) -> nn.Module:
    """A fresh train-mode copy through the same loading code (errors, offline rules) as the diagnosis.

    ``load_model`` is lru-cached and returns a shared eval model; its undecorated function gives an
    independent copy that training may change.
    """
    dtype = "float32" if spec.dtype == "auto" else spec.dtype
    model = hub.load_model.__wrapped__(source or spec.model, spec.revision, dtype, str(device),
                                       spec.allow_download, spec.trust_remote_code)
    return model.train()


def frozen_copy(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).eval().requires_grad_(False)


def length_groups(lengths: list[int]) -> list[list[int]]:
    """Rows cut into forward passes so that padding costs less than an extra pass would.

    Rows are sorted by length (longest first) and split into contiguous runs minimising
    ``sum(rows x longest row) + passes x overhead``, where one more pass is charged 1/16 of the
    micro-batch's real tokens (at least 32 positions): a split must save that much padding. Only
    the cost depends on the split; each row's hidden states do not (see ``packed_hidden``).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    srt = np.array([lengths[i] for i in order], dtype=np.float64)
    n = len(order)
    overhead = max(32.0, float(srt.sum()) / 16)
    best = np.zeros(n + 1)  # best[j]: least cost of the j longest rows
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        cost = best[:j] + (j - np.arange(j)) * srt[:j] + overhead  # last run = sorted rows i..j-1
        cut[j] = int(np.argmin(cost))
        best[j] = cost[cut[j]]
    groups, j = [], n
    while j:
        groups.append(order[cut[j]:j])
        j = int(cut[j])
    return groups[::-1]


def packed_hidden(model: nn.Module, prompts: list[list[int]], completions: list[list[int]],
                  pad_id: int) -> torch.Tensor:
    """Final hidden states at the positions that predict each completion token: ``[N, H]``.

    The same contract as ``opsd_diag.scoring.completion_hidden`` (rows concatenated in order, the
    scored ids asserted equal to the sampled ones), computed with less padding: each row is its
    prompt followed by its completion, right-padded, so a causal model needs no attention mask
    (no real position ever sees a pad, and its position ids are 0..L-1 as without padding), and
    rows of similar length share a forward pass (``length_groups``). The diagnosis' left-padded
    layout pads every row to the longest prompt plus the longest completion; on the toy zoo this
    computes ~20-25% fewer positions, in the student's forward and backward and the teacher's forward.
    """
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("packed_hidden needs one prompt per completion")
    if any(not p for p in prompts):
        raise OpsdError("an empty prompt cannot be scored: every view needs at least one token")
    device = next(model.parameters()).device
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    offsets = [0]
    for c in completions:
        offsets.append(offsets[-1] + len(c))
    pieces, token_order = [], []
    for group in length_groups(lengths):
        group = [i for i in group if completions[i]]  # a row without completion tokens scores nothing
        if not group:
            continue
        width = max(lengths[i] for i in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)  # [g, W] right-padded
        rows, cols, flat = [], [], []
        for r, i in enumerate(group):
            p, c = prompts[i], completions[i]
            ids[r, :lengths[i]] = torch.tensor(p + c, dtype=torch.long)
            rows += [r] * len(c)
            cols += range(len(p) - 1, len(p) + len(c) - 1)  # column t predicts the token at t + 1
            flat += c
            token_order += range(offsets[i], offsets[i + 1])
        rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
        if not torch.equal(ids[rows_t, cols_t + 1], torch.tensor(flat, dtype=torch.long)):
            raise AssertionError("scored completion ids differ from the sampled ones")  # pitfall 1
        positions = torch.arange(width).expand(len(group), width)  # [g, W] explicit, as without padding
        out = model.base_model(input_ids=ids.to(device), position_ids=positions.to(device), use_cache=False)
        pieces.append(out.last_hidden_state[rows_t.to(device), cols_t.to(device)])  # [n_g, H]
    if not pieces:  # no completion tokens at all: an empty [0, H] that is still graph-connected (pitfall 9)
        out = model.base_model(input_ids=torch.tensor([prompts[0]], device=device), use_cache=False)
        return out.last_hidden_state[0, :0]
    hidden = torch.cat(pieces)  # [N, H] in group order
    if token_order == list(range(len(token_order))):
        return hidden
    inverse = torch.empty(len(token_order), dtype=torch.long)
    inverse[torch.tensor(token_order)] = torch.arange(len(token_order))
    return hidden[inverse.to(device)]  # [N, H] rows in order


class CompletionHidden(nn.Module):
    """The student's forward as one module, so DDP syncs it: completion hidden states ``[N, H]`` with grad.

    The LM head is applied outside, chunk by chunk (no ``[batch, length, vocab]`` tensor), by the caller.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> torch.Tensor:
        return packed_hidden(self.model, prompts, completions, pad_id)  # [N, H]


@dataclass
class Roles:
    student: nn.Module  # the HF causal LM that trains (LoRA layers injected when peft is used)
    peft_model: nn.Module | None
    teacher_mode: str  # external | frozen | ema | live | none
    teacher: nn.Module | None  # external teacher or the EMA copy
    base: nn.Module | None
    initial: nn.Module | None  # frozen initial student (None with LoRA: adapter off instead)

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
                ema[name].lerp_(p.detach().to(ema[name].dtype), 1.0 - decay)


def add_lora(model: nn.Module, lora) -> nn.Module:
    """Wrap with a peft LoRA adapter (peft is optional; config.resolve already checked it is present)."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                     target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, cfg)
    except ValueError as e:
        raise OpsdError(f"training.lora: {str(e).splitlines()[0][:160]}: check target_modules against the "
                        "student's module names") from None


def load_lora(model: nn.Module, adapter_dir: str) -> nn.Module:
    from peft import PeftModel

    return PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
