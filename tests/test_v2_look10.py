"""Predictor v2's tenth look (plan_look10.yaml): RESULTS_look10.md is exactly the render of its committed analysis, the
analysis is what the look's code computes again from the committed rows, it follows the pre-registered ship rule, the
plan precedes the analysis in git history, the refit is the first look's fit on more rows, and the package's model
file records the look and keeps the first look's models unless the refit shipped."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compare import assert_tree_close
from git_history import first_added
from benchmarks.validity.v2 import report_look2, report_look8, report_look10
from benchmarks.validity.v2 import report_v2 as v2
from benchmarks.validity.v2.looks import before_look
from opsd_diag import prediction

HERE = report_look10.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look10_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look10.md").read_text() == report_look10.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())
    again = json.loads(json.dumps(v2.stats_jsonable(report_look10.analyse(before_look(shipped, 10))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert a["added_world"] == "gravel" and a["added"] is not None
    assert len(a["never_fitted"]) == 24 and a["n_worlds"] == 31 and "gravel" not in report_look10.seen()
    assert set(a["fitted_by_look1"]) == set(report_look8.FITTED) and set(a["never_fitted"]).isdisjoint(report_look8.FITTED)


def test_the_refit_is_the_first_looks_fit_on_more_rows():
    """On the first look's seven worlds v2_all's fit is the model the package shipped when this look ran (same design,
    same rows; the drift the thirteenth look replaced is restored from its record)."""
    shipped = before_look(json.loads(v2.SHIPPED.read_text()), 11)
    rows = report_look2.load_rows({"worlds": list(report_look8.FITTED)})
    again = report_look10.fitted(rows)
    for tier, per in shipped["models"].items():
        for o, m in per.items():
            np.testing.assert_allclose(again[tier][o]["coef"], m["coef"], atol=1e-6)  # rows rediagnosed since: lookahead within 3e-8
            np.testing.assert_allclose(again[tier][o]["residual_band"], m["residual_band"], atol=1e-6)  # rows rediagnosed since: lookahead within 3e-8


def _a(never_new, never_old, new, old, others=(0.7, 0.6)):
    return {"added_world": "gravel", "never_fitted": ["w"] * 24,
            "seen": {"never_fitted_mean": {"v2_all": never_new, "shipped": never_old},
                     "other_outcomes": {"d_regression": {"v2_all": others[0], "shipped": others[1]},
                                        "d_pass4": {"v2_all": others[1], "shipped": others[0]}}},
            "added": None if new is None else {"spearman": {"v2_all": new, "shipped": old}}}


@pytest.mark.parametrize("a, ships, regression, pass4", [
    (_a(0.75, 0.74, 0.8, 0.8), True, True, False),     # a tie on the added world is enough
    (_a(0.75, 0.74, 0.79, 0.8), False, False, False),  # below on the added world
    (_a(0.74, 0.74, 0.9, 0.8), False, False, False),   # the mean must be strictly above
    (_a(0.75, 0.74, None, None), False, False, False)])  # no added world yet
def test_the_ship_rule_reads_every_condition(a, ships, regression, pass4):
    s = report_look10.ship(a)
    assert (s["choice"] == "v2_all") == ships and s["outcomes"]["d_pass1"] == ships
    assert s["outcomes"]["d_regression"] == regression and s["outcomes"]["d_pass4"] == pass4
    assert _analysis()["ship"] == report_look10.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis():
    plan, analysis = first_added(HERE, "plan_look10.yaml"), first_added(HERE, "look10_analysis.json")
    assert plan is not None and (analysis is None or plan <= analysis)


def test_the_package_file_records_the_look_and_keeps_the_first_looks_models():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look10"] == report_look10.later_look(a)
    assert a["ship"]["choice"] == "first_look"
    shipped = before_look(shipped, 11)  # the file as this look left it: a later look's replacement restored
    for tier, per in a["coefficients"].items():
        for o, c in per.items():
            m = shipped["models"][tier][o]
            assert dict(zip(m["features"], m["coef"])) == c["shipped"]  # the first look's, unchanged
    looks = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look10.later_look(a)["summary"] in looks  # the decision panel quotes the look


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a, f = _analysis(), v2.fmt
    s, new = a["seen"], a["added"]
    m, d = s["never_fitted_mean"], s["v2_all_minus_shipped"]
    pw, dec = s["per_world"], s["decisions"]["v2_all"]
    band = {k: a["coefficients"]["v2"]["d_pass1"]["band"][k] for k in ("v2_all", "shipped")}
    coef = {k: a["coefficients"]["v2"]["d_pass1"][k] for k in ("v2_all", "shipped")}
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    tenth = verdict[verdict.index("#### The tenth look"):][:2200]
    for q in (f"on all {a['n_worlds']} (`v2_all`, {a['n_rows']} rows)",
              f"{f(m['v2_all'])} against {f(m['shipped'])} over the {len(a['never_fitted'])} (difference "
              f"{f(d['estimate'], 3)} [{f(d['lo'], 3)}, {f(d['hi'], 3)}], above in {d['above']}, below in {d['below']})",
              f"{f(new['spearman']['v2_all'])} against {f(new['spearman']['shipped'])} on `gravel` (G alone "
              f"{f(new['spearman']['accuracy_gap'])})",
              f"the lookahead's KL {coef['shipped']['lookahead_kl']:+.3f} to {coef['v2_all']['lookahead_kl']:+.3f} per SD",
              f"teachability {coef['shipped']['teachability']:+.3f} to {coef['v2_all']['teachability']:+.3f}, mean "
              f"JSD {coef['shipped']['mean_jsd']:+.3f} to {coef['v2_all']['mean_jsd']:+.3f}",
              *(f"`{w}` {f(pw['v2_all']['worlds'][w])} against {q}{f(pw['shipped']['worlds'][w])}"
                for w, q in (("hearth", ""), ("chains", "the first look's in-sample "), ("cobble", ""),
                             ("ember", ""))),
              f"({band['v2_all'][0]:+.3f}, {band['v2_all'][1]:+.3f} against {band['shipped'][0]:+.3f}, "
              f"{band['shipped'][1]:+.3f}) makes {dec['n_decisive']} decisive calls, {dec['n_correct']} right, and "
              f"leaves {dec['unclear_share']:.0%} of rows `unclear`"):
        assert q in tenth, q
    assert a["ship"]["choice"] == "first_look" and "So the first look's models stay" in tenth
    assert f"refitted on all {a['n_worlds']} worlds, no better ([look 10]" in readme
