"""Load models and tokenizers (hub id or local path), pick device/dtype, check compatibility.

Offline by default: a hub id is only fetched when the spec says ``allow_download``, and while it is
false ``HF_HUB_OFFLINE`` is set for the load, so transformers and peft never retry the hub. Remote
code stays off unless the user turns it on. A tokenizer needs no chat template to load (a -Base
checkpoint as ``base``); the views that render one check for it (``io.views``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from opsd_diag.config.model_options import teacher_model_spec
from opsd_diag.errors import OpsdError
from opsd_diag.io.adapters import merge_adapter
from opsd_diag.io.chat_template import has_chat_template  # defined there, below io.views; still io.models' name
from opsd_diag.io.load_errors import describe, held_warnings, is_refused_pickle

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OpsdError(f"device '{device}' requested but CUDA is not available: use device: cpu or auto")
    if device.startswith("cuda:") and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise OpsdError(f"device '{device}' requested but this machine has {torch.cuda.device_count()} CUDA "
                        f"device(s) (cuda:0 to cuda:{torch.cuda.device_count() - 1}): use one of them, or auto")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise OpsdError("device 'mps' requested but Apple's MPS is not available here: use device: cpu or auto")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto``: bf16 on CUDA (when supported), float32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    return _DTYPES[dtype]


def _source_kwargs(name: str, revision: str | None, allow_download: bool, trust_remote_code: bool) -> dict:
    if not name.strip():
        raise OpsdError(f"the model name {name!r} is empty: give a local directory or a hub id 'org/name'")
    local = Path(name).expanduser()
    if local.is_file():
        raise OpsdError(f"model {name} is a file: point to the directory of a saved transformers model (its "
                        "config.json and weights)")
    if local.exists():
        if not (local / "config.json").is_file():
            raise OpsdError(f"model directory {name} has no config.json: point to a saved transformers model")
        return {"pretrained_model_name_or_path": str(local), "trust_remote_code": trust_remote_code,
                "_hint": "its files look damaged or incomplete: save the model (and tokenizer) again"}
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:  # a path, not a hub id
        raise OpsdError(f"model directory {name} does not exist: check the path (relative paths start from "
                        f"{Path.cwd()})")
    if name.count("/") == 0 or not allow_download:
        return {"pretrained_model_name_or_path": name, "revision": revision, "local_files_only": True,
                "trust_remote_code": trust_remote_code, "_hint": "save the model (and tokenizer) again, or fetch it "
                                                                 "again with allow_download: true",
                "_uncached": ("there is no directory of that name and it is not in the local Hugging Face cache: "
                              "give a local directory, or a hub id 'org/name' with allow_download: true"
                              if name.count("/") == 0 else
                              "it is not in the local Hugging Face cache and allow_download is false: set "
                              "allow_download: true for this model to fetch it, or give a local directory")}
    return {"pretrained_model_name_or_path": name, "revision": revision, "trust_remote_code": trust_remote_code}


def check_sources(models) -> None:
    """The load's own refusal of a model it cannot find (no such directory, no config.json, not in the local cache
    while downloads are off), raised before anything loads or starts: ``models`` are (who, ``ModelSpec``-like)
    pairs, and the message names who."""
    for who, m in models:
        try:
            uncached = _source_kwargs(m.model, m.revision, m.allow_download, False).get("_uncached")
        except OpsdError as e:
            raise OpsdError(f"{who}: {e}") from None
        if uncached and not _cached(m.model, m.revision):
            raise OpsdError(f"{who}: cannot load model '{m.model}': {uncached}")


def config_models(cfg, teachers=None, base: bool = True) -> list[tuple[str, object]]:
    """(who, ``ModelSpec``) of the models a diagnosis config names: the student, its base (when ``base``), and
    ``teachers`` (names; default every teacher) that are models, not the student shown a context, each as its load
    sees it."""
    out = [("student", cfg.student), *([("base", cfg.base)] if base and cfg.base is not None else [])]
    return out + [(f"teacher '{t.name}'", teacher_model_spec(cfg.student, t)) for t in cfg.teachers
                  if not t.is_self and (teachers is None or t.name in teachers)]


def _cached(name: str, revision: str | None) -> bool:
    """Whether the local Hugging Face cache holds hub model ``name`` (its config.json) at ``revision``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    except ValueError:  # not a valid repo id
        return False


@contextlib.contextmanager
def offline(active: bool):
    """``HF_HUB_OFFLINE=1`` (and huggingface_hub's constant read at import) for the duration of a load."""
    if not active:
        yield
        return
    from huggingface_hub import constants

    old_env, old_const = os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"], constants.HF_HUB_OFFLINE = "1", True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old_const
        if old_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old_env


def _load(loader, name: str, revision, allow_download: bool, trust_remote_code: bool, **extra):
    kwargs = _source_kwargs(name, revision, allow_download, trust_remote_code)
    hint = kwargs.pop("_hint", "check the name and your network access")
    uncached = kwargs.pop("_uncached", None)
    try:
        with held_warnings(), offline(not allow_download):
            return loader.from_pretrained(**kwargs, **extra)
    except Exception as e:  # noqa: BLE001 - a user's files: corrupt weights raise SafetensorError, shapes RuntimeError
        if uncached and not _cached(name, revision):  # transformers' own answer: a paragraph about the network
            raise OpsdError(f"cannot load model '{name}': {uncached}") from None
        local = Path(kwargs["pretrained_model_name_or_path"])
        first = describe(e, local if local.is_dir() else None)
        if "ignore_mismatched_sizes" in str(e):
            first, hint = ("its weights do not have the shapes its config.json declares (vocab_size, hidden_size, "
                           "...)", "fix config.json or save the model again")
        elif is_refused_pickle(e):
            hint = "use a safetensors copy of the weights (model.safetensors), from a source you trust"
        raise OpsdError(f"cannot load model '{name}' ({first}): {hint}") from None


@lru_cache(maxsize=8)
def load_tokenizer(name: str, revision: str | None = None, allow_download: bool = False,
                   trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    tok = _load(AutoTokenizer, name, revision, allow_download, trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # masks never derive from pad == eos; see views.py
    tok.padding_side = "left"
    return tok


@lru_cache(maxsize=4)
def load_model(name: str, revision: str | None = None, dtype: str = "auto", device: str = "auto",
               allow_download: bool = False, trust_remote_code: bool = False, device_map=None,
               attn_implementation: str | None = None, adapter: str | None = None) -> torch.nn.Module:
    """A causal LM in eval mode on the chosen device (or spread by ``device_map``, a str or a tuple of
    (module, device) pairs); a LoRA ``adapter`` is merged in. Cached so the app and repeated runs reuse it."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if dev.type == "cpu" and dt in (torch.float16, torch.bfloat16) and device_map is None:
        print(f"warning: model '{name}' runs in {str(dt).removeprefix('torch.')} on the CPU: half precision is slow "
              "there and loses accuracy (NaN/inf risk); use dtype: float32 or auto", file=sys.stderr)
    extra = {"dtype": dt}
    if device_map is not None:
        extra["device_map"] = dict(device_map) if isinstance(device_map, tuple) else device_map
        check_device_map(name, revision, allow_download, trust_remote_code, extra["device_map"])
    if attn_implementation is not None:
        extra["attn_implementation"] = attn_implementation
    model = _load(AutoModelForCausalLM, name, revision, allow_download, trust_remote_code, **extra)
    if adapter is not None:
        model = merge_adapter(model, adapter, name, offline(not allow_download))
    return (model if device_map is not None else model.to(dev)).eval()


def load_spec(spec, device: str) -> tuple[PreTrainedTokenizerBase, torch.nn.Module]:
    """(tokenizer, cached eval model) of a ``ModelSpec``; its own ``device`` wins over ``device``."""
    tok = load_tokenizer(spec.model, spec.revision, spec.allow_download, spec.trust_remote_code)
    model = load_model(*model_args(spec, device))
    limit_rows(model, len(tok))
    return tok, model


def model_args(spec, device: str, dtype: str | None = None) -> tuple:
    """``load_model``'s positional arguments for a ``ModelSpec`` (hashable: a device_map dict becomes pairs)."""
    dm = spec.device_map
    dm = tuple(sorted(dm.items())) if isinstance(dm, dict) else dm
    return (spec.model, spec.revision, dtype or spec.dtype, spec.device or device, spec.allow_download,
            spec.trust_remote_code, dm, spec.attn_implementation, spec.adapter)


def check_device_map(name: str, revision, allow_download: bool, trust_remote_code: bool, device_map) -> None:
    """A ``device_map`` of {module: device} names modules of this model, places every weight, and only on
    devices this machine has; checked on the model's skeleton (no weights) before the load."""
    if not isinstance(device_map, dict):
        return
    for module, where in device_map.items():
        what, cuda = (f"'{module}'" if module else "the whole model ('')"), str(where).startswith("cuda")
        index = int((str(where).split(":") + ["0"])[1]) if cuda else int(where) if str(where).isdigit() else None
        if where == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            have = "no MPS"
        elif index is not None and (not torch.cuda.is_available() or index >= torch.cuda.device_count()):
            have = f"{torch.cuda.device_count()} CUDA device(s)" if torch.cuda.is_available() else "no CUDA"
        else:
            continue
        raise OpsdError(f"device_map of model '{name}' puts {what} on {where}, but this machine has {have}: use "
                        "devices it has, or device_map: auto")
    from transformers import AutoConfig

    config = _load(AutoConfig, name, revision, allow_download, trust_remote_code)
    try:
        with held_warnings(), torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - no skeleton (an unknown architecture): the load itself says what is wrong
        return
    top = ", ".join(n for n, _ in skeleton.named_children())
    unknown = [k for k in device_map if k not in {n for n, _ in skeleton.named_modules()}
               and k not in {n for n, _ in skeleton.named_parameters()}]
    if unknown:
        raise OpsdError(f"device_map of model '{name}' names '{unknown[0]}', which is not a module of that model: use "
                        f"its module names (at the top: {top}), or device_map: auto")
    placed = [p for p, _ in skeleton.named_parameters()
              if not any(k == "" or p == k or p.startswith(k + ".") for k in device_map)]
    if placed:
        more = f" (and {len(placed) - 1} more)" if len(placed) > 1 else ""
        raise OpsdError(f"device_map of model '{name}' places no device for {placed[0]}{more}: map every module (a "
                        f"module covers what is inside it; at the top: {top}), or use device_map: auto")


SCORED_ROWS = "opsd_scored_rows"


def limit_rows(model: torch.nn.Module, n_tokens: int) -> torch.nn.Module:
    """Mark a model whose LM head has padding rows beyond its tokenizer (Qwen2.5 7B: 152,064 rows, 151,665
    tokens): scoring and sampling then use the first ``n_tokens`` rows only (``engine.scoring.lm_logits``)."""
    rows = model.get_output_embeddings().weight.shape[0]
    if rows > n_tokens:
        setattr(model, SCORED_ROWS, n_tokens)
    return model


def end_of_turn_ids(tok) -> list[int]:
    """The token(s) the chat template closes an assistant turn with (``<|im_end|>``, ``<|eot_id|>``,
    ``<end_of_turn>``, ``<turn|>``), found by rendering one turn; [] without a template."""
    if not has_chat_template(tok):
        return []
    mark = "OPSD-END-OF-TURN-PROBE"
    try:
        text = tok.apply_chat_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": mark}],
                                       tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render a turn (roles, ...): no end-of-turn from it
        return []
    after = text[text.rfind(mark) + len(mark):] if mark in text else ""
    ids = tok(after, add_special_tokens=False)["input_ids"] if after.strip() else []
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    return ids[:1] if ids and ids[0] in special else []


def stop_token_ids(model, tok, use_template: bool = True) -> list[int]:
    """Every id that ends a completion: the template's end-of-turn token first (SFT targets end with it),
    then the generation config's EOS ids and the tokenizer's EOS (also without generation_config.json)."""
    ids = end_of_turn_ids(tok) if use_template else []
    gen = model.generation_config.eos_token_id
    for i in ([] if gen is None else [gen] if isinstance(gen, int) else list(gen)) + [tok.eos_token_id]:
        if i is not None and i not in ids:
            ids.append(i)
    if not ids:
        raise OpsdError("the model defines no end-of-sequence token: set eos_token_id in its generation_config.json")
    return ids


def vocab_fingerprint(tok: PreTrainedTokenizerBase) -> str:
    """Hash of the token -> id map: equal fingerprints mean token ids mean the same text."""
    items = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def check_compatible(named: dict[str, tuple[str, PreTrainedTokenizerBase, torch.nn.Module]]) -> None:
    """All models score the same token ids, so they must share a vocabulary; LM heads may have padding rows
    beyond the tokenizer (compared on the tokenizer's rows only, see ``limit_rows``)."""
    ref_role, (ref_name, ref_tok, ref_model) = next(iter(named.items()))
    ref_fp = vocab_fingerprint(ref_tok)
    for role, (name, tok, model) in named.items():
        rows = model.get_input_embeddings().weight.shape[0]
        if len(tok) > rows:  # an id beyond the embedding table fails deep inside the forward
            raise OpsdError(f"{role} model '{name}' has {rows} embedding rows but its tokenizer {len(tok)} tokens: "
                            "the tokenizer does not belong to these weights (check config.json's vocab_size)")
        if vocab_fingerprint(tok) != ref_fp:
            raise OpsdError(f"{role} model '{name}' has a different tokenizer vocabulary from {ref_role} model "
                            f"'{ref_name}': student, teachers and base must share one tokenizer")
        out_rows = model.get_output_embeddings().weight.shape[0]
        if out_rows < len(tok):
            raise OpsdError(f"{role} model '{name}' has {out_rows} LM-head rows but its tokenizer {len(tok)} tokens: "
                            "the tokenizer does not belong to these weights (check config.json's vocab_size)")
        limit_rows(model, len(tok))


def positions(model: torch.nn.Module) -> int | None:
    """How many positions the model was built for (its config's ``max_position_embeddings``), or None."""
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        n = getattr(model.config, key, None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def check_fits(model: torch.nn.Module, who: str, prompts: list[list[int]], problems: list[dict], new_tokens: int,
               key: str, shorten: str = "shorten that prompt or leave the problem out",
               system: tuple[str, int] = ("", 0)) -> None:
    """Every prompt plus ``new_tokens`` (the setting ``key``) fits ``who``'s positions, or one error that
    names what is too long; checked before anything is written (a longer sequence fails mid-run).
    ``system``: (its key, the tokens the system prompt adds to each prompt): when the prompts would fit
    without it, the error names the system prompt, not the problem."""
    n = positions(model)
    if n is None or not prompts:
        return
    if new_tokens >= n:
        raise OpsdError(f"{key}={new_tokens} does not fit {who}, which has {n} positions (max_position_embeddings in "
                        f"its config.json) for the prompt and the completion together: set it below {n}")
    i = max(range(len(prompts)), key=lambda j: len(prompts[j]))
    if len(prompts[i]) + new_tokens > n:
        system_key, extra = system
        room = f"{n} positions (max_position_embeddings) for the prompt and the {new_tokens} new tokens of {key} " \
               "together"
        if extra and len(prompts[i]) - extra + new_tokens <= n:
            raise OpsdError(f"{system_key} is {extra} tokens, which makes the prompt of problem '{problems[i]['id']}' "
                            f"{len(prompts[i])} tokens for {who}, which has {room}: shorten {system_key}")
        raise OpsdError(f"problem '{problems[i]['id']}': its prompt is {len(prompts[i])} tokens for {who}, which has "
                        f"{room}: {shorten}, or lower {key}")


@torch.no_grad()
def check_finite_logits(model: torch.nn.Module, prompt: list[int], who: str, where: str) -> None:
    """One forward over ``prompt``: NaN or inf logits (broken weights, a float16 overflow) are an error
    naming ``who`` and the first bad position, before anything is written or sampled."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([prompt], device=device), use_cache=False).logits[0]  # [L, V]
    bad = (~torch.isfinite(logits)).any(-1).nonzero()
    if bad.numel():
        raise OpsdError(f"{who} produces non-finite logits (NaN or inf) on {where}, at prompt position "
                        f"{int(bad[0, 0])} of {len(prompt)}: check its weights for NaN/inf and its dtype (float16 "
                        "overflows: use bfloat16 or float32)")


def fingerprint(model: torch.nn.Module) -> str:
    """Cheap weight fingerprint for the manifest (sum of a few parameter tensors)."""
    h = hashlib.sha256()
    for _, p in list(model.named_parameters())[:4]:
        h.update(p.detach().float().cpu().numpy().tobytes()[:4096])
    return h.hexdigest()[:16]
