"""Predictor v2's eighth look (plan_look8.yaml, amendment 1): RESULTS_look8.md is exactly the render of its committed
analysis, the analysis is what the look's code computes again from the committed rows, it follows the pre-registered
ship rule, the plan (and its amendment) precede the analysis in git history, and the package's model file records the
look and its ranking rule only if it shipped."""

from __future__ import annotations

import json

import pytest

from compare import assert_tree_close
from git_history import first_added
from benchmarks.validity.v2 import report_look8
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look8.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look8_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look8.md").read_text() == report_look8.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())  # the gain models are the first look's; the ranking rule does not enter
    again = json.loads(json.dumps(v2.stats_jsonable(report_look8.analyse(before_look(shipped, 8))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert a["added_world"] == "spindle" and set(a["fitted"]).isdisjoint(a["unseen_worlds"])
    assert len(a["unseen_worlds"]) == 12 and a["n_worlds"] == 19


@pytest.mark.parametrize("new, old, mean_new, mean_old, ships", [(0.8, 0.7, 0.73, 0.70, True),
                                                                 (0.7, 0.7, 0.73, 0.70, False),
                                                                 (0.8, 0.7, 0.69, 0.70, False),
                                                                 (0.8, 0.7, 0.70, 0.70, True)])
def test_the_ship_rule_reads_both_conditions(new, old, mean_new, mean_old, ships):
    a = {"added_world": "spindle", "unseen_worlds": ["w"] * 12,
         "per_world": {"v2_config": {"worlds": {"spindle": new}}, "shipped": {"worlds": {"spindle": old}}},
         "unseen_mean": {"v2_config": mean_new, "shipped": mean_old}}
    assert (report_look8.ship(a)["choice"] == "v2_config") == ships
    assert _analysis()["ship"] == report_look8.ship(_analysis())


def test_the_plan_and_its_amendment_were_committed_before_the_analysis():
    plan, analysis = first_added(HERE, "plan_look8.yaml"), first_added(HERE, "look8_analysis.json")
    explored = first_added(HERE, "explore_look8_rule.txt")
    assert plan is not None and explored is not None and (analysis is None or plan <= explored <= analysis)
    assert report_look8.plan()["version"] == 2 and report_look8.plan()["rule"]["name"] == "v2_config"


def test_the_package_file_records_the_look_and_its_ranking_rule_only_if_it_shipped():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look8"] == report_look8.later_look(a)
    cal = prediction.load()
    if a["ship"]["choice"] == "v2_config":
        assert cal.method_order == "v2_config" and shipped["method_order"]["look"] == 8
    else:
        assert cal.method_order == "sign_of_g" and shipped["method_order"]["look"] == 5


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a, f = _analysis(), v2.fmt
    pw, um, added = a["per_world"], a["unseen_mean"], a["added_world"]
    new = {k: f(pw[k]["worlds"][added]) for k in ("v2_config", "shipped", "accuracy_gap")}
    mo = {k: a["method_order"][k] for k in ("shipped", "v2_config")}
    rec = {k: sum(v for v in a["recommended"][k].values() if v is not None) / sum(
        v is not None for v in a["recommended"][k].values()) for k in ("shipped", "v2_config")}
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    text = verdict[verdict.index("The eighth look"):][:1800]
    for q in (f"reached Spearman {new['v2_config']} against the shipped order's {new['shipped']} (G alone "
              f"{new['accuracy_gap']})", f"{f(um['v2_config'])} against {f(um['shipped'])}, so it ships",
              f"method pairs stay {mo['v2_config']['n_right']} of {mo['v2_config']['n_pairs']} right",
              f"realised {rec['v2_config']:+.3f} on average over the nineteen worlds against {rec['shipped']:+.3f}",
              f"({a['recommended']['v2_config']['ember']:+.3f} against {a['recommended']['shipped']['ember']:+.3f})"):
        assert q in text, q
    assert mo["v2_config"] == mo["shipped"] and a["ship"]["choice"] == "v2_config"
    assert "**as shipped** since the eighth look ([RESULTS_look8.md]" in readme  # its figures: docs/verdict.md above


def test_readme_and_verdict_doc_quote_the_check_after_the_look():
    """tallow, checked with the file as shipped by this look (plan_checks.yaml amendment 2); the README quotes the
    mean over it and the worlds checked after it."""
    from benchmarks.validity.v2 import report_checks

    m, f = report_checks.world_figures("tallow")["models"], v2.fmt
    product, g = f(m["product (v2_config)"]["spearman"]), f(m["accuracy_gap"]["spearman"])
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"the shipped ranking reached {product}, G alone {g}: no better than G there" in verdict
    assert "worlds built after it shipped" in readme  # the mean over them: tests/test_v2_checks.py

