"""Predictor v2's sixth look (plan_look6.yaml): RESULTS_look6.md is exactly the render of its committed analysis, the
analysis is what the look's code computes again from the committed rows, it follows the pre-registered ship rule,
its verdicts are the rule's (checked against its definition) with the plan's thresholds, the plan precedes the
analysis in git history, and the package's model file records the look (the rule did not ship: the product's verdict
stays the interval rule)."""

from __future__ import annotations

import json

import pytest

from compare import assert_tree_close
from git_history import first_added
from benchmarks.validity.v2 import report_look2 as look2
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_look6
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look6.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look6_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look6.md").read_text() == report_look6.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())  # the gain models are the look's; verdict_rule does not enter
    again = json.loads(json.dumps(v2.stats_jsonable(report_look6.analyse(before_look(shipped, 6))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently


def test_the_verdicts_are_the_rule_with_the_plans_thresholds():
    a = _analysis()
    t = report_look6.plan()["rule"]["thresholds"]
    assert a["thresholds"] == t
    rows = look2.load_rows({"worlds": report_look6.worlds()})
    assert a["verdicts"]["g_thresholds"]["verdicts"] == [
        report_look6.g_verdict(r["method"], v2._num(r["accuracy_gap"]), t) for r in rows]


def test_g_verdict_against_its_definition():
    t = {"hurts_full": -0.2, "hurts_sampled": -0.4, "helps_full": 0.1}
    for method in prediction.LOSS:
        full = method in ("jsd", "opsd_jsd")
        for g in (-0.5, -0.4, -0.3, -0.2, -0.1, 0.0, 0.1, 0.11, 0.6, float("nan")):
            want = ("unclear" if g != g else "hurts" if g <= (-0.2 if full else -0.4)
                    else "helps" if full and g > 0.1 else "unclear")
            assert report_look6.g_verdict(method, g, t) == want, (method, g)


@pytest.mark.parametrize("added, pooled, ships", [((3, 3), (0.7, 0.9), True), ((7, 6), (0.8, 0.95), True),
                                                  ((2, 2), (0.8, 0.95), False), ((7, 5), (0.8, 0.95), False),
                                                  ((4, 4), (0.6, 0.95), False), ((4, 4), (0.8, 0.85), False)])
def test_the_ship_rule_reads_both_conditions(added, pooled, ships):
    n, k = added
    a = {"added_world": "ledger", "n_worlds": 12, "verdicts": {"g_thresholds": {
        "added": {"n_decisive": n, "n_correct": k, "accuracy": k / n},
        "pooled": {"helps_precision": pooled[0], "hurts_precision": pooled[1]}}}}
    assert (report_look6.ship(a)["choice"] == "g_thresholds") == ships
    assert _analysis()["ship"] == report_look6.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis():
    def first(path: str):
        return first_added(HERE, path)
    plan, analysis = first("plan_look6.yaml"), first("look6_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)


def test_the_package_file_records_the_look_and_the_interval_verdict_stays():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look6"] == report_look6.later_look(a)
    assert a["ship"]["choice"] == "interval" and "verdict_rule" not in shipped


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a = _analysis()
    d = a["verdicts"]["g_thresholds"]
    new = d["added"]
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    six = verdict[verdict.index("The sixth"):][:1200]
    assert f"right on {new['n_correct']} of {new['n_decisive']}" in six
    hurts = new["table"]["hurts"]
    assert f"hurts on {hurts['degrades']} of {sum(hurts.values())}" in six
    mo = a["method_order_added"]
    assert f"{mo['n_right']} of {mo['n_pairs']} pairs right" in six
