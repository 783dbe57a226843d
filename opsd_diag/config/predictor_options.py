"""Options of predictor v2 (issue 32), mixed into ``IdealSpec`` and ``LookaheadSpec`` (kept here for spec.py's size).

``ideal.acting_budget``: the ideal-gradient estimates also at the nodes where training acts
(``engine.nodes.plan_acting``). ``lookahead.methods``: the losses looked ahead with;
``lookahead.fresh_samples``: the lookahead's success change also from fresh samples of the stepped and the
initial student on the measurement half (``engine.lookahead``); ``lookahead.forgetting``: a problem set (a
``DataSpec``, resolved where ``config.spec`` defines it: that module imports this one) whose pass@1 change between
the stepped and the initial student measures forgetting (``engine.lookahead``; read, rendered: ``engine.diagnose``);
``lookahead.reference``: the template of the measurement problems' reference responses, whose log-likelihood change
under the stepped student is measured (``engine.lookahead``; a ``Template``, resolved as ``DataSpec`` is).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class IdealOptions(BaseModel):
    """``IdealSpec``'s ``acting_budget`` (a mixin)."""
    acting_budget: int = Field(0, ge=0, le=10_000_000, description="continuations for the nodes where training "
                                                                   "acts (largest reverse KL), beside `budget`; 0: none")


class LookaheadOptions(BaseModel):
    """``LookaheadSpec``'s ``methods``, ``fresh_samples`` and the forgetting set (a mixin). The forgetting set is
    not filled from ``training.eval.regression``: it costs samples of every stepped student, so it is measured only
    where it is asked for (write the same section under both keys to measure the trainer's regression set)."""
    methods: list[Literal["opd", "jsd", "opd2", "exopd"]] = Field(default_factory=lambda: ["opd", "jsd"], min_length=1,
                                                                  description="loss methods, each on every teacher")
    fresh_samples: int = Field(0, ge=0, le=1024, description="fresh samples per measurement prompt from the stepped "
                                                             "and the initial student (pass@1, pass@k change); 0: none")
    # "DataSpec": a forward reference (no import: config.spec imports this module), resolved by pydantic in
    # config.spec's namespace, where LookaheadSpec is defined and DataSpec with it
    forgetting: DataSpec | None = Field(  # noqa: F821
        None, description="a problem set with answers whose pass@1 change from the initial to each stepped student "
                          "is measured (the same seeds); none: not measured (not taken from training.eval.regression)")
    forgetting_samples: int = Field(4, ge=1, le=1024, description="samples per forgetting problem from each student")
    reference: Template | None = Field(  # noqa: F821 - resolved in config.spec's namespace, as DataSpec is
        None, description="template of each measurement problem's reference response (as training.sft_target, e.g. "
                          "'{solution}'), scored under the initial and each stepped student; none: not scored")
