"""The lever study's report, generated from its runs: levers_analysis.json and RESULTS.md (never hand-typed).

    python benchmarks/validity/levers/report_levers.py [--from /work/runs/levers] [--bench FILE]

Per (world, setting): the final evaluation of each seed's run against the initial student (the ``all``
seed-0 run's step-0 evaluation; every run shares it); held-out Δpass@1 and Δpass@4 per problem, averaged
over the seeds that finished, with a 95% percentile bootstrap over problems (2000 draws, seed 0); the
forgetting set's Δpass@1 and the KL to the initial student as seed means (with each seed's value); the
kept share of tokens over the run. Differences against ``all`` are paired by problem. A run that did not
finish is listed as such. The plan's questions and targets are answered from these numbers.
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

from benchmarks.validity.levers.run_levers import load_plan, settings_for  # noqa: E402
from opsd_diag.core.stats import pass_at_k  # noqa: E402

HERE = Path(__file__).resolve().parent
N_BOOT, SEED = 2000, 0


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


def world_rows(plan: dict, root: Path, world: str) -> dict:
    wdir = root / world / "runs"
    first = _records(wdir / f"all__s{plan['training']['seeds'][0]}")
    initial = next((e for e in first[1] if e["step"] == 0), None) if first else None
    if initial is None:
        return {"status": "no initial evaluation (the all seed-0 run did not finish)"}
    init = {k: per_problem(initial, k) for k in (1, 4)}
    problems = sorted(init[1])
    settings, deltas = {}, {}
    for s in settings_for(plan, world):
        seeds, d1, d4, forget, kl, kept, tokens = [], [], [], [], [], 0, 0
        for seed in plan["training"]["seeds"]:
            got = _records(wdir / f"{s}__s{seed}")
            if got is None:
                continue
            train, evals = got
            final = max(evals, key=lambda e: e["step"])
            seeds.append(seed)
            for k, acc in ((1, d1), (4, d4)):
                pp = per_problem(final, k)
                acc.append([pp[i] - init[k][i] for i in problems])
            forget.append(final["regression_pass@1"] - initial["regression_pass@1"])
            kl.append(final["kl_to_initial"])
            kept += sum(r.get("kept_tokens", r["tokens"]) for r in train)
            tokens += sum(r["tokens"] for r in train)
        if not seeds:
            settings[s] = {"status": "not run or not finished"}
            continue
        deltas[s] = {1: np.mean(d1, axis=0), 4: np.mean(d4, axis=0)}
        settings[s] = {"status": "ok", "seeds": seeds, "d_pass1": boot(deltas[s][1]), "d_pass4": boot(deltas[s][4]),
                       "d_forgetting": {"estimate": float(np.mean(forget)), "per_seed": forget},
                       "kl_to_initial": {"estimate": float(np.mean(kl)), "per_seed": kl},
                       "kept_share": kept / tokens, "kept_tokens": kept, "tokens": tokens}
    for s, d in deltas.items():
        if s != "all" and "all" in deltas:
            settings[s]["vs_all"] = {f"d_pass{k}": boot(d[k] - deltas["all"][k]) for k in (1, 4)}
    return {"status": "ok", "initial": {k: initial[k] for k in ("pass@1", "pass@4", "regression_pass@1")},
            "n_problems": len(problems), "settings": settings}


def answers(plan: dict, worlds: dict, bench: dict | None) -> dict:
    out = {}
    div = worlds.get("diversity", {}).get("settings", {})
    base = div.get("all", {})
    q1 = []
    if base.get("status") == "ok":
        for s, r in div.items():
            if s == "all" or r.get("status") != "ok":
                continue
            ok = (r["d_pass1"]["estimate"] >= base["d_pass1"]["estimate"]
                  and r["vs_all"]["d_pass4"]["lo"] > 0)
            q1.append({"setting": s, "d_pass1": r["d_pass1"]["estimate"], "d_pass1_all": base["d_pass1"]["estimate"],
                       "d_pass4_minus_all": r["vs_all"]["d_pass4"], "meets": ok})
    out["q1_diversity"] = {"rows": q1, "any": any(r["meets"] for r in q1) if q1 else None}
    out["q2_recommendation"] = {"answered": False, "why": "the diagnosis' lever recommendation (issue 33, item 2) "
                                "was not built when this report was generated"}
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
    out["q3_token_share"] = q3
    t3 = []
    for w, wr in worlds.items():
        st = wr.get("settings", {})
        a, m = st.get("all", {}), st.get("entropy_top50", {})
        if a.get("status") == "ok" and m.get("status") == "ok":
            g_all, g = a["d_pass1"]["estimate"], m["d_pass1"]["estimate"]
            t3.append({"world": w, "kept_share": m["kept_share"], "d_pass1_all": g_all, "d_pass1_masked": g,
                       "loses_at_most_10pct": bool(g >= 0.9 * g_all) if g_all > 0 else None})
    out["targets"] = {
        "t1_diversity_pass4": out["q1_diversity"]["any"],
        "t2_recommendation_within_0.02": None,
        "t3_masked_gain": t3,
        "t3_masked_gain_met": bool(t3) and all(r["loses_at_most_10pct"] for r in t3),
        "t3_time_ratio": None if bench is None else bench["ratio_sampling_plus_step"],
        "t3_time_met": None if bench is None else bench["ratio_sampling_plus_step"] <= 0.7}
    return out


def _ci(c: dict) -> str:
    return f"{c['estimate']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]"


def render(a: dict) -> str:
    L = ["# The lever study (issue 33): results", "",
         "Generated by `benchmarks/validity/levers/report_levers.py` from the runs of `run_levers.py` "
         "(plan: `plan.yaml`, amendment 1); every number below comes from `levers_analysis.json`.", "",
         f"Runs: {a['runs']['finished']} of {a['runs']['planned']} finished.", ""]
    for w, wr in a["worlds"].items():
        L += [f"## {w}", ""]
        if wr.get("status") != "ok":
            L += [f"Not analysed: {wr.get('status')}.", ""]
            continue
        i = wr["initial"]
        L += [f"Initial student: pass@1 {i['pass@1']:.3f}, pass@4 {i['pass@4']:.3f}, forgetting set pass@1 "
              f"{i['regression_pass@1']:.3f} ({wr['n_problems']} held-out problems).", "",
              "| setting | seeds | Δpass@1 | Δpass@4 | Δpass@1 − all's | Δpass@4 − all's | Δforgetting | KL to initial "
              "| kept share |", "|---|---|---|---|---|---|---|---|---|"]
        for s, r in wr["settings"].items():
            if r.get("status") != "ok":
                L.append(f"| {s} | {r['status']} | | | | | | | |")
                continue
            va = r.get("vs_all")
            L.append(f"| {s} | {','.join(map(str, r['seeds']))} | {_ci(r['d_pass1'])} | {_ci(r['d_pass4'])} | "
                     f"{_ci(va['d_pass1']) if va else '—'} | {_ci(va['d_pass4']) if va else '—'} | "
                     f"{r['d_forgetting']['estimate']:+.3f} | {r['kl_to_initial']['estimate']:.4f} | "
                     f"{r['kept_share']:.3f} |")
        L.append("")
    q = a["answers"]
    L += ["## Questions", "", "**1. Does any lever keep pass@4 while pass@1 rises in `diversity`?**", ""]
    if q["q1_diversity"]["rows"]:
        for r in q["q1_diversity"]["rows"]:
            L.append(f"- {r['setting']}: Δpass@1 {r['d_pass1']:+.3f} (all {r['d_pass1_all']:+.3f}), Δpass@4 − all's "
                     f"{_ci(r['d_pass4_minus_all'])}: {'meets' if r['meets'] else 'does not meet'} the target")
        L += ["", f"Answer: {'yes' if q['q1_diversity']['any'] else 'no'}.", ""]
    else:
        L += ["Not answered: the diversity runs did not finish.", ""]
    L += ["**2. Does the diagnosis' lever recommendation pick the best realised setting?**", "",
          f"Not answered: {q['q2_recommendation']['why']}.", "",
          "**3. What share of tokens carries the gain?**", "",
          "| world | setting | kept share | gain share (Δpass@1 / all's) | gain per kept token vs all |", "|---|---|---|---|---|"]
    for r in q["q3_token_share"]:
        L.append(f"| {r['world']} | {r['setting']} | {r['kept_share']:.3f} | {r['gain_share']:+.2f} | "
                 f"{r['gain_per_kept_token_vs_all']:+.2f} |")
    t = q["targets"]
    t3 = "; ".join(f"{r['world']} {r['d_pass1_masked']:+.3f} vs {r['d_pass1_all']:+.3f}" for r in t["t3_masked_gain"])
    L += ["", "A 10–15× larger gain per kept token than all-token training would show as a last column of 10–15.", "",
          "## Targets", "",
          f"- diversity, a setting with Δpass@1 ≥ all's and its Δpass@4 interval above all's: "
          f"{'met' if t['t1_diversity_pass4'] else 'not met'}.",
          "- recommended setting within 0.02 of the best in ≥ 3 of 4 worlds: not evaluated (no recommendation).",
          f"- a ≤ 50%-token mask (entropy_top50) loses ≤ 10% of all's gain in every world: "
          f"{'met' if t['t3_masked_gain_met'] else 'not met'} "
          f"({t3})."]
    if t["t3_time_ratio"] is not None:
        b = a["bench"]
        L.append(f"- its time per step ≤ 0.7× all's: {'met' if t['t3_time_met'] else 'not met'}: sampling + step "
                 f"{t['t3_time_ratio']:.2f}×, the step alone {b['ratio_step']:.2f}× (median of {b['repeats']} "
                 f"side-by-side repeats, `bench_step.py`, kept share {b['kept_share']['entropy_top50']:.2f}); the mask "
                 "reads its scores in an extra no-grad pass and the decoder runs over every token either way.")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="root", type=Path, default=Path("/work/runs/levers"))
    ap.add_argument("--bench", type=Path, help="bench_step.py's output (default ROOT/bench_step.json)")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    plan = load_plan()
    worlds = {w: world_rows(plan, args.root, w) for w in plan["worlds"]}
    bench_path = args.bench or args.root / "bench_step.json"
    bench = json.loads(bench_path.read_text()) if bench_path.is_file() else None
    planned = sum(len(settings_for(plan, w)) * len(plan["training"]["seeds"]) for w in plan["worlds"])
    finished = sum(len(r.get("seeds", [])) for wr in worlds.values() for r in wr.get("settings", {}).values())
    analysis = {"plan": "benchmarks/validity/levers/plan.yaml", "runs": {"planned": planned, "finished": finished},
                "worlds": worlds, "bench": None if bench is None else {k: v for k, v in bench.items() if k != "raw"},
                "answers": answers(plan, worlds, bench)}
    (args.out / "levers_analysis.json").write_text(json.dumps(analysis, indent=1, default=float) + "\n")
    (args.out / "RESULTS.md").write_text(render(analysis))
    print(f"wrote {args.out / 'RESULTS.md'} ({finished} of {planned} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
