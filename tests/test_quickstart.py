"""The bundled example end to end on the shipped tiny models (what `make app` shows first)."""

import subprocess
import sys

import pytest
from conftest import REPO

from opsd_diag.run import Run

pytestmark = pytest.mark.slow  # runs models end to end: `make test` only, not `make test-fast`


def test_quickstart_run(tmp_path):
    out = tmp_path / "quickstart"
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", "sample_data/configs/quickstart.yaml",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "student accuracy" in r.stdout and "self_full_solution" in r.stdout
    run = Run.load(out)
    s = run.summary
    assert set(run.configs) == {"teacher", "self_full_solution", "self_answer_only", "self_partial_solution",
                                "self_hint"}
    assert 0 <= s.student_accuracy.estimate <= 1
    for entry in s.configs.values():
        assert entry.teacher_accuracy.estimate is not None and entry.overall.n_tokens > 0
    assert len(run.tokens) == 5 * run.rollouts["length"].sum()
    # the predictor ran: every config x signal has a verdict, ranked verdict first
    assert s.ideal.status == "ok" and "verdicts, ranked" in r.stdout
    order = {"helps": 0, "unclear": 1, "hurts": 2}
    ranking = run.verdicts()
    assert set(ranking["config"]) == set(run.configs) and len(ranking) == 5 * len(s.verdicts["teacher"])
    assert list(ranking["verdict"].map(order)) == sorted(ranking["verdict"].map(order))
