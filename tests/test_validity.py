"""The predictive-validity study (benchmarks/validity, issue 11).

- Statistics: each function of benchmarks/validity/stats.py against a slow, obvious reference on
  small inputs.
- The plan: the default plan is what issue 11 asks for (>= 10 configurations, two methods each
  mapped to a diagnosed signal, >= 3 seeds, disjoint splits); the derived contexts are what they say.
- End to end: the ``tiny`` plan runs every diagnosis, training run and evaluation through the CLIs
  into a temporary folder (about 1-2 minutes on 2 cores), resumes as a no-op, and the report's numbers
  are recomputed here from the stored files with plain json/pandas reads.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import stats  # noqa: E402

# ------------------------------------------------------------------------------------------ statistics


def slow_pass_at_k(n: int, c: int, k: int) -> float:
    draws = list(itertools.combinations([True] * c + [False] * (n - c), k))
    return sum(any(d) for d in draws) / len(draws)


def test_pass_at_k_matches_enumeration():
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert stats.pass_at_k(n, c, k) == pytest.approx(slow_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
    assert math.isnan(stats.pass_at_k(2, 1, 3))


def slow_spearman(x, y) -> float:
    def rank(v):  # 1 + number below + half the ties
        return [1 + sum(w < a for w in v) + (sum(w == a for w in v) - 1) / 2 for a in v]

    rx, ry = rank(list(x)), rank(list(y))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den


def test_spearman_with_ties_matches_slow_reference_and_scipy():
    rng = np.random.default_rng(3)
    for n in (3, 5, 9, 20):
        for _ in range(20):
            x = rng.integers(-2, 3, size=n).astype(float)  # many ties (like the verdict's -1/0/+1)
            y = rng.normal(size=n).round(1)
            if np.ptp(x) == 0 or np.ptp(y) == 0:
                assert math.isnan(stats.spearman(x, y))
                continue
            assert stats.spearman(x, y) == pytest.approx(slow_spearman(x, y), abs=1e-12)
            assert stats.spearman(x, y) == pytest.approx(sps.spearmanr(x, y)[0], abs=1e-12)
    assert math.isnan(stats.spearman([1, 2], [3, 4]))


def test_seed_problem_replicates_match_explicit_resampling():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(3, 7))
    weights = rng.integers(1, 9, size=(3, 7)).astype(float)
    seed_counts = stats.draw_counts(np.random.default_rng(1), 3, 50)
    prob_counts = stats.draw_counts(np.random.default_rng(2), 7, 50)
    plain = stats.seed_problem_replicates(values, seed_counts, prob_counts)
    ratio = stats.seed_problem_replicates(values, seed_counts, prob_counts, weights=weights)
    for b in range(50):
        seeds = [s for s in range(3) for _ in range(int(seed_counts[b, s]))]
        probs = [p for p in range(7) for _ in range(int(prob_counts[b, p]))]
        cells = [(s, p) for s in seeds for p in probs]
        assert plain[b] == pytest.approx(sum(values[s, p] for s, p in cells) / len(cells), abs=1e-12)
        assert ratio[b] == pytest.approx(sum(values[s, p] * weights[s, p] for s, p in cells)
                                         / sum(weights[s, p] for s, p in cells), abs=1e-12)
    # multiplicities are resamples of the right size
    assert (seed_counts.sum(1) == 3).all() and (prob_counts.sum(1) == 7).all()


def slow_spearman_bootstrap(x, gain, reps, clusters, n_boot, seed, alpha):
    """The cluster bootstrap written out with lists, the same random draws."""
    labels = sorted(set(clusters))
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_boot):
        pick = rng.integers(0, len(labels), size=len(labels))
        xs, ys = [], []
        for i in pick:
            for r in range(len(x)):
                if clusters[r] == labels[i]:
                    xs.append(x[r])
                    ys.append(reps[r][b])
        try:
            out.append(slow_spearman(xs, ys))
        except ZeroDivisionError:
            pass
    lo, hi = np.quantile(out, [alpha / 2, 1 - alpha / 2])
    return slow_spearman(x, gain), lo, hi


def test_spearman_bootstrap_matches_slow_reference():
    rng = np.random.default_rng(5)
    clusters = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e"]
    x = [1, 1, 0, 0, -1, -1, 1, 0, 0.5, -0.5]
    gain = rng.normal(size=10)
    reps = gain[:, None] + 0.3 * rng.normal(size=(10, 300))
    got = stats.spearman_bootstrap(x, gain, reps, clusters, 300, 7, 0.05)
    est, lo, hi = slow_spearman_bootstrap(x, gain, reps, clusters, 300, 7, 0.05)
    assert got["estimate"] == pytest.approx(est, abs=1e-12)
    assert got["lo"] == pytest.approx(lo, abs=1e-9) and got["hi"] == pytest.approx(hi, abs=1e-9)
    assert got["n_rows"] == 10 and got["n_clusters"] == 5


def test_spearman_bootstrap_edge_cases():
    gain = np.arange(6, dtype=float)
    reps = np.repeat(gain[:, None], 100, axis=1)
    perfect = stats.spearman_bootstrap(gain * 2, gain, reps, list("aabbcc"), 100, 0, 0.05)
    assert perfect["estimate"] == pytest.approx(1.0) and perfect["lo"] == pytest.approx(1.0)
    with_nan = stats.spearman_bootstrap([1, np.nan, 3, 4, 5, 6], gain, reps, list("abcdef"), 100, 0, 0.05)
    assert with_nan["n_rows"] == 5 and with_nan["n_left_out"] == 1
    diff = stats.spearman_bootstrap(gain, gain, reps, list("abcdef"), 100, 0, 0.05, other=-gain)
    assert diff["estimate"] == pytest.approx(2.0) and diff["lo"] == pytest.approx(2.0)


def test_verdict_accuracy_counts_decisive_verdicts_against_the_interval():
    verdicts = ["helps", "helps", "helps", "hurts", "hurts", "unclear", "unclear"]
    lo = [0.01, -0.1, -0.3, -0.2, -0.05, 0.02, -0.1]
    hi = [0.20, 0.10, -0.1, -0.01, 0.05, 0.30, 0.1]
    acc = stats.verdict_accuracy(verdicts, lo, hi)
    # helps right: row 0 only (row 1 straddles 0, row 2 degrades); hurts right: row 3 only
    assert (acc["n_decisive"], acc["n_correct"], acc["n_unclear"]) == (5, 2, 2)
    assert acc["accuracy"] == pytest.approx(0.4)
    assert acc["table"]["helps"] == {"improves": 1, "no clear change": 1, "degrades": 1}
    assert acc["table"]["unclear"] == {"improves": 1, "no clear change": 1, "degrades": 0}
    assert acc["three_way_agreement"] == pytest.approx(3 / 7)
    lo_w, hi_w = stats.wilson(8, 10)
    assert (lo_w, hi_w) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    none = stats.verdict_accuracy(["unclear"], [0.1], [0.2])
    assert none["n_decisive"] == 0 and math.isnan(none["accuracy"])


def test_near_zero_alignment_leaves_numerically_zero_advantages_out():
    a_opd = [0.0, 1e-5, 0.5, -0.5, 0.3, 2.0, np.nan, -1.0]
    a_del = [0.2, 0.4, 0.4, 0.6, 1e-6, 1.0, 1.0, -3.0]
    out = stats.near_zero_alignment(a_opd, a_del, 1e-4)
    informative = [(0.5, 0.4), (-0.5, 0.6), (2.0, 1.0), (-1.0, -3.0)]  # the finite rows above the threshold
    assert out["n_tokens"] == 7 and out["n_informative"] == 4
    assert out["near_zero_share"] == pytest.approx(3 / 7)
    assert out["opd_near_zero_share"] == pytest.approx(2 / 7)
    assert out["sign_agreement"] == pytest.approx(sum(a * b > 0 for a, b in informative) / 4)
    assert out["spearman"] == pytest.approx(slow_spearman(*zip(*informative)))


# ------------------------------------------------------------------------------------------ the plan


def test_paired_mean_matches_an_explicit_bootstrap_over_worlds():
    """stats.paired_mean: the mean of per-world differences, and percentile bounds of an explicit resampling loop with
    the same generator draws; the counts above and below."""
    rng = np.random.default_rng(3)
    worlds = [f"w{i}" for i in range(9)]
    a, b = ({w: float(x) for w, x in zip(worlds, rng.normal(size=9))} for _ in range(2))
    out = stats.paired_mean(a, b, worlds, n_boot=300, seed=5)
    d = [a[w] - b[w] for w in worlds]
    draw, reps = np.random.default_rng(5), []
    for _ in range(300):
        idx = draw.integers(0, len(d), len(d))
        reps.append(sum(d[i] for i in idx) / len(d))
    reps.sort()
    assert out["estimate"] == pytest.approx(sum(d) / len(d), abs=1e-12)
    assert out["lo"] == pytest.approx(float(np.quantile(reps, 0.025)), abs=1e-12)
    assert out["hi"] == pytest.approx(float(np.quantile(reps, 0.975)), abs=1e-12)
    assert out["lo"] <= out["estimate"] <= out["hi"]
    assert (out["above"], out["below"], out["n"]) == (sum(x > 0 for x in d), sum(x < 0 for x in d), 9)


def test_default_plan_is_what_issue_11_asks_for():
    from opsd_diag.core.verdict import SIGNALS

    plan = plan_mod.load("default")
    assert len(plan["configurations"]) >= 10 and len(plan["training"]["seeds"]) >= 3
    for kind in ("external", "self"):
        assert len(plan["methods"][kind]) >= 2
        assert all(m["signal"] in SIGNALS for m in plan["methods"][kind])
    assert {m["training"].get("loss") for m in plan["methods"]["self"]} == {"opd", "jsd"}
    kinds = {c.get("context") or "external" for c in plan["configurations"]}
    assert {"external", "full_solution", "partial_solution", "answer_only", "hint", "wrong_solution"} <= kinds
    assert {c.get("derive") for c in plan["configurations"]} >= {"shuffled_steps", "other_solution"}
    assert sorted(c.get("partial_fraction") for c in plan["configurations"] if "partial_fraction" in c) == [0.25, 0.5, 0.75]
    assert any(c.get("teacher") == "base" for c in plan["configurations"])
    assert plan["splits"]["diagnosis"]["split"] == plan["splits"]["train"]["split"] == "train"
    assert plan["splits"]["test"]["split"] == "test" and plan["splits"]["regression"]["split"] == "test"
    level, gaps = plan_mod.select_level(plan)
    assert gaps[level] >= plan["level"]["min_gap"]
    from conftest import WRONG_SOLUTION

    assert plan["wrong_solution"] == WRONG_SOLUTION
    for v in ("quick", "tiny"):
        small = plan_mod.load(v)
        assert {c["name"] for c in small["configurations"]} < {c["name"] for c in plan["configurations"]}


def test_derived_contexts():
    rows = [{"id": str(i), "prompt": f"p{i}", "solution": "\n".join(f"{c}) step {i}{c}" for c in "abcdef")}
            for i in range(5)]
    shuffled = plan_mod.shuffled_steps(rows, 11)
    for a, b in zip(rows, shuffled):
        assert sorted(a["solution"].splitlines()) == sorted(b["solution"].splitlines())
        assert a["solution"] != b["solution"] and a["prompt"] == b["prompt"]
    assert plan_mod.shuffled_steps(rows, 11) == shuffled  # seeded
    other = plan_mod.other_solution(rows)
    assert [o["solution"] for o in other] == [r["solution"] for r in rows[1:] + rows[:1]]


# ------------------------------------------------------------------------------------------ end to end

ZOO_READY = (REPO / "sample_data" / "models" / "build_report.json").is_file() and all(
    (REPO / "sample_data" / "models" / m / "model.safetensors").is_file() for m in ("student", "teacher", "base"))


def _run_study(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "validity" / "run_study.py"), "--plan", "tiny",
                           "--out", str(out), "--results", str(out / "RESULTS.md"), "--quiet"],
                          env=env, cwd=str(REPO), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("validity") / "study"
    res = _run_study(out)
    assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:], (out / "study.log").read_text()
                                 if (out / "study.log").is_file() else "")
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]




@pytest.mark.slow
@pytest.mark.skipif(not ZOO_READY, reason="the toy zoo is not built (make zoo)")
def test_tiny_study_runs_every_job_and_resumes_as_a_no_op(tiny_study):
    plan = json.loads((tiny_study / "plan.resolved.json").read_text())
    names = [plan_mod.run_name(r.config, r.method, s) for r in plan_mod.rows(plan) for s in plan["training"]["seeds"]]
    for n in names:
        st = json.loads((tiny_study / "train" / n / "status.json").read_text())
        assert st["status"] == "finished" and st["step"] == plan["training"]["max_steps"]
        assert (tiny_study / "eval" / f"{n}.json").is_file()
    for run in ("main", "other_solution"):
        assert json.loads((tiny_study / "diag" / run / "manifest.json").read_text())["status"] == "finished"
    assert all(json.loads((tiny_study / "checks.json").read_text())["identical"].values())
    # the diagnosis saw training-split prompts only; the evaluation the test split only
    diag_ids = set(pd.read_parquet(tiny_study / "diag" / "main" / "rollouts.parquet")["problem_id"])
    train_ids = {r["id"] for r in _jsonl(tiny_study / "data" / "train.jsonl")}
    test_ids = {r["id"] for r in _jsonl(tiny_study / "data" / "test.jsonl")}
    assert diag_ids <= train_ids and not (test_ids & train_ids)
    # derived data: the same problems with another problem's solution
    derived = _jsonl(tiny_study / "data" / "train.other_solution.jsonl")
    original = _jsonl(tiny_study / "data" / "train.jsonl")
    assert [d["prompt"] for d in derived] == [o["prompt"] for o in original]
    assert all(d["solution"] != o["solution"] for d, o in zip(derived, original))
    png = tiny_study / "validity_scatter.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tiny_study / "validity_analysis.json").read_text())["rows"]
    n_jobs = len(_jsonl(tiny_study / "jobs.jsonl"))
    res = _run_study(tiny_study)  # resume: everything is finished, nothing runs again
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(_jsonl(tiny_study / "jobs.jsonl")) == n_jobs
    assert "finished job(s) skipped" in (tiny_study / "study.log").read_text()


@pytest.mark.slow
@pytest.mark.skipif(not ZOO_READY, reason="the toy zoo is not built (make zoo)")
def test_tiny_report_numbers_are_recomputed_from_the_stored_runs(tiny_study):
    from benchmarks.validity.report import ci

    an = json.loads((tiny_study / "analysis.json").read_text())
    md = (tiny_study / "RESULTS.md").read_text()
    plan = json.loads((tiny_study / "plan.resolved.json").read_text())
    ev = {p.stem: json.loads(p.read_text()) for p in (tiny_study / "eval").glob("*.json") if not p.stem.startswith("jobs")}
    init = ev["initial"]
    ids = sorted(init["test"])
    p_init = np.array([init["test"][i][1] / init["test"][i][0] for i in ids])
    assert an["initial"]["pass@1"]["estimate"] == pytest.approx(p_init.mean())
    assert f"pass@1 {ci(an['initial']['pass@1'], sign=False)}" in md

    scores, gains = [], []
    for row in an["rows"]:
        names = [plan_mod.run_name(row["config"], row["method"], s) for s in plan["training"]["seeds"]]
        fin = np.array([[ev[n]["test"][i][1] / ev[n]["test"][i][0] for i in ids] for n in names])
        gain = float((fin - p_init[None]).mean())
        assert row["gain_pass@1"]["estimate"] == pytest.approx(gain, abs=1e-12)
        kl_sum = sum(ev[n]["kl"][i][0] for n in names for i in ids)
        kl_cnt = sum(ev[n]["kl"][i][1] for n in names for i in ids)
        assert row["kl_to_initial"]["estimate"] == pytest.approx(kl_sum / kl_cnt, rel=1e-9)
        # the verdict and its score, read straight from the diagnosis' summary.json
        run, name = ("other_solution", "self_full") if row["config"] == "self_other" else ("main", row["config"])
        summary = json.loads((tiny_study / "diag" / run / "summary.json").read_text())
        v = summary["verdicts"][name][row["signal"]]
        assert row["verdict"] == v["verdict"]
        assert (row["score"] is None and v["score"] is None) or row["score"] == pytest.approx(v["score"])
        assert row["mean_rev_kl"] == pytest.approx(summary["configs"][name]["overall"]["columns"]["kl_rev"]["mean"])
        # OPD² sign agreement among non-zero tokens, from tokens.parquet
        tok = pd.read_parquet(tiny_study / "diag" / run / "tokens.parquet")
        tok = tok[tok["config"] == name].dropna(subset=["a_opd", "a_delta"])
        big = tok[(tok["a_opd"].abs() > 1e-4) & (tok["a_delta"].abs() > 1e-4)]
        assert row["opd2_sign_agreement"] == pytest.approx(float((big["a_opd"] * big["a_delta"] > 0).mean()))
        assert row["near_zero_share"] == pytest.approx(1 - len(big) / len(tok))
        # the row is in the report's table with these numbers
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {row['config']} | {row['method']} ("))
        assert f"| {row['verdict']} |" in line and ci(row["gain_pass@1"]) in line
        scores.append(v["score"])
        gains.append(gain)
    pairs = [(s, g) for s, g in zip(scores, gains) if s is not None]
    rho = an["spearman"]["score"]["estimate"]
    if len(pairs) >= 3 and np.ptp([s for s, _ in pairs]) > 0 and np.ptp([g for _, g in pairs]) > 0:
        assert rho == pytest.approx(sps.spearmanr(*zip(*pairs))[0], abs=1e-12)
    else:
        assert rho is None
    acc = an["verdict_accuracy"]
    decisive = [r for r in an["rows"] if r["verdict"] != "unclear"]
    right = [r for r in decisive if (r["verdict"] == "helps" and r["gain_pass@1"]["lo"] > 0)
             or (r["verdict"] == "hurts" and r["gain_pass@1"]["hi"] < 0)]
    assert (acc["n_decisive"], acc["n_correct"]) == (len(decisive), len(right))
    assert f"**{len(right)} of {len(decisive)} correct" in md
    assert "## Closing note" in md and "Spearman" in md.split("## Closing note")[1]


@pytest.mark.parametrize("folder", ["", "quick", "second_look"])
def test_committed_results_are_the_report_of_their_stored_analysis(folder):
    """Each committed RESULTS.md is exactly what report.py renders from the committed analysis JSON beside
    it (date aside), so no number in it was typed or edited by hand."""
    import re

    from benchmarks.validity.report import markdown

    here = REPO / "benchmarks" / "validity" / folder
    md = (here / "RESULTS.md").read_text()
    an = json.loads((here / "validity_analysis.json").read_text())
    study = re.search(r"from the stored runs in `([^`]+)` on (\d{4}-\d{2}-\d{2})", md)
    assert study, "RESULTS.md lost its provenance line"
    rendered = markdown(an, "validity_scatter.png", Path(study.group(1)))
    rendered = re.sub(r"(from the stored runs in `[^`]+` on )\d{4}-\d{2}-\d{2}", rf"\g<1>{study.group(2)}", rendered)
    assert rendered == md
    assert (here / "validity_scatter.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
