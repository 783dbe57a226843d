"""Predictor v2's sixth look, as pre-registered (plan_look6.yaml here): the verdict read from G and the loss family,
judged on the added world; look6_analysis.json and RESULTS_look6.md.

    python benchmarks/validity/v2/report_look6.py --study STUDY [--lookahead DIR]
        # STUDY: run_worlds.py --worlds ledger's output; DIR: its rediagnosis with the first look's lookahead
        # (check_world.py's, default STUDY/v2-lookahead). Both are copied into look6/, so a rerun without --study
        # regenerates the same files from what is committed.

Two verdicts of every row, scored as the earlier looks score a verdict (``report_look4.scored``): ``g_thresholds``
(``g_verdict`` below, with the plan's thresholds) and the interval rule on the shipped v2 model's prediction (what the
product shows). On the added world (judged) and pooled over the twelve worlds. The look's outcome is recorded in the
package's model file (``later_looks``). The rule did not ship (RESULTS_look6.md), so the product has no code for it:
``g_verdict`` lives here, with the look.
"""

from __future__ import annotations

import argparse
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
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import before_look  # noqa: E402
from benchmarks.validity.v2.looks import product_order, shipped_gain  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look6.yaml"


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def g_verdict(method: str, accuracy_gap: float, t: dict) -> str:
    """The plan's rule: hurts where G <= ``hurts_full`` for a full-distribution loss (jsd, opsd_jsd) or <=
    ``hurts_sampled`` for a sampled-token one, helps where G > ``helps_full`` for a full-distribution loss (a
    sampled-token loss is never called helps), unclear otherwise or where G is unknown."""
    if not np.isfinite(accuracy_gap):
        return "unclear"
    full = model.LOSS_KIND[method] == 1.0
    if accuracy_gap <= t["hurts_full" if full else "hurts_sampled"]:
        return "hurts"
    return "helps" if full and accuracy_gap > t["helps_full"] else "unclear"


def worlds() -> list[str]:
    return [*look5.worlds(), plan()["added_world"]["name"]]


def interval_verdicts(pred: np.ndarray, shipped: dict) -> list[str]:
    """The interval rule on the shipped v2 model's predictions ``pred`` (the verdict the product shows)."""
    band = shipped["models"]["v2"]["d_pass1"]["residual_band"]
    return [model.verdict(p + band[0], p + band[1], shipped["delta"]) for p in pred]


def analyse(shipped: dict) -> dict:
    p = plan()
    added, t = p["added_world"]["name"], p["rule"]["thresholds"]
    rows = look2.load_rows({"worlds": worlds()})
    w = np.array([r["world"] for r in rows])
    gain = shipped_gain(rows, shipped)
    verdicts = {"g_thresholds": [g_verdict(r["method"], v2._num(r["accuracy_gap"]), t) for r in rows],
                "interval": interval_verdicts(gain, shipped)}

    def on(vs: list[str], keep) -> dict:
        return scored([v for v, k in zip(vs, keep) if k], [r for r, k in zip(rows, keep) if k])
    out = {"look": 6, "plan": "benchmarks/validity/v2/plan_look6.yaml", "added_world": added, "thresholds": t,
           "n_rows": len(rows), "n_rows_added": int((w == added).sum()), "n_worlds": len(set(w)),
           "verdicts": {name: {"pooled": on(vs, [True] * len(rows)), "added": on(vs, w == added),
                               "per_world": {k: on(vs, w == k) for k in sorted(set(w))}, "verdicts": vs}
                        for name, vs in verdicts.items()}}
    sub = [r for r in rows if r["world"] == added]
    out["method_order_added"] = look5.scored(sub, product_order(sub, gain[w == added], "sign_of_g"))["method_order"]
    out["ship"] = ship(out)
    return out


def ship(a: dict) -> dict:
    """The pre-registered rule: on the added world >= 3 decisive calls, >= 85% right; pooled helps precision >= 0.7
    and hurts precision >= 0.9."""
    d = a["verdicts"]["g_thresholds"]
    new, pooled = d["added"], d["pooled"]
    c1 = bool(new["n_decisive"] >= 3 and new["accuracy"] >= 0.85)
    c2 = bool(pooled["helps_precision"] >= 0.7 and pooled["hurts_precision"] >= 0.9)
    why = (f"on {a['added_world']} {new['n_correct']}/{new['n_decisive']} decisive calls right (needs >= 3, >= 0.85): "
           f"{'met' if c1 else 'not met'}; pooled over {look2.NUMBERS[a['n_worlds']]} worlds helps precision "
           f"{v2.fmt(pooled['helps_precision'])}, hurts precision {v2.fmt(pooled['hurts_precision'])} (needs >= 0.70 "
           f"and >= 0.90): {'met' if c2 else 'not met'}")
    return {"choice": "g_thresholds" if c1 and c2 else "interval", "added_world_condition": c1,
            "pooled_condition": c2, "reason": why}


def _ok(x) -> bool:
    return x is not None and bool(np.isfinite(x))  # a NaN is written as null


def _line(name: str, scope: str, d: dict) -> str:
    acc = "n/a" if not _ok(d["accuracy"]) else f"{d['accuracy']:+.2f} [{d['lo']:+.2f}, {d['hi']:+.2f}]"
    prec = {k: "n/a" if not _ok(d[f"{k}_precision"]) else f"{d[f'{k}_precision']:+.2f}" for k in ("helps", "hurts")}
    return (f"| {name} | {scope} | {d['n_correct']}/{d['n_decisive']} ({acc}) | {d['n_helps']} ({prec['helps']}) | "
            f"{d['n_hurts']} ({prec['hurts']}) | {d['unclear_share']:.0%} |")


def render(a: dict) -> str:
    added, t = a["added_world"], a["thresholds"]
    L = ["# Predictor v2, sixth look: the verdict read from G and the loss family", "",
         f"Generated by `python benchmarks/validity/v2/report_look6.py --study STUDY` from `look6_analysis.json` (plan: "
         f"`benchmarks/validity/v2/plan_look6.yaml`, committed before any result of this look). {a['n_rows']} rows "
         f"(configuration x method) over {look2.NUMBERS[a['n_worlds']]} worlds, {a['n_rows_added']} of them on the "
         f"added world `{added}`, built after the plan. The rule: hurts where G <= {t['hurts_full']:+g} (jsd, "
         f"opsd_jsd) or G <= {t['hurts_sampled']:+g} (opd, opd2, exopd, opsd_opd), helps where G > "
         f"{t['helps_full']:+g} for jsd and opsd_jsd, unclear otherwise. Its thresholds were chosen on the eleven "
         "earlier worlds (`explore_g_verdict.txt`), so only the added world is a fair test.", "",
         f"**Ship rule:** {'the G verdict ships' if a['ship']['choice'] == 'g_thresholds' else 'the interval rule stays'}:"
         f" {a['ship']['reason']}.", "",
         "## Verdicts", "",
         "| rule | scope | decisive right [95% Wilson] | helps (precision) | hurts (precision) | unclear |",
         "|---|---|---|---|---|---|"]
    for name, label in (("g_thresholds", "G and the loss"), ("interval", "interval rule (shipped v2)")):
        d = a["verdicts"][name]
        L += [_line(label, f"{added} (new)", d["added"]),
              _line(label, f"{look2.NUMBERS[a['n_worlds']]} worlds", d["pooled"])]
    L += ["", "Per world, G and the loss (decisive right / decisive, unclear share):", "",
          "| world | right | unclear |", "|---|---|---|"]
    for w, d in a["verdicts"]["g_thresholds"]["per_world"].items():
        L.append(f"| {w}{' (new)' if w == added else ''} | {d['n_correct']}/{d['n_decisive']} | "
                 f"{d['unclear_share']:.0%} |")
    mo = a["method_order_added"]
    L += ["", f"The fifth look's method order on `{added}` (reported): {mo['n_right']} of {mo['n_pairs']} method pairs "
          "more than 0.10 apart right.", "",
          f"The issue asks for <= 40% `unclear` with >= 85% of decisive verdicts right: on `{added}` "
          f"{a['verdicts']['g_thresholds']['added']['unclear_share']:.0%} unclear, pooled "
          f"{a['verdicts']['g_thresholds']['pooled']['unclear_share']:.0%}."]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    d = a["verdicts"]["g_thresholds"]
    summary = (f"look 6 (verdict from G and the loss): on the new world {a['added_world']} {d['added']['n_correct']}/"
               f"{d['added']['n_decisive']} decisive right, {d['added']['unclear_share']:.0%} unclear; pooled over "
               f"{look2.NUMBERS[a['n_worlds']]} worlds {d['pooled']['n_correct']}/{d['pooled']['n_decisive']}, "
               f"{d['pooled']['unclear_share']:.0%} unclear: "
               + ("the G verdict ships" if a["ship"]["choice"] == "g_thresholds" else "the interval rule stays"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look6.md", "model": "g_thresholds",
            "choice": a["ship"]["choice"], "added_world": a["added_world"], "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, help="run_worlds.py --worlds ledger's output (copied into look6/)")
    ap.add_argument("--lookahead", type=Path, help="its v2 rediagnosis (default STUDY/v2-lookahead)")
    args = ap.parse_args(argv)
    if args.study:
        look2.store_added(plan()["added_world"]["name"], args.study, args.lookahead)
    shipped = json.loads(v2.SHIPPED.read_text())
    shipped.setdefault("later_looks", {})["look6"] = later_look(look_record.write_look(6, analyse(before_look(shipped, 6)), render))
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print((HERE / "RESULTS_look6.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
