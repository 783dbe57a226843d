"""Shared fixtures: a seconds-sized random zoo (plumbing tests) and paths of the bundled one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "sample_data" / "models"
# A deliberately harmful privileged context: the same wrong solution for every problem (the config the
# predictor must call `hurts`, and that must lower accuracy when trained on).
WRONG_SOLUTION = ("{prompt}\n\nA correct solution, for reference:\na) 3+4=7\nb) 7*2=4\nc) 4-1=3\nd) 3+5=8\n"
                  "Answer: 8\n\nNow solve the problem yourself, step by step.")


@pytest.fixture(scope="session")
def ci_zoo(tmp_path_factory) -> Path:
    """Tokenizer + random tiny base/teacher/student built by the real build code (size 'ci')."""
    from opsd_diag.zoo.build import build

    out = tmp_path_factory.mktemp("zoo") / "models"
    build(out, size="ci", seed=0, log=lambda *a: None)
    return out


def doc_text(path: str) -> str:
    """A repository text file with its whitespace runs collapsed, as the docs' quotes are checked against it."""
    return " ".join((REPO / path).read_text(encoding="utf-8").split())


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def problems_file(tmp_path) -> Path:
    from opsd_diag.zoo import task

    return write_jsonl(tmp_path / "problems.jsonl", task.generate(6, 11))


def tiny_config(zoo: Path, data_file: Path, **over) -> dict:
    """A small diagnosis config over a zoo directory, as a plain dict (tests tweak it)."""
    cfg = {
        "student": {"model": str(zoo / "student")},
        "base": {"model": str(zoo / "base")},
        "teachers": [{"name": "teacher", "model": str(zoo / "teacher")},
                     {"name": "self_full", "context": "full_solution"}],
        "data": {"path": str(data_file)},
        "sampling": {"num_samples": 2, "max_completion_length": 10, "teacher_samples": 1, "batch_size": 8},
        "scoring": {"batch_size": 3, "chunk_size": 7},
        "analysis": {"bootstrap": 20, "checker": "toy"},
        "shard_size": 2,
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


@pytest.fixture(autouse=True)
def stop_signals_restored():
    """A test (or the code it runs in-process: a trainer, a callback) leaves Ctrl+C and SIGTERM as it found them;
    a handler left behind would make every later stop test in this process pass or fail for the wrong reason."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    left = {signal.Signals(s).name: h for s, h in before.items() if signal.getsignal(s) is not h}
    for s, h in before.items():
        signal.signal(s, h)
    assert not left, f"this test left stop-signal handlers changed: {left}"
