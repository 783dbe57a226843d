"""The track record: every training run started from a diagnosis, its prediction next to what it did.

``opsd-train --from-diagnosis RUN --config C --signal S`` keeps the diagnosis' verdict and score for
(C, S) in the training run's ``prediction.json``; here each such run under a folder is read back
with its realised change of held-out pass@1 (the last evaluation minus the one at step 0, from
``metrics.jsonl``), and the running Spearman correlation of predicted score and realised gain says
how well the predictions have ranked the runs so far. The gain carries a 95% bootstrap interval over
the held-out problems (paired: each problem's end minus start), and a verdict counts as right or wrong
only where that interval excludes zero.

Every file read here may be damaged, hand-edited or hostile: ``metrics.jsonl`` is streamed line by line
(at most ``MAX_METRICS_BYTES``, one record at most ``MAX_RECORD_BYTES``; only the two evaluations the gain
needs are kept), every number must be finite and in its range, and a run whose files fail a check stays on
the board, unscored, with its one-line reason in the ``problem`` column.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from opsd_diag import jobs
from opsd_diag.core.stats import spearman
from opsd_diag.errors import OpsdError, printable
from opsd_diag.io import safe

PREDICTION, METRICS = "prediction.json", "metrics.jsonl"
COLUMNS = ("run", "config", "signal", "verdict", "score", "status", "steps", "pass@1_start", "pass@1_end",
           "gain", "gain_lo", "gain_hi", "n_problems", "outcome", "kl_to_initial", "diagnosis", "problem")
VERDICTS = ("helps", "unclear", "hurts")
N_BOOT = 2000
MIN_JUDGED = 3  # runs with a clear outcome before a verdict accuracy means something
MIN_SPEARMAN = 5  # runs before a rank correlation means something (3 points allow only 4 values)
MAX_METRICS_BYTES = 256 << 20  # a 100k-step run with hundreds of evaluations writes tens of MB
MAX_RECORD_BYTES = 16 << 20  # one line: an evaluation's per-problem counts of up to MAX_PROBLEMS problems
MAX_PREDICTION_BYTES = 1 << 20  # prediction.json: a verdict, a score and the rule's inputs (a few KB)
MAX_PROBLEMS = 200_000  # held-out problems of one evaluation
BOOT_CELLS = 1 << 20  # prompt draws held at once by the bootstrap (8 MB), whatever n_boot x problems is


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
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        return math.nan


def _shown(value) -> str:
    return printable(repr(value)[:40])


# ------------------------------------------------------------------------------- prediction.json

def _prediction(path: Path) -> tuple[dict, str | None]:
    """(the prediction's fields, the one-line reason it cannot be scored or None)."""
    try:
        p = safe.read_json(path, limit=MAX_PREDICTION_BYTES)
    except OpsdError as e:
        return {}, str(e)
    except (OSError, ValueError) as e:  # gone since listed, unreadable, not UTF-8 or not JSON
        return {}, f"{PREDICTION} is unreadable or corrupt ({type(e).__name__})"
    if not isinstance(p, dict):
        return {}, f"{PREDICTION} is not a JSON object"
    fields = {k: p.get(k) if isinstance(p.get(k), str) else None for k in ("config", "signal", "verdict", "diagnosis")}
    fields["score"] = number(p.get("score"))
    for key in ("config", "signal"):
        if not isinstance(p.get(key), str):
            return fields, f"{PREDICTION} lacks its '{key}'" if key not in p else \
                f"{PREDICTION}: '{key}' is {_shown(p.get(key))}, not a name"
    if p.get("verdict") is not None and p.get("verdict") not in VERDICTS:
        return fields, f"{PREDICTION}: verdict {_shown(p.get('verdict'))} is not one of {', '.join(VERDICTS)}"
    if p.get("score") is not None and not math.isfinite(fields["score"]):
        return fields, f"{PREDICTION}: score {_shown(p.get('score'))} is not a finite number"
    return fields, None


# --------------------------------------------------------------------------------- metrics.jsonl

def _whole(step) -> bool:
    return isinstance(step, int) and not isinstance(step, bool) and 0 <= step < 2**62


def check_eval(r: dict) -> str | None:
    """Why an evaluation record cannot be used, or None."""
    if not _whole(r.get("step")):
        return f"step {_shown(r.get('step'))} is not a whole number >= 0"
    p1 = number(r.get("pass@1"))
    if not 0.0 <= p1 <= 1.0:  # NaN fails too
        return f"pass@1 {_shown(r.get('pass@1'))} is not a number in [0, 1]" if "pass@1" in r else "it lacks pass@1"
    kl = r.get("kl_to_initial")  # null where it was not finite (trainer.rundir.MetricsLog)
    if kl is not None and not math.isfinite(number(kl)):
        return f"kl_to_initial {_shown(kl)} is not a finite number"
    rows = r.get("per_problem")
    if rows is not None:
        if not isinstance(rows, list) or len(rows) > MAX_PROBLEMS:
            return f"per_problem is not a list of at most {MAX_PROBLEMS} [problem, samples, correct] counts"
        seen = set()
        for row in rows:
            ok = isinstance(row, list) and len(row) == 3 and all(
                isinstance(x, int) and not isinstance(x, bool) and x < 2**62 for x in row)
            if not ok or row[0] < 0 or not 0 <= row[2] <= row[1] or row[0] in seen:
                return f"per_problem holds {_shown(row)}, not [problem, samples, correct] with 0 <= correct <= samples"
            seen.add(row[0])
    return None


def _evaluations(path: Path) -> tuple[dict | None, dict | None, str | None]:
    """(the first evaluation at step 0, the last one after it, the one-line reason the file cannot be used):
    streamed, so memory holds one record and the two kept, whatever the file's size; the two kept are checked
    in full (``check_eval``), the others only for the step that places them."""
    try:
        fd = safe.open_regular(path)
    except FileNotFoundError:
        return None, None, None
    except OpsdError as e:
        return None, None, str(e)
    except OSError as e:
        return None, None, f"{METRICS} cannot be read ({e.strerror})"
    kept: dict[str, tuple[int, dict]] = {}
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_METRICS_BYTES:
            return None, None, (f"{METRICS} is {size >> 20} MiB, more than the {MAX_METRICS_BYTES >> 20} MiB a "
                                "training run writes: damaged, or not a training run's metrics")
        read, n = 0, 0
        while read < MAX_METRICS_BYTES:
            line = f.readline(MAX_RECORD_BYTES + 1)
            if not line:
                break
            read, n = read + len(line), n + 1
            if len(line) > MAX_RECORD_BYTES:
                return None, None, f"{METRICS}: line {n} is longer than {MAX_RECORD_BYTES >> 20} MiB"
            if not line.endswith(b"\n"):
                break  # the last line of a run still writing
            if b'"eval"' not in line:
                continue  # a training step's record: the scoreboard needs only evaluations
            try:
                r = json.loads(line)
            except RecursionError:
                return None, None, f"{METRICS}: line {n} nests too deep (damaged)"
            except ValueError:  # not JSON, or not UTF-8
                return None, None, f"{METRICS}: line {n} is not a JSON record (damaged)"
            if not isinstance(r, dict) or r.get("kind") != "eval":
                continue
            if not _whole(r.get("step")):
                return None, None, f"{METRICS}: the evaluation on line {n}: {check_eval(r)}"
            if r["step"] > 0 or "start" not in kept:
                kept["end" if r["step"] > 0 else "start"] = (n, r)
    for line_no, r in kept.values():
        if (why := check_eval(r)) is not None:
            return None, None, f"{METRICS}: the evaluation on line {line_no}: {why}"
    return kept.get("start", (0, None))[1], kept.get("end", (0, None))[1], None


def _outcome(run_dir: Path, finished: bool) -> dict:
    start, end, problem = _evaluations(run_dir / METRICS)
    if problem is None and finished and (start is None or end is None):
        problem = (f"{METRICS} has no held-out evaluation " + ("at step 0" if start is None else "after step 0")
                   + ": not scored (train with --eval-data to score a run)")
    if problem is not None:
        start = end = None

    def pass1(r):
        return math.nan if r is None else number(r.get("pass@1"))

    est, lo, hi, n = gain_interval(start, end)
    outcome = ("not scored" if problem else "improves" if lo > 0 else "degrades" if hi < 0
               else "no clear change" if n else "no interval")
    return {"steps": int(end["step"]) if end else 0, "pass@1_start": pass1(start), "pass@1_end": pass1(end),
            "gain": pass1(end) - pass1(start), "gain_lo": lo, "gain_hi": hi, "n_problems": n, "outcome": outcome,
            "kl_to_initial": number((end or {}).get("kl_to_initial")), "problem": problem}


def gain_interval(start: dict | None, end: dict | None, n_boot: int = N_BOOT, seed: int = 0):
    """(gain, lo, hi, problems): the change of pass@1 between two evaluations with a 95% bootstrap interval
    over the held-out problems, paired (each problem's end minus its start share of correct samples);
    NaNs and 0 problems when either evaluation lacks its per-problem counts (runs made before them).
    The prompt draws are those of ``core.stats.prompt_draws``, made a block of replicates at a time."""
    def counts(r):
        rows = (r or {}).get("per_problem")
        try:
            return {int(i): (int(n), int(c)) for i, n, c in rows} if isinstance(rows, list) else None
        except (TypeError, ValueError, OverflowError):
            return None  # a torn or foreign record: no interval
    a, b = counts(start), counts(end)
    both = sorted(set(a) & set(b)) if a is not None and b is not None else []
    both = [i for i in both if a[i][0] > 0 and b[i][0] > 0]
    if not both:
        return math.nan, math.nan, math.nan, 0
    d = np.array([b[i][1] / b[i][0] - a[i][1] / a[i][0] for i in both])  # [problems]
    rng, n = np.random.default_rng(seed), len(d)
    block = max(1, BOOT_CELLS // n)
    reps = np.concatenate([d[rng.integers(0, n, size=(min(block, n_boot - k), n))].sum(axis=1) / n
                           for k in range(0, n_boot, block)])  # [n_boot]: one replicate's mean per row
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(d.sum() / n), float(lo), float(hi), n


# ------------------------------------------------------------------------------------ the board

def scoreboard(root: str | Path = "runs") -> Scoreboard:
    """Every training run under ``root`` (at any depth) that holds a prediction, newest first; a run whose
    prediction or metrics cannot be used is a row with its reason (``problem``), never scored."""
    root = Path(root)
    if not root.is_dir():
        raise OpsdError(f"{root} is not a folder: pass the folder that holds your training runs (default runs/)")
    rows = []
    for path in sorted(root.rglob(PREDICTION)):
        run_dir = path.parent
        fields, problem = _prediction(path)
        st = jobs.status(run_dir).get("status")
        st = st if isinstance(st, str) else "unknown"
        outcome = _outcome(run_dir, st == "finished")
        if problem is not None:
            outcome.update(outcome="not scored", problem=problem)
        rows.append({"run": str(run_dir), "status": st, **fields, **outcome})
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["score"] = frame["score"].astype(float)
    done = frame[(frame["status"] == "finished") & frame["problem"].isna() & frame["gain"].notna()
                 & frame["score"].notna()]
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
        p = safe.read_json(path, limit=MAX_PREDICTION_BYTES)
    except (OpsdError, OSError, ValueError):
        return None
    return p if isinstance(p, dict) else None
