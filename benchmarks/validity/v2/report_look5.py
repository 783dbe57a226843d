"""Predictor v2's fifth look, as pre-registered (plan_look5.yaml here): the method order within a configuration read
from the sign of G, judged on the added world; look5_analysis.json and RESULTS_look5.md.

    python benchmarks/validity/v2/report_look5.py --study STUDY [--lookahead DIR]
        # STUDY: run_worlds.py --worlds tandem's output; DIR: its rediagnosis with the first look's lookahead
        # (check_world.py's, default STUDY/v2-lookahead). Both are copied into look5/ (the world's analysis and
        # lookahead rows), so a rerun without --study regenerates the same files from what is committed.

Two orders of every world's rows, both the product's ranking when G ranks (``looks.product_order``): ``today``
(G, then the shipped v2 model's predicted gain) and ``sign_of_g`` (G, then a config's full-distribution methods
first where G > 0 and last where G <= 0, then the predicted gain). Scored by the method order over pairs of one
configuration more than 0.10 apart (``report_v2.method_order``) and the within-world Spearman with the realised
d_pass1, on the added world (judged) and on the ten earlier worlds (seen, reported). The look's outcome is
recorded in the package's model file (``later_looks``); an order that ships is written there as ``method_order``.
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
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import before_look  # noqa: E402
from benchmarks.validity.v2.looks import product_order, shipped_gain  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look5.yaml"
ORDERS = {"today": "predicted_gain", "sign_of_g": "sign_of_g"}


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def worlds() -> list[str]:
    return [*yaml.safe_load(look2.PLANS[4].read_text())["worlds"], plan()["added_world"]["name"]]


def scored(rows: list[dict], scores: np.ndarray) -> dict:
    """Method order and within-world Spearman of one order on ``rows``."""
    return {"method_order": v2.method_order(scores, rows), "spearman": v2.per_world(scores, rows, "d_pass1")}


def pairs(rows: list[dict]) -> list[dict]:
    """Each configuration whose methods realised changes more than 0.10 apart, methods best first, with its G."""
    out, seen = [], set()
    for r in rows:
        key = (r["world"], r["config"])
        if key in seen:
            continue
        seen.add(key)
        ms = sorted(((v2._num(q["d_pass1"]["estimate"]), q["method"]) for q in rows
                     if (q["world"], q["config"]) == key), reverse=True)
        if len(ms) > 1 and ms[0][0] - ms[-1][0] > 0.10:
            out.append({"world": key[0], "config": key[1], "accuracy_gap": v2._num(r["accuracy_gap"]),
                        "methods": [{"method": m, "d_pass1": d} for d, m in ms]})
    return out


def analyse(shipped: dict) -> dict:
    p = plan()
    added = p["added_world"]["name"]
    rows = look2.load_rows({"worlds": worlds()})
    gain = shipped_gain(rows, shipped)
    w = np.array([r["world"] for r in rows])
    scopes = {added: w == added, "ten": w != added, "eleven": np.ones(len(rows), bool)}
    out = {"look": 5, "plan": "benchmarks/validity/v2/plan_look5.yaml", "added_world": added, "n_rows": len(rows),
           "n_rows_added": int(scopes[added].sum()), "scopes": {}}
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    for name, k in scopes.items():
        sub = [r for r, keep in zip(rows, k) if keep]
        out["scopes"][name] = {"accuracy_gap": {"spearman": v2.per_world(g[k], sub, "d_pass1")},
                               **{o: scored(sub, product_order(sub, gain[k], rule)) for o, rule in ORDERS.items()}}
    out["pairs_added"] = pairs([r for r, keep in zip(rows, scopes[added]) if keep])
    out["ship"] = ship(out)
    return out


def ship(a: dict) -> dict:
    """The pre-registered rule on the added world alone: >= 3 pairs, sign_of_g right on at least as many as today's
    order and on >= 75% of them."""
    new = a["scopes"][a["added_world"]]
    n, amp, today = (new["sign_of_g"]["method_order"]["n_pairs"], new["sign_of_g"]["method_order"]["n_right"],
                     new["today"]["method_order"]["n_right"])
    ok = n >= 3 and amp >= today and amp >= 0.75 * n
    return {"choice": "sign_of_g" if ok else "predicted_gain", "n_pairs": n, "right_sign_of_g": amp,
            "right_today": today,
            "reason": (f"on {a['added_world']} alone sign_of_g orders {amp} of {n} pairs more than 0.10 apart right, "
                       f"today's order {today} (needs at least 3 pairs, at least today's count and at least 75%)")}


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:.0%}"


def _mo(d: dict) -> str:
    return f"{d['n_right']}/{d['n_pairs']} ({_pct(d['accuracy'])})"


def render(a: dict) -> str:
    added, sc = a["added_world"], a["scopes"]
    f = v2.fmt
    L = ["# Predictor v2, fifth look: the method order within a configuration, read from the sign of G", "",
         f"Generated by `python benchmarks/validity/v2/report_look5.py --study STUDY` from `look5_analysis.json` (plan: "
         f"`benchmarks/validity/v2/plan_look5.yaml`, committed before any result of this look). {a['n_rows']} rows "
         f"(configuration x method) over eleven worlds, {a['n_rows_added']} of them on the added world `{added}`, built "
         f"after the plan. The exploration that chose the rule on the ten earlier worlds is `explore_method_order.txt`, "
         f"so only `{added}` is a fair test.", "",
         f"**Ship rule:** {'the sign-of-G order ships' if a['ship']['choice'] == 'sign_of_g' else 'today’s order stays'}: "
         f"{a['ship']['reason']}.", "",
         "## Method order (pairs of one configuration whose realised d_pass1 differ by more than 0.10)", "",
         "| scope | pairs | today (G, then v2's predicted gain) | sign of G | issue target (>= 90%) met by sign of G |",
         "|---|---|---|---|---|"]
    for name, label in ((added, f"{added} (new)"), ("ten", "the ten earlier worlds (seen)"), ("eleven", "all eleven")):
        s = sc[name]
        mo = s["sign_of_g"]["method_order"]
        L.append(f"| {label} | {mo['n_pairs']} | {_mo(s['today']['method_order'])} | {_mo(mo)} | "
                 f"{'yes' if mo['n_pairs'] and mo['accuracy'] >= 0.9 else 'no'} |")
    L += ["", "## Within-world Spearman with the realised d_pass1", "",
          "| world | G (methods tied) | today | sign of G |", "|---|---|---|---|"]
    per = {k: sc["eleven"][k]["spearman"]["worlds"] for k in ("today", "sign_of_g")}
    per_g = sc["eleven"]["accuracy_gap"]["spearman"]["worlds"]
    for w in sorted(per_g, key=lambda x: (x != added, x)):
        L.append(f"| {w}{' (new)' if w == added else ''} | {f(per_g[w])} | {f(per['today'][w])} | "
                 f"{f(per['sign_of_g'][w])} |")
    L.append(f"| mean of the ten earlier | {f(sc['ten']['accuracy_gap']['spearman']['mean'])} | "
             f"{f(sc['ten']['today']['spearman']['mean'])} | {f(sc['ten']['sign_of_g']['spearman']['mean'])} |")
    L += ["", f"## `{added}`: configurations whose methods realised changes more than 0.10 apart", ""]
    L += [f"- {p['config']} (G {p['accuracy_gap']:+.3f}): " + ", ".join(f"{m['method']} {m['d_pass1']:+.3f}"
                                                                      for m in p["methods"]) for p in a["pairs_added"]]
    if not a["pairs_added"]:
        L.append("- none")
    n_pos = sum(p["accuracy_gap"] > 0 for p in a["pairs_added"])
    L += ["", f"{n_pos} of these {len(a['pairs_added'])} configurations have G > 0, so on `{added}` the rule's other "
          "half (a full-distribution loss last where G <= 0) was " + ("not tested: it rests on the earlier worlds, "
                                                                      "where the rule was chosen." if n_pos == len(
                                                                          a["pairs_added"]) else "tested too.")]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    s = a["ship"]
    summary = (f"look 5 (method order from the sign of G): on the new world {a['added_world']} {s['right_sign_of_g']}/"
               f"{s['n_pairs']} method pairs right against today's {s['right_today']}/{s['n_pairs']}: "
               + ("the sign-of-G order ships" if s["choice"] == "sign_of_g" else "today's order stays"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look5.md", "model": "sign_of_g",
            "choice": s["choice"], "added_world": a["added_world"], "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, help="run_worlds.py --worlds tandem's output (copied into look5/)")
    ap.add_argument("--lookahead", type=Path, help="its v2 rediagnosis (default STUDY/v2-lookahead)")
    args = ap.parse_args(argv)
    if args.study:
        look2.store_added(plan()["added_world"]["name"], args.study, args.lookahead)
    shipped = json.loads(v2.SHIPPED.read_text())
    a = analyse(before_look(shipped, 5))  # the file as this look read it
    shipped.setdefault("later_looks", {})["look5"] = later_look(look_record.write_look(5, a, render))
    if shipped.get("method_order", {}).get("look", 5) <= 5:  # a later look's ranking rule stands
        shipped.pop("method_order", None)
        if a["ship"]["choice"] == "sign_of_g":
            shipped["method_order"] = {"rule": "sign_of_g", "look": 5, "plan": a["plan"],
                                       "study": "benchmarks/validity/v2/RESULTS_look5.md"}
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print((HERE / "RESULTS_look5.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
