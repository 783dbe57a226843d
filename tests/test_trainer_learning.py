"""Real learning with the bundled toy models: short opd and opsd runs raise held-out accuracy.

Needs the trained zoo (sample_data/models, sample_data/problems; ``make zoo``); skipped without it.
Fixed seeds, one thread, about 1.5 minutes for both on 2 shared cores.

Distillation can only raise accuracy where the teacher is better than the student, so each test
trains and evaluates on the difficulty level where the zoo's model card (build_report.json) shows
the largest teacher advantage, and fails with that table if there is no level with at least 0.15:

- opd: the external toy teacher vs the student alone;
- opsd: the student shown the full solution (``full_solution`` context) vs the student alone.

Training prompts: train.jsonl of that level. Held out: dev.jsonl + test.jsonl of that level (never
trained on). Accuracy: pass@1 over 8 samples per problem at temperature 1 (the unbiased estimator),
measured by the trainer's own evaluation at step 0 and after the last step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import WRONG_SOLUTION
from fixtures_trainer import one_thread  # noqa: F401 (fixture)

from trainer import cli

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "sample_data" / "models"
PROBLEMS = ROOT / "sample_data" / "problems"
REPORT = MODELS / "build_report.json"
# Absolute pass@1 gains required (about 2.5 standard errors of a difference of two 158 x 8-sample
# estimates). Measured on the shipped zoo (level 4, seed 0), the evaluation sampling with the rollouts' decode loop
# (engine.samplers, issue 31): opd 0.280 -> 0.357, opsd 0.280 -> 0.380; with HF generate before it: opd 0.288 -> 0.360,
# opsd 0.288 -> 0.377 (pass@8 0.66 -> 0.78 / 0.85). The same distribution, another random stream once a row ends.
MARGIN = {"opd": 0.05, "opsd": 0.05}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not REPORT.is_file() or not (PROBLEMS / "train.jsonl").is_file()
                       or not all((MODELS / m / "model.safetensors").is_file() for m in ("student", "teacher")),
                       reason="the trained toy models are not built (make zoo)"),
]


def _level(better: str) -> int:
    """The difficulty level where the model card's ``better`` row beats the student alone the most."""
    acc = json.loads(REPORT.read_text())["accuracy"]
    gaps = {lv: acc[better][lv] - acc["student"][lv] for lv in acc["student"] if lv != "all"}
    level, gap = max(gaps.items(), key=lambda kv: kv[1])
    assert gap >= 0.15, (f"the zoo has no level where '{better}' beats the student by 0.15 ({gaps}, from {REPORT}): "
                         "distillation cannot raise accuracy there; rebuild the zoo")
    return int(level.split()[-1])


def _split(tmp_path: Path, level: int) -> tuple[Path, Path]:
    def rows(names):
        return [r for n in names for r in map(json.loads, (PROBLEMS / f"{n}.jsonl").read_text().splitlines())
                if r["meta"]["difficulty"] == level]

    train, held_out = tmp_path / "train.jsonl", tmp_path / "held_out.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows(["train"])))
    held_out.write_text("".join(json.dumps(r) + "\n" for r in rows(["dev", "test"])))
    return train, held_out


def _run(tmp_path: Path, level: int, teacher: dict, training: dict) -> tuple[float, float]:
    train, held_out = _split(tmp_path, level)
    cfg = {
        "student": {"model": str(MODELS / "student")},
        "teachers": [teacher],
        "data": {"path": str(train)},
        "sampling": {"temperature": 1.0, "max_completion_length": 72},
        "analysis": {"checker": "toy"},
        "training": {"max_steps": 40, "per_device_train_batch_size": 16, "learning_rate": 3e-4, "warmup_steps": 5,
                     "report_to": "none", "seed": 0,
                     "eval": {"data": {"path": str(held_out)}, "num_samples": 8, "pass_k": [1, 8], "batch_size": 64,
                              "kl_to_initial": False},
                     **training},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli.main([str(path), "--out", str(tmp_path / "run")]) == 0
    evals = [r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
             if r["kind"] == "eval"]
    assert [e["step"] for e in evals] == [0, 40]
    return evals[0]["pass@1"], evals[-1]["pass@1"]


def test_opd_from_the_toy_teacher_raises_held_out_accuracy(tmp_path):
    level = _level("teacher")
    # clip: a sampled token the teacher finds near-impossible (r_opd ~ -20) would otherwise dominate the step
    before, after = _run(tmp_path, level, {"name": "teacher", "model": str(MODELS / "teacher")},
                         {"method": "opd", "clip": 1.0})
    print(f"opd, level {level}: held-out pass@1 {before:.3f} -> {after:.3f}")
    assert after >= before + MARGIN["opd"], (level, before, after)


def test_opsd_with_the_full_solution_context_raises_held_out_accuracy(tmp_path):
    level = _level("student + full solution")
    before, after = _run(tmp_path, level, {"name": "self_full_solution", "context": "full_solution"},
                         {"method": "opsd", "loss": "jsd", "teacher_weights": "frozen"})
    print(f"opsd full_solution, level {level}: held-out pass@1 {before:.3f} -> {after:.3f}")
    assert after >= before + MARGIN["opsd"], (level, before, after)


def test_opsd_with_a_wrong_solution_lowers_held_out_accuracy(tmp_path):
    """The other side of the verdict check: the config the predictor calls `hurts` on the zoo
    (tests/test_ideal.py) lowers accuracy when trained on, where the `helps` ones raise it.
    Measured: 0.288 -> 0.091."""
    level = _level("student + full solution")
    before, after = _run(tmp_path, level, {"name": "self_wrong_solution", "context": WRONG_SOLUTION},
                         {"method": "opsd", "loss": "jsd", "teacher_weights": "frozen"})
    print(f"opsd wrong solution, level {level}: held-out pass@1 {before:.3f} -> {after:.3f}")
    assert after <= before - MARGIN["opsd"], (level, before, after)
