"""Predictor v2's fifteenth look (plan_look15.yaml): its candidates are the verdicts the plan states, checked against an
explicit reference; each candidate's judged worlds are the plan's prefix; RESULTS_look15.md is exactly the render of
its committed analysis, the analysis is what the look's code computes again from the committed rows, it follows the
pre-registered ship rule, the plan and its amendment precede the analysis and the added worlds' builds and rows in git
history, and the package's model file records the look."""

from __future__ import annotations

import json
import math

import pytest

from compare import assert_tree_close
from git_history import assert_plan_first, first_added
from benchmarks.validity.v2 import report_look15
from benchmarks.validity.v2.looks import before_look
from benchmarks.validity.v2 import report_v2 as v2
from opsd_diag import prediction

HERE = report_look15.HERE
WORLDS = v2.REPO / "sample_data" / "worlds"
METHODS = ("opd", "opd2", "exopd", "opsd_opd", "jsd", "opsd_jsd")


def _analysis() -> dict:
    return json.loads((HERE / "look15_analysis.json").read_text())


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics, written out."""
    v = sorted(values)
    h = (len(v) - 1) * q
    lo = int(math.floor(h))
    return v[lo] if lo + 1 >= len(v) else v[lo] + (h - lo) * (v[lo + 1] - v[lo])


def test_the_candidates_are_the_plans_rules_spelled_out():
    """C: hurts at G <= -0.2 for jsd and opsd_jsd where the lookahead KL is at least the 0.6-quantile of the world's
    rows that have one; D: the same at a lookahead KL of at least 0.01; never helps; a missing G or lookahead unclear."""
    import random
    rng = random.Random(5)
    rows = []
    for world in ("w1", "w2"):
        for m in METHODS:
            for g in (-0.9, -0.2, -0.1999, 0.3, math.nan):
                kl = rng.choice([math.nan, 0.0, 0.004, 0.01, 0.02, 0.3, rng.random() / 10])
                rows.append({"world": world, "method": m, "accuracy_gap": g, "lookahead_kl": kl})
    floor = {w: _quantile([r["lookahead_kl"] for r in rows if r["world"] == w and not math.isnan(r["lookahead_kl"])],
                          0.6) for w in ("w1", "w2")}
    want = {"g_hurts_moved": [], "g_hurts_moved_abs": []}
    for r in rows:
        called = r["method"] in ("jsd", "opsd_jsd") and r["accuracy_gap"] <= -0.2  # NaN compares False
        kl = r["lookahead_kl"]
        want["g_hurts_moved"].append("hurts" if called and kl >= floor[r["world"]] else "unclear")
        want["g_hurts_moved_abs"].append("hurts" if called and kl >= 0.01 else "unclear")
    cands = report_look15.candidates()
    assert list(cands) == ["g_hurts_moved", "g_hurts_moved_abs"]
    for name, t in cands.items():
        assert report_look15.verdicts(rows, t) == want[name], name
    assert any(v == "hurts" for v in want["g_hurts_moved"]) and "unclear" in want["g_hurts_moved"]


def test_the_candidates_are_the_explorations_picks():
    text = (HERE / "explore_hurts_moved.txt").read_text()
    t = report_look15.candidates()
    assert f"relative: {t['g_hurts_moved']['lookahead_kl_quantile']} (" in text
    assert f"absolute: {t['g_hurts_moved_abs']['lookahead_kl_min']} (" in text


@pytest.mark.parametrize("calls, judged", [
    ({"a": 5, "b": 14, "c": 3, "d": 9}, ["a", "b", "c"]),   # reaches 20 at c (5 + 14 + 3 = 22)
    ({"a": 20, "b": 1}, ["a"]),
    ({"a": 3, "b": 4}, ["a", "b"]),                          # never reaches 20: all of them
    ({}, [])])
def test_a_candidate_is_judged_on_the_added_worlds_up_to_its_twentieth_call(calls, judged):
    rows = [{"world": w} for w, n in calls.items() for _ in range(n + 2)]
    said = [v for w, n in calls.items() for v in ["hurts"] * n + ["unclear"] * 2]
    assert report_look15.judged_worlds(rows, said, list(calls)) == judged


def test_results_are_the_render_of_the_committed_analysis():
    assert (HERE / "RESULTS_look15.md").read_text() == report_look15.render(_analysis())


def test_the_analysis_is_computed_again_from_the_committed_rows():
    again = json.loads(json.dumps(v2.stats_jsonable(report_look15.analyse(before_look(json.loads(v2.SHIPPED.read_text()), 15))),
                                  sort_keys=True))
    assert_tree_close(again, _analysis())  # floats within tolerance: CPUs round differently
    a = _analysis()
    assert len(a["seen"]) == 51 and not set(a["seen"]) & set(a["added_planned"])
    assert a["added_planned"] == ["agate", "cairn", "lapis", "zircon", "marble", "chalk", "pyrite", "galena"]
    assert set(a["added_built"]) <= set(a["added_planned"])
    for name, ws in a["judged_worlds"].items():
        assert ws == a["added_built"][:len(ws)], name


def _a(c: dict, d: dict, interval_unclear: float = 0.99) -> dict:
    """An analysis cut to what the ship rule reads."""
    def side(name, x):
        base = {"n_hurts": 25, "n_correct": 24, "hurts_precision": 0.96, "lo": 0.8, "hi": 0.99, "n_rows": 100,
                "unclear_share": 0.9}
        return {f"judged_{name}": {**base, **x}, "seen": {"hurts_precision": 0.96}}
    names = ["g_hurts_moved", "g_hurts_moved_abs"]
    return {"candidates": dict.fromkeys(names), "judged_worlds": dict.fromkeys(names, ["agate"]),
            "verdicts": {"g_hurts_moved": side(names[0], c), "g_hurts_moved_abs": side(names[1], d),
                         "interval": {f"judged_{n}": {"unclear_share": interval_unclear} for n in names}}}


@pytest.mark.parametrize("a, choice, decided", [
    (_a({}, {}), "g_hurts_moved", True),
    (_a({"hurts_precision": 0.89}, {}), "g_hurts_moved_abs", True),        # C fails on precision, D holds
    (_a({"hurts_precision": 0.89}, {"hurts_precision": 0.85}), "interval", True),
    (_a({"n_hurts": 19}, {}), "interval", False),                          # C too few calls: undecided, D not judged
    (_a({"hurts_precision": 0.8}, {"n_hurts": 12}), "interval", False),
    (_a({}, {}, interval_unclear=0.85), "interval", True)])                # not fewer unclear than the interval rule
def test_the_ship_rule_reads_every_condition_in_order(a, choice, decided):
    s = report_look15.ship(a)
    assert (s["choice"], s["decided"]) == (choice, decided)
    assert _analysis()["ship"] == report_look15.ship(_analysis())


def test_the_plan_and_its_amendment_were_committed_before_the_analysis_and_the_added_worlds():
    added = report_look15.plan()["added_worlds"]
    planned = [w for w, v in added.items() if isinstance(v, dict)]
    assert_plan_first(HERE, 15, planned, WORLDS)
    analysis = first_added(HERE, "look15_analysis.json")
    amendment = max(first_added(WORLDS, f"{w}.yaml") for w in planned)  # chalk, pyrite, galena: amendment 1's specs
    for w in planned:
        rows = first_added(HERE / "checks", f"{w}_analysis.json")
        assert rows is None or amendment <= rows, w
    assert analysis is None or amendment <= analysis


def test_the_package_file_records_the_look():
    a = _analysis()
    shipped = json.loads(v2.SHIPPED.read_text())
    assert shipped["later_looks"]["look15"] == report_look15.later_look(a)
    looks_text = prediction.panel(prediction.Predictions([], prediction.load(), "accuracy_gap"))["looks"]
    assert report_look15.later_look(a)["summary"] in looks_text  # the decision panel quotes the look
    assert a["ship"]["choice"] == "interval" and "verdict_rule" not in shipped  # nothing else in the file changed


def test_the_verdict_doc_and_readme_quote_the_committed_figures():
    a = _analysis()
    verdict = " ".join((v2.REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    section = verdict[verdict.index("#### The fifteenth look"):verdict.index("### The shipped model")]
    c, d = (a["verdicts"][n][f"judged_{n}"] for n in ("g_hurts_moved", "g_hurts_moved_abs"))
    b, c_all = a["verdicts"]["g_hurts"]["added"], a["verdicts"]["g_hurts_moved"]["added"]
    seen_b, seen_c = (a["verdicts"][n]["seen"]["hurts_precision"] for n in ("g_hurts", "g_hurts_moved"))
    for q in (f"picked two settings on the {len(a['seen'])} worlds seen by then",
              f"raised B's hurts precision there from {seen_b:.2f} to {seen_c:.2f}",
              f"judged them only on {len(a['added_built'])} worlds built after its plan".replace(" 8 ", " eight "),
              f"C was right on {c['n_correct']} of {c['n_hurts']} calls ({c['hurts_precision']:.3f}, the rule asked 0.90) "
              f"with {c['unclear_share']:.0%} `unclear`",
              f"D made {d['n_hurts']} calls over all eight worlds, {d['n_correct']} right",
              f"was right on {b['n_correct']} of its {b['n_hurts']} calls on the same eight worlds ({b['hurts_precision']:.2f}), "
              f"C on {c_all['n_correct']} of {c_all['n_hurts']} there", "The interval rule stays."):
        assert q in section, q
    assert len(a["added_built"]) == 8 and len(a["judged_worlds"]["g_hurts_moved_abs"]) == 8
    assert len(a["judged_worlds"]["g_hurts_moved"]) == 6 and "already too many wrong to reach 0.90 before 30" in section
    assert "reach 0.90 only at 30 calls or more" in a["ship"]["reason"] or "only at 30 calls" in report_look15.outcome(a)
    readme = " ".join((v2.REPO / "README.md").read_text(encoding="utf-8").split())
    assert (f"where the lookahead moved the student, {c['n_correct']} of {c['n_hurts']} on "
            f"{['no', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight'][len(a['judged_worlds']['g_hurts_moved'])]}"
            " new worlds") in readme
