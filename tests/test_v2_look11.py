"""Predictor v2's eleventh look (plan_look11.yaml): the calibration table and its verdict against a slow reference,
RESULTS_look11.md is exactly the render of its committed analysis, the analysis is what the look's code computes
again from the committed rows, it follows the pre-registered ship rule, the plan precedes the analysis in git
history, and the package's model file records the look while the product keeps the interval rule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from compare import assert_tree_close
from git_history import assert_plan_first, first_added
from benchmarks.validity.v2 import report_look11
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look11.HERE


def _analysis() -> dict:
    return json.loads((HERE / "look11_analysis.json").read_text())


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics at position q * (n - 1), written out."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    i = int(math.floor(pos))
    return s[i] if i + 1 >= len(s) else s[i] + (pos - i) * (s[i + 1] - s[i])


@pytest.mark.parametrize("seed, n, bins", [(0, 37, 10), (1, 200, 10), (2, 12, 4), (3, 50, 7)])
def test_the_table_and_its_verdict_match_a_slow_reference(seed, n, bins):
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=n), 1)  # ties on purpose, some on the edges
    classes = [str(c) for c in rng.choice(report_look11.CLASSES, size=n, p=[0.3, 0.5, 0.2])]
    t = report_look11.class_table(x, classes, bins)
    edges = [_quantile(list(x), k / bins) for k in range(1, bins)]
    assert t["n"] == n and np.allclose(t["edges"], edges, rtol=0, atol=1e-12)
    counts = [{c: 0 for c in report_look11.CLASSES} for _ in range(bins)]
    for v, c in zip(x, classes):
        b = 0
        for e in edges:
            if e <= v:
                b += 1
        counts[b][c] += 1
    assert t["counts"] == counts
    for v in [*x, -1e9, 1e9]:
        b = sum(1 for e in edges if e <= v)
        m = sum(counts[b].values())
        want = ("hurts" if m and counts[b]["degrades"] / m >= 0.9 else
                "helps" if m and counts[b]["improves"] / m >= 0.85 else "unclear")
        assert report_look11.table_verdict(float(v), t, 0.9, 0.85) == want
    assert report_look11.table_verdict(math.nan, t, 0.9, 0.85) == "unclear"


def test_a_bin_verdict_reads_its_shares_at_the_thresholds():
    verdict = report_look11.bin_verdict
    assert verdict({"improves": 1, "degrades": 9, "no clear change": 0}, 0.9, 0.85) == "hurts"  # exactly 0.90
    assert verdict({"improves": 1, "degrades": 8, "no clear change": 1}, 0.9, 0.85) == "unclear"
    assert verdict({"improves": 17, "degrades": 1, "no clear change": 2}, 0.9, 0.85) == "helps"  # exactly 0.85
    assert verdict({"improves": 0, "degrades": 0, "no clear change": 0}, 0.9, 0.85) == "unclear"  # empty


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look11.md").read_text() == report_look11.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    shipped = json.loads(v2.SHIPPED.read_text())
    again = json.loads(json.dumps(v2.stats_jsonable(report_look11.analyse(before_look(shipped, 11))), sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert len(a["never_fitted"]) == 37 and len(a["seven"]) == 7 and a["n_rows"]["seen"] == a["seen_table"]["n"]
    assert set(a["added_built"]) <= set(a["added_planned"]) == {"chert", "jasper", "mica"}
    assert set(a["added_planned"]).isdisjoint([*a["seven"], *a["never_fitted"]])


def _pooled(n_decisive, n_correct, helps, hurts, n_helps=10):
    return {"n_decisive": n_decisive, "n_correct": n_correct, "accuracy": n_correct / n_decisive if n_decisive else
            float("nan"), "helps_precision": helps, "hurts_precision": hurts, "n_helps": n_helps}


@pytest.mark.parametrize("lowo, added, built, ships", [
    (_pooled(40, 36, 0.8, 0.95), _pooled(6, 5, 1.0, 0.8), ["chert"], True),
    (_pooled(29, 29, 1.0, 1.0), _pooled(6, 6, 1.0, 1.0), ["chert"], False),          # too few calls
    (_pooled(40, 33, 0.8, 0.95), _pooled(6, 5, 1.0, 0.8), ["chert"], False),         # 0.825 right
    (_pooled(40, 36, 0.8, 0.89), _pooled(6, 5, 1.0, 0.8), ["chert"], False),         # hurts precision
    (_pooled(40, 36, 0.6, 0.95), _pooled(6, 5, 1.0, 0.8), ["chert"], False),         # helps precision
    (_pooled(40, 36, float("nan"), 0.95, n_helps=0), _pooled(6, 5, 1.0, 0.8), ["chert"], True),  # no helps call
    (_pooled(40, 36, 0.8, 0.95), _pooled(6, 4, 1.0, 0.6), ["chert"], False),         # the added worlds
    (_pooled(40, 36, 0.8, 0.95), _pooled(4, 0, 1.0, 0.0), ["chert"], True),          # under 5 calls there
    (_pooled(40, 36, 0.8, 0.95), _pooled(0, 0, 1.0, 0.0), [], False)])               # no added world built
def test_the_ship_rule_reads_every_condition(lowo, added, built, ships):
    a = {"never_fitted": ["w"] * 37, "added_built": built,
         "verdicts": {"calibrated_classes": {"never_fitted": lowo, "added": added}}}
    assert (report_look11.ship(a)["choice"] == "calibrated_classes") == ships
    assert _analysis()["ship"] == report_look11.ship(_analysis())


def test_the_plan_was_committed_before_the_analysis_and_the_added_worlds():
    worlds = v2.REPO / "sample_data" / "worlds"
    plan = assert_plan_first(HERE, 11, report_look11.added_worlds()[0], worlds)
    for w in report_look11.added_worlds()[0]:
        assert first_added(worlds, f"{w}.yaml") == plan  # the specs came with the plan


def test_the_package_file_records_the_look_and_the_interval_verdict_stays():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look11"] == report_look11.later_look(a)
    assert a["ship"]["choice"] == "interval" and "verdict_table" not in shipped  # the product keeps no code for it
    looks = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look11.later_look(a)["summary"] in looks  # the decision panel quotes the look


def test_readme_and_verdict_doc_quote_the_committed_figures():
    a = _analysis()
    d = a["verdicts"]["calibrated_classes"]
    lowo, new = d["never_fitted"], d["added"]
    t = a["seen_table"]
    top, eighth = t["counts"][-1], t["counts"][7]
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    eleven = verdict[verdict.index("#### The eleventh look"):][:2400]
    for q in (f"Over the {t['n']} rows of the {len(a['seven']) + len(a['never_fitted'])} seen worlds",
              f"right on {lowo['n_correct']} of {lowo['n_decisive']} decisive calls ({lowo['accuracy']:.3f}",
              f"(precision {lowo['hurts_precision']:.3f}; required 0.90), with {lowo['unclear_share']:.0%} `unclear`",
              f"(a prediction below {t['edges'][0]:+.3f}) degraded in {t['counts'][0]['degrades'] / 100:.0%}",
              f"no bin improved in more than {eighth['improves'] / sum(eighth.values()):.0%}",
              f"improved in only {top['improves'] / sum(top.values()):.0%} and changed nothing clear in "
              f"{top['no clear change'] / sum(top.values()):.0%}",
              f"moved by {t['described'][-1]['unchanged_median_abs']:.3f}",
              f"{t['described'][-1]['far_above']:.0%} of that decile has G >= 0.55",
              f"made {new['n_decisive']} decisive calls, all `hurts` and all right, and left {new['unclear_share']:.0%}"):
        assert q in eleven, q
    assert new["n_hurts"] == new["n_decisive"] == new["n_correct"] and sum(t["counts"][0].values()) == 100
    assert (f"from the past rows predicted alike, {lowo['n_correct']} of {lowo['n_decisive']} over "
            f"{len(a['never_fitted'])} worlds ({lowo['accuracy']:.3f}, {lowo['unclear_share']:.0%} `unclear`") in readme
