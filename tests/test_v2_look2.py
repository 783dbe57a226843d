"""Predictor v2's second look: the centred design against an explicit loop, its LOWO against the first look's
where nothing is centred, and the pre-registration order in git."""

from __future__ import annotations

import math

import numpy as np
import pytest

from git_history import first_added
from benchmarks.validity.v2 import looks, report_look2, report_v2


def _rows(seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for w in ("a", "b", "c", "d"):
        shift = rng.normal() * 3  # a world-level offset the centred features must not carry
        for i in range(6):
            y = rng.normal() * 0.1
            rows.append({"world": w, "config": f"k{i // 2}", "method": "opd" if i % 2 else "jsd",
                         "accuracy_gap": y + rng.normal() * 0.05, "x": shift + y + rng.normal() * 0.05,
                         "z": math.nan if (w == "b" and i == 2) else rng.normal(),
                         "d_pass1": {"estimate": y, "lo": y - 0.05, "hi": y + 0.05}})
    return rows


def test_centred_design_is_the_world_mean_removed_after_imputation():
    rows = _rows()
    fill = {"x": 0.5, "z": -2.0}
    X = looks.design(rows, ["accuracy_gap", "c(x)", "c(z)"], fill)
    for i, r in enumerate(rows):
        assert X[i, 0] == r["accuracy_gap"]
        for j, name in ((1, "x"), (2, "z")):
            same = [fill[name] if math.isnan(s[name]) else s[name] for s in rows if s["world"] == r["world"]]
            own = fill[name] if math.isnan(r[name]) else r[name]
            assert math.isclose(X[i, j], own - sum(same) / len(same), abs_tol=1e-12)


def test_fills_are_the_fitting_rows_means_of_centred_features_only():
    rows = _rows()
    f = looks.fills(rows[:12], ["accuracy_gap", "c(z)"])
    assert set(f) == {"z"}
    zs = [r["z"] for r in rows[:12] if not math.isnan(r["z"])]
    assert math.isclose(f["z"], sum(zs) / len(zs), abs_tol=1e-12)


def test_lowo_without_centring_is_the_first_looks():
    rows = _rows()
    a = looks.lowo(rows, ["accuracy_gap", "x", "z"], "d_pass1", 1.0)
    b = report_v2.lowo(rows, ["accuracy_gap", "x", "z"], "d_pass1", 1.0)
    for k in ("pred", "lo", "hi"):
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-12)


def test_centring_removes_a_world_offset_that_misleads_the_raw_fit():
    """x carries the outcome plus a large world-level offset: centred, it predicts across worlds; raw, far worse."""
    rows = _rows(1)
    y = report_v2.target(rows, "d_pass1")
    raw = looks.lowo(rows, ["x"], "d_pass1", 1.0, inner=False)["pred"]
    centred = looks.lowo(rows, ["c(x)"], "d_pass1", 1.0, inner=False)["pred"]
    assert np.mean((centred - y) ** 2) < 0.5 * np.mean((raw - y) ** 2)


def test_the_second_looks_plan_was_committed_before_its_analysis():
    def first(path: str):
        return first_added(report_look2.HERE, path)
    for look in (2, 3):
        plan = first(f"plan_look{look}.yaml")
        assert plan is not None
        analysis = first(f"look{look}_analysis.json")
        assert analysis is None or plan <= analysis


@pytest.mark.parametrize("feature, expect", [("c(teachability)", ("teachability", True)),
                                             ("accuracy_gap", ("accuracy_gap", False))])
def test_feature_names(feature, expect):
    assert looks.feature(feature) == expect


@pytest.mark.parametrize("look", [2, 3])
def test_results_are_the_render_of_the_committed_analysis(look):
    import json

    analysis = json.loads((report_look2.HERE / f"look{look}_analysis.json").read_text())
    assert (report_look2.HERE / f"RESULTS_look{look}.md").read_text() == report_look2.render(analysis)


@pytest.mark.parametrize("look", [2, 3])
def test_the_committed_analysis_follows_its_ship_rule(look):
    import json

    a = json.loads((report_look2.HERE / f"look{look}_analysis.json").read_text())
    assert a["ship"] == report_look2.ship(a)
    p, g, added = a["tiers"][a["primary"]], a["single"]["accuracy_gap"], a["added_world"]
    on_added = p[added]["spearman"]["estimate"] >= g[added]["spearman"]["estimate"]
    if look == 2:  # pooled over the eight worlds
        overall = (p["eight"]["spearman"]["estimate"] > g["eight"]["spearman"]["estimate"] and
                   p["eight"]["vs_accuracy_gap"]["lo"] > 0)
    else:  # the mean within-world Spearman over the nine
        overall = p["within"]["vs_accuracy_gap"]["lo"] > 0
    assert (a["ship"]["choice"] == a["primary"]) == (overall and on_added)
    assert a["added_world"] == {2: "crossed", 3: "mixed"}[look]


def test_within_is_the_mean_of_per_world_spearman_with_a_stratified_bootstrap():
    from scipy.stats import spearmanr

    rows = _rows(2)
    y = report_v2.target(rows, "d_pass1")
    x = np.array([r["x"] for r in rows])
    g = np.array([r["accuracy_gap"] for r in rows])
    reps = report_v2.realised_reps(rows, "d_pass1", 200, 0)
    got = looks.within(x, g, rows, reps, {"n": 200, "seed": 0})
    worlds = sorted({r["world"] for r in rows})
    per = lambda v: [spearmanr([v[i] for i, r in enumerate(rows) if r["world"] == w],  # noqa: E731
                               [y[i] for i, r in enumerate(rows) if r["world"] == w]).statistic for w in worlds]
    assert got["mean"]["estimate"] == pytest.approx(np.mean(per(x)), abs=1e-12)
    assert got["accuracy_gap_mean"] == pytest.approx(np.mean(per(g)), abs=1e-12)
    assert got["vs_accuracy_gap"]["estimate"] == pytest.approx(np.mean(per(x)) - np.mean(per(g)), abs=1e-12)
    assert got["mean"]["lo"] <= got["mean"]["estimate"] <= got["mean"]["hi"] and got["n_worlds"] == len(worlds)
    # a perfect predictor with noise-free realised values: every replicate is 1, so is the interval
    exact = np.tile(y[:, None], (1, 50))
    perfect = looks.within(y, g, rows, exact, {"n": 50, "seed": 1})
    assert perfect["mean"]["lo"] == pytest.approx(1.0) and perfect["mean"]["hi"] == pytest.approx(1.0)


def test_the_third_looks_ship_rule_reads_the_within_world_difference_and_the_added_world():
    def analysis(lo, on_added):
        tier = {"within": {"vs_accuracy_gap": {"estimate": 0.1, "lo": lo, "hi": 0.2}},
                "mixed": {"spearman": {"estimate": on_added}}}
        return {"look": 3, "scopes": ["nine", "eight", "mixed"], "primary": "v2c", "added_world": "mixed",
                "tiers": {"v2c": tier}, "single": {"accuracy_gap": {"mixed": {"spearman": {"estimate": 0.5}}}}}
    assert report_look2.ship(analysis(0.01, 0.6))["choice"] == "v2c"
    assert report_look2.ship(analysis(-0.01, 0.6))["choice"] == "accuracy_gap"
    assert report_look2.ship(analysis(0.01, 0.4))["choice"] == "accuracy_gap"


def test_readme_and_verdict_doc_quote_the_later_looks():
    import json

    from benchmarks.validity.v2.report_v2 import ci

    root = report_look2.HERE.parents[2]
    a2 = json.loads((report_look2.HERE / "look2_analysis.json").read_text())
    a3 = json.loads((report_look2.HERE / "look3_analysis.json").read_text())
    paired2 = ci(a2["tiers"]["v2c"]["eight"]["vs_accuracy_gap"])
    within3 = ci(a3["tiers"]["v2c"]["within"]["vs_accuracy_gap"])
    new3 = (a3["tiers"]["v2c"]["mixed"]["spearman"]["estimate"], a3["single"]["accuracy_gap"]["mixed"]["spearman"]["estimate"])
    text = " ".join((root / "docs" / "verdict.md").read_text().split())  # the README links to it
    assert f"paired {paired2}" in text and f"gains {within3}" in text
    assert f"{new3[0]:+.2f} vs G's {new3[1]:+.2f}" in text
    assert a2["ship"]["choice"] == a3["ship"]["choice"] == "accuracy_gap"  # both docs say the product ranks by G


def test_the_package_file_records_each_later_look_and_the_panel_quotes_it():
    import json

    from opsd_diag import prediction

    shipped = json.loads(report_look2.v2.SHIPPED.read_text())
    for look in (2, 3):
        a = json.loads((report_look2.HERE / f"look{look}_analysis.json").read_text())
        assert shipped["later_looks"][f"look{look}"] == report_look2.later_look(a)
    cal = prediction.load()
    assert cal.choice == "accuracy_gap" and {"look2", "look3", "look4", "look5", "look6"} <= set(cal.later_looks)
    text = prediction.panel(prediction.Predictions([], cal, "accuracy_gap"))
    assert all(v["summary"] in text["looks"] for v in shipped["later_looks"].values())
    assert text["looks"].startswith("Alone, pooled over the first study's worlds, v2 lost to G: ")  # the history
    assert f" {len(shipped['later_looks'])} later pre-registered looks, each judged" in text["looks"]
    assert not any(v["summary"] in text["ranking"] for v in shipped["later_looks"].values())  # folded away, not repeated
    # docs/verdict.md counts the looks and names those that changed the product (their summaries end "ships")
    words = {4: "four", 5: "five", 15: "Fifteen", 16: "Sixteen", 17: "Seventeen"}
    ordinal = {5: "fifth", 8: "eighth", 13: "thirteenth", 16: "sixteenth", 17: "seventeenth"}
    changed = [int(k[4:]) for k, v in shipped["later_looks"].items() if v["summary"].endswith("ships")]
    doc = " ".join((report_look2.HERE.parents[2] / "docs" / "verdict.md").read_text().split())
    lead = doc[doc.index("### Later looks"):doc.index("The second ([plan]")]
    assert f"{words[len(shipped['later_looks'])]} later pre-registered looks" in lead
    assert f"{words[len(changed)]} changed the product: " in lead
    assert all(f"the {ordinal[n]} the " in lead for n in changed)
