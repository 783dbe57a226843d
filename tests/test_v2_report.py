"""Predictor v2's study: the committed RESULTS.md is exactly the render of its committed analysis, the shipped
model file carries the figures of that analysis, and its models reproduce their own coefficients' algebra."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from git_history import first_added
from benchmarks.validity.v2 import report_v2
from benchmarks.validity.v2.looks import before_look  # noqa: E402
from opsd_diag.core import predictor

HERE = Path(report_v2.__file__).resolve().parent


def test_results_md_is_the_render_of_the_committed_analysis():
    analysis = json.loads((HERE / "v2_analysis.json").read_text())
    assert (HERE / "RESULTS.md").read_text() == report_v2.render(analysis)


def test_shipped_file_carries_the_analysis_figures_and_the_ship_rule():
    analysis = json.loads((HERE / "v2_analysis.json").read_text())
    shipped = json.loads(report_v2.SHIPPED.read_text())
    assert shipped["choice"] == analysis["ship"]["choice"]
    assert shipped["delta"] == analysis["delta"]
    for tier, d in analysis["tiers"].items():
        assert shipped["lowo"][tier]["spearman"] == d["spearman"]
        assert before_look(shipped, 16)["models"][tier]["d_pass1"]["features"] == d["features"]  # the first look's
    assert shipped["accuracy_gap"] == analysis["single"]["accuracy_gap"]["spearman"]
    # the rule as pre-registered: v2 ships only when it beats G with the paired interval above 0
    v2 = analysis["tiers"]["v2"]
    beats = v2["spearman"]["estimate"] > analysis["single"]["accuracy_gap"]["spearman"]["estimate"] and \
        v2["vs_accuracy_gap"]["lo"] > 0
    assert (shipped["choice"] == "v2") == beats
    for tier in shipped["models"].values():
        for m in tier.values():
            x = np.array(m["mean"])[None, :] + np.array(m["sd"])[None, :]  # one SD above the mean on every feature
            want = sum(m["coef"]) + m["intercept"]  # on the fitted scale; a log-target model (the drift) exponentiates
            want = math.exp(want) if m.get("target") == "log" else want
            assert math.isclose(predictor.predict(m, x)[0], want, rel_tol=1e-12, abs_tol=1e-12)
            assert m["residual_band"][0] <= 0 <= m["residual_band"][1]


def test_plan_was_committed_before_the_analysis():
    """git history: plan.yaml's first commit precedes the first commit of the analysis (pre-registration)."""
    def first(path: str) -> int:
        return first_added(HERE, path)
    plan, analysis = first("plan.yaml"), first("v2_analysis.json")
    if analysis is None:  # not yet committed in this checkout (a working copy): the plan must be
        assert plan is not None
    else:
        assert plan is not None and plan <= analysis


def test_readme_quotes_the_committed_v2_figures():
    analysis = json.loads((HERE / "v2_analysis.json").read_text())
    readme = " ".join((HERE.parents[2] / "README.md").read_text().split())  # as wrapped
    v2, diff = analysis["tiers"]["v2"]["spearman"], analysis["tiers"]["v2"]["vs_accuracy_gap"]
    assert f"{v2['estimate']:+.2f} [{v2['lo']:+.2f}, {v2['hi']:+.2f}]" in readme
    assert f"{diff['estimate']:+.2f} [{diff['lo']:+.2f}, {diff['hi']:+.2f}]" in readme
    assert ("still loses to G" in readme) == (analysis["ship"]["choice"] != "v2")
