"""Predictor v2's thirteenth look, as pre-registered (plan_look13.yaml): the drift model fitted to log KL
(``v2_logkl``) against the shipped raw-KL ridge, judged on the 37 seen worlds neither was fitted on and on the worlds
built after the plan; look13_analysis.json and RESULTS_look13.md.

    python benchmarks/validity/v2/report_look13.py
        # after check_world.py --spec sample_data/worlds/{garnet,beryl}.yaml --study STUDY --keep, which commits each
        # added world's rows into checks/: this script reads only committed files.

Each drift is shown as the product shows it: the shipped model's prediction floored at 0, v2_logkl's exponentiated;
tier v2 where a row has a lookahead result, else v2_no_lookahead. Only the kl_to_initial models change. The look's
outcome is recorded in the package's model file (``later_looks``), and, if its rule is met, its models replace the
shipped drift models there.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_checks  # noqa: E402
from benchmarks.validity.v2 import look_record  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_look11 as look11  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_look13.yaml"
MODELS = ("shipped", "v2_logkl")
OUTCOME = "kl_to_initial"
FLOOR = 1e-6  # the plan: a realised KL below it counts as it in the log target
SHOWN_FLOOR = 1e-4  # the plan: a shown drift below it counts as it in the log error
FACTOR = 3.0  # the plan's within3


def plan() -> dict:
    return yaml.safe_load(PLAN.read_text())


def added_worlds() -> tuple[list[str], list[str]]:
    """(the plan's added worlds, those with committed rows)."""
    return look_record.added_worlds(plan())


def with_log_target(rows: list[dict]) -> list[dict]:
    """The rows with ``log_kl``: ln of the realised KL, floored at ``FLOOR`` (NaN where the KL is not finite)."""
    kl = v2.target(rows, OUTCOME)
    return [{**r, "log_kl": {"estimate": float(np.log(max(k, FLOOR))) if np.isfinite(k) else math.nan}}
            for r, k in zip(rows, kl)]


def first_look(seven_rows: list[dict]) -> dict:
    """The shipped drift models as the first look fitted them (``report_v2.shipped_models`` on the seven worlds' rows:
    the package's file held them, within 1e-7, until this look), so this look reads the same after its own record."""
    return v2.shipped_models(seven_rows, yaml.safe_load(v2.PLAN.read_text()), {})


def fitted(seven_rows: list[dict]) -> dict:
    """v2_logkl per tier: ``core.predictor.fit`` on the log target of the seven worlds' rows (the first look's
    features and alpha), with the band of its leave-one-world-out residuals on the log scale, marked ``target: log``
    (``core.predictor.predict`` exponentiates it)."""
    d, rows = look10.design(), with_log_target(seven_rows)
    y = v2.target(rows, "log_kl")
    out = {}
    for t, features in d["tiers"].items():
        X, k = v2.matrix(rows, features), np.isfinite(y)
        fold = v2.lowo(rows, features, "log_kl", d["alpha"], inner=False)
        out[t] = {**model.fit(X[k], y[k], features, d["alpha"]), "target": "log",
                  "residual_band": list(model.residual_band(y - fold["pred"]))}
    return out


def shown(shipped: dict, logkl: dict, rows: list[dict]) -> dict[str, dict[str, np.ndarray]]:
    """Each model's drift as the product shows it, with its 95% interval (``core.predictor.interval``): the shipped
    prediction floored at 0, v2_logkl's on the outcome's scale (exp of the log-scale prediction and band)."""
    ship = look10.applied({t: {OUTCOME: shipped[t][OUTCOME]} for t in shipped}, rows)[OUTCOME]
    return {"shipped": {**ship, "pred": np.maximum(ship["pred"], 0.0)},
            "v2_logkl": look10.applied({t: {OUTCOME: m} for t, m in logkl.items()}, rows)[OUTCOME]}


def measures(x: dict[str, np.ndarray], rows: list[dict]) -> dict:
    """The plan's measures of one model's shown drift over ``rows`` (those with a finite realised KL > 0)."""
    r, w = v2.target(rows, OUTCOME), np.array([row["world"] for row in rows])
    k = np.isfinite(r) & (r > 0) & np.isfinite(x["pred"])
    p, r, w, lo, hi = x["pred"][k], r[k], w[k], x["lo"][k], x["hi"][k]
    inside = (p >= r / FACTOR) & (p <= r * FACTOR)
    per = {name: {"within3": float(inside[w == name].mean()),
                  "spearman": float(stats.spearman(p[w == name], r[w == name]))} for name in sorted(set(w))}
    finite = [v["spearman"] for v in per.values() if np.isfinite(v["spearman"])]
    return {"n": int(k.sum()), "within3": float(inside.mean()),
            "log_error": float(np.median(np.abs(np.log10(np.maximum(p, SHOWN_FLOOR) / r)))),
            "spearman_mean": float(np.mean(finite)) if finite else math.nan,
            "spearman_pooled": float(stats.spearman(p, r)), "coverage": float(((r >= lo) & (r <= hi)).mean()),
            "shown_zero": float((p <= 0).mean()), "per_world": per}


def judge(shipped: dict, logkl: dict, rows: list[dict]) -> dict:
    x = shown(shipped, logkl, rows)
    return {m: measures(x[m], rows) for m in MODELS}


def analyse() -> dict:
    p = look11.plan()["seen_worlds"]
    seven, never = list(p["fitted_by_look1"]), list(p["never_fitted"])
    planned, built = added_worlds()
    rows7 = look2.load_rows({"worlds": seven})  # read once: both fits and the in-sample figures
    shipped, logkl = first_look(rows7), fitted(rows7)
    coef = lambda m: dict(zip(m["features"], m["coef"]))  # noqa: E731
    out = {"look": 13, "plan": "benchmarks/validity/v2/plan_look13.yaml", "seven": seven, "never_fitted": never,
           "added_planned": planned, "added_built": built,
           "added_excluded": [w for w in planned if report_checks.status(w) == "excluded"],
           "alpha": look10.design()["alpha"],
           "fitted_on_seven": judge(shipped, logkl, rows7),
           "never": judge(shipped, logkl, look2.load_rows({"worlds": never})),
           "added": judge(shipped, logkl, look2.load_rows({"worlds": built})) if built else None,
           "models": logkl,
           "coefficients": {t: {"shipped": coef(shipped[t][OUTCOME]), "v2_logkl": coef(logkl[t])} for t in shipped}}
    out["ship"] = ship(out)
    return out


def ship(a: dict) -> dict:
    """The pre-registered rule: on the never-fitted worlds within3 at least 0.10 above the shipped model's and the mean
    within-world Spearman at most 0.02 below; at least one added world with rows, its within3 not below."""
    nv, new = a["never"], a["added"]
    c1 = bool(nv["v2_logkl"]["within3"] - nv["shipped"]["within3"] >= 0.10)
    c2 = bool(nv["v2_logkl"]["spearman_mean"] >= nv["shipped"]["spearman_mean"] - 0.02)
    c3 = bool(new is not None and new["v2_logkl"]["within3"] >= new["shipped"]["within3"])
    checks = {"never-fitted worlds: within3 at least 0.10 above": c1,
              "never-fitted worlds: mean Spearman at most 0.02 below": c2,
              "added worlds: within3 not below": c3}
    reason = (f"over the {len(a['never_fitted'])} never-fitted worlds, within a factor of 3 of the realised KL "
              f"{nv['v2_logkl']['within3']:.0%} of rows against the shipped model's {nv['shipped']['within3']:.0%}, "
              f"mean within-world Spearman {v2.fmt(nv['v2_logkl']['spearman_mean'])} against "
              f"{v2.fmt(nv['shipped']['spearman_mean'])}; on the added worlds ("
              + (", ".join(a["added_built"]) or "none built") + ") "
              + ("not run" if new is None else f"{new['v2_logkl']['within3']:.0%} against "
                                               f"{new['shipped']['within3']:.0%}")
              + ". " + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in checks.items()))
    return {"choice": "v2_logkl" if all(checks.values()) else "first_look", "conditions": checks, "reason": reason}


def _scope_rows(name: str, m: dict) -> list[str]:
    f = v2.fmt
    return [f"| {name} | {k} | {m[k]['n']} | {m[k]['within3']:.0%} | {m[k]['shown_zero']:.0%} | "
            f"{m[k]['log_error']:.2f} | {f(m[k]['spearman_mean'])} | {f(m[k]['spearman_pooled'])} | "
            f"{m[k]['coverage']:.0%} |" for k in MODELS]


def render(a: dict) -> str:
    f, new = v2.fmt, a["added"]
    shipped_it = a["ship"]["choice"] == "v2_logkl"
    L = ["# Predictor v2, thirteenth look: the drift fitted to log KL", "",
         "Generated by `python benchmarks/validity/v2/report_look13.py` from `look13_analysis.json` (plan: "
         "`benchmarks/validity/v2/plan_look13.yaml`, committed before any result of this look). The drift is the "
         "predicted KL(trained || initial student) per token on held-out samples. `shipped` is the first look's ridge "
         "fitted to the raw KL, shown floored at 0 as the product shows it; `v2_logkl` is the same ridge (alpha "
         f"{a['alpha']}, both tiers, the same features) fitted to ln KL on the same seven worlds, shown "
         "exponentiated. Neither was fitted on the 37 other seen worlds; the worlds built after the plan are "
         + (", ".join(f"`{w}`" for w in a["added_built"]) or "none built yet") + "." + look11.not_run(a), "",
         f"**Ship rule:** {'v2_logkl ships' if shipped_it else 'the first look’s models stay'}: "
         f"{a['ship']['reason']}.", "",
         "| scope | model | rows | within a factor of 3 | shown 0 | median abs log10 error | mean within-world "
         "Spearman | pooled Spearman | 95% interval coverage |", "|---|---|---|---|---|---|---|---|---|"]
    L += _scope_rows(f"the {len(a['never_fitted'])} never-fitted worlds", a["never"])
    if new is not None:
        L += _scope_rows("the added worlds", new)
    L += _scope_rows("the seven fitted worlds (in sample)", a["fitted_on_seven"])
    L += ["", "## Per world", "", "| world | within 3, shipped | within 3, v2_logkl | Spearman, shipped | "
          "Spearman, v2_logkl |", "|---|---|---|---|---|"]
    for scope, tag in (("added", " (added)"), ("never", ""), ("fitted_on_seven", " (fitted on it)")):
        if a[scope] is None:
            continue
        for w, s in a[scope]["shipped"]["per_world"].items():
            g = a[scope]["v2_logkl"]["per_world"][w]
            L.append(f"| {w}{tag} | {s['within3']:.0%} | {g['within3']:.0%} | {f(s['spearman'])} | "
                     f"{f(g['spearman'])} |")
    c = a["coefficients"]["v2"]
    L += ["", "## Coefficients of the drift model (tier v2, per SD of each feature)", "",
          "| feature | shipped (raw KL) | v2_logkl (ln KL) |", "|---|---|---|"]
    L += [f"| `{feat}` | {c['shipped'][feat]:+.4f} | {c['v2_logkl'][feat]:+.4f} |" for feat in c["v2_logkl"]]
    band = a["models"]["v2"]["residual_band"]
    L += ["", f"v2_logkl's intercept (tier v2) {a['models']['v2']['intercept']:+.3f} on the log scale (a drift of "
          f"{math.exp(a['models']['v2']['intercept']):.3f} at the seven worlds' mean features); its band "
          f"{band[0]:+.3f}, {band[1]:+.3f} (a factor {math.exp(band[0]):.2f} to {math.exp(band[1]):.2f})."]
    return "\n".join(L) + "\n"


def later_look(a: dict) -> dict:
    nv, new = a["never"], a["added"]
    summary = (f"look 13 (the drift fitted to log KL): within a factor of 3 of the realised KL on "
               f"{nv['v2_logkl']['within3']:.0%} of the rows of the {len(a['never_fitted'])} never-fitted worlds "
               f"against the shipped drift's {nv['shipped']['within3']:.0%}; on the new worlds "
               + ("not run" if new is None else f"{', '.join(a['added_built'])} {new['v2_logkl']['within3']:.0%} "
                                                f"against {new['shipped']['within3']:.0%}")
               + ": " + ("v2_logkl's drift ships" if a["ship"]["choice"] == "v2_logkl"
                         else "the first look's models stay"))
    return {"plan": a["plan"], "study": "benchmarks/validity/v2/RESULTS_look13.md", "model": "v2_logkl",
            "choice": a["ship"]["choice"], "added_world": ", ".join(a["added_built"]), "summary": summary}


def record(shipped: dict, a: dict) -> dict:
    """The model file with the look recorded; where the rule is met, its drift models (marked with their log target,
    which ``core.predictor.predict`` exponentiates) replace the shipped ones (``look_record.record_look``)."""
    ships = a["ship"]["choice"] == "v2_logkl"
    return look_record.record_look(shipped, 13, later_look(a), OUTCOME, a["models"] if ships else None)


def main() -> int:
    return look_record.publish(13, lambda _: analyse(), render, record)


if __name__ == "__main__":
    sys.exit(main())
