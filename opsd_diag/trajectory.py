"""A folder of probe runs (``engine.probe``) read as a trajectory: signals, verdicts, predicted gain and
collapse detectors over training steps.

Every number is read from a probe's own run directory through ``opsd_diag.run.Run`` (its summary, its verdict
table, predictor v2's predictions): nothing is recomputed here. ``scalars`` flattens one probe into the
``name -> float`` dict the trainers log to their trackers; ``frame`` stacks every probe of a folder into one
long table (step, name, value) that the app's Trajectory page plots; ``write_report`` writes a probe's HTML
report with its token heatmaps (``opsd_diag.report``), the probe's artifact.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from opsd_diag.config.probe import PROBE
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.run import Run

REPORT = "report.html"  # a probe's HTML report with its token heatmaps
PREFIX = "diagnosis"  # every logged name starts with it: diagnosis/<config>/<what>
VERDICT_CODE = {"helps": 1.0, "unclear": 0.0, "hurts": -1.0}  # the v1 verdict as a number a tracker can plot
HEADLINE = ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd", "sign_agreement", "near_zero_share", "teacher_accuracy",
            "accuracy_gap", "teacher_truncated")  # per teacher config, from Summary.headline_frame
STUDENT = "student"  # the policy's own detectors, under diagnosis/student/<what>


def _num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def scalars(run: Run) -> dict[str, float]:
    """One probe's numbers, named ``diagnosis/<config>/<what>`` (the policy's own: ``diagnosis/student/<what>``).

    Per teacher config: the headline means (``HEADLINE``), the v1 verdict per signal as +1 / 0 / -1
    (``verdict/<signal>``) and predictor v2's predicted held-out Δpass@1 per method
    (``predicted_gain/<method>``). The collapse detectors of the policy: its mean entropy on its own samples,
    accuracy, pass@k and the pass@k headroom over pass@1, truncated share, mean completion length. A value
    the run does not have (no verdict, a NaN) is left out, never logged as 0.
    """
    out: dict[str, float] = {}

    def put(name: str, value) -> None:
        if (v := _num(value)) is not None:
            out[f"{PREFIX}/{name}"] = v

    for row in run.summary.headline_frame().to_dict("records"):
        for col in HEADLINE:
            put(f"{row['config']}/{col}", row[col])
    verdicts = run.verdicts()
    for row in (verdicts.to_dict("records") if verdicts is not None else ()):
        put(f"{row['config']}/verdict/{row['signal']}", VERDICT_CODE.get(row["verdict"]))
    preds = run.predictions()
    for row in (preds.frame().to_dict("records") if preds is not None else ()):
        put(f"{row['config']}/predicted_gain/{row['method']}", row["predicted_gain"])
    first = next(iter(run.summary.configs.values()), None)
    if first is not None and "h_s" in first.overall.columns:  # the student's entropy: the same under every config
        put(f"{STUDENT}/entropy", first.overall.columns["h_s"].mean)
    put(f"{STUDENT}/accuracy", run.summary.student_accuracy.estimate)
    ks = {k: v for k, v in run.summary.pass_at_k.items() if _num(v) is not None}
    for k, v in ks.items():
        put(f"{STUDENT}/{k}", v)
    if "pass@1" in ks and len(ks) > 1:
        put(f"{STUDENT}/pass@k_headroom", max(ks.values()) - ks["pass@1"])
    put(f"{STUDENT}/truncated", run.summary.student_truncated_share)
    put(f"{STUDENT}/completion_length", run.table("rollouts")["length"].mean())
    return out


def probes(root: str | Path) -> list[tuple[int, Path]]:
    """(step, directory) of every finished probe under ``root``, by step."""
    root = Path(root)
    if not root.is_dir():
        raise OpsdError(f"{root} is not a folder of probe runs: give the 'probes' folder of a training run, or the "
                        "folder a DiagnosisCallback wrote to")
    found = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and (p / PROBE).is_file()):
        found.append((int(store.read_json(d / PROBE)["step"]), d))
    return sorted(found, key=lambda sd: sd[0])


def frame(root: str | Path) -> pd.DataFrame:
    """Every probe under ``root`` as one long table: step, config (a teacher config or 'student'), what,
    name (``diagnosis/<config>/<what>``), value; an empty folder is an OpsdError naming the fix."""
    rows = []
    for step, d in probes(root):
        for name, value in scalars(Run.load(d)).items():
            _, config, what = name.split("/", 2)
            rows.append({"step": step, "config": config, "what": what, "name": name, "value": value})
    if not rows:
        raise OpsdError(f"{root} holds no finished probe: train with training.diagnose_every (opsd-train) or a "
                        "DiagnosisCallback, and open its probes folder")
    return pd.DataFrame(rows, columns=["step", "config", "what", "name", "value"])


def write_report(run: Run, n_heatmaps: int, step: int) -> Path:
    """The probe's HTML report (summary, verdicts, figures and ``n_heatmaps`` token heatmaps) in its directory."""
    path = run.path / REPORT
    store.atomic_write_text(path, run.report_html(n_heatmaps=n_heatmaps, title=f"Probe at step {step}"))
    return path


COLLAPSE = ("entropy", "pass@k_headroom", "accuracy", "completion_length", "truncated")  # the policy's detectors


def changes(frame: pd.DataFrame) -> pd.DataFrame:
    """Per name: its value at the first and at the last probe that has it, and last - first (a falling entropy
    or pass@k headroom is the collapse the detectors watch for)."""
    f = frame.sort_values("step")
    first, last = f.groupby("name").first(), f.groupby("name").last()
    return pd.DataFrame({"config": first["config"], "what": first["what"], "first_step": first["step"],
                         "first": first["value"], "last_step": last["step"], "last": last["value"],
                         "change": last["value"] - first["value"]}).reset_index()
