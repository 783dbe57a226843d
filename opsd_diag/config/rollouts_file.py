"""The ``rollouts`` section: a diagnosis of rollouts another tool already sampled (verl, slime, OpenRLHF, vLLM).

With this section ``opsd-diag run`` reads the student's rollouts from a JSON Lines file instead of sampling
them (``io.rollouts_file`` reads it; docs/design.md#rollouts-from-a-file lists the formats and their fields).
Everything else (teachers, scoring, aggregates, the predictor) runs as on sampled rollouts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

FORMATS = ("auto", "opsd", "vllm", "slime", "verl", "openrlhf")
# our field names (the ``fields`` mapping's keys): what a record of the opsd format may hold
FIELDS = ("problem_id", "prompt", "prompt_ids", "completion", "completion_ids", "logprobs", "temperature", "finished")


class RolloutsFileSpec(BaseModel):
    """Rollouts read from a file instead of sampled: one record per rollout (vLLM: per request, its outputs)."""
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)
    path: str = Field(description="JSON Lines file of rollouts (docs/design.md#rollouts-from-a-file)")  # checked
    # by io.rollouts_file.parse (io.safe.check_path): this module imports nothing of the package, for the depth
    format: Literal["auto", "opsd", "vllm", "slime", "verl", "openrlhf"] = Field(
        "auto", description="whose records: `auto` (from the first record's keys), `opsd`, `vllm`, `slime`, `verl`, "
                            "`openrlhf`")
    fields: dict[str, str] = Field(default_factory=dict, description="opsd format: our name -> the file's key, e.g. "
                                                                     "`{completion: response}`")

    @field_validator("fields")
    @classmethod
    def _ours(cls, v: dict[str, str]) -> dict[str, str]:
        bad = sorted(set(v) - set(FIELDS))
        if bad:
            raise ValueError(f"unknown field {', '.join(bad)}: our names are {', '.join(FIELDS)}")
        return v


class RolloutsOption(BaseModel):
    """The diagnosis config's ``rollouts`` key (a mixin of ``DiagnosisConfig``, kept here for spec.py's size)."""
    rollouts: RolloutsFileSpec | None = Field(
        None, description="read the student's rollouts from a file (verl, slime, OpenRLHF, vLLM) instead of sampling")
