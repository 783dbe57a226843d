"""The diagnosis inside a TRL run: GKDTrainer for a few steps on the bundled toy models with DiagnosisCallback.

TRL is a test dependency (the ``test`` extra, ``make test`` installs it): without it this module fails to
import, it is never skipped. A tracker is a ``transformers`` callback that reads the ``logs`` of ``on_log``
(TensorBoard, W&B, trackio all are): the spy below stands where they stand, after the diagnosis callback.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import trl  # noqa: F401  (fails loudly when the test extra is missing)
from accelerate.state import AcceleratorState
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from opsd_diag import trajectory
from opsd_diag.config.spec import from_dict
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.engine.probe import probe_config
from opsd_diag.errors import OpsdError
from opsd_diag.io.data import load_problems
from opsd_diag.run import Run
from opsd_diag.zoo.task import reasoning_response
from trainer.trl_callback import DiagnosisCallback

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TRL's experimental-API warning
    from trl.experimental.gkd import GKDConfig, GKDTrainer

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "sample_data" / "models"
EVERY = {"steps": 2, "problems": 3, "num_samples": 2, "max_completion_length": 16, "budget": 6, "heatmaps": 1}


def probe_cfg() -> dict:
    return {"student": {"model": str(ZOO / "student")}, "base": {"model": str(ZOO / "base")},
            "teachers": [{"name": "teacher", "model": str(ZOO / "teacher")},
                         {"name": "self_full", "context": "full_solution"}],
            "data": {"path": str(REPO / "sample_data" / "problems" / "dev.jsonl")},
            "sampling": {"num_samples": 2, "max_completion_length": 16, "teacher_samples": 1, "seed": 5},
            "analysis": {"checker": "toy", "bootstrap": 20}, "shard_size": 2, "device": "cpu"}


class Tracker(TrainerCallback):
    """Records what a tracker callback is handed: (global step, logs)."""

    def __init__(self):
        self.seen: list[tuple[int, dict]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.seen.append((state.global_step, dict(logs)))


class SaveAt(TrainerCallback):
    """Saves the policy at one step (after the probe of that step): the checkpoint a user would diagnose."""

    def __init__(self, step: int, out: Path):
        self.step, self.out = step, out

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            model.save_pretrained(self.out)
            for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
                shutil.copy(ZOO / "student" / f, self.out / f)


def train_gkd(tmp: Path) -> dict:
    """GKDTrainer for 2 steps on the toy models with a DiagnosisCallback probing every 2 steps into tmp/probes
    (also the browser test's trajectory, tests/test_e2e_trajectory.py)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    problems = load_problems(from_dict(probe_cfg()).data)[:8]
    ds = Dataset.from_list([{"messages": [{"role": "user", "content": p["prompt"]},
                                          {"role": "assistant", "content": reasoning_response(p)}]} for p in problems])
    tok = AutoTokenizer.from_pretrained(ZOO / "student")
    student = AutoModelForCausalLM.from_pretrained(ZOO / "student", dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(ZOO / "teacher", dtype=torch.float32)
    args = GKDConfig(output_dir=str(tmp / "trl"), per_device_train_batch_size=4, max_steps=2, learning_rate=3e-3,
                     lmbda=1.0, beta=0.5, max_new_tokens=16, logging_steps=100, save_strategy="no",
                     report_to="none", seed=0, use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    tracker, saver = Tracker(), SaveAt(2, tmp / "ckpt")
    trainer = GKDTrainer(model=student, teacher_model=teacher, args=args, train_dataset=ds, processing_class=tok,
                         callbacks=[tracker, saver])
    cb = DiagnosisCallback(from_dict(probe_cfg()), tmp / "probes", EVERY, teachers=["teacher"])
    cb.attach(trainer)
    order = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    env = dict(os.environ)
    try:
        trainer.train()
    finally:  # the Trainer's accelerate state and environment must not reach the tests after this one
        AcceleratorState._reset_state(True)
        os.environ.clear()
        os.environ.update(env)
    return {"tmp": tmp, "cb": cb, "tracker": tracker, "trainer": trainer, "order": order}


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    return train_gkd(tmp_path_factory.mktemp("trl"))


@pytest.mark.slow
def test_the_callback_goes_first_and_the_trackers_get_every_probe(trl_run):
    order = trl_run["order"]
    assert order[0] == "DiagnosisCallback" and order.index("Tracker") > 0
    probes = [logs for _, logs in trl_run["tracker"].seen if "diagnosis/probe_step" in logs]
    assert [p["diagnosis/probe_step"] for p in probes] == [0.0, 2.0]
    assert [{k: p[k] for k in mine} for p, mine in zip(probes, trl_run["cb"].logged)] == trl_run["cb"].logged
    for logs in probes:
        assert "loss" in logs  # in the trainer's own log of that step, beside its training numbers
        for name in ("diagnosis/teacher/r_opd", "diagnosis/teacher/verdict/r_opd",
                     "diagnosis/teacher/predicted_gain/opd", "diagnosis/student/entropy",
                     "diagnosis/student/pass@k_headroom"):
            assert math.isfinite(logs[name]), name
    history = [h for h in trl_run["trainer"].state.log_history if "diagnosis/probe_step" in h]
    assert [h["diagnosis/probe_step"] for h in history] == [0.0, 2.0]


@pytest.mark.slow
def test_probe_dirs_are_diagnoses_of_the_policy_at_their_step(trl_run):
    tmp = trl_run["tmp"]
    root = tmp / "probes"
    assert [s for s, _ in trajectory.probes(root)] == [0, 2]
    for step, d in trajectory.probes(root):
        assert (d / trajectory.REPORT).is_file() and Run.load(d).configs == ["teacher"]
        logged = next(p for p in trl_run["cb"].logged if p["diagnosis/probe_step"] == step)
        assert {k: v for k, v in logged.items() if k != "diagnosis/probe_step"} == trajectory.scalars(Run.load(d))
    # the probe at step 2 equals a direct diagnosis of the checkpoint saved at step 2 on the same probes
    cfg = probe_config(from_dict(probe_cfg()), trl_run["cb"].spec, ["teacher"], "cpu")
    cfg = cfg.model_copy(update={"student": cfg.student.model_copy(update={"model": str(tmp / "ckpt")})})
    direct = Run.load(run_diagnosis(cfg, tmp / "direct", show_progress=False))
    probe = Run.load(root / "step-0000002")
    assert probe.table("rollouts")["completion_ids"].map(list).tolist() == \
        direct.table("rollouts")["completion_ids"].map(list).tolist()
    for col in ("lp_s", "lp_t", "lp_b", "r_opd", "kl_rev", "jsd", "a_d2"):
        np.testing.assert_allclose(probe.tokens[col].to_numpy(float), direct.tokens[col].to_numpy(float),
                                   rtol=1e-5, atol=1e-6, equal_nan=True)
    a, b = trajectory.scalars(probe), trajectory.scalars(direct)
    assert a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-5, abs_tol=1e-6) for k in a)
    # training moved the policy: the step-0 probe scored other log-probs
    first = Run.load(root / "step-0000000").tokens["lp_s"].to_numpy(float)
    n = min(len(first), len(probe.tokens))
    assert not np.allclose(first[:n], probe.tokens["lp_s"].to_numpy(float)[:n])


def test_a_wrong_setting_fails_at_construction_in_one_line(tmp_path):
    with pytest.raises(OpsdError, match="no teacher config named nope"):
        DiagnosisCallback(from_dict(probe_cfg()), tmp_path, 5, teachers=["nope"])
    with pytest.raises(OpsdError) as e:
        DiagnosisCallback(from_dict(probe_cfg()), tmp_path, {"steps": 0})
    assert "steps" in str(e.value) and "\n" not in str(e.value).strip()


def test_the_report_goes_to_wandb_as_html_with_the_numbers(tmp_path, monkeypatch):
    """With report_to naming wandb and a W&B run active, the probe's report.html is logged as a wandb.Html
    beside the numbers (a stand-in module: wandb is not a dependency); without either, nothing is sent."""
    import types

    calls = []
    fake = types.SimpleNamespace(run=object(), Html=lambda text: ("Html", text),
                                 log=lambda data, commit=True: calls.append((data, commit)))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cb = DiagnosisCallback(from_dict(probe_cfg()), tmp_path, 2)
    report = tmp_path / "report.html"
    report.write_text("<html>heatmaps</html>")
    state = types.SimpleNamespace(log_history=[{}])
    sent = [({"diagnosis/report": ("Html", "<html>heatmaps</html>")}, False)]  # with the step's numbers
    for report_to, expect in ((["tensorboard"], []), (["wandb"], sent)):
        cb.pending, cb.report = {"diagnosis/teacher/r_opd": 0.5}, report
        logs = {"loss": 1.0}
        cb.on_log(types.SimpleNamespace(report_to=report_to), state, None, logs=logs)
        assert logs["diagnosis/teacher/r_opd"] == 0.5 and calls == expect and cb.report is None
    fake.run = None  # no active W&B run: nothing logged
    cb.pending, cb.report, calls[:] = {"x": 1.0}, report, []
    cb.on_log(types.SimpleNamespace(report_to=["wandb"]), state, None, logs={})
    assert calls == []
