"""Predictor v2's fourth look, as pre-registered (plan_look4.yaml here): the verdict as classifiers of the realised
class, leave-one-world-out over ten worlds, judged on the added world; look4_analysis.json and RESULTS_look4.md.

    python benchmarks/validity/v2/report_look4.py --from DIR --added STUDY
        # DIR: run_v2.py --look 2's output, the added world included (run_v2.py --look 2 --worlds relay);
        # STUDY: run_worlds.py --worlds relay's output (its analysis is copied to look4/relay_analysis.json)

The rows, features and ranking statistics are the third look's (``report_look2.analyse`` over the ten worlds,
reported, not judged). The verdict models are two penalised logistic regressions per feature set
(``core.predictor.fit_logistic``, ``looks.lowo_classes``): P(improves) and P(degrades), a verdict from the
plan's threshold (``core.predictor.class_verdict``), scored against each row's realised class as the earlier
looks score the interval rule (``stats.verdict_accuracy``). The look's outcome is recorded in the package's model
file (``later_looks``); a verdict model that ships is written there too.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import design, fills, lowo_classes, realised_classes  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = look2.PLANS[4]
LAM = 1.0


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def feature_sets() -> dict[str, list[str]]:
    """The verdict models: the plan's (v2c's features) and, for comparison, G alone."""
    v2c = yaml.safe_load(look2.PLAN2.read_text())["models"]["tiers"]["v2c"]
    return {"v2c_classes": v2c, "accuracy_gap_classes": ["accuracy_gap"]}


def scored(verdicts: list[str], rows: list[dict]) -> dict:
    """Decisive accuracy (Wilson interval), precision per side, unclear share, on ``rows``."""
    acc = stats.verdict_accuracy(verdicts, [v2._num(r["d_pass1"]["lo"]) for r in rows],
                                 [v2._num(r["d_pass1"]["hi"]) for r in rows])
    t = acc["table"]
    n_helps, n_hurts = sum(t["helps"].values()), sum(t["hurts"].values())
    return {**acc, "n_rows": len(rows), "unclear_share": acc["n_unclear"] / len(rows) if rows else float("nan"),
            "n_helps": n_helps, "n_hurts": n_hurts,
            "helps_precision": t["helps"]["improves"] / n_helps if n_helps else float("nan"),
            "hurts_precision": t["hurts"]["degrades"] / n_hurts if n_hurts else float("nan")}


def verdict_section(rows: list[dict], features: list[str], threshold: float, added: str) -> dict:
    p = lowo_classes(rows, features, LAM)
    verdicts = [model.class_verdict(a, b, threshold) for a, b in zip(p["improves"], p["degrades"])]
    w = [r["world"] for r in rows]

    def on(keep) -> dict:
        return scored([v for v, k in zip(verdicts, keep) if k], [r for r, k in zip(rows, keep) if k])
    return {"features": features, "pooled": on([True] * len(rows)), "added": on([x == added for x in w]),
            "per_world": {k: on([x == k for x in w]) for k in sorted(set(w))},
            "p_improves": p["improves"].tolist(), "p_degrades": p["degrades"].tolist(), "verdicts": verdicts}


def interval_rule(rank: dict, rows: list[dict], added: str) -> dict:
    """The interval rule's verdicts of the ranking analysis' v2c, scored the same way (pooled and on the added world)."""
    t = rank["tiers"][rank["primary"]]
    verdicts = [model.verdict(a, b, rank["delta"]) for a, b in zip(t["lo"], t["hi"])]
    keep = [r["world"] == added for r in rows]
    return {"pooled": scored(verdicts, rows),
            "added": scored([v for v, k in zip(verdicts, keep) if k], [r for r, k in zip(rows, keep) if k])}


def ship(a: dict) -> dict:
    """The plan's rule: (1) pooled accuracy >= 0.85 and hurts precision >= 0.9; (2) on the added world at least one
    decisive verdict, right >= 85%; helps is issued only with >= 5 pooled helps verdicts right >= 70%."""
    d = a["verdicts"]["v2c_classes"]
    pooled, new = d["pooled"], d["added"]
    c1 = bool(pooled["accuracy"] >= 0.85 and pooled["hurts_precision"] >= 0.9)
    c2 = bool(new["n_decisive"] >= 1 and new["accuracy"] >= 0.85)
    helps = bool(pooled["n_helps"] >= 5 and pooled["helps_precision"] >= 0.7)
    ships = c1 and c2
    why = (f"pooled over {look2.NUMBERS[a['n_worlds']]} worlds decisive {pooled['n_correct']}/{pooled['n_decisive']} right "
           f"({v2.fmt(pooled['accuracy'])}), hurts precision {v2.fmt(pooled['hurts_precision'])} (needs >= 0.85 and "
           f">= 0.90): {'met' if c1 else 'not met'}; on {a['added_world']} {new['n_correct']}/{new['n_decisive']} "
           f"right (needs >= 1 decisive, >= 0.85): {'met' if c2 else 'not met'}")
    return {"choice": "v2c_classes" if ships else "interval", "pooled_condition": c1, "added_world_condition": c2,
            "helps_issued": bool(ships and helps), "reason": why}


def analyse(study: Path) -> dict:
    p = plan()
    added = p["added_world"]["name"]
    threshold = float(p["verdict_model"]["threshold"])
    rank = look2.analyse(study, look=4)
    rows = look2.load_rows(p)
    a = {"plan": "benchmarks/validity/v2/plan_look4.yaml", "look": 4, "added_world": added,
         "n_worlds": len(p["worlds"]), "n_rows": len(rows), "n_rows_added": rank["n_rows_added"],
         "threshold": threshold, "lam": LAM, "delta": rank["delta"],
         "class_counts": {k: int(v) for k, v in zip(*np.unique(realised_classes(rows), return_counts=True))},
         "verdicts": {name: verdict_section(rows, f, threshold, added) for name, f in feature_sets().items()},
         "interval_rule": interval_rule(rank, rows, added),
         "ranking": {"scopes": rank["scopes"], "ship_as_look3": rank["ship"],
                     "tiers": {k: {s: d[s] for s in (*rank["scopes"], "within", "per_world", "method_order")}
                               for k, d in rank["tiers"].items() if k == rank["primary"]},
                     "accuracy_gap": {s: rank["single"]["accuracy_gap"][s] for s in (*rank["scopes"], "per_world")}},
         "rows": rank["rows"]}
    a["ship"] = ship(a)
    return a


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x:.0%}"


def render(a: dict) -> str:
    f, added, every = v2.fmt, a["added_world"], a["ranking"]["scopes"][0]
    lines = ["# Predictor v2, fourth look: the verdict as a classifier of the realised class", "",
             f"Generated by `python benchmarks/validity/v2/report_look4.py --from DIR --added STUDY` from "
             f"`look4_analysis.json` (plan: `{a['plan']}`, committed before any result of this look). {a['n_rows']} rows "
             f"(configuration x method) over {every} worlds, {a['n_rows_added']} of them on the added world "
             f"`{added}`, built after the plan. Verdict: hurts if P(degrades) >= {a['threshold']}, helps if P(improves) "
             f">= {a['threshold']} (two penalised logistic regressions, lambda {a['lam']}, leave-one-world-out). The "
             "earlier looks stay as they were; the exploration that chose the threshold on the nine earlier worlds is "
             "`explore_look4.txt`, so only the added world is a fair test.", "",
             f"**Ship rule:** the verdict follows {'the classifiers' if a['ship']['choice'] != 'interval' else 'the interval rule (unchanged)'}"
             f"{'' if a['ship']['choice'] == 'interval' else (', helps issued' if a['ship']['helps_issued'] else ', hurts only (helps not issued)')}. "
             f"{a['ship']['reason']}.", "",
             "Realised classes: " + ", ".join(f"{k} {n}" for k, n in a["class_counts"].items()) + ".", "",
             "## Verdicts (leave-one-world-out)", "",
             "| rule | scope | decisive right [95% Wilson] | helps (precision) | hurts (precision) | unclear |",
             "|---|---|---|---|---|---|"]

    def row(name: str, scope: str, d: dict) -> str:
        return (f"| {name} | {scope} | {d['n_correct']}/{d['n_decisive']} ({f(d['accuracy'])} [{f(d['lo'])}, "
                f"{f(d['hi'])}]) | {d['n_helps']} ({f(d['helps_precision'])}) | {d['n_hurts']} "
                f"({f(d['hurts_precision'])}) | {_pct(d['unclear_share'])} |")
    for name, d in a["verdicts"].items():
        lines += [row(name, f"{every} worlds", d["pooled"]), row(name, f"{added} (new)", d["added"])]
    ir = a["interval_rule"]
    lines += [row("interval rule (v2c, delta %.2f)" % a["delta"], f"{every} worlds", ir["pooled"]),
              row("interval rule (v2c, delta %.2f)" % a["delta"], f"{added} (new)", ir["added"]), "",
              "Per left-out world (decisive right / decisive, unclear share):", "",
              "| world | " + " | ".join(a["verdicts"]) + " |", "|---|" + "---|" * len(a["verdicts"])]
    for w in a["verdicts"]["v2c_classes"]["per_world"]:
        cells = [f"{d['per_world'][w]['n_correct']}/{d['per_world'][w]['n_decisive']}, "
                 f"{_pct(d['per_world'][w]['unclear_share'])}" for d in a["verdicts"].values()]
        lines.append(f"| {w}{' (new)' if w == added else ''} | " + " | ".join(cells) + " |")
    r = a["ranking"]
    t = next(iter(r["tiers"].values()))
    g = r["accuracy_gap"]
    lines += ["", f"## Ranking over {every} worlds (the third look's statistics, reported, not judged)", "",
              f"- within a diagnosis (mean of per-world Spearman): v2c {v2.ci(t['within']['mean'])}, G "
              f"{f(t['within']['accuracy_gap_mean'])}, paired {v2.ci(t['within']['vs_accuracy_gap'])}",
              f"- pooled: v2c {v2.ci(t[every]['spearman'])}, G {v2.ci(g[every]['spearman'])}, paired "
              f"{v2.ci(t[every]['vs_accuracy_gap'])}",
              f"- on {added} alone: v2c {f(t[added]['spearman']['estimate'])}, G {f(g[added]['spearman']['estimate'])}",
              f"- the third look's ranking rule over these worlds: {r['ship_as_look3']['choice']} "
              f"({r['ship_as_look3']['reason']})",
              f"- method order (pairs > 0.10 apart): v2c {t['method_order']['n_right']}/{t['method_order']['n_pairs']}"]
    return "\n".join(lines) + "\n"


def fitted_verdict_model(rows: list[dict], features: list[str], threshold: float, helps: bool) -> dict:
    """Both class models fitted on every row of the look's worlds: what the product applies where the look ships
    (``prediction.classified``), with the imputation values of its centred features."""
    fill = fills(rows, features)
    X, cls = design(rows, features, fill), realised_classes(rows)
    return {"features": features, "fills": fill, "threshold": threshold, "helps": helps,
            **{k: model.fit_logistic(X, (cls == k).astype(float), features, LAM) for k in ("improves", "degrades")},
            "plan": "benchmarks/validity/v2/plan_look4.yaml", "study": "benchmarks/validity/v2/RESULTS_look4.md"}


def later_look(a: dict) -> dict:
    d = a["verdicts"]["v2c_classes"]
    summary = (f"look 4 (verdict as classifiers of the realised class): pooled over {look2.NUMBERS[a['n_worlds']]} worlds "
               f"{d['pooled']['n_correct']}/{d['pooled']['n_decisive']} decisive right, "
               f"{_pct(d['pooled']['unclear_share'])} unclear; on the new world {a['added_world']} "
               f"{d['added']['n_correct']}/{d['added']['n_decisive']}: "
               f"{'the classifiers give the verdict' if a['ship']['choice'] != 'interval' else 'the interval rule stays'}")
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look4.md", "model": "v2c_classes",
            "choice": a["ship"]["choice"], "added_world": a["added_world"], "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="study", required=True, type=Path, help="run_v2.py --look 2's output")
    ap.add_argument("--added", type=Path, help="the added world's study (run_worlds.py); its analysis is copied here")
    args = ap.parse_args(argv)
    name = plan()["added_world"]["name"]
    (look2.OUT4 / "lookahead").mkdir(parents=True, exist_ok=True)
    if args.added:
        from benchmarks.validity.worlds import analyze_worlds
        look2.ANALYSES[name].write_text(json.dumps(v2.stats_jsonable(
            analyze_worlds.analyse_worlds(args.added.resolve())), indent=1, sort_keys=True) + "\n")
    shutil.copyfile(args.study / name / "lookahead.json", look2.OUT4 / "lookahead" / f"{name}.json")
    a = analyse(args.study.resolve())
    analysis, results = HERE / "look4_analysis.json", HERE / "RESULTS_look4.md"
    analysis.write_text(json.dumps(v2.stats_jsonable(a), indent=1, sort_keys=True) + "\n")
    results.write_text(render(json.loads(analysis.read_text())))
    shipped = json.loads(v2.SHIPPED.read_text())
    shipped.setdefault("later_looks", {})["look4"] = later_look(json.loads(analysis.read_text()))
    shipped.pop("verdict_model", None)
    if a["ship"]["choice"] == "v2c_classes":
        shipped["verdict_model"] = fitted_verdict_model(look2.load_rows(plan()), feature_sets()["v2c_classes"],
                                                        a["threshold"], a["ship"]["helps_issued"])
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print(results.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
