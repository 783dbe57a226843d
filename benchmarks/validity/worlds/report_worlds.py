"""Write the worlds RESULTS.md and its scatters from a worlds analysis JSON only (no number typed by hand).

    python benchmarks/validity/worlds/report_worlds.py --from DIR [--out benchmarks/validity/worlds/]

``DIR/worlds_analysis.json`` is (re)computed by analyze_worlds.py when ``DIR`` holds a study, then
rendered: per world a section (level, rows with outcomes and predictors, Spearman of each predictor
with each outcome, the verdict's accuracy, method disagreements, where each predictor is wrong, wall
time), the pooled section and a conclusion written by rules over the numbers. The JSON is copied
beside RESULTS.md (worlds_analysis.json) with one scatter per world and a pooled one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import plot  # noqa: E402
from benchmarks.validity.report import COLORS, _table, ci, f  # noqa: E402
from benchmarks.validity.worlds import analyze_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
BUDGET_MIN = 45  # issue 20: each world's study within 45 minutes of wall time on the 2-core machine
OUT_NAMES = {"d_pass1": "Δ pass@1", "d_pass4": "Δ pass@4", "d_regression": "Δ forgetting set",
             "kl_to_initial": "KL to initial"}
SHORT = {"verdict": "verdict", "score": "score", "teacher_advantage": "A_T", "alignment": "C",
         "accuracy_gap": "gap G", "mean_rev_kl": "rev KL", "mean_jsd": "JSD", "opd2_sign_agreement": "OPD² sign",
         "teachability": "teach.", "topk_overlap": "top-k ov.", "high_entropy_share": "high-H share"}


def _name(p: str) -> str:
    return SHORT.get(p, p)


def _num(x) -> float:
    return math.nan if x is None else float(x)


def png_name(world: str | None) -> str:
    return f"worlds_scatter_{world or 'pooled'}.png"


def _rows_table(rows: list[dict], preds: list[str]) -> str:
    header = ["config", "method (signal)", *[OUT_NAMES[o] for o in analyze_worlds.OUTCOMES], "realised",
              *[_name(p) for p in preds]]
    body = []
    for r in rows:
        cells = [r["config"], f"{r['method']} ({r['signal']})" if r["signal"] else f"{r['method']} (reference)",
                 *[ci(r[o], 4, False) if o == "kl_to_initial" else ci(r[o]) for o in analyze_worlds.OUTCOMES], r["realised"]]
        for p in preds:
            cells.append(r.get("verdict", "—") if p == "verdict" else
                         ("—" if r["kind"] == "reference" else f(r.get(p), 3, p not in ("mean_rev_kl", "mean_jsd"))))
        body.append(cells)
    return _table(header, body)


def _spearman_table(corr: dict, preds: list[str], kinds: dict, undefined: dict | None = None) -> str:
    header = ["predictor", "kind", *[OUT_NAMES[o] for o in analyze_worlds.OUTCOMES]]
    header += ["rows (undefined)"] if undefined is not None else ["worlds"]
    body = []
    for p in preds:
        cells = [_name(p), kinds[p], *[ci(corr[p][o], 2) for o in analyze_worlds.OUTCOMES]]
        if undefined is not None:
            cells.append(f"{corr[p]['d_pass1']['n_rows']} ({undefined[p]})")
        else:
            cells.append(str(corr[p]["d_pass1"].get("n_worlds")))
        body.append(cells)
    return _table(header, body)


def _accuracy(acc: dict) -> str:
    t = acc["table"]
    return (f"Decisive verdicts (helps / hurts) against the realised class of Δ pass@1: **{acc['n_correct']} of "
            f"{acc['n_decisive']} correct ({f(acc['accuracy'], 2)}, Wilson 95% CI [{f(acc['lo'], 2)}, "
            f"{f(acc['hi'], 2)}])**; `unclear`: {acc['n_unclear']} rows (share {f(acc['unclear_share'], 2)}).\n\n"
            + _table(["verdict \\ realised", "improves", "no clear change", "degrades"],
                     [[v, t[v]["improves"], t[v]["no clear change"], t[v]["degrades"]]
                      for v in ("helps", "unclear", "hurts")]))


def _comparison(c: dict) -> str:
    head = f"The score on Δ pass@1: Spearman {ci(c['primary_rho'], 2)}."
    if "best_baseline" not in c:
        return head + " No cheap baseline (or the score) was defined on these rows: no comparison."
    sign = "" if c["best_baseline_sign"] > 0 else " with its sign reversed (higher values went with lower gains)"
    head += (f" Best cheap baseline: {_name(c['best_baseline'])}{sign}, Spearman {ci(c['best_baseline_rho'], 2)}. "
             f"Paired difference score − baseline: {ci(c['difference'], 2)}.")
    if c["better"]:
        return head + " **The score beats the best cheap baseline** (the interval lies above 0)."
    if c["worse"]:
        return head + f" **We lose to the baseline** ({_name(c['best_baseline'])}): the interval lies below 0."
    if _num(c["difference"]["estimate"]) < 0:
        return head + (f" **We lose to the baseline ({_name(c['best_baseline'])}) on the point estimate**; the "
                       "interval includes 0.")
    return head + " The score does not beat the baseline clearly: the interval includes 0."


def _why(w: dict, p: str, rows: list[dict]) -> str:
    """Rules over the stored numbers that may explain a rank error."""
    row = next(r for r in rows if r["config"] == w["config"] and r["method"] == w["method"])
    hints = []
    kls = sorted(_num(r["kl_to_initial"]["estimate"]) for r in rows if r["kind"] == "product")
    if w["direction"] == "over-predicted" and kls and _num(row["kl_to_initial"]["estimate"]) <= kls[len(kls) // 3]:
        hints.append("training moved the policy little (KL to initial in the lowest third)")
    same = [s for s in rows if s["kind"] == "product" and s["config"] == row["config"] and s is not row
            and analyze_worlds.value(s, p) == analyze_worlds.value(row, p) and s["realised"] != row["realised"]]
    if same:
        hints.append("the predictor has one value for this configuration while its methods realised differently ("
                     + ", ".join(f"{s['method']}: {s['realised']}" for s in same) + ")")
    if w["direction"] == "over-predicted" and _num(row["d_regression"]["estimate"]) < 0:
        hints.append(f"the forgetting set fell ({f(row['d_regression']['estimate'], 3, True)})")
    return "; ".join(hints) if hints else "no rule of thumb applies"


def _world(name: str, w: dict, preds: list[str], kinds: dict) -> list[str]:
    out = [f"## World `{name}`", ""]
    if w["status"] != "analysed":
        return out + [f"Status: **{w['status']}** ({w['note']}).", ""]
    gaps = ", ".join(f"{k}: {f(v, 2)}" for k, v in sorted(w["level_gaps"].items(), key=lambda kv: int(kv[0])))
    t = w["timing"]
    init = w["initial"]
    out += [f"- Level {w['level_selected']} (gaps per level {gaps}); {w['n_rows']} rows over {w['n_configs']} "
            f"configurations x {w['n_seeds']} seed(s); forgetting set: {w['regression_set']}.",
            f"- Initial student: pass@1 {ci(init['pass@1'], sign=False)}, pass@4 {ci(init['pass@4'], sign=False)}, "
            f"forgetting set pass@1 {ci(init['regression_pass@1'], sign=False)} ({init['n_test']} test problems, "
            f"{init['n_regression']} forgetting-set problems).",
            f"- Wall time: {f(t['busy_s'] / 60, 1)} min with jobs running (union of the finished jobs' intervals in "
            "jobs.jsonl; " + ", ".join(f"{k}: {v['n']} jobs, mean {f(v['mean_s'], 1)} s" for k, v in t["jobs"].items())
            + (f"; run_worlds.py measured {f(w['seconds'] / 60, 1)} min)" if w.get("seconds") else ")"), "",
            "### Rows: realised outcomes (95% CI) and predictors", "",
            _rows_table(w["rows"], preds), "",
            "High-entropy shares behind `high-H share` (tokens with entropy at or above the diagnosis' threshold): "
            + "; ".join(sorted({f"{r['config']}: student {f(r.get('high_entropy_student'), 2)}, teacher "
                                f"{f(r.get('high_entropy_teacher'), 2)}" for r in w["rows"] if r["kind"] == "product"}))
            + ".", "",
            "### Spearman of each predictor with each outcome", "",
            "Product rows of this world; interval: bootstrap over configurations and, inside each replicate, the "
            "realised values (seeds and problems).", "",
            _spearman_table(w["spearman"], preds, kinds, w["undefined"]), "",
            "### Verdict accuracy", "", _accuracy(w["verdict_accuracy"]), "",
            "### The score against the best cheap baseline", "", _comparison(w["comparison"]), "",
            "### Method disagreements (same configuration, realised classes differ)", ""]
    if not w["disagreements"]:
        out += ["None: every configuration's methods were classed alike.", ""]
    for d in w["disagreements"]:
        out.append(f"- **{d['config']}**: " + "; ".join(
            f"{m} ({s}) {cls}, Δ pass@1 {ci(g)}, verdict `{v}`"
            for m, s, cls, g, v in zip(d["methods"], d["signals"], d["realised"], d["d_pass1"], d["verdicts"])))
    out += ["", "### Where each predictor is wrong (largest rank errors on Δ pass@1)", "",
            "Ranks scaled to [0, 1] among the rows where the predictor is defined (baselines oriented by the sign "
            "of their Spearman here); error > 0: the predictor ranked the row above what training realised.", ""]
    body = []
    for p in preds:
        for e in w["wrong"][p]:
            body.append([_name(p), f"{e['config']} / {e['method']}", f(e["value"], 3, True), f(e["d_pass1"], 3, True),
                         f(e["rank_error"], 2, True), e["direction"], _why(e, p, w["rows"])])
    out += [_table(["predictor", "row", "value", "Δ pass@1", "rank error", "", "reading"], body) if body
            else "No predictor had three rows to rank.", "",
            f"![score vs realised Δ pass@1 in {name}]({png_name(name)})", ""]
    return out


def _conclusion(an: dict, preds: list[str]) -> list[str]:
    worlds, pooled = an["worlds"], an["pooled"]
    done = [n for n, w in worlds.items() if w["status"] == "analysed"]
    lines = [f"- Worlds analysed: {len(done)} ({', '.join(done) or 'none'})"
             + "".join(f"; {st}: {', '.join(n for n, w in worlds.items() if w['status'] == st)}"
                       for st in ("excluded", "incomplete", "not built", "not run")
                       if any(w["status"] == st for w in worlds.values())) + "."]
    if not pooled:
        return lines + ["- No world is finished yet: nothing is concluded."]
    corr = pooled["spearman"]
    for o in analyze_worlds.OUTCOMES:
        finite = [p for p in preds if math.isfinite(_num(corr[p][o]["estimate"]))]
        if not finite:
            lines.append(f"- {OUT_NAMES[o]}: no predictor is defined.")
            continue
        best = max(finite, key=lambda p: abs(corr[p][o]["estimate"]))
        c = corr[best][o]
        clear = _num(c["lo"]) > 0 or _num(c["hi"]) < 0
        lines.append(f"- {OUT_NAMES[o]}: the largest pooled |Spearman| is {_name(best)} ({ci(c, 2)}; "
                     + ("its interval excludes 0" if clear else "its interval includes 0") + "); the score: "
                     + f"{ci(corr['score'][o], 2)}.")
    text = _comparison(pooled["comparison"])
    lines.append("- Pooled: " + text[0].lower() + text[1:])
    neg = [n for n in done if _num(worlds[n]["spearman"]["score"]["d_pass1"]["estimate"]) < 0]
    if neg:
        lines.append(f"- The score ranks Δ pass@1 the wrong way round (Spearman < 0) in: {', '.join(neg)}.")
    acc = pooled["verdict_accuracy"]
    lines.append(f"- Verdict: {acc['n_correct']} of {acc['n_decisive']} decisive verdicts right "
                 f"({f(acc['accuracy'], 2)}, Wilson [{f(acc['lo'], 2)}, {f(acc['hi'], 2)}]); `unclear` on "
                 f"{f(acc['unclear_share'], 2)} of {pooled['n_rows']} rows.")
    return lines


def markdown(an: dict) -> str:
    preds = [p["name"] for p in an["predictors"]]
    kinds = {p["name"]: p["kind"] for p in an["predictors"]}
    out = [f"# Outcome worlds: does the diagnosis predict what training does? (plan `{an['plan']}`)", "",
           f"Generated by `benchmarks/validity/worlds/report_worlds.py` from `worlds_analysis.json` (beside this "
           f"file), which `analyze_worlds.py` computed from the stored runs in `{an['study']}`; the plan is "
           "`benchmarks/validity/worlds/plan.yaml`, committed before any result of these worlds was seen."]
    if an["plan"] != "default":
        out += ["", f"**This is the `{an['plan']}` variant** (fewer worlds, rows, seeds and steps): a check that the "
                "pipeline works end to end, **not the pre-registered study**; its numbers are too few to judge any "
                "predictor."]
    out += ["", "## Conclusion", "", "Written by rules over the numbers below.", "", *_conclusion(an, preds), "",
            "## Worlds", ""]
    body = [[n, w["status"], w.get("level_selected", "—"), w.get("n_rows", "—"),
             f(w["timing"]["busy_s"] / 60, 1) if "timing" in w else "—",
             ("yes" if w["timing"]["busy_s"] <= 60 * BUDGET_MIN else "**no**") if "timing" in w else "—",
             w["note"] or ""] for n, w in an["worlds"].items()]
    out += [_table(["world", "status", "level", "rows", "wall min (jobs)", f"≤ {BUDGET_MIN} min", "note"], body), ""]
    tests = [(n, w["gap_and_gain"]) for n, w in an["worlds"].items() if w.get("gap_and_gain")]
    if tests:
        out += ["### A large gap that training does not realise (the issue's test of `capacity`, in every world)", "",
                "Gap G of the student shown the full solution (`self_full`) against the best realised Δ pass@1 of "
                "any self-distillation row; the test holds when G >= 0.3 and the gain is at most G / 3.", "",
                _table(["world", "gap G (self_full)", "best self-distillation row", "its Δ pass@1", "holds"],
                       [[n, f(t["gap"], 3, True), f"{t['config']} / {t['method']}", ci(t["d_pass1"]),
                         "yes" if t["holds"] else "no"] for n, t in tests]), ""]
    p = an["pooled"]
    if p:
        out += [f"## Pooled over {len(p['worlds'])} world(s)", "",
                f"{p['n_rows']} rows in {p['n_configs']} (world, configuration) clusters. Outcomes: "
                + "; ".join(f"`{o['name']}`: {o['what']}" for o in an["outcomes"]) + ".", "",
                "### Spearman, pooled rows (clusters = (world, configuration))", "",
                _spearman_table(p["spearman"], preds, kinds, p["undefined"]), "",
                "### Spearman, mean of the per-world coefficients", "",
                "Interval: percentiles of the mean of the worlds' independent bootstrap replicates.", "",
                _spearman_table(p["mean_of_worlds"], preds, kinds), "",
                "### Verdict accuracy, pooled", "", _accuracy(p["verdict_accuracy"]), "",
                "### The score against the best cheap baseline, pooled", "", _comparison(p["comparison"]), "",
                f"![score vs realised Δ pass@1, pooled]({png_name(None)})", ""]
    out += ["## Predictors", "", _table(["predictor", "kind", "what"],
                                        [[_name(x["name"]), x["kind"], x["what"].replace("|", "\\|")]
                                         for x in an["predictors"]]), ""]
    for name, w in an["worlds"].items():
        out += _world(name, w, preds, kinds)
    return "\n".join(out)


def _panel(title: str, rows: list[dict]) -> dict:
    pts = [{"x": _num(r.get("score")), "y": _num(r["d_pass1"]["estimate"]), "lo": _num(r["d_pass1"]["lo"]),
            "hi": _num(r["d_pass1"]["hi"]), "color": COLORS[r["verdict"]],
            "marker": "circle" if r["signal"] == "r_opd" else "square",
            "label": "" if "world" in r else f"{r['config']}/{r['method']}"}  # pooled: too many points to name
           for r in rows if r["kind"] == "product"]
    return {"title": title, "xlabel": "verdict score (diagnosis)", "ylabel": "held-out pass@1 change", "points": pts}


def write(an: dict, out: Path) -> list[Path]:
    """RESULTS.md, the scatters and the analysis JSON into folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    done = {n: w for n, w in an["worlds"].items() if w["status"] == "analysed"}
    for name, w in done.items():
        plot.render(out / png_name(name), [_panel(f"{name}: score vs realised change", w["rows"])])
        written.append(out / png_name(name))
    if done:
        rows = [{**r, "world": n} for n, w in done.items() for r in w["rows"]]
        plot.render(out / png_name(None), [_panel("all worlds: score vs realised change", rows)])
        written.append(out / png_name(None))
    (out / "worlds_analysis.json").write_text(json.dumps(an, indent=1))
    (out / "RESULTS.md").write_text(markdown(an))
    return [*written, out / "worlds_analysis.json", out / "RESULTS.md"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="report_worlds", description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="root", required=True, type=Path,
                    help="worlds study directory (run_worlds --out), or a folder holding worlds_analysis.json")
    ap.add_argument("--out", type=Path, default=HERE, help="folder for RESULTS.md, the PNGs and the JSON")
    args = ap.parse_args(argv)
    if (args.root / "worlds.json").is_file():
        if analyze_worlds.main(["--from", str(args.root)]):
            return 2
    elif not (args.root / "worlds_analysis.json").is_file():
        print(f"report_worlds: error: {args.root} holds neither worlds.json nor worlds_analysis.json: give the "
              "--out folder of run_worlds.py", file=sys.stderr)
        return 2
    an = json.loads((args.root / "worlds_analysis.json").read_text())
    for path in write(an, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
