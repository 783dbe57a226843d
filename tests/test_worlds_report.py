"""The study over outcome worlds: its statistics, its generated report and the driver end to end (issue 20).

- Statistics: ``analyze_worlds.combine`` on synthetic rows of three worlds against slow, explicit
  references (scipy ranks, the cluster bootstrap written out with lists and the same random draws,
  explicit counting), per world and pooled.
- Report: the committed RESULTS.md is exactly the render of its committed analysis JSON; without a
  committed result, the render of a synthetic analysis is checked against its expected structure.
- End to end (slow): two ``ci``-size worlds built into a temporary folder, the ``tiny`` plan of
  run_worlds.py against them plus a world the level rule excludes, then analysed and rendered, and
  the numbers recomputed from the stored evaluations.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.worlds import analyze_worlds as aw  # noqa: E402
from benchmarks.validity.worlds import report_worlds as rw  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

COMMITTED = REPO / "benchmarks" / "validity" / "worlds"
OUTCOMES = list(aw.OUTCOMES)
AN = run_worlds.load("default")["common"]["analysis"]
PREDICTORS = [p["name"] for p in AN["predictors"]]
KINDS = {p["name"]: p["kind"] for p in AN["predictors"]}
B = 40
# the slow bootstrap reference is run on these (predictor, outcome) pairs; every estimate is checked
SLOW = {*((p, 'd_pass1') for p in PREDICTORS), *((p, o) for p in ('score', 'teachability', 'verdict') for o in OUTCOMES)}


# ------------------------------------------------------------------------------------ synthetic worlds

def _ci(est, reps):
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return {"estimate": float(est), "lo": float(lo), "hi": float(hi)}


def synthetic(seed: int = 0):
    """Three analysed worlds (4 configurations x 2 methods + an sft row; undefined predictors in some
    rows; verdict ties), one excluded and one not run: (an, worlds, data) as analyse_worlds passes them."""
    rng = np.random.default_rng(seed)
    an = {**AN, "bootstrap": B}
    worlds, data = {}, {}
    for index, name in enumerate(["capacity", "style", "forgetting"]):
        rows, reps = [], {o: [] for o in OUTCOMES}
        for c in range(4):
            shared = {p: float(rng.normal()) for p in PREDICTORS}  # config-level values, as the gap is
            for m, sig in (("opd", "r_opd"), ("jsd", "jsd")):
                verdict = ["helps", "unclear", "hurts"][int(rng.integers(0, 3))]
                row = {"kind": "product", "config": f"c{c}", "method": m, "signal": sig, "verdict": verdict,
                       "verdict_value": stats.VERDICT_VALUE[verdict], "reason": "synthetic",
                       **{p: shared[p] for p in PREDICTORS if p not in ("verdict", "score")},
                       "score": float(rng.normal())}
                if name == "style":
                    row["teachability"] = math.nan  # undefined in a whole world: left out and counted
                if c == 0 and m == "jsd":
                    row["alignment"] = math.nan
                for o in OUTCOMES:
                    est = float(rng.normal(0, 0.05) + (0.04 * row["score"] if o == "d_pass1" else 0))
                    r = est + rng.normal(0, 0.02, size=B)
                    row[o] = _ci(est, r)
                    reps[o].append(r)
                row["realised"] = stats.realised_class(row["d_pass1"]["lo"], row["d_pass1"]["hi"])
                rows.append(row)
        ref = {"kind": "reference", "config": "demonstrations", "method": "sft", "signal": None,
               **{o: _ci(0.01, np.full(B, 0.01)) for o in OUTCOMES}, "realised": "improves"}
        rows.append(ref)
        init = {"estimate": 0.2, "lo": 0.1, "hi": 0.3}
        worlds[name] = {"status": "analysed", "note": "", "seconds": 100.0 + index, "level_selected": 2,
                        "level_gaps": {"1": 0.05, "2": 0.4}, "n_seeds": 2,
                        "initial": {"pass@1": init, "pass@4": init, "regression_pass@1": init, "n_test": 10,
                                    "n_regression": 5},
                        "timing": {"busy_s": 600.0, "wall_s": 0.0, "sessions": [],
                                   "jobs": {"training": {"n": 8, "mean_s": 20.0, "total_s": 160.0, "cpu_s": 100.0}}},
                        "regression_set": "test split, levels 1, 2"}
        data[name] = (rows, {o: np.array(v) for o, v in reps.items()}, index)
    worlds["rule_vs_instance"] = {"status": "excluded", "note": "no level where ... beat the student by 0.1",
                                  "seconds": None}
    worlds["diversity"] = {"status": "not run", "note": "no study directory", "seconds": None}
    return an, worlds, data


def slow_rho(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(np.corrcoef(sps.rankdata(x), sps.rankdata(y))[0, 1])


def slow_cluster_bootstrap(x, reps, clusters, seed, other=None):
    """Replicates of rho (or rho - rho(other)) with clusters drawn with replacement, written out with lists
    (the same draws as stats.spearman_bootstrap: rows with a non-finite predictor left out first)."""
    keep = [i for i in range(len(x)) if math.isfinite(x[i]) and (other is None or math.isfinite(other[i]))]
    labels = sorted({clusters[i] for i in keep})
    members = {c: [i for i in keep if clusters[i] == c] for c in labels}
    rng = np.random.default_rng(seed)
    out = []
    for b in range(reps.shape[1]):
        pick = rng.integers(0, len(labels), size=len(labels))
        rows = [i for j in pick for i in members[labels[j]]]
        r = slow_rho([x[i] for i in rows], [reps[i, b] for i in rows])
        if other is not None:
            r -= slow_rho([other[i] for i in rows], [reps[i, b] for i in rows])
        out.append(r)
    return np.array(out)


def _q(reps):
    reps = reps[np.isfinite(reps)]
    return tuple(np.quantile(reps, [0.025, 0.975])) if reps.size else (math.nan, math.nan)


def _close(got, want, tol=1e-9):
    if want is None or (isinstance(want, float) and math.isnan(want)):
        return got is None or (isinstance(got, float) and math.isnan(got))
    return got is not None and abs(got - want) <= tol


def _product(rows):
    return [r for r in rows if r["kind"] == "product"]


def _value(r, p):
    v = r["verdict_value"] if p == "verdict" else r[p]
    return math.nan if v is None else float(v)


# ------------------------------------------------------------------------------------ statistics

def test_pooled_and_per_world_statistics_match_slow_references():
    an, worlds, data = synthetic()
    res = aw.combine("default", "/synthetic", an, worlds, data)
    pooled_rows, pooled_reps, pooled_cl, world_reps = [], {o: [] for o in OUTCOMES}, [], {}
    for name, (rows, reps, index) in data.items():
        prod = _product(rows)
        cl = [r["config"] for r in prod]
        w = res["worlds"][name]
        assert w["n_rows"] == len(prod) == 8 and [r["kind"] for r in w["rows"]].count("reference") == 1
        world_reps[name] = {}
        for p in PREDICTORS:
            x = [_value(r, p) for r in prod]
            assert w["undefined"][p] == sum(not math.isfinite(v) for v in x)
            for o in OUTCOMES:
                y = [r[o]["estimate"] for r in prod]
                keep = [i for i in range(len(x)) if math.isfinite(x[i])]
                got = w["spearman"][p][o]
                assert _close(got["estimate"], slow_rho([x[i] for i in keep], [y[i] for i in keep]), 1e-12), (name, p, o)
                assert got["n_left_out"] == len(x) - len(keep)
                if (p, o) not in SLOW:
                    continue
                slow = slow_cluster_bootstrap(x, reps[o], cl, an["bootstrap_seed"] + index)
                world_reps[name][(p, o)] = slow
                lo, hi = _q(slow)
                assert _close(got["lo"], lo) and _close(got["hi"], hi), (name, p, o)
        # verdict accuracy: decisive verdicts against the d_pass1 interval, counted by hand
        decisive = [r for r in prod if r["verdict"] != "unclear"]
        right = [r for r in decisive if (r["verdict"] == "helps" and r["d_pass1"]["lo"] > 0)
                 or (r["verdict"] == "hurts" and r["d_pass1"]["hi"] < 0)]
        acc = w["verdict_accuracy"]
        assert (acc["n_decisive"], acc["n_correct"]) == (len(decisive), len(right))
        assert acc["unclear_share"] == pytest.approx(sum(r["verdict"] == "unclear" for r in prod) / len(prod))
        # disagreements: every pair of methods on one configuration with different realised classes
        want = {(r["config"], r["method"], s["method"]) for r in prod for s in prod
                if r["config"] == s["config"] and r["method"] < s["method"] and r["realised"] != s["realised"]}
        assert {(d["config"], *sorted(d["methods"])) for d in w["disagreements"]} == want
        # where wrong: the rows with the largest scaled rank error, oriented by the favourable sign
        for p in PREDICTORS:
            keep = [r for r in prod if math.isfinite(_value(r, p))]
            rho = w["spearman"][p]["d_pass1"]["estimate"]
            sign = -1.0 if KINDS[p] == "baseline" and rho is not None and rho < 0 else 1.0
            rp = (sps.rankdata([sign * _value(r, p) for r in keep]) - 1) / (len(keep) - 1)
            ro = (sps.rankdata([r["d_pass1"]["estimate"] for r in keep]) - 1) / (len(keep) - 1)
            err = sorted(((abs(a - b), a - b, r["config"], r["method"]) for a, b, r in zip(rp, ro, keep)),
                         key=lambda t: -t[0])
            got = w["wrong"][p]
            assert [e["rank_error"] for e in got] == pytest.approx([e[1] for e in err[:len(got)]])
            assert len(got) == min(3, sum(e[0] > 0 for e in err))
        pooled_rows += prod
        pooled_cl += [f"{name}/{c}" for c in cl]
        for o in OUTCOMES:
            pooled_reps[o].append(reps[o])
    reps = {o: np.concatenate(v) for o, v in pooled_reps.items()}
    p_res = res["pooled"]
    assert p_res["n_rows"] == 24 and p_res["n_configs"] == 12 and p_res["worlds"] == list(data)
    for p in PREDICTORS:
        x = [_value(r, p) for r in pooled_rows]
        for o in OUTCOMES:
            keep = [i for i in range(len(x)) if math.isfinite(x[i])]
            got = p_res["spearman"][p][o]
            assert _close(got["estimate"], slow_rho([x[i] for i in keep],
                                                    [pooled_rows[i][o]["estimate"] for i in keep]), 1e-12)
            defined = [n for n in data if res["worlds"][n]["spearman"][p][o]["estimate"] is not None]
            m = p_res["mean_of_worlds"][p][o]
            assert m["n_worlds"] == len(defined)
            assert _close(m["estimate"], float(np.mean([res["worlds"][n]["spearman"][p][o]["estimate"]
                                                        for n in defined])), 1e-12)
            if (p, o) not in SLOW:
                continue
            lo, hi = _q(slow_cluster_bootstrap(x, reps[o], pooled_cl, an["bootstrap_seed"]))
            assert _close(got["lo"], lo) and _close(got["hi"], hi), (p, o)
            # the mean of the per-world coefficients: its interval from the mean of the worlds' replicates
            lo, hi = _q(np.mean([world_reps[n][(p, o)] for n in defined], axis=0))
            assert _close(m["lo"], lo) and _close(m["hi"], hi)
    assert p_res["spearman"]["teachability"]["d_pass1"]["n_left_out"] == 8  # the world where it is undefined
    # the score against the best cheap baseline (largest |rho| on d_pass1), paired bootstrap of the difference
    comp = p_res["comparison"]
    base = {p: slow_rho(*zip(*[(_value(r, p), r["d_pass1"]["estimate"]) for r in pooled_rows
                               if math.isfinite(_value(r, p))])) for p in PREDICTORS if KINDS[p] == "baseline"}
    best = max(base, key=lambda p: abs(base[p]))
    sign = 1.0 if base[best] >= 0 else -1.0
    assert comp["best_baseline"] == best and comp["best_baseline_sign"] == sign
    score = [r["score"] for r in pooled_rows]
    other = [sign * _value(r, best) for r in pooled_rows]
    assert comp["difference"]["estimate"] == pytest.approx(slow_rho(score, [r["d_pass1"]["estimate"] for r in
                                                                            pooled_rows]) - abs(base[best]), abs=1e-12)
    lo, hi = _q(slow_cluster_bootstrap(score, reps["d_pass1"], pooled_cl, an["bootstrap_seed"], other=other))
    assert _close(comp["difference"]["lo"], lo) and _close(comp["difference"]["hi"], hi)
    assert comp["better"] == (lo > 0) and comp["worse"] == (hi < 0)
    acc = p_res["verdict_accuracy"]
    assert acc["n_decisive"] == sum(res["worlds"][n]["verdict_accuracy"]["n_decisive"] for n in data)
    assert res["worlds"]["rule_vs_instance"]["status"] == "excluded" and res["worlds"]["diversity"]["status"] == "not run"


# ------------------------------------------------------------------------------------ the report

def check_structure(an: dict, md: str) -> None:
    """What a render must show for an analysis: every world with its status, every analysed world's rows
    and tables, the pooled tables, and a conclusion that follows from the numbers."""
    done = [n for n, w in an["worlds"].items() if w["status"] == "analysed"]
    for name, w in an["worlds"].items():
        assert f"## World `{name}`" in md
        assert f"| {name} | {w['status']} |" in md
        if w["status"] != "analysed":
            assert f"Status: **{w['status']}** ({w['note']})." in md
            continue
        section = md.split(f"## World `{name}`")[1].split("\n## World `")[0]
        for r in w["rows"]:
            sig = f"{r['method']} ({r['signal']})" if r["signal"] else f"{r['method']} (reference)"
            assert f"| {r['config']} | {sig} | {rw.ci(r['d_pass1'])} |" in section
        for p in PREDICTORS:
            c = w["spearman"][p]
            assert (f"| {rw._name(p)} | {KINDS[p]} | " + " | ".join(rw.ci(c[o], 2) for o in OUTCOMES)) in section
        acc = w["verdict_accuracy"]
        assert f"**{acc['n_correct']} of {acc['n_decisive']} correct" in section
        assert f"![score vs realised Δ pass@1 in {name}]({rw.png_name(name)})" in section
        assert all(f"**{d['config']}**:" in section for d in w["disagreements"])
    pooled = an["pooled"]
    conclusion = md.split("## Conclusion")[1].split("## Worlds")[0]
    assert f"Worlds analysed: {len(done)}" in conclusion
    if not pooled:
        return
    assert f"## Pooled over {len(done)} world(s)" in md
    for o in OUTCOMES:
        finite = [p for p in PREDICTORS if pooled["spearman"][p][o]["estimate"] is not None]
        if finite:
            best = max(finite, key=lambda p: abs(pooled["spearman"][p][o]["estimate"]))
            assert f"{rw.OUT_NAMES[o]}: the largest pooled |Spearman| is {rw._name(best)} (" in conclusion
    comp = pooled["comparison"]
    if "best_baseline" in comp:
        loses = comp["difference"]["estimate"] < 0
        assert ("We lose to the baseline" in conclusion) == loses
        assert ("The score beats the best cheap baseline" in conclusion) == comp["better"]


def test_gap_and_gain_against_explicit_rows():
    """The capacity test: G of self_full against the best Δ pass@1 over self-distillation rows only."""
    def row(config, method, gap, gain, kind="product"):
        return {"config": config, "method": method, "kind": kind, "accuracy_gap": gap,
                "d_pass1": {"estimate": gain, "lo": gain - 0.01, "hi": gain + 0.01}}

    rows = [row("teacher", "jsd", 0.9, 0.50), row("self_full", "opsd_opd", 0.6, 0.05),
            row("self_answer", "opsd_jsd", 0.5, 0.19), row("demonstrations", "sft", None, 0.7, kind="reference")]
    got = aw.gap_and_gain(rows, ["opsd_opd", "opsd_jsd"])
    assert (got["gap"], got["config"], got["method"], got["holds"]) == (0.6, "self_answer", "opsd_jsd", True)
    rows[2]["d_pass1"]["estimate"] = 0.21  # above 0.6 / 3
    assert aw.gap_and_gain(rows, ["opsd_opd", "opsd_jsd"])["holds"] is False
    rows[1]["accuracy_gap"], rows[2]["d_pass1"]["estimate"] = 0.29, 0.0  # the gap itself too small
    assert aw.gap_and_gain(rows, ["opsd_opd", "opsd_jsd"])["holds"] is False
    assert aw.gap_and_gain(rows[:1], ["opsd_opd"]) is None


def test_same_study_compares_every_field(tmp_path, capsys):
    """same_study.py: equal analyses agree, a changed number or verdict is named, train_seconds ignored."""
    from benchmarks.validity.worlds import same_study

    committed = json.loads((COMMITTED / "worlds_analysis.json").read_text())
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(committed))
    committed["worlds"]["chains"]["rows"][0]["train_seconds"] = 1e9
    b.write_text(json.dumps(committed))
    assert same_study.main([str(a), str(b), "chains"]) == 0
    committed["worlds"]["chains"]["rows"][3]["d_pass1"]["lo"] += 1e-6
    committed["worlds"]["chains"]["rows"][5]["verdict"] = "helps"
    b.write_text(json.dumps(committed))
    assert same_study.main([str(a), str(b), "chains"]) == 1
    out = capsys.readouterr().out
    assert "d_pass1: 1e-06" in out and "verdict " in out and "same study within 1e-09: NO" in out


def test_synthetic_report_renders_every_world_and_a_conclusion_from_the_numbers(tmp_path):
    an, worlds, data = synthetic(1)
    res = json.loads(json.dumps(aw.combine("default", "/synthetic", an, worlds, data)))
    written = rw.write(res, tmp_path)
    md = (tmp_path / "RESULTS.md").read_text()
    assert md == rw.markdown(json.loads((tmp_path / "worlds_analysis.json").read_text()))
    check_structure(res, md)
    for name in [*data, None]:
        assert (tmp_path / rw.png_name(name)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(written) == len(data) + 3
    # the losing case is said plainly
    comp = dict(res["pooled"]["comparison"], better=False, worse=True,
                difference={"estimate": -0.3, "lo": -0.5, "hi": -0.1})
    assert "**We lose to the baseline**" in rw._comparison(comp)


def test_committed_worlds_results_are_the_render_of_their_analysis(tmp_path):
    """The committed RESULTS.md is exactly report_worlds' render of the committed JSON beside it (no number
    typed by hand); before any worlds result is committed, a synthetic analysis is rendered and checked."""
    md_path, json_path = COMMITTED / "RESULTS.md", COMMITTED / "worlds_analysis.json"
    assert md_path.is_file() == json_path.is_file(), "RESULTS.md and worlds_analysis.json are committed together"
    if md_path.is_file():
        an = json.loads(json_path.read_text())
        md = md_path.read_text()
        assert rw.markdown(an) == md
        check_structure(an, md)
        done = [n for n, w in an["worlds"].items() if w["status"] == "analysed"]
        for name in [*done, None] if done else []:
            assert (COMMITTED / rw.png_name(name)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        return
    an, worlds, data = synthetic(2)
    res = json.loads(json.dumps(aw.combine("quick", "/synthetic", an, worlds, data)))
    md = rw.markdown(res)
    check_structure(res, md)
    assert "**This is the `quick` variant**" in md


def test_cli_errors_are_one_line_and_write_nothing(tmp_path, capsys):
    assert aw.main(["--from", str(tmp_path / "missing")]) == 2
    assert rw.main(["--from", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("analyze_worlds: error: ") and err[1].startswith("report_worlds: error: ")
    assert not (tmp_path / "out").exists()
    (tmp_path / "worlds.json").write_text('{"plan": "nonsense", "worlds": {}}')
    assert aw.main(["--from", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("analyze_worlds: error: ")
    assert not (tmp_path / "worlds_analysis.json").exists()


def test_a_world_not_run_or_incomplete_is_listed_as_such(tmp_path):
    (tmp_path / "worlds.json").write_text(json.dumps({"plan": "quick", "worlds": {
        "capacity": {"finished": False, "skipped": "not built"}}}))
    res = aw.analyse_worlds(tmp_path)
    assert res["worlds"]["capacity"]["status"] == "not built" and res["worlds"]["style"]["status"] == "not run"
    assert res["pooled"] is None
    check_structure(res, rw.markdown(res))


# ------------------------------------------------------------------------------------ end to end

def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """A command in its own process group, killed with every job it started if the test stops early."""
    proc = subprocess.Popen(cmd, env=_env(), cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _small_world(root: Path, name: str, gap: float) -> None:
    """A ci-size world cut down to a few problems, its build report given a trainable level (or none)."""
    probs = root / name / "problems"
    train = [r for r in _jsonl(probs / "train.jsonl") if r["meta"]["difficulty"] == 2][:24]
    test = _jsonl(probs / "test.jsonl")
    test = ([r for r in test if r["meta"]["difficulty"] == 2][:8] + [r for r in test if r["meta"]["difficulty"] == 1][:4])
    for f, rows in (("train.jsonl", train), ("test.jsonl", test)):
        (probs / f).write_text("".join(json.dumps(r) + "\n" for r in rows))
    if (probs / "second_skill.jsonl").is_file():
        (probs / "second_skill.jsonl").write_text("".join(json.dumps(r) + "\n" for r in
                                                          _jsonl(probs / "second_skill.jsonl")[:6]))
    report = json.loads((root / name / "models" / "build_report.json").read_text())
    for row in ("teacher", "student + full solution"):
        report["accuracy"][row]["level 2"] = report["accuracy"]["student"]["level 2"] + gap
    (root / name / "models" / "build_report.json").write_text(json.dumps(report))


def check_worlds_study(out: Path, report: Path, trained: tuple[str, ...], excluded: tuple[str, ...]) -> None:
    """A finished tiny worlds study and its report: statuses, rows, every predictor and the outcomes
    recomputed from the stored evaluations, diagnoses and compat.json with plain json reads."""
    an = json.loads((report / "worlds_analysis.json").read_text())
    assert an == json.loads((out / "worlds_analysis.json").read_text())
    md = (report / "RESULTS.md").read_text()
    assert md == rw.markdown(an)
    check_structure(an, md)
    assert [an["worlds"][w]["status"] for w in (*trained, *excluded)] == ["analysed"] * len(trained) + [
        "excluded"] * len(excluded)
    for w in trained:
        study = out / w
        world = an["worlds"][w]
        rows = world["rows"]
        assert [(r["config"], r["method"]) for r in rows] == [("teacher", "opd"), ("self_full", "opsd_jsd"),
                                                              ("demonstrations", "sft")]
        init = json.loads((study / "eval" / "initial.json").read_text())
        regression = _jsonl(study / "data" / "regression.jsonl")
        assert all((r["meta"].get("skill") == "reverse") == (w == "forgetting") for r in regression)
        assert world["initial"]["n_regression"] == len(init["regression"]) == len(regression)
        compat = json.loads((study / "diag" / "main" / "compat.json").read_text())
        summary = json.loads((study / "diag" / "main" / "summary.json").read_text())
        for r in rows:
            ev = json.loads((study / "eval" / f"{r['runs'][0]}.json").read_text())
            for part, key in (("test", "d_pass1"), ("regression", "d_regression")):
                ids = sorted(init[part])
                d = np.mean([ev[part][i][1] / ev[part][i][0] - init[part][i][1] / init[part][i][0] for i in ids])
                assert r[key]["estimate"] == pytest.approx(d, abs=1e-12)
            kl = sum(ev["kl"][i][0] for i in ev["kl"]) / sum(ev["kl"][i][1] for i in ev["kl"])
            assert r["kl_to_initial"]["estimate"] == pytest.approx(kl, rel=1e-9)
            if r["kind"] == "reference":
                assert "score" not in r and "verdict" not in r
                continue
            assert set(PREDICTORS) <= set(r) and r["verdict"] in ("helps", "unclear", "hurts")
            assert r["verdict"] == summary["verdicts"][r["config"]][r["signal"]]["verdict"]
            assert r["teachability"] == pytest.approx(compat[r["config"]]["teachability"])
            assert r["topk_overlap"] == pytest.approx(compat[r["config"]]["topk_overlap"])
            he = summary["configs"][r["config"]]["high_entropy_share"]
            assert r["high_entropy_share"] == pytest.approx(he["student"] - he["teacher"])
    assert an["pooled"]["n_rows"] == 2 * len(trained) and an["pooled"]["n_configs"] == 2 * len(trained)
    for name in (*trained, None):
        assert (report / rw.png_name(name)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(3600)  # ~3 CPU-minutes; the wall time grows with the machine's load
def test_tiny_worlds_study_end_to_end(tmp_path):
    root = tmp_path / "worlds"
    res = _run([sys.executable, "-m", "opsd_diag.cli", "zoo", "build", "--world",
                str(REPO / "sample_data" / "worlds" / "forgetting.yaml"), "--size", "ci",
                "--out", str(root / "forgetting" / "models"), "--problems-dir", str(root / "forgetting" / "problems")],
               timeout=1200)
    assert res.returncode == 0, res.stderr[-2000:]
    for other in ("capacity", "style"):  # the same small models under two more names (the plan's worlds)
        shutil.copytree(root / "forgetting", root / other)
        (root / other / "problems" / "second_skill.jsonl").unlink()
    for name, gap in (("forgetting", 0.5), ("capacity", 0.5), ("style", 0.0)):
        _small_world(root, name, gap)
    out = tmp_path / "study"
    cmd = [sys.executable, str(REPO / "benchmarks" / "validity" / "worlds" / "run_worlds.py"), "--plan", "tiny",
           "--out", str(out), "--worlds", "capacity,forgetting,style", "--models-root", str(root)]
    res = _run(cmd, timeout=2400)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:])
    state = json.loads((out / "worlds.json").read_text())
    assert state["worlds"]["style"]["excluded"].startswith("no level where")
    assert all(state["worlds"][w]["finished"] for w in ("capacity", "forgetting"))
    n_jobs = {w: len(_jsonl(out / w / "jobs.jsonl")) for w in ("capacity", "forgetting")}
    res = _run(cmd, timeout=600)
    assert res.returncode == 0 and {w: len(_jsonl(out / w / "jobs.jsonl")) for w in n_jobs} == n_jobs  # resumed: no-op
    report = tmp_path / "report"
    res = _run([sys.executable, str(REPO / "benchmarks" / "validity" / "worlds" / "report_worlds.py"),
                "--from", str(out), "--out", str(report)], timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    check_worlds_study(out, report, ("capacity", "forgetting"), ("style",))


def test_readme_and_verdict_doc_quote_the_committed_pooled_numbers():
    """The README's "Measured so far" and docs/verdict.md quote the pooled worlds result: the figures they
    print are the committed analysis' (so a regenerated RESULTS.md cannot leave them stale)."""
    pooled = json.loads((COMMITTED / "worlds_analysis.json").read_text())["pooled"]
    comp, acc = pooled["comparison"], pooled["verdict_accuracy"]

    def ci(r):
        return f"{r['estimate']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}]"

    quoted = [ci(comp["primary_rho"]), ci(comp["best_baseline_rho"]), ci(comp["difference"]),
              f"{acc['n_correct']} of {acc['n_decisive']} decisive", f"{pooled['n_rows']} rows",
              f"{round(100 * acc['unclear_share'])}%"]
    for doc in (REPO / "README.md", REPO / "docs" / "verdict.md"):
        text = " ".join(doc.read_text(encoding="utf-8").split())
        section = text[text.index("Over outcome worlds"):][:1500]
        missing = [q for q in quoted if q not in section]
        assert not missing, f"{doc.name} quotes stale worlds figures: {missing} not in its outcome-worlds paragraph"
    # docs/verdict.md's reading of rule_vs_instance2 (the gap misleading on one pair of rows)
    w = json.loads((COMMITTED / "worlds_analysis.json").read_text())["worlds"]["rule_vs_instance2"]
    row = {(r["config"], r["method"]): r for r in w["rows"]}
    answer, rule = row[("self_answer", "opsd_jsd")], row[("self_rule", "opsd_jsd")]
    text = " ".join((REPO / "docs" / "verdict.md").read_text(encoding="utf-8").split())
    assert (f"answer-only context has gap {answer['accuracy_gap']:+.2f} and the rule {rule['accuracy_gap']:+.2f}"
            f", yet trained with `opsd_jsd` the rule helped (Δpass@1 {rule['d_pass1']['estimate']:+.2f}) and the "
            f"answer did nothing ({answer['d_pass1']['estimate']:+.2f}), while over all that world's rows G still "
            f"ranks well (Spearman {w['spearman']['accuracy_gap']['d_pass1']['estimate']:+.2f})") in text
