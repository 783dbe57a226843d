"""Self-calibration: predictor v2 refitted on the user's own finished ``opsd-train --from-diagnosis`` runs
(``opsd-diag scoreboard --fit``), judged by cross-validation beside the shipped model on the same runs, and
saved as a calibration file a diagnosis uses (``ideal.calibration: PATH``, or ``opsd-diag report --calibration``).

A run is usable when it finished, its held-out gain was measured (the scoreboard's ``gain``), its
``prediction.json`` names the diagnosis it came from, and it trained a method predictor v2 models on the
signal that method trains (``prediction.SIGNAL``: opd, jsd, opd2, exopd; opsd with loss opd or jsd). Its
features are the diagnosis' columns of (config, method) (``prediction.features``), the method read from the
run's own ``config.yaml`` training section. The refit is the shipped family (``core.predictor.fit`` with the
shipped file's alpha) on the tier every run supports (``v2`` when each has a lookahead result, else
``v2_no_lookahead``); its error is cross-validated leave-one-diagnosis-out (leave-one-run-out when all runs
share one diagnosis), and its interval is the CV residuals' band. Only the Δpass@1 models are refitted: the
drift, forgetting and Δpass@4 models are the shipped file's, as are delta and the earlier studies.
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from opsd_diag import model_file, prediction
from opsd_diag.core import predictor
from opsd_diag.core.stats import jsonable, spearman
from opsd_diag.errors import OpsdError, printable
from opsd_diag.config import yamlfile
from opsd_diag.io import safe, store
from opsd_diag.summary import Summary

MIN_RUNS = 8  # usable runs before a refit of up to 7 features is worth saving
DEFAULT_OUT = "calibration.json"  # under the scoreboard's folder
PLAN_ALPHA = 1.0  # benchmarks/validity/v2/plan.yaml's ridge alpha, for a model file that does not store one
N_BOOT = 1000  # bootstrap replicates of a Spearman interval over runs
USABLE = ("a finished `opsd-train --from-diagnosis` run with a held-out gain (--eval-data) that trained opd, jsd, "
          "opd2, exopd or opsd (loss opd or jsd) on its method's own signal, from a diagnosis that can be read")


@dataclass(frozen=True)
class Sample:
    """One usable run: what the diagnosis said of its (config, method), and what the run realised."""
    run: str
    diagnosis: str
    config: str
    method: str
    gain: float  # realised held-out Δpass@1
    x: dict  # prediction.features of (config, method)

    @property
    def has_lookahead(self) -> bool:
        return not all(math.isnan(self.x[f]) for f in prediction.LOOKAHEAD)


@dataclass(frozen=True)
class Fit:
    samples: list[Sample]
    skipped: list[tuple[str, str]]  # (run, why it is not used)
    tier: str  # the refitted tier (the calibration's choice)
    scheme: str  # how the cross-validation folds were made
    cv: np.ndarray  # [n] out-of-fold Δpass@1 of the refit
    shipped: np.ndarray  # [n] the shipped model's Δpass@1 (the tier it gives each run)
    calibration: dict  # the model file to save

    @property
    def gains(self) -> np.ndarray:
        return np.array([s.gain for s in self.samples])  # [n]

    def errors(self, which: str) -> tuple[float, float]:
        """(mean absolute error, Spearman) of ``which`` ("cv" or "shipped") against the realised gains. The Spearman
        ranks at 12 significant digits: runs with the same features and gains get the same prediction, a tie that the
        CPU's summation may otherwise split by one ulp."""
        pred = self.cv if which == "cv" else self.shipped
        tied = [np.array([float(f"{v:.12g}") for v in a]) for a in (pred, self.gains)]
        return float(np.mean(np.abs(self.gains - pred))), spearman(*tied)


# ---------------------------------------------------------------------------------------- the runs

def trained_method(training) -> str | None:
    """The predictor v2 method a training section trained (opsd + loss -> opsd_opd / opsd_jsd), or None."""
    if not isinstance(training, dict):
        return None
    method = training.get("method")
    if method == "opsd":
        loss = training.get("loss", "jsd")  # TrainingSpec's default loss
        return f"opsd_{loss}" if loss in ("opd", "jsd") else None
    return method if method in prediction.EXTERNAL_METHODS else None


def _sample(row: dict, summary_of: Callable[[str], Summary], summaries: dict) -> Sample | str:
    """The run of a scoreboard row as a Sample, or a few words saying why it is not usable."""
    if row["status"] != "finished":
        return "not finished"
    if isinstance(row["problem"], str):
        return "not scored (its files fail a check)"
    if not math.isfinite(row["gain"]):
        return "no held-out gain (trained without --eval-data)"
    if not isinstance(row["diagnosis"], str):
        return "its prediction.json names no diagnosis"
    try:
        cfg = yamlfile.read_mapping(Path(row["run"]) / "config.yaml", "training run config", "training")
    except OpsdError:
        return "its config.yaml cannot be read"
    method = trained_method(cfg.get("training"))
    if method is None or prediction.SIGNAL[method] != row["signal"]:
        return "trained a method or signal predictor v2 does not model"
    if row["diagnosis"] not in summaries:
        try:
            summaries[row["diagnosis"]] = summary_of(row["diagnosis"])
        except OpsdError:
            summaries[row["diagnosis"]] = None
    summary = summaries[row["diagnosis"]]
    if summary is None:
        return "its diagnosis cannot be read (moved, unfinished or damaged)"
    if row["config"] not in summary.configs:
        return "its config is not in its diagnosis"
    return Sample(row["run"], row["diagnosis"], row["config"], method, float(row["gain"]),
                  prediction.features(summary, row["config"], method))


def samples(frame: pd.DataFrame, summary_of: Callable[[str], Summary]) -> tuple[list[Sample], list[tuple[str, str]]]:
    """(the usable runs of a scoreboard frame, (run, why) of the others); ``summary_of``: a diagnosis
    directory's Summary (``Run.load(path).summary``), read once per diagnosis."""
    usable, skipped, summaries = [], [], {}
    for row in frame.to_dict("records"):
        s = _sample(row, summary_of, summaries)
        (usable.append(s) if isinstance(s, Sample) else skipped.append((row["run"], s)))
    return usable, skipped


# ------------------------------------------------------------------------------------- the fit

def matrix(rows: list[Sample], features) -> np.ndarray:
    return np.array([[s.x[f] for f in features] for s in rows], dtype=np.float64).reshape(len(rows), len(features))


def _fit(X: np.ndarray, y: np.ndarray, features, alpha: float) -> dict:
    """``core.predictor.fit``, quiet about a column with no value in these rows (a lookahead's dll where no prompt
    had both correct and incorrect completions): it is imputed at 0 and adds nothing, as the fit says."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "Mean of empty slice", "Degrees of freedom <= 0"
        return predictor.fit(X, y, list(features), alpha)


def cross_validate(X: np.ndarray, y: np.ndarray, groups, features, alpha: float) -> np.ndarray:
    """``[n]`` out-of-fold predictions: for each group, ``core.predictor.fit`` on the other groups' rows (their
    own standardisation) predicts the group's rows."""
    groups = np.asarray(groups)
    out = np.full(len(y), np.nan)  # [n]
    for g in np.unique(groups):
        held = groups == g  # [n]
        m = _fit(X[~held], y[~held], features, alpha)
        out[held] = predictor.predict(m, X[held])
    return out


def folds(rows: list[Sample]) -> tuple[list, str]:
    """(the fold of each run, the scheme in words): one fold per diagnosis, or per run when there is one."""
    diagnoses = sorted({s.diagnosis for s in rows})
    if len(diagnoses) > 1:
        return [s.diagnosis for s in rows], f"leave-one-diagnosis-out over {len(diagnoses)} diagnoses"
    return list(range(len(rows))), "leave-one-run-out (all runs share one diagnosis)"


def _rho_ci(pred: np.ndarray, y: np.ndarray, seed: int = 0) -> dict:
    """Spearman of pred and y with a 95% bootstrap interval over runs (the model file's form of a rho)."""
    rng, n = np.random.default_rng(seed), len(y)
    reps = np.array([spearman(pred[i], y[i]) for i in rng.integers(0, n, size=(N_BOOT, n))])  # [N_BOOT]
    reps = reps[np.isfinite(reps)]
    lo, hi = np.quantile(reps, [0.025, 0.975]) if reps.size else (math.nan, math.nan)
    return {"estimate": spearman(pred, y), "lo": float(lo), "hi": float(hi)}


def _shipped_gain(shipped: model_file.Calibration, s: Sample) -> float:
    """The shipped model's Δpass@1 for a run, with the tier it gives the run (as ``prediction.predict`` does)."""
    m = shipped.models[prediction.tier_for(shipped, s.has_lookahead)]["d_pass1"]
    return float(predictor.predict(m, matrix([s], m["features"]))[0])


def _alpha(shipped: model_file.Calibration, tier: str) -> float:
    return float(shipped.models[tier]["d_pass1"].get("alpha", PLAN_ALPHA))


def fit(frame: pd.DataFrame, summary_of: Callable[[str], Summary], root: str | Path = "runs",
        shipped: model_file.Calibration | None = None) -> Fit:
    """Predictor v2's Δpass@1 refitted on the usable runs of a scoreboard frame (see the module docstring);
    fewer than ``MIN_RUNS`` usable runs, or no shipped model file, is one OpsdError."""
    shipped = shipped or prediction.load()
    if shipped is None:
        raise OpsdError("this installation has no shipped predictor v2 model file (opsd_diag/data/predictor_v2.json, "
                        "written by benchmarks/validity/v2/report_v2.py): a refit copies its other models; reinstall")
    rows, skipped = samples(frame, summary_of)
    if len(rows) < MIN_RUNS:
        why = Counter(w for _, w in skipped)
        raise OpsdError(f"a refit needs {MIN_RUNS} usable runs and {root} has {len(rows)} ({MIN_RUNS - len(rows)} "
                        f"more needed); usable: {USABLE}" + ("; not usable: " + ", ".join(
                            f"{n} {w}" for w, n in why.most_common()) if why else ""))
    tier = "v2" if all(s.has_lookahead for s in rows) else "v2_no_lookahead"
    y, (groups, scheme) = np.array([s.gain for s in rows]), folds(rows)  # [n]
    models, cv, lowo = copy.deepcopy(shipped.models), {}, {}
    for t in (("v2", "v2_no_lookahead") if tier == "v2" else (tier,)):  # rows without a lookahead use no_lookahead
        features, alpha = shipped.models[t]["d_pass1"]["features"], _alpha(shipped, t)  # the shipped model's own
        X = matrix(rows, features)  # [n, f]
        cv[t] = cross_validate(X, y, groups, features, alpha)
        models[t]["d_pass1"] = {**_fit(X, y, features, alpha),
                                "residual_band": list(predictor.residual_band(y - cv[t]))}
        lowo[t] = {"spearman": _rho_ci(cv[t], y), "mae": float(np.mean(np.abs(y - cv[t]))), "scheme": scheme}
    shipped_pred = np.array([_shipped_gain(shipped, s) for s in rows])  # [n]
    calibrated_on = {
        "n": len(rows), "tier": tier, "scheme": scheme, "alpha": _alpha(shipped, tier), "root": str(root),
        "created": time.time(), "n_diagnoses": len({s.diagnosis for s in rows}),
        "cv": {"mae": lowo[tier]["mae"], "spearman": spearman(cv[tier], y)},
        "shipped": {"source": shipped.source, "mae": float(np.mean(np.abs(y - shipped_pred))),
                    "spearman": spearman(shipped_pred, y)},
        "runs": [{"run": s.run, "diagnosis": s.diagnosis, "config": s.config, "method": s.method, "gain": s.gain,
                  "cv_prediction": float(cv[tier][i]), "shipped_prediction": float(shipped_pred[i])}
                 for i, s in enumerate(rows)],
        "skipped": [{"run": r, "why": w} for r, w in skipped]}
    gap = np.array([s.x["accuracy_gap"] for s in rows])  # [n]
    cal = {"version": 2, "generated_by": "opsd-diag scoreboard --fit", "choice": tier,
           "reason": f"refitted on {len(rows)} of your runs; cross-validated MAE "
                     f"{lowo[tier]['mae']:.3f} against the shipped model's {calibrated_on['shipped']['mae']:.3f}",
           "delta": shipped.delta, "models": models, "lowo": lowo, "accuracy_gap": _rho_ci(gap, y),
           "studies": shipped.studies, "study": f"self-calibration on the runs under {root}",
           "calibrated_on": calibrated_on}
    return Fit(rows, skipped, tier, scheme, cv[tier], shipped_pred, jsonable(cal))


# ------------------------------------------------------------------------------------- the file

def _shipped_path() -> Path | None:
    try:
        return Path(str(resources.files("opsd_diag") / "data" / model_file.SHIPPED)).resolve()
    except (TypeError, OSError):
        return None


def check_out(out: str | Path) -> Path:
    """``out`` may take a calibration: outside every run directory, not the shipped file, and absent or an
    earlier model file (a config, a data file or anything else there is never replaced)."""
    out = safe.check_path(out, "--out")
    safe.check_target(out)
    if (run := safe.run_of(out.parent)) is not None:
        raise OpsdError(f"--out {out} lies in the run directory {run}: a calibration is never written into a run; "
                        "choose a path outside it")
    if out.resolve() == _shipped_path():
        raise OpsdError(f"--out {out} is the shipped model file: choose another path (a diagnosis names yours with "
                        "ideal.calibration)")
    if out.exists():
        try:
            prediction.load(out)
        except OpsdError:
            raise OpsdError(f"--out {out} exists and is not a predictor v2 model file: a refit only replaces an "
                            "earlier calibration; choose another --out") from None
    if not out.parent.is_dir():
        raise OpsdError(f"--out {out}: its folder {out.parent} does not exist; create it or choose another --out")
    return out


def save(result: Fit, out: str | Path) -> Path:
    """Write the calibration atomically (``io.safe``): never into a run directory, never over another file."""
    out = check_out(out)
    store.atomic_write_json(out, result.calibration, own_run=False)
    prediction.load(out)  # what a diagnosis will read back
    return out


def _fmt(v: float, spec: str) -> str:
    return "n/a" if not math.isfinite(v) else format(v, spec)


def report(result: Fit, out: Path) -> str:
    """The lines ``opsd-diag scoreboard --fit`` prints: runs not used, both errors, where the file is."""
    (mae, rho), (s_mae, s_rho) = result.errors("cv"), result.errors("shipped")
    n = len(result.samples)
    lines = [printable(f"not used: {run}: {why}") for run, why in result.skipped]
    lines += [f"refit ({result.tier}) on {n} runs, {result.scheme}: cross-validated mean absolute error "
              f"{_fmt(mae, '.4f')}, Spearman {_fmt(rho, '+.3f')}",
              f"shipped model on the same {n} runs: mean absolute error {_fmt(s_mae, '.4f')}, "
              f"Spearman {_fmt(s_rho, '+.3f')}",
              printable(f"calibration saved to {out}: a diagnosis uses it with 'ideal.calibration: {out}' in its "
                        f"config, or 'opsd-diag report RUN --calibration {out}'")]
    return "\n".join(lines)


def fit_and_save(frame: pd.DataFrame, summary_of: Callable[[str], Summary], root: str | Path,
                 out: str | Path | None = None) -> str:
    """``opsd-diag scoreboard ROOT --fit [--out FILE]``: the target checked first, then fit, save, and the text."""
    out = check_out(Path(root) / DEFAULT_OUT if out is None else out)
    result = fit(frame, summary_of, root)
    return report(result, save(result, out))
