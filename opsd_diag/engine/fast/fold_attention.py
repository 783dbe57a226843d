"""Decode-step attention that folds the query groups of a KV head instead of expanding K/V.

With grouped-query attention (``num_key_value_heads < num_attention_heads``) HF's eager path, and
the SDPA path of the transformers 5.1x releases whenever a mask is passed, repeat every KV head
``G`` times (``repeat_kv``): at every layer and decode step a ``[rows, heads, keys, head_dim]``
copy of K and V is written and read again. For a one-token query the ``G`` query heads of a KV
head can instead be read as ``G`` query positions of that head: ``[rows, kv_heads, G, head_dim]``
against the cache's ``[rows, kv_heads, keys, head_dim]``, the same dot products with no copy.
The mask of a decode step (``[rows, 1, 1, keys]``) is the same for every query position, so it
broadcasts unchanged.

The fast sampler (``engine.fast.static_cache``) runs its decode steps inside ``folded(model)``, which
points the model's attention at ``sdpa_folded`` / ``eager_folded`` for the duration. Anything but
a one-token, dropout-free, full-attention query (prefill, softcapping, attention sinks) is passed
to the model's own implementation unchanged.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

NAMES = {"sdpa": "opsd_sdpa_folded", "eager": "opsd_eager_folded"}  # the model's implementation -> ours


def fold_queries(query: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[b, H, 1, D] -> [b, kv_heads, G, D]: query head ``kv * G + r`` becomes position ``r`` of KV head ``kv``
    (the head order of ``repeat_kv``)."""
    b, h, _, d = query.shape
    return query.reshape(b, kv_heads, h // kv_heads, d)


def _unfold(out: torch.Tensor, heads: int) -> torch.Tensor:
    """[b, kv_heads, G, D] -> [b, 1, H, D], the layout HF's attention functions return."""
    return out.reshape(out.shape[0], heads, 1, out.shape[-1]).transpose(1, 2).contiguous()


def _foldable(query, key, dropout, kwargs) -> bool:
    extra = any(kwargs.get(k) is not None for k in ("softcap", "s_aux", "sinks", "sliding_window", "position_bias"))
    return query.shape[2] == 1 and query.shape[1] > key.shape[1] and not dropout and not extra


def sdpa_folded(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """HF's ``sdpa_attention_forward`` for a one-token query, with the query groups folded."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not _foldable(query, key, dropout, kwargs):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    q = fold_queries(query, key.shape[1])  # [b, Hkv, G, D]
    out = F.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask, scale=scaling)  # [b, Hkv, G, D]
    return _unfold(out, query.shape[1]), None


def eager_folded(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0, **kwargs):
    """HF's ``eager_attention_forward`` (float32 softmax, additive mask) for a one-token query, folded."""
    if not _foldable(query, key, dropout, kwargs):
        return _eager_reference(module)(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                        **kwargs)
    q = fold_queries(query, key.shape[1])  # [b, Hkv, G, D]
    scores = torch.matmul(q, key.transpose(2, 3)) * scaling  # [b, Hkv, G, L]
    if attention_mask is not None:
        scores = scores + attention_mask  # [b, 1, 1, L] broadcasts over heads and groups
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # [b, Hkv, G, L]
    return _unfold(torch.matmul(weights, value), query.shape[1]), None


def _eager_reference(module):
    """The eager attention function of the module's own modeling file (each model family has its own)."""
    import sys

    return getattr(sys.modules[type(module).__module__], "eager_attention_forward")


@functools.cache
def _register() -> None:  # once, on first use (no import-time side effect)
    from transformers import AttentionInterface

    AttentionInterface.register(NAMES["sdpa"], sdpa_folded)
    AttentionInterface.register(NAMES["eager"], eager_folded)


@contextlib.contextmanager
def folded(model):
    """The model's attention is the folded one for the duration (its config is restored after)."""
    cfg = model.config
    impl = cfg._attn_implementation
    if impl not in NAMES:
        yield
        return
    _register()
    cfg._attn_implementation = NAMES[impl]  # the setter also sets it on the sub-configs (a text config)
    try:
        yield
    finally:
        cfg._attn_implementation = impl
