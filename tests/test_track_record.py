"""The track record's realised gains with intervals (``opsd_diag.scoreboard``), against explicit loops, fast."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from opsd_diag import jobs
from opsd_diag.scoreboard import gain_interval, scoreboard


def _reference(start: list, end: list, n_boot: int, seed: int) -> tuple[float, float, float]:
    """Slow and obvious: float64, one problem at a time, the same prompt draws as the library."""
    d = []
    for (i, n0, c0), (j, n1, c1) in zip(start, end):
        assert i == j
        d.append(c1 / n1 - c0 / n0)
    draws = np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))
    reps = []
    for row in draws:
        total = 0.0
        for k in row:
            total += d[k]
        reps.append(total / len(row))
    lo, hi = np.quantile(np.array(reps), [0.025, 0.975])
    return sum(d) / len(d), float(lo), float(hi)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gain_interval_matches_a_slow_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 30))
    start = [[i, 4, int(rng.integers(0, 5))] for i in range(n)]
    end = [[i, 4, int(rng.integers(0, 5))] for i in range(n)]
    est, lo, hi, m = gain_interval({"per_problem": start}, {"per_problem": end}, n_boot=300, seed=0)
    ref = _reference(start, end, 300, 0)
    assert m == n and (est, lo, hi) == pytest.approx(ref, abs=1e-12)
    assert lo <= est <= hi


def test_gain_interval_without_per_problem_counts_is_missing():
    assert math.isnan(gain_interval({"pass@1": 0.2}, {"pass@1": 0.3})[1])
    assert gain_interval(None, {"per_problem": [[0, 1, 1]]})[3] == 0
    assert gain_interval({"per_problem": "torn"}, {"per_problem": [[0, 1, 1]]})[3] == 0


def _run(root: Path, name: str, verdict: str, score: float, start: list, end: list) -> None:
    run = root / name
    run.mkdir(parents=True)
    recs = [{"kind": "eval", "step": 0, "pass@1": float(np.mean([c / n for _, n, c in start])), "per_problem": start},
            {"kind": "train", "step": 1, "loss": 1.0},
            {"kind": "eval", "step": 1, "pass@1": float(np.mean([c / n for _, n, c in end])), "per_problem": end}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (run / "prediction.json").write_text(json.dumps({"config": "c", "signal": "r_opd", "verdict": verdict,
                                                     "score": score}))
    jobs.write_status(run, "finished", owner=False, kind="training", step=1, max_steps=1)


def test_a_verdict_is_judged_only_where_the_interval_excludes_zero(tmp_path):
    """Issue 23: 'verdict accuracy 0%' from one run whose -0.016 change had no interval."""
    flat = [[i, 4, 2] for i in range(40)]
    up = [[i, 4, 4] for i in range(40)]
    down = [[i, 4, 0] for i in range(40)]
    noisy = [[i, 4, 2 + (1 if i % 2 else -1)] for i in range(40)]  # mean change 0, interval around it
    _run(tmp_path, "helps-up", "helps", 0.2, flat, up)  # right
    _run(tmp_path, "hurts-up", "hurts", 0.1, flat, up)  # wrong
    _run(tmp_path, "hurts-down", "hurts", -0.1, flat, down)  # right
    _run(tmp_path, "helps-noise", "helps", 0.3, flat, noisy)  # no clear change: neither
    _run(tmp_path, "unclear-up", "unclear", 0.0, flat, up)  # not a decisive verdict: neither
    board = scoreboard(tmp_path)
    f = board.frame.set_index(board.frame["run"].map(lambda p: Path(p).name))
    assert f.loc["helps-up", "outcome"] == "improves" and f.loc["hurts-down", "outcome"] == "degrades"
    assert f.loc["helps-noise", "outcome"] == "no clear change"
    assert f.loc["helps-noise", "gain_lo"] < 0 < f.loc["helps-noise", "gain_hi"]
    assert (board.n_judged, board.n_right) == (3, 2) and board.verdict_accuracy == pytest.approx(2 / 3)
