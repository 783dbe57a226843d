"""Everything the report states, computed from a study directory's stored runs (nothing typed by hand).

``analyse(study_dir)`` returns a JSON-ready dict: one row per (configuration, method) with every
predictor and the realised outcome (with bootstrap intervals), the Spearman correlation of each
predictor with the realised gain, the verdict's accuracy, the comparison with the best cheap
baseline, where the predictor is wrong, and the replication check of the derived diagnoses.
Product files are read through runs_io only; the study's own evaluation files are read here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from benchmarks.validity import plan as plan_mod
from benchmarks.validity import runs_io, stats

PRODUCT = ("verdict", "score", "teacher_advantage", "alignment")
BASELINES = ("mean_rev_kl", "mean_jsd", "accuracy_gap", "opd2_sign_agreement")


def _eval(study: Path, name: str) -> dict:
    return json.loads((study / "eval" / f"{name}.json").read_text())


def _matrix(evals: list[dict], part: str, ids: list[str], k: int) -> np.ndarray:
    """[seeds, problems] per-problem pass@k."""
    return np.array([[stats.pass_at_k(*e[part][pid], k) for pid in ids] for e in evals])


def _kl(evals: list[dict], ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    sums = np.array([[e["kl"].get(pid, [0.0, 0])[0] for pid in ids] for e in evals])
    counts = np.array([[e["kl"].get(pid, [0.0, 0])[1] for pid in ids] for e in evals], dtype=float)
    return sums, counts


def _ci(est: float, reps: np.ndarray, alpha: float) -> dict:
    lo, hi = stats.percentile_interval(reps, alpha)
    return {"estimate": float(est), "lo": lo, "hi": hi}


def _alignment_cache(study: Path, thr: float) -> dict:
    cache = {}

    def get(run: str, config: str) -> dict:
        key = (run, config)
        if key not in cache:
            tokens = runs_io.diag_tokens(study / "diag" / run, ["a_opd", "a_delta"])
            for name, df in tokens.groupby("config"):
                cache[(run, name)] = stats.near_zero_alignment(df["a_opd"], df["a_delta"], thr)
        return cache[key]
    return get


def outcome_context(study: Path, plan: dict, rng: np.random.Generator) -> dict:
    """The initial student's evaluation, the problem resamples every row shares (paired with its final
    values) and the initial values with their intervals (``base``)."""
    an = plan["analysis"]
    n_boot, alpha = an["bootstrap"], an["alpha"]
    k_hi = max(plan["evaluation"]["pass_k"])
    initial = _eval(study, "initial")
    test_ids, reg_ids = sorted(initial["test"]), sorted(initial["regression"])
    prob_counts = stats.draw_counts(rng, len(test_ids), n_boot)
    reg_counts = stats.draw_counts(rng, len(reg_ids), n_boot)
    init1 = _matrix([initial], "test", test_ids, 1)[0]
    initk = _matrix([initial], "test", test_ids, k_hi)[0]
    init_reg = _matrix([initial], "regression", reg_ids, 1)[0]
    one = np.ones((n_boot, 1))
    base = {"pass@1": _ci(init1.mean(), stats.seed_problem_replicates(init1[None], one, prob_counts), alpha),
            f"pass@{k_hi}": _ci(initk.mean(), stats.seed_problem_replicates(initk[None], one, prob_counts), alpha),
            "regression_pass@1": _ci(init_reg.mean(), stats.seed_problem_replicates(init_reg[None], one, reg_counts),
                                     alpha),
            "n_test": len(test_ids), "n_regression": len(reg_ids), "settings": initial["settings"]}
    return {"study": study, "rng": rng, "n_boot": n_boot, "alpha": alpha, "k_hi": k_hi, "test_ids": test_ids,
            "reg_ids": reg_ids, "prob_counts": prob_counts, "reg_counts": reg_counts, "init1": init1,
            "initk": initk, "init_reg": init_reg, "base": base}


def realised_outcomes(ctx: dict, names: list[str]) -> tuple[dict, dict]:
    """One row's realised outcomes over its training runs ``names`` (one per seed): the row fields and
    each outcome's bootstrap replicates ``{gain_pass@1, gain_pass@K, regression_change, kl_to_initial: [B]}``
    (seeds and problems resampled; each problem's final value paired with its initial one)."""
    study, alpha, n_boot, k_hi = ctx["study"], ctx["alpha"], ctx["n_boot"], ctx["k_hi"]
    test_ids, reg_ids, prob_counts = ctx["test_ids"], ctx["reg_ids"], ctx["prob_counts"]
    init1, initk, init_reg = ctx["init1"], ctx["initk"], ctx["init_reg"]
    evals = [_eval(study, n) for n in names]
    fin1 = _matrix(evals, "test", test_ids, 1)
    fink = _matrix(evals, "test", test_ids, k_hi)
    finr = _matrix(evals, "regression", reg_ids, 1)
    seed_counts = stats.draw_counts(ctx["rng"], len(names), n_boot)
    d1 = fin1 - init1[None]
    reps = {"gain_pass@1": stats.seed_problem_replicates(d1, seed_counts, prob_counts),
            f"gain_pass@{k_hi}": stats.seed_problem_replicates(fink - initk[None], seed_counts, prob_counts),
            "regression_change": stats.seed_problem_replicates(finr - init_reg[None], seed_counts, ctx["reg_counts"])}
    kl_sum, kl_cnt = _kl(evals, test_ids)
    with np.errstate(invalid="ignore", divide="ignore"):
        kl_ratio = np.where(kl_cnt > 0, kl_sum / np.maximum(kl_cnt, 1), 0.0)
    reps["kl_to_initial"] = stats.seed_problem_replicates(kl_ratio, seed_counts, prob_counts, weights=kl_cnt)
    gain = _ci(d1.mean(), reps["gain_pass@1"], alpha)
    train = [runs_io.train_summary(study / "train" / n) for n in names]
    fields = {
        "gain_pass@1": gain, f"gain_pass@{k_hi}": _ci((fink - initk[None]).mean(), reps[f"gain_pass@{k_hi}"], alpha),
        "final_pass@1_per_seed": fin1.mean(1).tolist(),
        "regression_change": _ci((finr - init_reg[None]).mean(), reps["regression_change"], alpha),
        "kl_to_initial": _ci(float(kl_sum.sum() / max(1.0, kl_cnt.sum())), reps["kl_to_initial"], alpha),
        "realised": stats.realised_class(gain["lo"], gain["hi"]),
        "train_seconds": float(np.nansum([t["seconds"] for t in train])),
        "train_r_opd_first10": float(np.nanmean([t["r_opd_first10"] for t in train])),
        "train_r_opd_last10": float(np.nanmean([t["r_opd_last10"] for t in train])),
        "runs": names,
    }
    return fields, reps


def analyse(study_dir: Path) -> dict:
    study = Path(study_dir)
    plan = json.loads((study / "plan.resolved.json").read_text())
    an = plan["analysis"]
    alpha, n_boot, bseed, thr = an["alpha"], an["bootstrap"], an["bootstrap_seed"], an["near_zero"]
    seeds = plan["training"]["seeds"]
    ctx = outcome_context(study, plan, np.random.default_rng(bseed))
    base = ctx["base"]

    summaries = {run: runs_io.diag_summary(study / "diag" / run) for run in plan_mod.derived_runs(plan)
                 if (study / "diag" / run).is_dir()}
    align = _alignment_cache(study, thr)
    rows, gain_reps = [], []
    for r in plan_mod.rows(plan):
        run, name = plan_mod.diag_source(plan, r.config)
        pred = runs_io.predictor_inputs(summaries[run], name, r.signal)
        al = align(run, name)
        names = [plan_mod.run_name(r.config, r.method, s) for s in seeds]
        fields, reps = realised_outcomes(ctx, names)
        rows.append({
            "config": r.config, "method": r.method, "signal": r.signal, "diagnosis_run": run, "diagnosis_config": name,
            **{k: v for k, v in pred.items() if not k.endswith("_ci")},
            "verdict_value": stats.VERDICT_VALUE[pred["verdict"]],
            "teacher_advantage_ci": pred["teacher_advantage_ci"], "alignment_ci": pred["alignment_ci"],
            "accuracy_gap_ci": pred["accuracy_gap_ci"],
            "opd2_sign_agreement": al["sign_agreement"], "near_zero_share": al["near_zero_share"],
            "opd_near_zero_share": al["opd_near_zero_share"], "delta_opd_pearson": al["pearson"],
            "delta_opd_spearman": al["spearman"], "n_informative_tokens": al["n_informative"],
            **fields,
        })
        gain_reps.append(reps["gain_pass@1"])
    gain_reps = np.array(gain_reps)
    gains = np.array([r["gain_pass@1"]["estimate"] for r in rows])
    clusters = [r["config"] for r in rows]

    def values(name):
        key = "verdict_value" if name == "verdict" else name
        return np.array([r[key] for r in rows], dtype=float)

    corr = {}
    for name in (*PRODUCT, *BASELINES):
        corr[name] = stats.spearman_bootstrap(values(name), gains, gain_reps, clusters, n_boot, bseed, alpha)
        corr[name]["kind"] = "product" if name in PRODUCT else "baseline"
    primary = an["primary_predictor"]
    finite = [b for b in BASELINES if np.isfinite(corr[b]["estimate"])]
    comparison = {"primary": primary, "primary_rho": corr[primary]}
    if finite:
        best = max(finite, key=lambda b: abs(corr[b]["estimate"]))
        sign = 1.0 if corr[best]["estimate"] >= 0 else -1.0
        diff = stats.spearman_bootstrap(values(primary), gains, gain_reps, clusters, n_boot, bseed, alpha,
                                        other=sign * values(best))
        comparison.update({"best_baseline": best, "best_baseline_sign": sign,
                           "best_baseline_rho": corr[best], "difference": diff,
                           "better": bool(diff["lo"] > 0)})
    acc = stats.verdict_accuracy([r["verdict"] for r in rows], [r["gain_pass@1"]["lo"] for r in rows],
                                 [r["gain_pass@1"]["hi"] for r in rows], alpha)
    return {
        "plan": {k: plan[k] for k in ("variant", "level_selected", "level_gaps", "training", "evaluation",
                                     "analysis", "diagnosis", "splits")},
        "initial": base, "rows": rows, "spearman": corr, "comparison": comparison, "verdict_accuracy": acc,
        "wrong": _wrong(rows), "replication": _replication(plan, summaries),
        "rollout_check": json.loads((study / "checks.json").read_text()) if (study / "checks.json").is_file() else None,
        "ideal": {run: runs_io.ideal_settings(s) for run, s in summaries.items()},
        "timing": _timing(study),
    }


def _wrong(rows: list[dict]) -> list[dict]:
    """Rows where the verdict and the realised outcome disagree, with the evidence on both sides."""
    out = []
    for r in rows:
        v, cls = r["verdict"], r["realised"]
        if (v, cls) in (("helps", "improves"), ("hurts", "degrades"), ("unclear", "no clear change")):
            continue
        kind = ("wrong decision" if v != "unclear" else "missed (unclear, but training had a clear effect)")
        sibling = [s for s in rows if s["config"] == r["config"] and s["method"] != r["method"]]
        out.append({"config": r["config"], "method": r["method"], "signal": r["signal"], "verdict": v, "realised": cls,
                    "kind": kind, "reason": r["reason"], "gain": r["gain_pass@1"],
                    "teacher_advantage": r["teacher_advantage"], "alignment": r["alignment"],
                    "accuracy_gap": r["accuracy_gap"], "score": r["score"],
                    "regression_change": r["regression_change"]["estimate"],
                    "kl_to_initial": r["kl_to_initial"]["estimate"],
                    "other_methods": {s["method"]: s["realised"] for s in sibling}})
    return out


def _replication(plan: dict, summaries: dict) -> list[dict]:
    """Configs present in the main and a derived diagnosis with the same view: the ideal estimates of the
    same config in two runs differ only through the other configs' candidate tokens (and the node budget)."""
    main = summaries.get(plan_mod.MAIN)
    out = []
    if main is None:
        return out
    solution_free = {c["name"] for c in plan["configurations"] if not c.get("derive")
                     and ("teacher" in c or c.get("context") in ("answer_only", "wrong_solution"))}
    for run, s in summaries.items():
        if run == plan_mod.MAIN:
            continue
        for config in sorted(solution_free & set(s["configs"]) & set(main["configs"])):
            for signal in ("r_opd", "jsd"):
                a = runs_io.predictor_inputs(main, config, signal)
                b = runs_io.predictor_inputs(s, config, signal)
                out.append({"config": config, "signal": signal, "run": run,
                            "main": {k: a[k] for k in ("verdict", "score", "teacher_advantage", "alignment",
                                                       "mean_rev_kl", "accuracy_gap")},
                            "derived": {k: b[k] for k in ("verdict", "score", "teacher_advantage", "alignment",
                                                          "mean_rev_kl", "accuracy_gap")}})
    return out


def _timing(study: Path) -> dict:
    path = study / "jobs.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    by_kind: dict[str, list[float]] = {}
    cpu: dict[str, float] = {}
    for r in recs:
        if r.get("ok"):
            by_kind.setdefault(r["kind"], []).append(r["seconds"])
            cpu[r["kind"]] = cpu.get(r["kind"], 0.0) + float(r.get("cpu_s") or 0.0)
    sess = json.loads((study / "study.json").read_text())["sessions"] if (study / "study.json").is_file() else []
    return {"jobs": {k: {"n": len(v), "mean_s": float(np.mean(v)), "total_s": float(np.sum(v)), "cpu_s": cpu.get(k)}
                     for k, v in by_kind.items()},
            "wall_s": float(sum(s["seconds"] for s in sess)), "sessions": sess,
            "busy_s": _union_s([(r["start"], r["start"] + r["seconds"]) for r in recs if r.get("ok") and "start" in r])}


def _union_s(intervals: list[tuple[float, float]]) -> float:
    """Seconds covered by at least one interval: the study's wall time spent running jobs, also when a killed
    session left no session record (its finished jobs are in jobs.jsonl)."""
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return float(total)


def jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj
