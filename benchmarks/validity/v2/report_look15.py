"""Predictor v2's fifteenth look, as pre-registered (plan_look15.yaml): the hurts call from G for a full-distribution
loss where the lookahead moved the student (C, ``g_hurts_moved``: lookahead KL at least the diagnosis' 0.6-quantile;
D, ``g_hurts_moved_abs``: at least 0.01), judged only on the worlds built after the plan; look15_analysis.json and
RESULTS_look15.md.

    python benchmarks/validity/v2/report_look15.py
        # after check_world.py --spec sample_data/worlds/W.yaml --study STUDY --keep for each added world, which
        # commits its rows into checks/: this script reads only committed files.

Every verdict is scored as every earlier look scores one (``report_look4.scored``). The fourteenth look's B
(``g_hurts``, unfiltered) and the interval rule the product shows are reported beside. The look's outcome is recorded
in the package's model file (``later_looks``).
"""

from __future__ import annotations

import math
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
from benchmarks.validity.v2 import report_look14 as look14  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS as CHOSE  # noqa: E402
from benchmarks.validity.v2.explore_hurts_moved import moved  # noqa: E402
from benchmarks.validity.v2.looks import product_verdicts  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look15.yaml"
MIN_CALLS, MIN_PRECISION, SEEN_PRECISION = 20, 0.90, 0.90  # the plan's ship rule


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def seen_worlds() -> list[str]:
    """The 51 worlds of explore_hurts_moved.py: the fourteenth look's chose, judged and added worlds."""
    return [*CHOSE, *look14.plan()["worlds"]["judged"], *look14.added_worlds()[1]]


def candidates() -> dict[str, dict]:
    """name -> thresholds, in the plan's order (C, then D)."""
    c = plan()["candidates"]
    return {c[k]["name"]: c[k]["thresholds"] for k in ("C", "D")}


def verdicts(rows: list[dict], t: dict) -> list[str]:
    """B's hurts call kept where the lookahead KL clears the candidate's floor (quantile of the world's rows, or
    absolute); ``unclear`` elsewhere."""
    b = look14.g_verdicts(rows, {"hurts_full": t["hurts_full"]})
    keep = (moved(rows, "relative", t["lookahead_kl_quantile"]) if "lookahead_kl_quantile" in t
            else moved(rows, "absolute", t["lookahead_kl_min"]))
    return [v if k else "unclear" for v, k in zip(b, keep)]


def judged_worlds(rows: list[dict], said: list[str], built: list[str]) -> list[str]:
    """The plan's (amendment 1) judged worlds of a candidate: the added worlds in the plan's order, up to and including
    the first at which its hurts calls, counted from the first, reach MIN_CALLS; all of them if they never do."""
    out, calls = [], 0
    for w in built:
        out.append(w)
        calls += sum(v == "hurts" for r, v in zip(rows, said) if r["world"] == w)
        if calls >= MIN_CALLS:
            break
    return out


def analyse(shipped: dict) -> dict:
    planned, built = look_record.added_worlds(plan())
    seen = seen_worlds()
    rows = look2.load_rows({"worlds": [*seen, *built]})
    w = np.array([r["world"] for r in rows])
    said = {**{name: verdicts(rows, t) for name, t in candidates().items()},
            "g_hurts": look14.g_verdicts(rows, look14.candidates()["g_hurts"]),
            "interval": product_verdicts(rows, shipped)}
    judged = {name: judged_worlds(rows, said[name], built) for name in candidates()}
    scope = {**{f"judged_{name}": np.isin(w, ws) for name, ws in judged.items()},
             "added": np.isin(w, built), "seen": np.isin(w, seen)}

    def on(vs: list[str], keep) -> dict:
        return scored([v for v, k in zip(vs, keep) if k], [r for r, k in zip(rows, keep) if k])
    out = {"look": 15, "plan": "benchmarks/validity/v2/plan_look15.yaml", "seen": seen, "added_planned": planned,
           "added_built": built, "added_excluded": [x for x in planned if report_checks.status(x) == "excluded"],
           "candidates": candidates(), "judged_worlds": judged, "n_rows": {k: int(v.sum()) for k, v in scope.items()},
           "verdicts": {name: {**{k: on(vs, keep) for k, keep in scope.items()},
                               "per_world": {k: look14._brief(on(vs, w == k)) for k in dict.fromkeys(w)}}
                        for name, vs in said.items()}}
    out["ship"] = ship(out)
    return out


def pct(x) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.0%}"


def conditions(a: dict, name: str) -> dict[str, bool]:
    """The plan's four conditions for candidate ``name``, on its judged worlds."""
    d, base = a["verdicts"][name], a["verdicts"]["interval"][f"judged_{name}"]
    j, seen = d[f"judged_{name}"], d["seen"]
    ok = lambda x, bound: x is not None and bool(np.isfinite(x)) and x >= bound  # noqa: E731  NaN is written as null
    return {f"judged: >= {MIN_CALLS} hurts calls": j["n_hurts"] >= MIN_CALLS,
            f"judged: hurts precision >= {MIN_PRECISION:.2f}": ok(j["hurts_precision"], MIN_PRECISION),
            "judged: fewer unclear than the interval rule": bool(j["n_rows"]) and j["unclear_share"] < base["unclear_share"],
            f"seen: hurts precision >= {SEEN_PRECISION:.2f}": ok(seen["hurts_precision"], SEEN_PRECISION)}


def ship(a: dict) -> dict:
    """C first, then D. A candidate with fewer calls than the rule needs leaves the look undecided (the interval rule
    stays until added worlds reach the count); one that meets every condition ships; else the next is judged."""
    checks = {name: conditions(a, name) for name in a["candidates"]}
    choice, decided = "interval", True
    for name, c in checks.items():
        if not c[f"judged: >= {MIN_CALLS} hurts calls"]:
            decided = False
            break
        if all(c.values()):
            choice = name
            break
    f = v2.fmt

    def said(name: str) -> str:
        j, base = a["verdicts"][name][f"judged_{name}"], a["verdicts"]["interval"][f"judged_{name}"]
        return (f"{name} on its judged worlds ({', '.join(a['judged_worlds'][name]) or 'none built'}): "
                f"{j['n_correct']}/{j['n_hurts']} hurts calls right (precision {f(j['hurts_precision'], 3)}, Wilson "
                f"95% [{f(j['lo'], 2)}, {f(j['hi'], 2)}]), unclear {pct(j['unclear_share'])} (the interval rule "
                f"{pct(base['unclear_share'])}); over the seen worlds precision "
                f"{f(a['verdicts'][name]['seen']['hurts_precision'], 3)}. "
                + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in checks[name].items()))
    return {"choice": choice, "decided": decided, "conditions": checks,
            "reason": ". ".join(said(n) for n in checks) + "."}


def status(a: dict, name: str) -> str:
    """A candidate's standing under the rule: ships, failed (which condition), or undecided (too few calls, and the
    fewest calls at which it could still reach the precision, every further call right)."""
    c, j = a["ship"]["conditions"][name], a["verdicts"][name][f"judged_{name}"]
    if all(c.values()):
        return "ships"
    if not c[f"judged: >= {MIN_CALLS} hurts calls"]:
        wrong = j["n_hurts"] - j["n_correct"]
        at = max(MIN_CALLS, math.ceil(wrong / (1 - MIN_PRECISION) - 1e-9))
        return (f"undecided ({j['n_hurts']} calls, {wrong} of them wrong: it can reach {MIN_PRECISION:.2f} only at "
                f"{at} calls or more, every further one right)")
    return "failed (" + ", ".join(k for k, v in c.items() if not v) + ")"


def outcome(a: dict) -> str:
    s = a["ship"]
    if s["choice"] != "interval":
        return f"{s['choice']} ships as the verdict"
    said = []
    for name in a["candidates"]:  # in the plan's order, up to the first that did not fail
        said.append(f"{name} {status(a, name)}")
        if not said[-1].startswith(f"{name} failed"):
            break
    return "; ".join(said) + "; the interval rule stays"


def render(a: dict) -> str:
    names = [*a["candidates"], "g_hurts", "interval"]
    L = ["# Predictor v2, fifteenth look: the hurts call where the lookahead moved the student", "",
         "Generated by `python benchmarks/validity/v2/report_look15.py` from `look15_analysis.json` (plan: "
         "`benchmarks/validity/v2/plan_look15.yaml`, committed before any result of this look). `g_hurts_moved` (C): "
         "hurts where G <= -0.2 for a full-distribution loss (jsd, opsd_jsd) and the row's lookahead KL is at least the "
         "0.6-quantile of its diagnosis' rows; `g_hurts_moved_abs` (D): the same with the lookahead KL at least 0.01; "
         "neither ever says helps. `g_hurts`: the fourteenth look's B, unfiltered; `interval`: the verdict the product "
         "shows, the shipped gain model's 95% interval against +-0.02. Both candidates were picked on the "
         f"{len(a['seen'])} seen worlds (explore_hurts_moved.txt); they are judged only on the worlds built after the "
         "plan: " + (", ".join(f"`{w}`" for w in a["added_built"]) or "none built yet") + "."
         + "".join(f" `{w}` was built and excluded by the plan's level rule (`check_{w}.txt`): no rows."
                   if w in a["added_excluded"] else f" `{w}` is planned and not built: not run."
                   for w in a["added_planned"] if w not in a["added_built"]), "",
         f"**Outcome:** {outcome(a)}. {a['ship']['reason']}", "",
         "## Verdicts", "",
         "| rule | scope (rows) | decisive right [95% Wilson] | helps (precision) | hurts (precision) | unclear |",
         "|---|---|---|---|---|---|"]
    scopes = {**{f"judged_{n}": f"{n}'s judged worlds ({', '.join(a['judged_worlds'][n]) or 'none'})"
                 for n in a["candidates"]},
              "added": "every added world with rows", "seen": f"the {len(a['seen'])} seen worlds (in sample)"}
    for k, label in scopes.items():
        for name in names:
            d = a["verdicts"][name][k]
            if d["n_rows"]:
                L.append(look6._line(name, f"{label}, {d['n_rows']} rows", d))
    L += ["", "The issue's targets: decisive right >= 0.85 (helps precision >= 0.70, hurts >= 0.90) with <= 40% "
          "`unclear`. A hurts-only rule cannot meet the last: it never calls the rows that improve.", "",
          "## Per added world (decisive right / decisive, unclear share)", "",
          "| world | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for w in a["added_built"]:
        cells = [a["verdicts"][n]["per_world"][w] for n in names]
        L.append(f"| {w} | " + " | ".join(f"{d['n_correct']}/{d['n_decisive']}, {d['unclear_share']:.0%}"
                                         for d in cells) + " |")
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    choice = a["ship"]["choice"]

    def said(name: str) -> str:
        j = a["verdicts"][name][f"judged_{name}"]
        return (f"{name} right on {j['n_correct']} of {j['n_hurts']} hurts calls on "
                f"{', '.join(a['judged_worlds'][name]) or 'no world'}, {pct(j['unclear_share'])} unclear")
    summary = ("look 15 (the hurts call where the lookahead moved the student), judged only on worlds built after its "
               "plan: " + "; ".join(said(n) for n in a["candidates"])
               + ": " + outcome(a))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look15.md",
            "model": choice if choice != "interval" else ", ".join(a["candidates"]), "choice": choice,
            "added_world": ", ".join(a["added_built"]), "summary": summary}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the look recorded."""
    shipped.setdefault("later_looks", {})["look15"] = later_look(a)
    return shipped


def main() -> int:
    return look_record.publish(15, analyse, render, record)


if __name__ == "__main__":
    sys.exit(main())
