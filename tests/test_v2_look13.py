"""Predictor v2's thirteenth look (plan_look13.yaml): its measures against an explicit reference, RESULTS_look13.md is
exactly the render of its committed analysis, the analysis is what the look's code computes again from the committed
rows, it follows the pre-registered ship rule, the plan precedes the analysis and the added worlds' builds in git
history, and the package's model file records the look (and, where it shipped, holds its drift models and what they
replaced)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from compare import assert_tree_close
from git_history import assert_plan_first
from benchmarks.validity.v2 import looks, report_look13
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look13.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look13_analysis.json").read_text())


def test_the_measures_match_explicit_loops():
    """within3, the log error, coverage and the zero share against a loop over rows on a small input."""
    rows = [{"world": w, "kl_to_initial": {"estimate": r}}
            for w, r in (("a", 0.1), ("a", 0.02), ("a", 1.0), ("b", 0.5), ("b", 0.3), ("b", math.nan))]
    pred = np.array([0.25, 0.0, 0.2, 0.5, 1.2, 0.4])
    lo, hi = pred / 2, pred * 2 + 0.01
    got = report_look13.measures({"pred": pred, "lo": lo, "hi": hi}, rows)
    kept = [(p, r["kl_to_initial"]["estimate"], a, b, r["world"]) for p, r, a, b in zip(pred, rows, lo, hi)
            if math.isfinite(r["kl_to_initial"]["estimate"])]
    within = [r / 3 <= p <= 3 * r for p, r, *_ in kept]
    errors = sorted(abs(math.log10(max(p, 1e-4) / r)) for p, r, *_ in kept)
    assert got["n"] == 5 and got["within3"] == pytest.approx(sum(within) / 5)
    assert got["log_error"] == pytest.approx(errors[2]) and got["shown_zero"] == pytest.approx(1 / 5)
    assert got["coverage"] == pytest.approx(sum(a <= r <= b for _, r, a, b, _ in kept) / 5)
    assert got["per_world"]["a"]["within3"] == pytest.approx(sum(within[:3]) / 3)


def test_the_log_target_is_the_floored_natural_log():
    rows = report_look13.with_log_target([{"kl_to_initial": {"estimate": v}} for v in (0.5, 0.0, math.nan)])
    got = [r["log_kl"]["estimate"] for r in rows]
    assert got[0] == pytest.approx(math.log(0.5)) and got[1] == pytest.approx(math.log(1e-6)) and math.isnan(got[2])


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look13.md").read_text() == report_look13.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    again = json.loads(json.dumps(v2.stats_jsonable(report_look13.analyse()), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert len(a["never_fitted"]) == 37 and len(a["seven"]) == 7
    assert set(a["added_built"]) <= set(a["added_planned"]) == {"garnet", "beryl"}
    assert all(m["target"] == "log" for m in a["models"].values())


def test_the_shipped_drift_it_compares_with_is_the_first_looks():
    """The look's `shipped` drift models are the first look's (refitted as report_v2 fits them): the package's file
    held them within 1e-7 until this look, and its record keeps them where the look replaced them."""
    a = _analysis()
    first = report_look13.first_look(report_look13.look2.load_rows({"worlds": a["seven"]}))
    held = looks.before_look(json.loads(v2.SHIPPED.read_text()), 13)["models"]
    for t in first:
        ours, theirs = first[t]["kl_to_initial"], held[t]["kl_to_initial"]
        assert "target" not in theirs and ours["features"] == theirs["features"]
        assert ours["coef"] == pytest.approx(theirs["coef"], abs=1e-7)
        assert ours["intercept"] == pytest.approx(theirs["intercept"], abs=1e-7)


def _a(within_never, sp_never, within_added):
    """An analysis cut to what the ship rule reads: (v2_logkl, shipped) pairs; ``within_added`` None: none built."""
    new = None if within_added is None else {m: {"within3": v} for m, v in zip(("v2_logkl", "shipped"), within_added)}
    return {"never_fitted": ["w"] * 37, "added_built": [] if new is None else ["x"],
            "never": {m: {"within3": w, "spearman_mean": s}
                      for m, w, s in zip(("v2_logkl", "shipped"), within_never, sp_never)}, "added": new}


@pytest.mark.parametrize("a, ships", [
    (_a((0.70, 0.43), (0.78, 0.75), (0.6, 0.5)), True),
    (_a((0.52, 0.43), (0.78, 0.75), (0.6, 0.5)), False),   # within3 only 0.09 above
    (_a((0.70, 0.43), (0.72, 0.75), (0.6, 0.5)), False),   # Spearman 0.03 below
    (_a((0.70, 0.43), (0.74, 0.75), (0.6, 0.6)), True),    # 0.01 below, added worlds tied: allowed
    (_a((0.70, 0.43), (0.78, 0.75), (0.5, 0.6)), False),   # added worlds below
    (_a((0.70, 0.43), (0.78, 0.75), None), False)])        # none built
def test_the_ship_rule_reads_every_condition(a, ships):
    assert (report_look13.ship(a)["choice"] == "v2_logkl") == ships
    assert _analysis()["ship"] == report_look13.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis_and_the_added_worlds():
    assert_plan_first(HERE, 13, report_look13.added_worlds()[0], v2.REPO / "sample_data" / "worlds")


def test_the_package_file_records_the_look():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    record = shipped["later_looks"]["look13"]
    assert {k: v for k, v in record.items() if k != "replaced"} == report_look13.later_look(a)
    looks_text = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look13.later_look(a)["summary"] in looks_text  # the decision panel quotes the look
    if a["ship"]["choice"] == "v2_logkl":
        for t, m in a["models"].items():
            assert shipped["models"][t]["kl_to_initial"] == m
        assert set(record["replaced"]["checked_worlds"]) >= {"kiln", "tallow", *a["added_built"]}
    else:
        assert "replaced" not in record and all(
            "target" not in m["kl_to_initial"] for m in shipped["models"].values())


def test_the_verdict_doc_quotes_the_committed_figures():
    a = _analysis()
    nv, new, f = a["never"], a["added"], v2.fmt
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    text = verdict[verdict.index("#### The thirteenth look"):][:2400]
    factor = {m: 10 ** nv[m]["log_error"] for m in ("v2_logkl", "shipped")}
    band = a["models"]["v2"]["residual_band"]
    for q in (f"within a factor of 3 of the realised KL on {nv['v2_logkl']['within3']:.0%} of the {nv['shipped']['n']} "
              f"rows against the shipped model's {nv['shipped']['within3']:.0%} (which showed 0 on "
              f"{nv['shipped']['shown_zero']:.0%} of them)",
              f"its median error was a factor of {factor['v2_logkl']:.1f} against {factor['shipped']:.1f}",
              f"mean within-world Spearman {f(nv['v2_logkl']['spearman_mean'])} against "
              f"{f(nv['shipped']['spearman_mean'])}",
              f"{new['v2_logkl']['within3']:.0%} against {new['shipped']['within3']:.0%} and "
              f"{f(new['v2_logkl']['spearman_mean'])} against {f(new['shipped']['spearman_mean'])}"):
        assert q in text, q
    assert a["ship"]["choice"] == "v2_logkl" and "so the log-KL drift ships" in text
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    assert (f"within a factor of 3 of the realised KL on {nv['v2_logkl']['within3']:.0%} of the rows of "
            f"{len(a['never_fitted'])} worlds it was never fitted on, against {nv['shipped']['within3']:.0%} for the "
            f"raw-KL model it replaced, which showed 0 on {nv['shipped']['shown_zero']:.0%} of them") in readme
    assert round(math.exp(-band[0])) == round(math.exp(band[1])) == 10 and "a factor of about 10 either way" in text
    assert f"(it covered {nv['v2_logkl']['coverage']:.0%} of the realised KL on the 37 worlds)" in text
