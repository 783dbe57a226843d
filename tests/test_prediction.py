"""Predictor v2 applied to a run (``opsd_diag.prediction``): features read from a real tiny run, predictions
against a float64 loop over the coefficients, the collapse flag, the tier fallback without a lookahead, the
ranking, the accuracy-gap ranking when the study chose G, and the calibration file."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from calibration import model_file, write
from conftest import tiny_config

from opsd_diag import prediction
from opsd_diag.core import predictor
from opsd_diag.errors import OpsdError
from opsd_diag.model_file import CHOICES
from opsd_diag.prediction import LOSS, TIERS
from opsd_diag.run import Run
from opsd_diag.summary import Summary

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_run(ci_zoo, tmp_path_factory):
    """A real diagnosis on the random zoo: a teacher model, a self-teacher, a base, and a lookahead of opd, jsd."""
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("prediction")
    data = root / "problems.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in task.generate(6, 11)))
    cfg = tiny_config(ci_zoo, data, lookahead={"methods": ["opd", "jsd"], "steps": 2, "rollouts_per_step": 2,
                                               "learning_rate": 1e-2}, ideal={"budget": 24, "k": 2, "m": 2})
    return run_diagnosis(from_dict(cfg), root / "run", show_progress=False)


@pytest.fixture()
def raw(tiny_run) -> dict:
    return json.loads((tiny_run / "summary.json").read_text())


@pytest.fixture()
def cal_file(tmp_path):
    return write(tmp_path / "calibration.json")


def _reference(m: dict, x: dict) -> float:
    """intercept + sum_i coef_i * (x_i - mean_i) / sd_i in float64, a missing x_i contributing 0."""
    total = float(m["intercept"])
    for f, mean, sd, coef in zip(m["features"], m["mean"], m["sd"], m["coef"]):
        v = x[f]
        if v is not None and not math.isnan(v):
            total += float(coef) * (float(v) - float(mean)) / float(sd)
    return total


def _raw_features(raw: dict, config: str, method: str) -> dict:
    """The features by key chains into summary.json, as the brief of issue 32 writes them."""
    c = raw["configs"][config]
    la = raw.get("lookahead") or {}
    r = (la.get("configs") or {}).get(config, {}).get(LOSS[method]) if la.get("status") == "ok" else None
    gap = c["teacher_minus_student_accuracy"]
    x = {"accuracy_gap": gap["estimate"] if gap else None,
         "teachability": c["overall"]["columns"]["teachability"]["mean"],
         "mean_jsd": c["overall"]["columns"]["jsd"]["mean"], "is_jsd": 1.0 if method in ("jsd", "opsd_jsd") else 0.0}
    for k in ("dv", "dll", "kl"):
        x[f"lookahead_{k}"] = r[k]["estimate"] if r and "skipped" not in r else None
    g = None if x["accuracy_gap"] is None else max(x["accuracy_gap"], 0.0)  # the sixteenth look's two features
    x["g_far_teach"] = None if g is None else g * (1.0 - x["teachability"])
    x["g_far_jsd"] = None if g is None else g * x["mean_jsd"]
    return {k: math.nan if v is None else v for k, v in x.items()}


@pytest.mark.parametrize("g, teach, jsd, want", [
    (0.8, 0.9, 0.05, (0.8 * 0.1, 0.8 * 0.05)),
    (-0.3, 0.5, 0.2, (0.0, 0.0)),                       # G's positive part: a teacher below adds nothing
    (0.0, 0.7, 0.1, (0.0, 0.0)),
    (0.4, math.nan, 0.1, (math.nan, 0.4 * 0.1)),        # a missing factor leaves that product missing
    (math.nan, 0.9, 0.1, (math.nan, math.nan))])
def test_the_derived_features_are_g_positive_part_times_the_distance(g, teach, jsd, want):
    got = predictor.derived(g, teach, jsd)
    assert tuple(got) == predictor.DERIVED
    for k, w in zip(predictor.DERIVED, want):
        assert (math.isnan(got[k]) and math.isnan(w)) or math.isclose(got[k], w, rel_tol=1e-12, abs_tol=1e-15), k


def test_features_are_read_from_a_real_run(raw):
    s = Summary.model_validate(raw)
    assert raw["lookahead"]["status"] == "ok"
    for config, method in (("teacher", "opd"), ("teacher", "jsd"), ("teacher", "opd2"), ("self_full", "opsd_opd"),
                           ("self_full", "opsd_jsd")):
        got, want = prediction.features(s, config, method), _raw_features(raw, config, method)
        assert set(got) == set(want)
        for k in want:
            assert (math.isnan(got[k]) and math.isnan(want[k])) or got[k] == want[k], (config, method, k)
    assert not math.isnan(prediction.features(s, "teacher", "opd")["lookahead_dv"])
    assert math.isnan(prediction.features(s, "teacher", "exopd")["lookahead_dv"])  # not looked ahead


def test_the_shipped_files_gains_equal_a_float64_loop_over_its_coefficients(raw):
    """The package's own model file (whatever features its gain models take, derived ones included) applied to a real
    run: each row's predicted gain is the explicit loop over the file's coefficients."""
    s = Summary.model_validate(raw)
    shipped = json.loads((REPO / "opsd_diag" / "data" / "predictor_v2.json").read_text())
    p = prediction.predict(s, {"self_full"}, True)
    assert p.rows
    for r in p.rows:
        m = shipped["models"][r.tier]["d_pass1"]
        assert r.gain == pytest.approx(_reference(m, _raw_features(raw, r.config, r.method)), abs=1e-12)
        assert {f for f, _, _ in r.contributions} == set(m["features"])


def test_predictions_equal_a_float64_loop_over_the_coefficients(raw, cal_file):
    s = Summary.model_validate(raw)
    model = model_file()
    p = prediction.predict(s, {"self_full"}, True, cal_file)
    assert {(r.config, r.method) for r in p.rows} == {("teacher", m) for m in ("opd", "jsd", "opd2", "exopd")} | {
        ("self_full", "opsd_opd"), ("self_full", "opsd_jsd")}
    for r in p.rows:
        x = _raw_features(raw, r.config, r.method)
        tier = "v2" if not math.isnan(x["lookahead_dv"]) else "v2_no_lookahead"
        assert r.tier == tier
        ms = model["models"][tier]
        gain = _reference(ms["d_pass1"], x)
        assert r.gain == pytest.approx(gain, abs=1e-12)
        lo, hi = (gain + b for b in ms["d_pass1"]["residual_band"])
        assert (r.lo, r.hi) == pytest.approx((lo, hi), abs=1e-12)
        assert r.verdict == ("helps" if lo > 0.02 else "hurts" if hi < -0.02 else "unclear")
        assert r.pass4 == pytest.approx(_reference(ms["d_pass4"], x), abs=1e-12)
        assert r.forgetting == pytest.approx(_reference(ms["d_regression"], x), abs=1e-12)
        kl = _reference(ms["kl_to_initial"], x)
        assert r.drift == pytest.approx(max(0.0, kl), abs=1e-12)  # a KL: >= 0
        assert (r.drift_lo, r.drift_hi) == pytest.approx(  # its interval as the gain's, floored the same
            tuple(max(0.0, kl + b) for b in ms["kl_to_initial"]["residual_band"]), abs=1e-12)
        assert r.collapse == (gain > 0 and r.pass4 < 0)
        # contributions: one per feature, largest first, summing to the prediction
        assert sum(c for _, _, c in r.contributions) + r.intercept == pytest.approx(gain, abs=1e-12)
        assert [abs(c) for *_, c in r.contributions] == sorted((abs(c) for *_, c in r.contributions), reverse=True)
        top = next(c for c in r.contributions if c[2] != 0)
        assert f"{top[0]} {top[1]:+.3f} adds {top[2]:+.3f}" in r.why()
        assert r.imputed == tuple(f for f in ms["d_pass1"]["features"] if math.isnan(x[f]))
    frame = p.frame()
    assert list(frame.columns) == list(prediction.COLUMNS) and (frame["calibration"] == str(cal_file)).all()


def test_the_ranking_follows_the_predicted_gain(raw, cal_file):
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, cal_file)
    assert p.ranked_by == "predicted_gain" and [r.rank for r in p.rows] == list(range(1, len(p.rows) + 1))
    gains = [r.gain for r in p.rows]
    assert gains == sorted(gains, reverse=True)


def _edited(raw: dict, cal_path, **models) -> dict:
    """The calibration with every (tier, outcome) model's coefficients zeroed and intercepts set."""
    d = model_file()
    for tier in TIERS:
        for outcome, intercept in models.items():
            m = d["models"][tier][outcome]
            m["coef"], m["intercept"], m["residual_band"] = [0.0] * len(m["coef"]), intercept, [-0.01, 0.01]
    cal_path.write_text(json.dumps(d))
    return d


@pytest.mark.parametrize("gain, pass4, collapse", [(0.1, -0.05, True), (0.1, 0.05, False), (-0.1, -0.05, False)])
def test_collapse_flag(raw, tmp_path, gain, pass4, collapse):
    _edited(raw, tmp_path / "c.json", d_pass1=gain, d_pass4=pass4)
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, tmp_path / "c.json")
    assert all(r.collapse is collapse for r in p.rows)
    assert ("collapse risk" in prediction.panel(p)["effects"]) is collapse


def test_without_a_lookahead_every_row_uses_the_no_lookahead_tier(raw, cal_file):
    for edit in ({"status": "skipped", "reason": "skipped: no rollouts"}, None):
        r2 = copy.deepcopy(raw)
        r2["lookahead"] = edit
        p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, cal_file)
        assert {r.tier for r in p.rows} == {"v2_no_lookahead"}  # never v2 with every lookahead feature imputed
        assert not any(f.startswith("lookahead") for r in p.rows for f in r.imputed)
        assert "v2_no_lookahead on 6 row(s)" in prediction.panel(p)["tiers"]
    with_la = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, cal_file)
    assert {r.method for r in with_la.rows if r.tier == "v2"} == {"opd", "jsd", "opsd_opd", "opsd_jsd"}


def test_a_study_that_chose_the_no_lookahead_tier_applies_it_everywhere(raw, tmp_path):
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, False,
                           write(tmp_path / "c.json", choice="v2_no_lookahead"))
    assert {r.tier for r in p.rows} == {"v2_no_lookahead"}
    assert "opd2" not in {r.method for r in p.rows}  # no base: no OPD²


def test_when_the_study_chose_the_accuracy_gap_the_ranking_is_g(raw, tmp_path):
    r2 = copy.deepcopy(raw)
    r2["configs"]["self_full"]["teacher_minus_student_accuracy"] = {"estimate": 0.5, "lo": 0.2, "hi": 0.8, "n_prompts": 6}
    r2["configs"]["teacher"]["teacher_minus_student_accuracy"] = {"estimate": 0.1, "lo": -0.1, "hi": 0.3, "n_prompts": 6}
    s = Summary.model_validate(r2)
    p = prediction.predict(s, {"self_full"}, True, write(tmp_path / "c.json", choice="accuracy_gap"))
    assert p.ranked_by == "accuracy_gap"
    assert [r.config for r in p.rows] == ["self_full"] * 2 + ["teacher"] * 4
    for config in ("self_full", "teacher"):  # within a config (one G), v2's prediction orders the methods
        gains = [r.gain for r in p.rows if r.config == config]
        assert gains == sorted(gains, reverse=True)
    text = prediction.panel(p)
    assert "v2 lost to G" in text["ranking"] and "Ranked by the accuracy gap G" in text["ranking"]
    assert text["headline"].startswith(f"Recommended by the accuracy gap: self_full trained with {p.rows[0].method}")
    assert p.recommended(lambda c, sig: c != "self_full").config == "teacher"  # G > 0, the only trainable one
    assert "record" not in text  # the synthetic file has no checks record
    for cfg in r2["configs"].values():
        cfg["teacher_minus_student_accuracy"]["estimate"] = -0.1
    p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")
    assert p.recommended() is None and "nothing is recommended" in prediction.panel(p)["headline"]


def _gated(raw: dict, tmp_path, rule: str):
    """The run's predictions under a G-gated ranking ``rule``: self_full with G +0.3, every other config G -0.2."""
    r2 = copy.deepcopy(raw)
    for name, cfg in r2["configs"].items():
        gap = 0.3 if name == "self_full" else -0.2
        cfg["teacher_minus_student_accuracy"] = {"estimate": gap, "lo": gap - 0.1, "hi": gap + 0.1, "n_prompts": 6}
    data = model_file(choice="accuracy_gap")
    data["method_order"] = {"rule": rule, "look": 8}
    (tmp_path / "c.json").write_text(json.dumps(data))
    return prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")


def test_the_v2_gain_rule_ranks_by_v2_and_recommends_only_where_g_is_positive(raw, tmp_path):
    """Predictor v2's eighth look's first rule: the rows in order of v2's predicted gain; the recommendation is the
    best-ranked row with G > 0, whatever ranks above it."""
    p = _gated(raw, tmp_path, "v2_gain")
    gains = [r.gain for r in p.rows]
    assert gains == sorted(gains, reverse=True) and [r.rank for r in p.rows] == list(range(1, len(gains) + 1))
    rec = p.recommended()
    assert rec.config == "self_full" and rec is next(r for r in p.rows if r.accuracy_gap > 0)
    text = prediction.panel(p)
    assert text["ranking"].startswith("Ranked by predictor v2's predicted pass@1 change, recommended only where")
    assert text["headline"].startswith("Recommended by predictor v2 among configs with G > 0: self_full trained with")


def test_the_v2_config_rule_ranks_configs_by_their_mean_v2_gain_then_the_sign_of_g_order(raw, tmp_path):
    """Predictor v2's eighth look's rule as amended (shipped): configurations in order of the mean of v2's predicted
    gains over their methods (computed here by hand), within one a full-distribution loss first where G > 0 and last
    where G <= 0, then the gain; the recommendation the best-ranked row with G > 0."""
    p = _gated(raw, tmp_path, "v2_config")
    configs = list(dict.fromkeys(r.config for r in p.rows))
    mean = {c: sum(r.gain for r in p.rows if r.config == c) / sum(r.config == c for r in p.rows) for c in configs}
    assert configs == sorted(mean, key=lambda c: -mean[c]) and [r.config for r in p.rows] == sorted(
        (r.config for r in p.rows), key=configs.index)  # a config's rows stay together
    for config, full in (("self_full", "opsd_jsd"), ("teacher", "jsd")):
        rows = [r for r in p.rows if r.config == config]
        assert (rows[0].method == full) if config == "self_full" else (rows[-1].method == full)
    assert p.recommended().config == "self_full" and "mean of v2's predictions" in prediction.panel(p)["ranking"]


def test_a_v2_ranking_leads_with_the_evidence_of_the_look_that_chose_it_and_the_pooled_loss_comes_last(raw, tmp_path):
    """The panel must not recommend by v2 and then open with v2 losing to G: the ranking names the look that chose the
    rule in force (``method_order.look``, its record folded away under "looks"), its record on later worlds (the
    checks) is a paragraph of its own, and the first study's pooled loss opens the folded history."""
    _gated(raw, tmp_path, "v2_config")  # writes c.json
    data = json.loads((tmp_path / "c.json").read_text())
    data["later_looks"] = {"look8": {"summary": "look 8 (v2_config): +0.95 against +0.83: v2_config ships"},
                           "look9": {"summary": "look 9 (a verdict): the interval rule stays"}}
    data["checks"] = {"summary": "Checked as shipped on 2 worlds: +0.70."}
    (tmp_path / "c.json").write_text(json.dumps(data))
    r2 = copy.deepcopy(raw)
    for name, cfg in r2["configs"].items():
        gap = 0.3 if name == "self_full" else -0.2
        cfg["teacher_minus_student_accuracy"] = {"estimate": gap, "lo": gap - 0.1, "hi": gap + 0.1, "n_prompts": 6}
    text = prediction.panel(prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json"))
    ranking = text["ranking"]
    assert ranking.startswith("Ranked by predictor v2's predicted pass@1 change, recommended only where the accuracy "
                              "gap G > 0 (chosen by predictor v2's look 8, among the looks below).")
    assert "+0.95" not in ranking and "+0.95" in text["looks"]  # the record is quoted once, under "looks"
    assert text["record"] == "Checked as shipped on 2 worlds: +0.70." and "Checked" not in ranking
    p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")
    assert text["effects"] == prediction.effects_text(p.recommended())  # a file with no forgetting record
    data["checks"]["forgetting"] = "On 2 worlds checked, the forgetting column ranked a second skill at +0.40."
    (tmp_path / "c.json").write_text(json.dumps(data))  # the file's forgetting record follows the predicted effects
    p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")
    assert p.calibration.checks_forgetting == data["checks"]["forgetting"]
    assert prediction.panel(p)["effects"] == prediction.effects_text(p.recommended()) + " " + data["checks"][
        "forgetting"]
    assert "v2 lost to G" not in ranking and text["looks"].startswith("Alone, pooled over the first study's worlds, "
                                                                      "v2 lost to G: ")
    assert text["looks"].index("v2 lost to G") < text["looks"].index("2 later pre-registered looks")
    data["method_order"] = {"rule": "v2_config"}  # a file that names no look: no record is quoted
    (tmp_path / "c.json").write_text(json.dumps(data))
    text = prediction.panel(prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json"))
    assert text["ranking"].startswith("Ranked by predictor v2's predicted pass@1 change, recommended only where the "
                                      "accuracy gap G > 0. Configs go by")


@pytest.mark.parametrize("gap", [0.4, -0.3])
def test_the_sign_of_g_method_order_puts_jsd_first_where_g_is_positive_and_last_elsewhere(raw, tmp_path, gap):
    r2 = copy.deepcopy(raw)
    for cfg in r2["configs"].values():
        cfg["teacher_minus_student_accuracy"] = {"estimate": gap, "lo": gap - 0.1, "hi": gap + 0.1, "n_prompts": 6}
    r2["configs"]["teacher"]["teacher_minus_student_accuracy"]["estimate"] = gap - 0.05  # below self_full
    data = model_file(choice="accuracy_gap")
    data["method_order"] = {"rule": "sign_of_g", "look": 5}
    (tmp_path / "c.json").write_text(json.dumps(data))
    p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")
    assert p.calibration.method_order == "sign_of_g"
    assert [r.config for r in p.rows] == ["self_full"] * 2 + ["teacher"] * 4  # G still ranks the configs
    for config, full in (("self_full", "opsd_jsd"), ("teacher", "jsd")):
        rows = [r for r in p.rows if r.config == config]
        assert (rows[0].method == full) if gap > 0 else (rows[-1].method == full)
        sampled = [r.gain for r in rows if r.method != full]
        assert sampled == sorted(sampled, reverse=True)  # then v2's prediction, as before
    assert "full-distribution loss (jsd) ranks above" in prediction.panel(p)["ranking"]
    assert "record" not in prediction.panel(p)  # a file without checks quotes none
    data["checks"] = {"summary": "Checked as shipped on 2 worlds: +0.50."}  # report_checks.py's record
    (tmp_path / "c.json").write_text(json.dumps(data))
    p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")
    assert prediction.panel(p)["ranking"].endswith("then v2's prediction, shown as secondary evidence.")
    assert prediction.panel(p)["record"] == "Checked as shipped on 2 worlds: +0.50."
    data["method_order"] = {"rule": "by_name"}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(OpsdError, match="method_order 'by_name' is none of"):
        prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "bad.json")


@pytest.mark.parametrize("gaps", [(0.4, 0.3), (-0.3, -0.35), (0.1, -0.2)])
def test_the_g_scaled_ranking_counts_half_of_g_for_a_sampled_token_loss(raw, tmp_path, gaps):
    r2 = copy.deepcopy(raw)
    for cfg, gap in zip(("self_full", "teacher"), gaps):
        r2["configs"][cfg]["teacher_minus_student_accuracy"] = {"estimate": gap, "lo": gap - 0.1, "hi": gap + 0.1,
                                                                "n_prompts": 6}
    data = model_file(choice="accuracy_gap")
    data["method_order"] = {"rule": "g_scaled", "sampled_scale": 0.5, "look": 7}
    (tmp_path / "c.json").write_text(json.dumps(data))
    p = prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "c.json")
    assert (p.calibration.method_order, p.calibration.sampled_scale) == ("g_scaled", 0.5)

    def score(r):  # the reference: explicit, per row
        return r.accuracy_gap * (1.0 if r.method in ("jsd", "opsd_jsd") else 0.5)
    ranked = [score(r) for r in p.rows]
    assert ranked == sorted(ranked, reverse=True) and len(p.rows) == 6
    for i in range(len(p.rows) - 1):  # equal scores: G, then the method order, then v2's prediction
        a, b = p.rows[i], p.rows[i + 1]
        if score(a) == score(b) and a.accuracy_gap == b.accuracy_gap and a.method != "jsd" and b.method != "jsd":
            assert a.gain >= b.gain
    assert "counts 0.5 of its config's G" in prediction.panel(p)["ranking"]
    data["method_order"]["sampled_scale"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(OpsdError, match="sampled_scale 1.5 is not in"):
        prediction.predict(Summary.model_validate(r2), {"self_full"}, True, tmp_path / "bad.json")


def test_scaled_gap_against_its_definition():
    from opsd_diag.core.predictor import scaled_gap
    for method in LOSS:
        full = method in ("jsd", "opsd_jsd")
        for g in (-0.4, 0.0, 0.3):
            assert scaled_gap(method, g, 0.25) == (g if full else 0.25 * g)
        assert math.isnan(scaled_gap(method, math.nan, 0.5))


def test_method_term_against_its_definition():
    from opsd_diag.core.predictor import method_term
    for method in LOSS:
        full = method in ("jsd", "opsd_jsd")
        assert method_term(method, 0.2) == (1.0 if full else 0.0)
        assert method_term(method, 0.0) == (-1.0 if full else 0.0)  # G <= 0: the larger step does more damage
        assert method_term(method, -0.2) == (-1.0 if full else 0.0)
        assert method_term(method, math.nan) == 0.0


def test_recommendation_needs_a_helps_verdict(raw, tmp_path):
    _edited(raw, tmp_path / "c.json", d_pass1=0.0)
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, tmp_path / "c.json")
    assert p.recommended() is None and {r.verdict for r in p.rows} == {"unclear"}
    assert prediction.panel(p)["headline"].startswith("No (config, method) is predicted to help")
    _edited(raw, tmp_path / "c.json", d_pass1=0.1)
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, tmp_path / "c.json")
    assert p.recommended() is p.rows[0] and "helps" in prediction.panel(p)["headline"]


def test_a_bad_calibration_file_is_one_error(raw, tmp_path):
    s = Summary.model_validate(raw)
    with pytest.raises(OpsdError, match="cannot read the calibration file"):
        prediction.predict(s, (), True, tmp_path / "missing.json")
    bad = model_file()
    del bad["models"]["v2"]["d_pass4"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(OpsdError, match="not a predictor v2 model file"):
        prediction.predict(s, (), True, tmp_path / "bad.json")
    (tmp_path / "v1.json").write_text(json.dumps({**model_file(), "version": 1}))
    with pytest.raises(OpsdError, match="version"):
        prediction.predict(s, (), True, tmp_path / "v1.json")


def test_the_shipped_file_loads_when_present():
    cal = prediction.load()
    if cal is None:
        pytest.skip("no opsd_diag/data/predictor_v2.json in this checkout yet (report_v2.py writes it)")
    assert cal.source == "shipped" and cal.choice in CHOICES
    assert set(cal.models) >= set(TIERS)


@pytest.fixture()
def shipped(monkeypatch):
    """A synthetic model file in the place of the shipped one (the real one is the study's to write)."""
    d = model_file(studies={"toy_world": {"n_rows": 22, "where": "trained rows of the bundled toy world",
                                          "score_rho": None, "baseline": "accuracy_gap", "baseline_rho": None,
                                          "difference": None, "better": False, "advantage_rho": None,
                                          "accuracy": {}, "by_verdict": {"helps": {"improves": 2}}},
                            "outcome_worlds": None})
    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: json.dumps(d))
    return d


def test_the_run_predicts_and_joins_v2_to_the_v1_verdicts(tiny_run, cal_file):
    run = Run.load(tiny_run)
    p = run.predictions(cal_file)
    ref = prediction.predict(run.summary, {"self_full"}, True, cal_file)
    assert [(r.config, r.method, r.gain) for r in p.rows] == [(r.config, r.method, r.gain) for r in ref.rows]
    v = run.verdicts(cal_file)
    assert list(v.columns[:6]) == ["rank", "config", "signal", "verdict", "score", "reason"]  # v1 first, its order
    assert list(v["rank"]) == list(range(1, len(v) + 1))
    for row in v.itertuples():
        match = [r for r in p.rows if (r.config, r.signal) == (row.config, row.signal)]
        if match:
            assert (row.v2_method, row.v2_rank) == (match[0].method, match[0].rank)
            assert row.v2_predicted_gain == match[0].gain and row.v2_verdict == match[0].verdict
        else:
            no_method = row.signal in ("rev_kl", "fwd_kl") or (row.config, row.signal) in (("self_full", "a_d2"),
                                                                                          ("self_full", "a_ex"))
            assert no_method and math.isnan(row.v2_predicted_gain)


def test_without_a_model_file_nothing_is_predicted(tiny_run, monkeypatch):
    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: None)
    run = Run.load(tiny_run)
    assert run.predictions() is None and "v2_method" not in run.verdicts().columns
    assert "predictions" not in run.table_names()


def test_a_failure_check_on_the_recommended_config_is_a_caution_beside_it(tiny_run, shipped):
    """Without the answer guard a caution (``checks.cautions``) for the recommended config goes right under the
    headline in every report and the terminal's closing line points to it; one for another config is not shown."""
    from opsd_diag.report.terminal import decision_line, prediction_text

    import dataclasses

    p = Run.load(tiny_run).predictions()
    assert p.calibration.recommendation == "best"  # the synthetic model file names no rule
    rows = [dataclasses.replace(r, accuracy_gap=0.3 if i == 0 else -0.1, verdict="helps" if i == 0 else "unclear")
            for i, r in enumerate(p.rows)]
    p = dataclasses.replace(p, rows=rows, cautions={})  # the first row recommended, whatever the tiny run's gaps
    rec = p.recommended()
    assert rec is rows[0]
    other = next(r.config for r in p.rows if r.config != rec.config)
    assert "caution" not in prediction.panel(dataclasses.replace(p, cautions={other: "not this one"}))
    flagged = dataclasses.replace(p, cautions={rec.config: "this one"})
    assert flagged.recommended() is rec and prediction.panel(flagged)["caution"] == "Caution: this one."
    lines = prediction_text(flagged).splitlines()
    assert lines[lines.index(prediction.panel(p)["headline"] + ".") + 1] == "Caution: this one."
    assert decision_line(flagged).endswith("secondary evidence. A failure check bears on it: see the caution there.")
    assert decision_line(p).endswith("secondary evidence.")


def test_the_answer_guard_passes_over_a_flagged_config_and_says_so(tiny_run, shipped, tmp_path):
    """Under a model file whose recommendation rule is answer_guard (the seventeenth look), the recommendation is
    the best-ranked row with G > 0 whose config no failure check flags, in every report, the Train button and
    ``opsd-train --from-diagnosis`` alike; the panel names the row passed over and why. The ranking is unchanged."""
    import dataclasses

    from opsd_diag.report.terminal import prediction_text

    p = Run.load(tiny_run).predictions()
    cal = dataclasses.replace(p.calibration, recommendation="answer_guard")
    rows = [dataclasses.replace(r, accuracy_gap=0.3 - 0.01 * i, verdict="helps") for i, r in enumerate(p.rows)]
    first = rows[0]
    spared = next(r for r in rows if r.config != first.config)
    guarded = dataclasses.replace(p, rows=rows, calibration=cal, cautions={first.config: "it is flagged"})
    assert guarded.recommended() is spared and guarded.recommended(guarded=False) is first
    assert guarded.frame().equals(dataclasses.replace(guarded, cautions={}).frame())  # the ranking as it was
    text = prediction.panel(guarded)
    assert text["caution"] == (f"Passed over: {first.config} with {first.method} ranks above it, but it is flagged; "
                               "the recommendation skips such a config (the seventeenth look, docs/verdict.md).")
    assert f": {spared.config} trained with {spared.method}" in text["headline"]
    assert text["caution"] in prediction_text(guarded)
    # every config flagged: nothing is recommended
    everyone = dataclasses.replace(guarded, cautions={r.config: "flagged" for r in rows})
    assert everyone.recommended() is None
    assert prediction.panel(everyone)["headline"].endswith("is flagged by a failure check: nothing is recommended")
    assert prediction.panel(everyone)["caution"].startswith(f"Passed over: {first.config} with {first.method} ranks "
                                                            "first, but flagged;")
    # the rule is read from the model file, and a file naming an unknown rule is refused
    assert prediction.load(write(tmp_path / "g.json", recommendation={"rule": "answer_guard", "look": 17})
                           ).recommendation == "answer_guard"
    with pytest.raises(OpsdError, match="recommendation 'first' is none of best, answer_guard"):
        prediction.load(write(tmp_path / "bad.json", recommendation={"rule": "first"}))


def test_report_html_and_export_show_the_decision(tiny_run, shipped, tmp_path, capsys, monkeypatch):
    from opsd_diag import cli

    from opsd_diag import checks

    run = Run.load(tiny_run)
    p = run.predictions()
    assert p.cautions == checks.cautions(run.failure_checks())  # what the failure checks say, read by the panel
    text = prediction.panel(p)
    html = run.report_html(n_heatmaps=0)
    assert "Decision (predictor v2)" in html and "secondary evidence" in html
    assert html.index("Decision (predictor v2)") < html.index("Verdict (v1 rule")
    import html as h
    assert h.escape(text["headline"]) in html and h.escape(text["calibration"]) in html
    assert "predictions" in run.table_names()
    assert run.export_table("predictions").equals(p.frame())
    cli._print_report(tiny_run)
    out = capsys.readouterr().out
    assert "decision (predictor v2):" in out and text["headline"] in out and "Calibration: shipped" in out
    assert out.index("decision (predictor v2)") < out.index("v1 verdicts, ranked")
    assert out.rstrip("\n").splitlines()[-1] == (  # a terminal shows the end: v2's call, not the v1 rule's
        f"in short: {text['headline']}. Why, and how sure: 'decision (predictor v2)' above; the v1 rule's pick is "
        "secondary evidence." + (" A failure check bears on it: see the caution there." if "caution" in text else ""))
    assert "recommended:" not in out  # one recommendation: the v1 rule's row is its pick
    looks = {"look2": {"summary": "look 2 (a rule): on the new world w +0.1: G stays"}}
    cal = write(tmp_path / "g.json", choice="accuracy_gap", later_looks=looks)
    assert cli.main(["report", str(tiny_run), "--calibration", str(cal)]) == 0
    out = capsys.readouterr().out
    assert "v2 lost to G" in out and f"Calibration: {cal}" in out
    looks_line = "1 later pre-registered look, each judged on a world built after its plan:\n- look 2 (a rule): on"
    assert out.index(f"Calibration: {cal}") < out.index("how the rule in force was chosen:") < out.index(looks_line)
    assert "\n- look 2 (a rule): on the new world w +0.1: G stays.\n" in out  # the history last, a look a line
    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: cal.read_text())
    html = Run.load(tiny_run).report_html(n_heatmaps=0)
    assert ("<details><summary>How the rule in force was chosen</summary><p>"
            + "<br>".join(map(h.escape, looks_line.split("\n")))) in html


def test_the_decision_quotes_the_studies_from_the_package_file(shipped):
    from opsd_diag import decision

    assert decision.studies() == {"toy_world": shipped["studies"]["toy_world"], "outcome_worlds": None}
    assert decision.validity() == shipped["studies"]["toy_world"]
    assert "2 helps verdicts: improves 2" in decision.validity_text(decision.validity(), "helps")
    assert "not in this installation" in decision.validity_text(decision.studies()["outcome_worlds"], "helps")
    assert decision.validity(REPO / "benchmarks" / "validity" / "validity_analysis.json")["where"] == "trained rows of the bundled toy world"  # by path


def test_drift_is_floored_at_zero(raw, tmp_path):
    _edited(raw, tmp_path / "c.json", kl_to_initial=-0.5)  # a linear model of a KL can go below 0
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, tmp_path / "c.json")
    assert {r.drift for r in p.rows} == {0.0}
    _edited(raw, tmp_path / "c.json", kl_to_initial=0.25)
    p = prediction.predict(Summary.model_validate(raw), {"self_full"}, True, tmp_path / "c.json")
    assert {r.drift for r in p.rows} == {0.25}


def test_a_log_target_drift_model_is_exponentiated_and_its_interval_is_a_factor(raw, tmp_path):
    """A model marked ``target: log`` (the thirteenth look's drift) predicts ln of its outcome: the product shows exp
    of the float64 reference, positive however low the log goes, and ``core.predictor.interval`` gives exp of the
    prediction plus each end of the band; a target that is neither raw nor log is one error."""
    from opsd_diag.core import predictor

    d = model_file()
    for tier in TIERS:
        d["models"][tier]["kl_to_initial"].update(target="log", intercept=-9.0)  # exp: about 1e-4, never floored
    (tmp_path / "c.json").write_text(json.dumps(d))
    s = Summary.model_validate(raw)
    for r in prediction.predict(s, {"self_full"}, True, tmp_path / "c.json").rows:
        x, m = _raw_features(raw, r.config, r.method), d["models"][r.tier]["kl_to_initial"]
        assert r.drift == pytest.approx(math.exp(_reference(m, x)), rel=1e-12) and 0 < r.drift < 1e-2
        assert (r.drift_lo, r.drift_hi) == pytest.approx(  # a factor either way: exp of the band's ends added
            tuple(math.exp(_reference(m, x) + b) for b in m["residual_band"]), rel=1e-12)
        assert f"drift KL(trained || initial) {r.drift:.3g} per token (95%: {r.drift_lo:.3g} to {r.drift_hi:.3g})" \
            in prediction.effects_text(r)  # significant digits: a small drift is not shown as 0.000
        assert "drift KL(trained || initial) 0.000 " not in prediction.effects_text(r)
        X = np.array([[x[f] for f in m["features"]]])
        lo, hi = m["residual_band"]
        assert [float(v[0]) for v in predictor.interval(m, X)] == pytest.approx(
            [math.exp(_reference(m, x) + b) for b in (0.0, lo, hi)], rel=1e-12)
        raw_m = {**m, "target": "raw"}
        assert [float(v[0]) for v in predictor.interval(raw_m, X)] == pytest.approx(
            [_reference(m, x) + b for b in (0.0, lo, hi)], abs=1e-12)
    d["models"]["v2"]["kl_to_initial"]["target"] = "sqrt"
    (tmp_path / "c.json").write_text(json.dumps(d))
    with pytest.raises(OpsdError, match="target 'sqrt'"):
        prediction.predict(s, (), True, tmp_path / "c.json")


def test_a_lookahead_with_other_steps_than_the_study_is_warned():
    from dataclasses import replace as dc_replace
    from types import SimpleNamespace

    from opsd_diag.summary import Lookahead

    cal = dc_replace(prediction.load(), lookahead_settings={"steps": 4, "rollouts_per_step": 8, "learning_rate": 3e-4})
    same = SimpleNamespace(lookahead=Lookahead(status="ok", settings={"steps": 4, "rollouts_per_step": 8,
                                                                       "learning_rate": 3e-4, "seed": 0}))
    other = SimpleNamespace(lookahead=Lookahead(status="ok", settings={"steps": 4, "rollouts_per_step": 8,
                                                                        "learning_rate": 1e-5}))
    assert prediction.settings_note(same, cal) == ""
    assert prediction.settings_note(SimpleNamespace(lookahead=None), cal) == ""
    note = prediction.settings_note(other, cal)
    assert "learning_rate 1e-05" in note and "learning_rate 0.0003" in note and "outside what v2 was fitted on" in note


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:Degrees of freedom")  # the all-NaN column's SD
def test_the_fitted_range_and_what_lies_outside_it_match_explicit_loops():
    """core.predictor.fitted_range / outside against a float64 loop over rows and columns (NaN: no value)."""
    from opsd_diag.core import predictor

    rng = np.random.default_rng(7)
    X = rng.normal(size=(9, 4))
    X[rng.random(X.shape) < 0.3] = np.nan
    X[:, 3] = np.nan  # a column with no value: no range, never outside
    m = predictor.fit(X, rng.normal(size=9), ["a", "b", "c", "d"], 1.0)
    for j in range(4):
        vals = [float(X[i, j]) for i in range(9) if not math.isnan(X[i, j])]
        assert m["range"][0][j] == (min(vals) if vals else None) and m["range"][1][j] == (max(vals) if vals else None)
    Q = rng.normal(scale=2.0, size=(6, 4))
    Q[0, 0] = np.nan
    got = predictor.outside(m, Q)
    for i in range(6):
        for j in range(4):
            lo, hi = m["range"][0][j], m["range"][1][j]
            want = not math.isnan(Q[i, j]) and lo is not None and not lo <= Q[i, j] <= hi
            assert bool(got[i, j]) == want
    assert not predictor.outside({k: v for k, v in m.items() if k != "range"}, Q).any()  # a file from before ranges
    assert not predictor.outside(m, X).any()  # the fitting rows lie inside it


def test_a_row_outside_the_fitted_range_is_flagged_in_its_column_its_why_and_the_panel(raw, tmp_path):
    """A feature beyond the range the model was fitted on is named per row (outside_range, why) and counted in
    the panel's tiers line; inside the range, or with a file without ranges, nothing is flagged."""
    d = model_file()
    s = Summary.model_validate(raw)
    inside = prediction.predict(s, {"self_full"}, True, write(tmp_path / "in.json"))
    for tier in d["models"].values():
        for m in tier.values():
            m["range"] = [[-1e9] * len(m["features"]), [1e9] * len(m["features"])]
    (tmp_path / "wide.json").write_text(json.dumps(d))
    wide = prediction.predict(s, {"self_full"}, True, tmp_path / "wide.json")
    assert not any(r.outside for r in wide.rows) and "outside the range" not in prediction.panel(wide)["tiers"]
    for tier in d["models"].values():
        for m in tier.values():
            j = m["features"].index("accuracy_gap")
            m["range"][0][j] = m["range"][1][j] = 5.0  # no real gap lies there
    (tmp_path / "narrow.json").write_text(json.dumps(d))
    p = prediction.predict(s, {"self_full"}, True, tmp_path / "narrow.json")
    assert all(r.outside == ("accuracy_gap",) for r in p.rows if not math.isnan(r.accuracy_gap))
    frame = p.frame()
    assert (frame["outside_range"] == "accuracy_gap").sum() == sum(bool(r.outside) for r in p.rows) > 0
    assert all("outside the study's range: accuracy_gap" in w for w in frame["why"][frame["outside_range"] != ""])
    n = sum(bool(r.outside) for r in p.rows)
    far = next(r for r in p.rows if r.outside)
    why = prediction.contribution_frame(p, far.config, far.method).set_index("feature")
    assert why.loc["accuracy_gap", "outside"] and why.loc["accuracy_gap", ["study_min", "study_max"]].tolist() == [5, 5]
    assert not why.drop(index="accuracy_gap")["outside"].any()
    assert f"{n} of {len(p.rows)} row(s) have features outside the range" in prediction.panel(p)["tiers"]
    assert [(r.config, r.method, r.gain) for r in p.rows] == [(r.config, r.method, r.gain) for r in inside.rows]
    for tier in d["models"].values():
        for m in tier.values():
            m["range"] = [[0.0], [1.0]]  # not one bound per feature
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(OpsdError, match="has a range that is not"):
        prediction.load(tmp_path / "bad.json")


def test_the_shipped_models_carry_the_range_of_the_rows_they_were_fitted_on():
    """model_range.py wrote each shipped model's range from the committed rows of the seven worlds (after checking
    that they reproduce the stored means and SDs), and the file holds what it would write now."""
    from benchmarks.validity.v2 import model_range

    assert model_range.main(["--check"]) == 0
    cal = prediction.load()
    assert all(len(m["range"][0]) == len(m["features"]) for t in cal.models.values() for m in t.values())
