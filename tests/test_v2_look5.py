"""Predictor v2's fifth look (plan_look5.yaml): RESULTS_look5.md is exactly the render of its committed analysis, the
analysis is what the look's code computes again from the committed rows, it follows the pre-registered ship rule,
the product's order of rows (``looks.product_order``) equals an explicit sort, the plan precedes the analysis in git
history, and the package's model file records the look (and the method order only where the look shipped it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compare import assert_tree_close
from git_history import first_added
from benchmarks.validity.v2 import report_look5
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from benchmarks.validity.v2.looks import product_order
from opsd_diag import prediction

HERE = report_look5.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look5_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look5.md").read_text() == report_look5.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())  # the gain models are the look's; method_order does not enter
    again = json.loads(json.dumps(v2.stats_jsonable(report_look5.analyse(before_look(shipped, 5))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently


@pytest.mark.parametrize("n, amp, today, ships", [(3, 3, 1, True), (4, 3, 2, True), (4, 2, 1, False),
                                                  (2, 2, 0, False), (5, 4, 5, False), (0, 0, 0, False)])
def test_the_ship_rule_reads_all_three_conditions(n, amp, today, ships):
    mo = {"sign_of_g": {"method_order": {"n_pairs": n, "n_right": amp}},
          "today": {"method_order": {"n_pairs": n, "n_right": today}}}
    a = {"added_world": "tandem", "scopes": {"tandem": mo}}
    assert (report_look5.ship(a)["choice"] == "sign_of_g") == ships
    assert _analysis()["ship"] == report_look5.ship(_analysis())


def test_the_product_order_is_an_explicit_sort():
    rng = np.random.default_rng(3)
    methods = ["opd", "jsd", "opd2", "exopd", "opsd_opd", "opsd_jsd"]
    rows = [{"accuracy_gap": float(g), "method": methods[i % 6]} for i, g in enumerate(rng.choice([-0.2, 0.0, 0.3], 30))]
    gain = rng.normal(size=30)
    rows[4]["accuracy_gap"], gain[7] = float("nan"), float("nan")  # missing values rank last
    for rule in ("predicted_gain", "sign_of_g", "g_scaled"):
        scores = product_order(rows, gain, rule, 0.5)
        first = [int(i) for i in np.argsort(-scores)]

        def key(i):
            g = rows[i]["accuracy_gap"]
            full = rows[i]["method"] in ("jsd", "opsd_jsd")
            term = 0.0 if rule == "predicted_gain" or g != g or not full else (1.0 if g > 0 else -1.0)
            scaled = g if rule != "g_scaled" or full else 0.5 * g
            return (-(scaled if g == g else -np.inf), -(g if g == g else -np.inf), -term,
                    -(gain[i] if gain[i] == gain[i] else -np.inf))
        assert [key(i) for i in first] == sorted(key(i) for i in range(30))


def test_the_eighth_looks_order_is_an_explicit_sort():
    """v2_config: configurations by the mean of their rows' gains (NaN left out), then the sign-of-G method order,
    then the gain; v2_gain: the gain, then G, then the method order."""
    rng = np.random.default_rng(4)
    methods = ["opd", "jsd", "opd2", "exopd", "opsd_opd", "opsd_jsd"]
    rows = [{"accuracy_gap": float(rng.choice([-0.2, 0.3])), "method": methods[i % 6], "config": f"c{i % 5}"}
            for i in range(30)]
    gain = rng.normal(size=30)
    gain[7] = float("nan")
    for c in range(5):  # G is one number per configuration
        for r in rows[c::5]:
            r["accuracy_gap"] = rows[c]["accuracy_gap"]
    mean = {c: float(np.mean([gain[i] for i in range(30) if rows[i]["config"] == c and gain[i] == gain[i]]))
            for c in {r["config"] for r in rows}}

    def term(i):
        full = rows[i]["method"] in ("jsd", "opsd_jsd")
        return (1.0 if rows[i]["accuracy_gap"] > 0 else -1.0) if full else 0.0

    def last(v):
        return -v if v == v else np.inf
    keys = {"v2_config": lambda i: (-mean[rows[i]["config"]], -term(i), last(gain[i])),
            "v2_gain": lambda i: (last(gain[i]), -rows[i]["accuracy_gap"], -term(i))}
    for rule, key in keys.items():
        first = [int(i) for i in np.argsort(-product_order(rows, gain, rule))]
        assert [key(i) for i in first] == sorted(key(i) for i in range(30)), rule


def test_the_plan_was_committed_before_the_analysis():
    def first(path: str):
        return first_added(HERE, path)
    plan, analysis = first("plan_look5.yaml"), first("look5_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)


def test_the_package_file_records_the_look_and_its_method_order_only_if_it_shipped():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look5"] == report_look5.later_look(a)
    assert ("method_order" in shipped) == (a["ship"]["choice"] == "sign_of_g")
    later = shipped.get("method_order", {}).get("look", 5) > 5  # a later look's ranking rule replaced it
    assert prediction.load().method_order == (shipped["method_order"]["rule"] if later else a["ship"]["choice"])


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a = _analysis()
    new, eleven = a["scopes"][a["added_world"]], a["scopes"]["eleven"]
    mo = new["sign_of_g"]["method_order"]
    quoted = [f"{mo['n_right']} of {mo['n_pairs']}", f"{eleven['sign_of_g']['method_order']['n_right']} of "
              f"{eleven['sign_of_g']['method_order']['n_pairs']}", a["added_world"]]
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    text = verdict[verdict.index("The fifth"):][:1500]  # the README links to it
    assert all(q in text for q in quoted), [q for q in quoted if q not in text]
    today = new["today"]["method_order"]
    assert f"against {today['n_right']} of {today['n_pairs']}" in verdict
    assert f"{eleven['today']['method_order']['n_right']} of {eleven['today']['method_order']['n_pairs']}" in verdict
