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


def _damaged(ckpt: Path, what: str) -> OpsdError:
    return OpsdError(f"checkpoint {ckpt} is damaged or does not belong to this run: {what}; remove that folder to "
                     "resume from the checkpoint before it, or start a new --out")


def check_weights(ckpt: Path) -> None:
    """Every safetensors file of the checkpoint is whole: its header parses and its tensors end where the
    file ends (a truncated or replaced file fails here, not deep inside from_pretrained)."""
    files = sorted(ckpt.glob("*.safetensors")) + sorted(ckpt.glob("ema/*.safetensors"))
    if not files:
        raise _damaged(ckpt, "it has no weights (model.safetensors or adapter_model.safetensors)")
    for f in files:
        try:
            with open(f, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                n = int.from_bytes(fh.read(8), "little")
                if not 2 <= n <= min(size - 8, 100_000_000):
                    raise ValueError("no safetensors header")
                header = json.loads(fh.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise _damaged(ckpt, f"{f.relative_to(ckpt)} is not a safetensors file") from None
        if 8 + n + max(ends, default=0) != size:
            raise _damaged(ckpt, f"{f.relative_to(ckpt)} is truncated or padded ({size} bytes where its header says "
                                 f"{8 + n + max(ends, default=0)})")


_SAME_MODEL = ("model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def check_config(ckpt: Path, student_dir: str) -> None:
    """The checkpoint's config.json describes the student's architecture (compared with the student's own
    config.json when the student is a local directory); an adapter checkpoint has none to compare."""
    ours = Path(student_dir).expanduser() / "config.json"
    mine = ckpt / "config.json"
    if not mine.is_file():
        if not (ckpt / "adapter_config.json").is_file():
            raise _damaged(ckpt, "it has no config.json")
        return
    try:
        theirs = json.loads(mine.read_text())
        want = json.loads(ours.read_text()) if ours.is_file() else None
    except (OSError, ValueError) as e:
        raise _damaged(ckpt, f"config.json is unreadable ({type(e).__name__})") from None
    if not isinstance(theirs, dict):
        raise _damaged(ckpt, "config.json is not a JSON object")
    if isinstance(want, dict):
        diff = [k for k in _SAME_MODEL if want.get(k) != theirs.get(k)]
        if diff:
            raise _damaged(ckpt, f"its config.json describes another model than the student's ({diff[0]} "
                                 f"{theirs.get(diff[0])!r}, the student has {want.get(diff[0])!r})")


def _check_rng(ckpt: Path, rng) -> None:
    ok = (isinstance(rng, dict) and {"python", "numpy", "torch"} <= set(rng)
          and isinstance(rng["python"], (tuple, list)) and len(rng["python"]) == 3
          and isinstance(rng["numpy"], (tuple, list)) and len(rng["numpy"]) == 5
          and isinstance(rng["torch"], torch.Tensor) and rng["torch"].dtype == torch.uint8
          and rng["torch"].shape == torch.get_rng_state().shape)
    if not ok:
        raise _damaged(ckpt, "its RNG file is not an RNG state written by opsd-train")


def read_state(ckpt: Path, rank: int, student_dir: str | None = None) -> tuple[dict, dict | None]:
    """(trainer state, this rank's RNG state or None), each file checked: a damaged or foreign one is an
    OpsdError naming the checkpoint and the file, before anything is loaded or written."""
    def load(path: Path):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch.load raises many types for a damaged file
            raise _damaged(ckpt, f"{path.name} cannot be read ({type(e).__name__})") from None

    rng_file = ckpt / f"rng_{rank}.pt"
    state = load(ckpt / STATE)
    rng = load(rng_file) if rng_file.is_file() else None
    if not isinstance(state, dict):
        raise _damaged(ckpt, f"{STATE} is not a trainer state")
    step = state.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise _damaged(ckpt, f"the step in {STATE} is {step!r}, not a whole number >= 0")
    if (m := _NAME.fullmatch(ckpt.name)) and int(m.group(1)) != step:
        raise _damaged(ckpt, f"{STATE} says step {step}, its folder name step {int(m.group(1))}")
    if not isinstance(state.get("scheduler"), dict):
        raise _damaged(ckpt, f"{STATE} has no learning-rate scheduler state")
    opt = state.get("optimizer")
    if opt is not None and not (isinstance(opt, dict) and isinstance(opt.get("state"), dict)
                                and isinstance(opt.get("param_groups"), list)):
        raise _damaged(ckpt, f"{STATE} has no optimizer state")
    if rng is not None:
        _check_rng(ckpt, rng)
    check_weights(ckpt)
    if student_dir is not None:
        check_config(ckpt, student_dir)
    return state, rng


def check_optimizer(ckpt: Path, state: dict, params: list[torch.Tensor]) -> None:
    """The saved optimizer state is for these parameters: one entry per trainable tensor, each of its shape."""
    opt = state.get("optimizer")
    if opt is None:
        return
    saved = [i for g in opt["param_groups"] for i in g.get("params", [])]
    if len(saved) != len(params):
        raise _damaged(ckpt, f"its optimizer state is for {len(saved)} parameter tensors, this run trains "
                             f"{len(params)}")
    for i, p in zip(saved, params):
        moments = opt["state"].get(i, {})
        for name in ("exp_avg", "exp_avg_sq"):
            t = moments.get(name)
            if t is not None and (not isinstance(t, torch.Tensor) or t.shape != p.shape):
                raise _damaged(ckpt, f"its optimizer state does not fit the parameters (tensor {i}: "
                                     f"{tuple(getattr(t, 'shape', ()))} for a parameter of shape {tuple(p.shape)})")
