"""What kind of decoder a sampler drives: the name of its forward's KV-cache argument and its attention layer types.

A leaf (no project import), so the reference samplers (``engine.sampling``, ``engine.decode``) and the fast one
(``engine.fast.static_cache``) read a model the same way without importing each other.
"""

from __future__ import annotations


def cache_kwarg(params) -> str | None:
    """Name of the forward's KV-cache argument, from ``inspect.signature(model.forward).parameters``."""
    for name in ("cache", "past_key_values"):  # transformers >= 5.x renamed past_key_values to cache
        if name in params:
            return name
    return None


def layer_types(model) -> set[str]:
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return set(getattr(text, "layer_types", None) or ["full_attention"])
