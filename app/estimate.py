"""What a training run costs before it starts: its sampled tokens while stepping and while evaluating,
and a time measured from the newest finished training run under the runs folder on this machine.

The held-out evaluation samples ``problems x samples`` completions at the start, every ``eval_steps``
and at the end; on a small student it can take longer than the steps themselves, so it is counted
and timed on its own: seconds per evaluated sample and seconds per training step-token, each from the
past run's ``metrics.jsonl`` (``eval_s`` / ``eval_samples`` of its evaluations, ``step_time_s`` /
``tokens`` of its steps).
"""

from __future__ import annotations

from pathlib import Path

from opsd_diag import jobs


def evaluations(max_steps: int, eval_steps: int, at_start: bool) -> int:
    """How many evaluations a run of ``max_steps`` makes (the loop's own rule: at the start, every
    ``eval_steps``, and at the end)."""
    if max_steps <= 0:
        return int(at_start)
    periodic = set(range(eval_steps, max_steps + 1, eval_steps)) if eval_steps else set()
    return int(at_start) + len(periodic | {max_steps})


def work(max_steps: int, prompts_per_step: int, completion_length: int, eval_problems: int, eval_samples: int,
         eval_steps: int = 0, at_start: bool = True) -> dict:
    """The at-most sampled tokens of the steps and of the evaluations."""
    n_eval = evaluations(max_steps, eval_steps, at_start) if eval_problems else 0
    return {"step_tokens": max_steps * prompts_per_step * completion_length, "evaluations": n_eval,
            "eval_samples": n_eval * eval_problems * eval_samples}


def rates(runs_root: str | Path = "runs") -> dict | None:
    """(seconds per step-token, seconds per evaluated sample, the run) from the newest finished training run
    that recorded both, or None."""
    for run in jobs.find_runs(runs_root, "training"):
        if jobs.status(run).get("status") != "finished":
            continue
        records = jobs.read_jsonl(Path(run) / "metrics.jsonl")[0]
        steps = [r for r in records if r.get("kind") == "train" and r.get("tokens") and r.get("step_time_s")]
        evals = [r for r in records if r.get("kind") == "eval" and r.get("eval_samples") and r.get("eval_s")]
        if steps and evals:
            return {"step_token_s": sum(float(r["step_time_s"]) for r in steps) / sum(float(r["tokens"]) for r in steps),
                    "eval_sample_s": sum(float(r["eval_s"]) for r in evals) / sum(float(r["eval_samples"])
                                                                                 for r in evals),
                    "timed_from": str(run)}
    return None


def estimate(w: dict, runs_root: str | Path = "runs") -> dict:
    """``w`` plus seconds for the steps and the evaluations (None without a past run to time from)."""
    r = rates(runs_root)
    if r is None:
        return {**w, "step_s": None, "eval_s": None, "timed_from": None}
    return {**w, "step_s": r["step_token_s"] * w["step_tokens"], "eval_s": r["eval_sample_s"] * w["eval_samples"],
            "timed_from": r["timed_from"], "step_token_s": r["step_token_s"], "eval_sample_s": r["eval_sample_s"]}
