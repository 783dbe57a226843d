"""Predictor v2's ninth look, as pre-registered (plan_look9.yaml here): the sixth look's verdict from G and the loss
family, thresholds unchanged, judged on the eight worlds built after its plan and on wick; look9_analysis.json and
RESULTS_look9.md.

    python benchmarks/validity/v2/report_look9.py
        # after check_world.py --spec sample_data/worlds/wick.yaml --study STUDY --keep, which commits the added
        # world's rows into checks/: this script reads only committed files.

Two verdicts of every row, scored as every earlier look scores a verdict (``report_look4.scored``): ``g_thresholds``
(``report_look6.g_verdict``, the sixth look's thresholds) and the interval rule on the shipped v2 model's prediction
(the verdict the product showed before this look). Judged pooled over the nine worlds and on wick alone; reported
also on the eight without wick, per world, and over the twenty-one worlds (the first eleven chose the thresholds).
The look's outcome is recorded in the package's model file (``later_looks``). The rule did not ship
(RESULTS_look9.md), so the product has no code for it: ``g_verdict`` lives with the sixth look.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import look_record  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look5 as look5  # noqa: E402
from benchmarks.validity.v2 import report_look6 as look6  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import before_look  # noqa: E402
from benchmarks.validity.v2.looks import shipped_gain  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look9.yaml"
RULES = {"g_thresholds": "G and the loss", "interval": "interval rule (shipped v2)"}


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def judged() -> tuple[list[str], str]:
    p = plan()["judged_worlds"]
    return list(p["after_look6"]), p["added"]


def thresholds() -> dict:
    """The plan's thresholds, which it says are the sixth look's unchanged: checked, not assumed."""
    t = plan()["rule"]["thresholds"]
    if t != look6.plan()["rule"]["thresholds"]:
        raise SystemExit("plan_look9.yaml's thresholds differ from the sixth look's: the plan says they are unchanged")
    return t


def analyse(shipped: dict) -> dict:
    eight, added = judged()
    t, seen = thresholds(), look6.worlds()
    rows = look2.load_rows({"worlds": [*seen, *eight, added]})
    w = np.array([r["world"] for r in rows])
    verdicts = {"g_thresholds": [look6.g_verdict(r["method"], v2._num(r["accuracy_gap"]), t) for r in rows],
                "interval": look6.interval_verdicts(shipped_gain(rows, shipped), shipped)}
    scope = {"judged": np.isin(w, [*eight, added]), "added": w == added, "after_look6": np.isin(w, eight),
             "all": np.ones(len(rows), bool)}

    def on(vs: list[str], keep) -> dict:
        return scored([v for v, k in zip(vs, keep) if k], [r for r, k in zip(rows, keep) if k])
    out = {"look": 9, "plan": "benchmarks/validity/v2/plan_look9.yaml", "added_world": added, "after_look6": eight,
           "chose_thresholds": look5.worlds(), "thresholds": t, "n_rows": len(rows),
           "n_rows_judged": int(scope["judged"].sum()), "n_worlds": len(set(w)),
           "verdicts": {name: {**{k: on(vs, keep) for k, keep in scope.items()},
                               "per_world": {k: on(vs, w == k) for k in sorted(set(w))},
                               "verdicts": [v for v, k in zip(vs, scope["judged"]) if k]}
                        for name, vs in verdicts.items()}}
    sub = [r for r in rows if r["world"] == added]
    ranked = look8.orders(sub, shipped)
    out["added_ranking"] = {"method_order": look5.scored(sub, ranked["v2_config"])["method_order"],
                            "spearman": {k: v2.per_world(x, sub, "d_pass1")["worlds"][added]
                                         for k, x in ranked.items()}}
    out["ship"] = ship(out)
    return out


def ship(a: dict) -> dict:
    """The pre-registered rule: pooled over the judged worlds >= 20 decisive calls, >= 85% right, hurts precision
    >= 0.90, helps precision >= 0.70 where any helps call is made; on the added world >= 75% right where it makes >= 3
    decisive calls."""
    d = a["verdicts"]["g_thresholds"]
    pooled, new = d["judged"], d["added"]

    def at_least(x, bound) -> bool:
        return x is not None and bool(np.isfinite(x)) and x >= bound
    checks = {"decisive calls >= 20": pooled["n_decisive"] >= 20,
              "decisive right >= 0.85": at_least(pooled["accuracy"], 0.85),
              "hurts precision >= 0.90": at_least(pooled["hurts_precision"], 0.90),
              "helps precision >= 0.70 (if any helps call)": pooled["n_helps"] == 0
              or at_least(pooled["helps_precision"], 0.70),
              f"on {a['added_world']}, >= 0.75 right (if >= 3 calls)": new["n_decisive"] < 3
              or at_least(new["accuracy"], 0.75)}
    checks = {k: bool(v) for k, v in checks.items()}
    why = (f"pooled over the nine judged worlds {pooled['n_correct']}/{pooled['n_decisive']} decisive calls right "
           f"({v2.fmt(pooled['accuracy'], 3)}), hurts precision {v2.fmt(pooled['hurts_precision'], 3)}, helps "
           f"precision {v2.fmt(pooled['helps_precision'], 3)}; on {a['added_world']} {new['n_correct']}/"
           f"{new['n_decisive']}. "
           + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in checks.items()))
    return {"choice": "g_thresholds" if all(checks.values()) else "interval", "conditions": checks, "reason": why}


def render(a: dict) -> str:
    added, t, f = a["added_world"], a["thresholds"], v2.fmt
    L = ["# Predictor v2, ninth look: the verdict from G and the loss family, on nine worlds that did not choose it", "",
         f"Generated by `python benchmarks/validity/v2/report_look9.py` from `look9_analysis.json` (plan: "
         "`benchmarks/validity/v2/plan_look9.yaml`, committed before any result of this look). The rule is the sixth "
         f"look's, thresholds unchanged: hurts where G <= {t['hurts_full']:+g} (jsd, opsd_jsd) or G <= "
         f"{t['hurts_sampled']:+g} (opd, opd2, exopd, opsd_opd), helps where G > {t['helps_full']:+g} for jsd and "
         f"opsd_jsd, unclear otherwise. Judged on {a['n_rows_judged']} rows of nine worlds none of which chose the "
         f"thresholds: the eight built after the sixth look's plan ({', '.join(a['after_look6'])}) and `{added}`, "
         "built after this plan. The eleven worlds that chose them and ledger (the sixth look's) are reported, not "
         "judged.", "",
         f"**Ship rule:** {'the G verdict ships' if a['ship']['choice'] == 'g_thresholds' else 'the interval rule stays'}:"
         f" {a['ship']['reason']}.", "",
         "## Verdicts", "",
         "| rule | scope | decisive right [95% Wilson] | helps (precision) | hurts (precision) | unclear |",
         "|---|---|---|---|---|---|"]
    scopes = {"judged": "nine judged worlds", "added": f"{added} (new)", "after_look6": "the eight without it",
              "all": f"all {a['n_worlds']} (eleven chose the thresholds)"}
    for name, label in RULES.items():
        L += [look6._line(label, text, a["verdicts"][name][k]) for k, text in scopes.items()]
    L += ["", "Per world, G and the loss (decisive right / decisive, unclear share):", "",
          "| world | right | unclear |", "|---|---|---|"]
    judged_worlds = {*a["after_look6"], added}
    for w, d in sorted(a["verdicts"]["g_thresholds"]["per_world"].items(),
                       key=lambda x: (x[0] != added, x[0] not in judged_worlds, x[0])):
        tag = " (new)" if w == added else "" if w in judged_worlds else " (chose the thresholds)" \
            if w in a["chose_thresholds"] else " (sixth look)"
        L.append(f"| {w}{tag} | {d['n_correct']}/{d['n_decisive']} | {d['unclear_share']:.0%} |")
    r = a["added_ranking"]
    L += ["", f"On `{added}` (reported): the shipped ranking (v2_config) Spearman {f(r['spearman']['v2_config'])} with "
          f"the realised Δpass@1 (G alone {f(r['spearman']['accuracy_gap'])}); the fifth look's method order "
          f"{r['method_order']['n_right']} of {r['method_order']['n_pairs']} method pairs more than 0.10 apart right.", "",
          "The issue asks for <= 40% `unclear` with >= 85% of decisive verdicts right: G and the loss leave "
          f"{a['verdicts']['g_thresholds']['judged']['unclear_share']:.0%} unclear over the nine judged worlds."]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    d = a["verdicts"]["g_thresholds"]
    summary = (f"look 9 (the sixth look's verdict from G and the loss, on nine worlds that did not choose it): "
               f"{d['judged']['n_correct']}/{d['judged']['n_decisive']} decisive right, "
               f"{d['judged']['unclear_share']:.0%} unclear; on the new world {a['added_world']} "
               f"{d['added']['n_correct']}/{d['added']['n_decisive']}: "
               + ("the G verdict ships" if a["ship"]["choice"] == "g_thresholds" else "the interval rule stays"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look9.md", "model": "g_thresholds",
            "choice": a["ship"]["choice"], "added_world": a["added_world"], "summary": summary}


def main() -> int:
    shipped = json.loads(v2.SHIPPED.read_text())
    shipped.setdefault("later_looks", {})["look9"] = later_look(look_record.write_look(9, analyse(before_look(shipped, 9)), render))
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print((HERE / "RESULTS_look9.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
