"""Fast on-policy sampling: a static KV cache and decode steps captured as CUDA graphs per shape bucket.

The contract is ``opsd_diag.rollout.sample_hf``'s (``s.num_samples`` completions per prompt, each up to
and including its first stop id) and the draws are those of ``trainer.sampler``: each token from
softmax(float32 logits / temperature) with HF's nucleus cut, nothing from a checkpoint's
generation_config, the global RNG reseeded per generation batch from the chunk seed, and one
``torch.multinomial`` over the rows still sampling, in batch order. So for the same logits this
engine draws exactly what ``trainer.sampler.sample`` draws.

What differs is how the logits are computed (measured on an H200 at Qwen3-1.7B's shape, HF's
eager decode step costs ~67 ms at batch 8 and at batch 64 alike: Python and kernel launches, not
GPU work):

- The KV cache is one set of preallocated buffers per model, ``[rows, kv_heads, length, head_dim]``
  per layer (``SlotCache``, a ``transformers`` ``Cache`` whose every step writes one slot in place),
  so a decode step has fixed tensor addresses and can be replayed as a CUDA graph.
- Shapes are bucketed: rows to powers of two, the key length a step attends to up to a multiple of
  ``KV_BUCKET``. One graph per (row bucket, key-length bucket) is captured on first use and reused
  by every later call with the same buckets (the trainer's steps, the predictor's continuations).
- Finished rows are dropped at bucket granularity: a finished row stops drawing at once; when the
  rows still sampling fit a smaller row bucket they are moved to the front of the buffers (cache,
  mask, positions) and the smaller bucket's graph runs from then on.
- Every step attends with an explicit 4-D mask (boolean for SDPA, additive for eager attention)
  passed as the model's per-layer-type mask mapping, so HF's mask construction is skipped and a
  decode step has no host synchronisation inside it.

On CPU (or with ``OPSD_CUDA_GRAPHS=0``) the same static-cache loop runs eagerly: that is what the
CPU tests compare against the reference. Models whose generation needs more than a full-attention
KV cache (sliding-window or linear-attention layers, encoder-decoders, a custom
``prepare_inputs_for_generation``, attention other than SDPA or eager, FSDP-sharded parameters)
go to the reference sampler unchanged.

Selection: ``pick(reference, engine)`` returns the sampler to call; the engine comes from the
argument, else from the environment variable ``OPSD_SAMPLING_ENGINE`` (``hf``: today's path, the
default; ``static``: this engine).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import weakref

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from opsd_diag.rollout import Completion, SamplingSettings
from opsd_diag.views import trim_completion

log = logging.getLogger(__name__)

ENGINE_ENV = "OPSD_SAMPLING_ENGINE"
GRAPHS_ENV = "OPSD_CUDA_GRAPHS"
ENGINES = ("hf", "static")
LENGTH_BUCKET = 256  # the cache holds a multiple of this many positions
KV_BUCKET = 256  # a decode step attends to a multiple of this many keys (its own graph per multiple)


# ------------------------------------------------------------------------------------------- selection

def engine_name(engine: str | None = None) -> str:
    """The sampling engine: the argument, else ``$OPSD_SAMPLING_ENGINE``, else ``hf`` (today's path)."""
    name = (engine or os.environ.get(ENGINE_ENV) or "hf").strip().lower()
    if name not in ENGINES:
        raise ValueError(f"sampling engine must be one of {', '.join(ENGINES)}, got {name!r} "
                         f"(argument or ${ENGINE_ENV})")
    return name


def pick(reference, engine: str | None = None):
    """The sampler to call, with ``reference``'s signature ``(model, tok, prompts, settings, stop_ids)``.

    ``hf`` returns ``reference`` itself (today's path); ``static`` returns this engine, which hands a
    model it cannot run to ``reference``.
    """
    if engine_name(engine) == "hf":
        return reference
    return functools.partial(sample_static, fallback=reference)


# ------------------------------------------------------------------------------------------- support

def _layer_types(model) -> set[str]:
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return set(getattr(text, "layer_types", None) or ["full_attention"])


def _cache_kwarg(params) -> str | None:
    for name in ("cache", "past_key_values"):  # transformers >= 5.x renames past_key_values to cache
        if name in params:
            return name
    return None


def unsupported_reason(model) -> str | None:
    """Why this engine cannot run ``model`` (then the reference sampler does), or None."""
    from transformers.generation.utils import GenerationMixin

    cfg = model.config
    if getattr(cfg, "is_encoder_decoder", False):
        return "encoder-decoder model"
    if _cache_kwarg(inspect.signature(model.forward).parameters) is None:
        return "the forward takes no KV cache"
    if type(model).prepare_inputs_for_generation is not GenerationMixin.prepare_inputs_for_generation:
        return "model-specific prepare_inputs_for_generation"
    if _layer_types(model) != {"full_attention"}:
        return f"layer types {sorted(_layer_types(model))} (full attention only)"
    impl = getattr(cfg, "_attn_implementation", None)
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r} (sdpa or eager only)"
    if any(type(p).__name__ == "DTensor" for p in model.parameters()) or \
            any(type(m).__name__.startswith("FSDP") for m in model.modules()):
        return "FSDP-sharded model (its hooks gather parameters per forward)"
    if len({p.device for p in model.parameters()}) > 1:
        return "parameters on several devices"
    return None


# ------------------------------------------------------------------------------------------- the cache

class _SlotLayer(CacheLayerMixin):
    """Bookkeeping only: ``SlotCache.update`` does the work (one class across transformers 5.x)."""

    is_compileable = True

    def __init__(self, length: int):
        super().__init__()
        self.length = length

    def lazy_initialization(self, key_states, value_states):  # buffers belong to the engine
        return None

    def update(self, key_states, value_states, *args, **kwargs):  # pragma: no cover - SlotCache.update
        raise RuntimeError("SlotCache.update writes the buffers")

    def get_mask_sizes(self, *args, **kwargs):
        return self.length, 0

    def get_seq_length(self, *args, **kwargs) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.length

    def get_max_cache_shape(self) -> int:
        return self.length


class SlotCache(Cache):
    """A view of the engine's static buffers: writes the new keys/values at ``positions`` in place and
    returns the first ``kv_len`` positions of the first ``rows`` rows (what this step attends to)."""

    def __init__(self, store: _Engine, rows: int, positions: torch.Tensor, kv_len: int, seen: int):
        super().__init__(layers=[_SlotLayer(seen) for _ in range(store.n_layers)])
        self.store, self.rows, self.positions, self.kv_len = store, rows, positions, kv_len

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        k, v = self.store.buffers(layer_idx, key_states, value_states)
        k, v = k[:self.rows], v[:self.rows]  # [rows, H, L, D] views of the static buffers
        k.index_copy_(2, self.positions, key_states.to(k.dtype))
        v.index_copy_(2, self.positions, value_states.to(v.dtype))
        return k[:, :, :self.kv_len], v[:, :, :self.kv_len]


# ------------------------------------------------------------------------------------------- sampling

def warp(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """[b, V] float32 scores: temperature, then HF's nucleus cut (the top token always stays).

    The same operations as ``trainer.sampler._warp`` and HF's ``TemperatureLogitsWarper`` +
    ``TopPLogitsWarper``.
    """
    scores = logits / temperature if temperature != 1.0 else logits
    if top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[..., -1:] = False
        scores = scores.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))
    return scores


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class _Engine:
    """Static buffers, step inputs and captured graphs of one model."""

    def __init__(self, model):
        self.model = model
        params = inspect.signature(model.forward).parameters
        self.cache_kwarg = _cache_kwarg(params)
        self.logits_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.takes_cache_position = "cache_position" in params  # transformers 5.0-5.1x
        self.bool_mask = model.config._attn_implementation == "sdpa"
        text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.n_layers = text.num_hidden_layers
        self.device = next(model.parameters()).device
        self.rows_cap = self.len_cap = 0
        self.k: list[torch.Tensor | None] = []
        self.v: list[torch.Tensor | None] = []
        self.graphs: dict = {}
        self.graphs_ok = self.device.type == "cuda" and os.environ.get(GRAPHS_ENV, "1") != "0"
        self.pool = None
        self.fingerprint = self._fingerprint()
        self.stats = {"captures": 0, "replays": 0, "eager_steps": 0, "compactions": 0}

    def _fingerprint(self):
        return tuple((p.data_ptr(), p.dtype) for p in self.model.parameters()), self.model.training

    # -- buffers
    def reserve(self, rows: int, length: int, pad_id: int) -> None:
        """Room for ``rows`` rows x ``length`` positions; anything smaller is freed (graphs with it)."""
        if rows <= self.rows_cap and length <= self.len_cap:
            return
        self.rows_cap, self.len_cap = max(rows, self.rows_cap), max(length, self.len_cap)
        self.graphs.clear()
        self.k, self.v = [None] * self.n_layers, [None] * self.n_layers  # allocated by the next prefill
        R, L, dev = self.rows_cap, self.len_cap, self.device
        self.ids = torch.full((R, 1), pad_id, dtype=torch.long, device=dev)  # [R, 1] next input token
        self.pos = torch.zeros((R, 1), dtype=torch.long, device=dev)  # [R, 1] its position id
        self.mask = torch.zeros((R, 1, 1, L), dtype=torch.bool, device=dev)  # [R, 1, 1, L] keys a row attends
        self.write_pos = torch.zeros((1,), dtype=torch.long, device=dev)  # [1] the cache slot being written

    def buffers(self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor):
        k = self.k[layer]
        if k is None or k.dtype != key_states.dtype or k.shape[1] != key_states.shape[1] \
                or k.shape[3] != key_states.shape[3]:
            if k is not None:
                self.graphs.clear()  # a new dtype (autocast switched): old graphs point at old buffers
            shape_k = (self.rows_cap, key_states.shape[1], self.len_cap, key_states.shape[3])
            shape_v = (self.rows_cap, value_states.shape[1], self.len_cap, value_states.shape[3])
            self.k[layer] = torch.zeros(shape_k, dtype=key_states.dtype, device=self.device)
            self.v[layer] = torch.zeros(shape_v, dtype=value_states.dtype, device=self.device)
        return self.k[layer], self.v[layer]

    # -- forwards
    def _masks(self, mask: torch.Tensor):
        if self.bool_mask:
            return {"full_attention": mask}
        additive = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
        return {"full_attention": additive.masked_fill(~mask, torch.finfo(torch.float32).min)}

    def _forward(self, ids, pos, mask, cache, positions):
        kw = {"input_ids": ids, "position_ids": pos, "attention_mask": self._masks(mask), "use_cache": True,
              self.cache_kwarg: cache, **self.logits_kw}
        if self.takes_cache_position:
            kw["cache_position"] = positions
        return self.model(**kw).logits[:, -1]  # [rows, V]

    def prefill(self, ids: torch.Tensor, att: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b, W = ids.shape
        positions = torch.arange(W, device=self.device)
        causal = positions[None, :] <= positions[:, None]  # [W, W] key <= query
        # a pad query attends itself only, so its (never attended) keys and values stay finite
        mask = causal[None] & (att.bool()[:, None, :] | torch.eye(W, dtype=torch.bool, device=self.device))
        cache = SlotCache(self, b, positions, W, 0)
        return self._forward(ids, pos, mask[:, None], cache, positions)  # [b, V]

    def _step_fn(self, rows: int, kv_len: int, seen: int):
        cache = SlotCache(self, rows, self.write_pos, kv_len, seen)
        ids, pos, mask = self.ids[:rows], self.pos[:rows], self.mask[:rows, :, :, :kv_len]
        return lambda: self._forward(ids, pos, mask, cache, self.write_pos)

    def step(self, rows: int, kv_len: int, seen: int) -> torch.Tensor:
        """One decode step over the first ``rows`` rows, reading ``ids``/``pos``/``mask``/``write_pos``."""
        if not self.graphs_ok:
            self.stats["eager_steps"] += 1
            return self._step_fn(rows, kv_len, seen)()
        ac = torch.is_autocast_enabled("cuda")
        ac_dtype = torch.get_autocast_dtype("cuda") if ac else None
        key = (rows, kv_len, ac, ac_dtype, self.model.training)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(self._step_fn(rows, kv_len, seen), ac, ac_dtype)
                self.stats["captures"] += 1
            except Exception as e:  # noqa: BLE001 - any capture failure: keep sampling, eagerly
                log.warning("CUDA-graph capture failed (%s: %s); decode steps run eagerly on the static cache",
                            type(e).__name__, str(e).splitlines()[0][:200])
                self.graphs_ok = False
                torch.cuda.synchronize()
                return self.step(rows, kv_len, seen)
        graph, out = self.graphs[key]
        graph.replay()
        self.stats["replays"] += 1
        return out

    def _capture(self, fn, ac: bool, ac_dtype):
        def run():
            # no autocast weight cache inside a graph: the casts are part of the replay (weights change in place)
            with torch.autocast("cuda", dtype=ac_dtype or torch.bfloat16, enabled=ac, cache_enabled=False):
                return fn()

        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (idempotent: rewrites the same slot with the same values)
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            out = run()
        return graph, out

    def compact(self, keep: torch.Tensor, n_slots: int) -> None:
        """Move the slots ``keep`` (ascending) to the front of every buffer."""
        n = keep.numel()
        for buf in (*self.k, *self.v):
            if buf is not None:
                buf[:n] = buf.index_select(0, keep)
        for buf in (self.ids, self.pos, self.mask):
            buf[:n] = buf.index_select(0, keep)
        self.stats["compactions"] += 1

    # -- one generation batch
    def generate(self, batch: list[list[int]], max_new: int, stop_ids: list[int], pad_id: int, choose):
        """Token ids ``[b, max_new]`` (pad after a row's first stop id); ``choose(scores [n, V], rows [n], t)``
        returns the next token of each row still sampling (in batch order)."""
        dev = self.device
        b, W = len(batch), max(len(p) for p in batch)
        ids = torch.full((b, W), pad_id, dtype=torch.long)  # [b, W] left-padded, as generate
        att = torch.zeros_like(ids)
        for i, p in enumerate(batch):
            ids[i, W - len(p):] = torch.tensor(p)
            att[i, W - len(p):] = 1
        ids, att = ids.to(dev), att.to(dev)
        pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 1)  # [b, W] as generate derives them
        self.reserve(_pow2(b), _round_up(W + max_new, LENGTH_BUCKET), pad_id)
        logits = self.prefill(ids, att, pos)  # [b, V]
        bucket = _pow2(b)
        self.mask[:bucket].zero_()
        self.mask[:b, 0, 0, :W] = att.bool()
        self.ids[:bucket].fill_(pad_id)
        self.pos[:bucket].zero_()
        self.pos[:b, 0] = pos[:, -1]
        stop = torch.tensor(stop_ids, device=dev)
        tokens = torch.full((b, max_new), pad_id, dtype=torch.long, device=dev)  # [b, T]
        slot_row = torch.arange(b, device=dev)  # batch row held by each slot (ascending)
        alive = slot_row  # slots still sampling (ascending)
        all_alive = True
        for t in range(max_new):
            scores = (logits if all_alive else logits[alive]).float()  # [n, V]
            nxt = choose(scores, slot_row[alive], t)  # [n]
            tokens[slot_row[alive], t] = nxt
            done = torch.isin(nxt, stop)  # [n]
            n_done = int(done.sum())  # the one host sync of a step
            if t == max_new - 1 or n_done == alive.numel():
                break
            if n_done:
                keep = (~done).nonzero().squeeze(1)
                alive, nxt, all_alive = alive[keep], nxt[keep], False
                if _pow2(alive.numel()) < bucket:  # fits a smaller row bucket: drop the finished rows
                    self.compact(alive, bucket)
                    slot_row, bucket = slot_row[alive], _pow2(alive.numel())
                    alive, all_alive = torch.arange(alive.numel(), device=dev), True
            slot = W + t  # cache position of the token fed now
            if all_alive:
                self.ids[:alive.numel(), 0] = nxt
            else:
                self.ids[alive, 0] = nxt
            self.pos[:bucket] += 1
            self.mask[:bucket, 0, 0, slot] = True  # every row attends the slot it writes (no empty row)
            self.write_pos.fill_(slot)
            logits = self.step(bucket, min(self.len_cap, _round_up(slot + 1, KV_BUCKET)), slot + 1)
            if all_alive and alive.numel() < bucket:
                logits = logits[:alive.numel()]
        return tokens


_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def engine_for(model) -> _Engine:
    """The model's engine (buffers and graphs), rebuilt when its parameters moved or its mode changed."""
    eng = _ENGINES.get(model)
    if eng is None or eng.fingerprint != eng._fingerprint():
        eng = _ENGINES[model] = _Engine(model)
    return eng


def multinomial_chooser(temperature: float, top_p: float):
    def choose(scores, rows, t):
        return torch.multinomial(warp(scores, temperature, top_p).softmax(dim=-1), num_samples=1).squeeze(1)
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
        rows = [p for p in prompts for _ in range(s.num_samples)]
        gen = torch.Generator(device="cpu").manual_seed(s.seed)
        choose = multinomial_chooser(s.temperature, s.top_p)
        out: list[Completion] = []
        for start in range(0, len(rows), s.batch_size):
            # the global RNG is reseeded per batch from the chunk seed, exactly as sample_hf and trainer.sampler
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
            tokens = eng.generate(rows[start:start + s.batch_size], s.max_new_tokens, stop_ids, tok.pad_token_id,
                                  choose)
            out += [Completion(*trim_completion(row, stop_ids)) for row in tokens.tolist()]
    return [out[i * s.num_samples:(i + 1) * s.num_samples] for i in range(len(prompts))]


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
