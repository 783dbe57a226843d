"""Fused per-chunk scoring: LM heads, log-softmax, every signal and top-k of a chunk in one function.

``score_batch_fused`` has ``engine.scoring.score_batch``'s signature and returns the same tables.
The decoder forwards are the same (``completion_hidden`` per model-view pair); what changes is
the work after them, which the H100 run of benchmarks/gpu_check.sh put at 0.73 s (0.65 s fused, eager)
against 0.46 s of decoder work for 8 x 1024 tokens at Qwen3-1.7B's vocabulary:

- One function (``chunk_signals``) takes a chunk's hidden states and the LM-head weights of every
  model-view pair and returns every column of every teacher config plus the top-k, as a few
  stacked tensors. It is plain tensor code with no data-dependent Python, so it runs as is
  (``fused``) or under ``torch.compile(dynamic=False)`` (``compiled``), where Inductor fuses the
  log-softmax and every vocabulary-wide reduction of a model pair into a few passes over ``[n, V]``
  instead of ~25 materialised float32 ``[n, V]`` temporaries. The last chunk is padded to the chunk
  size so one compiled graph serves every chunk.
- Results stay on the device, written into ``[N]`` buffers; one copy to the host at the end
  (the reference copies every column (20) per teacher per chunk, each a host synchronisation).
- Top-k runs once per model on the log-probs, exactly ``top_k`` wide, and only when asked.

The maths is ``core.signals`` itself (``distribution`` + ``signals_from``, full-vocabulary centring),
called inside the function, so the eager function equals the reference to float32 rounding
(tests/test_fused_scoring.py). Settings it does not cover (top-k centring, an LM head that is not a
``Linear``) go to the reference ``score_batch`` unchanged.

Selection: ``pick(score_batch, engine)`` with the config's ``scoring.engine``: ``reference`` (today's
path, the default) or ``compiled``; ``fused`` (the eager function) only for the benchmarks and tests.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from opsd_diag.core import signals
from opsd_diag.engine.scoring import TeacherInput, _hidden, logit_softcap, scored_rows, softcap
from opsd_diag.errors import OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.config.settings import ScoreSettings

# scoring.engine is reference or compiled; fused, the same function run eagerly, is what the benchmarks and tests
# compare compiled with: it missed its target on an H100 (2.12x bare forwards against 1.10; benchmarks/RESULTS.md),
# so it is no config value (docs/design.md, "Fast engines")
ENGINES = ("reference", "fused", "compiled")


def pick(reference, engine: str):
    """The scorer to call, with ``score_batch``'s signature; ``reference`` for the default engine."""
    if engine not in ENGINES:
        raise ValueError(f"scoring engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    name = engine
    if name == "reference":
        return reference

    def scorer(*args, **kwargs):
        return score_batch_fused(*args, compiled=name == "compiled", fallback=reference, **kwargs)
    return scorer


# ------------------------------------------------------------------------------------------- the maths

def _logits(h: Tensor, w: Tensor, b: Tensor | None, cap: float | None) -> Tensor:
    """One LM head on a chunk from its raw weights (what ``scoring.lm_logits`` does with the module)."""
    return softcap(F.linear(h, w, b).float(), cap)  # [n, V]


def chunk_signals(ids: Tensor, student: tuple, teachers: list[tuple], shared_base: tuple | None,
                  temperature: float, jsd_beta: float, exopd_lambda: float, base_reference: bool, top_k: int):
    """Every signal column of every teacher config on one chunk, and the top-k.

    ``student`` and ``shared_base`` are ``(hidden [n, H], weight [V, H], bias or None, softcap or None)``;
    ``teachers`` one ``(teacher pair, its own base pair or None)`` per config. The maths is
    ``core.signals`` itself (one log-softmax per model, ``signals_from`` per config). Returns
    ``cols [n_teachers, len(SIGNAL_COLUMNS), n]`` float32, and top-k log-probs and ids
    ``[1 + n_teachers, n, top_k]`` (student first) or ``(None, None)`` when ``top_k`` is 0.
    """
    s = signals.with_top_ids(signals.distribution(_logits(*student), ids, temperature))
    b_shared = None if shared_base is None else signals.distribution(_logits(*shared_base), ids, temperature)
    tops = [signals.topk(s.logp, top_k)] if top_k else []
    out = []
    for teacher, own_base in teachers:
        t = signals.distribution(_logits(*teacher), ids, temperature)
        b = b_shared if own_base is None else signals.distribution(_logits(*own_base), ids, temperature)
        ref = b.lp if base_reference and b is not None else None
        sig = signals.signals_from(s, t, ids, base=b, jsd_beta=jsd_beta, centering=None, exopd_lambda=exopd_lambda,
                                   ref_logprob=ref)
        out.append(torch.stack([sig[c].float() for c in SIGNAL_COLUMNS]))  # [C, n]
        if top_k:
            tops.append(signals.topk(t.logp, top_k))
    cols = torch.stack(out)  # [n_teachers, C, n]
    if not top_k:
        return cols, None, None
    return cols, torch.stack([v for v, _ in tops]), torch.stack([i for _, i in tops])


_COMPILED: dict = {}


def check_available(engine: str, device) -> None:
    """OpsdError, before any file is written, when ``compiled`` cannot compile on ``device`` (Inductor needs a
    C compiler, and Triton on CUDA); the other engines always run."""
    if engine != "compiled":
        return
    try:
        torch.compile(lambda x: x.exp() + 1, dynamic=False)(torch.ones(4, device=device))
    except Exception as e:  # Inductor raises many types (BackendCompilerFailed, InductorError, OSError...)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise OpsdError(f"scoring.engine: compiled cannot run on {device}: torch.compile failed ({first}); install a "
                        "C compiler (e.g. gcc) or set scoring.engine: reference") from None


def _compiled_fn():
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(chunk_signals, dynamic=False, fullgraph=True)
    return _COMPILED["fn"]


# ------------------------------------------------------------------------------------------- the batch

def _head(model):
    """(weight, bias, softcap) of the LM head, or None when it is not a plain Linear."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        return None
    rows = scored_rows(model)  # a head padded beyond the tokenizer: its token rows only
    return head.weight[:rows], None if head.bias is None else head.bias[:rows], logit_softcap(model)


def unsupported_reason(student, teachers: dict[str, TeacherInput], s: ScoreSettings, base) -> str | None:
    if s.centering is not None:
        return "top-k centring"
    for m in (student, base, *(t.model for t in teachers.values())):
        if m is not None and _head(m) is None:
            return "an LM head that is not a Linear layer"
    return None


@torch.no_grad()
def score_batch_fused(student, completions: list[list[int]], student_prompts: list[list[int]],
                      teachers: dict[str, TeacherInput], s: ScoreSettings, pad_id: int,
                      base=None, base_prompts: list[list[int]] | None = None, *, compiled: bool = False,
                      fallback=None) -> tuple[dict, dict]:
    """``score_batch``'s tables, computed chunk by chunk by ``chunk_signals``."""
    reason = unsupported_reason(student, teachers, s, base)
    if reason is not None:
        if fallback is None:
            raise ValueError(f"fused scoring does not cover {reason}")
        return fallback(student, completions, student_prompts, teachers, s, pad_id, base=base,
                        base_prompts=base_prompts)
    n = sum(len(c) for c in completions)
    if n == 0:
        raise OpsdError("nothing to score: every completion is empty")
    row = np.repeat(np.arange(len(completions)), [len(c) for c in completions])  # [N]
    pos = np.concatenate([np.arange(len(c)) for c in completions])  # [N]
    h_s = _hidden(student, student_prompts, completions, pad_id, n)  # [N, H]
    device = h_s.device
    token_ids = torch.tensor([t for c in completions for t in c], dtype=torch.long, device=device)  # [N]
    h_b = _hidden(base, base_prompts, completions, pad_id, n) if base is not None and base_prompts else None
    h_t = {name: _hidden(t.model, t.prompts, completions, pad_id, n) for name, t in teachers.items()}
    h_bt = {name: _hidden(base, t.base_prompts, completions, pad_id, n)
            for name, t in teachers.items() if base is not None and t.base_prompts is not None}
    names = list(teachers)
    heads = {"student": _head(student), "base": _head(base) if base is not None else None}
    heads.update({name: _head(t.model) for name, t in teachers.items()})
    fn = _compiled_fn() if compiled else chunk_signals
    k = s.top_k
    cols = torch.empty((len(names), len(SIGNAL_COLUMNS), n), dtype=torch.float32, device=device)  # on the device
    top_v = torch.empty((1 + len(names), n, k), dtype=torch.float32, device=device) if k else None
    top_i = torch.empty((1 + len(names), n, k), dtype=torch.long, device=device) if k else None
    size = s.chunk_size
    for lo in range(0, n, size):
        hi = min(n, lo + size)

        def take(h):  # [size, H]; the last chunk is zero-padded when compiled (one static shape)
            x = h[lo:hi]
            return F.pad(x, (0, 0, 0, size - x.shape[0])) if compiled and x.shape[0] < size else x

        ids = token_ids[lo:hi]
        if compiled and ids.shape[0] < size:
            ids = F.pad(ids, (0, size - ids.shape[0]))
        tlist = [((take(h_t[name]), *heads[name]), (take(h_bt[name]), *heads["base"]) if name in h_bt else None)
                 for name in names]
        shared = (take(h_b), *heads["base"]) if h_b is not None else None
        c, v, i = fn(ids, (take(h_s), *heads["student"]), tlist, shared, s.temperature, s.jsd_beta,
                     s.exopd_lambda, s.exopd_reference == "base", k)
        cols[:, :, lo:hi] = c[:, :, :hi - lo]
        if k:
            kk = v.shape[-1]
            top_v[:, lo:hi, :kk] = v[:, :hi - lo]
            top_i[:, lo:hi, :kk] = i[:, :hi - lo]
    cols = cols.cpu().numpy()
    tokens = {name: {**{c: cols[j, ci] for ci, c in enumerate(SIGNAL_COLUMNS)}, "row": row, "pos": pos}
              for j, name in enumerate(names)}
    topk = {}
    if k:
        kk = min(k, heads["student"][0].shape[0])
        top_v, top_i = top_v[:, :, :kk].cpu().numpy(), top_i[:, :, :kk].cpu().numpy()
        topk = {name: (top_v[j], top_i[j]) for j, name in enumerate(["student", *names])}
    return tokens, topk
