"""``training.diagnose_every``: a small diagnosis of the policy every N training steps (a probe).

The same section drives ``opsd-train`` and the TRL callback (``trainer.trl_callback``). A probe is an
ordinary diagnosis run (the config's student replaced by the live policy) on a fixed probe set: the first
``problems`` problems of the diagnosis' ``data``; ``engine.probe`` builds its config, ``opsd_diag.trajectory``
reads the probe runs as a trajectory. ``opsd-train`` writes them under ``probes/`` in its run directory.
``diagnose_every: 50`` is short for ``diagnose_every: {steps: 50}``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

PROBE = "probe.json"  # written last into a finished probe run directory: its training step and its source


class ProbeSpec(BaseModel):
    """Every ``steps`` optimizer steps, a diagnosis of the current policy written as a run directory."""
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, strict=True)

    steps: int = Field(ge=1, description="probe every this many optimizer steps")
    problems: int = Field(8, ge=1, le=100_000, description="the probe set: the first N problems of `data`")
    num_samples: int | None = Field(None, ge=1, le=1024, description="rollouts per probe problem; default sampling's")
    max_completion_length: int | None = Field(None, ge=1, le=32768, description="default: sampling's")
    verdict: bool = Field(True, description="run the ideal-gradient predictor (the v1 verdict) at every probe")
    budget: int = Field(128, ge=1, le=10_000_000,
                        description="the predictor's continuations per probe (`ideal.budget`)")
    at_start: bool = Field(True, description="probe the initial policy too (step 0, the trajectory's baseline)")
    heatmaps: int = Field(2, ge=0, le=50, description="rollouts per probe written as HTML token heatmaps")

    @model_validator(mode="before")
    @classmethod
    def _short(cls, value):
        return {"steps": value} if isinstance(value, int) and not isinstance(value, bool) else value

    def due(self, step: int, last: bool = False) -> bool:
        """Whether the policy after ``step`` optimizer steps is probed (step 0: the initial policy; ``last``:
        the run's final step, always probed)."""
        return self.at_start if step == 0 else (last or step % self.steps == 0)

    @staticmethod
    def step_dir(step: int) -> str:
        """The probe run directory's name for the policy after ``step`` steps (sorts by step)."""
        return f"step-{step:07d}"


class ProbeOption(BaseModel):
    """The ``diagnose_every`` key of the ``training`` section (``config.spec.TrainingSpec``)."""
    diagnose_every: ProbeSpec | None = Field(
        None, description="a small diagnosis of the policy every N steps, written under probes/ (docs/probes.md)")
