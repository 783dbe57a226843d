"""Predictor v2's added diagnosis quantities (issue 32, item 1) against slow, obvious references: G per level and
normalised (core.aggregate), the ideal-gradient estimates where training acts and their reliability (engine.nodes,
engine.predict, core.ideal), the lookahead's fresh-sample pass@k change (engine.lookahead, core.lookahead), and the
tables that show them (opsd_diag.features)."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import numpy as np
import pandas as pd
import pytest
from conftest import ZOO, tiny_config, write_jsonl
from test_ideal import one_torch_thread  # noqa: F401 (the shared autouse fixture: one torch thread)

from opsd_diag.core import aggregate, ideal
from opsd_diag.core import lookahead as maths
from opsd_diag.engine import lookahead
from opsd_diag.engine import nodes as N
from opsd_diag.config.spec import from_dict


# ------------------------------------------------------------------------------------ references

def ref_mean_ci(values_by_prompt: dict, n_boot: int, seed: int) -> tuple[float, float, float]:
    """The documented bootstrap (docs/signals.md): sorted prompts, default_rng(seed).integers(0, P, (B, P)),
    the pooled mean (sum / count) of each replicate's rows, 2.5% and 97.5% quantiles; explicit loops."""
    ids = sorted(values_by_prompt)
    est = sum(sum(values_by_prompt[p]) for p in ids) / sum(len(values_by_prompt[p]) for p in ids)
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_boot, len(ids)))
    reps = []
    for row in draws:
        s = n = 0.0
        for j in row:
            s += sum(values_by_prompt[ids[j]])
            n += len(values_by_prompt[ids[j]])
        reps.append(s / n)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return est, float(lo), float(hi)


def ref_gap(teacher: list[tuple], student: list[tuple], n_boot: int, seed: int) -> tuple[float, float, float]:
    """Teacher minus student accuracy on the prompts both have, prompts resampled jointly; rows (problem, correct)."""
    both = sorted({p for p, _ in teacher} & {p for p, _ in student})
    t = {p: [float(c) for q, c in teacher if q == p] for p in both}
    s = {p: [float(c) for q, c in student if q == p] for p in both}

    def acc(d, chosen):
        return sum(sum(d[p]) for p in chosen) / sum(len(d[p]) for p in chosen)
    est = acc(t, both) - acc(s, both)
    draws = np.random.default_rng(seed).integers(0, len(both), size=(n_boot, len(both)))
    reps = [acc(t, [both[j] for j in row]) - acc(s, [both[j] for j in row]) for row in draws]
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return est, float(lo), float(hi)


# ------------------------------------------------------------------------------------ G per level, normalised

def test_level_gaps_equal_a_loop_over_each_level():
    rng = np.random.default_rng(0)
    levels = {f"p{i}": int(rng.integers(1, 4)) for i in range(14)}
    student = [(p, bool(rng.random() < 0.3 + 0.1 * lv)) for p, lv in levels.items() for _ in range(3)]
    teacher = [(p, bool(rng.random() < 0.7)) for p, lv in levels.items() if p != "p3" for _ in range(2)]
    s_frame = pd.DataFrame([{"problem_id": p, "correct": c, "difficulty": float(levels[p])} for p, c in student])
    t_frame = pd.DataFrame([{"problem_id": p, "correct": c} for p, c in teacher])
    got = aggregate.level_gaps(t_frame, s_frame, 200, 7, 0.05)
    assert set(got) == {str(lv) for lv in levels.values()}  # integer levels keyed without ".0"
    for key, ci in got.items():
        mine = {p for p, lv in levels.items() if str(lv) == key}
        want = ref_gap([r for r in teacher if r[0] in mine], [r for r in student if r[0] in mine], 200, 7)
        assert (ci["estimate"], ci["lo"], ci["hi"]) == pytest.approx(want, abs=1e-12)
        assert ci["n_prompts"] == len(mine - {"p3"})
    assert aggregate.level_gaps(t_frame, s_frame.drop(columns="difficulty"), 200, 7, 0.05) == {}


@pytest.mark.parametrize("gap, acc, want", [(0.3, 0.4, 0.5), (-0.2, 0.4, -0.5), (0.0, 0.4, 0.0), (0.3, 1.0, math.nan),
                                            (-0.1, 0.0, math.nan), (None, 0.5, math.nan), (0.6, 0.4, 1.0)])
def test_normalised_gap_is_g_over_the_room_in_its_direction(gap, acc, want):
    got = aggregate.normalised_gap(gap, acc)
    assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, abs=1e-15)


# ------------------------------------------------------------------------------------ nodes where training acts

def synthetic(lengths, correct, configs=("a", "b"), seed=0):
    rng = np.random.default_rng(seed)
    toks = pd.concat([pd.DataFrame({"config": c, "rollout_id": r, "pos": np.arange(n), "h_s": rng.random(n),
                                    "kl_rev": rng.random(n) * (1 + (c == "b"))})
                      for c in configs for r, n in enumerate(lengths)], ignore_index=True)
    rollouts = pd.DataFrame({"rollout_id": range(len(lengths)), "problem_id": [f"p{r % 3}" for r in range(len(lengths))],
                             "correct": correct})
    return toks, rollouts


def ref_plan(toks, rollouts, configs):
    """Explicit loops: per config each (rollout, window)'s max-kl_rev position; order by (rank within the rollout,
    rank of the rollout within its problem by best push, push desc, rollout id); configs interleaved; a position
    taken by several configs once, listing them."""
    per = {}
    for c in configs:
        best = {}
        for row in toks[toks["config"] == c].itertuples():
            w = int(math.floor(math.log2(row.pos + 1)))
            key = (row.rollout_id, w)
            if key not in best or row.kl_rev > best[key][1]:
                best[key] = (row.pos, row.kl_rev)
        by_rollout = {}
        for (r, _), (pos, push) in best.items():
            by_rollout.setdefault(r, []).append((pos, push))
        problem = dict(zip(rollouts["rollout_id"], rollouts["problem_id"]))
        top = {r: max(p for _, p in v) for r, v in by_rollout.items()}
        sample_rank = {}
        for p in set(problem.values()):
            mine = sorted([r for r in top if problem[r] == p], key=lambda r: (-top[r], r))
            sample_rank.update({r: i for i, r in enumerate(mine)})
        items = []
        for r, v in by_rollout.items():
            for rank, (pos, push) in enumerate(sorted(v, key=lambda x: -x[1])):
                items.append((rank, sample_rank[r], -push, r, pos))
        per[c] = [(r, pos) for *_, r, pos in sorted(items)]
    out, choosers = [], {}
    for i in range(max(len(v) for v in per.values())):
        for c in configs:
            if i < len(per[c]):
                key = per[c][i]
                if key not in choosers:
                    out.append(key)
                choosers.setdefault(key, []).append(c)
    return out, choosers


def test_plan_acting_equals_a_loop_and_takes_correct_and_incorrect_rollouts_alike():
    toks, rollouts = synthetic([37, 5, 100, 1, 20, 64, 9], [True, False, False, True, True, False, True])
    plan = N.plan_acting(toks, rollouts, ["a", "b"])
    want, choosers = ref_plan(toks, rollouts, ["a", "b"])
    assert list(zip(plan["rollout_id"], plan["pos"])) == want
    assert [choosers[k] for k in want] == plan["acting_for"].tolist()
    assert set(plan["correct"].head(7)) == {True, False}  # no correctness groups: both kinds early
    one = N.plan_acting(toks, rollouts, ["a"])
    assert all(f == ["a"] for f in one["acting_for"])
    assert N.plan_acting(toks, rollouts, []).empty


def ref_reliability(configs: dict, name: str) -> dict:
    def pick(e):
        d = e["teacher_advantage"]["all"] if name == "teacher_advantage" else e["gain"][name[5:]]["all"]
        return d["estimate"], (d["hi"] - d["lo"]) / (2 * 1.959963984540054)
    ests = [pick(e)[0] for e in configs.values() if math.isfinite(pick(e)[0])]
    spread = statistics.stdev(ests) if len(ests) >= 2 else math.nan
    return {c: spread / pick(e)[1] if pick(e)[1] > 0 else math.nan for c, e in configs.items()}


def test_reliability_is_the_between_config_sd_over_each_bootstrap_se():
    rng = np.random.default_rng(3)

    def ci():
        est = float(rng.normal())
        return {"estimate": est, "lo": est - float(rng.random()), "hi": est + float(rng.random())}
    configs = {c: {"teacher_advantage": {"all": ci()}, "gain": {o: {"all": ci()} for o in ideal.OBJECTIVES}}
               for c in ("x", "y", "z")}
    configs["z"]["gain"]["jsd"]["all"] = {"estimate": math.nan, "lo": math.nan, "hi": math.nan}
    got = ideal.reliability(configs)
    for name in ideal.RELIABLE:
        for c, want in ref_reliability(configs, name).items():
            assert (math.isnan(want) and math.isnan(got[c][name])) or got[c][name] == pytest.approx(want, rel=1e-12)
    assert math.isnan(ideal.reliability({"x": configs["x"]})["x"]["teacher_advantage"])  # one config: no spread


# ------------------------------------------------------------------------------------ fresh-sample pass@k

def ref_pass_at_k(n, c, k):
    return math.nan if k > n else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_pass_change_equals_the_binomial_formula():
    rng = np.random.default_rng(5)
    old, new = rng.integers(0, 2, (9, 5)), rng.integers(0, 2, (9, 5))
    for k in (1, 2, 4, 5, 6):
        got = maths.pass_change(old, new, k)
        for p in range(9):
            want = ref_pass_at_k(5, int(new[p].sum()), k) - ref_pass_at_k(5, int(old[p].sum()), k)
            assert (math.isnan(want) and math.isnan(got[p])) or got[p] == pytest.approx(want, abs=1e-12)


def test_measure_fresh_is_the_mean_pass_change_over_prompts_with_its_bootstrap():
    rng = np.random.default_rng(6)
    old, new = rng.integers(0, 2, (7, 4)).astype(bool), rng.integers(0, 2, (7, 4)).astype(bool)
    ids = [f"q{i}" for i in range(7)]
    f = lookahead.Fresh(ids, lambda model: (new, 123, []), [1, 4], initial=old)
    got = lookahead.measure_fresh(None, f, 300, 2)
    assert got["fresh_sampled_tokens"] == 123 and set(got["fresh"]) == {"pass@1", "pass@4"}
    for k in (1, 4):
        per = {p: [ref_pass_at_k(4, int(new[i].sum()), k) - ref_pass_at_k(4, int(old[i].sum()), k)]
               for i, p in enumerate(ids)}
        want = ref_mean_ci(per, 300, 2)
        d = got["fresh"][f"pass@{k}"]
        assert (d["estimate"], d["lo"], d["hi"]) == pytest.approx(want, abs=1e-12)


# ------------------------------------------------------------------------------------ end to end (bundled models)

@pytest.fixture(scope="module")
def v2_run(tmp_path_factory):
    from opsd_diag.engine.diagnose import prepare, run_diagnosis
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("v2_run")
    data = write_jsonl(root / "problems.jsonl", task.generate(6, 11))
    cfg = from_dict(tiny_config(ZOO, data, sampling={"num_samples": 4, "max_completion_length": 24,
                                                     "teacher_samples": 2},
                                ideal={"budget": 40, "k": 2, "m": 2, "acting_budget": 40},
                                lookahead={"methods": ["opd"], "steps": 2, "rollouts_per_step": 4,
                                           "learning_rate": 1e-2, "fresh_samples": 4}))
    run_diagnosis(cfg, root / "run", show_progress=False)
    return cfg, prepare(cfg), root / "run"


def test_acting_nodes_follow_the_plan_and_aggregate_as_a_loop(v2_run, tmp_path):
    from opsd_diag.engine.predict import run_predictor
    from opsd_diag.run import Run

    cfg, prep, out = v2_run
    run = Run.load(out)
    acting, summary = run.acting_nodes, json.loads((out / "summary.json").read_text())
    ide = summary["ideal"]
    assert ide["acting_nodes"] == acting["node_id"].nunique() > 0 and ide["acting_left_out"] == []
    assert 0 < ide["acting_continuations_used"] <= 40
    plan = N.plan_acting(run.tokens, run.rollouts[run.rollouts["correct"].notna()], ["teacher", "self_full"])
    first = acting.drop_duplicates("node_id")
    assert list(zip(first["rollout_id"], first["pos"])) == list(zip(plan["rollout_id"], plan["pos"]))[:len(first)]
    for row in acting.itertuples():  # a config's row counts for it when the config chose the node
        assert row.chosen == (row.config in plan["acting_for"].iloc[row.node_id])
    assert set(acting["correct"]) == {True, False}
    for c in ("teacher", "self_full"):
        mine = acting[(acting["config"] == c) & acting["chosen"]]
        for split, rows in (("all", mine), ("correct", mine[mine["correct"]]), ("incorrect", mine[~mine["correct"]])):
            by_prompt = {}
            for r in rows.itertuples():
                by_prompt.setdefault(r.problem_id, []).append(r.A_T)
            got = ide["acting"][c]["teacher_advantage"][split]
            if not by_prompt:
                assert got["estimate"] is None
                continue
            want = ref_mean_ci(by_prompt, cfg.analysis.bootstrap, cfg.sampling.seed)
            assert (got["estimate"], got["lo"], got["hi"]) == pytest.approx(want, abs=1e-9)
    for where in (ide["configs"], ide["acting"]):
        for name in ideal.RELIABLE:
            for c, want in ref_reliability(
                    {c: {k: _nan(e[k]) for k in ("teacher_advantage", "gain")} for c, e in where.items()}, name).items():
                got = where[c]["reliability"][name]
                assert (got is None and math.isnan(want)) or got == pytest.approx(want, rel=1e-9)
    # today's nodes are untouched: the same as a run without acting nodes (on a copy of the run)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    spec = cfg.ideal.model_copy(update={"acting_budget": 0})
    res = run_predictor(copy, cfg, prep.problems, prep.node_models(), prep.sampler(), spec, write_summary=False)
    assert "acting" not in res and not (copy / "acting_nodes.parquet").exists()
    pd.testing.assert_frame_equal(pd.read_parquet(copy / "nodes.parquet"), pd.read_parquet(out / "nodes.parquet"))
    assert res["configs"]["teacher"]["teacher_advantage"]["all"]["estimate"] == pytest.approx(
        ide["configs"]["teacher"]["teacher_advantage"]["all"]["estimate"])


def _nan(d):
    """A summary's CIs with null as NaN (the reference computes on floats)."""
    if isinstance(d, dict):
        return {k: _nan(v) for k, v in d.items()}
    return math.nan if d is None else d


def test_features_frame_reads_every_number_from_the_summary(v2_run):
    from opsd_diag.run import Run

    _, _, out = v2_run
    run = Run.load(out)
    frame, s = run.features().set_index("config"), json.loads((out / "summary.json").read_text())
    rollouts, teachers = run.rollouts, run.teacher_rollouts
    level = dict(zip(rollouts["problem_id"], rollouts["difficulty"]))
    acc = rollouts["correct"].astype(float).mean()
    for c, e in s["configs"].items():
        g = e["teacher_minus_student_accuracy"]["estimate"]
        assert frame.loc[c, "accuracy_gap"] == pytest.approx(g)
        assert frame.loc[c, "normalised_accuracy_gap"] == pytest.approx(g / (1 - acc) if g > 0 else
                                                                          (g / acc if g < 0 else 0.0))
        for lv in sorted(set(level.values())):
            t = [(p, c_) for p, c_ in zip(teachers.loc[teachers["config"] == c, "problem_id"],
                                          teachers.loc[teachers["config"] == c, "correct"]) if level[p] == lv]
            st = [(p, c_) for p, c_ in zip(rollouts["problem_id"], rollouts["correct"]) if level[p] == lv]
            want = ref_gap(t, st, 20, 0)[0]
            assert frame.loc[c, f"accuracy_gap_level_{int(lv)}"] == pytest.approx(want, abs=1e-12)
        toks = run.tokens[run.tokens["config"] == c]
        assert frame.loc[c, "teachability"] == pytest.approx(float(toks["teachability"].astype(float).mean()), rel=1e-5)
        assert frame.loc[c, "topk_overlap"] == pytest.approx(float(toks["topk_overlap"].astype(float).mean()), rel=1e-5)
        assert frame.loc[c, "high_entropy_student"] == pytest.approx(float((toks["h_s"] >= 2.0).mean()))
        a = s["ideal"]["acting"][c]
        assert frame.loc[c, "teacher_advantage_acting"] == pytest.approx(a["teacher_advantage"]["all"]["estimate"])
        assert frame.loc[c, "gain_acting_jsd"] == pytest.approx(a["gain"]["jsd"]["all"]["estimate"])
        assert frame.loc[c, "teacher_advantage"] == pytest.approx(
            s["ideal"]["configs"][c]["teacher_advantage"]["all"]["estimate"])
    assert {"features", "lookahead", "acting_nodes"} <= set(run.table_names())
    pd.testing.assert_frame_equal(run.export_table("features"), run.features())
    pd.testing.assert_frame_equal(run.export_table("lookahead"), run.lookahead_frame())


def test_fresh_pass_change_equals_samples_drawn_again_by_hand(v2_run):
    """The fresh pass@1 change of (teacher, opd) against the stepped and the initial student sampled again with
    the documented seed, each completion checked, per-prompt means compared in loops."""
    from test_lookahead_forgetting import stepped_by_hand

    from opsd_diag.engine.sampling import sample_hf
    from opsd_diag.io import store
    from opsd_diag.io.thinking import answer_text
    from opsd_diag.io.verify import is_correct
    from opsd_diag.config.settings import derive_seed

    cfg, prep, out = v2_run
    la = store.read_json(out / "summary.json")["lookahead"]
    _, measure_rows = lookahead.split(store.read_table(out, "rollouts"))
    assert la["fresh_prompts"] == measure_rows["problem_id"].nunique() > 1
    stepped = stepped_by_hand(cfg, prep, out)
    first = measure_rows.drop_duplicates("problem_id")
    prompts = [[int(x) for x in p] for p in first["prompt_ids.student"]]
    answers = [str(prep.problems[int(i)]["answer"]) for i in first["problem_index"]]
    sampling = cfg.sampling.settings(derive_seed(cfg.lookahead.seed, lookahead.FRESH_STREAM), num_samples=4)

    def wins(model):
        comps = sample_hf(model, prep.tok, prompts, sampling, prep.stop_ids)
        return [[float(is_correct(answer_text(prep.tok, c.ids), a, cfg.analysis.checker)) for c in cs]
                for cs, a in zip(comps, answers)]
    old, new = wins(prep.student), wins(stepped)
    assert wins(prep.student) == old  # the same seed: the same samples (the change of an unchanged student is 0)
    per = {p: [sum(n) / len(n) - sum(o) / len(o)] for p, o, n in zip(first["problem_id"], old, new)}
    want = ref_mean_ci(per, cfg.analysis.bootstrap, cfg.sampling.seed)
    got = la["configs"]["teacher"]["opd"]["fresh"]["pass@1"]
    assert (got["estimate"], got["lo"], got["hi"]) == pytest.approx(want, abs=1e-9)
    assert set(la["configs"]["teacher"]["opd"]["fresh"]) == {"pass@1", "pass@4"}
    frame = lookahead_frame_row(out)
    assert frame["pass1_fresh"] == pytest.approx(got["estimate"])


def lookahead_frame_row(out):
    from opsd_diag.run import Run

    f = Run.load(out).lookahead_frame()
    return f[(f["config"] == "teacher") & (f["method"] == "opd")].iloc[0]


def test_the_new_options_are_checked():
    from opsd_diag.errors import OpsdError

    base = {"student": {"model": "s"}, "teachers": [{"name": "t", "context": "full_solution"}], "data": {"path": "d"}}
    with pytest.raises(OpsdError, match="acting_budget"):
        from_dict({**base, "ideal": {"acting_budget": -1}})
    with pytest.raises(OpsdError, match="fresh_samples"):
        from_dict({**base, "lookahead": {"fresh_samples": "4"}})
    assert from_dict({**base, "ideal": {}}).ideal.acting_budget == 0  # off unless asked: it costs continuations
