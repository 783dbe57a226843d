"""On-policy sampling with our own decode loop: a plain ancestral-sampling loop that drops finished rows.

HF ``generate`` keeps every row of a batch in the forward pass until the longest one ends, and
grows its KV cache by concatenation for all of them. In a training step most rows end well before
the longest (on the toy zoo: mean ~37 of up to 72 tokens), so this loop removes a row from the
batch and from the cache as soon as it samples a stop id. Each token is drawn from the same
distribution as ``opsd_diag.engine.sampling.sample_hf`` (softmax of the float32 logits at the sampling
temperature, nucleus cut as HF's ``TopPLogitsWarper``, no other processor), with the same seeding
(the global RNG reseeded per generation batch from the chunk seed): until the first row of a batch
finishes, the draws are identical to ``sample_hf``'s; after that the random stream differs because
fewer rows draw.

Models whose generation needs more than a KV cache (a model-specific
``prepare_inputs_for_generation``, encoder-decoders, caches other than full or sliding-window
attention) go through ``sample_hf`` unchanged.

Per-call overhead dominates decoding a small batch, so the loop runs under ``inference_mode`` (no
autograd bookkeeping at all, unlike ``generate``'s ``no_grad``) and, for SDPA models with full
attention only, hands each one-token step its padding mask already in 4-D form (a one-token query
attends every non-pad key), which skips the causal-mask construction of every call.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from opsd_diag.engine.sampling import (
    Completion,
    cache_kwarg,
    check_finite,
    completion,
    layer_types,
    per_prompt,
    sample_hf,
    sampled_logprobs,
    seeded_batches,
    warp,
)
from opsd_diag.config.settings import SamplingSettings


def supported(model) -> bool:
    """Whether the plain loop reproduces what ``generate`` would feed this model."""
    from transformers.generation.utils import GenerationMixin

    cfg = model.config
    if getattr(cfg, "is_encoder_decoder", False) or cache_kwarg(inspect.signature(model.forward).parameters) is None:
        return False
    if type(model).prepare_inputs_for_generation is not GenerationMixin.prepare_inputs_for_generation:
        return False
    return layer_types(model) <= {"full_attention", "sliding_attention"}


def _one_token_mask(model):
    """Function of the 2-D padding mask giving what one decode step is passed as ``attention_mask``.

    A 4-D boolean mask is returned as is by HF's mask preparation; only SDPA reads booleans as
    "attend" and only full attention has no other per-layer mask, so anything else keeps the 2-D mask.
    """
    if layer_types(model) == {"full_attention"} and getattr(model.config, "_attn_implementation", None) == "sdpa":
        return lambda att: att[:, None, None, :].bool()  # [b, 1, 1, kv]
    return lambda att: att


def _sample_batch(model, batch: list[list[int]], s: SamplingSettings, stop_ids: list[int], pad_id: int,
                  cache_kwarg: str, logits_kw: dict, step_mask) -> list[Completion]:
    device = next(model.parameters()).device
    b, width = len(batch), max(len(p) for p in batch)
    ids = torch.full((b, width), pad_id, dtype=torch.long)  # [b, P] left-padded, as generate
    att = torch.zeros_like(ids)  # [b, P]
    for i, p in enumerate(batch):
        ids[i, width - len(p):] = torch.tensor(p)
        att[i, width - len(p):] = 1
    ids, att = ids.to(device), att.to(device)
    pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 1)  # [b, P] as generate derives them
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, **{cache_kwarg: cache},
                **logits_kw)
    stop = torch.tensor(stop_ids, device=device)
    rows = getattr(model, "opsd_scored_rows", None)  # a head padded beyond the tokenizer: never sample padding
    tokens = torch.full((b, s.max_new_tokens), pad_id, dtype=torch.long, device=device)  # [b, T]
    logps = torch.zeros((b, s.max_new_tokens), device=device)  # [b, T] each drawn id's log-prob
    alive = torch.arange(b, device=device)  # batch rows still sampling
    last = pos[:, -1]  # [alive] position of each row's latest token
    for t in range(s.max_new_tokens):
        scores = warp(out.logits[:, -1, :rows].float(), s.temperature, s.top_p)  # [alive, V] token rows only
        bad = torch.isnan(scores).any(-1) | torch.isposinf(scores).any(-1)  # [alive] NaN/inf: nothing to sample
        scores = scores.masked_fill(bad[:, None], 0.0)  # such a row draws something; the run stops below
        probs = scores.softmax(dim=-1)  # [alive, V]
        nxt = torch.multinomial(probs, num_samples=1).squeeze(1)  # [alive]
        tokens[alive, t] = nxt
        logps[alive, t] = sampled_logprobs(probs, nxt)
        done = torch.isin(nxt, stop)  # [alive]
        any_bad, all_done, any_done = torch.stack([bad.any(), done.all(), done.any()]).tolist()  # one sync
        if any_bad:
            check_finite(out.logits[:, -1].float(), t)  # raises NonFiniteLogits naming the row and position
        if t == s.max_new_tokens - 1 or all_done:
            break
        if any_done:
            keep = (~done).nonzero().squeeze(1)
            alive, nxt, att, last = alive[keep], nxt[keep], att[keep], last[keep]
            cache.batch_select_indices(keep)
        att = torch.cat([att, att.new_ones((len(alive), 1))], dim=1)  # [alive, P + t + 1]
        last = last + 1
        out = model(input_ids=nxt[:, None], attention_mask=step_mask(att), position_ids=last[:, None],
                    use_cache=True, **{cache_kwarg: cache})
    return [completion(row, stop_ids, lp) for row, lp in zip(tokens.tolist(), logps.tolist())]


@torch.inference_mode()
def sample(model, tok, prompts: list[list[int]], s: SamplingSettings, stop_ids: list[int]) -> list[list[Completion]]:
    """``s.num_samples`` completions per prompt, the contract of ``sample_hf``; deterministic for a seed."""
    if not supported(model):
        return sample_hf(model, tok, prompts, s, stop_ids)
    params = inspect.signature(model.forward).parameters
    kwarg = cache_kwarg(params)
    logits_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    step_mask = _one_token_mask(model)
    out: list[Completion] = []
    for batch in seeded_batches(prompts, s):  # the global RNG reseeded per batch, as sample_hf does
        out += _sample_batch(model, batch, s, stop_ids, tok.pad_token_id, kwarg, logits_kw, step_mask)
    return per_prompt(out, len(prompts), s)
