"""benchmarks/gpu_check.sh, the one-shot GPU check: its budget, its preflight and its failure isolation, on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"


def _run(*args, env=None, timeout=600):
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_the_caps_fit_one_budget_and_every_part_is_killable():
    done = _run("--plan")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    parts = [x.split()[0] for x in lines if " cap " in x]
    assert parts == ["decode", "train-scale", "scoring-reference", "scoring-fused", "scoring-compiled", "memory",
                     "train-methods", "decode-hf", "quickstart"]
    total = int(lines[-1].split("sum ")[1].split("s")[0])
    assert total == 15 + 3 * len(parts) + sum(int(x.split("cap")[1].split("s")[0]) for x in lines if " cap " in x)
    assert total <= 800 and "of a 800s budget (cuda)" in lines[-1]
    halves = [_run("--plan", env={"BUDGET": "575", "PARTS": p}) for p in ("decode train", "scoring memory quickstart")]
    assert all(h.returncode == 0 for h in halves), [h.stderr for h in halves]  # each fits one 600 s device call
    assert sorted(x.split()[0] for h in halves for x in h.stdout.splitlines() if " cap " in x) == sorted(parts)
    text = SCRIPT.read_text()
    assert 'timeout -k "$GRACE" "$cap"' in text and "loop._save = lambda" in text  # SIGKILL after the grace; no save
    over = _run("--plan", env={"BUDGET": "300"})
    assert over.returncode == 2 and "over the 300s budget" in over.stderr


def test_the_preflight_refuses_wheels_for_another_python(tmp_path):
    """No pydantic and wheels built for another Python: one error line, exit 2, before any part runs."""
    py = tmp_path / "py"  # a Python without site-packages: `import pydantic` fails, as on the GPU machine
    py.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    py.chmod(0o755)
    wheels = tmp_path / "whl"
    wheels.mkdir()
    env = {"PYTHON": str(py), "WHEELS": str(wheels), "OUT": str(tmp_path / "out")}
    empty = _run("--smoke", env=env)
    assert empty.returncode == 2 and "holds no wheels" in empty.stderr and "gpu_wheels.sh" in empty.stderr
    (wheels / "pydantic_core-2.33.2-cp399-cp399-manylinux_2_17_x86_64.whl").write_bytes(b"")
    wrong = _run("--smoke", env=env)
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert wrong.stderr.startswith("gpu_check: error: ") and f"not for this Python ({tag})" in wrong.stderr
    assert "PYVER=%d.%d" % sys.version_info[:2] in wrong.stderr
    assert "###" not in wrong.stdout  # nothing ran
    assert _run("--smoke", "--bogus").returncode == 2


@pytest.mark.slow
def test_an_injected_failure_is_listed_and_the_other_parts_still_run(tmp_path):
    """--smoke with two parts, the first made to fail: the second runs to the end, the summary lists both
    (~30 s on an idle 2-core CPU)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    done = _run("--smoke", "--inject-failure", "decode",
                env={"PARTS": "decode memory", "OUT": str(out), "TMPDIR": str(tmp)})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    summary = (out / "gpu_check.log.summary").read_text().splitlines()
    assert any(x.startswith("### decode: exit 3") for x in summary), summary
    assert any(x.startswith("### memory: exit 0") for x in summary), summary
    # "decode" names both decode parts, as "train" names both train parts
    assert "FAILED parts: decode decode-hf" in summary and "INJECTED: --inject-failure decode" in summary
    results = [x for x in summary if x.startswith("RESULT")]
    assert any("extra/naive" in x for x in results)
    assert results and all("target" in x and x.rstrip().endswith(("PASS", "FAIL")) for x in results), results
    assert list(tmp.iterdir()) == []  # every temporary file of the run removed
