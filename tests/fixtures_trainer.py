"""Fixtures of the trainer tests: a seconds-sized toy world and configs over it.

Random-initialised Qwen3-shaped models of the zoo's ``ci`` size on the zoo tokenizer, problems from
the toy task. Nothing here learns anything: the real-learning tests use sample_data/models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from opsd_diag.io import templates
from opsd_diag.zoo import task
from opsd_diag.zoo.build import SIZES, new_model
from opsd_diag.zoo.tokenizer import train_tokenizer


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, above all on a shared machine; restored afterwards."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def build_world(root: Path) -> Path:
    root = Path(root)
    pool = task.generate(120, 7)
    corpus = [task.reasoning_response(p) for p in pool] + [
        templates.render(templates.resolve(n), templates.context_fields(p)) for p in pool[:30]
        for n in templates.BUILTIN] + ["user\n", "assistant\n", "system\n"] * 30
    tok = train_tokenizer(corpus, vocab_size=300)
    for name, shape, seed in (("student", SIZES["ci"].small, 1), ("teacher", SIZES["ci"].big, 2),
                              ("base", SIZES["ci"].big, 3)):
        model = new_model(tok, shape, seed)
        model.generation_config.eos_token_id = model.config.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    for name, n, seed in (("train", 40, 11), ("dev", 6, 12)):
        rows = task.generate(n, seed, prefix=name[:2])
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def config_dict(world: Path, **training) -> dict:
    world = Path(world)
    train = {"method": "opd", "max_steps": 2, "per_device_train_batch_size": 2, "learning_rate": 1e-3,
             "chunk_size": 7,  # several LM-head chunks per micro-batch: exercises the chunked backward
             "eval": {"data": None}, "report_to": "none", **training}
    return {
        "student": {"model": str(world / "student")},
        "base": {"model": str(world / "base")},
        "teachers": [{"name": "teacher", "model": str(world / "teacher")},
                     {"name": "self_full", "context": "full_solution"}],
        "data": {"path": str(world / "train.jsonl")},
        "sampling": {"temperature": 1.0, "max_completion_length": 8},
        "analysis": {"checker": "toy"},
        "training": train,
    }


def write_config(path: Path, world: Path, **training) -> Path:
    Path(path).write_text(yaml.safe_dump(config_dict(world, **training), sort_keys=False))
    return Path(path)


def read_metrics(run_dir: Path, kind: str = "train") -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


TIME_KEYS = ("tokens_per_s", "step_time_s", "sampling_s", "elapsed_s", "eta_s")


def without_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIME_KEYS} for r in records]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"))

