"""The track record: `opsd-train --from-diagnosis` keeps the prediction with the training run, and
`opsd-diag scoreboard` reads predicted vs realised back, on real short runs of a tiny random zoo."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import tiny_config, write_jsonl
from fixtures_trainer import one_thread  # noqa: F401 (fixture)

from opsd_diag import cli as diag_cli
from opsd_diag.core.stats import spearman
from opsd_diag.config.spec import from_dict
from opsd_diag.run import Run
from opsd_diag.scoreboard import scoreboard
from trainer import cli
from trainer.from_diagnosis import method_for

pytestmark = pytest.mark.slow  # a diagnosis and two short training runs


@pytest.fixture(scope="module")
def diagnosis(ci_zoo, tmp_path_factory):
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("scoreboard")
    data = write_jsonl(root / "problems.jsonl", task.generate(6, 11))
    held_out = write_jsonl(root / "held_out.jsonl", task.generate(4, 99))
    cfg = from_dict(tiny_config(ci_zoo, data, ideal={"budget": 24, "k": 2, "m": 2},
                                sampling={"max_completion_length": 8, "teacher_samples": 1}))
    run_diagnosis(cfg, root / "diag", show_progress=False)
    return root, held_out


def _train(root, held_out, config: str, signal: str, name: str, *extra: str) -> int:
    return cli.main(["--from-diagnosis", str(root / "diag"), "--config", config, "--signal", signal,
                     "--max-steps", "2", "--batch-size", "2", "--eval-data", str(held_out),
                     "--out", str(root / "runs" / name), *extra])


def test_from_diagnosis_keeps_the_prediction_and_the_scoreboard_reads_it(diagnosis, capsys):
    root, held_out = diagnosis
    assert _train(root, held_out, "teacher", "r_opd", "a") == 0
    assert _train(root, held_out, "self_full", "jsd", "b") == 0
    run = Run.load(root / "diag")
    for name, config, signal, method in (("a", "teacher", "r_opd", "opd"), ("b", "self_full", "jsd", "opsd")):
        d = root / "runs" / name
        p = json.loads((d / "prediction.json").read_text())
        v = run.summary.verdicts[config][signal]
        assert (p["config"], p["signal"], p["verdict"], p["score"]) == (config, signal, v.verdict, v.score)
        assert p["diagnosis"] == str((root / "diag").resolve())
        trained = yaml.safe_load((d / "config.yaml").read_text())["training"]
        assert trained["method"] == method and trained["teacher"] == config and trained["max_steps"] == 2
        row = run.predictions().row(config, {"opd": "opd", "opsd": "opsd_jsd"}[method])  # predictor v2's, kept too
        assert p["v2"]["method"] == row.method and p["v2"]["predicted_gain"] == pytest.approx(row.gain)
        assert [p["v2"]["lo"], p["v2"]["hi"]] == pytest.approx([row.lo, row.hi])
        assert (p["v2"]["verdict"], p["v2"]["tier"], p["v2"]["calibration"]) == (row.verdict, row.tier, "shipped")
    board = scoreboard(root / "runs")
    frame = board.frame.set_index("config")
    assert set(frame.index) == {"teacher", "self_full"} and (frame["status"] == "finished").all()
    for name, config in (("a", "teacher"), ("b", "self_full")):
        evals = [json.loads(x) for x in (root / "runs" / name / "metrics.jsonl").read_text().splitlines()
                 if json.loads(x)["kind"] == "eval"]
        assert frame.loc[config, "gain"] == pytest.approx(evals[-1]["pass@1"] - evals[0]["pass@1"])
    assert board.n_scored == 2 and math.isnan(board.spearman)  # two runs: no correlation yet
    assert math.isnan(spearman([1, 2], [3, 4]))
    assert diag_cli.main(["scoreboard", str(root / "runs")]) == 0
    out = capsys.readouterr().out
    assert "self_full" in out and "Spearman" in out and "needs 3 or more" in out


@pytest.mark.parametrize("args,needle", [
    (["--config", "nope", "--signal", "r_opd"], "not a teacher config"),
    (["--config", "self_full", "--signal", "a_d2"], "cannot be trained with a self-teacher"),
    (["--config", "teacher"], "takes --config NAME and --signal SIGNAL"),
])
def test_from_diagnosis_user_errors(diagnosis, tmp_path, capsys, args, needle):
    root, _ = diagnosis
    assert cli.main(["--from-diagnosis", str(root / "diag"), *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and not (tmp_path / "x").exists()


def test_from_diagnosis_without_a_choice_trains_the_recommendation(diagnosis, tmp_path, capsys, monkeypatch):
    """Without --config and --signal, opsd-train trains the row the report and the app's Train it recommend
    (predictor v2's best-ranked trainable row its ranking supports) and says which; a diagnosis that recommends
    nothing (the tiny random zoo: no config has G > 0) is one line naming the fix, and no run directory."""
    from opsd_diag.prediction import Predictions
    from trainer.from_diagnosis import why_not

    root, _ = diagnosis
    run = Run.load(root / "diag")
    argv = ["--from-diagnosis", str(root / "diag"), "--max-steps", "1", "--batch-size", "2", "--out"]
    assert run.predictions().recommended() is None
    assert cli.main([*argv, str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recommends nothing to train" in err[0] and "--config NAME --signal SIGNAL" in err[0]
    assert not (tmp_path / "none").exists()

    rec, asked = run.predictions().row("self_full", "opsd_jsd"), []  # as if the ranking supported this row
    monkeypatch.setattr(Predictions, "recommended", lambda self, trainable=None: asked.append(trainable) or rec)
    assert cli.main([*argv, str(tmp_path / "rec")]) == 0
    assert "training the diagnosis' recommendation: config self_full, signal jsd" in capsys.readouterr().err
    p = json.loads((tmp_path / "rec" / "prediction.json").read_text())
    assert (p["config"], p["signal"], p["v2"]["method"]) == ("self_full", "jsd", "opsd_jsd")
    trainable = asked[-1]  # the app's Train it rule: a row no method trains is never the recommendation
    assert trainable("teacher", "a_d2") and not trainable("self_full", "a_d2")
    assert why_not(run.config, "self_full", "a_d2") is not None


def test_a_run_reads_its_relative_paths_where_the_diagnosis_ran(ci_zoo, tmp_path, monkeypatch):
    """A diagnosis run with relative data and model paths trains again from another directory (the app's Train, a
    script elsewhere): its manifest records where it ran (``cwd``), and a relative path missing here is read
    there; a hub name or ``self`` is kept as written. Before, every relative path was read from here and failed."""
    import os

    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.io.rebase import rebased
    from opsd_diag.zoo import task

    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere" / "deeper"
    project.mkdir()
    elsewhere.mkdir(parents=True)
    write_jsonl(project / "problems.jsonl", task.generate(4, 11))
    rel = os.path.relpath(ci_zoo, project)  # ../../zoo0/models: no such folder from elsewhere/deeper
    monkeypatch.chdir(project)
    run_diagnosis(from_dict(tiny_config(Path(rel), Path("problems.jsonl"), sampling={"max_completion_length": 6})),
                  project / "diag", show_progress=False)
    monkeypatch.chdir(elsewhere)
    run = Run.load(project / "diag")
    assert run.manifest["cwd"] == str(project)
    cfg, _ = run.config_for_models()
    assert cfg.data.path == str(project / "problems.jsonl")
    assert cfg.student.model == os.path.join(project, rel, "student") and cfg.teachers[1].model == "self"
    assert run.tokenizer() is not None  # the app decodes top-k ids with it
    assert cli.main(["--from-diagnosis", str(project / "diag"), "--config", "teacher", "--signal", "r_opd",
                     "--max-steps", "1", "--batch-size", "2", "--out", str(elsewhere / "t")]) == 0
    trained = yaml.safe_load((elsewhere / "t" / "config.yaml").read_text())
    assert trained["data"]["path"] == str(project / "problems.jsonl")
    stored = {"data": {"path": "problems.jsonl"}, "teachers": [{"model": "Qwen/Qwen3-8B"}]}
    for cwd in (None, "project", 7):  # an old run, or a damaged manifest: read from here, as before
        assert rebased(stored, cwd) == stored
    assert rebased(stored, str(project)) == {"data": {"path": str(project / "problems.jsonl")},
                                             "teachers": [{"model": "Qwen/Qwen3-8B"}]}


def test_every_signal_maps_to_the_method_that_trains_on_it(diagnosis):
    cfg = Run.load(diagnosis[0] / "diag").config
    assert method_for(cfg, "teacher", "a_d2") == {"teacher": "teacher", "method": "opd2"}
    assert method_for(cfg, "teacher", "rev_kl")["beta"] == 1.0 and method_for(cfg, "teacher", "fwd_kl")["beta"] == 0.0
    assert method_for(cfg, "self_full", "r_opd") == {"teacher": "self_full", "method": "opsd", "loss": "opd"}
