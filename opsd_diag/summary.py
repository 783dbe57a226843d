"""``summary.json``, typed: the one home of the summary schema and of the tables read from it.

``core.aggregate`` and the predictor write the file (validated against these models first), and
``Run.summary`` reads it; the CLI, the figures and the app read fields and frames from here, never
key chains into a dict. Numbers that were NaN are stored as null and come back as None (NaN in the
frames).
"""

from __future__ import annotations

import math

import pandas as pd
from pydantic import BaseModel, ConfigDict

from opsd_diag.schema import HEADLINE_COLUMNS

Num = float | None


class _Model(BaseModel):
    # unknown keys are ignored, so a run written by an older version (with fields since dropped) still opens
    model_config = ConfigDict(extra="ignore", frozen=True)


class CI(_Model):
    """A 95% bootstrap interval over prompts."""
    estimate: Num = None
    lo: Num = None
    hi: Num = None
    n_prompts: int = 0
    n_samples: int | None = None  # accuracy CIs: the samples behind it
    n_nodes: int | None = None  # predictor CIs: the nodes behind it

    def value(self) -> float:
        return math.nan if self.estimate is None else self.estimate

    def text(self, fmt: str = ".3f") -> str:
        if self.estimate is None:
            return "n/a"
        lo, hi = (math.nan if x is None else x for x in (self.lo, self.hi))
        return f"{self.estimate:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


class ColumnStats(_Model):
    mean: Num = None
    median: Num = None
    q10: Num = None
    q90: Num = None
    n: int = 0


class Overall(_Model):
    n_tokens: int
    columns: dict[str, ColumnStats]


class Group(_Model):
    """The tokens of one category (a correctness group, a position bucket, an entropy bin)."""
    n_tokens: int
    mean: dict[str, Num]
    share: Num = None  # entropy bins only
    sign_agreement: Num = None
    kl_rev: Num = None


class Alignment(_Model):
    """a_delta against a_opd: the gate over all finite tokens, the rest over the informative ones."""
    n: int
    gate_keep: Num = None  # share of tokens the OPD² gate lets through
    near_zero_share: Num = None  # share where a_opd or a_delta is numerically zero
    n_informative: int = 0
    sign_agreement: Num = None  # among the informative tokens
    pearson: Num = None
    spearman: Num = None
    q_pp: int = 0
    q_pn: int = 0
    q_np: int = 0
    q_nn: int = 0


class HighEntropyShare(_Model):
    threshold: float
    student: Num = None
    teacher: Num = None


class ConfigSummary(_Model):
    overall: Overall
    by_correctness: dict[str, Group]
    by_position: dict[str, Group]
    by_entropy_bin: dict[str, Group]
    alignment: Alignment
    high_entropy_share: HighEntropyShare
    ci: dict[str, CI]
    teacher_accuracy: CI | None = None
    teacher_minus_student_accuracy: CI | None = None
    teacher_truncated_share: Num = None  # cut at max length or inside the thinking block (io.thinking)
    accuracy_gap_by_level: dict[str, CI] = {}  # G per problem level (meta.difficulty), core.aggregate.level_gaps
    normalised_accuracy_gap: Num = None  # G over the student's room in G's direction (core.aggregate.normalised_gap)


class ObjectiveAlignment(_Model):
    mean: CI
    p_positive: CI


class IdealConfig(_Model):
    """The predictor's per-config aggregates; splits are all / incorrect / correct rollouts."""
    n_nodes: int
    n_prompts: int
    n_informative: int
    teacher_advantage: dict[str, CI]
    value: dict[str, CI]
    alignment: dict[str, dict[str, ObjectiveAlignment]]  # objective -> split -> ...
    gain: dict[str, dict[str, CI]]  # objective -> split -> CI
    spearman: dict[str, dict[str, Num]]  # divergence -> objective -> rho
    reliability: dict[str, Num] = {}  # estimate -> between-config SD over this config's SE (core.ideal.reliability)


class Ideal(_Model):
    status: str  # ok | skipped
    estimator: str
    reason: str | None = None
    budget: int | None = None
    k: int | None = None
    m: int | None = None
    seed: int | None = None
    continuations_used: int | None = None
    continuation_tokens: int | None = None
    prefix_tokens: int | None = None
    n_nodes: int | None = None
    n_prompts: int | None = None
    jsd_beta: float | None = None
    candidates: str | None = None  # union (every config's candidates) or per_config
    configs: dict[str, IdealConfig] = {}
    # the same estimates at the nodes where training acts (ideal.acting_budget > 0; engine.nodes.plan_acting)
    acting_budget: int | None = None
    acting_nodes: int | None = None
    acting_continuations_used: int | None = None
    acting_continuation_tokens: int | None = None
    acting_left_out: list[str] = []  # configs of another tokenizer: no acting nodes yet
    acting: dict[str, IdealConfig] = {}

    def note(self) -> str:
        """One line on the predictor behind the verdicts: our estimator and its budget."""
        if self.status != "ok":
            return f"Ideal-gradient predictor {self.reason or self.status} ({self.estimator})."
        return (f"Teacher advantage and alignment come from {self.estimator}; budget {self.budget} continuations "
                f"({self.continuations_used} used) over {self.n_nodes} nodes of {self.n_prompts} prompts, "
                f"k={self.k}, m={self.m}.")


class LookaheadResult(_Model):
    """One (config, loss method) lookahead: the stepped student against the initial one on held-out rollouts."""
    dv: CI | None = None  # success change (importance weighted)
    dll: CI | None = None  # correct-minus-incorrect log-likelihood gap change
    kl: CI | None = None  # KL(stepped || initial) per token
    trained_tokens: int | None = None
    partner_scored_tokens: int | None = None
    measured_tokens: int | None = None
    fresh: dict[str, CI] = {}  # "pass@k" -> change of pass@k from fresh samples (lookahead.fresh_samples > 0)
    fresh_sampled_tokens: int | None = None
    forgetting: dict[str, CI] = {}  # "pass@1" -> its change on lookahead.forgetting's problems (same seeds)
    forgetting_sampled_tokens: int | None = None
    forgetting_ll: CI | None = None  # log-likelihood change of the initial student's correct forgetting samples
    forgetting_kl: CI | None = None  # KL(stepped || initial) per token at its forgetting samples' positions
    forgetting_measured_tokens: int | None = None
    reference_ll: CI | None = None  # log-likelihood change of the measurement problems' reference responses
    reference_kl: CI | None = None  # KL(stepped || initial) per token at their positions
    reference_measured_tokens: int | None = None
    skipped: str | None = None  # why this method was not looked ahead (e.g. opd2 without a base)


class Lookahead(_Model):
    """``summary.json["lookahead"]`` (engine.lookahead): a config's value is its methods' results, or
    ``{"skipped": reason}`` for a config left out (a teacher with another tokenizer)."""
    status: str  # ok | skipped
    reason: str | None = None
    configs: dict[str, dict[str, LookaheadResult | str]] = {}
    n_step_rollouts: int | None = None
    n_measure_rollouts: int | None = None
    settings: dict = {}
    fresh_prompts: int | None = None  # measurement prompts the fresh samples drew from
    fresh_initial_tokens: int | None = None  # the initial student's fresh samples (once per diagnosis)
    forgetting_prompts: int | None = None  # lookahead.forgetting's problems with an answer
    forgetting_initial_tokens: int | None = None  # the initial student's samples of them (once per diagnosis)
    forgetting_initial_pass1: float | None = None  # its pass@1 there: the level a change is measured from
    reference_prompts: int | None = None  # measurement problems with a reference response (lookahead.reference)

    def result(self, config: str, method: str) -> LookaheadResult | None:
        """The result of (config, loss method), or None when it was not looked ahead (or skipped)."""
        r = self.configs.get(config, {}).get(method) if self.status == "ok" else None
        return r if isinstance(r, LookaheadResult) and r.skipped is None else None


class Verdict(_Model):
    verdict: str  # helps | unclear | hurts
    reason: str
    score: Num = None


class Ranked(_Model):
    config: str
    signal: str
    verdict: str
    score: Num = None


class Summary(_Model):
    configs: dict[str, ConfigSummary]
    student_accuracy: CI
    pass_at_k: dict[str, Num]
    settings: dict
    student_truncated_share: Num = None  # cut at max length or inside the thinking block (io.thinking)
    context_truncated: dict[str, int] = {}
    ideal: Ideal | None = None
    verdicts: dict[str, dict[str, Verdict]] = {}
    ranking: list[Ranked] = []
    verdict_rule: str | None = None
    lookahead: Lookahead | None = None
    levers: dict | None = None  # the lever recommendation (engine.levers; opsd_diag.levers)
    schedule: dict | None = None  # per schedule point (engine.schedule_points; opsd_diag.schedule_points)
    sampler_mismatch: dict | None = None  # a rollouts file's log-probs vs lp_s (core.sampler_mismatch)

    @property
    def config_names(self) -> list[str]:
        return list(self.configs)

    def headline_frame(self) -> pd.DataFrame:
        """One row per config with the headline numbers (the report's summary table)."""
        rows = []
        for config, entry in self.configs.items():
            cols = entry.overall.columns
            row = {"config": config, "n_tokens": entry.overall.n_tokens}
            row.update({c: cols[c].mean for c in HEADLINE_COLUMNS})
            row["sign_agreement"] = entry.alignment.sign_agreement
            row["near_zero_share"] = entry.alignment.near_zero_share
            row["teacher_accuracy"] = _est(entry.teacher_accuracy)
            row["student_accuracy"] = self.student_accuracy.value()
            row["accuracy_gap"] = _est(entry.teacher_minus_student_accuracy)
            row["student_truncated"] = self.student_truncated_share
            row["teacher_truncated"] = entry.teacher_truncated_share
            rows.append(row)
        frame = pd.DataFrame(rows, columns=["config", "n_tokens", *HEADLINE_COLUMNS, "sign_agreement",
                                            "near_zero_share", "teacher_accuracy", "student_accuracy", "accuracy_gap",
                                            "student_truncated", "teacher_truncated"])
        num = frame.columns.drop(["config", "n_tokens"])
        frame[num] = frame[num].astype(float)  # None -> NaN
        return frame

    def ci_frame(self) -> pd.DataFrame:
        """Long table: config, signal, estimate, lo, hi (95% prompt bootstrap), n_prompts."""
        rows = [{"config": c, "signal": s, "estimate": _f(d.estimate), "lo": _f(d.lo), "hi": _f(d.hi),
                 "n_prompts": d.n_prompts} for c, e in self.configs.items() for s, d in e.ci.items()]
        return pd.DataFrame(rows, columns=["config", "signal", "estimate", "lo", "hi", "n_prompts"])

    def _binned(self, key: str, col: str) -> pd.DataFrame:
        rows = []
        for c, entry in self.configs.items():
            for name, d in getattr(entry, key).items():
                row = {"config": c, col: name, "n_tokens": d.n_tokens}
                if key == "by_entropy_bin":
                    row.update(share=_f(d.share), sign_agreement=_f(d.sign_agreement))
                row.update({f"mean_{s}": _f(v) for s, v in d.mean.items()})
                rows.append(row)
        return pd.DataFrame(rows)

    def entropy_frame(self) -> pd.DataFrame:
        """One row per config x student-entropy bin: token count, share, gate share, mean signals."""
        return self._binned("by_entropy_bin", "bin")

    def position_frame(self) -> pd.DataFrame:
        """One row per config x position bucket: token count and mean signals."""
        return self._binned("by_position", "bucket")

    def accuracy_frame(self) -> pd.DataFrame:
        """Student accuracy and each teacher's accuracy with its own prompt, gap to the student, CIs."""
        def ci(d: CI | None, prefix: str = "") -> dict:
            return {f"{prefix}{k}": _f(getattr(d, k)) if d else math.nan for k in ("estimate", "lo", "hi")}
        rows = [{"who": "student", **ci(self.student_accuracy), **ci(None, "gap_")}]
        rows += [{"who": c, **ci(e.teacher_accuracy), **ci(e.teacher_minus_student_accuracy, "gap_")}
                 for c, e in self.configs.items()]
        return pd.DataFrame(rows)

    def verdict_frame(self) -> pd.DataFrame | None:
        """The ranked verdicts with their reasons (rank 1 = best), or None when the run has none."""
        if not self.ranking:
            return None
        rows = [{"rank": i + 1, **r.model_dump(), "reason": self.verdicts[r.config][r.signal].reason}
                for i, r in enumerate(self.ranking)]
        frame = pd.DataFrame(rows)
        frame["score"] = frame["score"].astype(float)
        return frame


def _f(x) -> float:
    return math.nan if x is None else float(x)


def _est(ci: CI | None) -> float:
    return math.nan if ci is None else ci.value()
