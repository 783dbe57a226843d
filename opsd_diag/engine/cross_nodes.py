"""The predictor's teacher side for a config with another tokenizer (docs/signals.md, the predictor
across vocabularies).

The ideal-gradient maths stays on the student's candidate tokens. A node is put only where the
student's next token is a common span of its own (``io.retokenize.single_token_spans``), so the text
before it is whole tokens on both sides: the teacher reads its own re-tokenisation of that prefix
after its own prompt. A candidate's teacher log-prob is that of the teacher ids spelling its text
(``io.retokenize.candidate_teacher_ids``): the first one read from the teacher's next-token
distribution at the node, the others from one forward over prefix + ids. A candidate without such
ids gets NaN (``nodes`` leaves it out of that config's candidates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from opsd_diag.core import signals
from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.errors import OpsdError
from opsd_diag.io.retokenize import (Retokenized, candidate_teacher_ids, retokenize, single_token_spans,
                                     teacher_candidate_student_id)


def plan_rows(tokens: pd.DataFrame, configs: list[str], cross: list[str]) -> pd.DataFrame:
    """The first config's token rows the plan may pick nodes from: with cross-tokenizer configs, only
    positions that are a one-token span (``span_len`` 1) of every one of them."""
    rows = tokens[tokens["config"] == configs[0]]
    for c in cross:
        own = tokens[(tokens["config"] == c) & (tokens["span_len"] == 1)][["rollout_id", "pos"]]
        rows = rows.merge(own, on=["rollout_id", "pos"])
    return rows


def teacher_prefixes(ct, student_tok, stop_ids: list[int], completions: list[list[int]], positions: list[int],
                     config: str) -> list[list[int]]:
    """The teacher's ids of the text before each node (``completions[j][:positions[j]]`` re-tokenised)."""
    out = []
    for comp, pos in zip(completions, positions):
        r = retokenize(comp, student_tok, ct.tok, stop_ids, ct.eos)
        at = single_token_spans(r) if isinstance(r, Retokenized) else {}
        if pos not in at:
            raise OpsdError(f"the run's tokens of config '{config}' do not match its tokenizer at position {pos}: "
                            "run the predictor on the diagnosis' own models (or rerun the diagnosis)")
        out.append(r.teacher_ids[:at[pos]])
    return out


def mapped_topk(t_logp: torch.Tensor, k: int, ct, student_tok, stop_ids: list[int], prefix: list[int]) -> list[int]:
    """The student tokens the teacher's top-k proposes after its ``prefix`` ids
    (``teacher_candidate_student_id``; others dropped)."""
    out = (teacher_candidate_student_id(int(t), ct.tok, student_tok, stop_ids, ct.eos, list(prefix[-1:]))
           for t in t_logp.topk(k).indices.tolist())
    return [c for c in out if c is not None]


@torch.no_grad()
def candidate_logprobs(model, ct, student_tok, stop_ids: list[int], prompt: list[int], prefix: list[int],
                       node_logp: torch.Tensor, cands: list[int], temperature: float) -> np.ndarray:
    """float64 ``[K]``: log q of the teacher ids spelling each candidate after ``prompt + prefix``
    (NaN where there are none); ``node_logp`` ``[V_t]`` is the teacher's next-token distribution there."""
    seqs = [candidate_teacher_ids(c, student_tok, ct.tok, stop_ids, ct.eos, list(prefix[-1:])) for c in cands]
    out = np.array([math.nan if s is None else float(node_logp[s[0]]) for s in seqs])  # [K]
    longer = [i for i, s in enumerate(seqs) if s is not None and len(s) > 1]
    if not longer:
        return out
    comps = [list(prefix) + seqs[i] for i in longer]
    hidden = completion_hidden(model, [list(prompt)] * len(comps), comps, ct.tok.pad_token_id)  # [Σ len, H]
    starts = np.cumsum([0] + [len(c) for c in comps])[:-1]
    rows = [int(st) + len(prefix) + j for st, i in zip(starts, longer) for j in range(1, len(seqs[i]))]
    targets = torch.tensor([t for i in longer for t in seqs[i][1:]])
    logp = signals.log_probs(lm_logits(model, hidden[torch.tensor(rows, device=hidden.device)]), temperature)
    lps = signals.token_logprob(logp.double().cpu(), targets).numpy()  # [Σ (len - 1)]
    at = 0
    for i in longer:
        n = len(seqs[i]) - 1
        out[i] += float(lps[at:at + n].sum())
        at += n
    return out


@dataclass(frozen=True)
class CrossSide:
    """One cross-tokenizer config as ``engine.nodes`` calls it (``NodeModels.cross``; it does not import
    this module, which keeps the import graph shallow)."""
    ct: object  # engine.cross_scoring.CrossTeacher
    student_tok: object
    stop_ids: list[int]

    @property
    def pad_id(self) -> int:
        return self.ct.tok.pad_token_id

    def prefixes(self, completions: list[list[int]], positions: list[int], config: str) -> list[list[int]]:
        return teacher_prefixes(self.ct, self.student_tok, self.stop_ids, completions, positions, config)

    def topk(self, t_logp: torch.Tensor, k: int, prefix: list[int]) -> list[int]:
        return mapped_topk(t_logp, k, self.ct, self.student_tok, self.stop_ids, prefix)

    def logprobs(self, model, prompt: list[int], prefix: list[int], node_logp: torch.Tensor, cands: list[int],
                 temperature: float) -> np.ndarray:
        return candidate_logprobs(model, self.ct, self.student_tok, self.stop_ids, prompt, prefix, node_logp, cands,
                                  temperature)
