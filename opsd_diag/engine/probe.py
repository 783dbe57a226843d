"""A probe: a small diagnosis of a training run's live policy, written as an ordinary diagnosis run directory.

``probe_config`` derives the probe's config from a diagnosis config and a ``ProbeSpec``
(``training.diagnose_every``): the first ``problems`` problems of its data, the probe's sample count and
length, the ideal-gradient predictor (the v1 verdict) with the probe's budget, no lookahead and no training
section. ``run_probe`` runs it through ``engine.diagnose.run_diagnosis`` with the policy in memory in place of
the config's student, so a probe computes exactly what ``opsd-diag run`` computes on a saved checkpoint of the
same weights. The trainers call it: ``trainer.probes`` (``opsd-train``) and ``trainer.trl_callback`` (TRL, or
any ``transformers.Trainer``). ``opsd_diag.trajectory`` reads a folder of probes as a trajectory.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState

from opsd_diag.config.probe import PROBE, ProbeSpec
from opsd_diag.config.spec import DiagnosisConfig, IdealSpec
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.models import SCORED_ROWS


def probe_config(cfg: DiagnosisConfig, spec: ProbeSpec, teachers: list[str] | None = None,
                 device: str | None = None) -> DiagnosisConfig:
    """The diagnosis config of every probe of a run (``teachers``: the configs kept, default all)."""
    keep = [t for t in cfg.teachers if teachers is None or t.name in teachers]
    if not keep:
        raise OpsdError(f"diagnose_every: no teacher config named {', '.join(teachers)} in the config (it has "
                        f"{', '.join(t.name for t in cfg.teachers)}): name one of them")
    limit = min(spec.problems, cfg.data.limit or spec.problems)
    n = spec.num_samples or cfg.sampling.num_samples
    sampling = cfg.sampling.model_copy(update={
        "num_samples": n, "max_completion_length": spec.max_completion_length or cfg.sampling.max_completion_length})
    pass_k = sorted({k for k in cfg.analysis.pass_k or (1, 4) if k <= n} | {1, n})  # pass@n: the headroom's
    ideal = (cfg.ideal or IdealSpec()).model_copy(update={"enabled": True, "budget": spec.budget}) \
        if spec.verdict else None
    data = dict(cfg.model_dump(mode="python"), teachers=[t.model_dump() for t in keep],
                data=cfg.data.model_copy(update={"limit": limit}).model_dump(),
                sampling=sampling.model_dump(),
                analysis=cfg.analysis.model_copy(update={"pass_k": pass_k}).model_dump(),
                ideal=ideal and ideal.model_dump(), lookahead=None, training=None, device=device or cfg.device)
    return DiagnosisConfig.model_validate(data)


def run_probe(cfg: DiagnosisConfig, root: str | Path, step: int, policy: torch.nn.Module,
              meta: dict | None = None) -> Path:
    """Diagnose ``policy`` (the weights after ``step`` optimizer steps) with ``cfg`` (``probe_config``) into
    ``root/step-NNNNNNN``; a finished probe of that step is kept (a resumed run does not redo it).

    The policy runs as a saved checkpoint of its weights would: in eval mode, its KV cache on, its own forward in
    its own dtype (not under the trainer's autocast wrapper); all of it is put back after. No gradient is kept,
    and the random states (torch, CUDA, numpy, random) are restored: training draws what it would have.
    """
    out = Path(root) / ProbeSpec.step_dir(step)
    if (out / PROBE).is_file():
        return out
    training, rows = policy.training, policy.__dict__.get(SCORED_ROWS)
    config = getattr(policy, "config", None)
    use_cache = getattr(config, "use_cache", None)  # a trainer with gradient checkpointing turns it off
    device = next(policy.parameters()).device
    states = random.getstate(), np.random.get_state()
    wrapped = policy.__dict__.pop("forward", None)  # a trainer's autocast wrapper (accelerate's mixed precision)
    policy.eval()
    if use_cache is False:
        config.use_cache = True  # sampled as a saved checkpoint of the same weights is (its KV cache on)
    try:  # the training run's random streams are left as they were: a probe changes none of its draws
        with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            run_diagnosis(cfg, out, show_progress=False, student=policy)
    finally:  # the policy as it was: its mode, and no scored-rows mark it did not have (io.models.limit_rows)
        random.setstate(states[0])
        np.random.set_state(states[1])
        policy.train(training)
        if wrapped is not None:
            policy.forward = wrapped
        if use_cache is False:
            config.use_cache = False
        if rows is None:
            policy.__dict__.pop(SCORED_ROWS, None)
    if PartialState().is_main_process:  # last: the probe is complete
        store.atomic_write_json(out / PROBE, {"step": int(step), **(meta or {})})
    return out
