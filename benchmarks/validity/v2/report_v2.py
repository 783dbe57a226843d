"""Predictor v2, leave-one-world-out, as pre-registered (plan.yaml here): analysis JSON, RESULTS.md, shipped model.

    python benchmarks/validity/v2/report_v2.py --from DIR        # DIR: run_v2.py's output

Joins every diagnosed (configuration, method) row of the committed worlds analysis (realised outcomes
and v1 columns, as measured) with its lookahead columns from ``DIR/<world>/lookahead.json``, fits the
plan's ridge models leave-one-world-out (``opsd_diag.core.predictor``), and writes
``v2_analysis.json`` and ``RESULTS.md`` here (``render`` makes RESULTS.md from the JSON alone) and the
model fitted on all seven worlds, with its fold errors, into the package
(``opsd_diag/data/predictor_v2.json``).

The stored training runs of the worlds study are gone, so the realised values' own resampling (seeds
and problems) inside each bootstrap replicate is drawn from a normal with each row's committed
interval (SD = (hi - lo) / 3.92), seeded; clusters (world, configuration) are resampled as planned.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import run_v2  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PLAN = HERE / "plan.yaml"
SHIPPED = REPO / "opsd_diag" / "data" / "predictor_v2.json"
OUTCOMES = ("d_pass1", "d_pass4", "d_regression", "kl_to_initial")
SINGLE = ("accuracy_gap", "score", "verdict_value", "teacher_advantage", "alignment", "teachability", "mean_jsd",
          "lookahead_dv", "lookahead_dll", "lookahead_kl")


def load_rows(study: Path, plan: dict) -> list[dict]:
    """Every diagnosed row of the committed worlds analysis with its lookahead columns (estimates)."""
    worlds = json.loads((REPO / plan["outcomes_from"]).read_text())["worlds"]
    rows = []
    for w in plan["worlds"]:
        la = {(r["config"], r["method"]): r for r in json.loads((study / w / "lookahead.json").read_text())["rows"]}
        for r in worlds[w]["rows"]:
            if r.get("kind") != "product":
                continue
            x = la[(r["config"], r["method"])]
            rows.append({"world": w, "config": r["config"], "method": r["method"], "realised": r["realised"],
                         **{k: r.get(k) for k in SINGLE if not k.startswith("lookahead")},
                         **{k: x[k]["estimate"] for k in ("lookahead_dv", "lookahead_dll", "lookahead_kl")},
                         "is_jsd": model.LOSS_KIND[r["method"]],
                         **{o: r[o] for o in OUTCOMES},
                         "cost": {k: x[k] for k in ("trained_tokens", "partner_scored_tokens", "measured_tokens",
                                                    "n_measure_rollouts", "training_run_completions")},
                         "rediagnosed": rediagnosed(study / w / "diag" / r["diagnosis_run"], r["diagnosis_config"])})
    return rows


def rediagnosed(run: Path, config: str) -> dict:
    """The rediagnosis' own G and mean JSD of the row (they must equal the committed ones: same rollouts)."""
    c = json.loads((run / "summary.json").read_text())["configs"][config]
    return {"accuracy_gap": c["teacher_minus_student_accuracy"]["estimate"],
            "mean_jsd": c["overall"]["columns"]["jsd"]["mean"]}


def reproduction(rows: list[dict]) -> dict:
    """Largest difference between the rediagnosed and the committed G and mean JSD over every row."""
    return {k: max(abs(_num(r["rediagnosed"][k]) - _num(r[k])) for r in rows) for k in ("accuracy_gap", "mean_jsd")}


def _num(v) -> float:
    return math.nan if v is None else float(v)


def matrix(rows: list[dict], features: list[str]) -> np.ndarray:
    """``[n, f]``; a derived feature (``core.predictor.DERIVED``) computed from the row's columns as the product
    does."""
    if any(f in model.DERIVED for f in features):
        rows = [{**model.derived(*(_num(r[k]) for k in ("accuracy_gap", "teachability", "mean_jsd"))), **r}
                for r in rows]  # a row's own column, where it has one, wins
    return np.array([[_num(r[f]) for f in features] for r in rows], dtype=np.float64)


def target(rows: list[dict], outcome: str) -> np.ndarray:
    return np.array([_num(r[outcome]["estimate"]) for r in rows])


def lowo(rows: list[dict], features: list[str], outcome: str, alpha: float, inner: bool = True) -> dict:
    """Out-of-fold predictions (and, with ``inner``, each fold's residual band from an inner LOWO)."""
    worlds = sorted({r["world"] for r in rows})
    w = np.array([r["world"] for r in rows])
    X, y = matrix(rows, features), target(rows, outcome)
    pred = np.full(len(rows), np.nan)
    lo, hi = pred.copy(), pred.copy()
    for held in worlds:
        train, test = (w != held) & np.isfinite(y), w == held
        m = model.fit(X[train], y[train], features, alpha)
        pred[test] = model.predict(m, X[test])
        if inner:
            sub = [r for r, t in zip(rows, train) if t]
            inner_pred = lowo(sub, features, outcome, alpha, inner=False)["pred"]
            q_lo, q_hi = model.residual_band(target(sub, outcome) - inner_pred)
            lo[test], hi[test] = pred[test] + q_lo, pred[test] + q_hi
    return {"pred": pred, "lo": lo, "hi": hi}


def realised_reps(rows: list[dict], outcome: str, n_boot: int, seed: int) -> np.ndarray:
    """[rows, B] realised values redrawn from each row's committed interval (module docstring)."""
    rng = np.random.default_rng(seed)
    est = target(rows, outcome)
    sd = np.array([(_num(r[outcome]["hi"]) - _num(r[outcome]["lo"])) / 3.92 for r in rows])
    return est[:, None] + sd[:, None] * rng.standard_normal((len(rows), n_boot))


def rho(x, rows, outcome, reps, boot, other=None) -> dict:
    clusters = [f"{r['world']}/{r['config']}" for r in rows]
    out = stats.spearman_bootstrap(x, target(rows, outcome), reps, clusters, boot["n"], boot["seed"], 0.05, other)
    return {k: v for k, v in out.items() if k != "replicates"}


def per_world(x, rows, outcome) -> dict:
    w = np.array([r["world"] for r in rows])
    y = target(rows, outcome)
    out = {}
    for name in sorted(set(w)):
        k = (w == name) & np.isfinite(np.asarray(x, float)) & np.isfinite(y)
        out[name] = stats.spearman(np.asarray(x, float)[k], y[k])
    finite = [v for v in out.values() if np.isfinite(v)]
    return {"worlds": out, "mean": float(np.mean(finite)) if finite else math.nan}


def method_order(pred, rows, gap: float = 0.10) -> dict:
    """Pairs of methods of one (world, configuration) whose realised d_pass1 differ by more than ``gap``."""
    y = target(rows, "d_pass1")
    n = k = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            same = rows[i]["world"] == rows[j]["world"] and rows[i]["config"] == rows[j]["config"]
            if same and abs(y[i] - y[j]) > gap and np.isfinite(pred[i]) and np.isfinite(pred[j]):
                n += 1
                k += (pred[i] - pred[j]) * (y[i] - y[j]) > 0
    return {"n_pairs": n, "n_right": int(k), "accuracy": k / n if n else math.nan}


def decisions(fold: dict, rows: list[dict], delta: float) -> dict:
    v = [model.verdict(a, b, delta) for a, b in zip(fold["lo"], fold["hi"])]
    lo = [_num(r["d_pass1"]["lo"]) for r in rows]
    hi = [_num(r["d_pass1"]["hi"]) for r in rows]
    acc = stats.verdict_accuracy(v, lo, hi)
    t = acc["table"]
    helps, hurts = sum(t["helps"].values()), sum(t["hurts"].values())
    y = target(rows, "d_pass1")
    inside = (y >= fold["lo"]) & (y <= fold["hi"])
    return {**acc, "unclear_share": acc["n_unclear"] / len(rows),
            "helps_precision": t["helps"]["improves"] / helps if helps else math.nan,
            "hurts_precision": t["hurts"]["degrades"] / hurts if hurts else math.nan,
            "coverage": float(inside.mean()), "verdicts": v}


def cost(rows: list[dict]) -> dict:
    """Lookahead tokens per row over one training run's (sampled + scored + trained) completion tokens."""
    out = {}
    for r in rows:
        c = r["cost"]
        mean_len = c["measured_tokens"] / max(1, c["n_measure_rollouts"])
        run = 3 * c["training_run_completions"] * mean_len
        share = (c["trained_tokens"] + c["partner_scored_tokens"] + c["measured_tokens"]) / run
        out.setdefault(r["world"], []).append(share)
    return {w: {"mean": float(np.mean(v)), "max": float(np.max(v))} for w, v in out.items()}


def analyse(study: Path) -> dict:
    plan = yaml.safe_load(PLAN.read_text())
    rows = load_rows(study, plan)
    m, v = plan["model"], plan["validation"]
    boot = {"n": 2000, "seed": 0}
    reps = realised_reps(rows, "d_pass1", boot["n"], boot["seed"])
    g = np.array([_num(r["accuracy_gap"]) for r in rows])
    out = {"plan": "benchmarks/validity/v2/plan.yaml", "n_rows": len(rows), "delta": v["delta"],
           "alpha": m["alpha"], "tiers": {}, "single": {}, "targets": plan["targets"]}
    for tier, features in m["tiers"].items():
        fold = lowo(rows, features, "d_pass1", m["alpha"])
        out["tiers"][tier] = {
            "features": features,
            "spearman": rho(fold["pred"], rows, "d_pass1", reps, boot),
            "per_world": per_world(fold["pred"], rows, "d_pass1"),
            "vs_accuracy_gap": rho(fold["pred"], rows, "d_pass1", reps, boot, other=g),
            "decisions": decisions(fold, rows, v["delta"]),
            "method_order": method_order(fold["pred"], rows),
            "pred": fold["pred"].tolist(), "lo": fold["lo"].tolist(), "hi": fold["hi"].tolist()}
    for name in SINGLE:
        x = np.array([_num(r[name]) for r in rows])
        out["single"][name] = {"spearman": rho(x, rows, "d_pass1", reps, boot), "per_world": per_world(x, rows, "d_pass1"),
                               "method_order": method_order(x, rows)}
    feats = m["tiers"]["v2"]
    others = {}
    for o in ("d_pass4", "d_regression", "kl_to_initial"):
        fold = lowo(rows, feats, o, m["alpha"], inner=False)
        others[o] = {"spearman": stats.spearman(*_finite(fold["pred"], target(rows, o))),
                     "per_world": per_world(fold["pred"], rows, o)}
    out["other_outcomes"] = others
    out["cost"] = cost(rows)
    out["reproduction"] = reproduction(rows)
    out["rows"] = [{k: r[k] for k in ("world", "config", "method", "realised")} | {"d_pass1": r["d_pass1"]["estimate"]}
                   for r in rows]
    out["ship"] = ship(out, rows, plan)
    return out


def _finite(a, b):
    k = np.isfinite(a) & np.isfinite(b)
    return a[k], b[k]


def ship(out: dict, rows: list[dict], plan: dict) -> dict:
    """The plan's ship rule, and every model (all seven worlds) the product may apply."""
    v2, g = out["tiers"]["v2"], out["single"]["accuracy_gap"]["spearman"]
    wins = v2["spearman"]["estimate"] > g["estimate"] and v2["vs_accuracy_gap"]["lo"] > 0
    best_tier = max(out["tiers"], key=lambda t: out["tiers"][t]["spearman"]["estimate"])
    choice = "v2" if wins else (best_tier if out["tiers"][best_tier]["spearman"]["estimate"] > g["estimate"]
                                else "accuracy_gap")
    return {"choice": choice, "v2_beats_accuracy_gap": bool(wins),
            "reason": ("v2's pooled LOWO Spearman is above G's and the paired interval lies above 0" if wins else
                       f"v2 does not beat G at 95% (paired difference {v2['vs_accuracy_gap']['estimate']:+.2f} "
                       f"[{v2['vs_accuracy_gap']['lo']:+.2f}, {v2['vs_accuracy_gap']['hi']:+.2f}])")}


def shipped_models(rows: list[dict], plan: dict, analysis: dict) -> dict:
    """Each tier and outcome fitted on all seven worlds, with the LOWO residual band it ships with."""
    m = plan["model"]
    models = {}
    for tier, features in m["tiers"].items():
        X = matrix(rows, features)
        per = {}
        for o in OUTCOMES:
            y = target(rows, o)
            k = np.isfinite(y)
            fit = model.fit(X[k], y[k], features, m["alpha"])
            fold = lowo(rows, features, o, m["alpha"], inner=False)
            per[o] = {**fit, "residual_band": list(model.residual_band(y - fold["pred"]))}
        models[tier] = per
    return models


def fmt(x, nd=2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:+.{nd}f}"


def ci(d: dict) -> str:
    return f"{fmt(d['estimate'])} [{fmt(d['lo'])}, {fmt(d['hi'])}]"


def render(a: dict) -> str:
    t = a["targets"]
    lines = ["# Predictor v2: leave-one-world-out over the seven outcome worlds", "",
             f"Generated by `python benchmarks/validity/v2/report_v2.py --from DIR` from `v2_analysis.json` "
             f"(plan: `{a['plan']}`, committed before any lookahead column or LOWO fit). {a['n_rows']} rows "
             f"(configuration x method); realised outcomes as measured by the worlds study.", "",
             f"**Ship rule:** {a['ship']['choice']} ships. {a['ship']['reason']}.", "",
             "## Ranking: Spearman with realised held-out d_pass1 (out-of-fold)", "",
             "| predictor | pooled [95% cluster bootstrap] | mean of worlds | method order (pairs > 0.10 apart) |",
             "|---|---|---|---|"]
    for tier, d in a["tiers"].items():
        mo = d["method_order"]
        lines.append(f"| **{tier}** (ridge: {', '.join(d['features'])}) | {ci(d['spearman'])} | "
                     f"{fmt(d['per_world']['mean'])} | {mo['n_right']}/{mo['n_pairs']} |")
    for name, d in a["single"].items():
        mo = d["method_order"]
        lines.append(f"| {name} | {ci(d['spearman'])} | {fmt(d['per_world']['mean'])} | {mo['n_right']}/{mo['n_pairs']} |")
    lines += ["", "Paired difference against the accuracy gap G (same replicates):", ""]
    for tier, d in a["tiers"].items():
        lines.append(f"- {tier} - G: {ci(d['vs_accuracy_gap'])}")
    worlds = sorted(a["single"]["accuracy_gap"]["per_world"]["worlds"])
    lines += ["", "## Per left-out world (Spearman)", "", "| world | " + " | ".join([*a["tiers"], "accuracy_gap", "score",
              "lookahead_dv"]) + " |", "|---|" + "---|" * (len(a["tiers"]) + 3)]
    for w in worlds:
        vals = [a["tiers"][t]["per_world"]["worlds"][w] for t in a["tiers"]]
        vals += [a["single"][s]["per_world"]["worlds"][w] for s in ("accuracy_gap", "score", "lookahead_dv")]
        lines.append(f"| {w} | " + " | ".join(fmt(x) for x in vals) + " |")
    lines += decision_table(a)
    lines += ["", "## Other outcomes (v2's features, LOWO, pooled Spearman)", ""]
    for o, d in a["other_outcomes"].items():
        lines.append(f"- {o}: {fmt(d['spearman'])} (mean of worlds {fmt(d['per_world']['mean'])})")
    rep = a["reproduction"]
    lines += ["", f"Reproduction: the rediagnosis (same configs and seeds as the worlds study) gives every row's G within "
              f"{rep['accuracy_gap']:.1e} and mean JSD within {rep['mean_jsd']:.1e} of the committed values."]
    lines += ["", "## Cost of the lookahead (tokens per row over one training run's sampled + scored + trained tokens)",
              "", "| world | mean | max |", "|---|---|---|"]
    for w, d in a["cost"].items():
        lines.append(f"| {w} | {d['mean']:.1%} | {d['max']:.1%} |")
    v2 = a["tiers"]["v2"]
    checks = [("pooled Spearman >= %.2f" % t["spearman_pooled"], v2["spearman"]["estimate"] >= t["spearman_pooled"]),
              ("mean of worlds >= %.2f" % t["spearman_mean_of_worlds"], v2["per_world"]["mean"] >= t["spearman_mean_of_worlds"]),
              ("paired difference vs G above 0", v2["vs_accuracy_gap"]["lo"] > 0),
              ("decisive >= %.0f%% right" % (100 * t["decisive_accuracy"]), _ge(v2["decisions"]["accuracy"], t["decisive_accuracy"])),
              ("unclear <= %.0f%%" % (100 * t["unclear_share_max"]), v2["decisions"]["unclear_share"] <= t["unclear_share_max"]),
              ("coverage in [%.2f, %.2f]" % tuple(t["coverage"]), t["coverage"][0] <= v2["decisions"]["coverage"] <= t["coverage"][1]),
              ("method order >= %.0f%%" % (100 * t["method_order"]), _ge(v2["method_order"]["accuracy"], t["method_order"])),
              ("forgetting Spearman >= %.1f" % t["forgetting_spearman"], _ge(a["other_outcomes"]["d_regression"]["spearman"], t["forgetting_spearman"])),
              ("cost <= %.0f%% of a run" % (100 * t["cost_share_max"]), max(d["max"] for d in a["cost"].values()) <= t["cost_share_max"])]
    lines += ["", "## Targets (issue 32), v2", "", "| target | met |", "|---|---|"]
    lines += [f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in checks]
    return "\n".join(lines) + "\n"


def decision_table(a: dict) -> list[str]:
    """The decisions section of a look's report: per model the decisive calls, precisions, unclear share, coverage."""
    lines = ["", f"## Decisions (delta = {a['delta']}: helps when the 95% interval lies above +delta, hurts below -delta)",
             "", "| model | decisive right | helps precision | hurts precision | unclear | coverage of 95% intervals |",
             "|---|---|---|---|---|---|"]
    for tier, d in a["tiers"].items():
        c = d["decisions"]
        lines.append(f"| {tier} | {c['n_correct']}/{c['n_decisive']} ({fmt(c['accuracy'])}) | {fmt(c['helps_precision'])} | "
                     f"{fmt(c['hurts_precision'])} | {c['unclear_share']:.0%} | {c['coverage']:.0%} |")
    return lines


def _ge(x, t) -> bool:
    return x is not None and math.isfinite(x) and x >= t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="study", required=True, type=Path)
    args = ap.parse_args(argv)
    plan = yaml.safe_load(PLAN.read_text())
    a = analyse(args.study)
    (HERE / "v2_analysis.json").write_text(json.dumps(stats_jsonable(a), indent=1, sort_keys=True) + "\n")
    (HERE / "RESULTS.md").write_text(render(json.loads((HERE / "v2_analysis.json").read_text())))
    rows = load_rows(args.study, plan)
    SHIPPED.parent.mkdir(exist_ok=True)
    shipped = {"version": 2, "generated_by": "benchmarks/validity/v2/report_v2.py", "plan": a["plan"],
               "study": "benchmarks/validity/v2/RESULTS.md", "choice": a["ship"]["choice"], "reason": a["ship"]["reason"],
               "delta": a["delta"], "models": shipped_models(rows, plan, a),
               "lowo": {t: {"spearman": d["spearman"], "mean_of_worlds": d["per_world"]["mean"],
                            "decisive_accuracy": d["decisions"]["accuracy"], "coverage": d["decisions"]["coverage"],
                            "unclear_share": d["decisions"]["unclear_share"]} for t, d in a["tiers"].items()},
               "accuracy_gap": a["single"]["accuracy_gap"]["spearman"], "studies": earlier_studies(),
               "lookahead_settings": study_lookahead(plan)}
    if SHIPPED.is_file():  # the later looks' records (report_look2.py), the checks (report_checks.py) and the early
        old = json.loads(SHIPPED.read_text())  # read (explore_early_success.py) stay
        shipped.update({k: old[k] for k in ("later_looks", "checks", "early_read") if k in old})
    SHIPPED.write_text(json.dumps(stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print((HERE / "RESULTS.md").read_text())
    return 0


def study_lookahead(plan: dict) -> dict:
    """The lookahead settings the features were measured with (run_v2.lookahead_section): a run with others is warned."""
    from benchmarks.validity.worlds import run_worlds

    s = run_v2.lookahead_section(plan, run_worlds.load("default")["common"])
    return {k: s[k] for k in ("steps", "rollouts_per_step", "learning_rate")}


def earlier_studies() -> dict:
    """The v1 studies' figures the decision panel quotes (toy world, outcome worlds), so the package carries them."""
    from opsd_diag import decision

    val = REPO / "benchmarks" / "validity"
    return {"toy_world": decision.validity(val / "validity_analysis.json"),
            "outcome_worlds": decision.validity(val / "worlds" / "worlds_analysis.json")}


def stats_jsonable(x):
    """NaN and numpy values as JSON (NaN -> null)."""
    if isinstance(x, dict):
        return {str(k): stats_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [stats_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


if __name__ == "__main__":
    sys.exit(main())
