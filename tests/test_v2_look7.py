"""Predictor v2's seventh look (plan_look7.yaml): RESULTS_look7.md is exactly the render of its committed analysis, the
analysis is what the look's code computes again from the committed rows, it follows the pre-registered ship rule, its
ranking is the plan's score (checked against an explicit reference), the plan precedes the analysis in git history,
and the package's model file records the look and its ranking rule only if it shipped."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compare import assert_tree_close
from git_history import first_added
from benchmarks.validity.v2 import report_look2 as look2
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_look7
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look7.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look7_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look7.md").read_text() == report_look7.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())  # the gain model is the look's; the ranking rule does not enter
    again = json.loads(json.dumps(v2.stats_jsonable(report_look7.analyse(before_look(shipped, 7))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently


def test_g_scaled_ranks_by_the_plans_score_within_each_world():
    a = _analysis()
    assert a["sampled_scale"] == report_look7.plan()["rule"]["sampled_scale"] == 0.5
    rows = look2.load_rows({"worlds": report_look7.worlds()})
    ranked = report_look7.orders(rows, np.zeros(len(rows)), a["sampled_scale"])["g_scaled"]
    for w in {r["world"] for r in rows}:
        idx = [i for i, r in enumerate(rows) if r["world"] == w]
        score = {i: v2._num(rows[i]["accuracy_gap"]) * (1.0 if rows[i]["method"] in ("jsd", "opsd_jsd") else 0.5)
                 for i in idx}
        best_first = sorted(idx, key=lambda i: -ranked[i])
        assert [score[i] for i in best_first] == sorted(score.values(), reverse=True)


@pytest.mark.parametrize("new, old, mean_new, mean_old, ships", [(0.8, 0.7, 0.73, 0.70, True),
                                                                 (0.7, 0.7, 0.73, 0.70, False),
                                                                 (0.8, 0.7, 0.69, 0.70, False),
                                                                 (0.8, 0.7, 0.70, 0.70, True)])
def test_the_ship_rule_reads_both_conditions(new, old, mean_new, mean_old, ships):
    a = {"added_world": "quarry", "n_worlds": 13, "per_world": {
        "g_scaled": {"worlds": {"quarry": new}, "mean": mean_new},
        "shipped": {"worlds": {"quarry": old}, "mean": mean_old}}}
    assert (report_look7.ship(a)["choice"] == "g_scaled") == ships
    assert _analysis()["ship"] == report_look7.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis():
    plan, analysis = first_added(HERE, "plan_look7.yaml"), first_added(HERE, "look7_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)


def test_the_package_file_records_the_look_and_its_ranking_rule_only_if_it_shipped():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look7"] == report_look7.later_look(a)
    cal = prediction.load()
    if a["ship"]["choice"] == "g_scaled":
        assert (cal.method_order, cal.sampled_scale) == ("g_scaled", a["sampled_scale"])
        assert shipped["method_order"]["look"] == 7
    else:  # the fifth look's order, or a later look's that replaced it
        later = shipped["method_order"]["look"] > 7
        assert cal.method_order == (shipped["method_order"]["rule"] if later else "sign_of_g")
        assert later or shipped["method_order"]["look"] == 5


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a = _analysis()
    pw, added = a["per_world"], a["added_world"]
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    seventh = verdict[verdict.index("The seventh"):][:1200]
    assert f"Spearman {v2.fmt(pw['g_scaled']['worlds'][added])} against the shipped order's" in seventh
    assert (f"mean of worlds {v2.fmt(pw['g_scaled']['mean'])} against {v2.fmt(pw['shipped']['mean'])}; pooled "
            f"{v2.fmt(a['pooled']['g_scaled']['estimate'])} against G's "
            f"{v2.fmt(a['pooled']['accuracy_gap']['estimate'])}") in seventh
    assert ("so the shipped order stays" in seventh) == (a["ship"]["choice"] == "sign_of_g")
    assert (f"On the new world `{added}` it reached Spearman {v2.fmt(pw['g_scaled']['worlds'][added])} against the "
            f"shipped order's {v2.fmt(pw['shipped']['worlds'][added])}") in seventh and a["n_worlds"] == 13
