"""The lever study's later looks (amendments 4-11), each added to the committed analysis by ``report_levers.py
--look N``: the third, sixth and eighth (a second recommendation rule for masks, judged on worlds the study had not
run), the fourth and ninth (settings for target 1 in diversity), the fifth (the schedule recommendation against fixed
shares); the seventh and tenth (target 3) are in ``target3_looks.py``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.levers.rows import finite, keeps_pass4, spearman, world_rows, world_table  # noqa: E402
from benchmarks.validity.levers.run_levers import worlds_of  # noqa: E402
from opsd_diag.core.stats import ci_text  # noqa: E402


def rule1(rec: dict) -> str | None:
    """The first rule (committed in e37612f): the candidate with the largest finite lookahead Δll."""
    ok = {k: v["dll"]["estimate"] for k, v in rec.get("settings", {}).items() if finite(v["dll"].get("estimate"))}
    return max(ok, key=ok.get) if ok else None


def third_look(plan: dict, worlds: dict, recs: dict, look: int = 3) -> dict:
    """Amendment 4 (and 7, 9: ``look`` 6, 8): per world, both rules' picks against the realised settings; judged on the
    look's own worlds."""
    new = set(worlds_of(plan, look))
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
        cands = [k for k in rec["settings"] if k in st and finite(rec["settings"][k]["dll"].get("estimate"))]
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
    return {"look": look, "rows": rows, "judged_worlds": len(judged), "rule2_within_0.02_new": within,
            "rule1_within_0.02_new": sum(r.get("rule1", {}).get("within_0.02", False) for r in judged),
            "mean_regret_new": {k: {"mean": float(np.mean(v)) if v else None, "n": len(v)} for k, v in regret.items()},
            "met": bool(judged) and len(judged) == len(new) and within == len(judged),
            "rule2_within_0.02_seen": sum(r.get("rule2", {}).get("within_0.02", False) for r in rows if not r["new"]),
            "seen_worlds": sum(1 for r in rows if not r["new"])}


def render_third_look(t: dict) -> list[str]:
    """Question 2 again with rule 2 (amendment 4), beside the first rule, on every world with a lever lookahead."""
    def pick(r):
        d = r["d_pass1"]
        return f"{r['setting'] or 'none'} ({'not run' if d is None else f'{d:+.3f}'})"

    look = t.get("look", 3)
    title = ("**2b. Third look (amendment 4): rule 2 moves off all tokens only when a mask's lookahead Δll beats "
             "all-token training's prompt by prompt, its interval above 0.**") if look == 3 else (
        "**2d. Sixth look (amendment 7): rule 2 unchanged, on the remaining worlds the study had not run.**"
        if look == 6 else "**2e. Eighth look (amendment 9): rule 2 unchanged, on the two worlds built since.**")
    L = [title, "",
         f"Computed by `recommend_levers.py --look {look}` on fresh diagnoses of every world (`run_v2.py --look 1`); "
         "the rule was committed before any of this look's runs or diagnoses. Judged on the worlds marked new.",
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
          "no mask can beat all tokens on evidence and rule 2 keeps all tokens.", ""]
    if t.get("pooled_with_third"):
        q = t["pooled_with_third"]
        L += [f"Over the {q['worlds']} worlds of the third{' and sixth' if look == 6 else ', sixth and eighth'} looks: "
              f"rule 2 within 0.02 of the best in "
              f"{q['within']} ({q['within'] / q['worlds']:.0%}; the issue's rate is 3 of 4, 75%)."
              + (f" Rule 2 picked all tokens in {q['rule2_picked_all']} of the {q['worlds']}; always training all tokens "
                 f"is within 0.02 of the best in {q['all_within_0.02']} of them." if "rule2_picked_all" in q else ""), ""]
    L += ["Each mask's lookahead Δll minus all-token training's, prompt by prompt (estimate [95% interval]):", ""]
    for r in t["rows"]:
        if r["status"] != "ok":
            continue
        parts = [f"{k} {ci_text(v.get('dll_vs_all'))}" for k, v in r["diagnosis"].items() if k != "all"]
        L.append(f"- {r['world']}: " + "; ".join(parts))
    return L + [""]


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
                                      f"Δpass@4 − all's {ci_text(c['d_pass4_minus_all'], 3)}: "
                                      f"{'meets' if c['meets'] else 'does not meet'} it again")
        L.append(f"- {t['setting']}: Δpass@1 {t['d_pass1']:+.3f} (all {t['d_pass1_all']:+.3f}), Δpass@4 − all's "
                 f"{ci_text(t['d_pass4_minus_all'], 3)}: {'meets' if t['meets'] else 'does not meet'} the test{again}")
    r = f["all_rerun_vs_committed"]
    L += ["", f"Answer: {'yes' if f['met'] else 'no'}. All-token training run again: Δpass@1 {r['rerun']:+.3f} "
          f"(the first look's committed {r['committed']:+.3f}).", ""]
    return L


def ninth_look(plan: dict, root: Path) -> dict:
    """Amendment 10: target 1's test again on fresh seeds for the two settings that nearly met it, judged at the
    Bonferroni interval (``level``), the 95% one beside it."""
    nine = plan["ninth_look"]
    world = next(iter(nine["worlds"]))
    rows = world_rows(plan, root, world, list(nine["settings"]), nine["seeds"], nine["level"])
    st = rows.get("settings", {})
    ok = [s for s, r in st.items() if s != "all" and r.get("status") == "ok" and st["all"].get("status") == "ok"]
    tests = [{**keeps_pass4(s, st[s], st["all"], "vs_all_judged"),
              "at_95": keeps_pass4(s, st[s], st["all"])} for s in ok]
    return {"world": world, "seeds": nine["seeds"], "level": nine["level"], "rows": rows, "tests": tests,
            "not_run": [s for s in nine["settings"] if s != "all" and s not in ok],
            "met": any(t["meets"] for t in tests)}


def render_ninth_look(f: dict) -> list[str]:
    """Question 1 a last time (amendment 10): the two near misses on fresh seeds."""
    pct = f"{f['level']:.1%}".replace(".0%", "%")
    L = [f"**1c. Ninth look (amendment 10): the two settings whose Δpass@4 − all's interval touched 0 from above, "
         f"on fresh seeds {', '.join(map(str, f['seeds']))} only, all-token training beside them; judged at the "
         f"{pct} interval (two settings tested), the 95% one beside it.**", ""]
    if f["rows"].get("status") != "ok":
        return L + [f"Not analysed: {f['rows'].get('status')}.", ""]
    L += world_table(f["rows"])
    for t in f["tests"]:
        L.append(f"- {t['setting']}: Δpass@1 {t['d_pass1']:+.3f} (all {t['d_pass1_all']:+.3f}), Δpass@4 − all's "
                 f"{ci_text(t['d_pass4_minus_all'], 3)} at {pct} ({ci_text(t['at_95']['d_pass4_minus_all'], 3)} at "
                 f"95%): {'meets' if t['meets'] else 'does not meet'} the test")
    L += [f"- {s}: not run or not finished" for s in f["not_run"]]
    return L + ["", f"Answer: {'yes' if f['met'] else 'no'}.", ""]


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
        r1 = [(r["dll"]["estimate"], r["share"]) for r in sched["rows"] if r.get("dll") and finite(r["dll"].get("estimate"))]
        picks = {"rule2": (sched.get("recommendation") or {}).get("share"), "rule1": max(r1)[1] if r1 else None}
        shares = sorted(s for s in done if s in diag)

        def rho_over(q: str) -> float:
            """Spearman of the shares' diagnosed ``q`` with their realised Δpass@1 (NaN unless all are finite)."""
            xs = [(diag[f].get(q) or {}).get("estimate") for f in shares]
            return spearman(xs, [done[f] for f in shares]) if all(finite(x) for x in xs) else math.nan
        out[world] = {"status": "ok", "rows": wr, "best_share": best, "best_d_pass1": done[best],
                      "rule2_basis": (sched.get("recommendation") or {}).get("basis"),
                      **{k: {"share": v, "d_pass1": done.get(v),
                             "within_0.02": v in done and done[best] - done[v] <= 0.02} for k, v in picks.items()},
                      "diagnosis": {str(f): {"dll": diag[f].get("dll"), "dll_vs_full": diag[f].get("dll_vs_full"),
                                             "gap": diag[f].get("gap")} for f in shares},
                      **{f"spearman_{q}": rho_over(q) for q in ("dll", "gap")}}
    ok = [w for w in out.values() if w["status"] == "ok"]
    blind = [w for w in ok if (w.get("rule2_basis") or "").startswith("no measurement prompt")]
    return {"worlds": out, "rule2_within_0.02": sum(w["rule2"]["within_0.02"] for w in ok),
            "rule2_blind": len(blind), "rule2_blind_within_0.02": sum(w["rule2"]["within_0.02"] for w in blind),
            "rule1_within_0.02": sum(w["rule1"]["within_0.02"] for w in ok), "n_worlds": len(five["worlds"]),
            "met": len(ok) == len(five["worlds"]) and all(w["rule2"]["within_0.02"] for w in ok)}


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
            L.append(f"- {w}: " + "; ".join(f"{k}: Δll {ci_text(v['dll'])}, difference {ci_text(v['dll_vs_full'])}, "
                                             f"G {ci_text(v['gap'], 3)}" for k, v in r["diagnosis"].items()))
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
