"""Aggregates checked against slow, obvious references (explicit loops, math.comb, plain bootstrap)."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from opsd_diag.core import aggregate as an
from opsd_diag.core import stats as st
from opsd_diag.errors import OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.summary import Summary

# ------------------------------------------------------------------------------------- fixtures


def make_tables(seed=0, n_problems=6, samples=3, configs=("ctx", "plain"), with_base=True):
    """Random but internally consistent tokens/rollouts tables (gate and a_d2 follow docs/signals.md)."""
    rng = np.random.default_rng(seed)
    rows, rid = [], 0
    for p in range(n_problems):
        for s in range(samples):
            correct = pd.NA if p == n_problems - 1 else bool(rng.random() < 0.5)
            rows.append({"rollout_id": rid, "problem_id": f"p{p}", "sample_idx": s,
                         "correct": correct, "length": int(rng.integers(3, 40))})
            rid += 1
    rollouts = pd.DataFrame(rows)
    rollouts["correct"] = rollouts["correct"].astype("boolean")
    parts = []
    for config in configs:
        for r in rollouts.itertuples():
            n = r.length
            f = {c: rng.normal(size=n) for c in SIGNAL_COLUMNS}
            f["h_s"], f["h_t"] = rng.exponential(1.0, n), rng.exponential(1.5, n)
            f["kl_rev"], f["jsd"] = rng.exponential(0.5, n), rng.exponential(0.2, n)
            if not with_base:
                for c in ("lp_b", "r_delta", "a_delta", "h_b", "a_d2", "gate"):
                    f[c] = np.full(n, np.nan)
            else:
                f["gate"] = (f["a_delta"] * f["a_opd"] > 0).astype(float)
                f["a_d2"] = f["gate"] * f["a_delta"]
            parts.append(pd.DataFrame({"config": config, "rollout_id": r.rollout_id,
                                       "pos": np.arange(n), **f}))
    return pd.concat(parts, ignore_index=True), rollouts


def make_teacher(rollouts, config, rate, seed=1):
    rng = np.random.default_rng(seed)
    t = rollouts[["problem_id", "sample_idx"]].copy()
    t["config"] = config
    t["correct"] = rng.random(len(t)) < rate
    return t


# ------------------------------------------------------------------------------------- binning


def test_entropy_bins_fixed_edges_match_loop():
    h = pd.Series([0.0, 0.05, 0.1, 0.3, 0.5, 0.99, 1.0, 1.5, 2.0, 7.0, np.nan, -1e-9])
    labels = ["[0, 0.1)", "[0.1, 0.5)", "[0.5, 1)", "[1, 2)", "[2, inf)"]
    got = an.entropy_bins(h)
    assert list(got.cat.categories) == labels
    edges = [0.1, 0.5, 1.0, 2.0]
    for value, label in zip(h, got):
        if math.isnan(value):
            assert pd.isna(label)
        else:
            assert label == labels[sum(value >= e for e in edges)]


def test_entropy_bins_quantiles_and_custom_edges():
    h = pd.Series(np.random.default_rng(0).exponential(size=4000))
    got = an.entropy_bins(h, quantiles=4)
    assert len(got.cat.categories) == 4
    inner = np.quantile(h, [0.25, 0.5, 0.75])
    expected = [int(sum(v >= e for e in inner)) for v in h]
    assert list(got.cat.codes) == expected
    assert got.value_counts(normalize=True).between(0.24, 0.26).all()
    custom = an.entropy_bins(pd.Series([0.2, 3.0]), edges=[1.0])
    assert list(custom) == ["[0, 1)", "[1, inf)"]
    with pytest.raises(OpsdError):
        an.entropy_bins(h, edges=[1.0], quantiles=3)
    # Ties collapse quantile edges into fewer bins instead of failing.
    assert len(an.entropy_bins(pd.Series([0.0] * 10 + [1.0]), quantiles=4).cat.categories) <= 2


def test_position_buckets_match_loop():
    pos = np.arange(0, 300, 7)
    got = an.position_buckets(pos)
    labels = ["0-15", "16-31", "32-63", "64-127", "128+"]
    assert list(got.cat.categories) == labels
    assert list(got) == [labels[sum(p >= e for e in (16, 32, 64, 128))] for p in pos]
    assert list(an.position_buckets([0, 3, 4], edges=(4,))) == ["0-3", "0-3", "4+"]


# ------------------------------------------------------------------------------------- pass@k


def comb_pass_at_k(n, c, k):
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def test_pass_at_k_matches_math_comb():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert st.pass_at_k(n, c, k) == pytest.approx(comb_pass_at_k(n, c, k), abs=1e-12)
    assert st.pass_at_k(1000, 3, 200) == pytest.approx(comb_pass_at_k(1000, 3, 200), abs=1e-12)
    assert math.isnan(st.pass_at_k(3, 1, 4))
    with pytest.raises(ValueError):
        st.pass_at_k(3, 4, 1)


def test_pass_at_k_table_hand_example():
    r = pd.DataFrame({
        "problem_id": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "correct": pd.array([True, False, False, False, False] * 1 + [False] * 3
                            + [pd.NA] * 4, dtype="boolean"),
    })
    table = st.pass_at_k_table(r, ks=(1, 2, 4, 5))
    assert table[1] == pytest.approx((0.25 + 0.0) / 2)  # problem c has no answer: left out
    assert table[2] == pytest.approx((comb_pass_at_k(4, 1, 2) + 0.0) / 2)
    assert table[4] == pytest.approx(0.5)
    assert math.isnan(table[5])  # k > n
    empty = st.pass_at_k_table(r.iloc[8:], ks=(1,))
    assert math.isnan(empty[1])


# ------------------------------------------------------------------------------------- alignment


def test_alignment_quadrants_hand_made():
    df = pd.DataFrame({
        "a_opd":   [1.0, 2.0, 0.5, -1.0, -0.2, -3.0, 0.0, 1.0, np.nan, 4.0, 5e-5, -2.0],
        "a_delta": [0.5, 3.5, -1.0, 2.0, -0.1, -0.5, 1.0, 0.0, 1.0, np.inf, 3.0, -1e-6],
    })
    s = an.alignment_stats(df)
    assert s["n"] == 10  # finite pairs
    # the gate over every finite pair: rows 0, 1, 4, 5, 10 agree in sign (11: both negative too)
    assert s["gate_keep"] == pytest.approx(6 / 10)
    # informative: both |.| > 1e-4, so rows 6, 7 (a zero), 10 and 11 (tiny) are left out
    assert s["n_informative"] == 6 and s["near_zero_share"] == pytest.approx(4 / 10)
    assert (s["q_pp"], s["q_pn"], s["q_np"], s["q_nn"]) == (2, 1, 1, 2)
    assert s["sign_agreement"] == pytest.approx(4 / 6)
    assert "large_gap_share" not in s  # a_delta - a_opd does not depend on the teacher


def test_alignment_correlations_and_gate():
    tokens, _ = make_tables(seed=3)
    s = an.alignment_stats(tokens)
    info = (tokens["a_opd"].abs() > an.NEAR_ZERO) & (tokens["a_delta"].abs() > an.NEAR_ZERO)
    x, y = tokens.loc[info, "a_opd"].to_numpy(), tokens.loc[info, "a_delta"].to_numpy()
    assert s["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    assert s["spearman"] == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert s["gate_keep"] == pytest.approx(tokens["gate"].mean())  # = the gate's keep fraction
    assert s["sign_agreement"] == pytest.approx(tokens.loc[info, "gate"].mean())
    assert s["q_pp"] + s["q_pn"] + s["q_np"] + s["q_nn"] == s["n_informative"] == int(info.sum())


def test_alignment_degenerate_inputs():
    nan = an.alignment_stats(pd.DataFrame({"a_opd": [1.0, 2.0], "a_delta": [np.nan, np.nan]}))
    assert nan["n"] == 0 and math.isnan(nan["sign_agreement"]) and math.isnan(nan["pearson"])
    const = an.alignment_stats(pd.DataFrame({"a_opd": [1.0, 1.0, 1.0], "a_delta": [1.0, 2.0, 3.0]}))
    assert const["sign_agreement"] == 1.0 and math.isnan(const["spearman"])


# ------------------------------------------------------------------------------------- bootstrap


def plain_bootstrap_mean(values, prompt_ids, n_boot, seed, alpha):
    """One replicate at a time, in Python, following the documented draw protocol."""
    prompts = sorted(set(prompt_ids))
    by_prompt = {p: [v for v, q in zip(values, prompt_ids) if q == p] for p in prompts}
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(prompts), size=(n_boot, len(prompts)))
    reps = []
    for draw in draws:
        picked = [v for i in draw for v in by_prompt[prompts[i]]]
        reps.append(sum(picked) / len(picked))
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return sum(values) / len(values), lo, hi


def test_bootstrap_vectorised_equals_plain_loop_and_generic():
    rng = np.random.default_rng(5)
    ids = [f"q{i}" for i in rng.integers(0, 12, size=150)]
    values = list(rng.normal(size=150) + np.array([int(i[1:]) for i in ids]) * 0.3)
    fast = st.bootstrap_mean_over_prompts(values, ids, n_boot=300, seed=7, alpha=0.1)
    slow = plain_bootstrap_mean(values, ids, n_boot=300, seed=7, alpha=0.1)
    assert fast == pytest.approx(slow, rel=1e-12)
    frame = pd.DataFrame({"v": values, "prompt": ids})
    generic = st.bootstrap_over_prompts(frame, "prompt", lambda f: f["v"].mean(),
                                        n_boot=300, seed=7, alpha=0.1)
    assert generic == pytest.approx(fast, rel=1e-12)
    assert fast[1] < fast[0] < fast[2]
    assert st.bootstrap_mean_over_prompts(values, ids, n_boot=300, seed=8) != fast  # seed matters


def test_bootstrap_ignores_nan_and_handles_empty():
    est = st.bootstrap_mean_over_prompts([1.0, np.nan, 3.0, np.nan], ["a", "a", "b", "c"], 50)
    assert est[0] == pytest.approx(2.0)
    assert all(math.isnan(x) for x in st.bootstrap_mean_over_prompts([np.nan], ["a"], 50))
    empty = pd.DataFrame({"v": [], "prompt": []})
    assert all(math.isnan(x) for x in st.bootstrap_over_prompts(empty, "prompt", len, 10))


def test_bootstrap_ci_covers_truth_statistically():
    # Prompt effects make tokens correlated; a CI over prompts should still cover the true mean.
    rng = np.random.default_rng(11)
    covered, trials = 0, 200
    for _ in range(trials):
        effects = rng.normal(size=30)
        ids = np.repeat(np.arange(30), 20)
        values = effects[ids] + rng.normal(size=ids.size)
        _, lo, hi = st.bootstrap_mean_over_prompts(values, ids, n_boot=300, seed=int(rng.integers(1e9)))
        covered += lo <= 0.0 <= hi
    assert 0.85 <= covered / trials <= 0.99


# ------------------------------------------------------------------------------------- summarize


def test_summarize_matches_direct_computations():
    tokens, rollouts = make_tables()
    teacher = make_teacher(rollouts, "ctx", 0.8)
    s = an.summarize(tokens, rollouts, teacher, n_boot=60, ks=(1, 2, 4))
    assert set(s["configs"]) == {"ctx", "plain"}
    joined = tokens.merge(rollouts, on="rollout_id")
    ctx, c = joined[joined["config"] == "ctx"], s["configs"]["ctx"]

    assert c["overall"]["n_tokens"] == len(ctx)
    for col in SIGNAL_COLUMNS:
        assert c["overall"]["columns"][col]["mean"] == pytest.approx(ctx[col].mean())
        assert c["overall"]["columns"][col]["q90"] == pytest.approx(np.quantile(ctx[col], 0.9))
    assert c["ci"]["r_opd"]["estimate"] == pytest.approx(ctx["r_opd"].mean())
    assert c["ci"]["r_opd"]["lo"] <= c["ci"]["r_opd"]["estimate"] <= c["ci"]["r_opd"]["hi"]

    for key, want in (("correct", True), ("incorrect", False)):
        sel = [i for i, v in enumerate(ctx["correct"]) if v is not pd.NA and bool(v) == want]
        assert c["by_correctness"][key]["n_tokens"] == len(sel)
        assert c["by_correctness"][key]["mean"]["kl_rev"] == pytest.approx(
            sum(ctx["kl_rev"].iloc[i] for i in sel) / len(sel))
    assert c["by_correctness"]["unknown"]["n_tokens"] == int(ctx["correct"].isna().sum())

    early = ctx[ctx["pos"] < 16]
    assert c["by_position"]["0-15"]["mean"]["jsd"] == pytest.approx(early["jsd"].mean())
    assert sum(b["n_tokens"] for b in c["by_position"].values()) == len(ctx)

    bins = c["by_entropy_bin"]
    assert list(bins) == ["[0, 0.1)", "[0.1, 0.5)", "[0.5, 1)", "[1, 2)", "[2, inf)"]
    assert sum(b["share"] for b in bins.values()) == pytest.approx(1.0)
    top = ctx[ctx["h_s"] >= 2.0]
    assert bins["[2, inf)"]["kl_rev"] == pytest.approx(top["kl_rev"].mean())
    informative = (top["a_opd"].abs() > an.NEAR_ZERO) & (top["a_delta"].abs() > an.NEAR_ZERO)
    assert bins["[2, inf)"]["sign_agreement"] == pytest.approx(top.loc[informative, "gate"].mean())
    assert c["high_entropy_share"]["student"] == pytest.approx((ctx["h_s"] >= 2).mean())
    assert c["high_entropy_share"]["teacher"] == pytest.approx((ctx["h_t"] >= 2).mean())

    known = rollouts[rollouts["correct"].notna()]
    student_acc = known["correct"].astype(float).mean()
    assert s["student_accuracy"]["estimate"] == pytest.approx(student_acc)
    assert s["student_accuracy"]["n_prompts"] == known["problem_id"].nunique()
    assert s["pass_at_k"]["pass@1"] == pytest.approx(student_acc)
    assert s["pass_at_k"]["pass@4"] is None  # k > n = 3 samples
    t_acc = teacher["correct"].mean()
    assert c["teacher_accuracy"]["estimate"] == pytest.approx(t_acc)
    # Gap is on prompts both sides sampled with a known answer (the last problem has none).
    common = teacher[teacher["problem_id"].isin(known["problem_id"])]["correct"].mean()
    assert c["teacher_minus_student_accuracy"]["estimate"] == pytest.approx(common - student_acc)
    assert s["configs"]["plain"]["teacher_accuracy"] is None


def test_summarize_json_nan_base_and_no_teacher():
    tokens, rollouts = make_tables(seed=2, configs=("solo",), with_base=False)
    for teacher in (None, pd.DataFrame(columns=["config", "problem_id", "sample_idx", "correct"])):
        s = an.summarize(tokens, rollouts, teacher, n_boot=40, entropy_quantiles=3)
        back = json.loads(json.dumps(s, allow_nan=False))
        assert back == s
        c = s["configs"]["solo"]
        assert c["alignment"]["n"] == 0 and c["alignment"]["sign_agreement"] is None
        assert c["ci"]["a_d2"] == {"estimate": None, "lo": None, "hi": None, "n_prompts": 0}
        assert c["overall"]["columns"]["lp_b"]["mean"] is None
        assert c["teacher_accuracy"] is None and len(c["by_entropy_bin"]) == 3
    frame = Summary.model_validate({**back, "context_truncated": {}}).headline_frame()
    assert frame["sign_agreement"].isna().all() and frame["teacher_accuracy"].isna().all()


def test_summary_means_of_the_top_k_compatibility_columns_equal_the_token_means():
    """mean_teachability and mean_topk_overlap of each config (summary.json -> overall, and the binned
    frames' mean_ columns) are the means of the token columns; a config of another vocabulary (all NaN)
    has none (null, never 0)."""
    tokens, rollouts = make_tables(seed=7, configs=("ctx", "plain", "cross"))
    rng = np.random.default_rng(7)
    tokens["teachability"] = rng.uniform(0, 1, len(tokens))
    tokens["topk_overlap"] = rng.integers(0, 6, len(tokens)) / 5
    cross = tokens["config"] == "cross"
    tokens.loc[cross, ["teachability", "topk_overlap"]] = np.nan
    s = Summary.model_validate(json.loads(json.dumps(an.summarize(tokens, rollouts, n_boot=20))))
    for config in ("ctx", "plain", "cross"):
        mine = tokens[tokens["config"] == config]
        for col in ("teachability", "topk_overlap"):
            got = s.configs[config].overall.columns[col]
            if config == "cross":
                assert got.mean is None and got.n == 0
            else:
                assert got.mean == pytest.approx(float(np.mean(mine[col].to_numpy())), rel=1e-12)
                assert got.n == len(mine)
    pos = s.position_frame().set_index(["config", "bucket"])
    early = tokens[(tokens["config"] == "ctx") & (tokens["pos"] < 16)]
    assert pos.loc[("ctx", "0-15"), "mean_teachability"] == pytest.approx(early["teachability"].mean())


def test_summarize_deterministic_and_checks_inputs():
    tokens, rollouts = make_tables(seed=4, configs=("a",), n_problems=4)
    one = an.summarize(tokens, rollouts, n_boot=50, seed=3)
    assert one == an.summarize(tokens, rollouts, n_boot=50, seed=3)
    assert one["configs"]["a"]["ci"] != an.summarize(tokens, rollouts, n_boot=50, seed=4)[
        "configs"]["a"]["ci"]
    with pytest.raises(OpsdError, match="missing from the rollouts"):
        an.summarize(tokens, rollouts[rollouts["rollout_id"] > 0], n_boot=10)
    with pytest.raises(OpsdError, match="lacks columns"):
        an.summarize(tokens.drop(columns=["jsd"]), rollouts, n_boot=10)


def test_summary_frame_headline_numbers():
    tokens, rollouts = make_tables(seed=6)
    teacher = pd.concat([make_teacher(rollouts, "ctx", 0.9), make_teacher(rollouts, "plain", 0.2)])
    s = an.summarize(tokens, rollouts, teacher, n_boot=30)
    frame = Summary.model_validate(json.loads(json.dumps(s))).headline_frame()
    assert list(frame["config"]) == ["ctx", "plain"]
    row = frame.set_index("config").loc["plain"]
    plain = tokens[tokens["config"] == "plain"]
    assert row["a_opd"] == pytest.approx(plain["a_opd"].mean())
    informative = (plain["a_opd"].abs() > an.NEAR_ZERO) & (plain["a_delta"].abs() > an.NEAR_ZERO)
    assert row["sign_agreement"] == pytest.approx(plain.loc[informative, "gate"].mean())
    assert row["near_zero_share"] == pytest.approx(1 - informative.mean())
    assert row["teacher_accuracy"] == pytest.approx(s["configs"]["plain"]["teacher_accuracy"]["estimate"])
    assert row["accuracy_gap"] == pytest.approx(
        s["configs"]["plain"]["teacher_minus_student_accuracy"]["estimate"])
    assert frame.drop(columns=["config", "n_tokens"]).dtypes.eq(float).all()
    assert frame["n_tokens"].tolist() == tokens.groupby("config").size().tolist()


def test_a_token_table_without_the_later_columns_opens_with_them_nan(tmp_path):
    """A run written before teachability and topk_overlap existed still opens (they read as not measured, NaN,
    never 0); where present they must be numbers, like every signal column."""
    from opsd_diag.io import store
    from opsd_diag.schema import LATER_COLUMNS, TABLE_COLUMNS

    (tmp_path / "manifest.json").write_text("{}")
    tokens, _ = make_tables(seed=8, configs=("a",), n_problems=2, samples=1)
    tokens["token_id"], tokens["token"] = 3, "x"
    old = tokens[[c for c in TABLE_COLUMNS["tokens"]]]
    assert not set(LATER_COLUMNS["tokens"]) & set(old.columns)
    old.to_parquet(tmp_path / "tokens.parquet")
    got = store.read_table(tmp_path, "tokens")
    assert got[list(LATER_COLUMNS["tokens"])].isna().all().all() and len(got) == len(old)
    tokens.assign(teachability="high").to_parquet(tmp_path / "tokens.parquet")
    with pytest.raises(OpsdError, match="column 'teachability' holds"):
        store.read_table(tmp_path, "tokens")
