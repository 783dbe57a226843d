"""A LoRA adapter checked against its model before it is merged: each mistake one line a user can act on.

peft itself loads what matches and quietly skips the rest: an adapter of another base with the same
layer shapes would be merged in part, and a rank that disagrees with ``adapter_config.json`` fails
with a state-dict dump. So the adapter's weights are read first (the safetensors header alone; a
pickle through torch's safe loader, which refuses one that holds more than tensors) and every LoRA
weight is matched to a module of the model: the module exists, its in/out sizes are the adapter's,
the rank is the config's ``r``. After peft has wrapped the model, every module it targets must have
received weights. An adapter that fits but names another base in ``base_model_name_or_path`` is
merged with a one-line warning (the same weights can live under two paths).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import torch

from opsd_diag.errors import OpsdError
from opsd_diag.io.load_errors import describe, held_warnings

CONFIG = "adapter_config.json"
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B)"
                  r"(?:\.[^.]+)?(?:\.weight)?$")


def _read_config(path: Path, adapter: str) -> dict:
    if not (path / CONFIG).is_file():
        raise OpsdError(f"adapter {adapter} has no {CONFIG}: point to a LoRA adapter directory (e.g. a checkpoint "
                        "opsd-train wrote with training.lora)")
    try:
        cfg = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        cfg = None
    if not isinstance(cfg, dict):
        raise OpsdError(f"adapter {adapter}: its {CONFIG} is not a JSON object: save the adapter again")
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise OpsdError(f"adapter {adapter} is a {cfg.get('peft_type')} adapter, not LoRA: only a LoRA adapter can "
                        "be merged into the model")
    if not isinstance(cfg.get("r"), int) or cfg["r"] < 1:
        raise OpsdError(f"adapter {adapter}: its {CONFIG} has no rank r (a whole number >= 1): save the adapter again")
    return cfg


def weight_shapes(path: Path, adapter: str) -> dict[str, tuple[int, ...]]:
    """Every tensor of the adapter's weights file with its shape (a safetensors file: its header only)."""
    file = next((path / w for w in WEIGHTS if (path / w).is_file()), None)
    if file is None:
        raise OpsdError(f"adapter {adapter} has no {' or '.join(WEIGHTS)}: save the adapter again (peft's "
                        "save_pretrained writes it)")
    try:
        if file.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(file), "pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        state = torch.load(file, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise ValueError("it holds no dictionary of tensors")
        return {str(k): tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    except Exception as e:  # noqa: BLE001 - a user's file: truncated, not safetensors, a refused pickle
        what = describe(e, path, file.name)
        fix = ("use the adapter's safetensors file (adapter_model.safetensors), from a source you trust"
               if file.suffix == ".bin" and "pickle" in what else "save the adapter again")
        raise OpsdError(f"adapter {adapter}: {what}: {fix}") from None


def _rank_of(cfg: dict, module: str) -> int:
    """The rank ``adapter_config.json`` gives ``module``: its ``rank_pattern`` entry, else ``r``."""
    for pattern, rank in (cfg.get("rank_pattern") or {}).items():
        try:
            if re.fullmatch(rf"(?:.*\.)?{pattern}", module):
                return rank
        except re.error:
            continue
    return cfg["r"]


def _sizes(module: torch.nn.Module) -> tuple[int, int] | None:
    """(in, out) of a Linear or an Embedding (rows, dimension); None for a layer whose LoRA shapes vary."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features, module.out_features
    if isinstance(module, torch.nn.Embedding):
        return module.num_embeddings, module.embedding_dim
    return None


def check_fits(model: torch.nn.Module, cfg: dict, shapes: dict[str, tuple[int, ...]], adapter: str,
               name: str) -> set[str]:
    """The modules the adapter's weights adapt, each checked against ``model``: exists, sizes, rank."""
    other = _other_base(cfg, name)
    parts: dict[str, dict[str, tuple[int, ...]]] = {}
    for key, shape in shapes.items():
        m = _KEY.match(key)
        if m and len(shape) == 2:
            parts.setdefault(m["module"], {})[m["part"].replace("embedding_", "")] = shape
    missing = [mod for mod in parts if _module(model, mod) is None]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise OpsdError(f"adapter {adapter} does not fit model '{name}': it has LoRA weights for {missing[0]}{more}, "
                        f"which that model does not have: it was trained on another base model{other}")
    for mod, p in parts.items():
        a, b = p.get("lora_A"), p.get("lora_B")
        if a is None or b is None:
            raise OpsdError(f"adapter {adapter}: its weights for {mod} lack lora_{'A' if a is None else 'B'}: save "
                            "the adapter again")
        if a[0] != b[1]:
            raise OpsdError(f"adapter {adapter}: its weights for {mod} disagree on the rank (lora_A {a[0]}, lora_B "
                            f"{b[1]}): save the adapter again")
        want = _rank_of(cfg, mod)
        if a[0] != want:
            raise OpsdError(f"adapter {adapter}: its weights for {mod} have rank {a[0]} but {CONFIG} says r: {want}: "
                            f"set r to {a[0]} there if the weights are right, or save the adapter again")
        sizes = _sizes(_module(model, mod))
        if sizes is not None and (a[1], b[0]) != sizes:
            raise OpsdError(f"adapter {adapter} does not fit model '{name}': its LoRA weights for {mod} are for a "
                            f"{a[1]} -> {b[0]} layer, the model's is {sizes[0]} -> {sizes[1]}: it was trained on "
                            f"another base model{other}")
    return set(parts)


def _module(model: torch.nn.Module, name: str) -> torch.nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


def _other_base(cfg: dict, name: str) -> str:
    base = cfg.get("base_model_name_or_path")
    where = f" ('{base}', as its {CONFIG} says)" if base and not _same_name(str(base), name) else ""
    use = "that model" if where else "the model it was trained on"
    return f"{where}: use the adapter with {use}, or train one for '{name}'"


def merge_adapter(model, adapter: str, name: str, offline):
    """The LoRA adapter directory applied to ``model`` and merged into it (``offline``: the loader's context)."""
    path = Path(adapter).expanduser()
    cfg = _read_config(path, adapter)
    try:
        from peft import PeftModel
        from peft.tuners.lora import LoraLayer
    except ImportError:
        raise OpsdError(f"adapter {adapter} needs peft: pip install 'opsd-diag[peft]'") from None
    adapted = check_fits(model, cfg, weight_shapes(path, adapter), adapter, name)
    try:
        with held_warnings(), offline:
            wrapped = PeftModel.from_pretrained(model, str(path))
            empty = sorted(n.removeprefix("base_model.model.") for n, m in wrapped.named_modules()
                           if isinstance(m, LoraLayer) and n.removeprefix("base_model.model.") not in adapted)
            if empty:
                more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
                raise OpsdError(f"adapter {adapter} does not fit model '{name}': it targets {empty[0]}{more} of that "
                                f"model but holds no weights for it: it was trained on another base model"
                                f"{_other_base(cfg, name)}")
            merged = wrapped.merge_and_unload()
    except OpsdError:
        raise
    except Exception as e:  # noqa: BLE001 - what the checks above did not foresee, in one line
        if "not found in the base model" in str(e):  # peft's NoMatchingPeftModuleError: no module to adapt
            raise OpsdError(f"adapter {adapter} does not fit model '{name}': its {CONFIG} targets "
                            f"{cfg.get('target_modules')}, which that model does not have: it was trained on another "
                            f"base model{_other_base(cfg, name)}") from None
        raise OpsdError(f"cannot apply adapter {adapter} to model '{name}' ({describe(e, path, 'adapter_model.bin')}): "
                        "check that the adapter was trained on this model") from None
    _note_other_name(cfg, adapter, name)
    return merged.requires_grad_(True)  # peft froze the base weights; a loaded model is trainable


def _note_other_name(cfg: dict, adapter: str, name: str) -> None:
    """One line when the adapter fits but its config names a model of another name (shapes cannot tell
    Qwen3-1.7B from Qwen3-1.7B-Base)."""
    base = cfg.get("base_model_name_or_path")
    if base and not _same_name(str(base), name):
        print(f"warning: adapter {adapter} was trained on '{base}' (its {CONFIG}), not on '{name}': its shapes fit, "
              "so it is merged; check that it belongs to this model", file=sys.stderr)


def _same_name(a: str, b: str) -> bool:
    """Two model references with one last path component (a hub id and a local copy of it agree)."""
    return Path(a.rstrip("/")).name.lower() == Path(b.rstrip("/")).name.lower()
