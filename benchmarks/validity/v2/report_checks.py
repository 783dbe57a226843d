"""The shipped predictor over every world checked after its last look (plan_checks.yaml): CHECKS.md.

    python benchmarks/validity/v2/report_checks.py [--check]

Reads only committed files: each checked world's rows in ``checks/`` (``check_world.py --keep``), recomputes the
figures ``check_world.py`` printed for it, and adds what no single world shows: the mean of the per-world
Spearman coefficients, method pairs and decisive verdicts summed over the worlds, and the forgetting Spearman
pooled over their rows, each beside the issue's target; on the worlds built after the eighth look, what the product
decides: the row it recommends and that row's realised change. A world of the plan that the level rule excluded is
listed with its line; one not checked yet is listed as such. The same figures, in one sentence, go into the
package's model file (``checks``), which the decision panel quotes after its ranking rule. ``--check`` fails
when CHECKS.md or that sentence differs.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np
import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import answer_shares, check_world, looks, report_look2, report_v2  # noqa: E402
from benchmarks.validity.v2.checks_words import (  # noqa: E402
    forgetting_words, in_force_words, listed, product_key, since_sentence, size_words, verdict_words)
from benchmarks.validity.v2.looks import product_gain, product_order, product_verdicts, shipped_gain  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan_checks.yaml"
OUT = HERE / "CHECKS.md"
SHIPPED = report_v2.SHIPPED
ORDER = yaml.safe_load(PLAN.read_text())["product_order"]  # the file's ranking rule when these worlds were checked
PRODUCT = product_key(ORDER)
MODELS = (PRODUCT, "accuracy_gap", "v2", "v2_no_lookahead")
BOOT = {"n_boot": 2000, "seed": 0}  # the bootstrap over worlds of the paired difference against G
TARGETS = {"spearman": 0.80, "method_order": 0.90, "decisive": 0.85, "unclear": 0.40, "forgetting": 0.70}


def rows_of(world: str) -> list[dict]:
    """A checked world's product rows with their lookahead columns, from its committed rows in ``checks/``."""
    return check_world.with_lookahead(world, report_look2.world_rows(world),
                                      json.loads(report_look2.lookahead_file(world).read_text())["rows"])


@functools.cache
def after_look8() -> dict:
    """The plan's worlds after the eighth look, each with its entry (read once)."""
    return yaml.safe_load(PLAN.read_text()).get("after_look8") or {}


def shipping_notes() -> dict[str, str]:
    """World -> why its build, though it met its spec, is not shipped (the plan's ``not_shipped`` of the worlds
    after the eighth look); a world whose spec sits in ``checks/`` without one missed its spec's expectations."""
    return {w: d["not_shipped"] for w, d in after_look8().items() if d.get("not_shipped")}


def since_look8() -> list[str]:
    """The worlds built after the eighth look shipped its ranking and checked with it: the plan's amendments from the
    second on, then the ninth look's added world."""
    return [*(yaml.safe_load(PLAN.read_text()).get("after_look8") or {}),
            yaml.safe_load((HERE / "plan_look9.yaml").read_text())["added_world"]["name"]]


LATER = json.loads((HERE / "look8_analysis.json").read_text())["ship"]["choice"]  # the ranking the eighth look shipped
LATER_PRODUCT = product_key(LATER)


def as_checked(world: str | None = None) -> dict:
    """The model file as it stood when ``world`` was checked (default: the plan's five, checked before any look
    replaced a model): its models, those a later look replaced restored (``looks.as_when_checked``), with the ranking
    rule then in force (the eighth look's for a world of ``since_look8``)."""
    shipped = check_world.shipped()
    models = looks.as_when_checked(shipped, world) if world else looks.before_look(shipped, 1)
    return {**models, "method_order": {"rule": LATER if world in since_look8() else ORDER}}


def world_figures(world: str, rows: list[dict] | None = None) -> dict:
    """``check_world.py``'s figures for a checked world, recomputed from the committed rows (``rows_of``; JSON
    values)."""
    figures = check_world.figures(world, rows if rows is not None else rows_of(world), as_checked(world))
    return json.loads(json.dumps(report_v2.stats_jsonable(figures)))


def recommended(rows: list[dict], ship: dict, skip: set[str] = frozenset()) -> dict:
    """What the product decides on one world: the realised Δpass@1 of the row it recommends (the best-ranked with
    G > 0, of a config not in ``skip``: the answer guard's) under the eighth look's ranking and under the ranking by G
    before it (never guarded), each with its place among the world's rows (1: the best realised), and the best
    row's."""
    y = report_v2.target(rows, "d_pass1")
    g = np.array([report_v2._num(r["accuracy_gap"]) for r in rows])
    out, gain = {"best": float(np.nanmax(y)), "n_rows": len(rows)}, product_gain(rows, ship)  # the product's tiers
    for name, rule in (("product", LATER), ("by_g", ORDER)):
        spared = [name == "by_g" or r["config"] not in skip for r in rows]
        order, k = product_order(rows, gain, rule), np.flatnonzero((g > 0) & np.array(spared))
        i = int(k[np.argmax(order[k])]) if k.size else None
        out[name] = None if i is None else {"row": f"{rows[i]['config']} with {rows[i]['method']}",
                                            "realised": float(y[i]), "place": int((y > y[i]).sum()) + 1,
                                            "predicted": float(gain[i])}
    return out


def recommended_size(picks: dict) -> float | None:
    """Across worlds, the Spearman of the recommended row's predicted gain with what it realised: does the headline
    number say how much the recommendation helps, not only which row?"""
    p = [d["product"] for d in picks.values() if d["product"]]
    return stats.spearman(np.array([x["predicted"] for x in p]), np.array([x["realised"] for x in p])) \
        if len(p) > 2 else None


def guarded(world: str) -> set[str]:
    """The configs the product's recommendation skipped on ``world``: those the answer-only check flagged, where the
    plan checks its recommendation with the seventeenth look's answer guard (amendment 55); none before."""
    entry = after_look8().get(world) or {}
    return answer_shares.flagged(answer_shares.load()[world]) if entry.get("recommendation") == "answer_guard" else set()


def status(world: str) -> str:
    """checked, excluded (its check_<world>.txt says why) or not checked yet."""
    if (report_look2.CHECKS / f"{world}_analysis.json").is_file():
        return "checked"
    printed = HERE / f"check_{world}.txt"
    return "excluded" if printed.is_file() and "excluded by the plan's level rule" in printed.read_text() else "pending"


def analysis() -> dict:
    """Every planned world's status, the checked ones' figures, and the figures over them."""
    states = {w: status(w) for w in yaml.safe_load(PLAN.read_text())["worlds"]}
    checked = [w for w, st in states.items() if st == "checked"]
    by_world = {w: rows_of(w) for w in checked}
    per = {w: world_figures(w, by_world[w]) for w in checked}
    rows = [r for w in checked for r in by_world[w]]  # every checked row, for the pooled forgetting Spearman
    over = {"mean_spearman": {m: float(np.mean([per[w]["models"][m]["spearman"] for w in checked])) if checked
                              else None for m in MODELS},
            "method_order": {m: [sum(per[w]["models"][m]["method_order"][k] for w in checked)
                                 for k in ("n_right", "n_pairs")] for m in MODELS}}
    for tier in ("v2", "v2_no_lookahead"):
        d = [per[w]["models"][tier]["decisive"] for w in checked]
        n_rows = sum(per[w]["n_rows"] for w in checked)
        over[tier] = {"decisive": [sum(x["n_correct"] for x in d), sum(x["n_decisive"] for x in d)],
                      "unclear": sum(x["unclear_share"] * per[w]["n_rows"] for x, w in zip(d, checked)) / n_rows
                      if n_rows else None}
        over[tier]["forgetting_pooled"] = stats.spearman(shipped_gain(rows, as_checked(), tier,
                                                                      "d_regression"),
                                                         report_v2.target(rows, "d_regression")) if rows else None
    states_later = {w: status(w) for w in since_look8()}
    since = [w for w, st in states_later.items() if st == "checked"]
    later_rows = {w: rows_of(w) for w in since}
    later = {w: world_figures(w, later_rows[w]) for w in since}
    paired = (stats.paired_mean(*({w: later[w]["models"][m]["spearman"] for w in since}
                            for m in (LATER_PRODUCT, "accuracy_gap")), since, **BOOT) if since else None)
    every = rows + [r for w in since for r in later_rows[w]]  # every world checked since the seventh look
    forget = {tier: shipped_gain(every, as_checked(), tier, "d_regression") for tier in ("v2", "v2_no_lookahead")}
    forgetting = {tier: stats.spearman(x, report_v2.target(every, "d_regression")) if since else None
                  for tier, x in forget.items()}
    ships = {w: as_checked(w) for w in since}  # the model file as each world was checked with it
    picks = {w: recommended(later_rows[w], ships[w], guarded(w)) for w in since}
    whole = summary(later, picks, since)
    shown = scored([v for w in since for v in product_verdicts(later_rows[w], ships[w])],
                   [r for w in since for r in later_rows[w]]) if since else None  # the verdict column, as shown
    spans = intervals_shown(later_rows, ships)
    too_large = shipping_notes()  # met their specs, not shipped for another reason
    return json.loads(json.dumps(report_v2.stats_jsonable(
        {"worlds": states, "per_world": per, "over": over,
         "since_look8": {"ranking": LATER, "per_world": later, "mean_spearman": whole["mean_spearman"],
                         "method_order": whole["method_order"],
                         "paired_vs_g": paired, "excluded": [w for w, st in states_later.items() if st == "excluded"],
                         "not_shipped": [w for w in since if (report_look2.CHECKS / f"{w}.yaml").is_file()
                                         and w not in too_large],
                         "not_shipped_because": too_large,
                         "forgetting_pooled_all": forgetting,
                         "forgetting_by_set": check_world.forgetting_by_set(every, forget["v2"]),
                         "recommended": picks,
                         "recommended_size": recommended_size(picks),
                         "verdict": shown and {**{k: shown[k] for k in ("n_correct", "n_decisive", "unclear_share")},
                                               **spans, "delta": check_world.shipped()["delta"]},
                         "recommended_mean": whole["recommended_mean"],
                         "in_force": in_force(later, picks)}})))


def intervals_shown(rows_by_world: dict[str, list[dict]], ships: dict[str, dict]) -> dict:
    """The 95% intervals the product showed on these worlds' rows (each with its model file in ``ships``, as it then
    stood): the share that held the realised Δpass@1 (the issue asks 85-98%) and their median width, which is why the
    verdict (the interval against +-delta) is so rarely decisive."""
    inside, width = [], []
    for w, rows in rows_by_world.items():
        _, lo, hi = looks.tier_interval(ships[w]["models"], rows)
        y = report_v2.target(rows, "d_pass1")
        keep = np.isfinite(y) & np.isfinite(lo) & np.isfinite(hi)
        inside += list(((y >= lo) & (y <= hi))[keep])
        width += list((hi - lo)[keep])
    return {"coverage": float(np.mean(inside)) if inside else None,
            "median_width": float(np.median(width)) if width else None}


def summary(later: dict, picks: dict, worlds: list[str]) -> dict:
    """Over ``worlds`` (of ``later``, their figures, and ``picks``, their recommended rows): the mean per-world
    Spearman of each ranking, the method pairs right and in all, and the mean realised Δpass@1 of the rows the product
    and the ranking by G recommend, with the best row's, over the worlds where both recommend one."""
    both = [picks[w] for w in worlds if w in picks and picks[w]["product"] and picks[w]["by_g"]]
    return {"mean_spearman": {m: float(np.mean([later[w]["models"][m]["spearman"] for w in worlds])) if worlds
                              else None for m in (LATER_PRODUCT, *MODELS[1:])},
            "method_order": [sum(later[w]["models"][LATER_PRODUCT]["method_order"][k] for w in worlds)
                             for k in ("n_right", "n_pairs")],
            "recommended_mean": {k: float(np.mean([p[k]["realised"] if k != "best" else p[k] for p in both]))
                                 if both else None for k in ("product", "by_g", "best")}}


def in_force(later: dict, picks: dict) -> dict:
    """``summary`` over the worlds checked with the model file as it stands (after the last look that replaced a
    model; none of them in its record's ``checked_worlds``): the shipped models' own record on worlds none of them
    was fitted or chosen on."""
    shipped = check_world.shipped()
    last = looks.last_replacing_look(shipped)
    before = set(shipped["later_looks"][f"look{last}"]["replaced"]["checked_worlds"]) if last else set()
    worlds = [w for w in later if w not in before]
    return {"worlds": worlds, "since_look": last, **summary(later, picks, worlds)}


def _share(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.0%})" if b else f"{a}/{b} (n/a)"


def render(a: dict) -> str:
    f, o, t = report_v2.fmt, a["over"], TARGETS
    checked = [w for w, s in a["worlds"].items() if s == "checked"]
    lines = ["# The shipped predictor on worlds built after its last look", "",
             "Generated by `python benchmarks/validity/v2/report_checks.py` from the rows `check_world.py --keep` "
             "committed in `checks/` (plan: `plan_checks.yaml`, committed before the worlds it names were built; "
             "not a look: nothing was chosen or fitted on these worlds). Each world was built from its spec alone "
             "and checked with the model file as it is.", "",
             "Worlds: " + ", ".join(f"{w} ({s if s != 'pending' else 'not checked yet'})"
                                    for w, s in a["worlds"].items()) + ".", "",
             "## Spearman with the realised held-out Δpass@1, per world", "",
             f"| world | rows | product ranking ({ORDER}) | G alone | v2 | v2 without lookahead | method pairs right (product) "
             "| v2 forgetting Spearman |", "|---|---|---|---|---|---|---|---|"]
    for w in checked:
        m = a["per_world"][w]["models"]
        mo = m[PRODUCT]["method_order"]
        lines.append(f"| {w} | {a['per_world'][w]['n_rows']} | {f(m[PRODUCT]['spearman'])} | "
                     f"{f(m['accuracy_gap']['spearman'])} | {f(m['v2']['spearman'])} | "
                     f"{f(m['v2_no_lookahead']['spearman'])} | {mo['n_right']}/{mo['n_pairs']} | "
                     f"{f(m['v2']['other']['d_regression'])} |")
    ms, mo = o["mean_spearman"], o["method_order"]
    lines += ["", f"## Over the {len(checked)} checked worlds, against the issue's targets", "",
              f"| figure | product ranking ({ORDER}) | G alone | v2 | v2 without lookahead | target |", "|---|---|---|---|---|---|",
              "| mean of per-world Spearman | " + " | ".join(f(ms[m]) for m in MODELS) + f" | >= {t['spearman']:.2f} |",
              "| method pairs > 0.10 apart ordered right | " + " | ".join(_share(*mo[m]) for m in MODELS)
              + f" | >= {t['method_order']:.0%} |",
              "| decisive verdicts right | — | — | " + " | ".join(_share(*o[m]["decisive"]) for m in MODELS[2:])
              + f" | >= {t['decisive']:.0%} |",
              "| unclear share | — | — | " + " | ".join(
                  "n/a" if o[m]["unclear"] is None else f"{o[m]['unclear']:.0%}" for m in MODELS[2:])
              + f" | <= {t['unclear']:.0%} |",
              "| forgetting Spearman, pooled rows | — | — | " + " | ".join(f(o[m]["forgetting_pooled"])
                                                                       for m in MODELS[2:])
              + f" | >= {t['forgetting']:.2f} |", "",
              "G alone ties a configuration's methods (it is one number per configuration), so its method pairs are "
              "never ordered; the product breaks the tie by G's sign (`method_order` in the model file). The "
              "forgetting set is the world's second skill where its student has one (brine), else the task's easy "
              "levels."]
    s8 = a["since_look8"]
    if s8["per_world"]:
        cols = (LATER_PRODUCT, *MODELS[1:])
        lines += ["", f"## The ranking the eighth look shipped ({LATER}), on worlds built after it", "",
                  "Checked with the model file as it then stood (amendments 2 onwards of the plan; the ninth look's added "
                  "world, `plan_look9.yaml`)." + (
                      f" {listed(s8['excluded'])} {'was' if len(s8['excluded']) == 1 else 'were'} excluded by the "
                      "plan's level rule (" + ", ".join(f"`check_{w}.txt`" for w in s8["excluded"])
                      + "): nothing to check." if s8["excluded"] else "") + (
                      " The builds of " + listed(s8["not_shipped"]) + " missed their own specs' expectations ("
                      + ", ".join(f"`checks/{w}.yaml`" for w in s8["not_shipped"]) + "): each is checked all the "
                      "same, the plan's only exclusion being the level rule, and no such build is shipped."
                      if s8.get("not_shipped") else "") + "".join(
                      f" {w} (`checks/{w}.yaml`): {why}; it is checked and not shipped."
                      for w, why in s8.get("not_shipped_because", {}).items()), "",
                  f"| world | rows | product ranking ({LATER}) | G alone | v2 | v2 without lookahead | method pairs right "
                  "(product) |", "|---|---|---|---|---|---|---|"]
        for w, d in s8["per_world"].items():
            mo = d["models"][LATER_PRODUCT]["method_order"]
            lines.append(f"| {w} | {d['n_rows']} | " + " | ".join(f(d["models"][m]["spearman"]) for m in cols)
                         + f" | {mo['n_right']}/{mo['n_pairs']} |")
        lines.append("| mean | | " + " | ".join(f(s8["mean_spearman"][m]) for m in cols)
                     + f" | {s8['method_order'][0]}/{s8['method_order'][1]} |")
        d = s8["paired_vs_g"]
        lines += ["", f"The product ranking minus G alone, mean over the {d['n']} worlds: {d['estimate']:+.3f} "
                      f"[{d['lo']:+.3f}, {d['hi']:+.3f}] (95%, bootstrap over worlds, {BOOT['n_boot']} draws), above in "
                      f"{d['above']}, below in {d['below']}; the issue asks this difference above 0 at 95%: "
                      f"{'it is' if d['lo'] > 0 else 'it is not'}."] + in_force_words(s8["in_force"], LATER)
        rec = s8["recommended"]
        lines += ["", "What the product decides there: the row it recommends (the best-ranked with G > 0), its realised "
                  "Δpass@1 and its place among the world's rows (1: the best realised), beside the row the ranking by "
                  f"G before the eighth look ({ORDER}) recommends and the best row.", "",
                  f"| world | recommended ({LATER}) | realised (place) | by G ({ORDER}): realised (place) | best row |",
                  "|---|---|---|---|---|"]
        for w, d in rec.items():
            p, q = d["product"], d["by_g"]
            lines.append(f"| {w} | " + (f"{p['row']} | {p['realised']:+.3f} ({p['place']} of {d['n_rows']})"
                                        if p else "none (no G > 0) | —")
                         + (f" | {q['realised']:+.3f} ({q['place']})" if q else " | —") + f" | {d['best']:+.3f} |")
        lines.append("| mean | | " + " | ".join(f"{s8['recommended_mean'][k]:+.3f}" for k in ("product", "by_g", "best"))
                     + " |")
        lines += ["", "Across these worlds, the recommended row's predicted Δpass@1 (the decision panel's headline number) "
                      f"against what it realised: Spearman {f(s8['recommended_size'])}. " + size_words(s8)
                  + verdict_words(s8)]
        fp, n = s8["forgetting_pooled_all"], len(checked) + len(s8["per_world"])
        lines += ["", f"v2's forgetting Spearman pooled over the rows of all {n} worlds checked since the seventh look: "
                      f"{f(fp['v2'])} (v2 without lookahead {f(fp['v2_no_lookahead'])}; the plan's "
                      f"{len(checked)} alone {f(o['v2']['forgetting_pooled'])}, target >= {t['forgetting']:.2f}). "
                      + "Split by what the forgetting set is, " + forgetting_words(s8["forgetting_by_set"])]
    return "\n".join(lines) + "\n"


def sentence(a: dict) -> dict:
    """The model file's ``checks`` record: the figures the decision panel quotes, the ranking in force first (the
    eighth look's, on the worlds built after it); the plan's first five checks, of the rule before it, only where no
    world was checked since."""
    checked = [w for w, s in a["worlds"].items() if s == "checked"]
    ms, (right, pairs) = a["over"]["mean_spearman"], a["over"]["method_order"][PRODUCT]
    n = len(checked)
    first = (f"Checked on {n} world{'s' * (n != 1)} built after the seventh look, with the model file as it then "
             f"stood ({', '.join(checked)}; benchmarks/validity/v2/CHECKS.md): its ranking by G ({ORDER}) reached "
             f"a mean within-world Spearman with the realised pass@1 change of {report_v2.fmt(ms[PRODUCT])}, G "
             f"alone {report_v2.fmt(ms['accuracy_gap'])}, v2's predicted gain {report_v2.fmt(ms['v2'])}; it "
             f"ordered {right} of {pairs} method pairs right.")
    by_set = a["since_look8"]["forgetting_by_set"]
    return {"plan": "benchmarks/validity/v2/plan_checks.yaml", "report": "benchmarks/validity/v2/CHECKS.md",
            "worlds": checked, "summary": since_sentence(a["since_look8"]) or first,
            **({"forgetting": f"On the {sum(d['worlds'] for d in by_set.values())} worlds checked since the seventh "
                              "look, " + forgetting_words(by_set)}
               if by_set["second_skill"]["worlds"] else {})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when CHECKS.md differs from its rendering")
    args = ap.parse_args(argv)
    a = analysis()
    text, shipped = render(a), json.loads(SHIPPED.read_text())
    if args.check:
        if OUT.read_text() != text or shipped.get("checks") != sentence(a):
            print(f"report_checks: {OUT} or the checks of {SHIPPED} are stale: rerun python "
                  "benchmarks/validity/v2/report_checks.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    shipped["checks"] = sentence(a)
    SHIPPED.write_text(json.dumps(report_v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
