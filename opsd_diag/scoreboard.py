"""The track record: every training run started from a diagnosis, its prediction next to what it did.

``opsd-train --from-diagnosis RUN --config C --signal S`` keeps the diagnosis' verdict and score for
(C, S) in the training run's ``prediction.json``; here each such run under a folder is read back
with its realised change of held-out pass@1 (the last evaluation minus the one at step 0, from
``metrics.jsonl``), and the running Spearman correlation of predicted score and realised gain says
how well the predictions have ranked the runs so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from opsd_diag import jobs
from opsd_diag.core.stats import spearman
from opsd_diag.errors import OpsdError
from opsd_diag.io import store

PREDICTION = "prediction.json"
COLUMNS = ("run", "config", "signal", "verdict", "score", "status", "steps", "pass@1_start", "pass@1_end",
           "gain", "kl_to_initial", "diagnosis")


@dataclass(frozen=True)
class Scoreboard:
    frame: pd.DataFrame  # one row per training run, COLUMNS
    spearman: float  # score vs gain over the finished runs with both (NaN below 3 runs)
    n_scored: int
    verdict_accuracy: float  # share of helps/hurts verdicts whose sign matches the realised gain


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

    return {"steps": int(number(end.get("step"))) if end else 0, "pass@1_start": pass1(start),
            "pass@1_end": pass1(end), "gain": pass1(end) - pass1(start),
            "kl_to_initial": number((end or {}).get("kl_to_initial"))}


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
    decided = done[done["verdict"].isin(["helps", "hurts"])]
    right = ((decided["verdict"] == "helps") & (decided["gain"] > 0)) | ((decided["verdict"] == "hurts")
                                                                         & (decided["gain"] < 0))
    return Scoreboard(frame, spearman(done["score"], done["gain"]), int(len(done)),
                      float(right.mean()) if len(decided) else math.nan)


def read_prediction(run_dir: str | Path) -> dict | None:
    """The prediction a training run was started from (``prediction.json``), or None."""
    path = Path(run_dir) / PREDICTION
    if not path.is_file():
        return None
    try:
        return store.read_json(path)
    except OpsdError:
        return None
