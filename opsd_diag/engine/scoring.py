"""Score sampled completions under student, teacher views and base: per-token signals + top-k.

Each model-view pair runs one decoder forward; hidden states of completion positions are kept
([N, H], small) and projected through the LM head chunk by chunk, so no [batch, length, vocab]
tensor is ever materialised. Each LM head runs once per chunk per model-view: the student's and
the shared base's log-probs are reused by every teacher config.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from opsd_diag.core import signals
from opsd_diag.errors import OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.config.settings import ScoreSettings


@dataclass
class TeacherInput:
    """One teacher config: the model that scores (the student itself for ``self``) and its prompts."""
    model: torch.nn.Module
    prompts: list[list[int]]
    base_prompts: list[list[int]] | None = None  # base sees the teacher's prompt (base_view: teacher)


@torch.no_grad()
def length_groups(lengths: list[int]) -> list[list[int]]:
    """Rows cut into forward passes so that padding costs less than an extra pass would.

    Rows are sorted by length (longest first) and split into contiguous runs minimising
    ``sum(rows x longest row) + passes x overhead``, where one more pass is charged 1/16 of the
    micro-batch's real tokens (at least 32 positions): a split must save that much padding. Only
    the cost depends on the split; each row's hidden states do not (see ``completion_hidden``).
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    srt = np.array([lengths[i] for i in order], dtype=np.float64)
    n = len(order)
    overhead = max(32.0, float(srt.sum()) / 16)
    best = np.zeros(n + 1)  # best[j]: least cost of the j longest rows
    cut = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        cost = best[:j] + (j - np.arange(j)) * srt[:j] + overhead  # last run = sorted rows i..j-1
        cut[j] = int(np.argmin(cost))
        best[j] = cost[cut[j]]
    groups, j = [], n
    while j:
        groups.append(order[cut[j]:j])
        j = int(cut[j])
    return groups[::-1]


def completion_hidden(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Final hidden states at the positions that predict each completion token: ``[N, H]``.

    Rows are concatenated in order (row 0's tokens, then row 1's, ...), the same for every view,
    and the scored ids are asserted equal to the sampled ones. Each row is its prompt followed by
    its completion, right-padded, so a causal model needs no attention mask (no real position ever
    sees a pad, and its position ids are 0..L-1 as without padding), and rows of similar length
    share a forward pass (``length_groups``). Against a left-padded batch (every row padded to the
    longest prompt plus the longest completion) this computes ~20-25% fewer positions on the toy
    zoo: in scoring, and in the trainer's student forward and backward and teacher forward. Runs
    with or without grad (the trainer differentiates through it).
    """
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("completion_hidden needs one prompt per completion")
    if any(not p for p in prompts):
        raise OpsdError("an empty prompt cannot be scored: every view needs at least one token")
    device = next(model.parameters()).device
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    offsets = [0]
    for c in completions:
        offsets.append(offsets[-1] + len(c))
    pieces, token_order = [], []
    for group in length_groups(lengths):
        group = [i for i in group if completions[i]]  # a row without completion tokens scores nothing
        if not group:
            continue
        width = max(lengths[i] for i in group)
        ids = torch.full((len(group), width), pad_id, dtype=torch.long)  # [g, W] right-padded
        rows, cols, flat = [], [], []
        for r, i in enumerate(group):
            p, c = prompts[i], completions[i]
            ids[r, :lengths[i]] = torch.tensor(p + c, dtype=torch.long)
            rows += [r] * len(c)
            cols += range(len(p) - 1, len(p) + len(c) - 1)  # column t predicts the token at t + 1
            flat += c
            token_order += range(offsets[i], offsets[i + 1])
        rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
        if not torch.equal(ids[rows_t, cols_t + 1], torch.tensor(flat, dtype=torch.long)):
            raise AssertionError("scored completion ids differ from the sampled ones")  # pitfall 1
        positions = torch.arange(width).expand(len(group), width)  # [g, W] explicit, as without padding
        out = model.base_model(input_ids=ids.to(device), position_ids=positions.to(device), use_cache=False)
        pieces.append(out.last_hidden_state[rows_t.to(device), cols_t.to(device)])  # [n_g, H]
    if not pieces:  # no completion tokens at all: an empty [0, H] that is still graph-connected (pitfall 9)
        out = model.base_model(input_ids=torch.tensor([prompts[0]], device=device), use_cache=False)
        return out.last_hidden_state[0, :0]
    hidden = torch.cat(pieces)  # [N, H] in group order
    if token_order == list(range(len(token_order))):
        return hidden
    inverse = torch.empty(len(token_order), dtype=torch.long)
    inverse[torch.tensor(token_order)] = torch.arange(len(token_order))
    return hidden[inverse.to(device)]  # [N, H] rows in order


def lm_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """LM head on a chunk of hidden states, float32, with the model's final soft-capping if any, over the
    tokenizer's rows only when the head is padded beyond it (``io.models.limit_rows``)."""
    logits = model.get_output_embeddings()(hidden)[..., :scored_rows(model)]  # [n, V]
    return softcap(logits.float(), logit_softcap(model))  # [n, V]


def scored_rows(model) -> int | None:
    """How many LM-head rows are tokens (None: all of them)."""
    return getattr(model, "opsd_scored_rows", None)


def logit_softcap(model) -> float | None:
    """``final_logit_softcapping`` where the model applies it: the text config of a multimodal config (Gemma-4)."""
    cfg = model.config
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return getattr(text, "final_logit_softcapping", None) or getattr(cfg, "final_logit_softcapping", None) or None


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Gemma-style final logit soft-capping ``tanh(z / cap) * cap`` (none when ``cap`` is unset)."""
    return torch.tanh(logits / cap) * cap if cap else logits


def _hidden(model, prompts, completions, pad_id, n_expected: int) -> torch.Tensor:
    h = completion_hidden(model, prompts, completions, pad_id)
    if h.shape[0] != n_expected:  # pitfall 6: a missing teacher position is an error, never a zero
        raise OpsdError(f"a view produced {h.shape[0]} scored positions instead of {n_expected}")
    return h


@torch.no_grad()
def score_batch(student, completions: list[list[int]], student_prompts: list[list[int]],
                teachers: dict[str, TeacherInput], s: ScoreSettings, pad_id: int,
                base=None, base_prompts: list[list[int]] | None = None) -> tuple[dict, dict]:
    """Per-token signals for every teacher config, and top-k alternatives.

    Returns (tokens, topk): ``tokens[config]`` maps each column of schema.SIGNAL_COLUMNS plus ``row`` (index in
    the batch) and ``pos`` to a numpy array over the batch's N tokens; ``topk`` maps
    ``"student"`` and each config to (logprob [N, k], token id [N, k]) arrays.
    """
    n = sum(len(c) for c in completions)
    if n == 0:
        raise OpsdError("nothing to score: every completion is empty")
    token_ids = torch.tensor([t for c in completions for t in c], dtype=torch.long)  # [N]
    row = np.repeat(np.arange(len(completions)), [len(c) for c in completions])  # [N]
    pos = np.concatenate([np.arange(len(c)) for c in completions])  # [N]
    h_s = _hidden(student, student_prompts, completions, pad_id, n)  # [N, H]
    h_b = _hidden(base, base_prompts, completions, pad_id, n) if base is not None and base_prompts else None
    h_t = {name: _hidden(t.model, t.prompts, completions, pad_id, n) for name, t in teachers.items()}
    h_bt = {name: _hidden(base, t.base_prompts, completions, pad_id, n)
            for name, t in teachers.items() if base is not None and t.base_prompts is not None}

    cols: dict[str, dict[str, list]] = {name: {c: [] for c in SIGNAL_COLUMNS} for name in teachers}
    tops: dict[str, tuple[list, list]] = {name: ([], []) for name in ["student", *teachers]}
    device = h_s.device
    for lo in range(0, n, s.chunk_size):
        sl = slice(lo, min(n, lo + s.chunk_size))
        ids = token_ids[sl].to(device)  # [n]
        # each model-view's LM head and log-softmax run once per chunk; student and base are shared
        student_d = signals.with_top_ids(signals.distribution(lm_logits(student, h_s[sl]), ids, s.temperature))
        shared_b = signals.distribution(lm_logits(base, h_b[sl]), ids, s.temperature) if h_b is not None else None
        if s.top_k:
            v, i = signals.topk(student_d.logp, s.top_k)  # [n, k]
            tops["student"][0].append(v.cpu()), tops["student"][1].append(i.cpu())
        for name, t in teachers.items():
            teacher_d = signals.distribution(lm_logits(t.model, h_t[name][sl]), ids, s.temperature)
            base_d = (signals.distribution(lm_logits(base, h_bt[name][sl]), ids, s.temperature)
                      if name in h_bt else shared_b)
            ref = base_d.lp if s.exopd_reference == "base" and base_d is not None else None  # [n]
            sig = signals.signals_from(student_d, teacher_d, ids, base=base_d, jsd_beta=s.jsd_beta,
                                       centering=s.centering, exopd_lambda=s.exopd_lambda, ref_logprob=ref)
            for c in SIGNAL_COLUMNS:
                cols[name][c].append(sig[c].float().cpu())
            if s.top_k:
                v, i = signals.topk(teacher_d.logp, s.top_k)  # [n, k]
                tops[name][0].append(v.cpu()), tops[name][1].append(i.cpu())
            del teacher_d

    tokens = {name: {**{c: torch.cat(v).numpy() for c, v in cs.items()}, "row": row, "pos": pos}
              for name, cs in cols.items()}
    topk = {name: (torch.cat(v).numpy(), torch.cat(i).numpy()) for name, (v, i) in tops.items() if v}
    return tokens, topk
