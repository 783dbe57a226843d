"""The manifest a diagnosis run stores: the resolved config, the versions and models that made it,
the prompts as each model saw them, and what later readers check its tables against."""

from __future__ import annotations

import os
import platform

import torch

from opsd_diag import __version__
from opsd_diag.io.store import STAMPS


def _versions() -> dict:
    import accelerate
    import transformers
    return {"opsd_diag": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "python": platform.python_version()}


def manifest(prep, status: str, **extra) -> dict:
    """``prep``: the engine.diagnose.Prepared run; ``extra``: the status fields of the moment."""
    cfg = prep.cfg
    return {"status": status, "config": cfg.model_dump(mode="json"), "versions": _versions(),
            "seed": cfg.sampling.seed, "sampling_temperature": cfg.sampling.temperature,
            "scoring_temperature": cfg.scoring_temperature, "centering": cfg.scoring.centering,
            "n_problems": len(prep.problems), "n_shards": prep.n_shards, "shard_size": cfg.shard_size,
            "model_fingerprints": prep.fingerprints, "stop_ids": prep.stop_ids,
            "rendered_prompts": {"problem_id": prep.problems[0]["id"], **prep.rendered}, "template_notes": prep.notes,
            "vocab_size": int(prep.student.get_output_embeddings().weight.shape[0]), "stamps": list(STAMPS),
            "cwd": os.getcwd(), **extra}  # where the config's relative paths were read (Run.config_for_models)
