"""Predictor v2's twelfth look (plan_look12.yaml): its two features against an explicit reference, RESULTS_look12.md
is exactly the render of its committed analysis, the analysis is what the look's code computes again from the
committed rows, it follows the pre-registered ship rule, the plan precedes the analysis and the added worlds' builds
in git history, and the package's model file records the look."""

from __future__ import annotations

import json

import pytest

from compare import assert_tree_close
from git_history import assert_plan_first
from benchmarks.validity.v2 import report_look12
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look12.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look12_analysis.json").read_text())


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look12.md").read_text() == report_look12.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())
    again = json.loads(json.dumps(v2.stats_jsonable(report_look12.analyse(before_look(shipped, 12))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert len(a["never_fitted"]) == 37 and len(a["seven"]) == 7
    assert set(a["added_built"]) <= set(a["added_planned"]) == {"jasper", "mica", "opal"}
    assert {"g_far_jsd", "g_far_teach"} <= set(a["coefficients"]["v2"]["v2_far"])


def _a(lowo_far, lowo_shipped, added):
    """An analysis cut to what the ship rule reads; ``added``: world -> (v2_far, shipped)."""
    per = {k: {"worlds": {w: v[i] for w, v in added.items()}} for i, k in enumerate(("v2_far", "shipped"))}
    mean = {k: sum(per[k]["worlds"].values()) / len(added) for k in per} if added else None
    return {"never_fitted": ["w"] * 37, "added_built": list(added),
            "seen": {"mean": {"v2_far": lowo_far, "shipped": lowo_shipped}},
            "added": {"per_world": per, "mean": mean} if added else None}


@pytest.mark.parametrize("a, ships", [
    (_a(0.76, 0.73, {"x": (0.9, 0.8), "y": (0.7, 0.7)}), True),
    (_a(0.73, 0.73, {"x": (0.9, 0.8), "y": (0.7, 0.7)}), False),    # leave-one-world-out not strictly above
    (_a(0.76, 0.73, {"x": (0.9, 0.8)}), False),                     # one added world
    (_a(0.76, 0.73, {"x": (0.8, 0.8), "y": (0.7, 0.7)}), False),    # added worlds tied
    (_a(0.76, 0.73, {"x": (0.95, 0.6), "y": (0.5, 0.65)}), False),  # one added world 0.15 below
    (_a(0.76, 0.73, {}), False)])                                   # none built
def test_the_ship_rule_reads_every_condition(a, ships):
    assert (report_look12.ship(a)["choice"] == "v2_far") == ships
    assert _analysis()["ship"] == report_look12.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis_and_the_added_worlds():
    assert_plan_first(HERE, 12, report_look12.added_worlds()[0], v2.REPO / "sample_data" / "worlds")


def test_the_package_file_records_the_look():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look12"] == report_look12.later_look(a)
    assert a["ship"]["choice"] == "first_look"  # its rule was not met: the sixteenth look judged v2_far again
    assert all("g_far_teach" not in m["d_pass1"]["features"] for m in before_look(shipped, 16)["models"].values())
    looks = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look12.later_look(a)["summary"] in looks  # the decision panel quotes the look


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a, f = _analysis(), v2.fmt
    m, diff, new = a["seen"]["mean"], a["seen"]["v2_far_minus_shipped"], a["added"]
    per = new["per_world"]
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    twelve = verdict[verdict.index("#### The twelfth look"):][:2000]
    for q in (f"refitted on the {a['n_rows']} rows of the 44 seen worlds",
              f"it reached {f(m['v2_far'])} against the shipped {f(m['shipped'])} (paired {diff['estimate']:+.3f} "
              f"[{diff['lo']:+.3f}, {diff['hi']:+.3f}], above in {diff['above']}, below in {diff['below']})",
              *(f"`{w}` {f(per['v2_far']['worlds'][w])} against {f(per['shipped']['worlds'][w])}"
                for w in a["added_built"]),
              f"(mean {f(new['mean']['v2_far'])} against {f(new['mean']['shipped'])};",
              *(f"`{w}` was excluded by the level rule" for w in a["added_excluded"])):
        assert q in twelve, q
    assert a["ship"]["choice"] == "first_look" and "So the first look's models stay." in twelve
    assert "G times the teacher's distance from the student (look 12's, frozen)" in readme  # shipped by look 16
