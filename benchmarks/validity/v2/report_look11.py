"""Predictor v2's eleventh look, as pre-registered (plan_look11.yaml): the verdict read from a calibration table of the
product's own predicted gain (``calibrated_classes``), judged leave-one-world-out over the seen worlds and on the
worlds built after the plan; look11_analysis.json and RESULTS_look11.md.

    python benchmarks/validity/v2/report_look11.py
        # after check_world.py --spec sample_data/worlds/{chert,jasper,mica}.yaml --study STUDY --keep, which
        # commits each added world's rows into checks/: this script reads only committed files.

The prediction is the product's (``looks.product_gain``: the first look's models as shipped); the table and the
verdict are ``class_table`` and ``table_verdict`` here, scored as every look scores a verdict
(``report_look4.scored``). The interval rule, the verdict the product showed before this look, is scored on the same
rows. The look's outcome is recorded in the package's model file (``later_looks``). The rule did not ship
(RESULTS_look11.md: its leave-one-world-out condition failed), so the product has no code for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import report_checks  # noqa: E402
from benchmarks.validity.v2 import look_record  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look6 as look6  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import product_gain, realised_classes, shipped_order  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look11.yaml"
RULES = {"calibrated_classes": "calibrated classes", "interval": "interval rule (shipped v2)"}
CLASSES = ("improves", "degrades", "no clear change")  # stats.realised_class's classes


def class_table(x, classes, bins: int) -> dict:
    """The realised classes of past rows by bins of their predicted gain: the ``bins - 1`` inner edges at the
    prediction's quantiles 1/bins, 2/bins, ... (numpy's linear interpolation) and, per bin, how many rows realised
    each class."""
    x = np.asarray(x, dtype=np.float64)
    edges = np.quantile(x, np.arange(1, bins) / bins)
    counts = [{c: 0 for c in CLASSES} for _ in range(bins)]
    for b, c in zip(np.searchsorted(edges, x, side="right"), classes):  # the bin: how many inner edges are <= x
        counts[b][c] += 1
    return {"edges": edges.tolist(), "counts": counts, "n": int(x.size)}


def bin_verdict(counts: dict, hurts: float, helps: float) -> str:
    """hurts when at least ``hurts`` of the bin's rows degraded, helps when at least ``helps`` improved, else
    unclear (and for an empty bin)."""
    n = sum(counts.values())
    if n and counts["degrades"] / n >= hurts:
        return "hurts"
    if n and counts["improves"] / n >= helps:
        return "helps"
    return "unclear"


def table_verdict(x: float, table: dict, hurts: float, helps: float) -> str:
    """The verdict of the bin prediction ``x`` falls in (the number of inner edges <= x); unclear where ``x`` is not
    finite."""
    if not np.isfinite(x):
        return "unclear"
    return bin_verdict(table["counts"][int(np.searchsorted(table["edges"], x, side="right"))], hurts, helps)


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def settings() -> dict:
    """The plan's bins and thresholds, as ``core.predictor.class_table`` and ``table_verdict`` take them."""
    return {"bins": 10, "hurts": 0.90, "helps": 0.85}


def realised(rows: list[dict]) -> list[str]:
    """Each row's realised class (``looks.realised_classes``), '' where its realised Δpass@1 has no interval."""
    finite = [np.isfinite(v2._num(r["d_pass1"]["lo"])) and np.isfinite(v2._num(r["d_pass1"]["hi"])) for r in rows]
    return [str(c) if ok else "" for c, ok in zip(realised_classes(rows), finite)]


def table(x: np.ndarray, classes: list[str], keep: np.ndarray) -> dict:
    """The plan's table over the ``keep`` rows that have a finite prediction and a realised class."""
    k = keep & np.isfinite(x) & np.array([c != "" for c in classes])
    return class_table(x[k], [c for c, t in zip(classes, k) if t], settings()["bins"])


def verdicts(x: np.ndarray, tab: dict) -> list[str]:
    s = settings()
    return [table_verdict(v, tab, s["hurts"], s["helps"]) for v in x]


def calibrated(x: np.ndarray, classes: list[str], w: np.ndarray, seen: list[str]) -> list[str]:
    """Each world's rows given verdicts by the table of the seen worlds other than itself: leave-one-world-out for
    a seen world, all of them for an added one."""
    out = [""] * len(x)
    for held in dict.fromkeys(w):
        k = np.flatnonzero(w == held)
        for i, v in zip(k, verdicts(x[k], table(x, classes, np.isin(w, seen) & (w != held)))):
            out[i] = v
    return out


def interval(rows: list[dict], shipped: dict) -> list[str]:
    """The interval rule on the shipped models' prediction and band, as the product applied it before this look."""
    d = look10.applied(shipped["models"], rows)["d_pass1"]
    return [model.verdict(a, b, shipped["delta"]) for a, b in zip(d["lo"], d["hi"])]


def summary(vs: list[str], rows: list[dict], keep) -> dict:
    return scored([v for v, k in zip(vs, keep) if k], [r for r, k in zip(rows, keep) if k])


def added_worlds() -> tuple[list[str], list[str]]:
    """(the plan's added worlds, those with committed rows)."""
    return look_record.added_worlds(plan())


def analyse(shipped: dict) -> dict:
    p = plan()["seen_worlds"]
    seven, never = p["fitted_by_look1"], p["never_fitted"]
    seen = [*seven, *never]
    planned, built = added_worlds()
    rows = look2.load_rows({"worlds": [*seen, *built]})
    w = np.array([r["world"] for r in rows])
    x, classes = product_gain(rows, shipped), realised(rows)
    is_seen, is_added = np.isin(w, seen), np.isin(w, built)
    seen_table = {**table(x, classes, is_seen), "described": described(rows, x, classes, is_seen)}
    rules = {"calibrated_classes": calibrated(x, classes, w, seen), "interval": interval(rows, shipped)}
    scopes = {"never_fitted": np.isin(w, never), "seven": np.isin(w, seven), "seen": is_seen, "added": is_added}
    out = {"look": 11, "plan": "benchmarks/validity/v2/plan_look11.yaml", "settings": settings(),
           "seven": seven, "never_fitted": never, "added_planned": planned, "added_built": built,
           "added_excluded": [w for w in planned if report_checks.status(w) == "excluded"],
           "n_rows": {k: int(v.sum()) for k, v in scopes.items()},
           "seen_table": seen_table,
           "verdicts": {name: {k: summary(vs, rows, keep) for k, keep in scopes.items()} for name, vs in rules.items()},
           "per_world": {k: {kk: d[kk] for kk in ("n_correct", "n_decisive", "unclear_share")}
                         for k, d in ((k, summary(rules["calibrated_classes"], rows, w == k)) for k in [*seen, *built])},
           "added": {name: added_ranking([r for r in rows if r["world"] == name], shipped, name) for name in built}}
    out["ship"] = ship(out)
    return out


def described(rows: list[dict], x: np.ndarray, classes: list[str], keep: np.ndarray) -> list[dict]:
    """Per bin of the seen worlds' table (reported, it decides nothing): the median G of its rows, the share with G
    >= 0.55 (a teacher far above its student), and the median |realised Δpass@1| and realised-interval width of the
    rows that changed nothing clear, so a reader can tell "nothing happened" from "too noisy to say"."""
    k = keep & np.isfinite(x) & np.array([c != "" for c in classes])
    t = class_table(x[k], [c for c, z in zip(classes, k) if z], settings()["bins"])
    at = np.searchsorted(t["edges"], x[k], side="right")
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])[k]
    y = np.abs(v2.target(rows, "d_pass1"))[k]
    width = np.array([v2._num(r["d_pass1"]["hi"]) - v2._num(r["d_pass1"]["lo"]) for r in rows])[k]
    none = np.array([c == "no clear change" for c in classes])[k]
    return [{"median_g": float(np.median(g[at == b])), "far_above": float(np.mean(g[at == b] >= 0.55)),
             "unchanged_median_abs": float(np.median(y[(at == b) & none])) if ((at == b) & none).any() else None,
             "unchanged_median_width": float(np.median(width[(at == b) & none])) if ((at == b) & none).any()
             else None} for b in range(settings()["bins"])]


def added_ranking(rows: list[dict], shipped: dict, name: str) -> dict:
    """The shipped ranking on one added world (reported): Spearman beside G's, method pairs, the recommended row."""
    order = shipped_order(rows, shipped)
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    return {"n_rows": len(rows),
            "spearman": {"shipped": v2.per_world(order, rows, "d_pass1")["worlds"][name],
                         "accuracy_gap": v2.per_world(g, rows, "d_pass1")["worlds"][name]},
            "method_order": v2.method_order(order, rows),
            "recommended": look8.recommended(order, rows)[name],
            "best": float(np.nanmax(v2.target(rows, "d_pass1")))}


def ship(a: dict) -> dict:
    """The pre-registered rule: leave-one-world-out over the never-fitted worlds >= 30 decisive calls, >= 85% right,
    hurts precision >= 0.90, helps precision >= 0.70 where any helps call is made; at least one added world with
    rows, and over them >= 75% right where the rule makes >= 5 decisive calls."""
    d = a["verdicts"]["calibrated_classes"]
    lo, new = d["never_fitted"], d["added"]

    def at_least(x, bound) -> bool:
        return x is not None and bool(np.isfinite(x)) and x >= bound
    checks = {"decisive calls >= 30": lo["n_decisive"] >= 30,
              "decisive right >= 0.85": at_least(lo["accuracy"], 0.85),
              "hurts precision >= 0.90": at_least(lo["hurts_precision"], 0.90),
              "helps precision >= 0.70 (if any helps call)": lo["n_helps"] == 0
              or at_least(lo["helps_precision"], 0.70),
              "an added world with rows": bool(a["added_built"]),
              "on the added worlds, >= 0.75 right (if >= 5 calls)": bool(a["added_built"])
              and (new["n_decisive"] < 5 or at_least(new["accuracy"], 0.75))}
    checks = {k: bool(v) for k, v in checks.items()}
    why = (f"leave-one-world-out over the {len(a['never_fitted'])} never-fitted worlds {lo['n_correct']}/"
           f"{lo['n_decisive']} decisive calls right ({v2.fmt(lo['accuracy'], 3)}), hurts precision "
           f"{v2.fmt(lo['hurts_precision'], 3)}, helps precision {v2.fmt(lo['helps_precision'], 3)}; on the added "
           f"worlds ({', '.join(a['added_built']) or 'none built'}) {new['n_correct']}/{new['n_decisive']}. "
           + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in checks.items()))
    return {"choice": "calibrated_classes" if all(checks.values()) else "interval", "conditions": checks,
            "reason": why}


def not_run(a: dict) -> str:
    """What became of the planned added worlds without rows: excluded by the level rule, or not built yet."""
    return "".join(f" `{w}` was built and excluded by the plan's level rule (`check_{w}.txt`): no rows."
                   if w in a["added_excluded"] else f" `{w}` is planned and not built: not run."
                   for w in a["added_planned"] if w not in a["added_built"])


def render(a: dict) -> str:
    s, f = a["settings"], v2.fmt
    n_never, built = len(a["never_fitted"]), a["added_built"]
    L = ["# Predictor v2, eleventh look: the verdict from the past rows the product predicted alike", "",
         "Generated by `python benchmarks/validity/v2/report_look11.py` from `look11_analysis.json` (plan: "
         "`benchmarks/validity/v2/plan_look11.yaml`, committed before any result of this look). The prediction is "
         "the product's predicted Δpass@1 as shipped (the first look's models). The rule: over the calibration rows, "
         f"{s['bins']} bins of the prediction at its deciles; a row's verdict is hurts where its bin degraded in at "
         f"least {s['hurts']:.0%} of its rows, helps where it improved in at least {s['helps']:.0%}, unclear "
         f"otherwise. Judged leave-one-world-out over the {n_never} seen worlds the shipped models never fitted on "
         f"({a['n_rows']['never_fitted']} rows; each world's verdicts from the table of the other seen worlds), and "
         "on the worlds built after the plan with the table of all seen worlds: "
         + (", ".join(f"`{w}`" for w in built) if built else "none built yet") + "."
         + not_run(a), "",
         f"**Ship rule:** {'the calibrated verdict ships' if a['ship']['choice'] == 'calibrated_classes' else 'the interval rule stays'}:"
         f" {a['ship']['reason']}.", "",
         "## Verdicts", "",
         "| rule | scope | decisive right [95% Wilson] | helps (precision) | hurts (precision) | unclear |",
         "|---|---|---|---|---|---|"]
    scopes = {"never_fitted": f"{n_never} never-fitted worlds (leave-one-world-out)",
              "added": "added worlds (new)", "seven": "the seven (the models' own; reported)",
              "seen": f"all {n_never + len(a['seven'])} seen"}
    for name, label in RULES.items():
        L += [look6._line(label, text, a["verdicts"][name][k]) if a["verdicts"][name][k]["n_rows"]
              else f"| {label} | {text} | not run | | | |" for k, text in scopes.items()]
    L += ["", "Per world, calibrated classes (decisive right / decisive, unclear share):", "",
          "| world | right | unclear |", "|---|---|---|"]
    for w, d in a["per_world"].items():
        tag = " (new)" if w in built else " (the models' own)" if w in a["seven"] else ""
        L.append(f"| {w}{tag} | {d['n_correct']}/{d['n_decisive']} | {d['unclear_share']:.0%} |")
    t = a["seen_table"]
    L += ["", "## The table of all seen worlds", "",
          f"Built from {t['n']} rows; the verdict each bin gives. Described beside it (it decides nothing): the "
          "median G of the bin's rows, the share with G >= 0.55, and for the rows that changed nothing clear the "
          "median |realised Δpass@1| and the median width of its 95% interval (small and narrow: nothing happened).",
          "", "| bin | predicted Δpass@1 | rows | improved | degraded | no clear change | verdict | median G | "
          "G >= 0.55 | no clear change: median abs, width |", "|---|---|---|---|---|---|---|---|---|---|"]
    edges = [-np.inf, *t["edges"], np.inf]
    for i, (c, d) in enumerate(zip(t["counts"], t["described"])):
        n = sum(c.values())
        v = bin_verdict(c, s["hurts"], s["helps"])
        none = ("n/a" if d["unchanged_median_abs"] is None else
                f"{d['unchanged_median_abs']:.3f}, {d['unchanged_median_width']:.3f}")
        L.append(f"| {i + 1} | [{edges[i]:+.3f}, {edges[i + 1]:+.3f}) | {n} | {c['improves'] / n:.0%} | "
                 f"{c['degrades'] / n:.0%} | {c['no clear change'] / n:.0%} | {v} | {d['median_g']:+.2f} | "
                 f"{d['far_above']:.0%} | {none} |")
    for w in built:
        r = a["added"][w]
        L += ["", f"On `{w}` (reported): the shipped ranking's Spearman {f(r['spearman']['shipped'])} with the "
              f"realised Δpass@1 (G alone {f(r['spearman']['accuracy_gap'])}); method pairs more than 0.10 apart "
              f"ordered right {r['method_order']['n_right']} of {r['method_order']['n_pairs']}; the recommended row "
              + ("none (no row with G > 0)" if r["recommended"] is None else f"realised {r['recommended']:+.3f}")
              + f" (best row {r['best']:+.3f})."]
    c = a["verdicts"]["calibrated_classes"]["never_fitted"]
    L += ["", f"The issue asks for <= 40% `unclear` with >= 85% of decisive verdicts right: the calibrated verdict "
          f"leaves {c['unclear_share']:.0%} unclear over the never-fitted worlds."]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    d = a["verdicts"]["calibrated_classes"]
    summary_ = (f"look 11 (the verdict from a calibration table of the predicted gain): leave-one-world-out over "
                f"{len(a['never_fitted'])} never-fitted worlds {d['never_fitted']['n_correct']}/"
                f"{d['never_fitted']['n_decisive']} decisive right, {d['never_fitted']['unclear_share']:.0%} unclear; "
                f"on the added worlds {d['added']['n_correct']}/{d['added']['n_decisive']}: "
                + ("the calibrated verdict ships" if a["ship"]["choice"] == "calibrated_classes"
                   else "the interval rule stays"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look11.md", "model": "calibrated_classes",
            "choice": a["ship"]["choice"], "added_world": ", ".join(a["added_built"]), "summary": summary_}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the look recorded. The product has no code for the calibrated verdict: were the look's
    rule ever met, that code (and the table in the file) would have to come first, so this stops rather than record
    a verdict the product does not show."""
    if a["ship"]["choice"] == "calibrated_classes":
        raise SystemExit("the eleventh look's rule is met: the product needs the calibrated verdict before this records it")
    shipped.setdefault("later_looks", {})["look11"] = later_look(a)
    return shipped


def main() -> int:
    return look_record.publish(11, analyse, render, record)


if __name__ == "__main__":
    sys.exit(main())
