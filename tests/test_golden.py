"""Behaviour kept through the architecture change: a small diagnosis equals the outputs that commit
e7efe5b (before the change) wrote for the same config, stored in tests/golden/.

Ids, text and correctness are equal exactly; floats to float32 tolerance. The one intended change
is listed: the OPD² advantages are computed in a cancellation-free form (core.signals.
centred_advantage), so ``gate`` flips from 0 to 1 where the old float32 ``a_delta`` was 0 or
within 1e-5 of it, and every aggregate of ``gate`` (its means, the sign agreement and the quadrant
counts of the alignment) moves with it; the predictor's description string now cites the
project's own docs. Since the predictive-validity work (issue 11) the alignment statistics are taken
among the tokens whose advantages are not numerically zero, with ``large_gap_share`` dropped; the
verdicts rest on them and are compared by their (config, signal, verdict) triples. Two token
columns were added later (issue 20: ``teachability`` and ``topk_overlap``, with their means in the
summary); the golden files predate them and are left as they are: the new columns are checked
against a float64 recomputation from the run's models instead, and every old number as before.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from compare import ATOL, RTOL, assert_frames_close, assert_topk_frames_close, close, ranking_mismatch, text_close
from conftest import REPO

GOLDEN = REPO / "tests" / "golden"
# summary keys that aggregate the gate (the listed change), as dotted-path fragments
GATE_KEYS = ("gate", "sign_agreement", "q_pp", "q_pn", "q_np", "q_nn", "alignment.spearman", "alignment.pearson",
             "ideal.estimator")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def new_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "run"
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", str(GOLDEN / "config.yaml"), "--out", str(out),
                        "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


# issue 21 added two columns to the sample tables: truncated (cut at max length or inside a thinking
# block) and in_thinking; the zoo has no thinking markers, so truncated is exactly "not finished"
ADDED_COLUMNS = ("truncated", "in_thinking")


def compare_table(name: str, old: pd.DataFrame, new: pd.DataFrame) -> None:
    """One stored table against a new one: the top-k table's ids up to tied log-probs, the rest by
    compare.assert_frames_close (sampled ids exact, floats and float lists to tolerance). The sampler's log-probs,
    added to the rollouts later (their values: tests/test_sampler_logprobs.py), are one finite log-prob per id."""
    if "sampler_logprobs" in new.columns and "sampler_logprobs" not in old.columns:
        for ids, lps in zip(new["completion_ids"], new["sampler_logprobs"]):
            assert len(lps) == len(ids) and all(np.isfinite(x) and x <= 0.0 for x in lps)
        new = new.drop(columns=["sampler_logprobs"])
    added = [c for c in ADDED_COLUMNS if c in new.columns and c not in old.columns]
    if added:
        assert not new["in_thinking"].any()
        if "finished" in new.columns:
            assert new["truncated"].equals(~new["finished"])
        new = new.drop(columns=added)
    (assert_topk_frames_close if name == "topk" else assert_frames_close)(old, new)


@pytest.mark.parametrize("name", ["rollouts", "teacher_rollouts", "topk", "nodes"])
def test_tables_equal_the_golden_run(new_run, name):
    compare_table(name, pd.read_parquet(GOLDEN / f"{name}.parquet"), pd.read_parquet(new_run / f"{name}.parquet"))


# issue 20 added two token columns (the top-k compatibility of one vocabulary); the golden files predate them
ADDED_SIGNALS = ("teachability", "topk_overlap")


def without_added_signals(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """The new token table without the columns added since the old one was written (checked apart)."""
    return new.drop(columns=[c for c in ADDED_SIGNALS if c in new.columns and c not in old.columns])


def test_tokens_equal_except_gates_of_near_zero_delta_advantages(new_run):
    old, new = pd.read_parquet(GOLDEN / "tokens.parquet"), pd.read_parquet(new_run / "tokens.parquet")
    new = without_added_signals(old, new)
    assert_frames_close(old, new, skip=("gate",))
    flipped = old["gate"] != new["gate"]
    # the listed change, and nothing else: 0 -> 1 where the textbook float32 form had cancelled
    assert ((old["gate"] == 0) & (new["gate"] == 1))[flipped].all()
    assert (old.loc[flipped, "a_delta"].abs() < 1e-5).all()
    assert (new.loc[flipped, "a_delta"] * new.loc[flipped, "a_opd"] > 0).all()  # the same sign, now resolved
    print(f"gate flips: {int(flipped.sum())} of {len(old)} token rows (old a_delta exactly 0 on "
          f"{int((old.loc[flipped, 'a_delta'] == 0).sum())})")


# the alignment statistics of the predictive-validity issue (11): agreement among the informative
# tokens, the near-zero share reported apart, and the teacher-independent large_gap_share dropped
ADDED_KEYS = {"candidates",  # ideal.candidates: the predictor option of issue 11 (its default is the old behaviour)
              "student_truncated_share", "teacher_truncated_share",  # issue 21: the truncation shares
              "run_id",  # issue 30: the summary carries its run's id (io.store.write_summary)
              # issue 32: G per level and normalised, each config's reliability (tests/test_v2_quantities.py)
              "accuracy_gap_by_level", "normalised_accuracy_gap", "reliability",
              *ADDED_SIGNALS}  # issue 20: their means, by split (test_added_signals_equal_a_float64_recomputation)
ALIGNMENT_FIELDS_NOW = {"n", "gate_keep", "near_zero_share", "n_informative", "sign_agreement", "pearson", "spearman",
                        "q_pp", "q_pn", "q_np", "q_nn"}


def _walk(old, new, path=""):
    """Summaries equal: keys and strings exactly (numbers printed in text to their printed precision),
    floats to tolerance; the ranking up to swaps of tied scores (compare.ranking_mismatch)."""
    if any(k in path for k in GATE_KEYS):
        return
    if path == ".ranking":
        why = ranking_mismatch(old, new)
        assert why is None, why
        return
    if path.endswith(".alignment") and "n_zero" in old:
        assert set(new) == ALIGNMENT_FIELDS_NOW, path
        assert new["n"] == old["n"], path
        return
    if isinstance(old, dict):
        assert set(old) == set(new) - ADDED_KEYS, path
        for k in old:
            _walk(old[k], new[k], f"{path}.{k}")
    elif isinstance(old, list):
        assert len(old) == len(new), path
        for i, (a, b) in enumerate(zip(old, new)):
            _walk(a, b, f"{path}[{i}]")
    elif isinstance(old, float) and isinstance(new, float):
        assert close(old, new), (path, old, new)
    elif isinstance(old, str) and isinstance(new, str):
        assert text_close(old, new), (path, old, new)
    else:
        assert old == new, path


def test_added_signals_equal_a_float64_recomputation(new_run):
    tokens = pd.read_parquet(new_run / "tokens.parquet")
    assert check_added_signals(new_run, tokens) >= 0.9 * len(tokens)  # near ties at the 5th place are rare
    summary = json.loads((new_run / "summary.json").read_text())
    for config, rows in tokens.groupby("config"):
        for c in ADDED_SIGNALS:
            assert close(summary["configs"][config]["overall"]["columns"][c]["mean"], float(rows[c].mean()))


def test_summary_equals_the_golden_run_and_verdicts_are_unchanged(new_run):
    old = json.loads((GOLDEN / "summary.json").read_text())
    new = json.loads((new_run / "summary.json").read_text())
    _walk(old, new)  # the ranking within it: the same verdicts, reordered only where scores tie


def float64_rows(run_dir: Path, tokens: pd.DataFrame):
    """Per given token row: (row index, sampled id, float64 log-probs [V] of student, teacher and base at its
    position), from full forwards of the models named in the run's config (base_view student, one scoring
    temperature)."""
    import torch

    from opsd_diag.io.models import load_model
    from opsd_diag.run import Run

    run = Run.load(run_dir)
    cfg, rollouts = run.config, run.rollouts.set_index("rollout_id")
    tau = cfg.scoring_temperature
    load = functools.lru_cache(maxsize=None)(lambda name: load_model.__wrapped__(name, None, "float32", "cpu").double())
    teachers = {t.name: (cfg.student.model if t.is_self else t.model) for t in cfg.teachers}
    for (rid, config), g in tokens.groupby(["rollout_id", "config"]):
        row = rollouts.loc[rid]
        comp = [int(x) for x in row["completion_ids"]]

        def logp(model_name, prompt):
            prompt = [int(x) for x in prompt]
            with torch.no_grad():
                logits = load(model_name)(input_ids=torch.tensor([prompt + comp])).logits[0, len(prompt) - 1:-1]
            return torch.log_softmax(logits.double() / tau, -1)

        ls = logp(cfg.student.model, row["prompt_ids.student"])
        lt = logp(teachers[config], row[f"prompt_ids.{config}"])
        lb = logp(cfg.base.model, row["prompt_ids.student"])
        for i, pos in zip(g.index, g["pos"]):
            yield i, comp[int(pos)], ls[int(pos)], lt[int(pos)], lb[int(pos)]


def float64_advantages(run_dir: Path, tokens: pd.DataFrame) -> pd.DataFrame:
    """a_opd and a_delta of the given token rows recomputed in float64 (textbook form)."""
    out = []
    for i, y, ls, lt, lb in float64_rows(run_dir, tokens):
        p = ls.exp()
        out.append({"index": i, "a_opd": float((lt[y] - ls[y]) - (p * (lt - ls)).sum()),
                    "a_delta": float((lt[y] - lb[y]) - (p * (lt - lb)).sum())})
    return pd.DataFrame(out).set_index("index")


TIE = 1e-5  # log-probs closer than this may order either way in float32 (docs/design.md, conventions)


def check_added_signals(run_dir: Path, tokens: pd.DataFrame) -> int:
    """teachability and topk_overlap of every token row against float64 sorting of the run's models' full
    distributions (k = core.signals.COMPAT_K, ties toward the lower id), where the k-th and (k+1)-th log-probs of
    student and teacher are apart by more than TIE; returns how many rows were checked."""
    from opsd_diag.core.signals import COMPAT_K as K

    checked = 0
    for i, _, ls, lt, _ in float64_rows(run_dir, tokens):
        s, t = ls.sort(descending=True, stable=True), lt.sort(descending=True, stable=True)
        if min(float(s.values[K - 1] - s.values[K]), float(t.values[K - 1] - t.values[K])) <= TIE:
            continue
        top_s, top_t = set(s.indices[:K].tolist()), set(t.indices[:K].tolist())
        teach = float(lt.exp()[sorted(top_s)].sum())
        assert close(float(tokens.at[i, "teachability"]), teach, rtol=1e-4, atol=1e-5), (i, teach)
        assert tokens.at[i, "topk_overlap"] == len(top_s & top_t) / K, i
        checked += 1
    return checked


def compare_runs(old_dir: Path, new_dir: Path) -> None:
    """The golden comparison for any two runs of one config (e.g. the quickstart before and after):
    tables equal; token advantages equal to float32 tolerance, and where the stable form moved them
    further, the new values are checked to be closer to a float64 recomputation."""
    for name in ("rollouts", "teacher_rollouts", "topk", "nodes"):
        compare_table(name, pd.read_parquet(old_dir / f"{name}.parquet"), pd.read_parquet(new_dir / f"{name}.parquet"))
        print(f"{name}: equal")
    old, new = pd.read_parquet(old_dir / "tokens.parquet"), pd.read_parquet(new_dir / "tokens.parquet")
    added = [c for c in ADDED_SIGNALS if c in new.columns and c not in old.columns]
    if added:
        print(f"tokens: {added} added, checked against float64 on {check_added_signals(new_dir, new)} of {len(new)} rows")
        new = without_added_signals(old, new)
    moved_by = {}
    for c in ("a_opd", "a_delta", "a_d2"):
        d = np.abs(new[c].to_numpy() - old[c].to_numpy())
        moved_by[c] = (d > ATOL + RTOL * np.abs(old[c].to_numpy())) & np.isfinite(d)
    moved = moved_by["a_opd"] | moved_by["a_delta"] | moved_by["a_d2"]
    assert_frames_close(old[~moved], new[~moved], skip=("gate",))
    flips = int((old["gate"] != new["gate"]).sum())
    print(f"tokens: {len(old) - moved.sum()} of {len(old)} rows equal to float32 tolerance (gate flips: {flips})")
    if moved.any():
        ref = float64_advantages(new_dir, new[moved])
        for c in ("a_opd", "a_delta"):
            rows = new.index[moved_by[c]]
            if not len(rows):
                continue
            err_old = np.abs(old.loc[rows, c].to_numpy() - ref.loc[rows, c].to_numpy())
            err_new = np.abs(new.loc[rows, c].to_numpy() - ref.loc[rows, c].to_numpy())
            print(f"  {c} moved on {len(rows)} rows: |old - float64| mean {err_old.mean():.2e} max "
                  f"{err_old.max():.2e}; |new - float64| mean {err_new.mean():.2e} max {err_new.max():.2e}; new "
                  f"closer on {int((err_new <= err_old).sum())}")
            assert (err_new <= err_old).all(), c
    so, sn = (json.loads((d / "summary.json").read_text()) for d in (old_dir, new_dir))
    _walk(so, sn)
    print(f"summary: equal except the listed keys; the {len(so['ranking'])} ranked verdicts equal up to tied scores")


if __name__ == "__main__":  # python tests/test_golden.py OLD_RUN NEW_RUN
    compare_runs(Path(sys.argv[1]), Path(sys.argv[2]))
