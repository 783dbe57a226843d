"""Loading the trainable student of a training run (and its LoRA adapter).

The student is a fresh, trainable copy, never the cached eval model of ``opsd_diag.io.models``; the
roles it plays with its partners are ``opsd_diag.engine.train_step.Roles``.
"""

from __future__ import annotations

import torch
from torch import nn

from opsd_diag.errors import OpsdError
from opsd_diag.io import models as hub
from opsd_diag.config.spec import ModelSpec


def load_trainable(spec: ModelSpec, device: torch.device, source: str | None = None) -> nn.Module:
    """A fresh train-mode copy through the same loading code (errors, offline rules) as the diagnosis.

    ``load_model`` is lru-cached and returns a shared eval model; its undecorated function gives an
    independent copy that training may change.
    """
    dtype = "float32" if spec.dtype == "auto" else spec.dtype
    args = hub.model_args(spec.model_copy(update={"model": source or spec.model,
                                                  "adapter": None if source else spec.adapter}), str(device), dtype)
    return hub.load_model.__wrapped__(*args).train()


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
