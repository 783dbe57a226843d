"""The frozen settings the engine and the trainer run with, resolved from the config in one place.

``opsd_diag.config.spec`` builds each of these from its sections (``...settings()`` methods): the
engine never reads a config section, and no default is repeated here (every field is required).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """One sampling call: ``num_samples`` completions per prompt from softmax(logits / temperature)."""
    num_samples: int
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int
    batch_size: int  # rows per generate call


@dataclass(frozen=True, kw_only=True)
class ScoreSettings:
    """How scored tokens become signals: one temperature for all models, the centring, beta, lambda."""
    temperature: float
    jsd_beta: float
    centering: int | None  # None: full vocabulary; k: the student's top-k plus the sampled token
    exopd_lambda: float
    exopd_reference: str  # "student" (the initial student) or "base"
    top_k: int  # alternatives kept per position for display
    chunk_size: int  # positions per LM-head chunk


@dataclass(frozen=True, kw_only=True)
class LossSettings:
    """The per-token loss of one training method (opsd is already mapped to the loss it trains with)."""
    method: str  # opd | jsd | opd2 | exopd | sft
    temperature: float  # the scoring temperature tau
    beta: float  # JSD beta: 0 forward KL(teacher || student), 1 reverse KL(student || teacher)
    centering: int | None
    exopd_lambda: float
    clip: float | None  # clip sampled-token advantages to [-clip, clip]

    @property
    def needs_teacher(self) -> bool:
        return self.method != "sft"

    @property
    def needs_base(self) -> bool:
        return self.method == "opd2"

@dataclass(frozen=True, kw_only=True)
class MaskSettings:
    """The tokens a training step keeps (``training.token_mask``; the rules: ``core.token_mask``)."""
    kind: str
    entropy_quantiles: tuple[float, float]
    advantage_top: float
    teacher_confidence: float
    positions: tuple[int, int | None]
    rollouts: str  # all | correct | incorrect | surprising
    rollouts_share: float = 0.5  # surprising: the share of each micro-batch's sampled tokens kept

    @property
    def keeps_all(self) -> bool:
        return self.kind == "all" and self.rollouts == "all"

    @property
    def needs_scores(self) -> bool:
        return self.kind in ("opd2_gate", "entropy", "advantage", "confident_disagreement")  # read logits

    @property
    def needs_base(self) -> bool:
        return self.kind == "opd2_gate"

    @property
    def needs_outcomes(self) -> bool:
        return self.rollouts in ("correct", "incorrect")

    def sampled_length(self, max_new_tokens: int) -> int:
        """How many tokens a rollout needs: a position window ending at ``end`` never reads a later token, and a
        causal model samples and scores the tokens before it as it would in a longer rollout, so sampling stops
        there (unless an outcome is read, which needs the whole completion)."""
        end = self.positions[1]
        if self.kind != "position" or end is None or self.needs_outcomes:
            return max_new_tokens
        return min(max_new_tokens, end)


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings:
    """The teacher's revealed share of the solution per step (``training.context_schedule``; the rules:
    ``core.context_schedule``)."""
    kind: str
    start: float
    end: float
    decay_steps: int
    accuracy_ema: float

    @property
    def is_full(self) -> bool:
        """Every step shows the whole solution: the teacher views are today's."""
        return self.kind == "fixed" and self.start == 1.0

    @property
    def needs_outcomes(self) -> bool:
        return self.kind == "adaptive"


def derive_seed(seed: int, a: int = 0, b: int = 0, c: int = 0) -> int:
    """A child seed of ``seed`` for the unit (a, b, c) of work (a shard, a step, a generation chunk...).

    A unit's random draws then depend only on the run seed and the unit itself: not on how many
    processes share the work, on resumes, or on the batch the unit happens to sit in.
    """
    return (seed * 1_000_003 + a * 9_176 + b * 7_919 + c) % 2**31
