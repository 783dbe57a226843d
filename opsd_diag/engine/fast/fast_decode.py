"""Fast on-policy sampling: a static KV cache and decode steps captured as CUDA graphs per shape bucket.

The contract is ``opsd_diag.engine.sampling.sample_hf``'s (``s.num_samples`` completions per prompt, each up to
and including its first stop id) and the draws are those of ``opsd_diag.engine.decode``: each token from
softmax(float32 logits / temperature) with HF's nucleus cut, nothing from a checkpoint's
generation_config, the global RNG reseeded per generation batch from the chunk seed, and one
``torch.multinomial`` over the rows still sampling, in batch order. So for the same logits this
engine draws exactly what ``opsd_diag.engine.decode.sample`` draws.

What differs is how the logits are computed (measured on an H200 at Qwen3-1.7B's shape, HF's
eager decode step costs ~67 ms at batch 8 and at batch 64 alike: Python and kernel launches, not
GPU work):

- The KV cache is one set of preallocated buffers per model, ``[rows, kv_heads, length, head_dim]``
  per layer (``SlotCache``, a ``transformers`` ``Cache`` whose every step writes one slot in place),
  so a decode step has fixed tensor addresses and can be replayed as a CUDA graph.
- Shapes are bucketed: rows to powers of two, the key length a step attends to geometrically
  (``static_cache.bucket``: 256, 384, 512, 768, ...). One graph per (row bucket, key-length bucket) is
  captured on first use and reused by every later call with the same buckets (the trainer's steps,
  the predictor's continuations).
- Finished rows are dropped at bucket granularity: a finished row stops drawing at once; when the
  rows still sampling fit a smaller row bucket they are moved to the front of the buffers (cache,
  mask, positions) and the smaller bucket's graph runs from then on.
- Every step attends with an explicit 4-D mask (boolean for SDPA, additive for eager attention)
  passed as the model's per-layer-type mask mapping, so HF's mask construction is skipped and a
  decode step has no host synchronisation inside it; outside it, one per step (``static_cache``).
- Each token is drawn as ``torch.multinomial(probs, 1)`` draws it (ATen's single-sample path:
  the argmax of ``probs / E`` with ``E ~ Exp(1)`` from the same generator), without the validity
  check whose ``.item()`` would be a second host synchronisation per step: non-finite scores are
  caught by the step's one synchronisation instead.

On CPU (or with ``OPSD_CUDA_GRAPHS=0``) the same static-cache loop runs eagerly: that is what the
CPU tests compare against the reference. Models whose generation needs more than a full-attention
KV cache (sliding-window or linear-attention layers, encoder-decoders, a custom
``prepare_inputs_for_generation``, attention other than SDPA or eager, FSDP-sharded parameters)
go to the reference sampler unchanged.

Why not FSDP2 students (yet): ``fully_shard`` installs forward hooks on every unit (all-gather,
reshard and stream bookkeeping) that run at every forward and cannot be captured in a CUDA graph, and
each unshard allocates the gathered parameters anew, so the addresses a graph captured go stale at
the next step. Sampling an FSDP2 student fast needs a plain (unwrapped) replica of the gathered
weights, refreshed in place after each step, which costs a full copy of the model on every process,
the memory FSDP exists to save. Until that trade is measured, the trainer samples such a student
with the reference loop inside ``trainer.sharded.full_params`` (every unit gathered once per step).

Selection: ``pick(reference, engine)`` returns the sampler to call for the config's ``sampling.engine``
(``hf``: today's path, the default; ``static``: this engine). The buffers, graphs and cache live in
``engine.fast.static_cache``.
"""

from __future__ import annotations

import functools
import inspect
import logging

import torch

from opsd_diag.engine.sampling import (Completion, cache_kwarg, completion, layer_types, per_prompt,
                                      sampled_logprobs, seeded_batches, warp)
from opsd_diag.engine.fast.static_cache import engine_for
from opsd_diag.config.settings import SamplingSettings

log = logging.getLogger(__name__)

ENGINES = ("hf", "static")  # sampling.engine: hf (today's path) or static (this engine)


# ------------------------------------------------------------------------------------------- selection

def pick(reference, engine: str):
    """The sampler to call, with ``reference``'s signature ``(model, tok, prompts, settings, stop_ids)``.

    ``hf`` returns ``reference`` itself (today's path); ``static`` returns this engine, which hands a
    model it cannot run to ``reference``.
    """
    if engine not in ENGINES:
        raise ValueError(f"sampling engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "hf":
        return reference
    return functools.partial(sample_static, fallback=reference)


# ------------------------------------------------------------------------------------------- support

def unsupported_reason(model) -> str | None:
    """Why this engine cannot run ``model`` (then the reference sampler does), or None."""
    from transformers.generation.utils import GenerationMixin

    cfg = model.config
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder model"
    if cache_kwarg(inspect.signature(model.forward).parameters) is None:
        return "the forward takes no KV cache"
    if type(model).prepare_inputs_for_generation is not GenerationMixin.prepare_inputs_for_generation:
        return "model-specific prepare_inputs_for_generation"
    if layer_types(model) != {"full_attention"}:
        return f"layer types {sorted(layer_types(model))} (full attention only)"
    impl = getattr(cfg, "_attn_implementation", None)
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r} (sdpa or eager only)"
    if any(type(p).__name__ == "DTensor" for p in model.parameters()) or \
            any(type(m).__name__.startswith("FSDP") for m in model.modules()):
        return "FSDP-sharded model (its hooks gather parameters per forward)"
    if len({p.device for p in model.parameters()}) > 1:
        return "parameters on several devices"
    return None


def draw(probs: torch.Tensor) -> torch.Tensor:
    """[n, V] probabilities -> [n] ids, exactly ``torch.multinomial(probs, 1).squeeze(1)`` for the same RNG state
    (its single-sample algorithm), without the ``.item()`` of its validity check."""
    return (probs / torch.empty_like(probs).exponential_(1)).argmax(-1)


def multinomial_chooser(temperature: float, top_p: float, logps: torch.Tensor | None = None):
    """``choose`` for the engine; ``logps`` [b, T], when given, gets each drawn id's log-prob at [row, t]."""
    def choose(scores, rows, t):  # finite scores: the engine checks them in its one sync per step
        probs = warp(scores, temperature, top_p).softmax(dim=-1)
        nxt = draw(probs)
        if logps is not None:
            logps[rows, t] = sampled_logprobs(probs, nxt)
        return nxt
    return choose


_WARNED: set = set()


def sample_static(model, tok, prompts: list[list[int]], s: SamplingSettings, stop_ids: list[int], *,
                  fallback=None) -> list[list[Completion]]:
    """``s.num_samples`` completions per prompt (the ``sample_hf`` contract); deterministic for a seed."""
    reason = unsupported_reason(model)
    if reason is not None:
        if fallback is None:
            raise ValueError(f"the static sampling engine cannot run this model: {reason}")
        if reason not in _WARNED:
            _WARNED.add(reason)
            log.warning("sampling engine 'static' cannot run this model (%s): using the reference sampler", reason)
        return fallback(model, tok, prompts, s, stop_ids)
    with torch.inference_mode():
        eng = engine_for(model)
        out: list[Completion] = []
        for batch in seeded_batches(prompts, s):  # the global RNG reseeded per batch, as sample_hf does
            logps = torch.zeros((len(batch), s.max_new_tokens), device=eng.device)  # [b, T]
            tokens = eng.generate(batch, s.max_new_tokens, stop_ids, tok.pad_token_id,
                                  multinomial_chooser(s.temperature, s.top_p, logps))
            out += [completion(row, stop_ids, lp) for row, lp in zip(tokens.tolist(), logps.tolist())]
    return per_prompt(out, len(prompts), s)


def forced_step_logits(model, prompts: list[list[int]], forced: list[list[int]], stop_ids: list[int],
                       pad_id: int) -> list[torch.Tensor]:
    """Teacher-forced run of the engine (tests, checks): row i is fed ``forced[i]`` (it ends at its first
    stop id, or after the longest row); returns, per row, the float32 logits ``[steps, V]`` the engine
    produced before each of its tokens, through the same prefill, decode steps, buckets and row drops
    as sampling."""
    max_new = max(len(f) for f in forced)
    seen: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(prompts))}

    def choose(scores, rows, t):
        nxt = []
        for r, row in enumerate(rows.tolist()):
            seen[row].append(scores[r].clone())
            nxt.append(forced[row][t] if t < len(forced[row]) else stop_ids[0])
        return torch.tensor(nxt, device=scores.device)

    with torch.inference_mode():
        engine_for(model).generate(prompts, max_new, stop_ids, pad_id, choose)
    return [torch.stack(seen[i]) for i in range(len(prompts))]
