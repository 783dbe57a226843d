"""Predictor v2's second and third looks, as pre-registered (plan_look2.yaml, plan_look3.yaml here): analysis JSON
and RESULTS_look<N>.md.

    python benchmarks/validity/v2/report_look2.py --from DIR --crossed STUDY
        # DIR: run_v2.py --look 2's output (all eight worlds); STUDY: run_worlds.py --worlds crossed's output
    python benchmarks/validity/v2/report_look2.py --look 3 --from DIR --added STUDY
        # the third look: DIR also holds mixed (run_v2.py --look 2 --worlds mixed); STUDY: its run_worlds.py output

The seven worlds' realised outcomes and v1 columns come from the committed worlds analysis, the added
world's from its own study (``analyze_worlds.py`` over STUDY, copied to ``look2/crossed_analysis.json``
so the render is reproducible from committed files). The lookahead rows of every world are copied to
``look2/lookahead/<world>.json``. The models are the first look's ridge (``opsd_diag.core.predictor``,
``report_v2.py``'s LOWO, intervals, statistics) on the second look's features: G as it is, every
feature written ``c(x)`` centred on the mean of its world's rows (after imputing a missing value with
the training folds' mean). Writes ``look2_analysis.json`` and ``RESULTS_look2.md`` here; the first
look's files stay as they are. The third look adds the ninth world ``mixed`` (its analysis and lookahead rows in
``look3/``) and judges its ship rule on the ranking within a diagnosis: the mean over worlds of the per-world
Spearman, paired with G's, with a stratified cluster bootstrap (``looks.within``). Each look's outcome is recorded in the
package's model file (``later_looks``, quoted by the decision panel); a look that ships would also write its model.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.look_record import CHECKS  # noqa: E402
from benchmarks.validity.v2.looks import lowo, within  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN2 = HERE / "plan_look2.yaml"
PLAN3 = HERE / "plan_look3.yaml"
PLANS = {2: PLAN2, 3: PLAN3, 4: HERE / "plan_look4.yaml"}
OUT = HERE / "look2"
OUT3 = HERE / "look3"
OUT4 = HERE / "look4"
OUT5 = HERE / "look5"
OUT6 = HERE / "look6"
OUT7 = HERE / "look7"
ANALYSES = {"crossed": OUT / "crossed_analysis.json", "mixed": OUT3 / "mixed_analysis.json",
            "relay": OUT4 / "relay_analysis.json", "tandem": OUT5 / "tandem_analysis.json",
            "ledger": OUT6 / "ledger_analysis.json", "quarry": OUT7 / "quarry_analysis.json",
            **{p.name.removesuffix("_analysis.json"): p for p in sorted(CHECKS.glob("*_analysis.json"))}}
NUMBERS = {7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen"}
FIRST_LOOK = HERE / "lookahead"  # the first look's lookahead rows: the second look must reproduce them
LOOKAHEAD = ("lookahead_fresh", "lookahead_kl", "lookahead_dv", "lookahead_dll")
SINGLE = ("accuracy_gap", "score", "verdict_value", "teachability", "mean_jsd", "lookahead_fresh", "lookahead_kl",
          "lookahead_dv")


SEVEN = v2.REPO / yaml.safe_load(PLAN2.read_text())["outcomes_from"]["seven"]  # the seven worlds' committed analysis


@functools.cache
def _analysis(path: Path) -> dict:
    return json.loads(path.read_text())


def world_rows(w: str) -> list[dict]:
    """The world's product rows (realised outcomes and v1 columns) from the committed analysis of its study (each
    analysis file read once)."""
    return [r for r in _analysis(ANALYSES.get(w, SEVEN))["worlds"][w]["rows"] if r.get("kind") == "product"]


def lookahead_file(w: str) -> Path:
    """A world's lookahead rows (run_v2.py --look 2): beside its study's analysis for an added world, else the second
    look's."""
    return (ANALYSES[w].parent if w in ANALYSES else OUT) / "lookahead" / f"{w}.json"


def own_world(analysis: dict, name: str) -> dict:
    """A study analysis cut to one world: its entry and the analysis settings, without the other worlds a shared
    study directory holds or the figures pooled over them (their own files hold those)."""
    return {**{k: v for k, v in analysis.items() if k not in ("worlds", "pooled")}, "worlds": {
        name: analysis["worlds"][name]}}


def records_json(value, depth: int = 0) -> str:
    """A committed record as JSON that diffs and counts by row: objects opened to three levels, each object of a list
    on one line, everything else compact (keys sorted); ``json.loads`` gives ``value`` back."""
    if isinstance(value, dict) and value and depth < 3:
        return "{\n" + ",\n".join(f"{json.dumps(k)}: {records_json(v, depth + 1)}"
                                  for k, v in sorted(value.items())) + "\n}"
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return "[\n" + ",\n".join(json.dumps(x, sort_keys=True) for x in value) + "\n]"
    return json.dumps(value, sort_keys=True)


def write_records(path: Path, value) -> None:
    path.write_text(records_json(value) + "\n")


def write_world_analysis(name: str, study: Path, dest: Path) -> None:
    """The study's analysis of world ``name`` (``analyze_worlds.py`` over ``study``), cut to that world, to ``dest``."""
    from benchmarks.validity.worlds import analyze_worlds
    write_records(dest, v2.stats_jsonable(own_world(analyze_worlds.analyse_worlds(study.resolve()), name)))


def copy_lookahead(src: Path, dest: Path) -> None:
    """A rediagnosis' ``lookahead.json`` (run_v2.py) kept as a record."""
    write_records(dest, json.loads(src.read_text()))


def store_added(name: str, study: Path, lookahead: Path | None, dest: Path | None = None) -> None:
    """An added world's study analysis (to ``dest``, default ``ANALYSES[name]``) and rediagnosis lookahead rows
    (beside it), copied where ``load_rows`` reads them, so a look's report regenerates from committed files."""
    dest = dest or ANALYSES[name]
    dest.parent.joinpath("lookahead").mkdir(parents=True, exist_ok=True)
    write_world_analysis(name, study, dest)
    copy_lookahead((lookahead or study / "v2-lookahead") / name / "lookahead.json",
                   dest.parent / "lookahead" / f"{name}.json")


def load_rows(plan: dict) -> list[dict]:
    """Every diagnosed row of the plan's worlds with its lookahead columns."""
    rows = []
    for w in plan["worlds"]:
        la = {(r["config"], r["method"]): r for r in json.loads(lookahead_file(w).read_text())["rows"]}
        for r in world_rows(w):
            x = la[(r["config"], r["method"])]
            rows.append({"world": w, "config": r["config"], "method": r["method"], "realised": r["realised"],
                         "diagnosis_run": r["diagnosis_run"], "diagnosis_config": r["diagnosis_config"],
                         **{k: r.get(k) for k in SINGLE if not k.startswith("lookahead")},
                         **{k: x[k]["estimate"] for k in ("lookahead_dv", "lookahead_dll", "lookahead_kl")},
                         "lookahead_fresh": x.get("lookahead_fresh"), "is_jsd": model.LOSS_KIND[r["method"]],
                         **{o: r[o] for o in v2.OUTCOMES},
                         "cost": {k: x.get(k) for k in ("trained_tokens", "partner_scored_tokens", "measured_tokens",
                                                        "fresh_sampled_tokens", "fresh_initial_tokens",
                                                        "n_measure_rollouts", "training_run_completions")}})
    return rows


def scopes(rows: list[dict], added: str) -> dict[str, np.ndarray]:
    """All worlds, the earlier ones (seen), the added one: named by their counts (``eight``, ``seven``, ``crossed``)."""
    w = np.array([r["world"] for r in rows])
    n = len(set(w))
    return {NUMBERS[n]: np.ones(len(rows), bool), NUMBERS[n - 1]: w != added, added: w == added}


def ranking(x: np.ndarray, rows: list[dict], reps: np.ndarray, boot: dict, g: np.ndarray, added: str) -> dict:
    """Spearman (cluster bootstrap) and the paired difference against G, per scope (eight, seven, the added world)."""
    out = {}
    for scope, k in scopes(rows, added).items():
        sub = [r for r, keep in zip(rows, k) if keep]
        out[scope] = {"spearman": v2.rho(x[k], sub, "d_pass1", reps[k], boot),
                      "vs_accuracy_gap": v2.rho(x[k], sub, "d_pass1", reps[k], boot, other=g[k])}
    return out


def cost(rows: list[dict]) -> dict:
    """Lookahead tokens per row over one training run's (sampled + scored + trained) tokens; the initial student's
    measurement and fresh samples are shared by a diagnosis' rows but counted in full for each (an upper bound)."""
    out = {}
    for r in rows:
        c = r["cost"]
        mean_len = c["measured_tokens"] / max(1, c["n_measure_rollouts"])
        run = 3 * c["training_run_completions"] * mean_len
        look = c["trained_tokens"] + c["partner_scored_tokens"] + c["measured_tokens"]
        fresh = (c["fresh_sampled_tokens"] or 0) + (c["fresh_initial_tokens"] or 0)
        out.setdefault(r["world"], []).append(((look + fresh) / run, look / run))
    return {w: {"mean": float(np.mean([a for a, _ in s])), "max": float(np.max([a for a, _ in s])),
                "max_without_fresh": float(np.max([b for _, b in s]))} for w, s in out.items()}


def reproduction(rows: list[dict], study: Path) -> dict:
    """Largest difference of the recomputed first-look columns (lookahead dv, dll, kl over the seven worlds) from the
    first look's committed rows, and of the rediagnosed G and mean JSD from the committed worlds analysis."""
    diff = {k: 0.0 for k in ("lookahead_dv", "lookahead_dll", "lookahead_kl", "accuracy_gap", "mean_jsd")}
    for r in rows:
        first = FIRST_LOOK / f"{r['world']}.json"
        if first.is_file():
            old = {(x["config"], x["method"]): x for x in json.loads(first.read_text())["rows"]}[(r["config"], r["method"])]
            for k in ("lookahead_dv", "lookahead_dll", "lookahead_kl"):
                a, b = v2._num(old[k]["estimate"]), v2._num(r[k])
                if math.isfinite(a) or math.isfinite(b):
                    diff[k] = max(diff[k], abs(a - b) if math.isfinite(a) and math.isfinite(b) else math.inf)
        re = v2.rediagnosed(study / r["world"] / "diag" / r["diagnosis_run"], r["diagnosis_config"])
        for k in ("accuracy_gap", "mean_jsd"):
            diff[k] = max(diff[k], abs(v2._num(re[k]) - v2._num(r[k])))
    return diff


def analyse(study: Path, look: int = 2) -> dict:
    plan2 = yaml.safe_load(PLAN2.read_text())
    plan = yaml.safe_load(PLANS[look].read_text())
    rows = load_rows(plan)
    added = plan["added_world"]["name"]
    m, val = plan2["models"], plan2["validation"]  # the third look keeps the second's model and validation
    boot = {"n": 2000, "seed": 0}
    reps = v2.realised_reps(rows, "d_pass1", boot["n"], boot["seed"])
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    out = {"plan": f"benchmarks/validity/v2/plan_look{look}.yaml", "look": look, "added_world": added,
           "scopes": list(scopes(rows, added)), "n_rows": len(rows),
           "n_rows_added": int(sum(r["world"] == added for r in rows)), "delta": val["delta"], "alpha": 1.0,
           "primary": m["primary"], "tiers": {}, "single": {},
           "missing": {k: int(sum(not math.isfinite(v2._num(r[k])) for r in rows)) for k in
                       ("accuracy_gap", "teachability", "mean_jsd", *LOOKAHEAD)}}
    for tier, features in m["tiers"].items():
        fold = lowo(rows, features, "d_pass1", out["alpha"])
        out["tiers"][tier] = {"features": features, **ranking(fold["pred"], rows, reps, boot, g, added),
                              "per_world": v2.per_world(fold["pred"], rows, "d_pass1"),
                              "decisions": v2.decisions(fold, rows, val["delta"]),
                              "method_order": v2.method_order(fold["pred"], rows),
                              "pred": fold["pred"].tolist(), "lo": fold["lo"].tolist(), "hi": fold["hi"].tolist()}
        if look >= 3:
            out["tiers"][tier]["within"] = within(fold["pred"], g, rows, reps, boot)
    for name in SINGLE:
        x = np.array([v2._num(r[name]) for r in rows])
        out["single"][name] = {**ranking(x, rows, reps, boot, g, added), "per_world": v2.per_world(x, rows, "d_pass1"),
                               "method_order": v2.method_order(x, rows)}
    feats = m["tiers"][m["primary"]]
    out["other_outcomes"] = {}
    for o in ("d_pass4", "d_regression", "kl_to_initial"):
        fold = lowo(rows, feats, o, out["alpha"], inner=False)
        out["other_outcomes"][o] = {"spearman": stats.spearman(*v2._finite(fold["pred"], v2.target(rows, o))),
                                    "per_world": v2.per_world(fold["pred"], rows, o)}
    out["cost"] = cost(rows)
    out["reproduction"] = reproduction(rows, study)
    out["rows"] = [{k: r[k] for k in ("world", "config", "method", "realised")} | {"d_pass1": r["d_pass1"]["estimate"]}
                   for r in rows]
    out["ship"] = ship(out)
    if look == 2:  # the second look's analysis was committed before these keys existed: its render stays the same
        for k in ("look", "scopes"):
            out.pop(k)
    return out


def _scopes(a: dict) -> tuple[str, str]:
    """(all worlds, the earlier ones) of an analysis (the second look's predates the ``scopes`` key)."""
    return tuple(a.get("scopes", ["eight", "seven"])[:2])


def ship(a: dict) -> dict:
    """The plan's rule. Second look: the primary ships only if it beats G pooled over the eight worlds (paired interval
    above 0) and is at least G on the added world alone. Third look: the same with the mean within-world Spearman
    (paired interval above 0) in place of the pooled one."""
    p, g, added = a["tiers"][a["primary"]], a["single"]["accuracy_gap"], a["added_world"]
    pa, ga = p[added]["spearman"]["estimate"], g[added]["spearman"]["estimate"]
    on_added = pa >= ga
    if a.get("look", 2) >= 3:
        d = p["within"]["vs_accuracy_gap"]
        overall, what = d["lo"] > 0, f"the mean within-world Spearman over the {_scopes(a)[0]} worlds"
    else:
        d = p["eight"]["vs_accuracy_gap"]
        overall = p["eight"]["spearman"]["estimate"] > g["eight"]["spearman"]["estimate"] and d["lo"] > 0
        what = "pooled over the eight worlds"
    wins = bool(overall and on_added)
    out = {"choice": a["primary"] if wins else "accuracy_gap", "pooled_condition": bool(overall),
           "added_world_condition": bool(on_added),
           "reason": (f"{a['primary']} beats G {what} (paired {v2.ci(d)}) and on {added} "
                      f"({v2.fmt(pa)} vs {v2.fmt(ga)})") if wins else
                     (f"{a['primary']} does not meet the ship rule: {what} the paired difference "
                      f"with G is {v2.ci(d)}{'' if overall else ' (needs to lie above 0)'}; on {added} alone "
                      f"{v2.fmt(pa)} against G's {v2.fmt(ga)}{'' if on_added else ' (needs to be at least G)'}")}
    if a.get("look", 2) >= 3:
        out["within_condition"] = out.pop("pooled_condition")
    return out


def render(a: dict) -> str:
    f, ci, added = v2.fmt, v2.ci, a["added_world"]
    every, seen = _scopes(a)
    look = a.get("look", 2)
    if look == 2:
        lines = ["# Predictor v2, second look: eight worlds, one of them new", "",
                 f"Generated by `python benchmarks/validity/v2/report_look2.py --from DIR --crossed STUDY` from "
                 f"`look2_analysis.json` (plan: `{a['plan']}`, committed before any result of this look). {a['n_rows']} "
                 f"rows (configuration x method), {a['n_rows_added']} of them on the added world `{added}`, which no model "
                 f"or feature of either look was designed on. The first look (`RESULTS.md`) stays as it was.", ""]
    else:
        lines = [f"# Predictor v2, third look: {every} worlds, judged within a diagnosis", "",
                 f"Generated by `python benchmarks/validity/v2/report_look2.py --look 3 --from DIR --added STUDY` from "
                 f"`look3_analysis.json` (plan: `{a['plan']}`, committed before any result of this look). {a['n_rows']} "
                 f"rows (configuration x method), {a['n_rows_added']} of them on the added world `{added}`, built after "
                 f"the second look. The model is the second look's {a['primary']}, unchanged; the rule is judged on the "
                 f"ranking within a diagnosis (the mean over worlds of the per-world Spearman). The earlier looks "
                 f"(`RESULTS.md`, `RESULTS_look2.md`) stay as they were.", "",
                 f"**Ship rule:** {a['ship']['choice']} ships. {a['ship']['reason']}.", "",
                 "## Within a diagnosis: mean over worlds of the per-world Spearman (stratified cluster bootstrap)", "",
                 "| model | mean within-world Spearman | G's | paired difference with G |", "|---|---|---|---|"]
        for tier, d in a["tiers"].items():
            x = d["within"]
            lines.append(f"| {tier} | {ci(x['mean'])} | {f(x['accuracy_gap_mean'])} | {ci(x['vs_accuracy_gap'])} |")
        lines += ["", "Each replicate redraws the realised values around their estimates (their noise added once more, "
                  "as in the earlier looks), which attenuates a correlation within one world, whose realised values "
                  "spread less than the pooled ones: the interval of a mean sits below its estimate. The paired "
                  "difference, which the rule reads, carries the attenuation on both of its sides."]
        lines += [""]
    if look == 2:
        lines += [f"**Ship rule:** {a['ship']['choice']} ships. {a['ship']['reason']}.", ""]
    lines += ["## Ranking: Spearman with realised held-out d_pass1 (leave-one-world-out)", "",
              f"| predictor | {every} worlds [95% cluster bootstrap] | the {seen} (seen) | {added} alone (new) | mean of "
              "worlds | method order (pairs > 0.10 apart) |", "|---|---|---|---|---|---|"]
    for kind, table in (("tier", a["tiers"]), ("single", a["single"])):
        for name, d in table.items():
            mo = d["method_order"]
            label = f"**{name}** (ridge: {', '.join(d['features'])})" if kind == "tier" else name
            lines.append(f"| {label} | {ci(d[every]['spearman'])} | {ci(d[seen]['spearman'])} | "
                         f"{ci(d[added]['spearman'])} | {f(d['per_world']['mean'])} | {mo['n_right']}/{mo['n_pairs']} |")
    lines += ["", "Paired difference against the accuracy gap G (same replicates):", "",
              f"| model | {every} worlds | the {seen} | {added} alone |", "|---|---|---|---|"]
    for name, d in [*a["tiers"].items(), *((k, a["single"][k]) for k in ("lookahead_fresh",))]:
        lines.append(f"| {name} | {ci(d[every]['vs_accuracy_gap'])} | {ci(d[seen]['vs_accuracy_gap'])} | "
                     f"{ci(d[added]['vs_accuracy_gap'])} |")
    worlds = list(a["single"]["accuracy_gap"]["per_world"]["worlds"])
    cols = [*a["tiers"], "accuracy_gap", "lookahead_fresh", "lookahead_kl"]
    lines += ["", "## Per left-out world (Spearman)", "", "| world | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for w in worlds:
        vals = [(a["tiers"].get(c) or a["single"][c])["per_world"]["worlds"][w] for c in cols]
        lines.append(f"| {w}{' (new)' if w == added else ''} | " + " | ".join(f(x) for x in vals) + " |")
    lines += v2.decision_table(a)
    lines += ["", f"## Other outcomes ({a['primary']}'s features, LOWO, pooled Spearman over the {every} worlds)", ""]
    for o, d in a["other_outcomes"].items():
        lines.append(f"- {o}: {f(d['spearman'])} (mean of worlds {f(d['per_world']['mean'])})")
    rep = a["reproduction"]
    lines += ["", "## Reproduction and missing values", "",
              f"The rediagnosis recomputes the first look's lookahead columns: largest difference from its committed rows "
              f"dv {rep['lookahead_dv']:.1e}, dll {rep['lookahead_dll']:.1e}, KL {rep['lookahead_kl']:.1e}; G within "
              f"{rep['accuracy_gap']:.1e} and mean JSD within {rep['mean_jsd']:.1e} of the worlds analysis.", "",
              "Rows with a missing feature (imputed with the training folds' mean): " +
              ", ".join(f"{k} {n}" for k, n in a["missing"].items()) + "."]
    lines += ["", "## Cost of the lookahead (tokens per row over one training run's sampled + scored + trained tokens)",
              "", "| world | mean | max | max without the fresh samples |", "|---|---|---|---|"]
    for w, d in a["cost"].items():
        lines.append(f"| {w} | {d['mean']:.1%} | {d['max']:.1%} | {d['max_without_fresh']:.1%} |")
    return "\n".join(lines) + "\n"


def later_look(a: dict) -> dict:
    """What the shipped model file records of this look (the decision panel quotes ``summary``)."""
    p, g, added = a["tiers"][a["primary"]], a["single"]["accuracy_gap"], a["added_world"]
    every = _scopes(a)[0]
    if a.get("look", 2) >= 3:
        what, d = f"within a diagnosis over {every} worlds", p["within"]["vs_accuracy_gap"]
    else:
        what, d = f"pooled over {every} worlds", p[every]["vs_accuracy_gap"]
    summary = (f"look {a.get('look', 2)} ({a['primary']}): {what} {a['primary']} - G {v2.ci(d)}; on the new world {added} "
               f"{v2.fmt(p[added]['spearman']['estimate'])} vs G's {v2.fmt(g[added]['spearman']['estimate'])}: "
               f"{'ships' if a['ship']['choice'] == a['primary'] else 'G stays'}")
    return {"plan": a["plan"], "study": f"benchmarks/validity/v2/RESULTS_look{a.get('look', 2)}.md",
            "model": a["primary"], "choice": a["ship"]["choice"], "added_world": added, "summary": summary}


def record_in_shipped(a: dict) -> None:
    """The look's record in the package's model file (``later_looks``), which its other keys leave as they are."""
    shipped = json.loads(v2.SHIPPED.read_text())
    shipped.setdefault("later_looks", {})[f"look{a.get('look', 2)}"] = later_look(a)
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="study", required=True, type=Path, help="run_v2.py --look 2's output")
    ap.add_argument("--look", type=int, default=2, choices=(2, 3))
    ap.add_argument("--crossed", "--added", dest="added", type=Path,
                    help="the look's added world's study (run_worlds.py); its analysis is copied here")
    args = ap.parse_args(argv)
    plan = yaml.safe_load((PLAN2 if args.look == 2 else PLAN3).read_text())
    out, name = (OUT, "crossed") if args.look == 2 else (OUT3, plan["added_world"]["name"])
    (out / "lookahead").mkdir(parents=True, exist_ok=True)
    if args.added:
        write_world_analysis(name, args.added, ANALYSES[name])
    for w in plan["worlds"] if args.look == 2 else [name]:  # the third look reuses the second's rows of the others
        copy_lookahead(args.study / w / "lookahead.json", out / "lookahead" / f"{w}.json")
    a = analyse(args.study.resolve(), args.look)
    analysis, results = HERE / f"look{args.look}_analysis.json", HERE / f"RESULTS_look{args.look}.md"
    analysis.write_text(json.dumps(v2.stats_jsonable(a), indent=1, sort_keys=True) + "\n")
    results.write_text(render(json.loads(analysis.read_text())))
    record_in_shipped(json.loads(analysis.read_text()))
    print(results.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
