"""Train what a diagnosis predicted: the training config of one (config, signal) of a finished run,
and the prediction it came from, kept with the training run (``prediction.json``) for the track record.

Each diagnosed signal maps to the method that trains on exactly that signal:

    signal   external teacher model              self-teacher (the student shown a context)
    r_opd    opd                                 opsd, loss opd
    jsd      jsd (beta = scoring.jsd_beta)       opsd, loss jsd
    rev_kl   jsd with beta 1 (reverse KL)        opsd, loss jsd, beta 1
    fwd_kl   jsd with beta 0 (forward KL)        opsd, loss jsd, beta 0
    a_d2     opd2                                -- (OPD² needs a teacher model and its base)
    a_ex     exopd                               --
"""

from __future__ import annotations

import time
from pathlib import Path

from opsd_diag.errors import OpsdError
from opsd_diag.run import Run
from opsd_diag.config.spec import DiagnosisConfig
from opsd_diag.config.training import with_training

EXTERNAL = {"r_opd": {"method": "opd"}, "jsd": {"method": "jsd"}, "rev_kl": {"method": "jsd", "beta": 1.0},
            "fwd_kl": {"method": "jsd", "beta": 0.0}, "a_d2": {"method": "opd2"}, "a_ex": {"method": "exopd"}}
SELF = {"r_opd": {"method": "opsd", "loss": "opd"}, "jsd": {"method": "opsd", "loss": "jsd"},
        "rev_kl": {"method": "opsd", "loss": "jsd", "beta": 1.0}, "fwd_kl": {"method": "opsd", "loss": "jsd", "beta": 0.0}}


def method_for(cfg: DiagnosisConfig, config: str, signal: str) -> dict:
    """The training-section keys that train on ``signal`` with the teacher config ``config``."""
    teachers = {t.name: t for t in cfg.teachers}
    if config not in teachers:
        raise OpsdError(f"--config {config!r} is not a teacher config of the diagnosis: use one of "
                        f"{', '.join(teachers)}")
    table = SELF if teachers[config].is_self else EXTERNAL
    if signal not in table:
        kind = "a self-teacher" if teachers[config].is_self else "a teacher model"
        raise OpsdError(f"--signal {signal!r} cannot be trained with {kind} ({config}): use one of "
                        f"{', '.join(table)}")
    return {"teacher": config, **table[signal]}


def trainable_signals(cfg: DiagnosisConfig, config: str) -> list[str]:
    """The diagnosed signals the teacher config ``config`` can train on (the table above)."""
    teachers = {t.name: t for t in cfg.teachers}
    return list(SELF if config in teachers and teachers[config].is_self else EXTERNAL)


def why_not(cfg: DiagnosisConfig, config: str, signal: str) -> str | None:
    """Why (config, signal) cannot be trained, in a few words; None when it can."""
    if signal in trainable_signals(cfg, config):
        return None
    if signal in EXTERNAL:
        return f"{signal} needs a teacher model (and, for OPD², its base); {config} is the student shown a context"
    return f"no training method trains on {signal}"


def training_config(run: Run, config: str, signal: str, *, trust_remote_code: bool = False,
                    **overrides) -> DiagnosisConfig:
    """The diagnosis config with a training section for (config, signal); the config's own training
    section (when it has one) supplies the defaults, ``overrides`` (None values ignored) the rest.
    Remote code is on only when the user says so (``trust_remote_code``), never because the run does."""
    cfg, _ = run.config_for_models(trust_remote_code)
    return with_training(cfg, {**method_for(cfg, config, signal), **overrides}, f"training from {run.path}")


def prediction(run: Run, config: str, signal: str) -> dict:
    """What the diagnosis said of (config, signal): verdict, score, reason and the rule's inputs."""
    v = run.summary.verdicts.get(config, {}).get(signal)
    entry = run.summary.configs.get(config)
    ideal = run.summary.ideal.configs.get(config) if run.summary.ideal else None
    return {
        "diagnosis": str(run.path.resolve()), "config": config, "signal": signal, "created": time.time(),
        "verdict": v.verdict if v else None, "score": v.score if v else None, "reason": v.reason if v else None,
        "teacher_advantage": ideal.teacher_advantage["all"].model_dump() if ideal else None,
        "alignment": ideal.alignment[signal]["all"].mean.model_dump() if ideal and signal in ideal.alignment
        else None,
        "accuracy_gap": entry.teacher_minus_student_accuracy.model_dump()
        if entry and entry.teacher_minus_student_accuracy else None,
        "student_accuracy": run.summary.student_accuracy.model_dump(),
        "v2": v2_prediction(run, config, signal),
    }


def v2_prediction(run: Run, config: str, signal: str) -> dict | None:
    """Predictor v2's row for the method that trains (config, signal), as the run's calibration gives it; None for
    a signal v2 does not model (rev_kl, fwd_kl) or an installation without a model file."""
    from opsd_diag.prediction import SIGNAL

    p = run.predictions()
    if p is None:
        return None
    row = next((r for r in p.rows if r.config == config and SIGNAL[r.method] == signal), None)
    if row is None:
        return None
    return {"method": row.method, "tier": row.tier, "predicted_gain": row.gain, "lo": row.lo, "hi": row.hi,
            "verdict": row.verdict, "drift": row.drift, "ranked_by": p.ranked_by, "calibration": p.calibration.source}


def from_diagnosis(run_dir: str | Path | Run, config: str, signal: str, *, trust_remote_code: bool = False,
                   **overrides) -> tuple[DiagnosisConfig, dict, str | None]:
    """(the training config, the prediction record, the trust rule's note or None) of (config, signal) of the
    finished run in ``run_dir`` (or that run, loaded); remote code only as ``trust_remote_code`` (the user's flag)
    says."""
    run = run_dir if isinstance(run_dir, Run) else Run.load(run_dir)
    cfg = training_config(run, config, signal, trust_remote_code=trust_remote_code, **overrides)
    check_scored(run, cfg, config)
    return cfg, prediction(run, config, signal), run.config_for_models(trust_remote_code)[1]


def recommended(run: Run) -> tuple[str, str]:
    """(config, signal) of the finished run's recommendation, the row its report and the app's **Train it** give:
    predictor v2's best-ranked trainable row that its ranking supports (``Predictions.recommended``: the guarded)."""
    p = run.predictions()
    rec = p.recommended(lambda config, signal: why_not(run.config, config, signal) is None) if p else None
    if rec is None:
        raise OpsdError(f"the diagnosis {run.path} recommends nothing to train (see opsd-diag report {run.path}): "
                        "choose what to train with --config NAME --signal SIGNAL")
    return rec.config, rec.signal


def check_scored(run: Run, cfg: DiagnosisConfig, config: str) -> None:
    """The teacher the manifest names for ``config`` is one the diagnosis scored: the config has a summary, and
    its model is of the family its tables were scored with (``engine.cross.check_scored``). A manifest edited to
    name another teacher would train a teacher the prediction is not about."""
    from opsd_diag.engine.cross import SWAPPED, check_scored as check_family

    if config not in run.configs:
        raise OpsdError(f"the diagnosis has no summary of config '{config}': {SWAPPED}")
    check_family(run.path, cfg, [config])
