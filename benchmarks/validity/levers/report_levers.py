"""The lever study's report, generated from its runs: levers_analysis.json and RESULTS.md (never hand-typed).

    python benchmarks/validity/levers/report_levers.py [--from /work/runs/levers] [--bench FILE]
    python benchmarks/validity/levers/report_levers.py --look 3 [--from /work/runs/levers] [--recommend DIR]
    python benchmarks/validity/levers/report_levers.py --look 4 [--from /work/runs/levers4]
    python benchmarks/validity/levers/report_levers.py --look 5 [--from /work/runs/levers5] [--recommend DIR]

Per (world, setting): the final evaluation of each seed's run against the initial student (the ``all``
seed-0 run's step-0 evaluation; every run shares it); held-out Δpass@1 and Δpass@4 per problem, averaged
over the seeds that finished, with a 95% percentile bootstrap over problems (2000 draws, seed 0); the
forgetting set's Δpass@1 and the KL to the initial student as seed means (with each seed's value); the
kept share of tokens over the run. Differences against ``all`` are paired by problem. A run that did not
finish is listed as such. The plan's questions and targets are answered from these numbers.

``--look 3`` (amendment 4) keeps the committed analysis of the first two looks (their runs may be gone), adds the
third look's worlds from their runs, and both recommendation rules on every world from ``recommend_levers.py
--look 3`` (default ``ROOT/recommend3``): rule 2 judged on the third look's worlds only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.levers.run_levers import load_plan, settings_for, worlds_of  # noqa: E402
from opsd_diag.core.stats import pass_at_k  # noqa: E402

HERE = Path(__file__).resolve().parent
N_BOOT, SEED = 2000, 0
ROOT = Path("/work/runs/levers")


def _records(run: Path) -> tuple[list[dict], list[dict]] | None:
    status = run / "status.json"
    if not status.is_file() or json.loads(status.read_text()).get("status") != "finished":
        return None
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r["kind"] == "train"], [r for r in recs if r["kind"] == "eval"]


def per_problem(ev: dict, k: int) -> dict[int, float]:
    return {int(i): pass_at_k(int(n), int(c), k) for i, n, c in ev["per_problem"]}


def boot(values: np.ndarray) -> dict:
    """Mean with a percentile bootstrap over the rows (problems)."""
    rng = np.random.default_rng(SEED)
    idx = rng.integers(0, len(values), (N_BOOT, len(values)))
    means = values[idx].mean(axis=1)
    return {"estimate": float(values.mean()), "lo": float(np.percentile(means, 2.5)),
            "hi": float(np.percentile(means, 97.5)), "n": int(len(values))}


def world_rows(plan: dict, root: Path, world: str, settings: list[str] | None = None,
               seeds: list[int] | None = None) -> dict:
    """Per setting (default the plan's for ``world``), over ``seeds`` (default the plan's), against the initial
    student (the ``all`` run of the plan's first seed, evaluated at step 0)."""
    wdir = root / world / "runs"
    first = _records(wdir / f"all__s{plan['training']['seeds'][0]}")
    initial = next((e for e in first[1] if e["step"] == 0), None) if first else None
    if initial is None:
        return {"status": "no initial evaluation (the all seed-0 run did not finish)"}
    init = {k: per_problem(initial, k) for k in (1, 4)}
    problems = sorted(init[1])
    rows, deltas = {}, {}
    for s in settings or settings_for(plan, world):
        done, d1, d4, forget, kl, kept, tokens = [], [], [], [], [], 0, 0
        for seed in seeds or plan["training"]["seeds"]:
            got = _records(wdir / f"{s}__s{seed}")
            if got is None:
                continue
            train, evals = got
            final = max(evals, key=lambda e: e["step"])
            done.append(seed)
            for k, acc in ((1, d1), (4, d4)):
                pp = per_problem(final, k)
                acc.append([pp[i] - init[k][i] for i in problems])
            forget.append(final["regression_pass@1"] - initial["regression_pass@1"])
            kl.append(final["kl_to_initial"])
            kept += sum(r.get("kept_tokens", r["tokens"]) for r in train)
            tokens += sum(r["tokens"] for r in train)
        if not done:
            rows[s] = {"status": "not run or not finished"}
            continue
        deltas[s] = {1: np.mean(d1, axis=0), 4: np.mean(d4, axis=0)}
        rows[s] = {"status": "ok", "second_look": s in (plan.get("second_look") or {}).get("settings", {})
                   and world in plan["second_look"]["worlds"], "seeds": done, "d_pass1": boot(deltas[s][1]),
                   "d_pass4": boot(deltas[s][4]), "d_forgetting": {"estimate": float(np.mean(forget)), "per_seed": forget},
                   "kl_to_initial": {"estimate": float(np.mean(kl)), "per_seed": kl},
                   "kept_share": kept / tokens, "kept_tokens": kept, "tokens": tokens}
    for s, d in deltas.items():
        if s != "all" and "all" in deltas:
            rows[s]["vs_all"] = {f"d_pass{k}": boot(d[k] - deltas["all"][k]) for k in (1, 4)}
    return {"status": "ok", "initial": {k: initial[k] for k in ("pass@1", "pass@4", "regression_pass@1")},
            "n_problems": len(problems), "settings": rows}


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho (average ranks for ties), NaN below 3 pairs or without spread."""
    if len(x) < 3:
        return math.nan
    rx, ry = (np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(float) for v in (x, y))
    for r, v in ((rx, np.asarray(x)), (ry, np.asarray(y))):
        for val in set(v.tolist()):  # average ranks of ties
            r[v == val] = r[v == val].mean()
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


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


def keeps_pass4(name: str, r: dict, base: dict) -> dict:
    """Target 1's test of one setting against all tokens: Δpass@1 at least all's, the paired Δpass@4 difference's
    interval above 0."""
    ok = r["d_pass1"]["estimate"] >= base["d_pass1"]["estimate"] and r["vs_all"]["d_pass4"]["lo"] > 0
    return {"setting": name, "d_pass1": r["d_pass1"]["estimate"], "d_pass1_all": base["d_pass1"]["estimate"],
            "d_pass4_minus_all": r["vs_all"]["d_pass4"], "meets": ok}


def fourth_look(plan: dict, root: Path, committed_all: dict | None) -> dict:
    """Amendment 5: target 1's test on the fourth look's settings (seeds 0-1), each that meets it again on the
    confirmation seeds; all-token training's rerun beside the first look's committed Δpass@1."""
    four = plan["fourth_look"]
    world = next(iter(four["worlds"]))
    first = world_rows(plan, root, world, list(four["settings"]), four["seeds"])
    st = first.get("settings", {})
    tests = [keeps_pass4(s, r, st["all"]) for s, r in st.items()
             if s != "all" and r.get("status") == "ok" and st.get("all", {}).get("status") == "ok"]
    confirm = {}
    for t in tests:
        if t["meets"]:
            again = world_rows(plan, root, world, ["all", t["setting"]], four["confirmation_seeds"])
            a = again.get("settings", {})
            ok = all(a.get(k, {}).get("status") == "ok" for k in ("all", t["setting"]))
            confirm[t["setting"]] = keeps_pass4(t["setting"], a[t["setting"]], a["all"]) if ok else {
                "meets": False, "status": "the confirmation runs did not finish"}
    return {"world": world, "rows": first, "tests": tests, "confirmation": confirm,
            "met": any(c["meets"] for c in confirm.values()),
            "all_rerun_vs_committed": {"rerun": st.get("all", {}).get("d_pass1", {}).get("estimate"),
                                       "committed": (committed_all or {}).get("d_pass1", {}).get("estimate")}}


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def share_of(setting: str) -> float:
    """The fifth look's settings as shares of the solution: ``all`` is the whole solution."""
    return 1.0 if setting == "all" else float(setting.split("_")[1])


def fifth_look(plan: dict, root: Path, rdir: Path) -> dict:
    """Amendment 6: per world, the realised fixed shares against both schedule rules' picks (rule 2: the stored
    recommendation; rule 1: the share with the largest finite Δll), judged on every world."""
    five = plan["fifth_look"]
    out = {}
    for world in five["worlds"]:
        wr = world_rows(plan, root, world, list(five["settings"]), five["seeds"])
        path = rdir / f"{world}.json"
        if wr.get("status") != "ok" or not path.is_file():
            out[world] = {"status": wr.get("status") if wr.get("status") != "ok" else "no schedule diagnosis",
                          "rows": wr}
            continue
        sched = json.loads(path.read_text())
        done = {share_of(k): v["d_pass1"]["estimate"] for k, v in wr["settings"].items() if v.get("status") == "ok"}
        diag = {r["share"]: r for r in sched["rows"]}
        best = max(done, key=done.get)
        r1 = [(r["dll"]["estimate"], r["share"]) for r in sched["rows"] if r.get("dll") and _finite(r["dll"].get("estimate"))]
        picks = {"rule2": (sched.get("recommendation") or {}).get("share"), "rule1": max(r1)[1] if r1 else None}
        shares = sorted(s for s in done if s in diag)
        out[world] = {"status": "ok", "rows": wr, "best_share": best, "best_d_pass1": done[best],
                      "rule2_basis": (sched.get("recommendation") or {}).get("basis"),
                      **{k: {"share": v, "d_pass1": done.get(v),
                             "within_0.02": v in done and done[best] - done[v] <= 0.02} for k, v in picks.items()},
                      "diagnosis": {str(f): {"dll": diag[f].get("dll"), "dll_vs_full": diag[f].get("dll_vs_full"),
                                             "gap": diag[f].get("gap")} for f in shares},
                      "spearman_dll": spearman([(diag[f].get("dll") or {}).get("estimate") for f in shares],
                                               [done[f] for f in shares])
                      if all(_finite((diag[f].get("dll") or {}).get("estimate")) for f in shares) else math.nan,
                      "spearman_gap": spearman([(diag[f].get("gap") or {}).get("estimate") for f in shares],
                                               [done[f] for f in shares])
                      if all(_finite((diag[f].get("gap") or {}).get("estimate")) for f in shares) else math.nan}
    ok = [w for w in out.values() if w["status"] == "ok"]
    blind = [w for w in ok if (w.get("rule2_basis") or "").startswith("no measurement prompt")]
    return {"worlds": out, "rule2_within_0.02": sum(w["rule2"]["within_0.02"] for w in ok),
            "rule2_blind": len(blind), "rule2_blind_within_0.02": sum(w["rule2"]["within_0.02"] for w in blind),
            "rule1_within_0.02": sum(w["rule1"]["within_0.02"] for w in ok), "n_worlds": len(five["worlds"]),
            "met": len(ok) == len(five["worlds"]) and all(w["rule2"]["within_0.02"] for w in ok)}


def rule1(rec: dict) -> str | None:
    """The first rule (committed in e37612f): the candidate with the largest finite lookahead Δll."""
    ok = {k: v["dll"]["estimate"] for k, v in rec.get("settings", {}).items() if _finite(v["dll"].get("estimate"))}
    return max(ok, key=ok.get) if ok else None


def third_look(plan: dict, worlds: dict, recs: dict) -> dict:
    """Amendment 4: per world, both rules' picks against the realised settings; judged on the third look's worlds."""
    new = set(worlds_of(plan, 3))
    rows = []
    for w, rec in recs.items():
        st = {k: v for k, v in worlds.get(w, {}).get("settings", {}).items() if v.get("status") == "ok"}
        if not st or rec.get("status") != "ok":
            rows.append({"world": w, "new": w in new, "status": "no realised runs or no lever lookahead"})
            continue
        best = max(st, key=lambda k: st[k]["d_pass1"]["estimate"])
        row = {"world": w, "new": w in new, "status": "ok", "best_realised": best,
               "best_d_pass1": st[best]["d_pass1"]["estimate"], "all_d_pass1": st["all"]["d_pass1"]["estimate"]}
        for name, pick in (("rule2", rec["recommendation"]["setting"]), ("rule1", rule1(rec))):
            got = st.get(pick, {}).get("d_pass1", {}).get("estimate")
            row[name] = {"setting": pick, "d_pass1": got,
                         "regret_vs_best": None if got is None else row["best_d_pass1"] - got,
                         "gain_vs_all": None if got is None else got - row["all_d_pass1"],
                         "within_0.02": got is not None and row["best_d_pass1"] - got <= 0.02}
        cands = [k for k in rec["settings"] if k in st and _finite(rec["settings"][k]["dll"].get("estimate"))]
        row["spearman_dll_vs_d_pass1"] = spearman([rec["settings"][k]["dll"]["estimate"] for k in cands],
                                                  [st[k]["d_pass1"]["estimate"] for k in cands])
        row["n_candidates_run"] = len(cands)
        row["n_prompts_finite_dll"] = rec["settings"]["all"]["dll"].get("n_prompts")  # mixed-outcome prompts
        row["diagnosis"] = {k: {"dll": v["dll"], "dll_vs_all": v.get("dll_vs_all"), "kept_share": v["kept_share"]}
                            for k, v in rec["settings"].items()}
        rows.append(row)
    judged = [r for r in rows if r["new"]]
    within = sum(r.get("rule2", {}).get("within_0.02", False) for r in judged)
    regret = {k: [r[k]["regret_vs_best"] for r in judged if r.get(k, {}).get("regret_vs_best") is not None]
              for k in ("rule1", "rule2")}
    return {"rows": rows, "judged_worlds": len(judged), "rule2_within_0.02_new": within,
            "rule1_within_0.02_new": sum(r.get("rule1", {}).get("within_0.02", False) for r in judged),
            "mean_regret_new": {k: {"mean": float(np.mean(v)) if v else None, "n": len(v)} for k, v in regret.items()},
            "met": bool(judged) and len(judged) == len(new) and within == len(judged),
            "rule2_within_0.02_seen": sum(r.get("rule2", {}).get("within_0.02", False) for r in rows if not r["new"]),
            "seen_worlds": sum(1 for r in rows if not r["new"])}


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
    """The third target's gain half: entropy_top50 (<= 50% of the tokens) keeps >= 90% of all's Δpass@1 per world."""
    t3 = []
    for w, wr in worlds.items():
        st = wr.get("settings", {})
        a, m = st.get("all", {}), st.get("entropy_top50", {})
        if a.get("status") == "ok" and m.get("status") == "ok":
            g_all, g = a["d_pass1"]["estimate"], m["d_pass1"]["estimate"]
            t3.append({"world": w, "kept_share": m["kept_share"], "d_pass1_all": g_all, "d_pass1_masked": g,
                       "loses_at_most_10pct": bool(g >= 0.9 * g_all) if g_all > 0 else None})
    return {"t3_masked_gain": t3, "t3_masked_gain_met": bool(t3) and all(r["loses_at_most_10pct"] for r in t3)}


def time_target(bench: dict | None) -> dict:
    """The time target's fields: entropy_top50's time per training step (sampling + step) over all's."""
    ratio = None if bench is None else bench["ratio_sampling_plus_step"]["entropy_top50"]
    return {"t3_time_ratio": ratio, "t3_time_met": None if ratio is None else ratio <= 0.7}


def _ci(c: dict) -> str:
    return f"{c['estimate']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


def render(a: dict) -> str:
    L = ["# The lever study (issue 33): results", "",
         "Generated by `benchmarks/validity/levers/report_levers.py` from the runs of `run_levers.py` "
         "(plan: `plan.yaml`, amendments 1-6); every number below comes from `levers_analysis.json`. The first "
         "look (commit 3c22b15) had every row of the first four worlds but those marked second look, and no answer "
         "to question 2." + (" The worlds marked third look (amendment 4: a second recommendation rule, judged on "
                             "worlds this study had not run) were added by `report_levers.py --look 3`."
                             if "third_look" in a else "")
         + (" Section 1b is the fourth look (amendment 5: three more settings for target 1, `--look 4`)."
            if "fourth_look" in a else "")
         + (" Section 2c is the fifth look (amendment 6: the schedule recommendation against fixed shares, "
            "`--look 5`)." if "fifth_look" in a else ""), "",
         f"Runs: {a['runs']['finished']} of {a['runs']['planned']} finished"
         + (f"; third look {a['runs']['third_look']['finished']} of {a['runs']['third_look']['planned']}."
            if "third_look" in a["runs"] else "."), ""]
    for w, wr in a["worlds"].items():
        L += [f"## {w}{' (third look)' if wr.get('look') == 3 else ''}", ""]
        if wr.get("status") != "ok":
            L += [f"Not analysed: {wr.get('status')}.", ""]
            continue
        L += world_table(wr)
    q = a["answers"]
    L += ["## Questions", "", "**1. Does any lever keep pass@4 while pass@1 rises in `diversity`?**", ""]
    if q["q1_diversity"]["rows"]:
        for r in q["q1_diversity"]["rows"]:
            L.append(f"- {r['setting']}: Δpass@1 {r['d_pass1']:+.3f} (all {r['d_pass1_all']:+.3f}), Δpass@4 − all's "
                     f"{_ci(r['d_pass4_minus_all'])}: {'meets' if r['meets'] else 'does not meet'} the target")
        L += ["", f"Answer: {'yes' if q['q1_diversity']['any'] else 'no'}.", ""]
    else:
        L += ["Not answered: the diversity runs did not finish.", ""]
    if "fourth_look" in a:
        L += render_fourth_look(a["fourth_look"])
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
    L += [
          "**3. What share of tokens carries the gain?**", "",
          "| world | setting | kept share | gain share (Δpass@1 / all's) | gain per kept token vs all |", "|---|---|---|---|---|"]
    for r in q["q3_token_share"]:
        L.append(f"| {r['world']} | {r['setting']} | {r['kept_share']:.3f} | {r['gain_share']:+.2f} | "
                 f"{r['gain_per_kept_token_vs_all']:+.2f} |")
    t = q["targets"]
    t3 = "; ".join(f"{r['world']} {r['d_pass1_masked']:+.3f} vs {r['d_pass1_all']:+.3f}" for r in t["t3_masked_gain"])
    shares = [(r["world"], r["diagnosis"]["entropy_top50"]["signal_share"]) for r in q2.get("rows", [])
              if "entropy_top50" in r.get("diagnosis", {})]
    L += ["", "A 10–15× larger gain per kept token than all-token training would show as a last column of 10–15."]
    if shares:
        L += ["", "The diagnosis measured the summed |signal| on entropy_top50's kept half at "
              + ", ".join(f"{w} {v:.3f}" for w, v in shares) + " of the total. Reading (not a measurement): with "
              "the JSD losses of these rows, the low-entropy half carries almost no signal and AdamW rescales each "
              "parameter's step by its own gradient scale, so dividing by the kept count instead of every token "
              "changes little: the masked run trains nearly the model all-token training does."]
    L += ["",
          "## Targets", "",
          f"- diversity, a setting with Δpass@1 ≥ all's and its Δpass@4 interval above all's: "
          f"{'met' if t['t1_diversity_pass4'] else 'not met'}"
          + (f"; fourth look (three more settings, confirmed on new seeds): "
             f"{'met' if a['fourth_look']['met'] else 'not met'}." if "fourth_look" in a else "."),
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
    return "\n".join(L) + "\n"


def world_table(wr: dict) -> list[str]:
    """One world's initial student and its settings' rows."""
    i = wr["initial"]
    L = [f"Initial student: pass@1 {i['pass@1']:.3f}, pass@4 {i['pass@4']:.3f}, forgetting set pass@1 "
         f"{i['regression_pass@1']:.3f} ({wr['n_problems']} held-out problems).", "",
         "| setting | seeds | Δpass@1 | Δpass@4 | Δpass@1 − all's | Δpass@4 − all's | Δforgetting | KL to initial "
         "| kept share |", "|---|---|---|---|---|---|---|---|---|"]
    for s, r in wr["settings"].items():
        if r.get("status") != "ok":
            L.append(f"| {s} | {r['status']} | | | | | | | |")
            continue
        va = r.get("vs_all")
        L.append(f"| {s}{' (second look)' if r.get('second_look') else ''} | {','.join(map(str, r['seeds']))} | "
                 f"{_ci(r['d_pass1'])} | {_ci(r['d_pass4'])} | "
                 f"{_ci(va['d_pass1']) if va else '—'} | {_ci(va['d_pass4']) if va else '—'} | "
                 f"{r['d_forgetting']['estimate']:+.3f} | {r['kl_to_initial']['estimate']:.4f} | "
                 f"{r['kept_share']:.3f} |")
    return L + [""]


def render_fourth_look(f: dict) -> list[str]:
    """Question 1 again (amendment 5): three more settings in diversity, a setting that meets it confirmed."""
    L = ["**1b. Fourth look (amendment 5): three more settings in `diversity`, all-token training run again beside "
         "them (seeds 0 and 1; a setting that meets the test is run again on seeds 2 and 3).**", ""]
    if f["rows"].get("status") != "ok":
        return L + [f"Not analysed: {f['rows'].get('status')}.", ""]
    L += world_table(f["rows"])
    for t in f["tests"]:
        c = f["confirmation"].get(t["setting"])
        again = "" if c is None else (f"; seeds 2-3: {c['status']}" if "status" in c else
                                      f"; seeds 2-3: Δpass@1 {c['d_pass1']:+.3f} (all {c['d_pass1_all']:+.3f}), "
                                      f"Δpass@4 − all's {_ci(c['d_pass4_minus_all'])}: "
                                      f"{'meets' if c['meets'] else 'does not meet'} it again")
        L.append(f"- {t['setting']}: Δpass@1 {t['d_pass1']:+.3f} (all {t['d_pass1_all']:+.3f}), Δpass@4 − all's "
                 f"{_ci(t['d_pass4_minus_all'])}: {'meets' if t['meets'] else 'does not meet'} the test{again}")
    r = f["all_rerun_vs_committed"]
    L += ["", f"Answer: {'yes' if f['met'] else 'no'}. All-token training run again: Δpass@1 {r['rerun']:+.3f} "
          f"(the first look's committed {r['committed']:+.3f}).", ""]
    return L


def render_fifth_look(f: dict) -> list[str]:
    """The schedule recommendation's look (amendment 6): fixed shares realised, both rules' picks."""
    L = ["**2c. Fifth look (amendment 6): does the schedule recommendation pick the best fixed share?** Fixed shares "
         "of the solution trained beside the whole solution (`all`, share 1), seeds 0 and 1; the diagnoses by "
         "`recommend_levers.py --look 5`, rule 2 committed before any of these runs or diagnoses.", ""]
    for w, r in f["worlds"].items():
        L += [f"*{w}*", ""]
        if r["status"] != "ok":
            L += [f"Not analysed: {r['status']}.", ""]
            continue
        L += world_table(r["rows"])
    L += ["| world | rule 2's share (its Δpass@1) | rule 1's: largest Δll (its Δpass@1) | best share | its Δpass@1 | "
          "rule 2 within 0.02 | Spearman(Δll, Δpass@1) | Spearman(G, Δpass@1) |", "|---|---|---|---|---|---|---|---|"]
    for w, r in f["worlds"].items():
        if r["status"] != "ok":
            L.append(f"| {w} | {r['status']} | | | | | | |")
            continue

        L.append(f"| {w} | {pick(r['rule2'])} | {pick(r['rule1'])} | {r['best_share']:g} | {r['best_d_pass1']:+.3f} | "
                 f"{'yes' if r['rule2']['within_0.02'] else 'no'} | {_rho(r['spearman_dll'])} | "
                 f"{_rho(r['spearman_gap'])} |")
    L += ["", "The diagnosis per share (lookahead Δll; its difference from the whole solution's, prompt by prompt; the "
          "accuracy gap G of the teacher shown that share):", ""]
    for w, r in f["worlds"].items():
        if r["status"] == "ok":
            L.append(f"- {w}: " + "; ".join(f"{k}: Δll {_ci4(v['dll'])}, difference {_ci4(v['dll_vs_full'])}, "
                                             f"G {_ci4(v['gap'], 3)}" for k, v in r["diagnosis"].items()))
    blind = [w for w, r in f["worlds"].items() if r["status"] == "ok" and (r.get("rule2_basis") or "").startswith(
        "no measurement prompt")]
    note = [] if not blind else [
        "", f"In {' and '.join(blind)} no share had a finite Δll (no measurement prompt with both a correct and an "
        "incorrect rollout), so rule 2's pick there is the whole solution by amendment 6b, committed after the "
        "diagnoses and before any realised result was read; under rule 2 as first committed it made no "
        f"recommendation there, and would have been within 0.02 in "
        f"{f['rule2_within_0.02'] - f['rule2_blind_within_0.02']} of {f['n_worlds']}."]
    return L + ["", f"Rule 2 within 0.02 of the best share in {f['rule2_within_0.02']} of {f['n_worlds']} worlds, rule 1 "
                f"in {f['rule1_within_0.02']}.", *note, ""]


def pick(p: dict) -> str:
    """A rule's pick as "share (its realised Δpass@1)"."""
    if p["share"] is None:
        return "none"
    realised = "not run" if p["d_pass1"] is None else f"{p['d_pass1']:+.3f}"
    return f"{p['share']:g} ({realised})"


def _rho(x: float) -> str:
    return "n/a" if x != x else f"{x:+.2f}"


def _ci4(d: dict | None, digits: int = 4) -> str:
    if not d or not _finite(d.get("estimate")):
        return "n/a"
    return f"{d['estimate']:+.{digits}f} [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}]"


def render_third_look(t: dict) -> list[str]:
    """Question 2 again with rule 2 (amendment 4), beside the first rule, on every world with a lever lookahead."""
    def pick(r):
        d = r["d_pass1"]
        return f"{r['setting'] or 'none'} ({'not run' if d is None else f'{d:+.3f}'})"

    L = ["**2b. Third look (amendment 4): rule 2 moves off all tokens only when a mask's lookahead Δll beats "
         "all-token training's prompt by prompt, its interval above 0.**", "",
         "Computed by `recommend_levers.py --look 3` on fresh diagnoses of every world (`run_v2.py --look 1`); "
         "the rule was committed before any of the third look's runs or diagnoses. Judged on the worlds marked new.",
         "", "| world | rule 2 (its Δpass@1) | rule 1: largest Δll (its Δpass@1) | best realised | its Δpass@1 | "
         "all's Δpass@1 | rule 2's regret | rule 2 within 0.02 | Spearman(Δll, Δpass@1) | prompts with a finite Δll |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in t["rows"]:
        name = f"{r['world']}{' (new)' if r['new'] else ' (seen)'}"
        if r["status"] != "ok":
            L.append(f"| {name} | {r['status']} | | | | | | | | |")
            continue
        sp, reg = r["spearman_dll_vs_d_pass1"], r["rule2"]["regret_vs_best"]
        L.append(f"| {name} | {pick(r['rule2'])} | {pick(r['rule1'])} | {r['best_realised']} | "
                 f"{r['best_d_pass1']:+.3f} | {r['all_d_pass1']:+.3f} | {'—' if reg is None else f'{reg:+.3f}'} | "
                 f"{'yes' if r['rule2']['within_0.02'] else 'no'} | "
                 f"{'n/a' if sp != sp else f'{sp:+.2f}'} (n = {r['n_candidates_run']}) | "
                 f"{r['n_prompts_finite_dll']} |")
    regrets = []
    for k in ("rule2", "rule1"):
        v = t["mean_regret_new"][k]
        mean = "n/a" if v["mean"] is None else f"{v['mean']:+.3f}"
        regrets.append(f"rule {k[-1]} {mean} (over the {v['n']} worlds where its pick was run)")
    L += ["", f"On the new worlds: rule 2 within 0.02 of the best in {t['rule2_within_0.02_new']} of "
          f"{t['judged_worlds']}, rule 1 in {t['rule1_within_0.02_new']}; mean regret against the best realised "
          + ", ".join(regrets) + ". A Δll needs a measurement prompt with both a correct and an incorrect rollout; where none has both, "
          "no mask can beat all tokens on evidence and rule 2 keeps all tokens.", "",
          "Each mask's lookahead Δll minus all-token training's, prompt by prompt (estimate [95% interval]):", ""]
    for r in t["rows"]:
        if r["status"] != "ok":
            continue
        parts = [f"{k} " + ("n/a" if not v.get("dll_vs_all") or v["dll_vs_all"].get("estimate") is None
                            or v["dll_vs_all"]["estimate"] != v["dll_vs_all"]["estimate"]
                            else f"{v['dll_vs_all']['estimate']:+.4f} [{v['dll_vs_all']['lo']:+.4f}, "
                                 f"{v['dll_vs_all']['hi']:+.4f}]")
                 for k, v in r["diagnosis"].items() if k != "all"]
        L.append(f"- {r['world']}: " + "; ".join(parts))
    return L + [""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="root", type=Path, default=ROOT)
    ap.add_argument("--bench", type=Path, help="bench_step.py's output (default ROOT/bench_step.json)")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--recommend", type=Path, help="recommend_levers.py's outputs (default ROOT/recommend)")
    ap.add_argument("--look", type=int, default=1, choices=(1, 3, 4, 5),
                    help="keep the committed analysis and add the third look's worlds and rules (3, amendment 4) or "
                         "the fourth look's settings (4, amendment 5; runs from its plan's `out` by default)")
    ap.add_argument("--bench-only", action="store_true",
                    help="keep the committed analysis' runs and answers (the runs may be gone), take a new --bench")
    args = ap.parse_args(argv)
    if args.bench_only:
        return rebench(args.out, json.loads(args.bench.read_text()))
    if args.look == 3:
        return look3(args.out, args.root, args.recommend or args.root / "recommend3")
    if args.look in (4, 5):
        key = {4: "fourth_look", 5: "fifth_look"}[args.look]
        root = Path(load_plan()[key]["out"]) if args.root == ROOT else args.root
        return look4(args.out, root) if args.look == 4 else look5(args.out, root, args.recommend or root / "recommend")
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


def look3(out: Path, root: Path, rdir: Path) -> int:
    """The committed analysis with the third look added: its worlds' runs, both rules on every world, the judgement."""
    plan = load_plan()
    new = list(worlds_of(plan, 3))

    def change(analysis: dict) -> str:
        for w in new:
            analysis["worlds"][w] = {**world_rows(plan, root, w), "look": 3}
        recs = {w: json.loads((rdir / f"{w}.json").read_text()) for w in [*new, *worlds_of(plan)]
                if (rdir / f"{w}.json").is_file()}
        analysis["third_look"] = third_look(plan, analysis["worlds"], recs)
        planned = sum(len(settings_for(plan, w)) * len(plan["training"]["seeds"]) for w in new)
        finished = sum(len(r.get("seeds", [])) for w in new for r in analysis["worlds"][w].get("settings", {}).values())
        analysis["runs"]["third_look"] = {"planned": planned, "finished": finished}
        analysis["answers"]["q3_token_share"] = token_share(analysis["worlds"])
        analysis["answers"]["targets"].update(masked_gain(analysis["worlds"]))
        return f"third look: {finished} of {planned} runs"
    return update(out, change)


def look4(out: Path, root: Path) -> int:
    """The committed analysis with the fourth look added."""
    def change(analysis: dict) -> str:
        committed = analysis["worlds"]["diversity"]["settings"].get("all")
        analysis["fourth_look"] = fourth_look(load_plan(), root, committed)
        return f"fourth look: {'met' if analysis['fourth_look']['met'] else 'not met'}"
    return update(out, change)


def look5(out: Path, root: Path, rdir: Path) -> int:
    """The committed analysis with the fifth look added."""
    def change(analysis: dict) -> str:
        analysis["fifth_look"] = fifth_look(load_plan(), root, rdir)
        return f"fifth look: {'met' if analysis['fifth_look']['met'] else 'not met'}"
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
