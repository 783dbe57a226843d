"""Does a config's training section fit the diagnosis it sits in? The teacher it trains against.

Called by the config's own validation (so ``opsd-diag run`` checks the section too) and by the
trainer; ``cfg`` is an ``config.spec.DiagnosisConfig`` with a training section.
"""

from __future__ import annotations

from pathlib import Path


def _same_model(a: str, b: str) -> bool:
    """Two model names that load the same weights (equal hub ids, or paths to one directory)."""
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return a == b or (pa.exists() and pb.exists() and pa.resolve() == pb.resolve())


def training_teacher(cfg):
    """The ``teachers`` entry the training section trains against (None for sft), checked against the
    method: opsd needs a self-teacher with a context, the other methods a teacher model."""
    spec = cfg.training
    if spec.method == "sft":
        return None
    wants_self = spec.method == "opsd"
    if spec.teacher is not None:
        found = [t for t in cfg.teachers if t.name == spec.teacher]
        if not found:
            raise ValueError(f"training.teacher '{spec.teacher}' is not a configured teacher; use one of: "
                             + ", ".join(t.name for t in cfg.teachers))
        teacher = found[0]
    else:
        fits = [t for t in cfg.teachers if t.is_self == wants_self]
        if not fits:
            kind = "a self-teacher (model: self with a context)" if wants_self else "a teacher model"
            raise ValueError(f"training.method '{spec.method}' needs {kind} in teachers")
        teacher = fits[0]
    if wants_self != teacher.is_self:
        raise ValueError(f"training: teacher '{teacher.name}' is the model {teacher.model}: use method opd, or a "
                         "teacher with model: self" if wants_self else f"training: teacher '{teacher.name}' is the "
                         "student itself: use method opsd for self-distillation")
    if not teacher.is_self and teacher.context == "none" and _same_model(teacher.model, cfg.student.model) \
            and teacher.revision == cfg.student.revision:
        raise ValueError(f"training: teacher '{teacher.name}' is the student's own model {teacher.model} with no "
                         "context, so every signal is zero: choose another teacher model, or give it a context "
                         "(model: self with context: full_solution is self-distillation, method opsd)")
    if teacher.is_self and teacher.context == "none":
        raise ValueError(f"training: teacher '{teacher.name}' is the student with no context, so every signal is "
                         "zero: give it a privileged context such as full_solution")
    if spec.method == "opd2" and cfg.base is None:
        raise ValueError("training.method 'opd2' needs a base model (the teacher before its reasoning training): "
                         "add a 'base: {model: PATH}' section")
    if spec.method == "exopd" and (spec.exopd_reference or cfg.scoring.exopd_reference) == "base" and cfg.base is None:
        raise ValueError("training.exopd_reference is 'base' but no base model is configured: add a 'base' "
                         "section or use exopd_reference: student")
    return teacher

