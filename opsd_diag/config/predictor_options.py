"""Options of predictor v2 (issue 32), mixed into ``IdealSpec`` and ``LookaheadSpec`` (kept here for spec.py's size).

``ideal.acting_budget``: the ideal-gradient estimates also at the nodes where training acts
(``engine.nodes.plan_acting``). ``lookahead.methods``: the losses looked ahead with;
``lookahead.fresh_samples``: the lookahead's success change also from fresh samples of the stepped and the
initial student on the measurement half (``engine.lookahead``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class IdealOptions(BaseModel):
    """``IdealSpec``'s ``acting_budget`` (a mixin)."""
    acting_budget: int = Field(0, ge=0, le=10_000_000, description="continuations for the nodes where training "
                                                                   "acts (largest reverse KL), beside `budget`; 0: none")


class LookaheadOptions(BaseModel):
    """``LookaheadSpec``'s ``methods`` and ``fresh_samples`` (a mixin)."""
    methods: list[Literal["opd", "jsd", "opd2", "exopd"]] = Field(default_factory=lambda: ["opd", "jsd"], min_length=1,
                                                                  description="loss methods, each on every teacher")
    fresh_samples: int = Field(0, ge=0, le=1024, description="fresh samples per measurement prompt from the stepped "
                                                             "and the initial student (pass@1, pass@k change); 0: none")
