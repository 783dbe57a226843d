"""Score a teacher with another tokenizer on its own re-tokenisation of the student's completions.

Per rollout: ``io.retokenize`` gives the teacher's ids and the common spans (or why the rollout is
left out); student, teacher and base each run one decoder forward (``completion_hidden``, the
path every scorer shares) on their own tokens after their own prompts; token log-probs and
entropies are taken chunk by chunk, and the distributions at the spans' first positions are
compared chunk by chunk, so no ``[N, V]`` tensor of a whole batch exists. The columns are
``core.span_signals.span_rows``: one row per common span instead of one per student token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from opsd_diag.core import signals
from opsd_diag.core import span_signals as spans_maths
from opsd_diag.errors import OpsdError
from opsd_diag.engine.scoring import _hidden, lm_logits
from opsd_diag.io.retokenize import Retokenized, retokenize
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.config.settings import ScoreSettings

@dataclass
class CrossTeacher:
    """One teacher config with another tokenizer."""
    tok: object
    stop_ids: list[int]  # what ends the teacher's own samples
    eos: int | None  # paired with the student's final stop id (one span of no text)
    base_side: str | None  # the base scores on the "student"'s or the "teacher"'s tokens; None: no base
    base_prompts: list[list[int]] | None = None  # the base's prompt ids, in the base's tokenizer


# what a span row holds besides the token columns; the teacher's top-k at the span's first position are its
# own pieces as text (``topk.parquet`` holds ids of the student's vocabulary only)
SPAN_COLUMNS = ("span_len", "teacher_tokens", "uld", "teacher_topk", "teacher_topk_lp")


def _token_stats(model, hidden: torch.Tensor, ids: torch.Tensor, s: ScoreSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of each sampled id ``[N]``, entropy ``[N]``), one LM-head chunk at a time."""
    lps, hs = [], []
    for lo in range(0, hidden.shape[0], s.chunk_size):
        sl = slice(lo, lo + s.chunk_size)
        d = signals.distribution(lm_logits(model, hidden[sl]), ids[sl].to(hidden.device), s.temperature)
        lps.append(d.lp), hs.append(d.h)
    return torch.cat(lps), torch.cat(hs)  # [N], [N]


def _index(spans_of_rows: list[list[tuple[int, int]]]) -> torch.Tensor:
    """Global span index of every token of the concatenated rows (``[N]``)."""
    out, base = [], 0
    for spans in spans_of_rows:
        for j, (lo, hi) in enumerate(spans):
            out += [base + j] * (hi - lo)
        base += len(spans)
    return torch.tensor(out, dtype=torch.long)


@torch.no_grad()
def score_cross(student, student_tok, teacher, ct: CrossTeacher, completions: list[list[int]],
                student_prompts: list[list[int]], teacher_prompts: list[list[int]], s: ScoreSettings,
                stop_ids: list[int], base=None, base_prompts: list[list[int]] | None = None
                ) -> tuple[dict | None, list[str], list[str]]:
    """(span columns over the batch's kept rows, or None if none is kept; per row, the reason it was left out, or
    ""; per row, why a kept row was cut short (``Retokenized.cut``: its tokens after the cut have no span), or "").

    Columns: ``row`` (index in the batch), ``pos`` (the span's first student position), ``span_len``,
    ``token_id`` (its first student id), ``token`` (its text), ``teacher_tokens`` (the teacher's
    pieces), ``teacher_topk`` / ``teacher_topk_lp`` (its ``top_k`` pieces and log-probs at the span's first
    position, as text), ``uld`` and every column of ``schema.SIGNAL_COLUMNS``, numpy arrays over the spans.
    """
    results = [retokenize(c, student_tok, ct.tok, stop_ids, ct.eos) for c in completions]
    reasons = [r if isinstance(r, str) else "" for r in results]
    cuts = [r.cut if isinstance(r, Retokenized) else "" for r in results]
    kept = [i for i, r in enumerate(results) if isinstance(r, Retokenized) and len(r.spans)]
    if not kept:
        return None, reasons, cuts
    rt = [results[i] for i in kept]  # a row cut short is scored up to its cut (``Retokenized.n_student``)
    s_comps, t_comps = [completions[i][:r.n_student] for i, r in zip(kept, rt)], [r.teacher_ids for r in rt]
    s_span, t_span = _index([list(r.spans.student) for r in rt]), _index([list(r.spans.teacher) for r in rt])
    n_spans = sum(len(r.spans) for r in rt)
    s_ids = torch.tensor([t for c in s_comps for t in c])  # [N_s]
    t_ids = torch.tensor([t for c in t_comps for t in c])  # [N_t]
    pad_s, pad_t = student_tok.pad_token_id, ct.tok.pad_token_id
    h_s = _hidden(student, [student_prompts[i] for i in kept], s_comps, pad_s, len(s_ids))  # [N_s, H]
    h_t = _hidden(teacher, [teacher_prompts[i] for i in kept], t_comps, pad_t, len(t_ids))  # [N_t, H]
    lp_s, ent_s = _token_stats(student, h_s, s_ids, s)
    lp_t, ent_t = _token_stats(teacher, h_t, t_ids, s)
    base_kw = {}
    if base is not None and ct.base_side is not None and base_prompts is not None:
        on_student = ct.base_side == "student"
        b_comps, b_ids, b_span = (s_comps, s_ids, s_span) if on_student else (t_comps, t_ids, t_span)
        h_b = _hidden(base, [base_prompts[i] for i in kept], b_comps, pad_s if on_student else pad_t, len(b_ids))
        lp_b, ent_b = _token_stats(base, h_b, b_ids, s)
        base_kw = {"base_lp": lp_b, "base_h": ent_b, "base_span": b_span.to(lp_b.device)}
    fs = spans_maths.first_positions(s_span, n_spans)  # [S]
    ft = spans_maths.first_positions(t_span, n_spans)  # [S]
    starts, tops = [], []
    for lo in range(0, n_spans, s.chunk_size):
        sl = slice(lo, lo + s.chunk_size)
        student_logp = signals.log_probs(lm_logits(student, h_s[fs[sl].to(h_s.device)]), s.temperature)  # [n, V_s]
        teacher_logp = signals.log_probs(lm_logits(teacher, h_t[ft[sl].to(h_t.device)]), s.temperature)  # [n, V_t]
        starts.append(spans_maths.start_signals(student_logp, teacher_logp, t_ids[ft[sl]].to(h_t.device)))
        if s.top_k:
            v, ix = signals.topk(teacher_logp, s.top_k)  # [n, k] in the teacher's vocabulary
            tops += [([ct.tok.decode([t]) for t in row_i], row_v) for row_i, row_v in zip(ix.tolist(), v.tolist())]
    start = {k: torch.cat([c[k] for c in starts]) for k in starts[0]}
    device = lp_s.device
    out = spans_maths.span_rows(lp_s, ent_s, s_span.to(device), lp_t, ent_t, t_span.to(device), start, n_spans,
                                ref=s.exopd_reference, exopd_lambda=s.exopd_lambda, **base_kw)
    cols = {c: out[c].float().cpu().numpy() for c in (*SIGNAL_COLUMNS, "uld")}
    meta = {"row": [], "pos": [], "span_len": [], "token_id": [], "token": [], "teacher_tokens": []}
    for i, r in zip(kept, rt):
        for (s_lo, s_hi), (t_lo, t_hi) in zip(r.spans.student, r.spans.teacher):
            meta["row"].append(i), meta["pos"].append(s_lo), meta["span_len"].append(s_hi - s_lo)
            meta["token_id"].append(completions[i][s_lo])
            meta["token"].append(student_tok.decode(completions[i][s_lo:s_hi]))
            meta["teacher_tokens"].append([ct.tok.decode([t]) for t in r.teacher_ids[t_lo:t_hi]])
    meta = {k: v if k == "teacher_tokens" else np.array(v) for k, v in meta.items()}
    meta["teacher_topk"] = [t[0] for t in tops] if tops else [[] for _ in range(n_spans)]
    meta["teacher_topk_lp"] = [t[1] for t in tops] if tops else [[] for _ in range(n_spans)]
    return {**meta, **cols}, reasons, cuts


def span_frame(cols: dict, rollout_ids: np.ndarray, config: str) -> pd.DataFrame:
    """The token table's rows of one cross-tokenizer config: the key columns, the signals, then SPAN_COLUMNS."""
    return pd.DataFrame({"rollout_id": rollout_ids[cols["row"]], "config": config, "pos": cols["pos"],
                         "token_id": cols["token_id"], "token": cols["token"],
                         **{c: cols[c] for c in SIGNAL_COLUMNS}, **{c: cols[c] for c in SPAN_COLUMNS}})


def score_cross_configs(prep, batch: list[dict], rid: np.ndarray, s: ScoreSettings, check_finite) -> list[pd.DataFrame]:
    """Span rows of every teacher config with another tokenizer (``prep``: the diagnosis' ``Prepared``); a
    rollout left out gets its reason in ``left_out.<config>``, one cut short (aligned up to its first token that
    does not round-trip) in ``cut.<config>``; ``check_finite`` stops at non-finite logits."""
    frames = []
    for name, own in prep.cross.items():
        base_prompts = [own.base_prompts[r["problem_index"]] for r in batch] if own.base_prompts else None
        cols, reasons, cuts = score_cross(prep.student, prep.tok, prep.teacher_models[name], own,
                                    [r["completion_ids"] for r in batch], [r["prompt_ids.student"] for r in batch],
                                    [r[f"prompt_ids.{name}"] for r in batch], s, prep.stop_ids, prep.base,
                                    base_prompts)
        for r, why, cut in zip(batch, reasons, cuts):
            r[f"left_out.{name}"], r[f"cut.{name}"] = why, cut
        if cols is not None:
            if not prep.cfg.scoring.allow_nonfinite:
                check_finite(prep, {name: cols}, rid, [name])
            frames.append(span_frame(cols, rid, name))
    return frames


def left_out(rollouts: pd.DataFrame, configs: list[str]) -> dict[str, dict]:
    """Per cross-tokenizer config: how many scored rollouts were left out, of how many, and why, and how many
    were cut short and why (``cut``; for summary.json); an OpsdError when not one rollout of a config could be
    aligned (it would have no rows)."""
    out = {}
    scored = rollouts[rollouts["length"] > 0] if len(rollouts) else rollouts
    for name in configs:
        reasons = scored.get(f"left_out.{name}", pd.Series([], dtype=object)).fillna("")
        why = reasons[reasons != ""].value_counts()
        out[name] = {"rollouts": int(why.sum()), "of": int(len(reasons)), "reasons": {str(k): int(v) for k, v in
                                                                                     why.items()}}
        cuts = scored.get(f"cut.{name}", pd.Series([], dtype=object)).fillna("")  # runs before cuts have none
        cut = cuts[cuts != ""].value_counts()
        out[name]["cut"] = {"rollouts": int(cut.sum()), "reasons": {str(k): int(v) for k, v in cut.items()}}
        if len(reasons) and int(why.sum()) == len(reasons):
            raise OpsdError(f"teacher config '{name}': none of the {len(reasons)} rollouts could be aligned with its "
                            f"tokenizer (most often: {why.index[0]}); see docs/signals.md, teachers with another "
                            "tokenizer")
    return out
