"""The two literature predictors, per configuration of a finished diagnosis run.

- teachability (TA-OPD): the teacher's probability mass on the student's own top-k tokens,
  ``sum_{v in top_k(p)} q_v``;
- top-k overlap ("thinking-pattern" compatibility, Rethinking-OPD): ``|top_k(p) & top_k(q)| / k``.

Both per token of the diagnosis' student rollouts, at tau = 1, averaged over every scored token of
a configuration (the diagnosis' own token set). The formula is the product's own
(``opsd_diag.core.signals.topk_compat``). A diagnosis written since it became a token column holds
both columns (k = ``opsd_diag.core.signals.COMPAT_K``), and they are read from its tokens.parquet; for a
run written before, or another ``--k``, they are computed with the same function from the run's
models and each view's prompt ids (its config and rollouts.parquet), so nothing is re-sampled.

    python benchmarks/validity/worlds/compat.py --diag DIR/diag/main [--k 5]   # -> DIR/diag/main/compat.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from opsd_diag.core import signals  # noqa: E402 (after the path set-up above)

K = signals.COMPAT_K
COLUMNS = ("teachability", "topk_overlap")


def compat_columns(student_logp: torch.Tensor, teacher_logp: torch.Tensor, k: int = K) -> dict[str, torch.Tensor]:
    """Per position ``[N]``: teachability and top-k overlap from log-probs ``[N, V]`` (the product's formula)."""
    return signals.topk_compat(student_logp, teacher_logp, k)


def stored_compat(diag: Path, run, names: list[str], k: int) -> dict | None:
    """{config: {teachability, topk_overlap, n_tokens, k}} read from the run's token table, or None when the
    table does not hold the columns (a run written before they existed) or ``k`` is not the product's."""
    import pyarrow.parquet as pq

    if k != K or not set(COLUMNS) <= set(pq.read_schema(diag / "tokens.parquet").names):
        return None
    tokens, out = run.tokens, {}
    for name in names:
        rows = tokens[tokens["config"] == name]
        n = len(rows)
        out[name] = {**{c: float(rows[c].to_numpy(dtype=np.float64).sum()) / n if n else float("nan")
                        for c in COLUMNS}, "n_tokens": n, "k": k}
    return out


@torch.no_grad()
def run_compat(diag: Path, k: int = K, batch: int = 32) -> dict:
    """{config: {teachability, topk_overlap, n_tokens, k}} over the run's scored tokens: read from its token
    table when it holds them (``stored_compat``), else computed."""
    from opsd_diag.engine.scoring import completion_hidden, lm_logits
    from opsd_diag.config.spec import load_config
    from opsd_diag.io.models import load_model, load_tokenizer
    from opsd_diag.run import Run

    run = Run.load(diag)
    cfg = load_config(diag / "config.yaml")
    if cfg.scoring_temperature != 1.0:
        raise ValueError(f"{diag} was scored at tau = {cfg.scoring_temperature}; these predictors are defined at tau = 1")
    stored = stored_compat(diag, run, [t.name for t in cfg.teachers], k)
    if stored is not None:
        return stored
    tokens = run.tokens
    rollouts = run.rollouts.sort_values("rollout_id", ignore_index=True)
    student = load_model(cfg.student.model, device="cpu", dtype="float32")
    pad = load_tokenizer(cfg.student.model).pad_token_id
    out = {}
    for t in cfg.teachers:
        model = student if t.is_self else load_model(t.model, device="cpu", dtype="float32")
        sums, n, lp_t = dict.fromkeys(COLUMNS, 0.0), 0, []
        for lo in range(0, len(rollouts), batch):
            part = rollouts.iloc[lo:lo + batch]
            comps = [list(c) for c in part["completion_ids"]]
            if not any(comps):
                continue
            logp = signals.log_probs(lm_logits(student, completion_hidden(
                student, [list(p) for p in part["prompt_ids.student"]], comps, pad)))
            logq = signals.log_probs(lm_logits(model, completion_hidden(
                model, [list(p) for p in part[f"prompt_ids.{t.name}"]], comps, pad)))
            ids = torch.tensor([t for c in comps for t in c])
            lp_t.append(logq.gather(-1, ids.unsqueeze(-1)).squeeze(-1))
            cols = compat_columns(logp, logq, k)
            for key in sums:
                sums[key] += float(cols[key].double().sum())
            n += logp.shape[0]
        # the same positions and views as the diagnosis: its own teacher log-probs, token by token
        table = tokens[tokens["config"] == t.name].sort_values(["rollout_id", "pos"])["lp_t"].to_numpy()
        mine = torch.cat(lp_t).numpy() if lp_t else table[:0]
        if mine.shape != table.shape or not np.allclose(mine, table, atol=1e-3, equal_nan=True):
            raise AssertionError(f"config {t.name}: re-scored teacher log-probs differ from the diagnosis' lp_t")
        out[t.name] = {**{key: v / n if n else float("nan") for key, v in sums.items()}, "n_tokens": n, "k": k}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diag", required=True, type=Path, help="a finished diagnosis run directory")
    ap.add_argument("--k", type=int, default=K)
    args = ap.parse_args(argv)
    result = run_compat(args.diag, args.k)
    tmp = args.diag / ".compat.json.tmp"
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(args.diag / "compat.json")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
