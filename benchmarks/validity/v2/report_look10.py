"""Predictor v2's tenth look, as pre-registered (plan_look10.yaml): the first look's models refitted, unchanged in
form, on the rows of all 31 seen worlds (``v2_all``), judged leave-one-world-out on the 24 worlds the first look never
fitted on and on the added world; look10_analysis.json and RESULTS_look10.md.

    python benchmarks/validity/v2/report_look10.py
        # after check_world.py --spec sample_data/worlds/gravel.yaml --study STUDY --keep, which commits the added
        # world's rows into checks/: this script reads only committed files.

Every prediction is the product's: tier v2 where a row has a lookahead result, else v2_no_lookahead; the ranking is
``v2_config`` (``looks.product_order``) with that prediction. ``shipped`` is the same ranking with the first look's
models as the package ships them. The look's outcome is recorded in the package's model file (``later_looks``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import look_record  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import before_look, by_tier, product_order, tier_interval  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look10.yaml"
RULES = ("accuracy_gap", "shipped", "v2_all")
BOOT = {"n": 2000, "seed": 0}


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def seen() -> list[str]:
    s = plan()["seen_worlds"]
    return [*s["fitted_by_look1"], *s["never_fitted"]]


def design() -> dict:
    """The first look's model design (tiers, alpha), which v2_all keeps."""
    return yaml.safe_load(v2.PLAN.read_text())["model"]


def applied(models: dict, rows: list[dict]) -> dict[str, dict]:
    """A model file's ``models`` (tier -> outcome -> model) applied as the product applies them: per outcome they
    hold, the prediction, and lo/hi."""
    out = {}
    for o in [o for o in v2.OUTCOMES if o in next(iter(models.values()))]:
        out[o] = dict(zip(("pred", "lo", "hi"), tier_interval(models, rows, o)))
    return out


def out_of_fold(rows: list[dict]) -> dict[str, dict]:
    """v2_all leave-one-world-out, as the product applies it: d_pass1 with each fold's band from an inner
    leave-one-world-out over its training worlds, the other outcomes without."""
    d = design()
    out = {}
    for o in v2.OUTCOMES:
        folds = {t: v2.lowo(rows, f, o, d["alpha"], inner=o == "d_pass1") for t, f in d["tiers"].items()}
        out[o] = {k: by_tier({t: folds[t][k] for t in folds}, rows) for k in ("pred", "lo", "hi")}
    return out


def fitted(rows: list[dict]) -> dict:
    """v2_all fitted on every seen row, each model with the band of its leave-one-world-out residuals (the first
    look's ``report_v2.shipped_models`` on the seen worlds' rows)."""
    return v2.shipped_models(rows, {"model": design()}, {})


def orders(rows: list[dict], gain: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Scores (higher: ranked first within its world): G, and v2_config with each rule's predicted gain."""
    w = np.array([r["world"] for r in rows])
    out = {"accuracy_gap": np.array([v2._num(r["accuracy_gap"]) for r in rows])}
    for rule, x in gain.items():
        out[rule] = np.full(len(rows), np.nan)
        for name in sorted(set(w)):
            k = np.flatnonzero(w == name)
            out[rule][k] = product_order([rows[i] for i in k], x[k], "v2_config")
    return out


def paired_mean(a: dict[str, float], b: dict[str, float], worlds: list[str]) -> dict:
    """``stats.paired_mean`` with the look's bootstrap."""
    return stats.paired_mean(a, b, worlds, BOOT["n"], BOOT["seed"])


def pooled(x: np.ndarray, rows: list[dict], outcome: str, keep: np.ndarray) -> float:
    y = v2.target(rows, outcome)
    k = keep & np.isfinite(x) & np.isfinite(y)
    return float(stats.spearman(x[k], y[k])) if k.sum() > 2 else math.nan


def judge(rows: list[dict], pred: dict[str, dict], never: list[str], delta: float) -> dict:
    """Every figure of the plan's judging for the seen worlds."""
    gain = {k: p["d_pass1"]["pred"] for k, p in pred.items()}
    ranked = orders(rows, gain)
    g = ranked["accuracy_gap"]
    reps = v2.realised_reps(rows, "d_pass1", BOOT["n"], BOOT["seed"])
    per = {k: v2.per_world(x, rows, "d_pass1") for k, x in ranked.items()}
    keep = np.isin([r["world"] for r in rows], never)
    return {
        "per_world": per,
        "never_fitted_mean": {k: float(np.mean([per[k]["worlds"][w] for w in never])) for k in RULES},
        "v2_all_minus_shipped": paired_mean(per["v2_all"]["worlds"], per["shipped"]["worlds"], never),
        "pooled_vs_accuracy_gap": {k: v2.rho(gain[k], rows, "d_pass1", reps, BOOT, other=g) for k in gain},
        "method_order": {k: v2.method_order(x, rows) for k, x in ranked.items() if k != "accuracy_gap"},
        "recommended": {k: look8.recommended(x, rows) for k, x in ranked.items() if k != "accuracy_gap"},
        "decisions": {k: {kk: vv for kk, vv in v2.decisions(p["d_pass1"], rows, delta).items() if kk != "verdicts"}
                      for k, p in pred.items()},
        "other_outcomes": {o: {k: pooled(p[o]["pred"], rows, o, keep) for k, p in pred.items()}
                           for o in v2.OUTCOMES[1:]}}


def analyse(shipped: dict) -> dict:
    shipped = before_look(shipped, 11)  # the file as this look read it: models a later look replaced restored
    p, d = plan(), design()
    never = p["seen_worlds"]["never_fitted"]
    rows = look2.load_rows({"worlds": seen()})
    pred = {"shipped": applied(shipped["models"], rows), "v2_all": out_of_fold(rows)}
    models = fitted(rows)
    out = {"look": 10, "plan": "benchmarks/validity/v2/plan_look10.yaml", "added_world": p["added_world"]["name"],
           "fitted_by_look1": p["seen_worlds"]["fitted_by_look1"], "never_fitted": never,
           "n_rows": len(rows), "n_worlds": len(seen()), "alpha": d["alpha"], "delta": shipped["delta"],
           "seen": judge(rows, pred, never, shipped["delta"]),
           "coefficients": {t: {o: {"v2_all": dict(zip(m[o]["features"], m[o]["coef"])),
                                    "shipped": dict(zip(shipped["models"][t][o]["features"],
                                                        shipped["models"][t][o]["coef"])),
                                    "band": {"v2_all": m[o]["residual_band"],
                                             "shipped": shipped["models"][t][o]["residual_band"]}}
                                for o in v2.OUTCOMES} for t, m in models.items()}}
    out["added"] = added(out["added_world"], models, shipped)
    out["ship"] = ship(out)
    return out


def added(name: str, models: dict, shipped: dict) -> dict | None:
    """The added world ranked by v2_all fitted on all seen worlds and by the shipped models (None: no rows yet)."""
    if not (look2.CHECKS / f"{name}_analysis.json").is_file():
        return None
    rows = look2.load_rows({"worlds": [name]})
    pred = {"shipped": applied(shipped["models"], rows), "v2_all": applied(models, rows)}
    ranked = orders(rows, {k: p["d_pass1"]["pred"] for k, p in pred.items()})
    return {"n_rows": len(rows),
            "spearman": {k: v2.per_world(x, rows, "d_pass1")["worlds"][name] for k, x in ranked.items()},
            "method_order": {k: v2.method_order(x, rows) for k, x in ranked.items() if k != "accuracy_gap"},
            "recommended": {k: look8.recommended(x, rows)[name] for k, x in ranked.items() if k != "accuracy_gap"},
            "decisions": {k: {kk: vv for kk, vv in v2.decisions(p["d_pass1"], rows, shipped["delta"]).items()
                              if kk != "verdicts"} for k, p in pred.items()},
            "forgetting": {k: pooled(p["d_regression"]["pred"], rows, "d_regression", np.ones(len(rows), bool))
                           for k, p in pred.items()}}


def ship(a: dict) -> dict:
    """The pre-registered rule: over the never-fitted worlds v2_all's leave-one-world-out mean above the shipped
    ranking's (strictly), and on the added world at least the shipped ranking's; then per other outcome, the pooled
    Spearman over the never-fitted worlds at least the shipped model's."""
    m, new = a["seen"]["never_fitted_mean"], a["added"]
    c1 = bool(m["v2_all"] > m["shipped"])
    c2 = None if new is None else bool(new["spearman"]["v2_all"] >= new["spearman"]["shipped"])
    ships = bool(c1 and c2)
    others = {o: bool(ships and d["v2_all"] >= d["shipped"]) for o, d in a["seen"]["other_outcomes"].items()}
    reason = (f"over the {len(a['never_fitted'])} never-fitted worlds v2_all {v2.fmt(m['v2_all'])} against the shipped "
              f"ranking's {v2.fmt(m['shipped'])} (needs above): {'met' if c1 else 'not met'}; on {a['added_world']} "
              + ("not yet built" if new is None else
                 f"{v2.fmt(new['spearman']['v2_all'])} against {v2.fmt(new['spearman']['shipped'])} (needs at least): "
                 f"{'met' if c2 else 'not met'}"))
    return {"choice": "v2_all" if ships else "first_look", "lowo_condition": c1, "added_world_condition": c2,
            "outcomes": {"d_pass1": ships, **others}, "reason": reason}


def render(a: dict) -> str:
    s, new, f = a["seen"], a["added"], v2.fmt
    pw, n_never = s["per_world"], len(a["never_fitted"])
    diff = s["v2_all_minus_shipped"]
    L = ["# Predictor v2, tenth look: the same models refitted on every seen world", "",
         f"Generated by `python benchmarks/validity/v2/report_look10.py` from `look10_analysis.json` (plan: "
         f"`benchmarks/validity/v2/plan_look10.yaml`, committed before any result of this look). {a['n_rows']} rows "
         f"(configuration x method) over {a['n_worlds']} seen worlds, and the added world `{a['added_world']}`, built "
         "after the plan. `v2_all` is the first look's model design (ridge, alpha "
         f"{a['alpha']}, the same features and tiers) fitted on the seen worlds' rows; `shipped` is the package's "
         "first-look models. Both rank as the product does (`v2_config`: configurations by the mean predicted gain, "
         "the fifth look's method order within one).", "",
         "**Ship rule:** " + ("v2_all ships" if a["ship"]["choice"] == "v2_all" else "the first look's models stay")
         + f": {a['ship']['reason']}.", "",
         "## Within-world Spearman with the realised d_pass1", "",
         "v2_all is leave-one-world-out: each world ranked by the model fitted on the other "
         f"{a['n_worlds'] - 1}. The shipped models were fitted on the first seven, so there they are in-sample.", "",
         "| world | G (methods tied) | shipped | v2_all |", "|---|---|---|---|"]
    for w in [*a["fitted_by_look1"], *a["never_fitted"]]:
        tag = " (shipped fitted on it)" if w in a["fitted_by_look1"] else ""
        L.append(f"| {w}{tag} | " + " | ".join(f(pw[k]["worlds"][w]) for k in RULES) + " |")
    if new is not None:
        L.append(f"| {a['added_world']} (new; v2_all fitted on all {a['n_worlds']}) | "
                 + " | ".join(f(new["spearman"][k]) for k in RULES) + " |")
    L.append(f"| mean of the {n_never} never fitted on | " + " | ".join(f(s["never_fitted_mean"][k]) for k in RULES)
             + " |")
    L.append(f"| mean of all {a['n_worlds']} seen | " + " | ".join(f(pw[k]["mean"]) for k in RULES) + " |")
    L += ["", f"v2_all minus shipped over the {n_never} never fitted on: {f(diff['estimate'], 3)} "
          f"[{f(diff['lo'], 3)}, {f(diff['hi'], 3)}] (bootstrap over worlds), above in {diff['above']}, below in "
          f"{diff['below']}.", "",
          "## Pooled, over the seen worlds", "",
          "| | shipped | v2_all |", "|---|---|---|"]
    pv, mo, dec = s["pooled_vs_accuracy_gap"], s["method_order"], s["decisions"]
    L.append("| predicted gain's pooled Spearman minus G's (paired cluster bootstrap) | "
             + " | ".join(f"{f(pv[k]['estimate'])} [{f(pv[k]['lo'])}, {f(pv[k]['hi'])}]" for k in RULES[1:]) + " |")
    L.append("| method pairs more than 0.10 apart ordered right | "
             + " | ".join(f"{mo[k]['n_right']} of {mo[k]['n_pairs']}" for k in RULES[1:]) + " |")
    L.append("| decisive verdicts right (interval rule, delta "
             f"{a['delta']}) | " + " | ".join(f"{dec[k]['n_correct']} of {dec[k]['n_decisive']}" for k in RULES[1:])
             + " |")
    L.append("| unclear | " + " | ".join(f"{dec[k]['unclear_share']:.0%}" for k in RULES[1:]) + " |")
    L.append("| 95% intervals covering the realised change | "
             + " | ".join(f"{dec[k]['coverage']:.0%}" for k in RULES[1:]) + " |")
    for o, d in s["other_outcomes"].items():
        L.append(f"| {o}: pooled Spearman over the {n_never} never fitted on | "
                 + " | ".join(f(d[k]) for k in RULES[1:]) + " |")
    rec = s["recommended"]
    means = {k: np.mean([v for v in rec[k].values() if v is not None]) for k in RULES[1:]}
    L.append("| realised Δpass@1 of the recommended row (best-ranked with G > 0), mean of worlds | "
             + " | ".join(f"{means[k]:+.3f}" for k in RULES[1:]) + " |")
    if new is not None:
        L += ["", f"## The added world, {a['added_world']}", "",
              f"{new['n_rows']} rows. Method pairs more than 0.10 apart ordered right: "
              + "; ".join(f"{k} {d['n_right']} of {d['n_pairs']}" for k, d in new["method_order"].items())
              + ". Recommended row's realised Δpass@1: "
              + "; ".join(f"{k} {'none' if v is None else f'{v:+.3f}'}" for k, v in new["recommended"].items())
              + ". Decisive verdicts right: " + "; ".join(f"{k} {d['n_correct']} of {d['n_decisive']}, "
                                                          f"{d['unclear_share']:.0%} unclear"
                                                          for k, d in new["decisions"].items())
              + ". Forgetting Spearman: " + "; ".join(f"{k} {f(v)}" for k, v in new["forgetting"].items()) + "."]
    c = a["coefficients"]["v2"]
    L += ["", "## Coefficients of the gain model (tier v2, per SD of each feature)", "",
          "| feature | shipped (seven worlds) | v2_all (all seen) |", "|---|---|---|"]
    for feat in c["d_pass1"]["shipped"]:
        L.append(f"| `{feat}` | {c['d_pass1']['shipped'][feat]:+.4f} | {c['d_pass1']['v2_all'][feat]:+.4f} |")
    band = c["d_pass1"]["band"]
    L.append("| residual band (2.5%, 97.5%) | " + " | ".join(f"{band[k][0]:+.3f}, {band[k][1]:+.3f}"
                                                          for k in RULES[1:]) + " |")
    L += ["", f"The issue asks Spearman >= 0.80 as the mean of worlds: v2_all {f(s['never_fitted_mean']['v2_all'])} "
          f"and shipped {f(s['never_fitted_mean']['shipped'])} over the {n_never} never fitted on; decisive verdicts "
          ">= 85% right with <= 40% unclear; forgetting Spearman >= 0.7 pooled."]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    m, new = a["seen"]["never_fitted_mean"], a["added"]
    summary = (f"look 10 (the same models refitted on {a['n_worlds']} worlds): leave-one-world-out over the "
               f"{len(a['never_fitted'])} the first look never fitted on {v2.fmt(m['v2_all'])} against the shipped "
               f"{v2.fmt(m['shipped'])}; on the new world {a['added_world']} "
               f"{v2.fmt(new['spearman']['v2_all'])} against {v2.fmt(new['spearman']['shipped'])}: "
               + ("the refitted models ship" if a["ship"]["choice"] == "v2_all" else "the first look's models stay"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look10.md", "model": "v2_all",
            "choice": a["ship"]["choice"], "added_world": a["added_world"], "summary": summary}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the look recorded and, per outcome the rule ships, both tiers' refitted models."""
    shipped.setdefault("later_looks", {})["look10"] = later_look(a)
    if a["ship"]["choice"] == "v2_all":
        models = fitted(look2.load_rows({"worlds": seen()}))
        for tier, per in models.items():
            for o, ships in a["ship"]["outcomes"].items():
                if ships:
                    shipped["models"][tier][o] = per[o]
    return shipped


def main() -> int:
    return look_record.publish(10, analyse, render, record)


if __name__ == "__main__":
    sys.exit(main())
