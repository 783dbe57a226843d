"""The models one training step holds: the trainable student and its frozen or moving partners.

- student: the trainable copy (float32 master weights unless a dtype is named), optionally with LoRA.
- teacher: an external model (frozen), or for a self-teacher the ``frozen`` initial student (with
  LoRA: the adapter switched off), an ``ema`` copy, or the ``live`` student under no_grad.
- base: frozen (opd2, ExOPD with a base reference).
- initial: the frozen initial student, kept only when something needs it (frozen self-teacher,
  ExOPD's default reference, KL to the initial policy); with LoRA it costs nothing.

Shared by the trainer and the diagnosis' lookahead (``engine.lookahead``), which both step through
``engine.train_step``; loading the trainable copy is the trainer's (``trainer.roles``).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import nn

from opsd_diag.engine.scoring import completion_hidden


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
