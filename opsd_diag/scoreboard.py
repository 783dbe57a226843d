"""The track record: every training run started from a diagnosis, its prediction next to what it did.

``opsd-train --from-diagnosis RUN --config C --signal S`` keeps the diagnosis' verdict and score for
(C, S) in the training run's ``prediction.json``; here each such run under a folder is read back
with its realised change of held-out pass@1 (the last evaluation minus the one at step 0, from
``metrics.jsonl``), and the running Spearman correlation of predicted score and realised gain says
how well the predictions have ranked the runs so far. The gain carries a 95% bootstrap interval over
the held-out problems (paired: each problem's end minus start), and a verdict counts as right or wrong
only where that interval excludes zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opsd_diag import jobs
from opsd_diag.core.stats import bootstrap_mean_over_prompts, spearman
from opsd_diag.errors import OpsdError
from opsd_diag.io import store

PREDICTION = "prediction.json"
COLUMNS = ("run", "config", "signal", "verdict", "score", "status", "steps", "pass@1_start", "pass@1_end",
           "gain", "gain_lo", "gain_hi", "n_problems", "outcome", "kl_to_initial", "diagnosis")
N_BOOT = 2000
MIN_JUDGED = 3  # runs with a clear outcome before a verdict accuracy means something
MIN_SPEARMAN = 5  # runs before a rank correlation means something (3 points allow only 4 values)


@dataclass(frozen=True)
class Scoreboard:
    frame: pd.DataFrame  # one row per training run, COLUMNS
    spearman: float  # score vs gain over the finished runs with both (NaN below 3 runs)
    n_scored: int
    verdict_accuracy: float  # right / judged (NaN when none is judged)
    n_judged: int = 0  # helps/hurts verdicts whose run's gain interval excludes zero (a clear outcome)
    n_right: int = 0  # of those, the ones whose verdict has the outcome's sign


def number(value) -> float:
    """A metric or score from a run's files as a float; anything else (text, a boolean, null) is NaN, so a
    damaged or hand-edited record shows as missing instead of stopping the page."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _outcome(run_dir: Path) -> dict:
    evals = [r for r in jobs.read_jsonl(run_dir / "metrics.jsonl")[0] if isinstance(r, dict) and r.get("kind") == "eval"]
    start = next((r for r in evals if number(r.get("step")) == 0), None)
    end = evals[-1] if evals and number(evals[-1].get("step")) > 0 else None

    def pass1(r):
        return math.nan if r is None else number(r.get("pass@1"))

    est, lo, hi, n = gain_interval(start, end)
    outcome = "improves" if lo > 0 else "degrades" if hi < 0 else "no clear change" if n else "no interval"
    return {"steps": int(number(end.get("step"))) if end else 0, "pass@1_start": pass1(start), "pass@1_end": pass1(end),
            "gain": pass1(end) - pass1(start), "gain_lo": lo, "gain_hi": hi, "n_problems": n, "outcome": outcome,
            "kl_to_initial": number((end or {}).get("kl_to_initial"))}


def gain_interval(start: dict | None, end: dict | None, n_boot: int = N_BOOT, seed: int = 0):
    """(gain, lo, hi, problems): the change of pass@1 between two evaluations with a 95% bootstrap interval
    over the held-out problems, paired (each problem's end minus its start share of correct samples);
    NaNs and 0 problems when either evaluation lacks its per-problem counts (runs made before them)."""
    def counts(r):
        rows = (r or {}).get("per_problem")
        try:
            return {int(i): (int(n), int(c)) for i, n, c in rows} if isinstance(rows, list) else None
        except (TypeError, ValueError):
            return None  # a torn or foreign record: no interval
    a, b = counts(start), counts(end)
    both = sorted(set(a) & set(b)) if a is not None and b is not None else []
    both = [i for i in both if a[i][0] > 0 and b[i][0] > 0]
    if not both:
        return math.nan, math.nan, math.nan, 0
    d = [b[i][1] / b[i][0] - a[i][1] / a[i][0] for i in both]
    est, lo, hi = bootstrap_mean_over_prompts(d, list(range(len(d))), n_boot=n_boot, seed=seed)
    return est, lo, hi, len(both)


def scoreboard(root: str | Path = "runs") -> Scoreboard:
    """Every training run under ``root`` (at any depth) that holds a prediction, newest first."""
    root = Path(root)
    if not root.is_dir():
        raise OpsdError(f"{root} is not a folder: pass the folder that holds your training runs (default runs/)")
    rows = []
    for path in sorted(root.rglob(PREDICTION)):
        run_dir = path.parent
        try:
            p = store.read_json(path)
        except OpsdError:
            continue  # a torn or foreign file: not part of the record
        if not isinstance(p, dict):
            continue
        st = jobs.status(run_dir)
        rows.append({"run": str(run_dir), "config": p.get("config"), "signal": p.get("signal"),
                     "verdict": p.get("verdict"), "score": p.get("score"), "status": st["status"],
                     **_outcome(run_dir), "diagnosis": p.get("diagnosis")})
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["score"] = frame["score"].map(number).astype(float)
    done = frame[(frame["status"] == "finished") & frame["gain"].notna() & frame["score"].notna()]
    # a verdict is right or wrong only where the run's gain interval excludes zero
    judged = done[done["verdict"].isin(["helps", "hurts"]) & done["outcome"].isin(["improves", "degrades"])]
    right = ((judged["verdict"] == "helps") & (judged["outcome"] == "improves")) | (
        (judged["verdict"] == "hurts") & (judged["outcome"] == "degrades"))
    return Scoreboard(frame, spearman(done["score"], done["gain"]), int(len(done)),
                      float(right.mean()) if len(judged) else math.nan, int(len(judged)), int(right.sum()))


def read_prediction(run_dir: str | Path) -> dict | None:
    """The prediction a training run was started from (``prediction.json``), or None."""
    path = Path(run_dir) / PREDICTION
    if not path.is_file():
        return None
    try:
        return store.read_json(path)
    except OpsdError:
        return None
