"""Checkpoints: HF-format weights plus everything an identical continuation needs.

``checkpoints/step-NNNNNN/`` holds the student (``from_pretrained``-loadable, with its tokenizer; a
LoRA run holds the adapter), ``ema/`` for an EMA self-teacher, ``trainer_state.pt`` (optimizer,
scheduler, step, elapsed time) and ``rng_<rank>.pt`` (each process's RNG states). A checkpoint is written into a hidden
temp folder and renamed into place, so "latest" only ever sees complete ones.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe

STATE = "trainer_state.pt"
_NAME = re.compile(r"step-(\d{6,})")


def ckpt_root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def step_dir(run_dir: Path, step: int) -> Path:
    return ckpt_root(run_dir) / f"step-{step:06d}"


def latest(run_dir: Path) -> Path | None:
    """The most advanced complete checkpoint, or None; a checkpoint that is (or holds) a symbolic link, or
    lies outside the run directory, is refused: a resume loads only what the run itself saved."""
    root = ckpt_root(run_dir)
    if root.is_symlink():
        raise OpsdError(f"{root} is a symbolic link: a run resumes only from checkpoints inside its own folder; "
                        "replace the link with the folder itself")
    if not root.is_dir():
        return None
    done = [(int(m.group(1)), p) for p in root.iterdir()
            if (m := _NAME.fullmatch(p.name)) and (p / STATE).is_file()]
    if not done:
        return None
    best = max(done)[1]
    linked = [best, *(Path(d) / n for d, dirs, files in os.walk(best) for n in dirs + files)]
    link = next((p for p in linked if p.is_symlink()), None)
    if link is not None or not best.resolve().is_relative_to(Path(run_dir).resolve()):
        what = ("is a symbolic link" if link == best else f"holds the symbolic link {link}" if link is not None
                else "lies outside the run")
        raise OpsdError(f"checkpoint {best} {what}: a run resumes only from what it saved itself; remove it to "
                        "resume from an earlier checkpoint, or start a new --out")
    return best


def rng_state() -> dict:
    """RNG states as plain types and tensors (loadable with ``weights_only=True``)."""
    np_state = np.random.get_state()
    state = {"python": random.getstate(), "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    v, internal, gauss = state["python"]
    random.setstate((v, tuple(internal), gauss))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def temp_dir(run_dir: Path, step: int) -> Path:
    """The hidden folder a checkpoint is written into (the same name on every process)."""
    return ckpt_root(run_dir) / f".tmp-step-{step:06d}"


def begin(run_dir: Path, step: int) -> Path:
    """Main process: an empty temp folder for the checkpoint of ``step``."""
    tmp = temp_dir(run_dir, step)
    safe.real_dir(ckpt_root(run_dir), run_dir)
    if tmp.is_symlink():
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def write_model(tmp: Path, roles, tok, state_dict: dict | None = None) -> None:
    """Main process: the student (or its adapter), the tokenizer and the EMA teacher, HF format.

    ``state_dict``: the student's full weights when they are sharded (FSDP, ``trainer.sharded``)."""
    model = roles.peft_model if roles.peft_model is not None else roles.student
    model.save_pretrained(tmp, safe_serialization=True, **({"state_dict": state_dict} if state_dict else {}))
    tok.save_pretrained(tmp)
    if roles.teacher_mode == "ema":
        roles.teacher.save_pretrained(tmp / "ema", safe_serialization=True)


def write_rank_rng(tmp: Path, rank: int) -> None:
    torch.save(rng_state(), tmp / f"rng_{rank}.pt")


def commit(run_dir: Path, tmp: Path, step: int, state: dict, limit: int | None, info: dict) -> Path:
    """Main process: write the trainer state, rename into place, prune old checkpoints."""
    torch.save({**state, "step": step}, tmp / STATE)
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step, "time": time.time(), **info}, indent=2,
                                                       default=str))
    final = step_dir(run_dir, step)
    if final.is_symlink():  # never followed: only the link goes
        final.unlink()
    elif final.exists():  # a re-save of the same step (stop right after a periodic save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    if limit:
        done = sorted(int(m.group(1)) for p in ckpt_root(run_dir).iterdir() if (m := _NAME.fullmatch(p.name)))
        for old in done[:-limit]:
            shutil.rmtree(step_dir(run_dir, old), ignore_errors=True)
    return final


def clean_temp(run_dir: Path) -> None:
    root = ckpt_root(run_dir)
    if root.is_dir() and not root.is_symlink():
        for p in root.glob(".tmp-*"):
            p.unlink() if p.is_symlink() else shutil.rmtree(p, ignore_errors=True)


def read_state(ckpt: Path, rank: int) -> tuple[dict, dict | None]:
    """(trainer state, this rank's RNG state or None); a damaged file is an OpsdError naming the checkpoint."""
    rng_file = ckpt / f"rng_{rank}.pt"
    try:
        state = torch.load(ckpt / STATE, map_location="cpu", weights_only=True)
        rng = torch.load(rng_file, map_location="cpu", weights_only=True) if rng_file.is_file() else None
    except Exception as e:  # noqa: BLE001 - torch.load raises many types for a damaged file
        raise OpsdError(f"checkpoint {ckpt} is damaged ({type(e).__name__}): remove that folder to resume from the "
                        "checkpoint before it, or start a new --out") from None
    if not isinstance(state, dict) or "step" not in state:
        raise OpsdError(f"checkpoint {ckpt} is damaged (no step in its state): remove that folder to resume from the "
                        "checkpoint before it, or start a new --out")
    return state, rng
