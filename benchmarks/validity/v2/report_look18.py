"""Predictor v2's eighteenth look, as pre-registered (plan_look18.yaml): a verdict classifier on ten diagnosis
columns (``class_verdict``, decisive.py) against the shipped interval verdict, on the worlds checked after the plan;
look18_analysis.json and RESULTS_look18.md.

    python benchmarks/validity/v2/report_look18.py [--check]

Reads only committed files: the rows of the worlds checked before the plan (``checks/*_analysis.json``, the fit) and
of each judged world (the same place, check_world.py --keep). The look stays open until the plan's ``when_judged``
holds (20 decisive calls of the candidate over the judged worlds, or 8 judged worlds); until then this reports its
progress and judges nothing. Once judged, its record goes into the package's model file (``later_looks.look18``).
``--check`` fails when the committed outputs differ from what the committed rows give.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2 import decisive  # noqa: E402
from benchmarks.validity.v2 import look_record  # noqa: E402
from benchmarks.validity.v2 import report_checks as rc  # noqa: E402

HERE = Path(__file__).resolve().parent
FIRST = "variscite"  # the first world of plan_checks.yaml whose study finished after the plan's commit
FIT_WORLDS, FIT_ROWS = 102, 2340  # the rows the plan's commit held (checks/*_analysis.json)
COLUMNS = ("G", "full", "G*full", "|G|", "teachability", "topk_overlap", "log1p mean_jsd", "log1p mean_rev_kl",
           "high_entropy_share", "opd2_sign_agreement")
T_HELP, T_HURT = 0.60, 0.90
CALLS_TO_JUDGE, WORLDS_TO_JUDGE = 20, 8  # the plan's when_judged
ALSO = ((0.6, 0.85), (0.7, 0.85), (0.7, 0.9), (0.8, 0.9))  # other thresholds, reported, not judged
NAMES = {decisive.IMPROVES: "helps", decisive.DEGRADES: "hurts", decisive.UNCLEAR: "unclear"}


def planned_after() -> list[str]:
    """plan_checks.yaml's worlds from FIRST on, in the order listed (the order checked)."""
    planned = list(rc.after_look8())
    return planned[planned.index(FIRST):]


def judged_worlds() -> list[str]:
    """The checked worlds in the plan's order up to the first not checked yet (a later one waits its turn); the
    level rule's exclusions skipped."""
    out = []
    for w in planned_after():
        state = rc.status(w)
        if state == "pending":
            break
        if state == "checked":
            out.append(w)
    return out


def model() -> dict:
    """class_verdict fitted once on the rows the plan's commit held: every checked world but the judged ones."""
    later = set(planned_after())
    rows, worlds = decisive.check_rows()
    keep = [i for i, w in enumerate(worlds) if w not in later]
    rows = [rows[i] for i in keep]
    if len({worlds[i] for i in keep}) != FIT_WORLDS or len(rows) != FIT_ROWS:
        raise SystemExit(f"report_look18: the fit holds {len(rows)} rows of {len({worlds[i] for i in keep})} worlds, "
                         f"where the plan's commit held {FIT_ROWS} of {FIT_WORLDS}")
    y = np.array([decisive.CLASS[r["realised"]] for r in rows])
    return decisive.fit(decisive.matrix(rows, COLUMNS), y)


def calls(rows: list[dict], m: dict, t_help: float, t_hurt: float) -> dict:
    """The candidate's verdicts on a world's rows, scored against the realised classes."""
    p = decisive.probabilities(m, decisive.matrix(rows, COLUMNS))
    v = decisive.verdicts(p, t_help, t_hurt)
    y = np.array([decisive.CLASS[r["realised"]] for r in rows])
    table = {NAMES[a]: {k: int(((v == a) & (y == b)).sum()) for k, b in decisive.CLASS.items()} for a in NAMES}
    return {"n_rows": len(rows), "helps": int((v == decisive.IMPROVES).sum()),
            "helps_right": int(((v == decisive.IMPROVES) & (y == decisive.IMPROVES)).sum()),
            "hurts": int((v == decisive.DEGRADES).sum()),
            "hurts_right": int(((v == decisive.DEGRADES) & (y == decisive.DEGRADES)).sum()), "table": table,
            "rows": [{"config": r["config"], "method": r["method"], "p_improves": float(q[decisive.IMPROVES]),
                      "p_degrades": float(q[decisive.DEGRADES]), "verdict": NAMES[int(a)], "realised": r["realised"]}
                     for r, q, a in zip(rows, p, v)]}


def totals(per: dict, worlds: list[str], key: str = "candidate") -> dict:
    s = {k: sum(per[w][key][k] for w in worlds) for k in ("n_rows", "helps", "helps_right", "hurts", "hurts_right")}
    s["decisive"] = s["helps"] + s["hurts"]
    s["right"] = s["helps_right"] + s["hurts_right"]
    s["right_share"] = s["right"] / s["decisive"] if s["decisive"] else None
    s["unclear"] = 1 - s["decisive"] / s["n_rows"] if s["n_rows"] else None
    return s


def shipped_verdict(world: str) -> dict:
    f = rc.world_figures(world)
    d = f["models"]["v2"]["decisive"]
    return {"n_rows": f["n_rows"], "decisive": d["n_decisive"], "right": d["n_correct"]}


def analyse() -> dict:
    m = model()
    per = {}
    for w in judged_worlds():
        rows = rc.rows_of(w)
        per[w] = {"candidate": calls(rows, m, T_HELP, T_HURT), "shipped": shipped_verdict(w),
                  "also": {f"{a:.2f}/{b:.2f}": {k: v for k, v in calls(rows, m, a, b).items() if k != "rows"}
                           for a, b in ALSO}}
    scope = []
    for w in per:  # the worlds up to the one that meets when_judged
        scope.append(w)
        if totals(per, scope)["decisive"] >= CALLS_TO_JUDGE or len(scope) == WORLDS_TO_JUDGE:
            break
    t = totals(per, scope)
    done = t["decisive"] >= CALLS_TO_JUDGE or len(scope) == WORLDS_TO_JUDGE
    ship_rows = sum(per[w]["shipped"]["n_rows"] for w in scope)
    shipped = {"decisive": sum(per[w]["shipped"]["decisive"] for w in scope),
               "right": sum(per[w]["shipped"]["right"] for w in scope)}
    shipped["unclear"] = 1 - shipped["decisive"] / ship_rows if ship_rows else None
    rule = {"right_at_least_85": t["right_share"] is not None and t["right_share"] >= 0.85,
            "helps_precision_at_least_0.7": t["helps"] == 0 or t["helps_right"] / t["helps"] >= 0.7,
            "hurts_precision_at_least_0.9": t["hurts"] == 0 or t["hurts_right"] / t["hurts"] >= 0.9,
            "less_unclear_than_shipped": t["unclear"] is not None and t["unclear"] < shipped["unclear"]}
    return {"judged": scope, "reported": [w for w in per if w not in scope], "per_world": per, "totals": t,
            "shipped": shipped, "done": done, "rule": rule, "ships": done and all(rule.values()),
            "model": {"columns": list(COLUMNS), "t_help": T_HELP, "t_hurt": T_HURT, "lambda": decisive.LAMBDA,
                      "mean": m["mean"].tolist(), "sd": m["sd"].tolist(), "coef": m["coef"].tolist(),
                      "classes": ["degrades", "no clear change", "improves"], "fit_worlds": FIT_WORLDS,
                      "fit_rows": FIT_ROWS}}


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.0%})" if b else "0/0 (n/a)"


def render(a: dict) -> str:
    lines = ["# Predictor v2, eighteenth look: a verdict classifier on the diagnosis' columns", "",
             "Generated by `python benchmarks/validity/v2/report_look18.py` from the committed rows (plan: "
             "`benchmarks/validity/v2/plan_look18.yaml`, committed before any outcome of a judged world existed). "
             f"`class_verdict` (decisive.py, fitted on the {FIT_ROWS} rows of the {FIT_WORLDS} worlds checked before "
             f"the plan) says helps where P(improves) >= {T_HELP:.2f}, hurts where P(degrades) >= {T_HURT:.2f}; "
             "`shipped` is the product's verdict as it stands (v2's interval against ±δ).", ""]
    t, s, n = a["totals"], a["shipped"], len(a["judged"])
    if a["done"]:
        verdict = "class_verdict ships" if a["ships"] else "nothing ships"
        lines.append(f"**Judged** over {n} worlds and {t['decisive']} decisive calls: {verdict} ("
                     + "; ".join(f"{k.replace('_', ' ')}: {'met' if v else 'not met'}" for k, v in a["rule"].items())
                     + ").")
    else:
        lines.append(f"**Open:** {n} judged world(s) so far with {t['decisive']} decisive calls of the candidate; the "
                     f"plan judges at {CALLS_TO_JUDGE} calls or {WORLDS_TO_JUDGE} worlds. Nothing is judged yet.")
    lines += ["", "| world | rows | class_verdict: helps right | hurts right | unclear | shipped: decisive right | "
                  "unclear |", "|---|---|---|---|---|---|---|"]
    for w in [*a["judged"], *a["reported"]]:
        c, sh = a["per_world"][w]["candidate"], a["per_world"][w]["shipped"]
        tag = "" if w in a["judged"] else " (reported)"
        dec = c["helps"] + c["hurts"]
        lines.append(f"| {w}{tag} | {c['n_rows']} | {_pct(c['helps_right'], c['helps'])} | "
                     f"{_pct(c['hurts_right'], c['hurts'])} | {1 - dec / c['n_rows']:.0%} | "
                     f"{_pct(sh['right'], sh['decisive'])} | {1 - sh['decisive'] / sh['n_rows']:.0%} |")
    if a["judged"]:
        lines += ["", f"Over the judged worlds: class_verdict right on {_pct(t['right'], t['decisive'])} of its calls "
                      f"(helps {_pct(t['helps_right'], t['helps'])}, hurts {_pct(t['hurts_right'], t['hurts'])}), "
                      f"unclear on {t['unclear']:.0%} of {t['n_rows']} rows; the shipped verdict right on "
                      f"{_pct(s['right'], s['decisive'])}, unclear on {s['unclear']:.0%}.", "",
                  "Realised class by class_verdict's verdict (judged worlds):", "",
                  "| verdict | improves | no clear change | degrades |", "|---|---|---|---|"]
        for v in ("helps", "unclear", "hurts"):
            cnt = {k: sum(a["per_world"][w]["candidate"]["table"][v][k] for w in a["judged"])
                   for k in ("improves", "no clear change", "degrades")}
            lines.append(f"| {v} | {cnt['improves']} | {cnt['no clear change']} | {cnt['degrades']} |")
        lines += ["", "Other thresholds (reported, not judged), over the judged worlds:", ""]
        for key in a["per_world"][a["judged"][0]]["also"]:
            x = {k: sum(a["per_world"][w]["also"][key][k] for w in a["judged"])
                 for k in ("n_rows", "helps", "helps_right", "hurts", "hurts_right")}
            dec = x["helps"] + x["hurts"]
            lines.append(f"- help >= {key.split('/')[0]}, hurt >= {key.split('/')[1]}: right "
                         f"{_pct(x['helps_right'] + x['hurts_right'], dec)}, helps {_pct(x['helps_right'], x['helps'])}"
                         f", hurts {_pct(x['hurts_right'], x['hurts'])}, unclear {1 - dec / x['n_rows']:.0%}")
    return "\n".join(lines) + "\n"


def later_look(a: dict) -> dict:
    """The look's record in the model file (``later_looks.look18``), once judged."""
    t, s, n = a["totals"], a["shipped"], len(a["judged"])
    outcome = "class_verdict ships" if a["ships"] else "the verdict stays the interval rule"
    return {"plan": "benchmarks/validity/v2/plan_look18.yaml", "study": "benchmarks/validity/v2/RESULTS_look18.md",
            "model": "class_verdict", "choice": "class_verdict" if a["ships"] else "shipped",
            "added_world": ", ".join(a["judged"]),
            "summary": f"look 18 (a verdict classifier on ten diagnosis columns, on the {n} worlds checked since its "
                       f"plan): right on {t['right']} of its {t['decisive']} decisive calls, unclear on "
                       f"{t['unclear']:.0%} of the rows, against the shipped verdict's {s['right']} of {s['decisive']} "
                       f"and {s['unclear']:.0%}: {outcome}"}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the judged look's record, and the verdict classifier where it ships."""
    shipped = look_record.record_look(shipped, 18, later_look(a))
    if a["ships"]:
        shipped["verdict"] = {"rule": "class_verdict", "look": 18, **a["model"]}
    return shipped


def main(argv: list[str] | None = None) -> int:
    return look_record.judged_main(18, __doc__, argv, analyse, render, record)


if __name__ == "__main__":
    sys.exit(main())
