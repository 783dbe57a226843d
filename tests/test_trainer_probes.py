"""opsd-train with training.diagnose_every: probe run directories under probes/, each a diagnosis of the
policy at its step (equal to a direct diagnosis of the checkpoint saved there), and training itself unchanged
(a probe draws from no random stream the training run uses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fixtures_trainer import config_dict, one_thread, read_metrics, without_time, world, write_config  # noqa: F401

from opsd_diag import trajectory
from opsd_diag.config.spec import from_dict
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.engine.probe import probe_config
from opsd_diag.run import Run
from trainer import checkpoint, cli

EVERY = {"steps": 2, "problems": 2, "num_samples": 2, "budget": 4, "heatmaps": 1}


@pytest.mark.slow
def test_opsd_train_writes_a_probe_every_n_steps_and_trains_as_without(world, tmp_path, monkeypatch):
    from accelerate import Accelerator

    logged = []  # what the run hands its trackers (Accelerator.log), recorded
    real_log = Accelerator.log
    monkeypatch.setattr(Accelerator, "log", lambda self, values, step=None, **k: (
        logged.append((step, dict(values))), real_log(self, values, step=step, **k))[1])
    train = {"method": "opd", "teacher": "teacher", "max_steps": 2}
    plain = write_config(tmp_path / "plain.yaml", world, **train)
    probed = write_config(tmp_path / "probed.yaml", world, **train, diagnose_every=EVERY)
    assert cli.main([str(plain), "--out", str(tmp_path / "plain")]) == 0
    assert cli.main([str(probed), "--out", str(tmp_path / "run")]) == 0
    run_dir = tmp_path / "run"
    # the probes change no number of the training run
    assert without_time(read_metrics(run_dir)) == without_time(read_metrics(tmp_path / "plain"))
    steps = trajectory.probes(run_dir / "probes")
    assert [s for s, _ in steps] == [0, 2]
    for _, d in steps:
        run = Run.load(d)
        assert run.configs == ["teacher"] and (d / trajectory.REPORT).is_file()
        assert math.isfinite(trajectory.scalars(run)["diagnosis/teacher/r_opd"])
    # the last probe equals a direct diagnosis of the checkpoint saved at that step
    cfg = probe_config(from_dict(config_dict(world, **train, diagnose_every=EVERY)),
                       from_dict(config_dict(world, **train, diagnose_every=EVERY)).training.diagnose_every,
                       ["teacher"], "cpu")
    ckpt = checkpoint.latest(run_dir)
    cfg = cfg.model_copy(update={"student": cfg.student.model_copy(update={"model": str(ckpt)})})
    direct = Run.load(run_diagnosis(cfg, tmp_path / "direct", show_progress=False))
    probe = Run.load(run_dir / "probes" / "step-0000002")
    assert probe.table("rollouts")["completion_ids"].map(list).tolist() == \
        direct.table("rollouts")["completion_ids"].map(list).tolist()
    for col in ("lp_s", "lp_t", "lp_b", "r_opd", "kl_rev", "a_d2"):
        np.testing.assert_allclose(probe.tokens[col].to_numpy(float), direct.tokens[col].to_numpy(float),
                                   rtol=1e-5, atol=1e-6, equal_nan=True)
    # the trackers got each probe's numbers at its step
    probes_logged = [(step, v) for step, v in logged if "diagnosis/probe_step" in v]
    assert [step for step, _ in probes_logged] == [0, 2]
    for step, values in probes_logged:
        want = trajectory.scalars(Run.load(run_dir / "probes" / f"step-{step:07d}"))
        assert {k: v for k, v in values.items() if k != "diagnosis/probe_step"} == want
    # the trajectory has both steps
    frame = trajectory.frame(run_dir / "probes")
    assert sorted(frame["step"].unique()) == [0, 2]
