"""The trainer under parameter sharding (FSDP2): the student's LM head runs inside the wrapped module.

Under DDP (and on one process) ``opsd_diag.engine.train_step`` applies the student's LM head outside the wrapped
module, chunk by chunk on detached hidden states, and feeds the collected gradients back in one
backward. That is exact when every process holds every weight, and wrong under FSDP: outside the
wrapped module's forward the root's parameters (embedding, final norm, LM head) are shards. Here
the whole loss of a micro-batch is computed inside the wrapped module's ``forward``
(``ShardedStudent``): the decoder, then per chunk the LM head and the method's loss under
activation checkpointing (only the chunk's hidden states are kept; its ``[chunk, vocab]`` logits are
recomputed in the backward), so the memory bound of the chunked head is kept and FSDP sees one
ordinary forward and backward. The loss and its gradients are the same sums as ``opsd_diag.engine.train_step``'s.

Everything else that runs the student outside a training forward (on-policy sampling, evaluation,
a ``live`` self-teacher) runs inside ``full_params``: every FSDP unit of the student is gathered
once, kept gathered for the duration, then resharded.

With accelerate, FSDP2 comes from an accelerate config (``distributed_type: FSDP``,
``fsdp_config: {fsdp_version: 2}``; see ``sample_data/accelerate/fsdp2.yaml``). FSDP1 and DeepSpeed
are refused (``check_supported``): FSDP1 units are not FSDP2 modules, so the step would take the
head-outside path, and DeepSpeed's engine never sees gradients fed by ``torch.autograd.backward``. accelerate (1.15)
never selects FSDP for CPU processes: ``AcceleratorState`` upgrades only GPU-like multi-device
types to FSDP, so ``use_cpu`` with an FSDP config silently runs DDP (MULTI_CPU). For tests on CPU,
``OPSD_FSDP2_CPU=1`` makes the trainer shard the student itself with ``torch.distributed.fsdp
.fully_shard`` (each decoder layer, then the root: what accelerate's FSDP2 preparation does) on a
gloo mesh of the accelerate processes.
"""

from __future__ import annotations

import contextlib
import logging
import os

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.errors import OpsdError
from opsd_diag.config.settings import LossSettings
from opsd_diag.engine.train_step import Roles
from opsd_diag.engine.train_step import MicroBatch

CPU_ENV = "OPSD_FSDP2_CPU"
# full_params reaches into FSDP2's private state (the lazy root init, the param groups' post-forward mesh): present
# from torch 2.6, where fully_shard became public; 2.6-2.8 keep one param group per state, later ones a list
FSDP2_MIN_TORCH = "2.6"


def check_fsdp_torch(version: str | None = None) -> None:
    """OpsdError when this torch is older than the FSDP2 internals ``full_params`` uses."""
    v = torch.torch_version.TorchVersion(version or torch.__version__)
    if v < FSDP2_MIN_TORCH:
        raise OpsdError(f"FSDP2 training needs torch >= {FSDP2_MIN_TORCH} (this is {v}): upgrade torch or train "
                        "without FSDP (DDP or one process)")


def _param_groups(state) -> list:
    """The FSDP param groups of one unit's state, across the torch versions that name them differently."""
    if hasattr(state, "_fsdp_param_groups"):  # torch >= 2.9: a list
        return list(state._fsdp_param_groups)
    if hasattr(state, "_fsdp_param_group"):  # torch 2.6-2.8: one group or None
        return [state._fsdp_param_group] if state._fsdp_param_group is not None else []
    raise OpsdError(f"FSDP2 internals changed in torch {torch.__version__} (no param groups on the FSDP state): "
                    "train without FSDP, or with a torch version opsd-train supports (docs/training.md)")


def _fsdp_module_cls():
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import FSDPModule
    return FSDPModule


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model`` (or a submodule) is an FSDP2 unit."""
    cls = _fsdp_module_cls()
    return any(isinstance(m, cls) for m in model.modules())


def check_supported(acc) -> None:
    """OpsdError for the distributed set-ups whose gradients the trainer cannot get right (see above)."""
    from accelerate.utils import DistributedType

    if acc.distributed_type == DistributedType.DEEPSPEED:
        raise OpsdError("DeepSpeed is not supported by opsd-train yet (its engine does not see the gradients of the "
                        "chunked LM head): for ZeRO-3-style sharding use FSDP2, e.g. accelerate launch --config_file "
                        "sample_data/accelerate/fsdp2.yaml (docs/training.md)")
    plugin = getattr(acc.state, "fsdp_plugin", None)
    if acc.distributed_type == DistributedType.FSDP and getattr(plugin, "fsdp_version", 1) != 2:
        raise OpsdError("FSDP version 1 is not supported by opsd-train: set fsdp_config.fsdp_version: 2 in the "
                        "accelerate config (sample_data/accelerate/fsdp2.yaml)")
    if fsdp_requested(acc):
        check_fsdp_torch()


def fsdp_requested(acc) -> bool:
    from accelerate.utils import DistributedType

    return acc.distributed_type == DistributedType.FSDP or (
        os.environ.get(CPU_ENV) == "1" and acc.distributed_type == DistributedType.MULTI_CPU)


class ShardedStudent(nn.Module):
    """The student as one FSDP root: completion hidden states, or the whole chunked loss of a micro-batch."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self._no_split_modules = getattr(model, "_no_split_modules", None)  # accelerate's auto-wrap reads it

    def forward(self, prompts: list[list[int]], completions: list[list[int]], pad_id: int, chunk_loss=None,
                chunk_size: int = 0, autocast=contextlib.nullcontext):
        h = completion_hidden(self.model, prompts, completions, pad_id)  # [N, H] with grad
        if chunk_loss is None:
            return h
        # a zero that reaches every root parameter (the head included): every process reduces the same
        # gradients even when its micro-batch has no completion token (docs/design.md, pitfall 9)
        total = h.float().sum() * 0.0 + sum(p.float().sum() * 0.0 for p in
                                              self.model.get_output_embeddings().parameters() if p.requires_grad)
        for lo in range(0, h.shape[0], chunk_size):
            sl = slice(lo, min(h.shape[0], lo + chunk_size))
            # only h[sl] is saved; the head and the loss are recomputed in the backward
            total = total + checkpoint(self._chunk, h[sl], sl, chunk_loss, autocast, use_reentrant=False)
        return total

    def _chunk(self, h_chunk: Tensor, sl: slice, chunk_loss, autocast) -> Tensor:
        with autocast():
            logits = lm_logits(self.model, h_chunk)  # [n, V] float32, the root's (gathered) head
        return chunk_loss(logits, sl)


def wrap(student: nn.Module, acc):
    """What ``acc.prepare`` gets: ``ShardedStudent`` under FSDP, else ``opsd_diag.engine.train_step.CompletionHidden``."""
    from opsd_diag.engine.train_step import CompletionHidden

    return ShardedStudent(student) if fsdp_requested(acc) else CompletionHidden(student)


def prepare(acc, wrapper: nn.Module, optimizer, roles: Roles):
    """``acc.prepare`` (DDP, accelerate FSDP, ...), or the CPU FSDP2 sharding of ``OPSD_FSDP2_CPU=1``."""
    from accelerate.utils import DistributedType

    if not (os.environ.get(CPU_ENV) == "1" and acc.distributed_type == DistributedType.MULTI_CPU):
        return acc.prepare(wrapper, optimizer)
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    if optimizer.state:
        raise RuntimeError(f"{CPU_ENV}: resuming a sharded run is not supported")
    mesh = init_device_mesh("cpu", (acc.num_processes,))
    layer_names = set(wrapper._no_split_modules or ())
    for module in wrapper.modules():
        if type(module).__name__ in layer_names:
            fully_shard(module, mesh=mesh)
    fully_shard(wrapper, mesh=mesh)
    # fully_shard replaced the parameters with sharded ones (same order): point the optimizer at them
    optimizer.param_groups[0]["params"] = roles.trainable()
    if acc.is_main_process:
        logging.getLogger("opsd-train").info("student sharded with FSDP2 on %d CPU processes (%s=1)",
                                             acc.num_processes, CPU_ENV)
    return wrapper, acc.prepare(optimizer)


@contextlib.contextmanager
def full_params(model: nn.Module):
    """Every FSDP unit of ``model`` gathered for the duration (sampling, evaluation, a live teacher)."""
    cls = _fsdp_module_cls()
    units = [m for m in model.modules() if isinstance(m, cls)]
    if not units:
        yield
        return
    check_fsdp_torch()
    # the outermost unit must initialise as the root before any inner unit runs a forward of its own
    units[0]._get_fsdp_state()._lazy_init()
    saved = []
    for m in units:
        saved.append([(g, g.post_forward_mesh_info) for g in _param_groups(m._get_fsdp_state())])
    units[0].set_reshard_after_forward(False, recurse=True)
    for m in units:
        m.unshard()
    try:
        yield
    finally:
        for m in units:
            m.reshard()
        for groups in saved:
            for g, info in groups:
                g.post_forward_mesh_info = info


def full_state_dict(model: nn.Module) -> dict | None:
    """The full (unsharded) state dict of a sharded model on every process (a collective), else None."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    tied = getattr(model, "_tied_weights_keys", None)  # {"lm_head.weight": "model.embed_tokens.weight"}
    if isinstance(tied, dict) and getattr(model.config, "tie_word_embeddings", False):
        for target, source in tied.items():  # written once, as save_pretrained does for an unsharded model
            if target in sd and source in sd and torch.equal(sd[target], sd[source]):
                del sd[target]
    return sd


def micro_batch_backward(hidden_model, roles: Roles, mb: MicroBatch, s: LossSettings, *, pad_id: int,
                         chunk_size: int, scale: float, ref: str | None = None, autocast=contextlib.nullcontext,
                         sums=None):
    """``opsd_diag.engine.train_step.micro_batch_backward`` for a ``ShardedStudent``: the same loss, sums and gradients."""
    from opsd_diag.engine.step_sums import StepSums
    from opsd_diag.engine.train_step import chunk_loss, partner_hidden

    sums = sums or StepSums()
    token_ids_all = torch.tensor([t for c in mb.completions for t in c], dtype=torch.long)  # [N]
    live = roles.teacher_mode == "live"
    with full_params(hidden_model) if live else contextlib.nullcontext():
        partners = partner_hidden(roles, mb, s, pad_id, ref)
    seen: set[int] = set()
    device = next(hidden_model.parameters()).device

    def one_chunk(student_logits: Tensor, sl: slice) -> Tensor:
        ids = token_ids_all[sl].to(device)  # [n]
        total, stats = chunk_loss(student_logits, ids, sl, s, partners, ref, autocast)
        if sl.start not in seen:  # not again when the backward recomputes the chunk
            seen.add(sl.start)
            sums.loss = sums.loss + total.detach().double()
            sums.tokens += ids.numel()
            sums.add_stats(stats)
            sums.note(mb, sl.start, stats)
        return total

    total = hidden_model(mb.student_prompts, mb.completions, pad_id, one_chunk, chunk_size, autocast)
    (total * scale).backward()
    sums.rows += len(mb.completions)
    sums.finished += sum(mb.finished)
    return sums
