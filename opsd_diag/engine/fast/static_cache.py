"""The static KV cache and the captured decode steps of the fast sampler (``engine.fast.fast_decode``).

One set of preallocated buffers per model, ``[rows, kv_heads, length, head_dim]`` per layer, written
in place one slot per step (``SlotCache``, a ``transformers`` ``Cache``), so every decode step has
fixed tensor addresses and is captured once per (row bucket, key-length bucket) as a CUDA graph.
``OPSD_CUDA_GRAPHS=0`` runs the same steps eagerly (debugging a capture); results do not change.

What a GPU pays for and a CPU test cannot time, and how each is kept small:

- Buckets: rows to powers of two; the buffer length and the key length a step attends to are
  geometric (``bucket``: 256, 384, 512, 768, 1024, ... two per doubling, at most 1.5x padding), so
  an 8k context needs 11 key-length graphs per row bucket, not 32. The buffers grow to what a call
  needs and shrink again after ``SHRINK_AFTER`` calls in a row that used at most half of them (every
  reallocation drops the graphs that point at the old buffers).
- Under autocast (the trainer's float32 student in bf16) a replay would re-cast every Linear weight
  at every step; instead the engine keeps autocast-dtype copies of the Linear weights (the casts
  autocast itself would make, so the logits are bitwise the same) and feeds them to the model with
  ``torch.func.functional_call``. They are refreshed in place, before a generation call, for every
  weight an optimizer step changed (its version counter moved): the graphs stay valid. The KV
  buffers are in the autocast dtype too (attention casts K and V to it anyway).
- Decode steps attend with the query groups folded (``engine.fast.fold_attention``): no ``repeat_kv``.
- One host synchronisation per decode step: the non-finite check and the finished count are read
  together; the draw is ``torch.multinomial``'s own single-sample algorithm without its check.
- The engine cache holds models weakly (an engine refers to its model through a weak reference), so
  a model that is dropped is freed with its buffers and graphs.
"""

from __future__ import annotations

import inspect
import logging
import os
import weakref

import torch
from torch.func import functional_call
from transformers.cache_utils import Cache, CacheLayerMixin

from opsd_diag.engine.fast.fold_attention import folded
from opsd_diag.engine.decoder_kind import cache_kwarg
from opsd_diag.errors import NonFiniteLogits

log = logging.getLogger(__name__)

GRAPHS_ENV = "OPSD_CUDA_GRAPHS"
MIN_BUCKET = 256  # the smallest buffer length and key-length bucket
SHRINK_AFTER = 4  # generation calls in a row that needed smaller buffers before they shrink


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
        k, v = k[:self.rows], v[:self.rows]  # [rows, H, L, D] views of the static buffers (autocast dtype)
        k.index_copy_(2, self.positions, key_states.to(k.dtype))
        v.index_copy_(2, self.positions, value_states.to(v.dtype))
        return k[:, :, :self.kv_len], v[:, :, :self.kv_len]


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def bucket(n: int, lo: int = MIN_BUCKET) -> int:
    """The smallest of lo x {1, 1.5, 2, 3, 4, 6, 8, ...} holding ``n``: two buckets per doubling."""
    b = lo
    while True:
        if n <= b:
            return b
        if n <= b * 3 // 2:
            return b * 3 // 2
        b *= 2


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The dtype autocast casts matmul inputs to on ``device`` now, or None when it is off."""
    return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else None


class _Engine:
    """Static buffers, step inputs, autocast weight copies and captured graphs of one model."""

    def __init__(self, model):
        self._model = weakref.ref(model)  # the cache's values must not keep its keys alive
        params = inspect.signature(model.forward).parameters
        self.cache_kwarg = cache_kwarg(params)
        self.logits_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.takes_cache_position = "cache_position" in params  # transformers 5.0-5.1x
        self.bool_mask = model.config._attn_implementation == "sdpa"
        text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        self.n_layers = text.num_hidden_layers
        self.device = next(model.parameters()).device
        self.rows_cap = self.len_cap = 0
        self.recent: list[tuple[int, int]] = []  # what the last calls needed (rows, length), for shrinking
        self.k: list[torch.Tensor | None] = []
        self.v: list[torch.Tensor | None] = []
        self.graphs: dict = {}
        self.graphs_ok = self.device.type == "cuda" and os.environ.get(GRAPHS_ENV, "1") != "0"
        self.pool = None
        self.cast: dict[str, torch.Tensor] = {}  # Linear weight name -> its autocast-dtype copy
        self.cast_dtype: torch.dtype | None = None  # the dtype of those copies
        self.cast_src: list = []  # (name, source parameter, its version when copied)
        self.weights: dict[str, torch.Tensor] | None = None  # what this call's forwards run with (None: the model's)
        self.fingerprint = self._fingerprint()
        self.stats = {"captures": 0, "replays": 0, "eager_steps": 0, "compactions": 0, "allocations": 0,
                      "weight_refreshes": 0}

    @property
    def model(self):
        model = self._model()
        if model is None:
            raise RuntimeError("the model of this sampling engine was freed")
        return model

    def _fingerprint(self):
        return tuple((p.data_ptr(), p.dtype) for p in self.model.parameters()), self.model.training

    # -- buffers
    def reserve(self, rows: int, length: int, pad_id: int) -> None:
        """Room for ``rows`` rows x ``length`` positions (bucketed); shrinks when ``SHRINK_AFTER`` calls in a row used
        at most half of the rows or of the length."""
        if rows > self.rows_cap or length > self.len_cap:
            self.recent = []
            return self._allocate(max(rows, self.rows_cap), max(length, self.len_cap), pad_id)
        self.recent = [*self.recent[1 - SHRINK_AFTER:], (rows, length)]
        fit = (max(r for r, _ in self.recent), max(n for _, n in self.recent))
        # at most half of a dimension used: a call that comes back one bucket bigger must not drop every graph
        if len(self.recent) == SHRINK_AFTER and (2 * fit[0] <= self.rows_cap or 2 * fit[1] <= self.len_cap):
            self.recent = []
            self._allocate(*fit, pad_id)

    def _allocate(self, rows: int, length: int, pad_id: int) -> None:
        self.rows_cap, self.len_cap = rows, length
        self.graphs.clear()  # they point at the old buffers
        self.pool = None
        self.k, self.v = [None] * self.n_layers, [None] * self.n_layers  # allocated by the next prefill
        R, L, dev = self.rows_cap, self.len_cap, self.device
        self.ids = torch.full((R, 1), pad_id, dtype=torch.long, device=dev)  # [R, 1] next input token
        self.pos = torch.zeros((R, 1), dtype=torch.long, device=dev)  # [R, 1] its position id
        self.mask = torch.zeros((R, 1, 1, L), dtype=torch.bool, device=dev)  # [R, 1, 1, L] keys a row attends
        self.write_pos = torch.zeros((1,), dtype=torch.long, device=dev)  # [1] the cache slot being written
        self.stats["allocations"] += 1

    def buffers(self, layer: int, key_states: torch.Tensor, value_states: torch.Tensor):
        dtype = autocast_dtype(self.device) or value_states.dtype  # attention casts K and V to it anyway
        k = self.k[layer]
        if k is None or k.dtype != dtype or k.shape[1] != key_states.shape[1] or k.shape[3] != key_states.shape[3]:
            if k is not None:
                self.graphs.clear()  # a new dtype (autocast switched): old graphs point at old buffers
            shape_k = (self.rows_cap, key_states.shape[1], self.len_cap, key_states.shape[3])
            shape_v = (self.rows_cap, value_states.shape[1], self.len_cap, value_states.shape[3])
            self.k[layer] = torch.zeros(shape_k, dtype=dtype, device=self.device)
            self.v[layer] = torch.zeros(shape_v, dtype=dtype, device=self.device)
        return self.k[layer], self.v[layer]

    # -- autocast weight copies
    def sampling_weights(self) -> dict[str, torch.Tensor] | None:
        """Autocast-dtype copies of the float32 Linear weights (refreshed in place where a weight changed), or
        None when autocast is off (the model runs with its own weights)."""
        dtype = autocast_dtype(self.device)
        if dtype is None:
            return None
        if self.cast_dtype != dtype:
            self.cast_dtype = dtype
            with torch.inference_mode(False), torch.no_grad():  # plain tensors: refreshed in and out of inference mode
                self.cast, self.cast_src = {}, []
                for name, module in self.model.named_modules():
                    if isinstance(module, torch.nn.Linear):
                        for pname, p in module.named_parameters(prefix=name, recurse=False):
                            if p.dtype == torch.float32:
                                self.cast[pname] = p.detach().to(dtype)
                                self.cast_src.append((pname, p, p._version))
            self.graphs.clear()  # they read the old copies
        if not self.cast:  # no float32 Linear weight (a bf16 model): autocast casts nothing
            return None
        for i, (name, p, version) in enumerate(self.cast_src):
            if p._version != version:  # an optimizer step (or any in-place write) changed it
                with torch.no_grad():
                    self.cast[name].copy_(p)  # in place: the captured graphs read the same address
                self.cast_src[i] = (name, p, p._version)
                self.stats["weight_refreshes"] += 1
        return self.cast

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
        model = self.model
        rows = getattr(model, "opsd_scored_rows", None)  # a head padded beyond the tokenizer: its token rows only
        if self.weights is None:
            return model(**kw).logits[:, -1, :rows]  # [rows, V]
        return functional_call(model, self.weights, args=(), kwargs=kw, tie_weights=False,
                               strict=False).logits[:, -1, :rows]  # [rows, V]

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

        def run():
            with folded(self.model):  # one-token queries: the query groups folded, no repeat_kv
                return self._forward(ids, pos, mask, cache, self.write_pos)
        return run

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

    def compact(self, keep: torch.Tensor) -> None:
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
        returns the next token of each row still sampling (in batch order) from finite scores.

        NonFiniteLogits (naming the batch row) when a row's scores hold NaN or +inf."""
        dev = self.device
        b, W = len(batch), max(len(p) for p in batch)
        ids = torch.full((b, W), pad_id, dtype=torch.long)  # [b, W] left-padded, as generate
        att = torch.zeros_like(ids)
        for i, p in enumerate(batch):
            ids[i, W - len(p):] = torch.tensor(p)
            att[i, W - len(p):] = 1
        ids, att = ids.to(dev), att.to(dev)
        pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 1)  # [b, W] as generate derives them
        self.reserve(_pow2(b), bucket(W + max_new), pad_id)
        self.weights = self.sampling_weights()
        logits = self.prefill(ids, att, pos)  # [b, V]
        rows = _pow2(b)  # the row bucket the steps run
        self.mask[:rows].zero_()
        self.mask[:b, 0, 0, :W] = att.bool()
        self.ids[:rows].fill_(pad_id)
        self.pos[:rows].zero_()
        self.pos[:b, 0] = pos[:, -1]
        stop = torch.tensor(stop_ids, device=dev)
        tokens = torch.full((b, max_new), pad_id, dtype=torch.long, device=dev)  # [b, T]
        slot_row = torch.arange(b, device=dev)  # batch row held by each slot (ascending)
        alive = slot_row  # slots still sampling (ascending)
        n, all_alive = b, True
        for t in range(max_new):
            scores = (logits if all_alive else logits[alive]).float()  # [n, V]
            bad = torch.isnan(scores).any(-1) | torch.isposinf(scores).any(-1)  # [n] nothing to sample from
            nxt = choose(scores.masked_fill(bad[:, None], 0.0), slot_row[alive], t)  # [n] (a bad row: raised below)
            tokens[slot_row[alive], t] = nxt
            done = torch.isin(nxt, stop)  # [n]
            any_bad, n_done = torch.stack([bad.any().long(), done.sum()]).tolist()  # the one host sync of a step
            if any_bad:
                raise NonFiniteLogits(int(slot_row[alive][bad.nonzero()[0, 0]]), t)
            if t == max_new - 1 or n_done == n:
                break
            if n_done:
                n -= n_done
                keep = torch.argsort(done.to(torch.uint8), stable=True)[:n]  # [n] the unfinished, in order, no sync
                alive, nxt, all_alive = alive[keep], nxt[keep], False
                if _pow2(n) < rows:  # fits a smaller row bucket: drop the finished rows
                    self.compact(alive)
                    slot_row, rows = slot_row[alive], _pow2(n)
                    alive, all_alive = torch.arange(n, device=dev), True
            slot = W + t  # cache position of the token fed now
            if all_alive:
                self.ids[:n, 0] = nxt
            else:
                self.ids[alive, 0] = nxt
            self.pos[:rows] += 1
            self.mask[:rows, 0, 0, slot] = True  # every row attends the slot it writes (no empty row)
            self.write_pos.fill_(slot)
            logits = self.step(rows, min(self.len_cap, bucket(slot + 1)), slot + 1)
            if all_alive and n < rows:
                logits = logits[:n]
        return tokens


_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def engine_for(model) -> _Engine:
    """The model's engine (buffers and graphs), rebuilt when its parameters moved or its mode changed."""
    eng = _ENGINES.get(model)
    if eng is None or eng.fingerprint != eng._fingerprint():
        eng = _ENGINES[model] = _Engine(model)
    return eng
