"""The static KV cache and the captured decode steps of the fast sampler (``engine.fast_decode``).

One set of preallocated buffers per model, ``[rows, kv_heads, length, head_dim]`` per layer, written
in place one slot per step (``SlotCache``, a ``transformers`` ``Cache``), so every decode step has
fixed tensor addresses and is captured once per (row bucket, key-length bucket) as a CUDA graph.
``OPSD_CUDA_GRAPHS=0`` runs the same steps eagerly (debugging a capture); results do not change.
"""

from __future__ import annotations

import inspect
import logging
import os
import weakref

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from opsd_diag.engine.sampling import cache_kwarg

log = logging.getLogger(__name__)

GRAPHS_ENV = "OPSD_CUDA_GRAPHS"
LENGTH_BUCKET = 256  # the cache holds a multiple of this many positions
KV_BUCKET = 256  # a decode step attends to a multiple of this many keys (its own graph per multiple)


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


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


class _Engine:
    """Static buffers, step inputs and captured graphs of one model."""

    def __init__(self, model):
        self.model = model
        params = inspect.signature(model.forward).parameters
        self.cache_kwarg = cache_kwarg(params)
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
        # a head padded beyond the tokenizer (io.models.limit_rows): its token rows only, never a padding row
        return self.model(**kw).logits[:, -1, :getattr(self.model, "opsd_scored_rows", None)]  # [rows, V]

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
