"""Does piloting the top few recommendations for a quarter of a run, then finishing the one whose early read is best,
realise more than training the recommendation? An exploration (committed before it ran, with its rule).

The early read (explore_early_success.py) ranks what runs realise at +0.82 pooled after a quarter of their steps, but
a read of every candidate costs a quarter of every run and still leaves the ranking below 0.80
(explore_pilot_bound.py). A user who will train one row anyway can afford a few quarters: start the top k rows of
the product's ranking, read each after a quarter of its steps, and let only the best read run on. That costs
k/4 + 3/4 of one run (1.25 for k = 2, 1.5 for k = 3) and decides what is trained, which is what the decision is for.

Definitions, fixed before any of it ran:
- worlds: those with committed step-10 reads (early_success_rows.json: every row with G > 0, seed 0), each world's
  rows and realised held-out Δpass@1 the committed ones (two seeds, 40 steps);
- ``recommended``: the product's recommendation, the best-ranked row with G > 0 under the shipped ranking
  (``looks.product_order``, v2_config);
- ``pilot_k`` (k = 2, 3; k = 3 decides): among the k best-ranked rows with G > 0, the one with the largest step-10
  read ``early_d1`` (ties: the better-ranked); a world with fewer than k such rows pilots those it has;
- ``best``: the world's best realised row (the room), and ``pilot_all``: the largest read over every row with G > 0
  (descriptive; it costs a quarter of every such run).
Reported, over the worlds the shipped models were never fitted on (and over all): the mean realised change of each
pick; each pilot's difference from the recommendation per world, its mean with a 95% bootstrap over worlds
(``stats.paired_mean``, 2000 draws, seed 0), and in how many worlds it is above and below; and, as the pilot's advice
not to train at all, the worlds where pilot_3's read is below +0.02 and how many of them realised below +0.02.
Rule (fixed now): the Train page gains a pilot (start the k best-ranked rows with G > 0, each stopping at its early
read, then continue the one with the best read) only if over the never-fitted worlds pilot_3's mean difference from
the recommendation is at least +0.02 with its 95% interval above 0, and it is below the recommendation in at most a
quarter of the worlds where the two differ; and then on a world built after this ran (a plan_checks.yaml amendment
written before its build, its top three rows with G > 0 trained for 10 steps and read as explore_early_success reads)
pilot_3 realises at least the recommendation's change minus 0.02. Otherwise no look follows and nothing ships.

Reading of its output (explore_pilot_pick.txt, 34 worlds): no. The recommendation already realises +0.245 on average
over the 27 never-fitted worlds, the best row +0.281: little room. Piloting the top three and finishing the best read
realises +0.236, -0.009 [-0.078, +0.048] against the recommendation (above in 6 worlds, below in 2): it finds the best
row of `crossed` (+0.409 against -0.007) and loses `tandem`'s (+0.011 against +0.739), whose recommended run had
barely moved after a quarter (+0.017) and realised the most of its world by the end. Piloting two changes one world;
piloting every row with G > 0 nets -0.001. Where pilot_3's best read was below +0.02 (7 worlds), its pick realised
below +0.02 in 5 and so did the world's best row in 2: a pilot says when no candidate is moving, as the early read
already does for a followed run. No look follows and nothing ships.

    python benchmarks/validity/v2/explore_pilot_pick.py > benchmarks/validity/v2/explore_pilot_pick.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import explore_early_success as success  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import SMALL  # noqa: E402
from benchmarks.validity.v2.looks import model_file, shipped_order  # noqa: E402

HERE = Path(__file__).resolve().parent
READS = HERE / "early_success_rows.json"
PICKS = ("recommended", "pilot_2", "pilot_3", "pilot_all", "best")
BOOT = {"n_boot": 2000, "seed": 0}
GAIN, SHARE_BELOW = 0.02, 0.25


def picks(rows: list[dict], shipped: dict, read: np.ndarray) -> dict[str, int | None]:
    """Row index of each pick on one world (None: no row with G > 0)."""
    order = shipped_order(rows, shipped)  # higher: ranked first
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    ranked = [int(i) for i in np.argsort(-order, kind="stable") if g[i] > 0]
    y = v2.target(rows, "d_pass1")
    out: dict[str, int | None] = {"best": int(np.nanargmax(y))}
    if not ranked:
        return {**out, **{k: None for k in PICKS if k != "best"}}

    def pilot(candidates: list[int]) -> int:  # the largest read; ties and missing reads go to the better-ranked
        return max(candidates, key=lambda i: (np.nan_to_num(read[i], nan=-np.inf), -candidates.index(i)))

    return {**out, "recommended": ranked[0], "pilot_2": pilot(ranked[:2]), "pilot_3": pilot(ranked[:3]),
            "pilot_all": pilot(ranked)}


def report() -> dict:
    shipped, kept = model_file(16), json.loads(READS.read_text())
    per: dict = {}
    for w in sorted(w for w in success.worlds() if w in kept):  # the worlds it was written on
        rows = look2.load_rows({"worlds": [w]})
        read = np.array([kept[w]["runs"].get(f"{r['config']}__{r['method']}__s0", {}).get("early_d1", np.nan)
                         for r in rows])
        y = v2.target(rows, "d_pass1")
        chosen = picks(rows, shipped, read)
        if chosen["recommended"] is None:
            continue
        per[w] = {k: {"row": f"{rows[i]['config']}/{rows[i]['method']}", "realised": float(y[i]),
                      "read": float(read[i])} for k, i in chosen.items()}
    never = [w for w in per if w not in look8.FITTED]
    realised = {k: {w: per[w][k]["realised"] for w in per} for k in PICKS}
    out = {"per_world": per, "never_fitted": never,
           "mean": {k: {"all": float(np.mean(list(realised[k].values()))),
                        "never_fitted": float(np.mean([realised[k][w] for w in never]))} for k in PICKS},
           "paired": {k: stats.paired_mean(realised[k], realised["recommended"], never, **BOOT)
                      for k in ("pilot_2", "pilot_3", "pilot_all")}}
    low = [w for w in never if per[w]["pilot_3"]["read"] < SMALL]
    out["advice"] = {"read_low": len(low), "realised_low": sum(per[w]["pilot_3"]["realised"] < SMALL for w in low),
                     "best_low": sum(per[w]["best"]["realised"] < SMALL for w in low)}
    d = out["paired"]["pilot_3"]
    differ = d["above"] + d["below"]
    out["qualifies"] = bool(d["estimate"] >= GAIN and d["lo"] > 0 and d["below"] <= SHARE_BELOW * differ)
    return out


def render(res: dict) -> str:
    n = len(res["never_fitted"])
    lines = ["Per world (* the shipped models were fitted on it): the realised held-out Δpass@1 of the row each pick "
             "trains, and its step-10 read", "", f"{'world':20s} " + " ".join(f"{k:>17s}" for k in PICKS)]
    for w, d in res["per_world"].items():
        mark = "" if w in res["never_fitted"] else " *"
        lines.append(f"{w + mark:20s} " + " ".join(f"{d[k]['realised']:+8.3f} ({d[k]['read']:+.3f})"
                                                    if np.isfinite(d[k]["read"]) else f"{d[k]['realised']:+8.3f}  (n/a) "
                                                    for k in PICKS))
    lines += ["", "the rows each pick trains, per world:"]
    lines += [f"  {w:20s} " + ", ".join(f"{k} {d[k]['row']}" for k in PICKS) for w, d in res["per_world"].items()]
    lines += ["", f"mean realised Δpass@1 over the {n} never-fitted worlds (over all {len(res['per_world'])}):"]
    lines += [f"  {k:12s} {m['never_fitted']:+.3f} ({m['all']:+.3f})" for k, m in res["mean"].items()]
    lines += ["", f"each pilot minus the recommendation over the {n} never-fitted worlds (95%, bootstrap over worlds, "
                  f"{BOOT['n_boot']} draws):"]
    lines += [f"  {k:12s} {d['estimate']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}], above in {d['above']}, below in "
              f"{d['below']}" for k, d in res["paired"].items()]
    a = res["advice"]
    lines += ["", f"pilot_3's advice not to train (its read below {SMALL:+.2f}): {a['read_low']} of {n} worlds; its pick "
                  f"realised below {SMALL:+.2f} in {a['realised_low']} of them, the world's best row in {a['best_low']}",
              "", "cost: pilot_2 1.25 runs, pilot_3 1.5 runs, pilot_all a quarter of every run with G > 0 plus three "
                  "quarters of one", "",
              "rule (docstring): pilot_3 at least +0.02 above the recommendation with its interval above 0 and below it "
              "in at most a quarter of the worlds where they differ: " +
              ("it qualifies; a look on a world built after this ran decides" if res["qualifies"] else
               "it does not; no look follows")]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(report()))
