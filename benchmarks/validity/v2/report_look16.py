"""Predictor v2's sixteenth look, as pre-registered (plan_look16.yaml): the twelfth look's candidate ``v2_far``, frozen
as its plan fitted it on the 44 seen worlds, judged on the worlds with rows built since that plan on which it was
never computed, and on four new ones; look16_analysis.json and RESULTS_look16.md.

    python benchmarks/validity/v2/report_look16.py
        # after check_world.py --spec sample_data/worlds/W.yaml --study STUDY --keep for each new world, which
        # commits its rows into checks/: this script reads only committed files.

Every prediction and ranking is the twelfth look's code unchanged (``report_look12.fitted``, ``gain``, ``judge``):
``shipped`` is the package's first-look models ranked as the product ranks (``v2_config``), ``v2_far`` the candidate
ranked the same way. The look's outcome is recorded in the package's model file (``later_looks``).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import look_record  # noqa: E402
from benchmarks.validity.v2 import report_checks  # noqa: E402
from benchmarks.validity.v2 import report_look12 as look12  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look16.yaml"
RULES = look12.RULES  # accuracy_gap, shipped, v2_far
BOOT = {"n": 10000, "seed": 0}  # the plan's bootstrap of the paired difference
MIN_WORLDS = 12


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def worlds() -> dict[str, list[str]]:
    """The plan's world lists: since_look12 and new (planned), judged (with rows), excluded, reported."""
    p = plan()["judged_worlds"]
    planned = [*p["since_look12"], *p["new"]]
    with_rows = [w for w in planned if report_checks.status(w) == "checked"]
    return {"since_look12": list(p["since_look12"]), "new": [w for w in p["new"] if isinstance(p["new"][w], dict)],
            "judged": with_rows, "excluded": [w for w in planned if report_checks.status(w) == "excluded"],
            "reported": list(p["reported_not_judged"])}


def best_rows(rows: list[dict]) -> dict[str, float]:
    """Per world, the largest realised Δpass@1 of any row (what a perfect pick would have realised)."""
    out: dict[str, float] = {}
    for r in rows:
        out[r["world"]] = max(out.get(r["world"], -np.inf), r["d_pass1"]["estimate"])
    return out


def judge(names: list[str], models: dict, ship_d1: dict, delta: float) -> dict | None:
    """The twelfth look's figures for ``names`` (both models applied with no refit), the plan's paired difference
    and each world's best row."""
    if not names:
        return None
    rows = look12.rows_of(names)
    out = look12.judge(rows, {"shipped": look12.gain(ship_d1, rows), "v2_far": look12.gain(models, rows)}, names,
                       delta)
    per = out["per_world"]
    out["v2_far_minus_shipped"] = stats.paired_mean(per["v2_far"]["worlds"], per["shipped"]["worlds"], names,
                                                    BOOT["n"], BOOT["seed"])
    out["best_row"] = best_rows(rows)
    out["worlds"] = names
    return out


@functools.cache
def v2_far() -> dict:
    """The candidate as the twelfth look's plan fitted it on its 44 seen worlds (tier -> {"d_pass1": model}); fitted
    once for the analysis and the record."""
    seven, never = look12.seen()
    return look12.fitted(look12.rows_of([*seven, *never]))


def analyse(shipped: dict) -> dict:
    models = v2_far()
    ship_d1 = {t: {"d_pass1": shipped["models"][t]["d_pass1"]} for t in shipped["models"]}
    w, delta = worlds(), shipped["delta"]
    new = [x for x in w["new"] if x in w["judged"]]
    out = {"look": 16, "plan": "benchmarks/validity/v2/plan_look16.yaml", "worlds": w, "delta": delta,
           "judged": judge(w["judged"], models, ship_d1, delta),
           "new_alone": judge(new, models, ship_d1, delta),
           "reported": judge(w["reported"], models, ship_d1, delta)}
    out["ship"] = ship(out)
    return out


def ship(a: dict) -> dict:
    """The plan's rule over the judged worlds: at least 12; v2_far's mean Spearman above the shipped ranking's
    (strictly); above it in more worlds than below."""
    j, n = a["judged"], len(a["worlds"]["judged"])
    d = j["v2_far_minus_shipped"] if j else None
    checks = {f"at least {MIN_WORLDS} judged worlds with rows": n >= MIN_WORLDS,
              "mean above the shipped ranking's": bool(j and j["mean"]["v2_far"] > j["mean"]["shipped"]),
              "above in more worlds than below": bool(d and d["above"] > d["below"])}
    f = v2.fmt
    reason = (f"over the {n} judged worlds v2_far {f(j['mean']['v2_far'])} against the shipped ranking's "
              f"{f(j['mean']['shipped'])} (above in {d['above']}, below in {d['below']})" if j else "no judged world")
    reason += ". " + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in checks.items())
    return {"choice": "v2_far" if all(checks.values()) else "first_look", "conditions": checks, "reason": reason}


def table(j: dict, label: str) -> list[str]:
    f, per, rec = v2.fmt, j["per_world"], j["recommended"]
    L = ["| world | G (methods tied) | shipped | v2_far | recommended row realised: shipped | v2_far | best row |",
         "|---|---|---|---|---|---|---|"]
    for w in j["worlds"]:
        r = [rec[k][w] for k in RULES[1:]]
        L.append(f"| {w} | " + " | ".join(f(per[k]["worlds"][w]) for k in RULES) + " | "
                 + " | ".join("none" if v is None else f"{v:+.3f}" for v in r) + f" | {j['best_row'][w]:+.3f} |")
    means = [np.mean([v for v in rec[k].values() if v is not None]) for k in RULES[1:]]
    L.append(f"| mean of the {len(j['worlds'])} {label} | " + " | ".join(f(j["mean"][k]) for k in RULES) + " | "
             + " | ".join(f"{m:+.3f}" for m in means) + f" | {np.mean(list(j['best_row'].values())):+.3f} |")
    d, mo = j["v2_far_minus_shipped"], j["method_order"]
    L += ["", f"v2_far minus shipped: {f(d['estimate'], 3)} [{f(d['lo'], 3)}, {f(d['hi'], 3)}] (95% bootstrap over "
          f"worlds, {BOOT['n']} resamples), above in {d['above']}, below in {d['below']}. Method pairs more than 0.10 "
          "apart ordered right: " + "; ".join(f"{k} {m['n_right']} of {m['n_pairs']}" for k, m in mo.items()) + "."]
    return L


def render(a: dict) -> str:
    w, j = a["worlds"], a["judged"]
    absent = [x for x in [*w["since_look12"], *w["new"]] if x not in w["judged"]]
    L = ["# Predictor v2, sixteenth look: the twelfth look's v2_far on the worlds built since", "",
         "Generated by `python benchmarks/validity/v2/report_look16.py` from `look16_analysis.json` (plan: "
         "`benchmarks/validity/v2/plan_look16.yaml`, committed before any result of this look). `v2_far` is the "
         "twelfth look's candidate, unchanged: the first look's gain model with max(G, 0) x (1 - teachability) and "
         "max(G, 0) x mean JSD, fitted on the 44 seen worlds. `shipped` is the package's first-look model. Both rank "
         "as the product does (`v2_config`), applied with no refit. Judged: every world with rows built after the "
         "twelfth look's plan on which v2_far was never computed, and the four new worlds built after this plan."
         + "".join(f" `{x}` was built and excluded by the plan's level rule: no rows." if x in w["excluded"]
                   else f" `{x}` is planned and not built: not run." for x in absent), "",
         f"**Ship rule:** {'v2_far ships' if a['ship']['choice'] == 'v2_far' else 'the first look’s models stay'}: "
         f"{a['ship']['reason']}.", "", "## The judged worlds", ""]
    L += table(j, "judged") if j else ["No judged world has rows."]
    dec = j["decisions"] if j else None
    if dec:
        L += ["", "| interval rule (delta " f"{a['delta']}) | shipped | v2_far |", "|---|---|---|",
              "| decisive verdicts right | " + " | ".join(f"{dec[k]['n_correct']} of {dec[k]['n_decisive']}"
                                                       for k in RULES[1:]) + " |",
              "| unclear | " + " | ".join(f"{dec[k]['unclear_share']:.0%}" for k in RULES[1:]) + " |"]
    for key, title, label in (("new_alone", "The four new worlds alone (reported)", "new"),
                              ("reported", "jasper and mica (reported: the twelfth look judged them)", "reported")):
        L += ["", f"## {title}", ""]
        L += table(a[key], label) if a[key] else ["None with rows yet."]
    L += ["", "The issue asks Spearman >= 0.80 as the mean of worlds; this look changes only the gain model the "
          "ranking reads."]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    j = a["judged"]
    summary = (f"look 16 (the twelfth look's v2_far, frozen, on the {len(a['worlds']['judged'])} worlds built since "
               f"its plan): {v2.fmt(j['mean']['v2_far'])} against the shipped {v2.fmt(j['mean']['shipped'])}: "
               + ("v2_far ships" if a["ship"]["choice"] == "v2_far" else "the first look's models stay"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look16.md", "model": "v2_far",
            "choice": a["ship"]["choice"], "added_world": ", ".join(a["worlds"]["judged"]), "summary": summary}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the look recorded; where the rule is met, v2_far's d_pass1 models (both tiers, fitted on
    the 44 seen worlds) replace the shipped ones (``look_record.record_look``)."""
    ships = a["ship"]["choice"] == "v2_far"
    return look_record.record_look(shipped, 16, later_look(a), "d_pass1",
                                   {t: m["d_pass1"] for t, m in v2_far().items()} if ships else None)


def main() -> int:
    return look_record.publish(16, analyse, render, record)


if __name__ == "__main__":
    sys.exit(main())
