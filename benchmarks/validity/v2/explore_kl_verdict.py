"""An exploration after the ninth look (not pre-registered; it may lead to a tenth look, judged only on worlds built
after that look's plan): does the lookahead, which sees what a few steps of training do, make the G verdict
decisive more often at the issue's precisions?

What the author had seen before writing it (printed first, as the look it was): among the sampled-token rows with
G <= -0.2 over the twenty-one worlds, those that realised `no clear change` had a much smaller lookahead KL (median
0.004) than those that degraded (0.024): a sampled-token loss that barely moves the policy in the lookahead barely
moves it in training. So the G verdict's `unclear` on those rows may be read as `hurts` where the lookahead moved.

The lookahead KL is compared within a diagnosis (the world's rows: every configuration and method the user
diagnosed), as ``kl_rel`` = the row's lookahead KL over the median of its world's, so no absolute scale is assumed.

Grid (each rule is the ninth look's G verdict with one more condition): hurts for full-distribution losses (jsd,
opsd_jsd) at G <= hf; hurts for sampled-token ones at G <= hs and kl_rel >= ks; helps for full-distribution at
G > pf; helps for sampled-token at G > ps and a lookahead condition (none, Δll > 0, Δv > 0). Printed: the rules that
meet the issue's precisions in sample, fewest `unclear` first, and the honest figure for choosing one this way:
leave one world out, pick the in-sample best on the other twenty, score its calls on the left-out world, pooled.

    python benchmarks/validity/v2/explore_kl_verdict.py > benchmarks/validity/v2/explore_kl_verdict.txt
"""
from __future__ import annotations

import collections
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402

NEVER = 9.0
CLASSES = ("degrades", "no clear change", "improves")
LOOK = ("lookahead_dv", "lookahead_dll", "lookahead_kl", "lookahead_fresh", "score", "mean_jsd", "teachability")
GRID = {"hf": (-0.1, -0.2, -0.3), "hs": (-0.1, -0.2, -0.4, -NEVER), "ks": (0.0, 0.5, 1.0, 1.5, 2.0, 3.0),
        "pf": (0.05, 0.1, 0.15, NEVER), "ps": (0.05, 0.1, 0.3, NEVER), "pl": ("none", "lookahead_dll", "lookahead_dv")}


def table(rows: list[dict]) -> dict:
    """Per row: world, realised class, G, full-distribution flag, the lookahead columns and kl_rel."""
    t = {"world": np.array([r["world"] for r in rows]),
         "cls": np.array([stats.realised_class(v2._num(r["d_pass1"]["lo"]), v2._num(r["d_pass1"]["hi"]))
                          for r in rows]),
         "g": np.array([v2._num(r["accuracy_gap"]) for r in rows]),
         "full": np.array([r["method"] in ("jsd", "opsd_jsd") for r in rows])}
    t.update({c: np.array([v2._num(r.get(c)) for r in rows]) for c in LOOK})
    med = {w: np.nanmedian(t["lookahead_kl"][t["world"] == w]) for w in set(t["world"])}
    t["kl_rel"] = t["lookahead_kl"] / np.array([med[w] for w in t["world"]])
    return t


def calls(t: dict, hf, hs, ks, pf, ps, pl) -> tuple[np.ndarray, np.ndarray]:
    """(helps, hurts) bool per row of one rule; a NaN lookahead never satisfies its condition."""
    hurts = np.where(t["full"], t["g"] <= hf, (t["g"] <= hs) & (t["kl_rel"] >= ks))
    extra = np.ones_like(hurts) if pl == "none" else (t[pl] > 0)
    helps = np.where(t["full"], t["g"] > pf, (t["g"] > ps) & extra) & ~hurts
    return helps, hurts


def score(t: dict, helps: np.ndarray, hurts: np.ndarray, keep: np.ndarray | None = None) -> dict:
    keep = np.ones(len(t["g"]), bool) if keep is None else keep
    h, H, c = helps[keep], hurts[keep], t["cls"][keep]
    rh, rH = int((h & (c == "improves")).sum()), int((H & (c == "degrades")).sum())
    nh, nH = int(h.sum()), int(H.sum())
    return {"right": (rh + rH) / max(nh + nH, 1), "helps": rh / max(nh, 1), "hurts": rH / max(nH, 1),
            "unclear": 1 - (nh + nH) / max(int(keep.sum()), 1), "rh": rh, "nh": nh, "rH": rH, "nH": nH}


def meets(s: dict) -> bool:
    return s["right"] >= 0.85 and s["helps"] >= 0.7 and s["hurts"] >= 0.9


def best(t: dict, keep: np.ndarray) -> tuple | None:
    """The rule with the fewest `unclear` on ``keep``'s rows among those meeting the precisions there (ties: the
    grid's order)."""
    found = None
    for rule in itertools.product(*GRID.values()):
        s = score(t, *calls(t, *rule), keep)
        if meets(s) and (found is None or s["unclear"] < found[1]["unclear"]):
            found = (rule, s)
    return found


def main(worlds: list[str] = WORLDS, shown: int = 15) -> None:
    t = table(L.load_rows({"worlds": worlds}))
    print(f"{len(t['g'])} rows, {len(worlds)} worlds; realised:", dict(collections.Counter(map(str, t["cls"]))))
    print("\nmedians by realised class (the look that led here, then the other bands):")
    bands = {"sampled G <= -0.2": ~t["full"] & (t["g"] <= -0.2), "full G <= -0.2": t["full"] & (t["g"] <= -0.2),
             "sampled -0.2 < G <= 0.05": ~t["full"] & (t["g"] > -0.2) & (t["g"] <= 0.05),
             "full -0.2 < G <= 0.05": t["full"] & (t["g"] > -0.2) & (t["g"] <= 0.05),
             "sampled G > 0.05": ~t["full"] & (t["g"] > 0.05), "full G > 0.05": t["full"] & (t["g"] > 0.05)}
    for name, m in bands.items():
        print(f"== {name}", {str(k): int(n) for k, n in collections.Counter(t["cls"][m]).items()})
        for c in (*LOOK, "kl_rel"):
            parts = [f"{k[:7]} {np.nanmedian(t[c][m & (t['cls'] == k)]):+.3g}" for k in CLASSES
                     if (m & (t["cls"] == k)).any()]
            print(f"   {c:16s} " + "  ".join(parts))
    ninth = score(t, *calls(t, -0.2, -0.4, 0.0, 0.1, NEVER, "none"))
    print("\nthe ninth look's rule on these rows: right %.2f, helps %.2f, hurts %.2f, unclear %.2f" %
          (ninth["right"], ninth["helps"], ninth["hurts"], ninth["unclear"]))
    res = [(rule, score(t, *calls(t, *rule))) for rule in itertools.product(*GRID.values())]
    ok = sorted((r for r in res if meets(r[1])), key=lambda r: r[1]["unclear"])
    print(f"\n{len(res)} rules tried; {len(ok)} meet right >= 0.85, helps >= 0.7, hurts >= 0.9 in sample "
          f"(9: never; rule = hf, hs, ks, pf, ps, pl):")
    for rule, s in ok[:shown]:
        print("  right %.2f, helps %.2f, hurts %.2f, unclear %.2f | " % (s["right"], s["helps"], s["hurts"],
                                                                       s["unclear"])
              + f"{rule} | helps {s['rh']}/{s['nh']}, hurts {s['rH']}/{s['nH']}")
    print("\nleave one world out (the in-sample best of the other worlds, scored on the left-out one):")
    tot = collections.Counter()
    for w in worlds:
        pick = best(t, t["world"] != w)
        if pick is None:
            print(f"  {w}: no rule meets the precisions on the others")
            continue
        s = score(t, *calls(t, *pick[0]), t["world"] == w)
        tot.update({k: s[k] for k in ("rh", "nh", "rH", "nH")})
        tot["rows"] += int((t["world"] == w).sum())
        print(f"  {w:18s} {pick[0]} | helps {s['rh']}/{s['nh']}, hurts {s['rH']}/{s['nH']}, unclear {s['unclear']:.2f}")
    dec = tot["nh"] + tot["nH"]
    print("pooled over the left-out worlds: right %.3f (%d/%d), helps %.3f, hurts %.3f, unclear %.2f" % (
        (tot["rh"] + tot["rH"]) / max(dec, 1), tot["rh"] + tot["rH"], dec, tot["rh"] / max(tot["nh"], 1),
        tot["rH"] / max(tot["nH"], 1), 1 - dec / max(tot["rows"], 1)))


if __name__ == "__main__":
    main()
