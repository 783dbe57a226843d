"""Predictor v2's fourth look (plan_look4.yaml): RESULTS_look4.md is exactly the render of its committed analysis, the
analysis follows the pre-registered ship rule, its verdict tables follow from its stored class probabilities, the
plan precedes the analysis in git history, and the package's model file records the look (and carries a verdict
model only where the look shipped one)."""

from __future__ import annotations

import json

import pytest

from git_history import first_added
from benchmarks.validity import stats
from benchmarks.validity.v2 import report_look4
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag.core import predictor

HERE = report_look4.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look4_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look4.md").read_text() == report_look4.render(_analysis())


def test_the_committed_analysis_follows_its_ship_rule():
    a = _analysis()
    assert a["ship"] == report_look4.ship(a)
    d = a["verdicts"]["v2c_classes"]
    c1 = d["pooled"]["accuracy"] >= 0.85 and d["pooled"]["hurts_precision"] >= 0.9
    c2 = d["added"]["n_decisive"] >= 1 and d["added"]["accuracy"] >= 0.85
    assert (a["ship"]["choice"] == "v2c_classes") == (c1 and c2)
    assert a["added_world"] == "relay" and a["n_worlds"] == 10


@pytest.mark.parametrize("pooled, added, ships", [((0.9, 0.95, 10), (1.0, 3), True), ((0.8, 0.95, 10), (1.0, 3), False),
                                                   ((0.9, 0.85, 10), (1.0, 3), False), ((0.9, 0.95, 10), (0.5, 4), False),
                                                   ((0.9, 0.95, 10), (float("nan"), 0), False)])
def test_the_ship_rule_reads_both_conditions(pooled, added, ships):
    def side(acc, hurts, n_helps=0, n_dec=10):
        return {"accuracy": acc, "hurts_precision": hurts, "n_helps": n_helps, "helps_precision": float("nan"),
                "n_decisive": n_dec, "n_correct": 0}
    a = {"n_worlds": 10, "added_world": "relay",
         "verdicts": {"v2c_classes": {"pooled": side(*pooled), "added": side(added[0], 1.0, n_dec=added[1])}}}
    assert (report_look4.ship(a)["choice"] == "v2c_classes") == ships


def test_the_verdict_tables_follow_from_the_stored_probabilities():
    a = _analysis()
    rows = a["rows"]
    for name, d in a["verdicts"].items():
        verdicts = [predictor.class_verdict(p, q, a["threshold"]) for p, q in zip(d["p_improves"], d["p_degrades"])]
        assert verdicts == d["verdicts"], name
        assert len(verdicts) == len(rows)
        n_decisive = sum(v != "unclear" for v in verdicts)
        assert d["pooled"]["n_decisive"] == n_decisive and d["pooled"]["n_unclear"] == len(rows) - n_decisive
        added = [v for v, r in zip(verdicts, rows) if r["world"] == a["added_world"]]
        assert d["added"]["n_decisive"] == sum(v != "unclear" for v in added)
        table = d["pooled"]["table"]
        assert table["hurts"]["degrades"] + table["helps"]["improves"] == d["pooled"]["n_correct"]
        assert set(table["hurts"]) == set(stats.REALISED)


def test_the_plan_was_committed_before_the_analysis():
    def first(path: str):
        return first_added(HERE, path)
    plan, analysis = first("plan_look4.yaml"), first("look4_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)


def test_the_package_file_records_the_look_and_its_verdict_model_only_if_it_shipped():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look4"] == report_look4.later_look(a)
    assert ("verdict_model" in shipped) == (a["ship"]["choice"] == "v2c_classes")
