"""The lever study's report, generated from its runs: levers_analysis.json and RESULTS.md (never hand-typed).

    python benchmarks/validity/levers/report_levers.py [--from /work/runs/levers] [--bench FILE]
    python benchmarks/validity/levers/report_levers.py --look 3 [--from /work/runs/levers] [--recommend DIR]   (or 6, 8)
    python benchmarks/validity/levers/report_levers.py --look 4 [--from /work/runs/levers4]   (or 9, 10: its `out`)
    python benchmarks/validity/levers/report_levers.py --look 5 [--from /work/runs/levers5] [--recommend DIR]

The rows come from ``rows.py`` (per world and setting, against the initial student, with bootstrap intervals); a run
that did not finish is listed as such. The plan's questions and targets are answered from these numbers.

``--look 3`` to ``--look 10`` keep the committed analysis and add a later look (``later_looks``, ``target3_looks``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.levers.later_looks import (fifth_look, fourth_look, ninth_look, render_fifth_look,  # noqa: E402
                                                    render_fourth_look, render_ninth_look, render_third_look,
                                                    third_look)
from benchmarks.validity.levers.target3_looks import (render_seventh_look, render_tenth_look, seventh_look,  # noqa: E402
                                                      target_lines, tenth_look)
from benchmarks.validity.levers.rows import keeps_pass4, spearman, world_rows, world_table  # noqa: E402
from benchmarks.validity.levers.run_levers import load_plan, settings_for, worlds_of  # noqa: E402
from opsd_diag.core.stats import ci_text  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = Path("/work/runs/levers")


def recommendation(worlds: dict, recs: dict) -> dict:
    """Question 2: per world, the recommended mask against the realised settings."""
    rows = []
    for w, rec in recs.items():
        st = {k: v for k, v in worlds.get(w, {}).get("settings", {}).items() if v.get("status") == "ok"}
        if not st:
            continue
        best = max(st, key=lambda k: st[k]["d_pass1"]["estimate"])
        r = (rec.get("recommendation") or {}).get("setting")
        cands = [k for k in rec.get("settings", {}) if k in st and rec["settings"][k]["dll"].get("estimate") is not None]
        row = {"world": w, "recommended": r, "best_realised": best, "best_d_pass1": st[best]["d_pass1"]["estimate"],
               "all_d_pass1": st["all"]["d_pass1"]["estimate"] if "all" in st else None,
               "recommended_d_pass1": st[r]["d_pass1"]["estimate"] if r in st else None,
               "candidates_run": cands,
               "spearman_dll_vs_d_pass1": spearman([rec["settings"][k]["dll"]["estimate"] for k in cands],
                                                   [st[k]["d_pass1"]["estimate"] for k in cands]),
               "diagnosis": {k: {q: rec["settings"][k][q] for q in ("kept_share", "signal_share", "dll")}
                             for k in rec.get("settings", {})}}
        if row["recommended_d_pass1"] is not None:
            row["regret_vs_best"] = row["best_d_pass1"] - row["recommended_d_pass1"]
            row["gain_vs_all"] = row["recommended_d_pass1"] - (row["all_d_pass1"] or 0.0)
            row["within_0.02"] = row["regret_vs_best"] <= 0.02
        else:
            row["within_0.02"] = False
        rows.append(row)
    return {"answered": bool(rows), "rows": rows, "worlds_within_0.02": sum(r["within_0.02"] for r in rows)}


def answers(plan: dict, worlds: dict, bench: dict | None, recs: dict | None = None) -> dict:
    out = {}
    div = worlds.get("diversity", {}).get("settings", {})
    base = div.get("all", {})
    q1 = []
    if base.get("status") == "ok":
        for s, r in div.items():
            if s == "all" or r.get("status") != "ok":
                continue
            q1.append(keeps_pass4(s, r, base))
    out["q1_diversity"] = {"rows": q1, "any": any(r["meets"] for r in q1) if q1 else None}
    out["q2_recommendation"] = recommendation(worlds, recs) if recs else {
        "answered": False, "why": "the diagnosis' lever recommendation (issue 33, item 2) was not built when this "
                                  "report was generated"}
    out["q3_token_share"] = token_share(worlds)
    out["targets"] = {
        "t1_diversity_pass4": out["q1_diversity"]["any"],
        "t2_recommendation_within_0.02": (out["q2_recommendation"].get("worlds_within_0.02", 0) >= 3
                                          if out["q2_recommendation"]["answered"] else None),
        **masked_gain(worlds), **time_target(bench)}
    return out


def token_share(worlds: dict) -> list[dict]:
    """Question 3: per masked setting, its share of all's Δpass@1 against its kept share of the tokens."""
    q3 = []
    for w, wr in worlds.items():
        st = wr.get("settings", {})
        a = st.get("all", {})
        if a.get("status") != "ok":
            continue
        for s, r in st.items():
            if s == "all" or r.get("status") != "ok" or r["kept_share"] >= 0.999:
                continue
            g_all, g = a["d_pass1"]["estimate"], r["d_pass1"]["estimate"]
            ratio = g / g_all if abs(g_all) > 1e-12 else math.nan
            q3.append({"world": w, "setting": s, "kept_share": r["kept_share"], "gain_share": ratio,
                       "gain_per_kept_token_vs_all": ratio / r["kept_share"] if r["kept_share"] else math.nan})
    return q3


def masked_gain(worlds: dict) -> dict:
    """The third target's gain half: entropy_top50 (<= 50% of the tokens) keeps >= 90% of all's Δpass@1 per world.
    Where all-token training gained nothing (Δpass@1 <= 0) there is no gain to lose: the mask must do at least as
    well as all tokens."""
    t3 = []
    for w, wr in worlds.items():
        st = wr.get("settings", {})
        a, m = st.get("all", {}), st.get("entropy_top50", {})
        if a.get("status") == "ok" and m.get("status") == "ok":
            g_all, g = a["d_pass1"]["estimate"], m["d_pass1"]["estimate"]
            t3.append({"world": w, "kept_share": m["kept_share"], "d_pass1_all": g_all, "d_pass1_masked": g,
                       "no_gain": g_all <= 0, "loses_at_most_10pct": bool(g >= g_all - 0.1 * max(g_all, 0.0))})
    return {"t3_masked_gain": t3, "t3_masked_gain_met": bool(t3) and all(r["loses_at_most_10pct"] for r in t3)}


def time_target(bench: dict | None) -> dict:
    """The time target's fields: entropy_top50's time per training step (sampling + step) over all's."""
    ratio = None if bench is None else bench["ratio_sampling_plus_step"]["entropy_top50"]
    return {"t3_time_ratio": ratio, "t3_time_met": None if ratio is None else ratio <= 0.7}


def render(a: dict) -> str:
    L = ["# The lever study (issue 33): results", "",
         "Generated by `benchmarks/validity/levers/report_levers.py` from the runs of `run_levers.py` "
         f"(plan: `plan.yaml`, amendments 1-{11 if 'tenth_look' in a else 10 if 'ninth_look' in a else 9 if 'eighth_look' in a else 8 if 'seventh_look' in a else 7 if 'sixth_look' in a else 6}); every number below comes from `levers_analysis.json`. The first "
         "look (commit 3c22b15) had every row of the first four worlds but those marked second look, and no answer "
         "to question 2." + (" The worlds marked third look (amendment 4: a second recommendation rule, judged on "
                             "worlds this study had not run) were added by `report_levers.py --look 3`."
                             if "third_look" in a else "")
         + (" Section 1b is the fourth look (amendment 5: three more settings for target 1, `--look 4`)."
            if "fourth_look" in a else "")
         + (" Section 2c is the fifth look (amendment 6: the schedule recommendation against fixed shares, "
            "`--look 5`)." if "fifth_look" in a else "")
         + (" The worlds marked sixth look and section 2d are the sixth (amendment 7: rule 2 unchanged, on the "
            "remaining worlds, `--look 6`)." if "sixth_look" in a else "")
         + (" Section 3b is the seventh (amendment 8: target 3 with a position window, `--look 7`)."
            if "seventh_look" in a else "")
         + (" The worlds marked eighth look and section 2e are the eighth (amendment 9: rule 2 unchanged, on the two "
            "worlds built since, `--look 8`)." if "eighth_look" in a else "")
         + (" Section 1c is the ninth (amendment 10: target 1's two near misses on fresh seeds, `--look 9`)."
            if "ninth_look" in a else "")
         + (" Section 3c is the tenth (amendment 11: target 3 with a rollout-level mask, `--look 10`)."
            if "tenth_look" in a else ""), "",
         f"Runs: {a['runs']['finished']} of {a['runs']['planned']} finished"
         + (f"; third look {a['runs']['third_look']['finished']} of {a['runs']['third_look']['planned']}"
            if "third_look" in a["runs"] else "")
         + "".join(f"; {k.replace('_', ' ')} {a['runs'][k]['finished']} of {a['runs'][k]['planned']}"
                   for k in ("sixth_look", "eighth_look") if k in a["runs"]) + ".", ""]
    for w, wr in a["worlds"].items():
        L += [f"## {w}{ {3: ' (third look)', 6: ' (sixth look)', 8: ' (eighth look)'}.get(wr.get('look'), '')}", ""]
        if wr.get("status") != "ok":
            L += [f"Not analysed: {wr.get('status')}.", ""]
            continue
        L += world_table(wr)
    q = a["answers"]
    L += ["## Questions", "", "**1. Does any lever keep pass@4 while pass@1 rises in `diversity`?**", ""]
    if q["q1_diversity"]["rows"]:
        for r in q["q1_diversity"]["rows"]:
            L.append(f"- {r['setting']}: Δpass@1 {r['d_pass1']:+.3f} (all {r['d_pass1_all']:+.3f}), Δpass@4 − all's "
                     f"{ci_text(r['d_pass4_minus_all'], 3)}: {'meets' if r['meets'] else 'does not meet'} the target")
        L += ["", f"Answer: {'yes' if q['q1_diversity']['any'] else 'no'}.", ""]
    else:
        L += ["Not answered: the diversity runs did not finish.", ""]
    if "fourth_look" in a:
        L += render_fourth_look(a["fourth_look"])
    if "ninth_look" in a:
        L += render_ninth_look(a["ninth_look"])
    L += ["**2. Does the diagnosis' lever recommendation pick the best realised setting?**", ""]
    q2 = q["q2_recommendation"]
    if not q2["answered"]:
        L += [f"Not answered: {q2['why']}.", ""]
    else:
        L += ["Computed after the first look (plan amendment 3) on the worlds study's stored diagnoses "
              "(`recommend_levers.py`), the rule (largest lookahead Δll) committed before any result.", "",
              "| world | recommended | its Δpass@1 | best realised | its Δpass@1 | all's Δpass@1 | regret | "
              "Spearman(Δll, Δpass@1) over the candidates run |", "|---|---|---|---|---|---|---|---|"]
        for r in q2["rows"]:
            rd = "not run" if r["recommended_d_pass1"] is None else f"{r['recommended_d_pass1']:+.3f}"
            rg = "—" if r.get("regret_vs_best") is None else f"{r['regret_vs_best']:+.3f}"
            sp = r["spearman_dll_vs_d_pass1"]
            L.append(f"| {r['world']} | {r['recommended'] or 'none (no finite lookahead Δll)'} | {rd} | "
                     f"{r['best_realised']} | {r['best_d_pass1']:+.3f} | {r['all_d_pass1']:+.3f} | {rg} | "
                     f"{'n/a' if sp != sp else f'{sp:+.2f}'} (n = {len(r['candidates_run'])}) |")
        L += ["", "The diagnosis' lever quantities per candidate (kept share of tokens, of the summed |signal|, "
              "lookahead Δll):", ""]
        for r in q2["rows"]:
            parts = [f"{k} {v['kept_share']:.2f} / {v['signal_share']:.2f} / "
                     + ("n/a" if v["dll"].get("estimate") is None else f"{v['dll']['estimate']:+.4f}")
                     for k, v in r["diagnosis"].items()]
            L.append(f"- {r['world']}: " + "; ".join(parts))
        L.append("")
    if "third_look" in a:
        L += render_third_look(a["third_look"])
    if "fifth_look" in a:
        L += render_fifth_look(a["fifth_look"])
    for k in ("sixth_look", "eighth_look"):
        if k in a:
            L += render_third_look(a[k])
    L += [
          "**3. What share of tokens carries the gain?**", "",
          "| world | setting | kept share | gain share (Δpass@1 / all's) | gain per kept token vs all |", "|---|---|---|---|---|"]
    for r in q["q3_token_share"]:
        L.append(f"| {r['world']} | {r['setting']} | {r['kept_share']:.3f} | {r['gain_share']:+.2f} | "
                 f"{r['gain_per_kept_token_vs_all']:+.2f} |")
    t = q["targets"]
    t3 = "; ".join(f"{r['world']} {r['d_pass1_masked']:+.3f} vs {r['d_pass1_all']:+.3f}"
                   + (" (all tokens gained nothing: the mask must not do worse)" if r.get("no_gain") else "")
                   for r in t["t3_masked_gain"])
    shares = [(r["world"], r["diagnosis"]["entropy_top50"]["signal_share"]) for r in q2.get("rows", [])
              if "entropy_top50" in r.get("diagnosis", {})]
    L += ["", "A 10–15× larger gain per kept token than all-token training would show as a last column of 10–15."]
    if shares:
        L += ["", "The diagnosis measured the summed |signal| on entropy_top50's kept half at "
              + ", ".join(f"{w} {v:.3f}" for w, v in shares) + " of the total. Reading (not a measurement): with "
              "the JSD losses of these rows, the low-entropy half carries almost no signal and AdamW rescales each "
              "parameter's step by its own gradient scale, so dividing by the kept count instead of every token "
              "changes little: the masked run trains nearly the model all-token training does."]
    if "seventh_look" in a:
        L += [""] + render_seventh_look(a["seventh_look"])[:-1]
    if "tenth_look" in a:
        L += [""] + render_tenth_look(a["tenth_look"])[:-1]
    L += ["",
          "## Targets", "",
          f"- diversity, a setting with Δpass@1 ≥ all's and its Δpass@4 interval above all's: "
          f"{'met' if t['t1_diversity_pass4'] else 'not met'}"
          + (f"; fourth look (three more settings, confirmed on new seeds): "
             f"{'met' if a['fourth_look']['met'] else 'not met'}" if "fourth_look" in a else "")
          + (f"; ninth look (the two near misses on fresh seeds): {'met' if a['ninth_look']['met'] else 'not met'}"
             if "ninth_look" in a else "") + ".",
          ("- recommended setting within 0.02 of the best in ≥ 3 of 4 worlds: not evaluated (no recommendation)."
           if t["t2_recommendation_within_0.02"] is None else
           f"- recommended setting within 0.02 of the best in ≥ 3 of 4 worlds: "
           f"{'met' if t['t2_recommendation_within_0.02'] else 'not met'} "
           f"({q['q2_recommendation']['worlds_within_0.02']} of {len(q['q2_recommendation']['rows'])})."),
          *([f"- the same, third look (rule 2, judged on the worlds this study had not run): "
             f"{'met' if a['third_look']['met'] else 'not met'} ({a['third_look']['rule2_within_0.02_new']} of "
             f"{a['third_look']['judged_worlds']}); rule 2 on the four first worlds (seen, not judged): "
             f"{a['third_look']['rule2_within_0.02_seen']} of {a['third_look']['seen_worlds']}."]
            if "third_look" in a else []),
          *([f"- the same, sixth look (rule 2 unchanged, on the remaining worlds the study had not run): "
             f"{'met' if a['sixth_look']['met'] else 'not met'} ({a['sixth_look']['rule2_within_0.02_new']} of "
             f"{a['sixth_look']['judged_worlds']}); over the {a['sixth_look']['pooled_with_third']['worlds']} worlds of "
             f"the third and sixth looks {a['sixth_look']['pooled_with_third']['within']} of "
             f"{a['sixth_look']['pooled_with_third']['worlds']} (the issue asks 3 of 4)."]
            if "sixth_look" in a else []),
          *([f"- the same, eighth look (rule 2 unchanged, on the two worlds built since): "
             f"{'met' if a['eighth_look']['met'] else 'not met'} ({a['eighth_look']['rule2_within_0.02_new']} of "
             f"{a['eighth_look']['judged_worlds']}); over the {a['eighth_look']['pooled_with_third']['worlds']} worlds of "
             f"the third, sixth and eighth looks {a['eighth_look']['pooled_with_third']['within']} of "
             f"{a['eighth_look']['pooled_with_third']['worlds']} (the issue asks 3 of 4: "
             f"{'met' if a['eighth_look']['pooled_with_third']['met'] else 'not met'}); rule 2 picked all tokens in "
             f"{a['eighth_look']['pooled_with_third']['rule2_picked_all']} of them, and always training all tokens is "
             f"within 0.02 of the best in {a['eighth_look']['pooled_with_third']['all_within_0.02']}: the "
             "recommendation does no better than that default."]
            if "eighth_look" in a else []),
          *([f"- the schedule recommendation (fifth look, rule 2's share within 0.02 of the best fixed share in every "
             f"world it ran): {'met' if a['fifth_look']['met'] else 'not met'} ({a['fifth_look']['rule2_within_0.02']} "
             f"of {a['fifth_look']['n_worlds']}, {a['fifth_look']['rule2_blind']} of them by amendment 6b's reading "
             f"of a diagnosis that could not compare; rule 1 {a['fifth_look']['rule1_within_0.02']})."]
            if "fifth_look" in a else []),
          f"- a ≤ 50%-token mask (entropy_top50) loses ≤ 10% of all's gain in every world: "
          f"{'met' if t['t3_masked_gain_met'] else 'not met'} "
          f"({t3})."]
    if t["t3_time_ratio"] is not None:
        b = a["bench"]
        r = b["ratio_step"]
        L.append(f"- its time per step ≤ 0.7× all's: {'met' if t['t3_time_met'] else 'not met'}: sampling + step "
                 f"{t['t3_time_ratio']:.2f}×, the step alone {r['entropy_top50']:.2f}× (median of {b['repeats']} "
                 f"side-by-side repeats, `bench_step.py`, kept share {b['kept_share']['entropy_top50']:.2f}). In the "
                 f"same run: the decoders alone (no LM head, no loss: what a mask that reads the student's logits "
                 f"cannot skip) {r['decoders_only']:.2f}× of the all-token step; advantage_top20 (kept share "
                 f"{b['kept_share']['advantage_top20']:.2f}) {r['advantage_top20']:.2f}×; correct_only, which drops "
                 f"the rollouts it does not keep before any model runs (kept share "
                 f"{b['kept_share']['correct_only']:.2f}), {r['correct_only']:.2f}× (sampling + step "
                 f"{b['ratio_sampling_plus_step']['correct_only']:.2f}×).")
    L += target_lines(a)
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="root", type=Path, default=ROOT)
    ap.add_argument("--bench", type=Path, help="bench_step.py's output (default ROOT/bench_step.json)")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--recommend", type=Path, help="recommend_levers.py's outputs (default ROOT/recommend)")
    ap.add_argument("--look", type=int, default=1, choices=(1, 3, 4, 5, 6, 7, 8, 9, 10),
                    help="keep the committed analysis and add the third look's worlds and rules (3, amendment 4) or "
                         "the fourth look's settings (4, amendment 5; runs from its plan's `out` by default)")
    ap.add_argument("--targets", action="store_true",
                    help="keep the committed analysis, read its targets again from its rows (after a change to how a "
                         "target is read; the runs may be gone)")
    ap.add_argument("--bench-only", action="store_true",
                    help="keep the committed analysis' runs and answers (the runs may be gone), take a new --bench")
    args = ap.parse_args(argv)
    if args.bench_only:
        return rebench(args.out, json.loads(args.bench.read_text()))
    if args.targets:
        return update(args.out, lambda a: a["answers"]["targets"].update(masked_gain(a["worlds"])) or "targets read again")
    if args.look in (3, 6, 8):
        return look3(args.out, args.root, args.recommend or args.root / f"recommend{args.look}", args.look)
    if args.look in (4, 5, 7, 9, 10):  # a later look with its own runs (its plan's `out` by default)
        key = {4: "fourth_look", 5: "fifth_look", 7: "seventh_look", 9: "ninth_look", 10: "tenth_look"}[args.look]
        root = Path(load_plan()[key]["out"]) if args.root == ROOT else args.root
        bench = args.bench or root / "bench_step.json"
        make = {4: lambda a: fourth_look(load_plan(), root, a["worlds"]["diversity"]["settings"].get("all")),
                5: lambda a: fifth_look(load_plan(), root, args.recommend or root / "recommend"),
                7: lambda a: seventh_look(load_plan(), root, json.loads(bench.read_text()) if bench.is_file() else None,
                                          a["worlds"]),
                9: lambda a: ninth_look(load_plan(), root),
                10: lambda a: tenth_look(load_plan(), root, json.loads(bench.read_text()) if bench.is_file() else None,
                                         a["worlds"])}[args.look]
        return add_look(args.out, key, make)
    plan = load_plan()
    worlds = {w: world_rows(plan, args.root, w) for w in plan["worlds"]}
    rdir = args.recommend or args.root / "recommend"
    recs = {w: json.loads((rdir / f"{w}.json").read_text()) for w in plan["worlds"] if (rdir / f"{w}.json").is_file()}
    bench_path = args.bench or args.root / "bench_step.json"
    bench = json.loads(bench_path.read_text()) if bench_path.is_file() else None
    planned = sum(len(settings_for(plan, w)) * len(plan["training"]["seeds"]) for w in plan["worlds"])
    finished = sum(len(r.get("seeds", [])) for wr in worlds.values() for r in wr.get("settings", {}).values())
    analysis = {"plan": "benchmarks/validity/levers/plan.yaml", "runs": {"planned": planned, "finished": finished},
                "worlds": worlds, "bench": None if bench is None else {k: v for k, v in bench.items() if k != "raw"},
                "answers": answers(plan, worlds, bench, recs or None)}
    (args.out / "levers_analysis.json").write_text(json.dumps(analysis, indent=1, default=float) + "\n")
    (args.out / "RESULTS.md").write_text(render(analysis))
    print(f"wrote {args.out / 'RESULTS.md'} ({finished} of {planned} runs)")
    return 0


def update(out: Path, change) -> int:
    """Apply ``change(analysis) -> message`` to the committed analysis, then write it and RESULTS.md again."""
    path = out / "levers_analysis.json"
    analysis = json.loads(path.read_text())
    message = change(analysis)
    path.write_text(json.dumps(analysis, indent=1, default=float) + "\n")
    (out / "RESULTS.md").write_text(render(analysis))
    print(f"wrote {out / 'RESULTS.md'} ({message})")
    return 0


def look3(out: Path, root: Path, rdir: Path, look: int = 3) -> int:
    """The committed analysis with the third (or sixth) look added: its worlds' runs, both rules on every world
    ``recommend_levers.py`` looked at, the judgement on the look's own worlds."""
    plan = load_plan()
    new = list(worlds_of(plan, look))
    key = {3: "third_look", 6: "sixth_look", 8: "eighth_look"}[look]

    def change(analysis: dict) -> str:
        for w in new:
            analysis["worlds"][w] = {**world_rows(plan, root, w), "look": look}
        recs = {w: json.loads((rdir / f"{w}.json").read_text()) for w in [*new, *worlds_of(plan)]
                if (rdir / f"{w}.json").is_file()}
        analysis[key] = third_look(plan, analysis["worlds"], recs, look)
        if look in (6, 8):  # the count over every look's new worlds so far, against the 3-of-4 rate
            looks = [analysis[k] for k in ("third_look", "sixth_look", "eighth_look")[:{6: 2, 8: 3}[look]]]
            n, k = sum(t["judged_worlds"] for t in looks), sum(t["rule2_within_0.02_new"] for t in looks)
            analysis[key]["pooled_with_third"] = {"worlds": n, "within": k, **(baseline(looks, k, n) if look == 8 else {})}
        planned = sum(len(settings_for(plan, w)) * len(plan["training"]["seeds"]) for w in new)
        finished = sum(len(r.get("seeds", [])) for w in new for r in analysis["worlds"][w].get("settings", {}).values())
        analysis["runs"][key] = {"planned": planned, "finished": finished}
        analysis["answers"]["q3_token_share"] = token_share(analysis["worlds"])
        analysis["answers"]["targets"].update(masked_gain(analysis["worlds"]))
        return f"{key.replace('_', ' ')}: {finished} of {planned} runs"
    return update(out, change)


def baseline(looks: list[dict], within: int, n: int) -> dict:
    """The eighth look's reading of the count (met: at least 3 of 4), beside the trivial recommendation "always all
    tokens" on the same judged worlds (how often rule 2 picked it, how often it was itself within 0.02 of the best)."""
    judged = [r for t in looks for r in t["rows"] if r["new"] and r["status"] == "ok"]
    return {"met": within >= 0.75 * n, "rule2_picked_all": sum(r["rule2"]["setting"] == "all" for r in judged),
            "all_within_0.02": sum(r["best_d_pass1"] - r["all_d_pass1"] <= 0.02 for r in judged)}


def add_look(out: Path, key: str, make) -> int:
    """The committed analysis with a later look added under ``key``, computed by ``make(analysis)``."""
    def change(analysis: dict) -> str:
        analysis[key] = make(analysis)
        met = analysis[key]["met"]
        return f"{key.replace('_', ' ')}: {'met' if (met['target'] if isinstance(met, dict) else met) else 'not met'}"
    return update(out, change)


def rebench(out: Path, bench: dict) -> int:
    """The committed analysis with a new time measurement: its ``bench`` and time target, nothing else."""
    def change(analysis: dict) -> str:
        analysis["bench"] = {k: v for k, v in bench.items() if k != "raw"}
        analysis["answers"]["targets"].update(time_target(bench))
        return "new time measurement"
    return update(out, change)


if __name__ == "__main__":
    sys.exit(main())
