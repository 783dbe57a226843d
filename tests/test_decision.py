"""The decision panel's library side (``opsd_diag.decision``) against explicit loops over a real summary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from opsd_diag import decision
from opsd_diag.summary import Summary

VALIDITY = Path(__file__).resolve().parents[1] / "benchmarks" / "validity" / "validity_analysis.json"
WORLDS = VALIDITY.parent / "worlds" / "worlds_analysis.json"  # the studies the package file carries

GOLDEN = Path(__file__).resolve().parent / "golden" / "summary.json"


def _summary(changes: dict | None = None) -> Summary:
    raw = json.loads(GOLDEN.read_text())
    for (config, signal), verdict in (changes or {}).items():
        raw["verdicts"][config][signal]["verdict"] = verdict
        for r in raw["ranking"]:
            if (r["config"], r["signal"]) == (config, signal):
                r["verdict"] = verdict
    return Summary.model_validate(raw)


def test_no_helps_row_recommends_nothing_but_names_the_leader():
    s = _summary()
    assert all(r.verdict != "helps" for r in s.ranking)  # the golden run has no helps verdict
    d = decision.decide(s)
    assert d.recommended is None and (d.leader.config, d.leader.signal) == (s.ranking[0].config, s.ranking[0].signal)
    assert d.runner_up.config != d.leader.config
    first_other = next(r for r in s.ranking if r.config != d.leader.config)
    assert (d.runner_up.config, d.runner_up.signal) == (first_other.config, first_other.signal)


def test_recommendation_interval_separability_ties_and_baselines():
    s = _summary({("teacher", "jsd"): "helps"})
    d = decision.decide(s)
    assert (d.recommended.config, d.recommended.signal) == ("teacher", "jsd")
    g = s.ideal.configs["teacher"].gain["jsd"]["all"]
    assert d.recommended.score == pytest.approx(s.verdicts["teacher"]["jsd"].score)
    assert (d.recommended.lo, d.recommended.hi) == pytest.approx((g.lo, g.hi))
    runner = next(r for r in s.ranking if r.config != "teacher")
    rg = s.ideal.configs[runner.config].gain[runner.signal]["all"]
    assert d.separable == (g.lo > rg.hi)
    for config in s.configs:  # the spread of each config's scores, by a plain loop
        scores = [r.score for r in s.ranking if r.config == config and r.score is not None]
        assert d.tied_within[config] == pytest.approx(max(scores) - min(scores), abs=1e-12)
    gaps = {c: e.teacher_minus_student_accuracy.estimate for c, e in s.configs.items()}
    assert d.by_accuracy_gap == (max(gaps, key=gaps.get), pytest.approx(max(gaps.values())))
    adv = {}
    for c, node in s.ideal.configs.items():
        inc = node.teacher_advantage["incorrect"]
        adv[c] = (inc if inc.n_prompts >= 5 else node.teacher_advantage["all"]).estimate
    assert d.by_advantage == (max(adv, key=adv.get), pytest.approx(max(adv.values())))


def test_validity_is_read_from_the_committed_analysis():
    raw = json.loads(VALIDITY.read_text())
    v = decision.validity(VALIDITY)  # by path, as the study scripts read it (the app: the package file)
    assert v["better"] == raw["comparison"]["better"] and v["baseline"] == raw["comparison"]["best_baseline"]
    text = decision.validity_text(v, "helps")
    table = raw["verdict_accuracy"]["table"]["helps"]
    assert f"{sum(table.values())} helps verdicts" in text
    assert ("no better than" in text) == (not raw["comparison"]["better"])
    assert f"{raw['comparison']['primary_rho']['estimate']:+.2f}" in text
    assert "not in this installation" in decision.validity_text(decision.validity("/nonexistent.json"), "helps")


def test_the_worlds_study_is_quoted_by_its_pooled_findings(tmp_path):
    pooled = json.loads(WORLDS.read_text())["pooled"]
    v = decision.validity(WORLDS)
    assert v["n_rows"] == pooled["comparison"]["primary_rho"]["n_rows"] and v["baseline"] == pooled["comparison"]["best_baseline"]
    text = decision.validity_text(v, "hurts")
    assert f"{len(pooled['worlds'])} outcome worlds pooled" in text
    assert f"{sum(pooled['verdict_accuracy']['table']['hurts'].values())} hurts verdicts" in text
    assert f"{pooled['comparison']['best_baseline_rho']['estimate']:+.2f}" in text
    assert ("no better than" in text) == (not pooled["comparison"]["better"])
    broken = tmp_path / "worlds_analysis.json"
    broken.write_text(json.dumps({"pooled": {"worlds": "x"}}))
    assert decision.validity(broken) is None


def test_row_interval_text_handles_missing_numbers():
    assert decision.Row(1, "c", "s", "unclear", math.nan, math.nan, math.nan).interval() == "n/a"
    assert decision.Row(1, "c", "s", "helps", 0.1, 0.05, 0.2).interval() == "+0.100 [+0.050, +0.200]"


def test_only_a_trainable_row_is_recommended():
    s = _summary({("self_full_solution", "a_d2"): "helps", ("teacher", "jsd"): "helps"})
    r = decision.decide(s).recommended  # ranked first of the two, but no method trains OPD² on a self-teacher
    assert (r.config, r.signal) == ("self_full_solution", "a_d2")
    d = decision.decide(s, lambda config, signal: not (config.startswith("self") and signal in ("a_d2", "a_ex")))
    assert (d.recommended.config, d.recommended.signal) == ("teacher", "jsd")


def test_the_package_file_carries_the_committed_studies():
    """The panel quotes the studies from the package's model file (an installed wheel has no benchmarks/): the
    figures the study script copied there are those of the committed analyses."""
    from opsd_diag import prediction

    if prediction.load() is None:
        pytest.skip("no opsd_diag/data/predictor_v2.json in this checkout yet (report_v2.py writes it)")
    carried = decision.studies()
    for key, path in (("toy_world", VALIDITY), ("outcome_worlds", WORLDS)):
        want = decision.validity(path)
        got = carried[key]
        assert (got["n_rows"], got["where"], got["baseline"], got["better"]) == (
            want["n_rows"], want["where"], want["baseline"], want["better"])
        assert got["score_rho"]["estimate"] == pytest.approx(want["score_rho"]["estimate"])
        assert decision.validity_text(got, "helps") == decision.validity_text(want, "helps")


def test_the_cli_text_says_what_the_apps_panel_says():
    """decision.text (``opsd-diag report``): the v1 rule's pick (not called a recommendation: the report's one
    recommendation is v2's) with its interval, the runner-up and separability, the baselines' picks, and each study's sentences; without a helps row, the verdict counts."""
    s = _summary({("teacher", "jsd"): "helps"})
    d = decision.decide(s)
    lines = decision.text(d).splitlines()[1:]  # after the blank line that separates it in the report
    assert lines[0] == "decision (v1 rule, secondary evidence):"
    assert lines[1] == f"the v1 rule's pick: teacher / jsd, helps, score {d.recommended.interval()}"
    r = d.runner_up
    assert lines[2].startswith(f"runner-up (best of another config): {r.config} / {r.signal}, {r.verdict}, "
                               f"score {r.interval()}: ")
    assert lines[2].endswith("not separable (the 95% intervals overlap)" if d.separable is False else
                             "separable (the 95% intervals do not overlap)" if d.separable else "interval is missing)")
    (gc, gv), (ac, av) = d.by_accuracy_gap, d.by_advantage
    assert lines[3] == f"cheap baselines pick: largest accuracy gap G: {gc} ({gv:+.3f}); largest teacher advantage A_T: {ac} ({av:+.3f})"
    assert lines[4:] == [decision.validity_text(v, "helps") for v in decision.studies().values()]
    none = decision.text(decision.decide(_summary())).splitlines()[1:]
    counts = [sum(x.verdict == v for x in _summary().ranking) for v in ("unclear", "hurts")]
    assert none[1] == f"no (config, signal) is predicted to help: {counts[0]} unclear, {counts[1]} hurts"
