"""Failure checks (issue 34, item 3): each fires on a case built to trigger it and stays silent on the bundled example
run; the numbers behind each line against slow float64 references (explicit loops)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import yaml
from conftest import REPO, tiny_config

from opsd_diag.core import failure_checks as fc


def _distinct_reference(groups, n):
    vals = []
    for samples in groups:
        total, seen = 0, {}
        for ids in samples:
            for i in range(len(ids) - n + 1):
                total += 1
                seen[tuple(ids[i:i + n])] = True
        if total:
            vals.append(len(seen) / total)
    return sum(vals) / len(vals) if vals else float("nan")


@pytest.mark.parametrize("seed", range(4))
def test_distinct_n_against_an_explicit_count(seed):
    rng = np.random.default_rng(seed)
    groups = [[list(rng.integers(0, 5, rng.integers(0, 12))) for _ in range(rng.integers(1, 5))] for _ in range(7)]
    for n in (1, 2, 4):
        assert fc.distinct_n(groups, n) == pytest.approx(_distinct_reference(groups, n), rel=1e-12, nan_ok=True)


def test_distinct_fires_on_repeated_samples_and_not_on_varied_ones():
    same = [[[1, 2, 3, 4, 5, 6]] * 4 for _ in range(3)]  # every sample of a prompt the same: distinct-4 = 1/4
    assert fc.distinct_n(same) == pytest.approx(0.25)
    assert fc.distinct(same).fired
    rng = np.random.default_rng(0)
    varied = [[list(rng.integers(0, 50, 10)) for _ in range(4)] for _ in range(3)]
    assert not fc.distinct(varied).fired


def test_near_zero_share_and_dead_signal():
    rng = np.random.default_rng(1)
    dead = np.where(rng.random(1000) < 0.97, rng.normal(0, 1e-4, 1000), rng.normal(0, 1, 1000))
    live = rng.normal(0, 1, 1000)
    ref = sum(abs(float(v)) < fc.NEAR_ZERO for v in dead) / 1000
    assert fc.near_zero_share(np.append(dead, np.nan)) == pytest.approx(ref)  # NaN (no base) left out
    c = fc.dead_signal({("t", "a_d2"): dead, ("t", "r_opd"): live})
    assert c.fired and c.numbers["dead"] == ["t/a_d2"] and "t/a_d2" in c.line and f"{ref:.1%}" in c.line
    assert not fc.dead_signal({("t", "r_opd"): live}).fired


def test_temperature_fires_when_scored_at_another_temperature():
    assert fc.temperature(1.0, 0.7).fired and "T=0.7" in fc.temperature(1.0, 0.7).line
    assert not fc.temperature(0.6, 0.6).fired


def test_truncation_share():
    t = np.array([True] * 3 + [False] * 7)
    c = fc.truncation(t, {"a": 0}, 5)
    assert c.fired and c.numbers["truncated_share"] == pytest.approx(0.3) and "3 of 10" in c.line
    assert not fc.truncation(t[2:], {"a": 1}, 5).fired  # 1 of 8 rollouts, 1 of 5 contexts: at the limit
    assert fc.truncation(t[3:], {"a": 2}, 5).fired  # 2 of 5 contexts shortened


def test_template_check_compares_special_tokens_and_the_generation_header():
    special = {1, 2, 9}
    student = [[1, 50, 51, 2, 1, 60, 61], [1, 52, 2, 1, 60, 61]]
    same = [[1, 50, 51, 70, 71, 2, 1, 60, 61], [1, 52, 72, 2, 1, 60, 61]]  # context added inside the user turn
    other_header = [[1, 50, 51, 2, 1, 60, 61, 9, 63], [1, 52, 2, 1, 60, 61, 9, 63]]  # e.g. a thinking block opened
    no_bos = [[50, 51, 2, 1, 60, 61], [1, 52, 2, 1, 60, 61]]
    assert not fc.template(student, {"t": same}, special).fired
    c = fc.template(student, {"t": same, "h": other_header, "b": no_bos}, special)
    assert c.fired and c.numbers["mismatched_prompts"] == {"t": 0, "h": 2, "b": 1}
    assert fc.template(student, {"t": same}, special, sampler_differs=3, n_sampler=8).fired


def test_headroom_fires_when_samples_agree():
    assert fc.headroom({"pass@1": 0.4, "pass@4": 0.41}).fired
    assert not fc.headroom({"pass@1": 0.4, "pass@4": 0.6}).fired
    assert not fc.headroom({"pass@1": 0.0, "pass@4": 0.0}).fired  # no room measured: no collapse call
    assert fc.headroom({"pass@1": 0.4}).line.startswith("n/a")


def test_entropy_sums_per_rollout():
    rng = np.random.default_rng(2)
    greedy = [rng.uniform(0, 0.004, 20) for _ in range(6)] + [rng.uniform(0, 1, 20) for _ in range(2)]
    c = fc.entropy(greedy)
    ref_share = sum(sum(float(x) for x in h) < fc.ENTROPY_MIN for h in greedy) / len(greedy)
    ref_mean = sum(float(x) for h in greedy for x in h) / sum(len(h) for h in greedy)
    assert c.fired and c.numbers["low_entropy_share"] == pytest.approx(ref_share)
    assert c.numbers["mean_entropy"] == pytest.approx(ref_mean, rel=1e-12)
    assert not fc.entropy([rng.uniform(0, 1, 20) for _ in range(8)]).fired


def _answer_reference(tokens, answer):
    """The tokens overlapping the last occurrence of ``answer``, character by character."""
    text = "".join(tokens)
    if not answer or answer not in text:
        return [False] * len(tokens)
    start = max(i for i in range(len(text)) if text.startswith(answer, i))
    chars = set(range(start, start + len(answer)))
    out, at = [], 0
    for t in tokens:
        out.append(any(i in chars for i in range(at, at + len(t))))
        at += len(t)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_answer_positions_against_a_character_loop(seed):
    rng = np.random.default_rng(seed)
    pieces = ["Step", " 1", ":", " 3", "+", "4", "=", "7", "\n", "Answer", ":", " 7", "7", "", " ", "12", "1", "2"]
    for _ in range(50):
        tokens = [pieces[i] for i in rng.integers(0, len(pieces), rng.integers(0, 14))]
        for answer in ("7", "12", "77", "Answer: 7", "9", "", None):
            got = fc.answer_positions(tokens, answer)
            assert got.dtype == bool and got.tolist() == _answer_reference(tokens, answer), (tokens, answer)


def test_answer_signal_fires_where_the_answer_carries_the_jsd():
    quiet = fc.answer_signal({"teacher": (0.01, 10.0, 3, 100), "self_full": (0.2, 8.0, 3, 100)})
    assert not quiet.fired and quiet.numbers["answer_share"]["self_full"] == pytest.approx(0.025)
    assert "highest: self_full 2.5%, on 3.0% of tokens" in quiet.line
    loud = fc.answer_signal({"teacher": (0.01, 10.0, 3, 100), "self_answer": (6.0, 10.0, 3, 100)})
    assert loud.fired and loud.numbers["fired"] == ["self_answer"]
    assert loud.line == ("self_answer puts 60% of its JSD on the final answer's tokens (3.0% of tokens): it teaches "
                         "the answer more than the steps")
    # an answer that is most of the completion (no steps to teach) does not fire, nor does a share of exactly 0.5
    assert not fc.answer_signal({"mc": (9.0, 10.0, 40, 100), "half": (5.0, 10.0, 3, 100)}).fired
    assert not fc.answer_signal({}).fired and fc.answer_signal({}).line.startswith("n/a")


def test_a_fired_answer_check_is_a_caution_for_its_configs_only():
    from opsd_diag.checks import cautions

    loud = fc.answer_signal({"teacher": (0.01, 10.0, 3, 100), "self_answer": (6.0, 10.0, 3, 100)})
    assert cautions([loud]) == {"self_answer": "the failure checks find self_answer's signal on the final answer (60% "
                                               "of its JSD on 3.0% of the tokens): it teaches the answer more than "
                                               "the steps (docs/design.md#failure-checks)"}
    assert cautions([fc.answer_signal({"teacher": (0.01, 10.0, 3, 100)})]) == {} and cautions([]) == {}


def test_answer_mass_against_an_explicit_loop():
    """checks.answer_mass on a small tokens table: per config the JSD on the answer's tokens and on all, summed
    token by token over the rollouts whose answer is written in them."""
    import pandas as pd

    from opsd_diag.checks import answer_mass

    rng = np.random.default_rng(0)
    texts = {0: ["3", "+", "4", "=", "7", " Answer", ":", " 7"], 1: ["2", "*", "5", "=", "1", "0", " Answer:", "10"],
             2: ["no", " answer", " here"], 3: ["5", " Answer", ":", " 6"]}
    answers = {0: "7", 1: "10", 2: None, 3: "9"}  # 3: the extracted answer is not written in its tokens
    rows = [{"config": c, "rollout_id": r, "pos": i, "token": tok, "jsd": float(rng.uniform(0, 1))}
            for c in ("a", "b") for r, toks in texts.items() for i, tok in enumerate(toks)]
    tokens = pd.DataFrame(rows).sample(frac=1.0, random_state=1)  # any order
    rollouts = pd.DataFrame({"rollout_id": list(answers), "answer_pred": list(answers.values())})
    got = answer_mass(dict(tuple(tokens.groupby("config"))), rollouts, ["a", "b"])
    for c in ("a", "b"):
        on = total = n_on = n = 0
        for r, toks in texts.items():
            marks = _answer_reference(toks, answers[r])
            if not any(marks):
                continue
            for i, m in enumerate(marks):
                v = float(tokens[(tokens.config == c) & (tokens.rollout_id == r) & (tokens.pos == i)]["jsd"].iloc[0])
                total, n = total + v, n + 1
                if m:
                    on, n_on = on + v, n_on + 1
        assert got[c][2:] == (n_on, n) == (2, 16)
        assert got[c][0] == pytest.approx(on, abs=1e-12) and got[c][1] == pytest.approx(total, abs=1e-12)


def test_thresholds_are_documented():
    text = (REPO / "docs" / "design.md").read_text()
    section = text[text.index("## Failure checks"):]
    for name in ("NEAR_ZERO", "DEAD_SHARE", "TRUNCATED_MAX", "HEADROOM_MIN", "DISTINCT_N", "DISTINCT_MIN", "ENTROPY_MIN",
                 "COLLAPSED_SHARE", "ANSWER_SIGNAL_MAX", "ANSWER_TOKENS_MAX"):
        assert f"`{name}` = {getattr(fc, name):g}" in section, name


# ------------------------------------------------------------------------------------------- runs

def _run(tmp_path, cfg: dict, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / name
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", str(path), "--out", str(out), "--quiet"],
                       cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_checks_fire_on_a_run_built_to_trigger_them(ci_zoo, problems_file, tmp_path):
    """Scored at another temperature than sampled, cut short: the report, the HTML report and
    Run.failure_checks say so, with the numbers."""
    from opsd_diag.run import Run

    cfg = tiny_config(ci_zoo, problems_file, sampling={"max_completion_length": 3, "temperature": 1.0},
                      scoring={"temperature": 0.5})
    out = _run(tmp_path, cfg, "trigger")
    run = Run.load(out)
    fired = {c.name for c in run.failure_checks() if c.fired}
    assert {"temperature", "truncation"} <= fired
    t = next(c for c in run.failure_checks() if c.name == "truncation")
    ro = run.rollouts
    assert t.numbers["truncated_share"] == pytest.approx(float((~ro["finished"]).mean()))
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "report", str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "failure checks" in r.stdout
    assert "FIRES  temperature: scored at T=0.5 but the student sampled at T=1" in r.stdout
    page = run.report_html(n_heatmaps=0)
    assert "<h2>Failure checks</h2>" in page and "FIRES  truncation" in page
    from streamlit.testing.v1 import AppTest  # the app's Overview shows the same lines

    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=120)
    at.session_state["runs_root"], at.session_state["run_dir"] = str(tmp_path), str(out)
    at.run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    shown = "\n".join(m.value for m in at.markdown)
    assert "**Failure checks**: " in shown  # each line as markdown-escaped text (app.common.md)
    from app import common

    temp = next(c for c in run.failure_checks() if c.name == "temperature")
    assert f":red[**fires**] · **temperature**: {common.md(temp.line)}" in shown


@pytest.mark.slow
@pytest.mark.timeout(3600)  # about a CPU-minute; the wall time grows with the machine's load
def test_on_the_bundled_example_only_the_answer_only_check_fires(tmp_path):
    """The bundled example (sample_data/configs/quickstart.yaml; its predictor and lookahead left out: they read
    the same rollouts and change none of the checks' inputs)."""
    from opsd_diag.run import Run

    cfg = yaml.safe_load((REPO / "sample_data" / "configs" / "quickstart.yaml").read_text())
    cfg.pop("ideal"), cfg.pop("lookahead")
    run = Run.load(_run(tmp_path, cfg, "bundled"))
    checks = run.failure_checks()
    # the one that fires is true of the example: its self_answer_only teacher is the student shown only the answer
    assert [c.name for c in checks if c.fired] == ["answer-only signal"], [c.text() for c in checks]
    assert {c.name for c in checks} >= {"near-zero signal", "temperature", "truncation", "chat template",
                                        "collapse: pass@k headroom", f"collapse: distinct-{fc.DISTINCT_N}",
                                        "collapse: entropy"}
    t = run.tokens
    for c in checks:  # the numbers behind the lines, recomputed by hand
        if c.name == "near-zero signal":
            sub = t[(t["config"] == "self_hint")]["r_opd"]
            ref = sum(abs(float(v)) < fc.NEAR_ZERO for v in sub) / len(sub)
            assert c.numbers["near_zero_share"]["self_hint/r_opd"] == pytest.approx(ref)
        if c.name.startswith("collapse: distinct"):
            groups = [list(map(list, g)) for _, g in run.rollouts.groupby("problem_index")["completion_ids"]]
            assert c.numbers["distinct_n"] == pytest.approx(_distinct_reference(groups, fc.DISTINCT_N))
        if c.name == "answer-only signal":
            assert c.numbers["fired"] == ["self_answer_only"]
            assert c.numbers["answer_share"]["self_full_solution"] < 0.05  # the full solution teaches the steps
    json.dumps([c.numbers for c in checks])  # plain numbers, exportable
    assert Counter(c.fired for c in checks)[True] == 1
