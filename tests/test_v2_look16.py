"""Predictor v2's sixteenth look (plan_look16.yaml): its judged worlds are the ones the plan's date rule names and on
which the twelfth look never computed its candidate; the candidate is that look's model, unchanged; RESULTS_look16.md
is exactly the render of its committed analysis, the analysis is what the look's code computes again from the
committed rows, it follows the pre-registered ship rule, the plan precedes the analysis and the new worlds' builds in
git history, and the package's model file records the look."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from compare import assert_tree_close
from git_history import assert_plan_first, first_added
from benchmarks.validity.v2 import report_look12, report_look16
from benchmarks.validity.v2 import report_v2 as v2
from benchmarks.validity.v2.looks import before_look
from opsd_diag import prediction

HERE = report_look16.HERE
WORLDS = v2.REPO / "sample_data" / "worlds"


def _analysis() -> dict:
    return json.loads((HERE / "look16_analysis.json").read_text())


def test_the_judged_worlds_are_those_with_rows_built_after_the_twelfth_looks_plan():
    """Every world whose rows were first committed after plan_look12.yaml is judged, but jasper and mica, whose v2_far
    figures the twelfth look printed; the plan's new worlds come on top."""
    p = report_look16.plan()["judged_worlds"]
    plan12, plan16 = first_added(HERE, "plan_look12.yaml"), first_added(HERE, "plan_look16.yaml")
    later = [f.name[:-len("_analysis.json")] for f in (HERE / "checks").glob("*_analysis.json")
             if plan12 < (first_added(HERE / "checks", f.name) or math.inf) < plan16]  # committed between the plans
    assert sorted([*p["since_look12"], *p["reported_not_judged"]]) == sorted(later) and not set(later) & set(p["new"])
    look12 = json.loads((HERE / "look12_analysis.json").read_text())
    assert sorted(p["reported_not_judged"]) == sorted(look12["added_built"])
    assert not set(p["since_look12"]) & set(look12["added"]["per_world"]["v2_far"]["worlds"])


def test_the_candidate_is_the_twelfth_looks_model_unchanged():
    seven, never = report_look12.seen()
    models = report_look12.fitted(report_look12.rows_of([*seven, *never]))
    look12 = json.loads((HERE / "look12_analysis.json").read_text())["coefficients"]
    for tier, m in models.items():
        got, want = dict(zip(m["d_pass1"]["features"], m["d_pass1"]["coef"])), look12[tier]["v2_far"]
        assert sorted(got) == sorted(want) and {"g_far_teach", "g_far_jsd"} <= set(got)
        assert np.allclose([got[k] for k in want], list(want.values()), rtol=1e-9, atol=1e-12), tier
        assert np.allclose(m["d_pass1"]["residual_band"], look12[tier]["band"]["v2_far"], atol=1e-9), tier


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look16.md").read_text() == report_look16.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = before_look(json.loads(v2.SHIPPED.read_text()), 16)  # the file as the look read it
    again = json.loads(json.dumps(v2.stats_jsonable(report_look16.analyse(shipped)), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    w = a["worlds"]
    assert set(w["judged"]) <= set(w["since_look12"]) | set(w["new"]) and not set(w["judged"]) & set(w["excluded"])
    assert a["judged"]["worlds"] == w["judged"] and a["reported"]["worlds"] == ["jasper", "mica"]


def _a(per: dict[str, tuple[float, float]]) -> dict:
    """An analysis cut to what the ship rule reads: world -> (v2_far, shipped)."""
    d = {"above": sum(x > y for x, y in per.values()), "below": sum(x < y for x, y in per.values())}
    mean = {"v2_far": float(np.mean([x for x, _ in per.values()])) if per else 0.0,
            "shipped": float(np.mean([y for _, y in per.values()])) if per else 0.0}
    return {"worlds": {"judged": list(per)}, "judged": {"mean": mean, "v2_far_minus_shipped": d} if per else None}


@pytest.mark.parametrize("per, ships", [
    ({f"w{i}": (0.8, 0.7) for i in range(12)}, True),
    ({f"w{i}": (0.8, 0.7) for i in range(11)}, False),                                   # fewer than 12 worlds
    ({**{f"w{i}": (0.8, 0.7) for i in range(6)}, **{f"v{i}": (0.6, 0.7) for i in range(6)}}, False),  # as many below
    ({**{f"w{i}": (0.71, 0.7) for i in range(7)}, **{f"v{i}": (0.5, 0.7) for i in range(5)}}, False),  # mean below
    ({**{f"w{i}": (0.9, 0.7) for i in range(5)}, **{f"v{i}": (0.69, 0.7) for i in range(7)}}, False),  # more below
    ({}, False)])
def test_the_ship_rule_reads_every_condition(per, ships):
    assert (report_look16.ship(_a(per))["choice"] == "v2_far") == ships
    assert _analysis()["ship"] == report_look16.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis_and_the_new_worlds():
    new = [w for w, v in report_look16.plan()["judged_worlds"]["new"].items() if isinstance(v, dict)]
    plan = assert_plan_first(HERE, 16, new, WORLDS)
    for w in new:
        spec = first_added(WORLDS, f"{w}.yaml")
        rows = first_added(HERE / "checks", f"{w}_analysis.json")
        assert spec is not None and spec <= plan and (rows is None or plan <= rows), w


def test_the_package_file_records_the_look():
    a, shipped = _analysis(), json.loads(v2.SHIPPED.read_text())
    assert {k: v for k, v in shipped["later_looks"]["look16"].items() if k != "replaced"} == \
        report_look16.later_look(a)
    looks_text = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look16.later_look(a)["summary"] in looks_text  # the decision panel quotes the look
    features = {t: m["d_pass1"]["features"] for t, m in shipped["models"].items()}
    if a["ship"]["choice"] == "v2_far":
        seven, never = report_look12.seen()
        fitted = report_look12.fitted(report_look12.rows_of([*seven, *never]))
        for t, m in fitted.items():  # refitted here: floats within tolerance (CPUs round differently)
            assert_tree_close(shipped["models"][t]["d_pass1"], json.loads(json.dumps(v2.stats_jsonable(m["d_pass1"]))))
        assert before_look(shipped, 16)["models"] != shipped["models"]  # the record keeps what it replaced
    else:
        assert all("g_far_teach" not in f for f in features.values()) and "replaced" not in \
            shipped["later_looks"]["look16"]


def test_the_verdict_doc_and_readme_quote_the_committed_figures():
    a, f = _analysis(), v2.fmt
    j, d = a["judged"], a["judged"]["v2_far_minus_shipped"]
    rec = {k: float(np.mean([v for v in j["recommended"][k].values() if v is not None])) for k in ("shipped", "v2_far")}
    best = float(np.mean(list(j["best_row"].values())))
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    section = verdict[verdict.index("#### The sixteenth look"):verdict.index("### The shipped model")]
    n = len(a["worlds"]["judged"])
    for q in (f"Over the {n} judged worlds its ranking reached {f(j['mean']['v2_far'])} against the shipped "
              f"{f(j['mean']['shipped'])} (paired {d['estimate']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}], above in "
              f"{d['above']}, below in {d['below']})",
              f"realised {rec['v2_far']:+.3f} on average against the shipped ranking's {rec['shipped']:+.3f} (each "
              f"world's best row {best:+.3f})",
              f"the shipped ranking recommended a row that realised {j['recommended']['shipped']['gypsum']:+.3f}, v2_far "
              f"one that realised {j['recommended']['v2_far']['gypsum']:+.3f}",
              *(f"`{w}`" for w in a["worlds"]["excluded"]), "so v2_far's gain models ship"):
        assert q in section, q
    assert a["ship"]["choice"] == "v2_far" and len(a["worlds"]["judged"]) == 15
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    assert (f"on the {n} worlds built after that look's plan {f(j['mean']['v2_far'])} against {f(j['mean']['shipped'])} "
            f"(paired {d['estimate']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]), its recommended row {rec['v2_far']:+.3f} "
            f"against {rec['shipped']:+.3f}") in readme
