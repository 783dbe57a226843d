"""Every number of the worlds report, from a worlds study directory (plan.yaml's ``analysis`` section).

    python benchmarks/validity/worlds/analyze_worlds.py --from DIR      # -> DIR/worlds_analysis.json

Per world (``DIR/<world>/``, one study of ``benchmarks/validity``): one row per (configuration,
method) with the four realised outcomes and every predictor of the plan (undefined ones null and
counted), the ``sft`` reference rows (realised only), Spearman of each predictor with each outcome
(cluster bootstrap over configurations), the verdict's accuracy, method disagreements, the rows each
predictor ranks worst and the score against the best cheap baseline; then the same pooled over worlds
(clusters = (world, configuration)) and the mean of the per-world coefficients. Worlds the level rule
excluded, not built, unfinished or not run are listed as such. The outcomes reuse
``analysis.realised_outcomes``, the statistics ``stats``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import analysis, runs_io, stats  # noqa: E402
from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

OUTCOMES = {"d_pass1": "gain_pass@1", "d_pass4": "gain_pass@4", "d_regression": "regression_change",
            "kl_to_initial": "kl_to_initial"}  # plan name -> analysis.realised_outcomes field
PRIMARY = "score"  # the product's ranking score, compared with the best cheap baseline (issue 11)
N_WRONG = 3


def _num(x) -> float:
    return math.nan if x is None else float(x)


def value(row: dict, name: str) -> float:
    """A row's predictor as a number (the verdict as +1 / 0 / -1)."""
    return _num(row.get("verdict_value" if name == "verdict" else name))


def trained_rows(plan: dict) -> list[plan_mod.Row]:
    """The plan's (configuration, method) rows that were trained (a method's ``not_for`` left out)."""
    return [r for r in plan_mod.rows(plan) if not run_worlds._skip(plan, plan_mod.run_name(r.config, r.method, 0))]


def missing_outputs(study: Path, plan: dict) -> tuple[int, int]:
    """(evaluations missing, evaluations needed) plus one for every diagnosis summary missing."""
    seeds = plan["training"]["seeds"]
    names = ["initial", *[plan_mod.run_name(r.config, r.method, s) for r in trained_rows(plan) for s in seeds],
             *[plan_mod.run_name("demonstrations", ref["name"], s) for ref in plan["reference"] for s in seeds]]
    miss = sum(not (study / "eval" / f"{n}.json").is_file() for n in names)
    miss += sum(not runs_io.diag_finished(study / "diag" / run) for run in plan_mod.derived_runs(plan))
    return miss, len(names) + len(plan_mod.derived_runs(plan))


def _compat(study: Path, run: str) -> dict:
    path = study / "diag" / run / "compat.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def world_rows(study: Path, plan: dict, rng: np.random.Generator) -> tuple[list[dict], dict, dict]:
    """(rows, their outcome replicates {outcome: [rows, B]}, the initial student) of one finished world."""
    an = plan["analysis"]
    seeds = plan["training"]["seeds"]
    ctx = analysis.outcome_context(study, plan, rng)
    summaries = {run: runs_io.diag_summary(study / "diag" / run) for run in plan_mod.derived_runs(plan)}
    compat = {run: _compat(study, run) for run in summaries}
    align = analysis._alignment_cache(study, an["near_zero"])
    rows, reps = [], {o: [] for o in OUTCOMES}

    def add(row: dict, names: list[str]) -> None:
        fields, r = analysis.realised_outcomes(ctx, names)
        row.update({o: fields[f] for o, f in OUTCOMES.items()})
        row.update({k: fields[k] for k in ("realised", "train_seconds", "runs", "final_pass@1_per_seed")})
        rows.append(row)
        for o, f in OUTCOMES.items():
            reps[o].append(r[f])

    for r in trained_rows(plan):
        run, name = plan_mod.diag_source(plan, r.config)
        summary = summaries[run]
        pred = runs_io.predictor_inputs(summary, name, r.signal)
        he = summary["configs"][name].get("high_entropy_share") or {}
        cp = compat[run].get(name, {})
        add({"kind": "product", "config": r.config, "method": r.method, "signal": r.signal, "diagnosis_run": run,
             "diagnosis_config": name, "verdict": pred["verdict"], "reason": pred["reason"],
             "verdict_value": stats.VERDICT_VALUE[pred["verdict"]],
             **{k: pred[k] for k in ("score", "teacher_advantage", "alignment", "accuracy_gap", "mean_rev_kl",
                                     "mean_jsd")},
             "opd2_sign_agreement": align(run, name)["sign_agreement"],
             "teachability": _num(cp.get("teachability")), "topk_overlap": _num(cp.get("topk_overlap")),
             "high_entropy_share": _num(he.get("student")) - _num(he.get("teacher")),
             "high_entropy_student": _num(he.get("student")), "high_entropy_teacher": _num(he.get("teacher"))},
            [plan_mod.run_name(r.config, r.method, s) for s in seeds])
    for ref in plan["reference"]:
        add({"kind": "reference", "config": "demonstrations", "method": ref["name"], "signal": None},
            [plan_mod.run_name("demonstrations", ref["name"], s) for s in seeds])
    product = [i for i, r in enumerate(rows) if r["kind"] == "product"]
    return rows, {o: np.array([reps[o][i] for i in product]) for o in OUTCOMES}, ctx["base"]


def correlations(rows: list[dict], reps: dict, clusters: list[str], predictors: list[str], an: dict,
                 seed: int, keep_replicates: bool = False) -> dict:
    """{predictor: {outcome: Spearman with cluster-bootstrap interval}} over product rows."""
    out = {}
    for p in predictors:
        x = np.array([value(r, p) for r in rows])
        out[p] = {o: stats.spearman_bootstrap(x, np.array([_num(r[o]["estimate"]) for r in rows]), reps[o],
                                              clusters, an["bootstrap"], seed, an["alpha"],
                                              replicates=keep_replicates) for o in OUTCOMES}
    return out


def comparison(rows: list[dict], reps: dict, clusters: list[str], corr: dict, kinds: dict, an: dict,
               seed: int) -> dict:
    """The score against the best cheap baseline on d_pass1 (largest |rho|, given its favourable sign):
    the paired bootstrap of rho(score) - rho(sign * baseline), as analysis.analyse does."""
    res = {"primary": PRIMARY, "outcome": "d_pass1", "primary_rho": corr[PRIMARY]["d_pass1"]}
    finite = [b for b, k in kinds.items() if k == "baseline" and math.isfinite(_num(corr[b]["d_pass1"]["estimate"]))]
    if not finite or not math.isfinite(_num(res["primary_rho"]["estimate"])):
        return res
    best = max(finite, key=lambda b: abs(corr[b]["d_pass1"]["estimate"]))
    sign = 1.0 if corr[best]["d_pass1"]["estimate"] >= 0 else -1.0
    gains = np.array([_num(r["d_pass1"]["estimate"]) for r in rows])
    diff = stats.spearman_bootstrap(np.array([value(r, PRIMARY) for r in rows]), gains, reps["d_pass1"], clusters,
                                    an["bootstrap"], seed, an["alpha"],
                                    other=sign * np.array([value(r, best) for r in rows]))
    return {**res, "best_baseline": best, "best_baseline_sign": sign, "best_baseline_rho": corr[best]["d_pass1"],
            "difference": diff, "better": bool(_num(diff["lo"]) > 0), "worse": bool(_num(diff["hi"]) < 0)}


def disagreements(rows: list[dict]) -> list[dict]:
    """(configuration, method pair) whose realised classes differ."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a["config"] == b["config"] and a["realised"] != b["realised"]:
                out.append({"config": a["config"], "methods": [a["method"], b["method"]],
                            "signals": [a["signal"], b["signal"]], "realised": [a["realised"], b["realised"]],
                            "verdicts": [a["verdict"], b["verdict"]],
                            "d_pass1": [a["d_pass1"], b["d_pass1"]]})
    return out


def rank_errors(rows: list[dict], predictor: str, orientation: float, n: int = N_WRONG) -> list[dict]:
    """The ``n`` rows whose (oriented) predictor rank is furthest from their d_pass1 rank, ranks scaled to
    [0, 1]; rank_error > 0: the predictor ranked the row above what training realised."""
    idx = [i for i, r in enumerate(rows) if math.isfinite(value(r, predictor)) and math.isfinite(
        _num(r["d_pass1"]["estimate"]))]
    if len(idx) < 3:
        return []
    scale = len(idx) - 1
    rp = (stats.ranks([orientation * value(rows[i], predictor) for i in idx]) - 1) / scale
    ro = (stats.ranks([rows[i]["d_pass1"]["estimate"] for i in idx]) - 1) / scale
    err = rp - ro
    order = sorted(range(len(idx)), key=lambda j: (-abs(err[j]), j))[:n]
    return [{"config": rows[idx[j]]["config"], "method": rows[idx[j]]["method"], "value": value(rows[idx[j]], predictor),
             "d_pass1": rows[idx[j]]["d_pass1"]["estimate"], "rank_error": float(err[j]),
             "direction": "over-predicted" if err[j] > 0 else "under-predicted"} for j in order if err[j] != 0]


def summarise(rows: list[dict], reps: dict, clusters: list[str], kinds: dict, an: dict, seed: int,
              keep_replicates: bool = False) -> dict:
    """The statistics of one set of product rows (a world, or all worlds pooled)."""
    preds = list(kinds)
    corr = correlations(rows, reps, clusters, preds, an, seed, keep_replicates)
    acc = stats.verdict_accuracy([r["verdict"] for r in rows], [r["d_pass1"]["lo"] for r in rows],
                                 [r["d_pass1"]["hi"] for r in rows], an["alpha"])
    acc["unclear_share"] = acc["n_unclear"] / len(rows) if rows else math.nan
    orient = {p: 1.0 if kinds[p] == "product" or not corr[p]["d_pass1"]["estimate"] < 0 else -1.0 for p in preds}
    return {"n_rows": len(rows), "n_configs": len(set(clusters)), "spearman": corr,
            "undefined": {p: int(sum(not math.isfinite(value(r, p)) for r in rows)) for p in preds},
            "verdict_accuracy": acc, "comparison": comparison(rows, reps, clusters, corr, kinds, an, seed),
            "orientation": orient, "wrong": {p: rank_errors(rows, p, orient[p]) for p in preds}}


def _mean_of_worlds(per_world: dict, kinds: dict, alpha: float) -> dict:
    """Mean over worlds of the per-world coefficients (worlds where it is defined), with the interval of
    the mean of their (independent) per-world bootstrap replicates."""
    out = {}
    for p in kinds:
        out[p] = {}
        for o in OUTCOMES:
            cs = [w["spearman"][p][o] for w in per_world.values() if math.isfinite(_num(w["spearman"][p][o]["estimate"]))]
            if not cs:
                out[p][o] = {"estimate": math.nan, "lo": math.nan, "hi": math.nan, "n_worlds": 0}
                continue
            lo, hi = stats.percentile_interval(np.mean([c["replicates"] for c in cs], axis=0), alpha)
            out[p][o] = {"estimate": float(np.mean([c["estimate"] for c in cs])), "lo": lo, "hi": hi,
                         "n_worlds": len(cs)}
    return out


def gap_and_gain(rows: list[dict], self_methods: list[str], context: str = "self_full") -> dict | None:
    """The issue's test of ``capacity``, in every world: the accuracy gap of the student shown the full
    solution against the best realised Δ pass@1 of any self-distillation row. It holds (a large gap that
    training does not realise) when the gap is at least 0.3 and the gain at most a third of it."""
    full = [r for r in rows if r["config"] == context and r["kind"] == "product"]
    selfs = [r for r in rows if r["method"] in self_methods and r["kind"] == "product"]
    if not full or not selfs:
        return None
    gap = full[0]["accuracy_gap"]
    best = max(selfs, key=lambda r: (r["d_pass1"]["estimate"], r["config"], r["method"]))
    return {"gap": gap, "config": best["config"], "method": best["method"], "d_pass1": best["d_pass1"],
            "holds": bool(gap >= 0.3 and best["d_pass1"]["estimate"] <= gap / 3)}


def _world_status(study: Path, entry: dict) -> tuple[str, str]:
    if entry.get("excluded"):
        return "excluded", entry["excluded"]
    if not (study / "plan.resolved.json").is_file():
        return ("not built", entry["skipped"]) if entry.get("skipped") else ("not run", "no study directory")
    miss, need = missing_outputs(study, json.loads((study / "plan.resolved.json").read_text()))
    if miss == 0:
        return "analysed", ""
    return "incomplete", f"{miss} of {need} diagnoses / evaluations missing" + (
        f" (last error: {entry['error']})" if entry.get("error") else "")


def combine(plan_name: str, study: str, an: dict, worlds: dict, data: dict) -> dict:
    """The analysis JSON from each world's entry (status, note, ...) and, for analysed worlds,
    ``data[world] = (rows, outcome replicates, world index)``: per-world and pooled statistics."""
    kinds = {p["name"]: p["kind"] for p in an["predictors"]}
    per_world, pooled_rows, pooled_reps, clusters = {}, [], {o: [] for o in OUTCOMES}, []
    for name, (rows, reps, index) in data.items():
        product = [r for r in rows if r["kind"] == "product"]
        cl = [r["config"] for r in product]
        stat = summarise(product, reps, cl, kinds, an, an["bootstrap_seed"] + index, keep_replicates=True)
        per_world[name] = stat
        worlds[name].update({"rows": rows, **stat, "disagreements": disagreements(product)})
        pooled_rows += [{**r, "world": name} for r in product]
        clusters += [f"{name}/{c}" for c in cl]
        for o in OUTCOMES:
            pooled_reps[o].append(reps[o])
    pooled = None
    if pooled_rows:
        reps = {o: np.concatenate(v) for o, v in pooled_reps.items()}
        pooled = {**summarise(pooled_rows, reps, clusters, kinds, an, an["bootstrap_seed"]),
                  "mean_of_worlds": _mean_of_worlds(per_world, kinds, an["alpha"]), "worlds": list(per_world)}
        pooled.pop("wrong")  # where a predictor is wrong is read per world
    for stat in per_world.values():
        for p in stat["spearman"].values():
            for c in p.values():
                c.pop("replicates", None)
    return analysis.jsonable({"plan": plan_name, "study": study, "predictors": an["predictors"],
                              "outcomes": an["outcomes"],
                              "analysis": {k: an[k] for k in ("alpha", "bootstrap", "bootstrap_seed", "near_zero")},
                              "worlds": worlds, "pooled": pooled})


def analyse_worlds(root: Path) -> dict:
    root = Path(root)
    state = json.loads((root / "worlds.json").read_text())
    plans = run_worlds.load(state["plan"])
    names = [*plans["order"], *[w for w in state["worlds"] if w not in plans["order"]]]
    an = plans["common"]["analysis"]
    if [o["name"] for o in an["outcomes"]] != list(OUTCOMES):
        raise ValueError(f"plan.yaml's outcomes {[o['name'] for o in an['outcomes']]} are not {list(OUTCOMES)}")
    worlds, data = {}, {}
    for name in names:
        study = root / name
        entry = state["worlds"].get(name, {})
        status, note = _world_status(study, entry)
        worlds[name] = {"status": status, "note": note, "seconds": entry.get("seconds")}
        if status != "analysed":
            continue
        plan = json.loads((study / "plan.resolved.json").read_text())
        index = list(plans["worlds"]).index(name) if name in plans["worlds"] else len(plans["worlds"])
        rows, reps, initial = world_rows(study, plan, np.random.default_rng([an["bootstrap_seed"], index]))
        worlds[name].update({"level_selected": plan["level_selected"], "level_gaps": plan["level_gaps"],
                             "initial": initial, "timing": analysis._timing(study),
                             "n_seeds": len(plan["training"]["seeds"]),
                             "regression_set": (plan.get("regression_file") or {}).get("file")
                             or "test split, levels " + ", ".join(map(str, plan["splits"]["regression"]["levels"])),
                             "gap_and_gain": gap_and_gain(rows, [m["name"] for m in plans["common"]["methods"]["self"]])})
        data[name] = (rows, reps, index)
    return combine(state["plan"], str(root), an, worlds, data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="analyze_worlds", description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="root", required=True, type=Path, help="worlds study directory (run_worlds --out)")
    args = ap.parse_args(argv)
    if not (args.root / "worlds.json").is_file():
        print(f"analyze_worlds: error: {args.root} has no worlds.json: give the --out folder of run_worlds.py",
              file=sys.stderr)
        return 2
    try:
        state = json.loads((args.root / "worlds.json").read_text())
        run_worlds.load(state["plan"])
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        print(f"analyze_worlds: error: {args.root / 'worlds.json'} is not a worlds study record ({e}): rerun "
              "run_worlds.py into this folder", file=sys.stderr)
        return 2
    result = analyse_worlds(args.root)
    tmp = args.root / ".worlds_analysis.json.tmp"
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(args.root / "worlds_analysis.json")
    print(f"wrote {args.root / 'worlds_analysis.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
