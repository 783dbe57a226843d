"""A second forgetting exploration (not pre-registered; it chooses nothing by itself), after
explore_forgetting_lookahead.txt found the lookahead's forgetting pass@1 flat where the student is sure of its second
skill: do the two scoring measures added since (``forgetting_ll``: the log-likelihood change of the initial
student's correct forgetting samples under the stepped student; ``forgetting_kl``: KL to the initial student at
their positions; docs/signals.md) predict the realised forgetting better than v2's forgetting model?

Same worlds, forgetting sets and settings as explore_forgetting_lookahead.py (its ``forgetting_rows`` and lookahead
section), rediagnosed with the library as it now stands into a fresh directory. Printed, all fixed before any run:
per world and pooled, the Spearman with the realised d_regression of ``forgetting_ll``, ``forgetting_kl``, the shipped
v2 forgetting prediction and G; and v2's forgetting model refitted as shipped (ridge, alpha 1, its features) with each
of the two as one more feature, and with both: leave one world out over the seven worlds it was fitted on (the
issue's target: pooled Spearman >= 0.7), and fitted on the seven and applied to every other world.

    python benchmarks/validity/v2/explore_forgetting_ll.py --out DIR [--study STUDY ...] [--worlds a,b]
    python benchmarks/validity/v2/explore_forgetting_ll.py --out DIR --keep   # the rows into forgetting_lookahead_rows.json
    python benchmarks/validity/v2/explore_forgetting_ll.py --report > explore_forgetting_ll.txt   # from the kept rows

The kept rows (per world and row: the three lookahead forgetting columns, ``lookahead_forgetting`` equal to
explore_forgetting_lookahead's on every row) let both reports rerun without the rediagnoses.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2 import run_v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.v2.explore_forgetting_lookahead import LATER, forgetting_rows  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

COLUMNS = ("forgetting_ll", "forgetting_kl")
KEPT = Path(__file__).resolve().parent / "forgetting_lookahead_rows.json"
KEYS = ("config", "method", "lookahead_forgetting", *COLUMNS)


def keep(out: Path) -> None:
    """Every rediagnosed world's rows (``KEYS`` only) into ``KEPT``."""
    worlds = [w for w in dict.fromkeys([*WORLDS, *LATER]) if (out / w / "lookahead.json").is_file()]
    KEPT.write_text(json.dumps({"worlds": {w: [{k: r[k] for k in KEYS} for r in json.loads(
        (out / w / "lookahead.json").read_text())["rows"]] for w in worlds}}, indent=0) + "\n")


def kept() -> dict[str, list[dict]]:
    """World -> its kept rows."""
    return json.loads(KEPT.read_text())["worlds"]


def rediagnose(name: str, plans: dict, out: Path) -> None:
    world_dir = (out / name).resolve()
    if (world_dir / "lookahead.json").is_file():
        return
    plan = run_worlds.resolve(plans, name)
    t0 = time.time()
    fset = plan_mod._write_jsonl(world_dir / "forgetting.jsonl", forgetting_rows(plan))
    section = {**run_v2.lookahead_section(yaml.safe_load(run_v2.PLAN.read_text()), plan),
               "forgetting": {"path": str(fset)}, "forgetting_samples": 4}
    runs = run_v2.diagnose(plan, world_dir, section)
    rows = run_v2.rows_of(plan, runs, world_dir)
    for r in rows:
        _, inner = plan_mod.diag_source(plan, r["config"])
        la = json.loads((runs[r["diagnosis_run"]] / "summary.json").read_text())["lookahead"]
        res = la["configs"][inner][r["loss"]]
        r.update({k: (res.get(k) or {}).get("estimate") for k in COLUMNS})
        r["lookahead_forgetting"] = res["forgetting"]["pass@1"]["estimate"]
    (world_dir / "lookahead.json").write_text(json.dumps(
        {"world": name, "seconds": round(time.time() - t0, 1), "rows": rows}, indent=1))
    print(f"{name}: {len(rows)} rows in {time.time() - t0:.0f} s", flush=True)


def world_table(name: str, source: dict[str, list[dict]]) -> list[dict]:
    la = {(r["config"], r["method"]): r for r in source[name]}
    return [{**r, **{k: la[(r["config"], r["method"])][k] for k in COLUMNS}}
            for r in look2.load_rows({"worlds": [name]})]


def report(source: dict[str, list[dict]]) -> int:
    shipped = json.loads(v2.SHIPPED.read_text())
    base = shipped["models"]["v2"]["d_regression"]
    feats = {"refit": list(base["features"]), **{f"refit+{k}": [*base["features"], k] for k in COLUMNS},
             "refit+both": [*base["features"], *COLUMNS]}
    worlds = [w for w in dict.fromkeys([*WORLDS, *LATER]) if w in source]
    rows = {w: world_table(w, source) for w in worlds}
    y = {w: v2.target(rows[w], "d_regression") for w in worlds}
    cols = {w: {**{k: np.array([v2._num(r[k]) for r in rows[w]]) for k in COLUMNS},
                "shipped v2": model.predict(base, v2.matrix(rows[w], base["features"])),
                "G": np.array([v2._num(r["accuracy_gap"]) for r in rows[w]])} for w in worlds}
    names = list(cols[worlds[0]])
    print(f"Spearman with the realised d_regression ({len(worlds)} worlds)")
    print(f"{'world':34s} rows  " + "  ".join(f"{k:>14s}" for k in names))
    for w in worlds:
        tag = " (v2 fitted on it)" if w in look8.FITTED else ""
        print(f"{w + tag:34s} {len(rows[w]):4d}  "
              + "  ".join(f"{stats.spearman(cols[w][k], y[w]):+14.2f}" for k in names))
    for scope, keep in (("all", worlds), ("never fitted on", [w for w in worlds if w not in look8.FITTED])):
        yy = np.concatenate([y[w] for w in keep])
        print(f"pooled over the rows of the {len(keep)} worlds ({scope}): " + ", ".join(
            f"{k} {stats.spearman(np.concatenate([cols[w][k] for w in keep]), yy):+.2f}" for k in names)
              + "; mean of worlds: " + ", ".join(
            f"{k} {np.nanmean([stats.spearman(cols[w][k], y[w]) for w in keep]):+.2f}" for k in names))
    fitted = [r for w in look8.FITTED if w in rows for r in rows[w]]
    yf = v2.target(fitted, "d_regression")
    other = [w for w in worlds if w not in look8.FITTED]
    print("\nv2's forgetting model refitted (ridge, alpha as shipped), with and without the new columns:")
    for k, f in feats.items():
        pred = v2.lowo(fitted, f, "d_regression", base["alpha"], inner=False)["pred"]
        ok = np.isfinite(yf)
        m = model.fit(v2.matrix(fitted, f)[ok], yf[ok], f, base["alpha"])
        p = {w: model.predict(m, v2.matrix(rows[w], f)) for w in other}
        pooled = stats.spearman(np.concatenate([p[w] for w in other]), np.concatenate([y[w] for w in other]))
        extra = ", ".join(f"{n} {c:+.3f}" for n, c in zip(f, m["coef"]) if n in COLUMNS)
        print(f"  {k:22s} LOWO over the seven, pooled {stats.spearman(pred, yf):+.2f}; fitted on the seven, on the "
              f"{len(other)} others pooled {pooled:+.2f}, mean of worlds "
              f"{np.nanmean([stats.spearman(p[w], y[w]) for w in other]):+.2f}"
              + (f"; coefficients {extra}" if extra else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--study", type=Path, action="append", default=[], help="a worlds study whose --spec worlds to add")
    ap.add_argument("--worlds", help="comma-separated subset")
    ap.add_argument("--report", action="store_true", help="print the report from the kept rows")
    ap.add_argument("--keep", action="store_true", help="keep --out's rows in forgetting_lookahead_rows.json")
    args = ap.parse_args(argv)
    if args.report:
        return report(kept())
    if args.out is None:
        ap.error("--out is required to rediagnose or --keep")
    if args.keep:
        keep(args.out)
        return 0
    plans = run_worlds.load()
    for study in args.study:
        plans["worlds"].update(run_worlds.load_study(study)["worlds"])
    names = args.worlds.split(",") if args.worlds else [w for w in dict.fromkeys([*WORLDS, *LATER])
                                                         if w in plans["worlds"]]
    for name in names:
        rediagnose(name, plans, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
