"""The shipped predictor on a world nobody fitted it on: no refit, one command (issue 32, item 5).

    python benchmarks/validity/v2/check_world.py (--world NAME | --spec NEW.yaml) --study DIR [--lookahead DIR]
        [--write FILE] [--keep]

``DIR/NAME/`` is a world's study made by ``worlds/run_worlds.py`` (diagnoses, training runs, evaluations;
NAME one of the worlds plan's, or a world nobody has seen: ``run_worlds.py --out DIR --spec NEW.yaml`` after
``opsd-diag zoo build --world NEW.yaml``, no edit of the plan). The world's rows and realised outcomes are read
exactly as the worlds analysis reads them (``worlds/analyze_worlds.world_rows``); the lookahead columns
come from a rediagnosis with the v2 lookahead (``run_v2.py``, into ``--lookahead``, default
``DIR/v2-lookahead``; reused when already there). The package's shipped model
(``opsd_diag/data/predictor_v2.json``) is then applied as it is, and the script prints Spearman with
the realised d_pass1, the decisive accuracy, the coverage of the 95% intervals and the method-order
accuracy of every model the file ships, of the accuracy gap G on the same rows, and of the product's own ranking
when G ranks (the file's ranking rule on G, then its method order, then v2's predicted gain:
``looks.product_order``), and each model's Spearman with the realised d_pass4, forgetting-set change
(d_regression) and KL to the initial student. ``--keep`` copies the world's analysis and lookahead rows into ``checks/`` here, where
a later look reads them as a seen world's and tests/test_v2_checks.py recomputes the figures from them, and stores
the world's answer-only failure check per config in answer_shares.json (answer_shares.py: it needs the diagnosis'
tokens, which the rows do not hold).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from importlib import resources
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import answer_shares, report_look2, report_v2, run_v2  # noqa: E402
from benchmarks.validity.v2.looks import product_order, shipped_gain  # noqa: E402
from benchmarks.validity.worlds import analyze_worlds, run_worlds  # noqa: E402
from opsd_diag.core import predictor  # noqa: E402
from opsd_diag.errors import OpsdError  # noqa: E402
from opsd_diag.zoo import world as world_mod  # noqa: E402


OTHER = ("d_pass4", "d_regression", "kl_to_initial")  # the shipped models' other outcomes (d_regression: forgetting)


def shipped() -> dict:
    return json.loads(resources.files("opsd_diag").joinpath("data/predictor_v2.json").read_text())


def second_skill(world: str) -> bool:
    """Whether the world's student has a second skill (then its forgetting set, else the task's easy levels), read
    from its spec where it is kept (``checks/`` for a build not shipped)."""
    spec = report_v2.REPO / "sample_data" / "worlds" / f"{world}.yaml"
    return world_mod.load(spec if spec.is_file() else report_look2.CHECKS / f"{world}.yaml").student \
        .second_skill is not None


def forgetting_by_set(rows: list[dict], predicted: np.ndarray) -> dict:
    """Spearman of a predicted forgetting-set change with the realised one, pooled over ``rows`` split by what each
    world's forgetting set is: a second skill training never shows (the forgetting users fear) or the task's own
    easy levels; with the mean of the per-world coefficients and the number of worlds in each."""
    skills = {w: second_skill(w) for w in {r["world"] for r in rows}}
    y = report_v2.target(rows, "d_regression")
    out = {}
    for name, want in (("second_skill", True), ("easy_levels", False)):
        k = np.array([skills[r["world"]] is want for r in rows]) & np.isfinite(predicted) & np.isfinite(y)
        kept = [r for r, keep in zip(rows, k) if keep]
        out[name] = {"spearman": stats.spearman(predicted[k], y[k]),
                     "mean_of_worlds": report_v2.per_world(predicted[k], kept, "d_regression")["mean"],
                     "worlds": len({r["world"] for r in kept})}
    return out


def world_rows(world: str, study: Path, lookahead_dir: Path, plans: dict) -> list[dict]:
    """The world's product rows with their realised outcomes and lookahead columns (rediagnosing if needed);
    ``plans``: the study's (``run_worlds.load_study``: the plan's worlds and those its --spec added)."""
    plan = run_worlds.resolve(plans, world)
    rows, _, _ = analyze_worlds.world_rows(study / world, plan, np.random.default_rng(0))
    rows = [r for r in rows if r.get("kind") == "product"]
    if not (lookahead_dir / world / "lookahead.json").is_file():
        run_v2.main(["--out", str(lookahead_dir), "--worlds", world, "--study", str(study)])
    return with_lookahead(world, rows, json.loads((lookahead_dir / world / "lookahead.json").read_text())["rows"])


def with_lookahead(world: str, rows: list[dict], lookahead: list[dict]) -> list[dict]:
    """The product rows with their lookahead columns (``lookahead.json``'s rows) and the model's row keys."""
    la = {(r["config"], r["method"]): r for r in lookahead}
    for r in rows:
        x = la[(r["config"], r["method"])]
        r.update({k: x[k]["estimate"] for k in ("lookahead_dv", "lookahead_dll", "lookahead_kl")},
                 world=world, is_jsd=predictor.LOSS_KIND[r["method"]])
    return rows


def figures(world: str, rows: list[dict], ship: dict | None = None) -> dict:
    """The shipped file's models, G and the product's ranking scored on one world's rows (no refit); ``ship``: the
    model file as it stood when a world was checked (default: as it is)."""
    ship = ship or shipped()
    y = report_v2.target(rows, "d_pass1")
    g = np.array([report_v2._num(r["accuracy_gap"]) for r in rows])
    out = {"world": world, "choice": ship["choice"], "n_rows": len(rows),
           "models": {"accuracy_gap": {"spearman": stats.spearman(g, y), "decisive": None,
                                       "method_order": report_v2.method_order(g, rows)}}}
    if ship["choice"] == "accuracy_gap":  # the product's ranking: G, the file's method order, v2's gain
        mo = ship.get("method_order") or {}
        rule = mo.get("rule", "predicted_gain")
        order = product_order(rows, shipped_gain(rows, ship), rule, mo.get("sampled_scale", 1.0))
        out["models"][f"product ({rule})"] = {"spearman": stats.spearman(order, y), "decisive": None,
                                             "method_order": report_v2.method_order(order, rows)}
    for tier, per in ship["models"].items():  # every shipped model as it is, the chosen one marked by `choice`
        m = per["d_pass1"]
        pred, lo, hi = predictor.interval(m, report_v2.matrix(rows, m["features"]))
        fold = {"pred": pred, "lo": lo, "hi": hi}
        dec = report_v2.decisions(fold, rows, ship["delta"])
        out["models"][tier] = {"spearman": stats.spearman(pred, y), "method_order": report_v2.method_order(pred, rows),
                               "decisive": {k: dec[k] for k in ("n_decisive", "n_correct", "accuracy", "unclear_share",
                                                                "coverage")},
                               "other": {o: stats.spearman(shipped_gain(rows, ship, tier, o), report_v2.target(rows, o))
                                         for o in OTHER}}
    return out


def text(c: dict) -> str:
    f = report_v2.fmt
    lines = [f"world {c['world']} ({c['n_rows']} rows); every shipped model as it is, no refit (the product uses "
             f"'{c['choice']}'):"]
    for name, m in c["models"].items():
        mo = m["method_order"]
        line = (f"  {name}{' (chosen)' if name == c['choice'] else ''}: Spearman with realised d_pass1 "
                f"{f(m['spearman'])}; method order (pairs > 0.10 apart) {mo['n_right']}/{mo['n_pairs']}")
        d = m["decisive"]
        if d:
            acc = "n/a" if d["accuracy"] is None or not math.isfinite(d["accuracy"]) else f"{d['accuracy']:.0%}"
            line += (f"; decisive verdicts right {d['n_correct']}/{d['n_decisive']} ({acc}), unclear "
                     f"{d['unclear_share']:.0%}, 95% intervals cover {d['coverage']:.0%}\n    its other predictions' "
                     "Spearman with the realised " + ", ".join(f"{o} {f(m['other'][o])}" for o in OTHER))
        lines.append(line)
    return "\n".join(lines)


def unusable(world: str, study: Path, plans: dict, rerun: str) -> str | None:
    """Why ``study`` holds nothing to check for ``world`` (``rerun``: the command that makes it), or None."""
    state = study / "worlds.json"
    entry = (json.loads(state.read_text()) if state.is_file() else {}).get("worlds", {}).get(world, {})
    if world not in plans["worlds"] or not entry:
        return f"{study} has no study of world {world!r}: run {rerun} first"
    if entry.get("excluded"):
        return f"world {world!r} was excluded by the plan's level rule ({entry['excluded']}): there is nothing to check"
    if not entry.get("finished"):
        return f"the study of world {world!r} in {study} has not finished: rerun {rerun} (it resumes)"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--world", help="a world of the plan, or one the study added with run_worlds.py --spec")
    which.add_argument("--spec", type=Path, help="the new world's spec (its name is the world's)")
    ap.add_argument("--study", required=True, type=Path, help="run_worlds.py's output directory")
    ap.add_argument("--lookahead", type=Path, help="where the v2 rediagnosis goes (default STUDY/v2-lookahead)")
    ap.add_argument("--write", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--keep", action="store_true",
                    help="also copy the world's analysis and lookahead rows into benchmarks/validity/v2/checks/ "
                         "(the committed rows a later look reads, and a test recomputes the figures from)")
    args = ap.parse_args(argv)
    try:
        world = args.world or world_mod.load(args.spec).name
        plans = run_worlds.load_study(args.study)  # a spec the study recorded must still be there
    except (OpsdError, ValueError) as e:
        print(f"check_world: error: {e}", file=sys.stderr)
        return 2
    problem = unusable(world, args.study, plans, f"run_worlds.py --out {args.study} "
                       + (f"--spec {args.spec}" if args.spec else f"--worlds {world}"))
    if problem:
        print(f"check_world: error: {problem}", file=sys.stderr)
        return 2
    study = args.study.resolve()
    c = figures(world, world_rows(world, study, (args.lookahead or study / "v2-lookahead").resolve(), plans))
    print(text(c))
    if args.keep:
        report_look2.store_added(world, args.study, args.lookahead, report_look2.CHECKS / f"{world}_analysis.json")
        if (shares := answer_shares.measure(study, world)) is not None:  # the answer-only check, per config
            answer_shares.store(world, shares)
    if args.write:
        args.write.write_text(json.dumps(report_v2.stats_jsonable(c), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
