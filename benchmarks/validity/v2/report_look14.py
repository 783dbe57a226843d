"""Predictor v2's fourteenth look, as pre-registered (plan_look14.yaml): the verdict read from G and the loss family
(candidates A, ``g_full``, and B, ``g_hurts``) against the shipped interval rule, judged on the 28 worlds with rows
built after explore_g_verdict_21's twenty-one and on the worlds built after the plan; look14_analysis.json and
RESULTS_look14.md.

    python benchmarks/validity/v2/report_look14.py
        # after check_world.py --spec sample_data/worlds/{topaz,onyx}.yaml --study STUDY --keep, which commits each
        # added world's rows into checks/: this script reads only committed files.

Every verdict is scored as every earlier look scores one (``report_look4.scored``). The interval rule is the verdict
the product shows (and, no candidate having met the rule, still shows): the shipped gain model's 95% interval (tier
v2 where a row has a lookahead result, else v2_no_lookahead) against +-delta. The look's outcome is recorded in the
package's model file (``later_looks``).
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
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS as CHOSE  # noqa: E402
from benchmarks.validity.v2.looks import product_verdicts  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look14.yaml"


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def added_worlds() -> tuple[list[str], list[str]]:
    """(the plan's added worlds, those with committed rows)."""
    return look_record.added_worlds(plan())


def candidates() -> dict[str, dict]:
    """name -> thresholds, in the plan's order (A, then B)."""
    c = plan()["candidates"]
    return {c[k]["name"]: c[k]["thresholds"] for k in ("A", "B")}


def g_verdicts(rows: list[dict], t: dict) -> list[str]:
    """The sixth look's G verdict (``report_look6.g_verdict``) with a threshold of None meaning never."""
    never = {"hurts_full": -math.inf, "hurts_sampled": -math.inf, "helps_full": math.inf}
    t = {k: never[k] if t.get(k) is None else float(t[k]) for k in never}
    return [look6.g_verdict(r["method"], v2._num(r["accuracy_gap"]), t) for r in rows]


def analyse(shipped: dict) -> dict:
    p = plan()
    judged, (planned, built) = list(p["worlds"]["judged"]), added_worlds()
    rows = look2.load_rows({"worlds": [*CHOSE, *judged, *built]})
    w = np.array([r["world"] for r in rows])
    verdicts = {**{name: g_verdicts(rows, t) for name, t in candidates().items()},
                "interval": product_verdicts(rows, shipped)}
    scope = {"judged": np.isin(w, judged), "added": np.isin(w, built), "chose": np.isin(w, CHOSE),
             "all": np.ones(len(rows), bool)}

    def on(vs: list[str], keep) -> dict:
        return scored([v for v, k in zip(vs, keep) if k], [r for r, k in zip(rows, keep) if k])
    out = {"look": 14, "plan": "benchmarks/validity/v2/plan_look14.yaml", "chose": list(CHOSE), "judged": judged,
           "added_planned": planned, "added_built": built,
           "added_excluded": [x for x in planned if report_checks.status(x) == "excluded"],
           "candidates": candidates(), "n_rows": {k: int(v.sum()) for k, v in scope.items()},
           "verdicts": {name: {**{k: on(vs, keep) for k, keep in scope.items()},
                               "per_world": {k: _brief(on(vs, w == k)) for k in dict.fromkeys(w)}}
                        for name, vs in verdicts.items()}}
    out["ship"] = ship(out)
    return out


def _brief(d: dict) -> dict:
    """A world's figures as the report shows them (the pooled scopes keep the whole table)."""
    return {k: d[k] for k in ("n_correct", "n_decisive", "unclear_share")}


def conditions(a: dict, name: str) -> dict[str, bool]:
    """The plan's six conditions for candidate ``name``."""
    d, base = a["verdicts"][name], a["verdicts"]["interval"]["judged"]
    j, new = d["judged"], d["added"]
    ok = lambda x, bound: x is not None and bool(np.isfinite(x)) and x >= bound  # noqa: E731  NaN is written as null
    return {"judged: >= 30 decisive calls": j["n_decisive"] >= 30,
            "judged: decisive right >= 0.85": ok(j["accuracy"], 0.85),
            "judged: hurts precision >= 0.90": ok(j["hurts_precision"], 0.90),
            "judged: helps precision >= 0.70 (if any helps call)": j["n_helps"] == 0 or ok(j["helps_precision"], 0.70),
            "judged: fewer unclear than the interval rule": j["unclear_share"] < base["unclear_share"],
            "added worlds: rows, and >= 0.75 right (if >= 5 calls)": bool(a["added_built"])
            and (new["n_decisive"] < 5 or ok(new["accuracy"], 0.75))}


def ship(a: dict) -> dict:
    """A first, then B; the first that meets every condition ships, else the interval rule stays."""
    checks = {name: {k: bool(v) for k, v in conditions(a, name).items()} for name in a["candidates"]}
    choice = next((name for name, c in checks.items() if all(c.values())), "interval")
    f = v2.fmt

    def said(name: str) -> str:
        j, new = a["verdicts"][name]["judged"], a["verdicts"][name]["added"]
        return (f"{name} over the {len(a['judged'])} judged worlds {j['n_correct']}/{j['n_decisive']} decisive calls "
                f"right ({f(j['accuracy'], 3)}), helps precision {f(j['helps_precision'], 3)}, hurts precision "
                f"{f(j['hurts_precision'], 3)}, unclear {j['unclear_share']:.0%}; on the added worlds ("
                + (", ".join(a["added_built"]) or "none built") + ") "
                + (f"{new['n_correct']}/{new['n_decisive']}" if a["added_built"] else "not run") + ". "
                + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in checks[name].items()))
    base = a["verdicts"]["interval"]["judged"]
    reason = (". ".join(said(n) for n in checks) + f". The interval rule on the same rows: {base['n_correct']}/"
              f"{base['n_decisive']} right, unclear {base['unclear_share']:.0%}.")
    return {"choice": choice, "conditions": checks, "reason": reason}


def render(a: dict) -> str:
    names = [*a["candidates"], "interval"]
    L = ["# Predictor v2, fourteenth look: the verdict read from G and the loss family", "",
         "Generated by `python benchmarks/validity/v2/report_look14.py` from `look14_analysis.json` (plan: "
         "`benchmarks/validity/v2/plan_look14.yaml`, committed before any result of this look). `g_full` (A): hurts "
         "where G <= -0.2 and helps where G > +0.05 for a full-distribution loss (jsd, opsd_jsd), a sampled-token loss "
         "never decisive; `g_hurts` (B): A's hurts side alone; `interval`: the verdict the product shows, the shipped "
         "gain model's 95% interval against +-0.02. Both candidates were taken from explore_g_verdict_21.txt, a grid "
         f"on the {len(a['chose'])} worlds reported as `chose`; they are judged on the {len(a['judged'])} worlds with "
         "rows built after those and on the worlds built after the plan: "
         + (", ".join(f"`{w}`" for w in a["added_built"]) or "none built yet") + "."
         + "".join(f" `{w}` was built and excluded by the plan's level rule (`check_{w}.txt`): no rows."
                   if w in a["added_excluded"] else f" `{w}` is planned and not built: not run."
                   for w in a["added_planned"] if w not in a["added_built"]), "",
         "**Ship rule:** " + (f"{a['ship']['choice']} ships" if a["ship"]["choice"] != "interval"
                               else "the interval rule stays") + f": {a['ship']['reason']}", "",
         "## Verdicts", "",
         "| rule | scope (rows) | decisive right [95% Wilson] | helps (precision) | hurts (precision) | unclear |",
         "|---|---|---|---|---|---|"]
    scopes = {"judged": f"the {len(a['judged'])} judged worlds", "added": "added worlds (new)",
              "chose": f"the {len(a['chose'])} that chose the candidates (reported)", "all": "all"}
    for name in names:
        for k, label in scopes.items():
            d = a["verdicts"][name][k]
            if d["n_rows"]:
                L.append(look6._line(name, f"{label} ({d['n_rows']})", d))
    L += ["", "The issue's targets: decisive right >= 0.85 (helps precision >= 0.70, hurts >= 0.90) with <= 40% "
          "`unclear`.", "", "## Per world (decisive right / decisive, unclear share)", "",
          "| world | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    tag = lambda w: " (new)" if w in a["added_built"] else " (chose)" if w in a["chose"] else ""  # noqa: E731
    for w in a["verdicts"]["interval"]["per_world"]:
        cells = [a["verdicts"][n]["per_world"][w] for n in names]
        L.append(f"| {w}{tag(w)} | " + " | ".join(f"{d['n_correct']}/{d['n_decisive']}, {d['unclear_share']:.0%}"
                                                  for d in cells) + " |")
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    choice = a["ship"]["choice"]

    def said(name: str) -> str:
        j = a["verdicts"][name]["judged"]
        helps = f"helps precision {j['helps_precision']:.3f}, " if j["n_helps"] else ""
        return (f"{name} right on {j['n_correct']} of {j['n_decisive']} decisive calls ({helps}hurts precision "
                f"{j['hurts_precision']:.3f}), {j['unclear_share']:.0%} unclear")
    new = a["verdicts"][next(iter(a["candidates"]))]["added"]
    summary = (f"look 14 (the verdict from G and the loss family), over the {len(a['judged'])} judged worlds: "
               + "; ".join(said(n) for n in a["candidates"]) + "; on the new worlds "
               + (f"{', '.join(a['added_built'])} {new['n_correct']}/{new['n_decisive']}" if a["added_built"]
                  else "not run")
               + ": " + (f"{choice} ships as the verdict" if choice != "interval" else "the interval rule stays"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look14.md",
            "model": choice if choice != "interval" else ", ".join(a["candidates"]), "choice": choice,
            "added_world": ", ".join(a["added_built"]), "summary": summary}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the look recorded (no candidate met the rule: nothing else in it changes)."""
    shipped.setdefault("later_looks", {})["look14"] = later_look(a)
    return shipped


def main() -> int:
    return look_record.publish(14, analyse, render, record)


if __name__ == "__main__":
    sys.exit(main())
