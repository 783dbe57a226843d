"""Self-calibration (``opsd-diag scoreboard --fit``, ``opsd_diag.calibration``) on real short runs: one diagnosis
with a lookahead on the bundled toy zoo (trained models: their held-out pass@1 moves, where a random zoo's stays
at 0 and every gain would be 0), short ``opsd-train --from-diagnosis`` runs of every v2 method, the refit's
cross-validation against a slow reference loop, the saved calibration used by a diagnosis (``ideal.calibration``),
the refusal below 8 runs, and bad calibration files and outputs."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
import yaml
from calibration import model_file, synthetic_rows
from conftest import ZOO
from fixtures_trainer import one_thread  # noqa: F401 (fixture)
from scipy import stats as sps

from opsd_diag import calibration, prediction
from opsd_diag import cli as diag_cli
from opsd_diag.core import predictor
from opsd_diag.errors import OpsdError
from opsd_diag.run import Run
from opsd_diag.scoreboard import scoreboard
from trainer import cli as train_cli

PROBLEMS = ZOO.parent / "problems"
# (folder, teacher config, signal, learning rate, seed): every predictor v2 method with a lookahead result, in two
# folders of 5 (each alone is below calibration.MIN_RUNS), and runs the fit cannot use or that lack a lookahead
RUNS = [("a", "teacher", "r_opd", 1e-3, 0), ("a", "teacher", "jsd", 3e-3, 1), ("a", "self_full", "r_opd", 1e-3, 2),
        ("a", "self_full", "jsd", 1e-2, 3), ("a", "teacher", "r_opd", 1e-2, 4), ("b", "teacher", "jsd", 1e-3, 5),
        ("b", "self_full", "r_opd", 3e-3, 6), ("b", "self_full", "jsd", 1e-3, 7), ("b", "teacher", "r_opd", 3e-3, 8),
        ("b", "self_full", "jsd", 3e-3, 9)]
EXTRA = [("extra", "teacher", "rev_kl", 1e-3, 10), ("extra", "teacher", "a_d2", 3e-3, 11)]


def _config(**over) -> dict:
    cfg = {"student": {"model": str(ZOO / "student")}, "base": {"model": str(ZOO / "base")},
           "teachers": [{"name": "teacher", "model": str(ZOO / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": str(PROBLEMS / "dev.jsonl"), "limit": 6},
           "sampling": {"num_samples": 2, "max_completion_length": 48, "teacher_samples": 1, "batch_size": 12},
           "scoring": {"batch_size": 6}, "analysis": {"bootstrap": 20, "checker": "toy"}, "shard_size": 8}
    return {**cfg, **over}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """root/diag (with a lookahead of opd and jsd), root/runs/{a,b} (10 usable runs), root/extra (2 more)."""
    import torch

    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("calibration")
    cfg = _config(lookahead={"methods": ["opd", "jsd"], "steps": 1, "rollouts_per_step": 2})
    run_diagnosis(from_dict(cfg), root / "diag", show_progress=False)
    for folder, config, signal, lr, seed in RUNS + EXTRA:
        out = root / ("runs" if folder != "extra" else "") / folder / f"{config}-{signal}-{seed}"
        assert train_cli.main(["--from-diagnosis", str(root / "diag"), "--config", config, "--signal", signal,
                               "--max-steps", "2", "--batch-size", "2", "--learning-rate", str(lr), "--seed", str(seed),
                               "--eval-data", str(PROBLEMS / "test.jsonl"), "--eval-problems", "6",
                               "--eval-samples", "2", "--out", str(out)]) == 0
    torch.set_num_threads(old)
    return root


@pytest.fixture()
def shipped(monkeypatch):
    """A synthetic model file in the place of the shipped one (the real one is the study's to write)."""
    d = model_file()
    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: json.dumps(d))
    return d


def _summary_of(path):
    return Run.load(path).summary


# ----------------------------------------------------------------------------- the slow reference

def _reference_features(diag, config: str, method: str) -> dict:
    """The features by key chains into summary.json (not through prediction.features)."""
    raw = json.loads((diag / "summary.json").read_text())
    c = raw["configs"][config]
    loss = {"opsd_opd": "opd", "opsd_jsd": "jsd"}.get(method, method)
    r = raw["lookahead"]["configs"].get(config, {}).get(loss)
    x = {"accuracy_gap": c["teacher_minus_student_accuracy"]["estimate"],
         "teachability": c["overall"]["columns"]["teachability"]["mean"],
         "mean_jsd": c["overall"]["columns"]["jsd"]["mean"], "is_jsd": float(method in ("jsd", "opsd_jsd"))}
    for k in ("dv", "dll", "kl"):
        x[f"lookahead_{k}"] = (r.get(k) or {}).get("estimate") if r else None
    return {k: math.nan if v is None else float(v) for k, v in x.items()}


def _reference_rows(diag, folders) -> list[dict]:
    """Each usable run by hand: method from its config.yaml, gain from its metrics.jsonl's first and last eval."""
    rows = []
    for folder in folders:
        for d in sorted(p for p in folder.iterdir() if (p / "prediction.json").is_file()):
            training = yaml.safe_load((d / "config.yaml").read_text())["training"]
            p = json.loads((d / "prediction.json").read_text())
            method = f"opsd_{training['loss']}" if training["method"] == "opsd" else training["method"]
            if p["signal"] != {"opd": "r_opd", "jsd": "jsd", "opsd_opd": "r_opd", "opsd_jsd": "jsd"}.get(method):
                continue
            evals = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if '"eval"' in x]
            rows.append({"run": str(d), "x": _reference_features(diag, p["config"], method),
                         "gain": evals[-1]["pass@1"] - evals[0]["pass@1"]})
    return rows


def _reference_predict(m: dict, x: dict) -> float:
    total = m["intercept"]
    for f, mean, sd, coef in zip(m["features"], m["mean"], m["sd"], m["coef"]):
        total += 0.0 if math.isnan(x[f]) else coef * (x[f] - mean) / sd
    return total


# ------------------------------------------------------------------------------------------ tests

@pytest.mark.slow  # a diagnosis with a lookahead and 12 short training runs
def test_fit_prints_both_errors_and_saves_a_calibration(runs, shipped, capsys):
    assert diag_cli.main(["scoreboard", str(runs / "runs"), "--fit"]) == 0
    out = capsys.readouterr().out
    cal_path = runs / "runs" / calibration.DEFAULT_OUT
    assert ("refit (v2) on 10 runs, leave-one-run-out (all runs share one diagnosis): cross-validated mean absolute "
            "error") in out
    assert "shipped model on the same 10 runs: mean absolute error" in out
    assert f"calibration saved to {cal_path}" in out and "ideal.calibration" in out
    saved = json.loads(cal_path.read_text())
    cal = prediction.load(cal_path)
    assert cal.choice == "v2" and cal.delta == shipped["delta"] and cal.source == str(cal_path)
    on = saved["calibrated_on"]
    assert on["n"] == 10 and on["tier"] == "v2" and on["scheme"].startswith("leave-one-run-out")
    assert {r["run"] for r in on["runs"]} == {str(runs / "runs" / f / f"{c}-{s}-{seed}") for f, c, s, _, seed in RUNS}
    for tier in prediction.TIERS:  # other outcomes are the shipped file's
        for outcome in ("d_pass4", "d_regression", "kl_to_initial"):
            assert saved["models"][tier][outcome] == shipped["models"][tier][outcome]
    assert saved["models"]["v2"]["d_pass1"] != shipped["models"]["v2"]["d_pass1"]
    lo, hi = saved["models"]["v2"]["d_pass1"]["range"]  # the refit's own rows bound where it extrapolates
    assert len(lo) == len(saved["models"]["v2"]["d_pass1"]["features"]) and all(
        a is None or a <= b for a, b in zip(lo, hi))
    gains = [r["gain"] for r in on["runs"]]
    assert len(set(gains)) > 1  # real runs of trained models: the gains differ
    line = next(x for x in out.splitlines() if x.startswith("refit"))
    assert f"{on['cv']['mae']:.4f}" in line
    assert f"{on['shipped']['mae']:.4f}" in next(x for x in out.splitlines() if x.startswith("shipped model"))


@pytest.mark.slow
def test_cross_validation_equals_a_slow_reference(runs, shipped):
    result = calibration.fit(scoreboard(runs / "runs").frame, _summary_of, runs / "runs")
    rows = _reference_rows(runs / "diag", [runs / "runs" / "a", runs / "runs" / "b"])
    by_run = {s.run: i for i, s in enumerate(result.samples)}
    assert sorted(by_run) == sorted(r["run"] for r in rows)
    rows = sorted(rows, key=lambda r: by_run[r["run"]])
    features, alpha = list(prediction.TIERS["v2"]), shipped["models"]["v2"]["d_pass1"]["alpha"]
    y = np.array([r["gain"] for r in rows])
    np.testing.assert_allclose(result.gains, y, atol=1e-12)
    oof = []
    for i in range(len(rows)):  # leave run i out: refit on the other n-1, predict run i
        rest = [r for j, r in enumerate(rows) if j != i]
        m = predictor.fit(np.array([[r["x"][f] for f in features] for r in rest]), np.array([r["gain"] for r in rest]),
                          features, alpha)
        oof.append(_reference_predict(m, rows[i]["x"]))
    np.testing.assert_allclose(result.cv, oof, rtol=1e-9, atol=1e-12)
    mae, rho = result.errors("cv")
    assert mae == pytest.approx(np.mean(np.abs(y - np.array(oof))), abs=1e-12)
    # runs with the same features and gains get the same out-of-fold prediction: a tie, which this loop's float
    # summation may split by one ulp (it did on one CPU), so both sides rank at 12 significant digits
    ref_rho = sps.spearmanr([float(f"{v:.12g}") for v in oof], [float(f"{v:.12g}") for v in y])[0]
    assert (math.isnan(rho) and math.isnan(ref_rho)) or rho == pytest.approx(ref_rho)
    shipped_ref = [_reference_predict(shipped["models"]["v2"]["d_pass1"], r["x"]) for r in rows]
    np.testing.assert_allclose(result.shipped, shipped_ref, rtol=1e-9, atol=1e-12)
    model = result.calibration["models"]["v2"]["d_pass1"]
    full = predictor.fit(np.array([[r["x"][f] for f in features] for r in rows]), y, features, alpha)
    np.testing.assert_allclose(model["coef"], full["coef"], rtol=1e-9, atol=1e-12)
    lo, hi = np.quantile(y - np.array(oof), [0.025, 0.975])
    assert model["residual_band"] == pytest.approx([lo, hi])


@pytest.mark.slow
def test_the_diagnosis_uses_the_calibration(runs, shipped, tmp_path, monkeypatch, capsys):
    cal_path = calibration.save(calibration.fit(scoreboard(runs / "runs").frame, _summary_of, runs / "runs"),
                                tmp_path / "mine.json")
    summary = Run.load(runs / "diag").summary
    p = prediction.predict(summary, {"self_full"}, True, calibration=cal_path)
    assert set(p.frame()["calibration"]) == {str(cal_path)}
    assert set(prediction.predict(summary, {"self_full"}, True).frame()["calibration"]) == {"shipped"}
    row = p.row("teacher", "opd")
    m = json.loads(cal_path.read_text())["models"][row.tier]["d_pass1"]
    assert row.gain == pytest.approx(_reference_predict(m, prediction.features(summary, "teacher", "opd")))
    assert row.lo == pytest.approx(row.gain + m["residual_band"][0])
    # the config key: a relative path, stored absolute, applied by the run and said by its report
    monkeypatch.chdir(tmp_path)
    (tmp_path / "diag.yaml").write_text(yaml.safe_dump(_config(ideal={"enabled": False, "calibration": "mine.json"},
                                                               data={"path": str(PROBLEMS / "dev.jsonl"), "limit": 2})))
    capsys.readouterr()
    assert diag_cli.main(["run", "diag.yaml", "--out", "diag"]) == 0
    out = capsys.readouterr().out
    assert f"Calibration: {cal_path}" in out
    run = Run.load(tmp_path / "diag")
    assert run.config.ideal.calibration == str(cal_path)
    assert set(run.predictions().frame()["calibration"]) == {str(cal_path)}
    assert set(run.predictions(calibration=None).frame()["calibration"]) == {str(cal_path)}
    os.remove(cal_path)  # gone since the run: one error naming the key
    with pytest.raises(OpsdError, match="names ideal.calibration: cannot read the calibration file"):
        Run.load(tmp_path / "diag").predictions()


@pytest.mark.slow
def test_below_eight_usable_runs_the_fit_refuses(runs, shipped, capsys):
    shutil.copytree(runs / "extra", runs / "runs" / "a" / "extra", dirs_exist_ok=True)
    try:
        assert diag_cli.main(["scoreboard", str(runs / "runs" / "a"), "--fit"]) == 2
    finally:
        shutil.rmtree(runs / "runs" / "a" / "extra")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs 8 usable runs" in err[0] and "has 6 (2 more needed)" in err[0]
    assert "1 trained a method or signal predictor v2 does not model" in err[0]
    assert not (runs / "runs" / "a" / calibration.DEFAULT_OUT).exists()


@pytest.mark.slow
def test_a_run_without_a_lookahead_result_fits_the_no_lookahead_tier(runs, shipped, tmp_path):
    root = tmp_path / "all"
    shutil.copytree(runs / "runs", root, ignore=shutil.ignore_patterns(calibration.DEFAULT_OUT))
    shutil.copytree(runs / "extra", root / "extra")  # opd2 (no lookahead of opd2) and rev_kl (not v2's)
    result = calibration.fit(scoreboard(root).frame, _summary_of, root)
    assert result.tier == "v2_no_lookahead" and len(result.samples) == 11
    assert [w for _, w in result.skipped] == ["trained a method or signal predictor v2 does not model"]
    assert {s.method for s in result.samples} == {"opd", "jsd", "opd2", "opsd_opd", "opsd_jsd"}
    assert result.calibration["models"]["v2"]["d_pass1"] == json.loads(json.dumps(model_file()["models"]["v2"]["d_pass1"]))


@pytest.mark.slow
def test_outputs_the_fit_never_writes(runs, shipped, tmp_path, capsys):
    keep = tmp_path / "notes.json"
    keep.write_text('{"mine": 1}')
    run_dir = next((runs / "runs" / "a").iterdir())
    cases = [(["--fit", "--out", str(keep)], "is not a predictor v2 model file"),
             (["--fit", "--out", str(run_dir / "calibration.json")], "lies in the run directory"),
             (["--out", str(tmp_path / "c.json")], "add --fit"),
             (["--fit", "--out", str(tmp_path / "no" / "c.json")], "does not exist")]
    for args, needle in cases:
        assert diag_cli.main(["scoreboard", str(runs / "runs"), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert keep.read_text() == '{"mine": 1}' and not (run_dir / "calibration.json").exists()


@pytest.mark.slow
def test_without_a_shipped_model_file_the_fit_says_so(runs, monkeypatch):
    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: None)
    with pytest.raises(OpsdError, match="no shipped predictor v2 model file"):
        calibration.fit(scoreboard(runs / "runs").frame, _summary_of, runs / "runs")


def test_leave_one_diagnosis_out_equals_an_explicit_loop():
    data = synthetic_rows(24, seed=3)
    features = list(prediction.TIERS["v2_no_lookahead"])
    X = np.stack([data["x"][f] for f in features], axis=1)  # [24, 4]
    X[2, 1] = np.nan  # a missing feature is imputed inside each fold
    y = data["y"]["d_pass1"]
    groups = np.repeat(["d1", "d2", "d3", "d4"], 6)
    got = calibration.cross_validate(X, y, groups, features, 1.0)
    for g in ("d1", "d2", "d3", "d4"):
        m = predictor.fit(X[groups != g], y[groups != g], features, 1.0)
        for i in np.flatnonzero(groups == g):
            x = {f: X[i, j] for j, f in enumerate(features)}
            assert got[i] == pytest.approx(_reference_predict(m, x), abs=1e-12)
    samples = [calibration.Sample(f"r{i}", f"diag{i % 2}", "c", "opd", 0.0, {}) for i in range(4)]
    assert calibration.folds(samples) == (["diag0", "diag1", "diag0", "diag1"],
                                          "leave-one-diagnosis-out over 2 diagnoses")
    assert calibration.folds(samples[::2])[0] == [0, 1]


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not a predictor v2 model file"),
    ('{"version": 2, "choice": "v2"}', "not a predictor v2 model file"),
    ('{"configs": {}, "student_accuracy": {}}', "version"),  # a summary.json, not a model file
    (None, "takes"),  # a model of another feature set
    ("", "not a predictor v2 model file"),
])
def test_a_corrupt_or_foreign_calibration_is_one_error(tmp_path, capsys, content, needle):
    if content is None:
        d = model_file()
        d["models"]["v2"]["d_pass1"]["features"][0] = "score"
        content = json.dumps(d)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(OpsdError, match=needle) as e:
        prediction.load(bad)
    assert "\n" not in str(e.value)
    # a diagnosis config naming it is refused before any work, in one line, leaving nothing behind
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(_config(ideal={"calibration": str(bad)})))
    assert diag_cli.main(["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and not (tmp_path / "out").exists()


def test_a_fifo_or_missing_calibration_is_one_error_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(OpsdError, match="named pipe"):
        prediction.load(tmp_path / "fifo.json")
    with pytest.raises(OpsdError, match="cannot read the calibration file"):
        prediction.load(tmp_path / "missing.json")


@pytest.mark.parametrize("training,method", [
    ({"method": "opd"}, "opd"), ({"method": "opsd", "loss": "opd"}, "opsd_opd"), ({"method": "opsd"}, "opsd_jsd"),
    ({"method": "exopd"}, "exopd"), ({"method": "sft"}, None), ({"method": "uld"}, None), (None, None),
    ({"method": "opsd", "loss": "kl"}, None),
])
def test_the_trained_method_is_read_from_the_training_section(training, method):
    assert calibration.trained_method(training) == method
