"""Predictor v2's ninth look (plan_look9.yaml): RESULTS_look9.md is exactly the render of its committed analysis, the
analysis is what the look's code computes again from the committed rows, it follows the pre-registered ship rule, the
plan precedes the analysis in git history, and the package's model file records the look and its verdict rule only if
it shipped."""

from __future__ import annotations

import json

import pytest

from compare import assert_tree_close
from git_history import first_added
from benchmarks.validity.v2 import report_look6, report_look9
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look9.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look9_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look9.md").read_text() == report_look9.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())  # the gain models are the first look's; verdict_rule does not enter
    again = json.loads(json.dumps(v2.stats_jsonable(report_look9.analyse(before_look(shipped, 9))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    judged = {*a["after_look6"], a["added_world"]}
    assert len(judged) == 9 and judged.isdisjoint(a["chose_thresholds"]) and "ledger" not in judged
    assert a["thresholds"] == report_look6.plan()["rule"]["thresholds"]


def _pooled(n_decisive, n_correct, helps, hurts, n_helps=10):
    return {"n_decisive": n_decisive, "n_correct": n_correct, "accuracy": n_correct / n_decisive if n_decisive else
            float("nan"), "helps_precision": helps, "hurts_precision": hurts, "n_helps": n_helps}


@pytest.mark.parametrize("pooled, added, ships", [
    (_pooled(40, 36, 0.8, 0.95), _pooled(5, 4, 1.0, 0.75), True),
    (_pooled(19, 19, 1.0, 1.0), _pooled(5, 5, 1.0, 1.0), False),           # too few calls
    (_pooled(40, 33, 0.8, 0.95), _pooled(5, 4, 1.0, 0.75), False),         # 0.825 right
    (_pooled(40, 36, 0.8, 0.89), _pooled(5, 4, 1.0, 0.75), False),         # hurts precision
    (_pooled(40, 36, 0.6, 0.95), _pooled(5, 4, 1.0, 0.75), False),         # helps precision
    (_pooled(40, 36, float("nan"), 0.95, n_helps=0), _pooled(5, 4, 1.0, 0.75), True),  # no helps call
    (_pooled(40, 36, 0.8, 0.95), _pooled(4, 2, 1.0, 0.5), False),          # the new world
    (_pooled(40, 36, 0.8, 0.95), _pooled(2, 0, 1.0, 0.0), True)])          # under 3 calls on it: no condition
def test_the_ship_rule_reads_every_condition(pooled, added, ships):
    a = {"added_world": "wick", "verdicts": {"g_thresholds": {"judged": pooled, "added": added}}}
    assert (report_look9.ship(a)["choice"] == "g_thresholds") == ships
    assert _analysis()["ship"] == report_look9.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis():
    plan, analysis = first_added(HERE, "plan_look9.yaml"), first_added(HERE, "look9_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)


def test_the_package_file_records_the_look_and_the_interval_verdict_stays():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look9"] == report_look9.later_look(a)
    assert a["ship"]["choice"] == "interval" and "verdict_rule" not in shipped  # the product keeps no code for it
    looks = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look9.later_look(a)["summary"] in looks  # the decision panel quotes the look


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a, f = _analysis(), v2.fmt
    d = a["verdicts"]["g_thresholds"]
    judged, new = d["judged"], d["added"]
    hurts, helps = judged["table"]["hurts"], judged["table"]["helps"]
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    nine = verdict[verdict.index("The ninth look"):][:1400]
    rank = a["added_ranking"]
    for q in (f"right on {judged['n_correct']} of {judged['n_decisive']} decisive calls ({judged['accuracy']:.3f}",
              f"hurts on {hurts['degrades']} of {sum(hurts.values())} ({judged['hurts_precision']:.3f}",
              f"helps on {helps['improves']} of {sum(helps.values())}, with {judged['unclear_share']:.0%} `unclear`",
              f"on `wick` alone {new['n_correct']} of {new['n_decisive']}",
              f"`unclear` on {a['verdicts']['interval']['judged']['unclear_share']:.0%} of the same rows",
              f"Spearman {f(rank['spearman']['v2_config'])} (G alone {f(rank['spearman']['accuracy_gap'])})",
              f"ordered {rank['method_order']['n_right']} of {rank['method_order']['n_pairs']} method pairs right"):
        assert q in nine, q
    assert (f"right on {judged['n_correct']} of {judged['n_decisive']} calls over nine new worlds "
            f"({judged['accuracy']:.3f} against the 0.85 required; hurts {judged['hurts_precision']:.3f} "
            "against 0.90") in readme
    assert f"`unclear` on {a['verdicts']['interval']['judged']['unclear_share']:.0%} of rows" in readme
    assert a["ship"]["choice"] == "interval" and "So the verdict stays the interval rule" in nine
