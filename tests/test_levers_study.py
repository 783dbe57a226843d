"""The lever study's RESULTS.md is exactly what report_levers.py renders from the committed analysis JSON."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.validity.levers import report_levers

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "validity" / "levers"


def test_results_render_from_the_committed_analysis():
    analysis = json.loads((HERE / "levers_analysis.json").read_text())
    assert (HERE / "RESULTS.md").read_text() == report_levers.render(analysis)


def test_bootstrap_interval_against_an_explicit_loop():
    import numpy as np

    values = np.array([0.25, -0.5, 0.0, 1.0, 0.75])
    got = report_levers.boot(values)
    rng = np.random.default_rng(report_levers.SEED)
    idx = rng.integers(0, len(values), (report_levers.N_BOOT, len(values)))
    means = sorted(sum(values[j] for j in row) / len(row) for row in idx)
    assert got["estimate"] == sum(values) / 5
    assert abs(got["lo"] - np.percentile(means, 2.5)) < 1e-12 and abs(got["hi"] - np.percentile(means, 97.5)) < 1e-12
