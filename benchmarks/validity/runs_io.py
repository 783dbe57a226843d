"""The one adapter between the study and the product's files.

Every read of a diagnosis run directory (manifest.json, summary.json, rollouts.parquet,
tokens.parquet) and of a training run directory (status.json, metrics.jsonl, checkpoints/) happens
here, together with the one library call that interprets summary.json (the verdict inputs), so that
this module alone changes when the files give way to the library's ``Run`` object.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.run import Run

# ----------------------------------------------------------------------------- diagnosis run dirs


def diag_manifest(run_dir: Path) -> dict | None:
    try:
        return Run.load(run_dir).manifest
    except OpsdError:
        return None


def diag_finished(run_dir: Path, needs_verdicts: bool = True) -> bool:
    """The diagnosis ran to the end (and, with an ideal section, wrote its verdicts)."""
    try:
        run = Run.load(run_dir)
    except OpsdError:
        return False
    return not needs_verdicts or bool(run.summary.verdicts)


def diag_summary(run_dir: Path) -> dict:
    """summary.json as the product wrote it, read and validated through the Run object."""
    return Run.load(run_dir).summary.model_dump(mode="json", exclude_unset=True)


def diag_rollouts(run_dir: Path) -> pd.DataFrame:
    """Student rollouts: rollout_id, problem_id, sample_idx, completion_ids, prompt ids, correct."""
    cols = ["rollout_id", "problem_id", "sample_idx", "completion_ids", "prompt_ids.student", "correct"]
    return Run.load(run_dir).rollouts[cols].sort_values("rollout_id", ignore_index=True)


def diag_tokens(run_dir: Path, columns: list[str]) -> pd.DataFrame:
    """Per-token signals (rollout_id, config, pos and the named columns)."""
    return Run.load(run_dir).tokens[["rollout_id", "config", "pos", *columns]]


def diag_configs(run_dir: Path) -> list[str]:
    return sorted(Run.load(run_dir).configs)


def _est(ci: dict | None) -> float:
    v = None if ci is None else ci.get("estimate")
    return math.nan if v is None else float(v)


def predictor_inputs(summary: dict, config: str, signal: str) -> dict:
    """What the product predicts for (config, signal), read exactly as its verdict rule reads it.

    verdict / score / reason from ``summary['verdicts']``; teacher advantage, alignment and the
    accuracy gap through ``opsd_diag.core.verdict.collect`` (the verdict's own input extraction), plus
    the config's mean reverse KL and mean JSD over the diagnosis tokens and the library's own sign
    agreement (all tokens, near-zero ones included).
    """
    from opsd_diag.core import verdict as product_verdict

    v = summary["verdicts"][config][signal]
    inputs = product_verdict.collect(summary, summary.get("ideal"))[(config, signal)]
    entry = summary["configs"][config]
    cols = entry["overall"]["columns"]

    def mean(col):
        x = cols[col]["mean"]
        return math.nan if x is None else float(x)

    sa = entry["alignment"].get("sign_agreement")
    return {
        "verdict": v["verdict"], "reason": v["reason"],
        "score": math.nan if v.get("score") is None else float(v["score"]),
        "teacher_advantage": _est(inputs["teacher_advantage"]),
        "teacher_advantage_ci": inputs["teacher_advantage"],
        "alignment": _est(inputs["alignment"]), "alignment_ci": inputs["alignment"],
        "accuracy_gap": _est(inputs["accuracy_gap"]), "accuracy_gap_ci": inputs["accuracy_gap"],
        "gate_keep": math.nan if inputs["gate_keep"] is None else float(inputs["gate_keep"]),
        "mean_rev_kl": mean("kl_rev"), "mean_jsd": mean("jsd"),
        "library_sign_agreement": math.nan if sa is None else float(sa),
        "student_accuracy": _est(summary.get("student_accuracy")),
    }


def ideal_settings(summary: dict) -> dict:
    ideal = summary.get("ideal") or {}
    return {k: ideal.get(k) for k in ("status", "budget", "k", "m", "n_nodes", "n_prompts", "continuations_used")}


# ----------------------------------------------------------------------------- training run dirs


def train_status(run_dir: Path) -> dict | None:
    path = Path(run_dir) / "status.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except json.JSONDecodeError:  # being rewritten
        return None


def train_finished(run_dir: Path) -> bool:
    st = train_status(run_dir)
    return bool(st) and st.get("status") == "finished" and final_checkpoint(run_dir) is not None


def train_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def final_checkpoint(run_dir: Path) -> Path | None:
    """The last step's checkpoint directory (an HF model directory), or None."""
    st = train_status(run_dir)
    root = Path(run_dir) / "checkpoints"
    if not st or not root.is_dir():
        return None
    path = root / f"step-{int(st['max_steps']):06d}"
    return path if (path / "config.json").is_file() else None


def train_summary(run_dir: Path) -> dict:
    """Status plus the means over the run's train records of the numbers the report shows."""
    st = train_status(run_dir) or {}
    recs = [r for r in train_metrics(run_dir) if r.get("kind") == "train"]

    def mean(key, part=slice(None)):
        vals = [float(r[key]) for r in recs[part] if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else math.nan

    return {"status": st.get("status"), "step": st.get("step"), "max_steps": st.get("max_steps"),
            "method": st.get("method"), "seconds": float(recs[-1]["elapsed_s"]) if recs else math.nan,
            "step_time_s": mean("step_time_s"), "tokens": sum(int(r.get("tokens") or 0) for r in recs),
            "loss_last10": mean("loss", slice(-10, None)), "r_opd_first10": mean("r_opd", slice(0, 10)),
            "r_opd_last10": mean("r_opd", slice(-10, None))}
