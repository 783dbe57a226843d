"""The lookahead (engine.lookahead, core.lookahead) and predictor v2's model (core.predictor) against slow,
obvious references: float64 loops, per-row forwards without chunking or padding, explicit ridge algebra."""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch
import yaml
from fixtures_trainer import build_world

from opsd_diag.core import lookahead as maths
from opsd_diag.core import predictor
from opsd_diag.core.losses import token_loss
from opsd_diag.engine import lookahead
from opsd_diag.engine.train_step import Roles
from opsd_diag.io import store
from opsd_diag.config.spec import from_dict
from opsd_diag.config.settings import LossSettings, derive_seed


# --------------------------------------------------------------------------------------------- maths

def test_success_change_is_the_importance_weighted_mean_minus_the_plain_mean():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 7))
        d = rng.normal(0, 3, n)
        c = rng.integers(0, 2, n).astype(float)
        w = [math.exp(x) for x in d]
        want = sum(wi * ci for wi, ci in zip(w, c)) / sum(w) - sum(c) / n
        assert maths.success_change(d, c) == pytest.approx(want, abs=1e-12)
    assert maths.success_change(np.zeros(4), np.array([1, 0, 0, 1.0])) == 0.0  # pi_1 = pi_0: no change
    assert maths.success_change(np.array([800.0, 0.0]), np.array([1.0, 0.0])) == pytest.approx(0.5)  # no overflow


def test_loglik_gap_needs_both_kinds():
    assert maths.loglik_gap([0.1, 0.3, -0.2], [1, 1, 0]) == pytest.approx(0.2 - -0.2)
    assert math.isnan(maths.loglik_gap([0.1, 0.3], [1, 1]))
    assert math.isnan(maths.loglik_gap([0.1, 0.3], [0, 0]))


def test_kl_per_token_against_a_float64_loop():
    g = torch.Generator().manual_seed(0)
    a = torch.log_softmax(torch.randn(5, 11, generator=g, dtype=torch.float64), -1)
    b = torch.log_softmax(torch.randn(5, 11, generator=g, dtype=torch.float64), -1)
    got = maths.kl_per_token(a, b)
    for n in range(5):
        want = sum(math.exp(a[n, v]) * (a[n, v] - b[n, v]) for v in range(11))
        assert float(got[n]) == pytest.approx(want, abs=1e-12)
    assert torch.allclose(maths.kl_per_token(a, a), torch.zeros(5, dtype=torch.float64))


def test_ridge_against_the_augmented_least_squares_reference():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 4)) * [1, 10, 0.1, 3] + [0, 5, 0, -2]
    X[3, 1] = np.nan  # imputed with the column mean
    y = rng.normal(size=30)
    for alpha in (0.0, 1.0, 7.5):
        m = predictor.fit(X, y, ["a", "b", "c", "d"], alpha)
        mean = [np.mean([v for v in X[:, j] if not np.isnan(v)]) for j in range(4)]
        sd = [np.std([v for v in X[:, j] if not np.isnan(v)]) for j in range(4)]
        Z = np.array([[0.0 if np.isnan(X[i, j]) else (X[i, j] - mean[j]) / sd[j] for j in range(4)] for i in range(30)])
        A = np.vstack([Z, math.sqrt(alpha) * np.eye(4)])
        b = np.concatenate([y - y.mean(), np.zeros(4)])
        want = np.linalg.lstsq(A, b, rcond=None)[0]
        assert np.allclose(m["coef"], want, atol=1e-10)
        pred = predictor.predict(m, X)
        assert np.allclose(pred, y.mean() + Z @ want, atol=1e-10)
        assert np.allclose(predictor.contributions(m, X).sum(1), pred - m["intercept"], atol=1e-12)


def test_verdict_and_band():
    assert predictor.verdict(0.03, 0.2, 0.02) == "helps"
    assert predictor.verdict(-0.2, -0.03, 0.02) == "hurts"
    assert predictor.verdict(-0.01, 0.2, 0.02) == "unclear"
    assert predictor.residual_band(list(range(101))) == pytest.approx((2.5, 97.5))


# -------------------------------------------------------------------------------------------- engine

@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    from opsd_diag.engine.diagnose import run_diagnosis

    world = build_world(tmp_path_factory.mktemp("world"))
    cfg = from_dict({
        "student": {"model": str(world / "student")}, "base": {"model": str(world / "base")},
        "teachers": [{"name": "teacher", "model": str(world / "teacher")},
                     {"name": "self_full", "context": "full_solution"}],
        "data": {"path": str(world / "train.jsonl"), "limit": 8},
        "sampling": {"num_samples": 3, "max_completion_length": 6, "teacher_samples": 0},
        "analysis": {"bootstrap": 20, "checker": "toy"}, "shard_size": 4,
        "lookahead": {"methods": ["opd", "jsd", "opd2", "exopd"], "steps": 3, "rollouts_per_step": 4,
                      "learning_rate": 1e-2, "clip": 1.0}})
    out = run_diagnosis(cfg, tmp_path_factory.mktemp("run") / "run", show_progress=False)
    return cfg, out


def _naive_logp(model, prompt, completion, temperature):
    """[L, V] float64 log-probs at the completion's positions: one unpadded forward of prompt + completion."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) + len(completion) - 1].double()
    return torch.log_softmax(logits / temperature, -1)


def test_lookahead_equals_naive_steps_and_a_float64_measurement(diagnosed):
    from opsd_diag.io.models import load_spec

    cfg, out = diagnosed
    la = store.read_json(out / "summary.json")["lookahead"]
    assert la["status"] == "ok"
    assert set(la["configs"]) == {"teacher", "self_full"}
    for per in la["configs"].values():
        assert set(per) == {"opd", "jsd", "opd2", "exopd"}
        for r in per.values():
            assert all(math.isfinite(r[k]["estimate"]) for k in ("dv", "kl"))
            assert r["kl"]["estimate"] > 0
    tok, student = load_spec(cfg.student, "cpu")
    _, teacher = load_spec(cfg.student.model_copy(update={"model": cfg.teachers[0].model}), "cpu")
    before = [p.detach().clone() for p in student.parameters()]
    s, clip = lookahead.settings(cfg)
    rollouts = store.read_table(out, "rollouts")
    step_rows, measure_rows = lookahead.split(rollouts)
    assert set(step_rows["problem_index"] % 2) == {0} and set(measure_rows["problem_index"] % 2) == {1}
    loss = LossSettings(method="opd", temperature=1.0, beta=0.5, centering=None, exopd_lambda=1.0, clip=clip)

    def roles_for(trainable):
        return Roles(trainable, None, "external", teacher, None, student)

    stepped, cost = lookahead.take_steps(student, roles_for, step_rows, "teacher", loss, None, s, tok.pad_token_id)
    assert all(torch.equal(a, b) for a, b in zip(before, student.parameters()))  # the student is never changed

    # the slow reference: per-row forwards, the loss of core.losses on all positions at once, AdamW by hand-rolled loop
    ref = copy.deepcopy(student).float().train().requires_grad_(True)
    opt = torch.optim.AdamW(ref.parameters(), lr=s.learning_rate, betas=s.betas, eps=s.eps, weight_decay=s.weight_decay)
    order = list(range(len(step_rows)))
    random.Random(derive_seed(s.seed, 23)).shuffle(order)
    trained = 0
    for step in range(s.steps):
        rows = step_rows.iloc[[order[(step * s.rollouts_per_step + i) % len(order)] for i in range(s.rollouts_per_step)]]
        s_logits, t_logits, ids = [], [], []
        for _, r in rows.iterrows():
            p, c, tp = [list(map(int, r[k])) for k in ("prompt_ids.student", "completion_ids", "prompt_ids.teacher")]
            s_logits.append(ref(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:len(p) + len(c) - 1])
            with torch.no_grad():
                t_logits.append(teacher(input_ids=torch.tensor([tp + c])).logits[0, len(tp) - 1:len(tp) + len(c) - 1])
            ids += c
        per_token, _ = token_loss(torch.cat(s_logits).float(), torch.tensor(ids), loss,
                                  teacher_logits=torch.cat(t_logits).float())
        (per_token.sum() / len(ids)).backward()
        torch.nn.utils.clip_grad_norm_(list(ref.parameters()), s.max_grad_norm)
        opt.step()
        opt.zero_grad()
        trained += len(ids)
    assert cost["trained_tokens"] == trained
    for a, b in zip(stepped.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=2e-5), "the lookahead's step differs from the naive reference"

    # the measurement, in float64 loops over rows, prompts and the vocabulary
    m = lookahead.measure_initial(student, measure_rows, tok.pad_token_id, s.sampling_temperature)
    got = lookahead.measure(stepped, m, tok.pad_token_id, s.sampling_temperature, n_boot=20, seed=0)
    seq, per_tok, kls, by_prompt = [], [], [], {}
    with torch.no_grad():
        for i, r in measure_rows.iterrows():
            p, c = list(map(int, r["prompt_ids.student"])), list(map(int, r["completion_ids"]))
            new, old = _naive_logp(stepped, p, c, 1.0), _naive_logp(student, p, c, 1.0)
            d = [float(new[t, c[t]] - old[t, c[t]]) for t in range(len(c))]
            seq.append(sum(d))
            per_tok.append(sum(d) / len(d))
            for t in range(len(c)):
                kls.append(sum(math.exp(new[t, v]) * (new[t, v] - old[t, v]) for v in range(new.shape[1])))
            by_prompt.setdefault(r["problem_id"], []).append(i)
    dv, dll = [], []
    for idx in by_prompt.values():
        c = [float(measure_rows.loc[i, "correct"]) for i in idx]
        w = [math.exp(seq[i]) for i in idx]
        dv.append(sum(a * b for a, b in zip(w, c)) / sum(w) - sum(c) / len(c))
        good = [per_tok[i] for i in idx if measure_rows.loc[i, "correct"]]
        bad = [per_tok[i] for i in idx if not measure_rows.loc[i, "correct"]]
        if good and bad:
            dll.append(sum(good) / len(good) - sum(bad) / len(bad))
    assert got["dv"]["estimate"] == pytest.approx(sum(dv) / len(dv), abs=1e-5)
    assert got["kl"]["estimate"] == pytest.approx(sum(kls) / len(kls), rel=1e-3, abs=1e-7)
    if dll:
        assert got["dll"]["estimate"] == pytest.approx(sum(dll) / len(dll), abs=1e-5)
    assert got["measured_tokens"] == sum(len(c) for c in measure_rows["completion_ids"])


def test_lookahead_config_section_is_checked():
    from opsd_diag.errors import OpsdError

    base = {"student": {"model": "s"}, "teachers": [{"name": "t", "context": "full_solution"}], "data": {"path": "d"}}
    with pytest.raises(OpsdError, match="lookahead"):
        from_dict({**base, "lookahead": {"methods": ["sft"]}})
    with pytest.raises(OpsdError, match="lookahead"):
        from_dict({**base, "lookahead": {"steps": 0}})
    assert yaml.safe_load(yaml.safe_dump(from_dict({**base, "lookahead": {}}).model_dump(mode="json")))["lookahead"]["steps"] == 4
