"""Score one shard's rollouts: same-tokenizer configs token by token, teachers with another tokenizer span
by span (``engine.cross_scoring``), into the tokens and top-k tables; non-finite logits stop it.

``prep`` is the diagnosis' ``engine.diagnose.Prepared``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from opsd_diag.engine.fast import fused_scoring
from opsd_diag.engine.cross_scoring import score_cross_configs
from opsd_diag.engine.scoring import TeacherInput, score_batch
from opsd_diag.errors import OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS

NONFINITE_FIX = "check its weights for NaN/inf and its dtype (float16 overflows: use bfloat16 or float32)"


def score_rollouts(prep, rollouts: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    cfg = prep.cfg
    s = cfg.score_settings()
    pad = prep.tok.pad_token_id
    token_parts, topk_parts = [], []
    names = cache_token_names(prep.tok)
    bs = cfg.scoring.batch_size
    scoreable = [r for r in rollouts if r["length"] > 0]
    score = fused_scoring.pick(score_batch, cfg.scoring.engine)  # reference, or engine.fast.fused_scoring
    for start in range(0, len(scoreable), bs):
        batch = scoreable[start:start + bs]
        comps = [r["completion_ids"] for r in batch]
        teachers = {t.name: TeacherInput(prep.teacher_models[t.name], [r[f"prompt_ids.{t.name}"] for r in batch],
                                         [r[f"prompt_ids.{t.name}"] for r in batch]
                                         if cfg.scoring.base_view == "teacher" else None)
                    for t in cfg.teachers if t.name not in prep.cross}
        base_prompts = [r["prompt_ids.student"] for r in batch] if cfg.scoring.base_view == "student" else None
        rid = np.array([r["rollout_id"] for r in batch])
        token_parts += score_cross_configs(prep, batch, rid, s, _check_finite)
        if not teachers:
            continue
        tokens, topk = score(prep.student, comps, [r["prompt_ids.student"] for r in batch], teachers, s, pad,
                              base=prep.base, base_prompts=base_prompts)
        if not cfg.scoring.allow_nonfinite:
            _check_finite(prep, tokens, rid)
        flat_ids = np.array([t for c in comps for t in c])
        for name, cols in tokens.items():
            frame = pd.DataFrame({"rollout_id": rid[cols["row"]], "config": name, "pos": cols["pos"],
                                  "token_id": flat_ids, "token": [names(t) for t in flat_ids],
                                  **{c: cols[c] for c in SIGNAL_COLUMNS}})
            token_parts.append(frame)
        any_cols = next(iter(tokens.values()))
        for role, (vals, ids) in topk.items():
            kk = vals.shape[1]
            topk_parts.append(pd.DataFrame({
                "rollout_id": np.repeat(rid[any_cols["row"]], kk), "pos": np.repeat(any_cols["pos"], kk),
                "role": "student" if role == "student" else "teacher",
                "config": "" if role == "student" else role, "rank": np.tile(np.arange(kk), len(vals)),
                "token_id": ids.reshape(-1), "logprob": vals.reshape(-1)}))
    empty = pd.DataFrame()
    return (pd.concat(token_parts, ignore_index=True) if token_parts else empty,
            pd.concat(topk_parts, ignore_index=True) if topk_parts else empty)


def _check_finite(prep, tokens: dict, rid: np.ndarray, names=None) -> None:
    """Stop at the first position where a model's logits were NaN or inf (its entropy is NaN exactly then)."""
    cfg = prep.cfg
    for t in cfg.teachers:
        if t.name not in (tokens if names is None else names):
            continue
        cols = tokens[t.name]
        checks = [("h_s", f"the student model '{cfg.student.model}'"),
                  ("h_t", f"teacher config '{t.name}' (model '{cfg.student.model if t.is_self else t.model}')")]
        if prep.base is not None:
            checks.append(("h_b", f"the base model '{cfg.base.model}'"))
        for col, who in checks:
            bad = np.flatnonzero(~np.isfinite(cols[col]))
            if bad.size:
                i = bad[0]
                raise OpsdError(f"{who} produced non-finite logits (NaN or inf) scoring rollout {rid[cols['row'][i]]} "
                                f"at completion position {cols['pos'][i]}: {NONFINITE_FIX}; or set "
                                "scoring.allow_nonfinite: true to keep going with NaN in every column derived from it")


def cache_token_names(tok):
    cache: dict[int, str] = {}

    def name(t: int) -> str:
        t = int(t)
        if t not in cache:
            cache[t] = tok.decode([t])
        return cache[t]
    return name
