"""Probes (training.diagnose_every): the config key, the probe config, a probe of a live policy against a
direct diagnosis of the same weights saved to disk, its logged numbers against explicit float64 loops, and a
folder of probes read as a trajectory."""

from __future__ import annotations

import math
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM

from opsd_diag import trajectory
from opsd_diag.config.probe import ProbeSpec
from opsd_diag.config.spec import from_dict
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.engine.probe import probe_config, run_probe
from opsd_diag.errors import OpsdError
from opsd_diag.run import Run

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "sample_data" / "models"


def config_dict(**over) -> dict:
    cfg = {"student": {"model": str(ZOO / "student")}, "base": {"model": str(ZOO / "base")},
           "teachers": [{"name": "teacher", "model": str(ZOO / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": str(REPO / "sample_data" / "problems" / "dev.jsonl"), "limit": 40},
           "sampling": {"num_samples": 4, "max_completion_length": 20, "teacher_samples": 1, "seed": 3},
           "analysis": {"checker": "toy", "bootstrap": 20, "pass_k": [1, 4]}, "shard_size": 2, "device": "cpu"}
    cfg.update(over)
    return cfg


SPEC = ProbeSpec(steps=2, problems=3, num_samples=3, max_completion_length=16, budget=6, heatmaps=1)


def test_diagnose_every_key_short_and_long_forms_and_errors():
    train = {"method": "opd", "teacher": "teacher"}
    short = from_dict(config_dict(training={**train, "diagnose_every": 5})).training.diagnose_every
    assert short == ProbeSpec(steps=5)
    long = from_dict(config_dict(training={**train, "diagnose_every": {"steps": 3, "problems": 2}}))
    assert (long.training.diagnose_every.steps, long.training.diagnose_every.problems) == (3, 2)
    assert from_dict(config_dict(training=train)).training.diagnose_every is None
    for bad, word in ((0, "steps"), ({"steps": 2, "problem": 3}, "problem"), (True, "diagnose_every"),
                      ({"steps": 2, "problems": 0}, "problems")):
        with pytest.raises(OpsdError) as e:
            from_dict(config_dict(training={**train, "diagnose_every": bad}))
        assert "diagnose_every" in str(e.value) and word in str(e.value) and "\n" not in str(e.value).strip()


def test_due_and_step_dirs():
    s = ProbeSpec(steps=3)
    assert [n for n in range(10) if s.due(n)] == [0, 3, 6, 9]
    assert s.due(7, last=True) and not ProbeSpec(steps=3, at_start=False).due(0)
    assert sorted([ProbeSpec.step_dir(10), ProbeSpec.step_dir(9)]) == ["step-0000009", "step-0000010"]


def test_probe_config_keeps_the_diagnosis_and_narrows_it():
    cfg = from_dict(config_dict(ideal={"budget": 500, "k": 2}, lookahead={"methods": ["opd"]}))
    pc = probe_config(cfg, SPEC, ["teacher"], "cpu")
    assert [t.name for t in pc.teachers] == ["teacher"] and pc.base == cfg.base and pc.student == cfg.student
    assert pc.data.limit == 3 and pc.sampling.num_samples == 3 and pc.sampling.max_completion_length == 16
    assert pc.sampling.seed == cfg.sampling.seed and pc.scoring == cfg.scoring
    assert pc.analysis.pass_k == [1, 3]  # k above the probe's samples dropped; pass@n kept for the headroom
    assert (pc.ideal.budget, pc.ideal.k, pc.lookahead, pc.training) == (6, 2, None, None)
    assert probe_config(cfg, ProbeSpec(steps=1, verdict=False)).ideal is None
    assert probe_config(cfg, ProbeSpec(steps=1, problems=100)).data.limit == 40  # never beyond the data's own limit
    with pytest.raises(OpsdError, match="no teacher config named nope"):
        probe_config(cfg, SPEC, ["nope"])


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Two probes of a live policy (the student, then the student nudged as a step would), and a direct
    diagnosis of the nudged weights saved to disk with the same probe config."""
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("probe")
    cfg = probe_config(from_dict(config_dict()), SPEC, None, "cpu")
    policy = AutoModelForCausalLM.from_pretrained(ZOO / "student", dtype=torch.float32).train()
    first = run_probe(cfg, tmp / "probes", 0, policy, {"source": "test"})
    with torch.no_grad():  # a training step's worth of change
        gen = torch.Generator().manual_seed(0)
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 2e-3)
    second = run_probe(cfg, tmp / "probes", 2, policy, {"source": "test"})
    policy.save_pretrained(tmp / "ckpt")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (tmp / "ckpt" / f).write_bytes((ZOO / "student" / f).read_bytes())
    direct = run_diagnosis(cfg.model_copy(update={"student": cfg.student.model_copy(
        update={"model": str(tmp / "ckpt")})}), tmp / "direct", show_progress=False)
    return {"tmp": tmp, "first": first, "second": second, "direct": direct, "policy": policy}


@pytest.mark.slow
def test_probe_of_a_live_policy_equals_a_diagnosis_of_its_saved_weights(probed):
    policy = probed["policy"]
    assert policy.training and all(p.grad is None for p in policy.parameters())  # mode restored, no gradient
    a, b = Run.load(probed["second"]), Run.load(probed["direct"])
    ra, rb = a.table("rollouts"), b.table("rollouts")
    assert ra["completion_ids"].map(list).tolist() == rb["completion_ids"].map(list).tolist()
    ta, tb = a.tokens, b.tokens
    assert len(ta) == len(tb) > 0
    for col in ("lp_s", "lp_t", "lp_b", "r_opd", "r_delta", "kl_rev", "jsd", "a_d2", "h_s"):
        np.testing.assert_allclose(ta[col].to_numpy(float), tb[col].to_numpy(float), rtol=1e-5, atol=1e-6,
                                   equal_nan=True)
    pd.testing.assert_frame_equal(a.verdicts()[["config", "signal", "verdict"]],
                                  b.verdicts()[["config", "signal", "verdict"]])
    sa, sb = trajectory.scalars(a), trajectory.scalars(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert math.isclose(sa[k], sb[k], rel_tol=1e-5, abs_tol=1e-6), k
    # the nudge changed the policy: the first probe is another policy's diagnosis
    assert not np.allclose(Run.load(probed["first"]).tokens["lp_s"].to_numpy(float)[:len(ta)],
                           ta["lp_s"].to_numpy(float)[:len(Run.load(probed["first"]).tokens)])


def _pass_at_k(n: int, c: int, k: int) -> float:
    """1 - P(k draws without replacement all wrong), by counting subsets."""
    subsets = list(combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.slow
def test_logged_numbers_equal_explicit_loops_over_the_probe_tables(probed):
    run = Run.load(probed["second"])
    s = trajectory.scalars(run)
    tokens, rollouts = run.tokens, run.table("rollouts")
    for config in ("teacher", "self_full"):
        rows = tokens[tokens["config"] == config]
        for col in ("r_opd", "kl_rev", "jsd"):
            vals = [float(v) for v in rows[col] if not math.isnan(float(v))]
            assert math.isclose(s[f"diagnosis/{config}/{col}"], sum(vals) / len(vals), rel_tol=1e-6, abs_tol=1e-9)
    h = [float(v) for v in tokens[tokens["config"] == "teacher"]["h_s"]]
    assert math.isclose(s["diagnosis/student/entropy"], sum(h) / len(h), rel_tol=1e-6, abs_tol=1e-9)
    lengths = [int(x) for x in rollouts["length"]]
    assert math.isclose(s["diagnosis/student/completion_length"], sum(lengths) / len(lengths))
    per_problem = {}
    for pid, ok in zip(rollouts["problem_id"], rollouts["correct"]):
        per_problem.setdefault(pid, []).append(bool(ok))
    p1 = sum(_pass_at_k(len(v), sum(v), 1) for v in per_problem.values()) / len(per_problem)
    p3 = sum(_pass_at_k(len(v), sum(v), 3) for v in per_problem.values()) / len(per_problem)
    assert math.isclose(s["diagnosis/student/pass@1"], p1, abs_tol=1e-12)
    assert math.isclose(s["diagnosis/student/pass@k_headroom"], p3 - p1, abs_tol=1e-12)
    codes = {"helps": 1.0, "unclear": 0.0, "hurts": -1.0}
    for r in run.verdicts().itertuples():
        assert s[f"diagnosis/{r.config}/verdict/{r.signal}"] == codes[r.verdict]
    for r in run.predictions().frame().itertuples():
        assert math.isclose(s[f"diagnosis/{r.config}/predicted_gain/{r.method}"], r.predicted_gain)
    assert all(math.isfinite(v) for v in s.values())


@pytest.mark.slow
def test_a_folder_of_probes_is_a_trajectory(probed, tmp_path):
    root = probed["first"].parent
    assert [step for step, _ in trajectory.probes(root)] == [0, 2]
    f = trajectory.frame(root)
    assert sorted(f["step"].unique()) == [0, 2]
    for step, d in trajectory.probes(root):
        got = dict(zip(f[f["step"] == step]["name"], f[f["step"] == step]["value"]))
        assert got == trajectory.scalars(Run.load(d))
    assert set(f["config"]) == {"teacher", "self_full", "student"}
    report = trajectory.write_report(Run.load(probed["first"]), 1, 0)
    assert report.read_text().count("<html") == 1 and "Probe at step 0" in report.read_text()
    # a finished probe is kept: a resumed run does not redo it
    before = (probed["first"] / "summary.json").stat().st_mtime_ns
    cfg = probe_config(from_dict(config_dict()), SPEC, None, "cpu")
    assert run_probe(cfg, root, 0, probed["policy"]) == probed["first"]
    assert (probed["first"] / "summary.json").stat().st_mtime_ns == before
    change = trajectory.changes(f)
    for name, group in f.groupby("name"):  # first and last probe by step, explicitly
        rows = sorted(zip(group["step"], group["value"]))
        got = change[change["name"] == name].iloc[0]
        assert (got["first_step"], got["last_step"]) == (rows[0][0], rows[-1][0])
        assert math.isclose(got["change"], rows[-1][1] - rows[0][1], abs_tol=1e-12)
    with pytest.raises(OpsdError, match="holds no finished probe"):
        trajectory.frame(tmp_path)
    with pytest.raises(OpsdError, match="is not a folder of probe runs"):
        trajectory.frame(tmp_path / "missing")


@pytest.mark.slow
def test_a_probe_puts_the_policy_and_the_random_streams_back(tmp_path):
    """A trainer's policy: train mode, KV cache off, an autocast wrapper as its forward (accelerate's mixed
    precision). The probe runs the model's own forward and leaves all of it, and every random stream, as it was."""
    import random
    import types

    policy = AutoModelForCausalLM.from_pretrained(ZOO / "student", dtype=torch.float32).train()
    policy.config.use_cache = False

    def wrapper(self, *a, **k):
        raise AssertionError("the probe ran the trainer's forward wrapper")

    policy.forward = types.MethodType(wrapper, policy)
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    before = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    cfg = probe_config(from_dict(config_dict()), ProbeSpec(steps=1, problems=1, num_samples=2,
                                                           max_completion_length=8, verdict=False), ["teacher"], "cpu")
    out = run_probe(cfg, tmp_path, 0, policy)
    assert Run.load(out).tokens["lp_s"].notna().all()
    assert policy.training and policy.config.use_cache is False and policy.forward.__func__ is wrapper
    assert not hasattr(policy, "opsd_scored_rows")
    assert torch.equal(torch.get_rng_state(), before[0]) and (np.random.get_state()[1] == before[1]).all()
    assert random.getstate() == before[2]
