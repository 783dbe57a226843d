"""The verdict rule, case by case, and the ranking."""

from __future__ import annotations

import math

import pytest

from opsd_diag.core import verdict as V


def ci(est, lo, hi):
    return {"estimate": est, "lo": lo, "hi": hi}


def inputs(a=(0.1, 0.05, 0.15), c=(0.4, 0.2, 0.6), gap=(0.2, 0.1, 0.3), gain=0.05, keep=0.7, signal="rev_kl"):
    return {"teacher_advantage": a and ci(*a), "alignment": c and ci(*c), "accuracy_gap": gap and ci(*gap),
            "gain": gain is not None and ci(gain, gain - 0.01, gain + 0.01) or None, "gate_keep": keep,
            "signal": signal}


@pytest.mark.parametrize("case, expected", [
    (inputs(), "helps"),
    (inputs(gap=None), "helps"),  # no teacher samples: decided by the node-level evidence
    (inputs(a=(-0.1, -0.15, -0.05)), "hurts"),  # teacher lowers success at uncertain nodes
    (inputs(c=(-0.3, -0.5, -0.1)), "hurts"),  # the signal points against the ideal gradient
    (inputs(a=(0.0, -0.05, 0.05), gap=(-0.3, -0.4, -0.2)), "hurts"),  # worse teacher, no node evidence
    (inputs(a=(0.1, 0.05, 0.15), gap=(-0.3, -0.4, -0.2)), "unclear"),  # worse teacher but positive nodes
    (inputs(a=(0.02, -0.01, 0.05)), "unclear"),  # A's interval includes 0
    (inputs(c=(0.1, -0.1, 0.3)), "unclear"),  # alignment's interval includes 0
    (inputs(a=None, c=None, gain=None), "unclear"),  # predictor skipped
    (inputs(a=None, c=None, gain=None, gap=(-0.3, -0.4, -0.2)), "hurts"),  # ...but the teacher is worse
    (inputs(signal="a_d2", keep=0.3), "unclear"),  # OPD² gate drops most tokens
    (inputs(signal="a_d2", keep=0.8), "helps"),
    (inputs(signal="rev_kl", keep=0.3), "helps"),  # the gate matters for a_d2 only
])
def test_rule(case, expected):
    out = V.verdict(case)
    assert out["verdict"] == expected, out
    assert out["reason"].endswith(".") and out["reason"].count(". ") == 0  # one sentence
    assert isinstance(out["score"], float)


def test_intervals_from_too_few_prompts_are_no_evidence():
    one_prompt = inputs(c=(-0.3, -0.3, -0.3))
    one_prompt["alignment"]["n_prompts"] = 1  # a bootstrap over one prompt: a single point
    assert V.verdict(one_prompt)["verdict"] == "unclear"
    one_prompt["alignment"]["n_prompts"] = V.MIN_PROMPTS
    assert V.verdict(one_prompt)["verdict"] == "hurts"
    few = inputs(a=None, c=None, gain=None, gap=(-0.3, -0.4, -0.2))
    few["accuracy_gap"]["n_prompts"] = 2
    assert V.verdict(few)["verdict"] == "unclear"


def test_collect_uses_all_nodes_when_incorrect_rollouts_cover_few_prompts():
    def entry(n_inc):
        node = {"teacher_advantage": {"all": {**ci(0.1, 0.05, 0.2), "n_prompts": 9},
                                      "incorrect": {**ci(-0.5, -0.5, -0.5), "n_prompts": n_inc}},
                "alignment": {o: {"all": {"mean": ci(0.3, 0.1, 0.5)}, "incorrect": {"mean": ci(-0.5, -0.5, -0.5)}}
                              for o in V.SIGNALS},
                "gain": {o: {"all": ci(0.01, 0.0, 0.02)} for o in V.SIGNALS}}
        return {"configs": {"t": node}}

    summary = {"configs": {"t": {"alignment": {"sign_agreement": 0.8}, "teacher_minus_student_accuracy": None}}}
    assert V.collect(summary, entry(1))[("t", "rev_kl")]["teacher_advantage"]["estimate"] == 0.1
    assert V.collect(summary, entry(V.MIN_PROMPTS))[("t", "rev_kl")]["teacher_advantage"]["estimate"] == -0.5


def test_score_is_the_gain_and_nan_without_it():
    assert V.verdict(inputs(gain=0.07))["score"] == pytest.approx(0.07)
    assert math.isnan(V.verdict(inputs(gain=None))["score"])


def test_rank_by_score_nan_last_stable():
    configs = [{"config": "a", "score": 0.1}, {"config": "b", "score": math.nan}, {"config": "c", "score": 0.3},
               {"config": "d", "score": None}, {"config": "e", "score": -0.2}, {"config": "f", "score": 0.1}]
    assert [c["config"] for c in V.rank(configs)] == ["c", "a", "f", "e", "b", "d"]


def test_rank_puts_the_verdict_before_the_score():
    """A hurts config with the best score still ranks below every helps and unclear one."""
    configs = [{"config": "wrong", "verdict": "hurts", "score": 0.12},
               {"config": "x", "verdict": "unclear", "score": 0.2},
               {"config": "teacher", "verdict": "helps", "score": 0.11},
               {"config": "y", "verdict": "helps", "score": math.nan},
               {"config": "full", "verdict": "helps", "score": 0.3},
               {"config": "z", "verdict": "hurts", "score": -0.1}]
    assert [c["config"] for c in V.rank(configs)] == ["full", "teacher", "y", "x", "wrong", "z"]


def test_verdicts_from_summary_and_ideal_result():
    summary = {"configs": {
        "good": {"alignment": {"sign_agreement": 0.8}, "teacher_minus_student_accuracy": ci(0.3, 0.2, 0.4)},
        "bad": {"alignment": {"sign_agreement": 0.4}, "teacher_minus_student_accuracy": ci(-0.2, -0.3, -0.1)}}}

    def node_entry(a, c, g):
        split = {"n_nodes": 10, **ci(*a)}
        return {"teacher_advantage": {"all": split, "incorrect": split, "correct": split},
                "alignment": {o: {s: {"mean": ci(*c)} for s in ("all", "incorrect", "correct")} for o in V.SIGNALS},
                "gain": {o: {s: ci(g, g, g) for s in ("all", "incorrect", "correct")} for o in V.SIGNALS}}

    ideal = {"configs": {"good": node_entry((0.1, 0.05, 0.2), (0.5, 0.3, 0.7), 0.04),
                         "bad": node_entry((-0.1, -0.2, -0.05), (-0.2, -0.4, 0.1), -0.03)}}
    out = V.verdicts(summary, ideal)
    assert out["verdicts"]["good"]["rev_kl"]["verdict"] == "helps"
    assert out["verdicts"]["good"]["a_d2"]["verdict"] == "helps"
    assert out["verdicts"]["bad"]["jsd"]["verdict"] == "hurts"
    assert [r["config"] for r in out["ranking"][:6]] == ["good"] * 6 and len(out["ranking"]) == 12
    assert "hurts" in out["verdict_rule"] and "helps" in out["verdict_rule"]
    assert V.rule_text() in V.__doc__
