"""The models a training run holds: the trainable student and its frozen or moving partners.

- student: a fresh, trainable copy (never the cached eval model of ``opsd_diag.io.models``), float32
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

import torch
from torch import nn

from opsd_diag.engine.scoring import completion_hidden
from opsd_diag.errors import OpsdError
from opsd_diag.io import models as hub
from opsd_diag.io.config import ModelSpec


def load_trainable(spec: ModelSpec, device: torch.device, source: str | None = None) -> nn.Module:
    """A fresh train-mode copy through the same loading code (errors, offline rules) as the diagnosis.

    ``load_model`` is lru-cached and returns a shared eval model; its undecorated function gives an
    independent copy that training may change.
    """
    dtype = "float32" if spec.dtype == "auto" else spec.dtype
    args = hub.model_args(spec.model_copy(update={"model": source or spec.model,
                                                  "adapter": None if source else spec.adapter}), str(device), dtype)
    return hub.load_model.__wrapped__(*args).train()


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
