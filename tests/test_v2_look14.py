"""Predictor v2's fourteenth look (plan_look14.yaml): its candidates are the verdicts the plan states, checked against
an explicit reference; RESULTS_look14.md is exactly the render of its committed analysis, the analysis is what the
look's code computes again from the committed rows, it follows the pre-registered ship rule, the plan precedes the
analysis and the added worlds' builds in git history, and the package's model file records the look."""

from __future__ import annotations

import json
import math

import pytest

from compare import assert_tree_close
from git_history import assert_plan_first
from benchmarks.validity.v2 import report_look14
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look14.HERE
METHODS = ("opd", "opd2", "exopd", "opsd_opd", "jsd", "opsd_jsd")


def _analysis() -> dict:
    return json.loads((HERE / "look14_analysis.json").read_text())


def test_the_candidates_are_the_plans_rules_spelled_out():
    """A: hurts at G <= -0.2 and helps at G > +0.05 for jsd and opsd_jsd, a sampled-token loss never decisive; B: A's
    hurts side alone; a missing G unclear."""
    grid = (-0.9, -0.2, -0.1999, 0.0, 0.05, 0.0501, 0.6, math.nan)
    rows = [{"method": m, "accuracy_gap": g} for m in METHODS for g in grid]
    want = {"g_full": [], "g_hurts": []}
    for r in rows:
        full, g = r["method"] in ("jsd", "opsd_jsd"), r["accuracy_gap"]
        hurts = full and g <= -0.2  # NaN compares False
        want["g_full"].append("hurts" if hurts else "helps" if full and g > 0.05 else "unclear")
        want["g_hurts"].append("hurts" if hurts else "unclear")
    cands = report_look14.candidates()
    assert list(cands) == ["g_full", "g_hurts"]
    for name, t in cands.items():
        assert report_look14.g_verdicts(rows, t) == want[name], name


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look14.md").read_text() == report_look14.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    again = json.loads(json.dumps(v2.stats_jsonable(report_look14.analyse(before_look(json.loads(v2.SHIPPED.read_text()), 14))),
                                  sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert len(a["judged"]) == 28 and len(a["chose"]) == 21 and not set(a["judged"]) & set(a["chose"])
    assert set(a["added_built"]) <= set(a["added_planned"]) == {"topaz", "onyx"}


def _a(full: dict, hurts: dict, interval_unclear: float = 0.99, added: bool = True) -> dict:
    """An analysis cut to what the ship rule reads."""
    def side(d):
        base = {"n_decisive": 100, "accuracy": 0.9, "hurts_precision": 0.95, "n_helps": 10, "helps_precision": 0.8,
                "unclear_share": 0.7, "n_correct": 90}
        return {"judged": {**base, **d}, "added": {"n_decisive": 8, "accuracy": 0.9, "n_correct": 7}}
    return {"candidates": {"g_full": {}, "g_hurts": {}}, "judged": ["w"] * 28, "added_built": ["x"] if added else [],
            "verdicts": {"g_full": side(full), "g_hurts": side({"n_helps": 0, **hurts}),
                         "interval": {"judged": {"unclear_share": interval_unclear, "n_correct": 1, "n_decisive": 1}}}}


@pytest.mark.parametrize("a, choice", [
    (_a({}, {}), "g_full"),
    (_a({"helps_precision": 0.69}, {}), "g_hurts"),             # A fails on helps, B holds
    (_a({"accuracy": 0.84}, {"hurts_precision": 0.89}), "interval"),
    (_a({"n_decisive": 29}, {"n_decisive": 29}), "interval"),  # too few calls
    (_a({"unclear_share": 0.99}, {"unclear_share": 0.995}), "interval"),  # not fewer unclear than the interval rule
    (_a({}, {}, added=False), "interval")])                    # no added world with rows
def test_the_ship_rule_reads_every_condition_in_order(a, choice):
    assert report_look14.ship(a)["choice"] == choice
    assert _analysis()["ship"] == report_look14.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis_and_the_added_worlds():
    assert_plan_first(HERE, 14, report_look14.added_worlds()[0], v2.REPO / "sample_data" / "worlds")


def test_the_package_file_records_the_look():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look14"] == report_look14.later_look(a)
    looks_text = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look14.later_look(a)["summary"] in looks_text  # the decision panel quotes the look
    assert a["ship"]["choice"] == "interval" and "verdict_rule" not in shipped  # nothing else in the file changed


def test_the_verdict_doc_quotes_the_committed_figures():
    a = _analysis()
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    full, hurts, base = (a["verdicts"][k]["judged"] for k in ("g_full", "g_hurts", "interval"))
    new = a["verdicts"]["g_full"]["added"]
    assert (f"right on {full['n_correct']} of {full['n_decisive']} decisive calls ({full['accuracy']:.2f}; helps "
            f"precision {full['helps_precision']:.2f}, hurts {full['hurts_precision']:.2f}) with "
            f"{full['unclear_share']:.0%} `unclear`") in verdict
    assert (f"B, its hurts side alone, {hurts['n_correct']} of {hurts['n_decisive']} "
            f"(hurts precision {hurts['hurts_precision']:.3f}, the rule asked 0.90) with "
            f"{hurts['unclear_share']:.0%} `unclear`") in verdict
    assert f"On the two worlds built after its plan (`topaz`, `onyx`) A was right on {new['n_correct']} of " \
           f"{new['n_decisive']}" in verdict
    assert f"the interval rule, {base['unclear_share']:.0%} `unclear` on the same rows" in verdict
    chose = a["verdicts"]["g_hurts"]["chose"]["hurts_precision"]
    assert (f"degraded the student in {hurts['hurts_precision']:.2f} of those rows, not the {chose:.2f} of the worlds "
            "that chose the threshold") in verdict
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    assert (f"from G for a full-distribution loss only, {full['n_correct']} of {full['n_decisive']} over "
            f"{len(a['judged'])} worlds ({full['accuracy']:.2f};") in readme
    assert ("Neither met its rule, so the interval rule stays" in verdict) == (a["ship"]["choice"] == "interval")


def test_the_verdict_limitation_quotes_the_bound():
    """docs/verdict.md's limitation on the verdict quotes explore_verdict_bound.txt's pooled line."""
    import re
    line = next(x for x in (HERE / "explore_verdict_bound.txt").read_text().splitlines() if x.startswith("pooled |"))
    share, needed = re.search(r"\((\d+)%\) \|.*\| (\d+)% of the clear rows", line).groups()
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    assert (f"over the first twelve worlds {share}% of rows changed nothing clear" in verdict
            and f"would have to call {needed}% of the clearly changed rows right" in verdict)
