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

from opsd_diag import signals
from opsd_diag.errors import OpsdError
from opsd_diag.views import pack

COLUMNS = ("lp_s", "lp_t", "lp_b", "r_opd", "r_delta", "kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta", "gate",
           "a_d2", "a_ex", "h_s", "h_t", "h_b", "rank_t", "top1_agree")


@dataclass(frozen=True)
class ScoreSettings:
    temperature: float
    jsd_beta: float = 0.5
    centering: int | None = None
    exopd_lambda: float = 1.25
    exopd_reference: str = "student"  # or "base"
    top_k: int = 5
    chunk_size: int = 128


@dataclass
class TeacherInput:
    """One teacher config: the model that scores (the student itself for ``self``) and its prompts."""
    model: torch.nn.Module
    prompts: list[list[int]]
    base_prompts: list[list[int]] | None = None  # base sees the teacher's prompt (base_view: teacher)


@torch.no_grad()
def completion_hidden(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> torch.Tensor:
    """Final hidden states at the positions that predict each completion token: [N, H].

    Rows are concatenated in order (row 0's tokens, then row 1's, ...), the same for every view.
    """
    device = next(model.parameters()).device
    input_ids, attention, position_ids, cmask = pack(prompts, completions, pad_id)
    P = input_ids.shape[1] - cmask.shape[1]
    flat = torch.tensor([t for c in completions for t in c], dtype=torch.long)  # [N]
    if not torch.equal(input_ids[:, P:][cmask], flat):  # pitfall 1: scored ids are the sampled ids
        raise AssertionError("scored completion ids differ from the sampled ones")
    out = model.base_model(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                           position_ids=position_ids.to(device), use_cache=False)
    hidden = out.last_hidden_state[:, P - 1:-1]  # [B, C, H]; column P+j-1 predicts completion token j
    return hidden[cmask.to(device)]  # [N, H]


def lm_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """LM head on a chunk of hidden states, float32, with the model's final soft-capping if any."""
    logits = model.get_output_embeddings()(hidden).float()  # [n, V]
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


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

    Returns (tokens, topk): ``tokens[config]`` maps each column of COLUMNS plus ``row`` (index in
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

    cols: dict[str, dict[str, list]] = {name: {c: [] for c in COLUMNS} for name in teachers}
    tops: dict[str, tuple[list, list]] = {name: ([], []) for name in ["student", *teachers]}
    device = h_s.device
    for lo in range(0, n, s.chunk_size):
        sl = slice(lo, min(n, lo + s.chunk_size))
        ids = token_ids[sl].to(device)  # [n]
        # each model-view's LM head and log-softmax run once per chunk; student and base are shared
        student_d = signals.distribution(lm_logits(student, h_s[sl]), ids, s.temperature)
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
            for c in COLUMNS:
                cols[name][c].append(sig[c].float().cpu())
            if s.top_k:
                v, i = signals.topk(teacher_d.logp, s.top_k)  # [n, k]
                tops[name][0].append(v.cpu()), tops[name][1].append(i.cpu())
            del teacher_d

    tokens = {name: {**{c: torch.cat(v).numpy() for c, v in cs.items()}, "row": row, "pos": pos}
              for name, cs in cols.items()}
    topk = {name: (torch.cat(v).numpy(), torch.cat(i).numpy()) for name, (v, i) in tops.items() if v}
    return tokens, topk
