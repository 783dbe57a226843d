"""An exploration (not pre-registered; it chooses nothing by itself): does the lookahead's own measurement on a
forgetting set predict the realised forgetting better than v2's forgetting model? Issue 32 asks the lookahead to
measure "where a forgetting set is given, their change"; the library does (``lookahead.forgetting``, the pass@1
change of fresh samples from the stepped student against the initial one, same seeds), but no world was ever
rediagnosed with it, so v2's forgetting model (d_regression) never saw it.

Each world with committed rows and models on this machine (marl's build is not shipped: left out) is rediagnosed as
``run_v2.py`` does (the worlds study's diagnosis configs plus the v2 lookahead) with one addition, fixed before any
run: ``lookahead.forgetting`` is a set the training and the held-out evaluation never see, from the same source as
the world's realised forgetting set: the second skill's problems after the held-out ones where the world has a
second skill (``splits.regression.file``: rows ``first`` .. ``first`` + 32), else the train split's problems of
difficulty 1 and 2 that are not diagnosis prompts (the first 32); ``forgetting_samples`` 4. Its column:
``lookahead_forgetting`` (the mean over problems of the pass@1 change).

Printed, all fixed before any run: per world and pooled over the rows, the Spearman with the realised d_regression of
``lookahead_forgetting``, of the shipped v2 forgetting prediction and of G; and v2's forgetting model refitted as
shipped (ridge, alpha 1, its features) with and without ``lookahead_forgetting`` as one more feature: leave one world
out over the seven worlds it was fitted on (the issue's target: pooled Spearman >= 0.7), and fitted on the seven and
applied to every other world (pooled over their rows, and the mean of their per-world coefficients).

    python benchmarks/validity/v2/explore_forgetting_lookahead.py --out DIR [--study STUDY ...] [--worlds a,b]
    python benchmarks/validity/v2/explore_forgetting_lookahead.py --report > explore_forgetting_lookahead.txt

The report reads the rows explore_forgetting_ll.py keeps (``keep``: forgetting_lookahead_rows.json; its rediagnosis
with the same sets and seeds gave the same ``lookahead_forgetting`` on every row), so it reruns without the
rediagnoses.
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
from benchmarks.validity.v2.looks import model_file  # noqa: E402
from benchmarks.validity.v2 import run_v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402
from opsd_diag.core import predictor as model  # noqa: E402

LATER = ["flint", "hearth", "loam"]  # checked since the ninth look (marl's models are not shipped)
N_FORGET = 32
COLUMNS = ("forgetting_ll", "forgetting_kl")  # the scores of the initial samples (explore_forgetting_ll.py)
KEPT = Path(__file__).resolve().parent / "forgetting_lookahead_rows.json"
KEYS = ("config", "method", "lookahead_forgetting", *COLUMNS)


def forgetting_rows(plan: dict) -> list[dict]:
    """The lookahead's forgetting set (module docstring): disjoint from training, diagnosis and held-out problems."""
    if plan["regression_file"]:
        spec = plan["regression_file"]
        rows = plan_mod._read_jsonl(plan_mod.REPO / plan["world"]["problems"] / spec["file"])
        return rows[spec["first"]:spec["first"] + N_FORGET]
    level, _ = plan_mod.select_level(plan)
    diag = {r["id"] for r in plan_mod.split_rows(plan, "diagnosis", level)}
    train = plan_mod._read_jsonl(plan_mod.REPO / plan["world"]["problems"] / "train.jsonl")
    return [r for r in train if (r.get("meta") or {}).get("difficulty") in (1, 2) and r["id"] not in diag][:N_FORGET]


def forgetting_section(plan: dict, world_dir: Path) -> dict:
    """The lookahead section's addition: the world's forgetting set (written into ``world_dir``), 4 samples each."""
    fset = plan_mod._write_jsonl(world_dir / "forgetting.jsonl", forgetting_rows(plan))
    return {"forgetting": {"path": str(fset)}, "forgetting_samples": 4}


def forgetting_columns(la: dict, res: dict) -> dict:
    """A row's columns from its lookahead result ``res`` (in the diagnosis' lookahead ``la``)."""
    # the scores of the initial samples were added to the library after this first ran (explore_forgetting_ll.py)
    return {"lookahead_forgetting": res["forgetting"]["pass@1"]["estimate"],
            "forgetting_prompts": la["forgetting_prompts"], **{k: (res.get(k) or {}).get("estimate") for k in COLUMNS}}


def rediagnose(name: str, plans: dict, out: Path, section_of=forgetting_section, columns_of=forgetting_columns) -> None:
    """The world rediagnosed as run_v2.py does, its lookahead section with ``section_of(plan, world dir)`` added;
    each trained row with ``columns_of(lookahead, its result)`` in ``out/name/lookahead.json`` (a finished world is
    skipped)."""
    world_dir = (out / name).resolve()
    if (world_dir / "lookahead.json").is_file():
        return
    plan = run_worlds.resolve(plans, name)
    t0 = time.time()
    world_dir.mkdir(parents=True, exist_ok=True)
    section = {**run_v2.lookahead_section(yaml.safe_load(run_v2.PLAN.read_text()), plan), **section_of(plan, world_dir)}
    runs = run_v2.diagnose(plan, world_dir, section)
    rows = run_v2.rows_of(plan, runs, world_dir)
    for r in rows:
        _, inner = plan_mod.diag_source(plan, r["config"])
        la = json.loads((runs[r["diagnosis_run"]] / "summary.json").read_text())["lookahead"]
        r.update(columns_of(la, la["configs"][inner][r["loss"]]))
    (world_dir / "lookahead.json").write_text(json.dumps(
        {"world": name, "seconds": round(time.time() - t0, 1), "rows": rows}, indent=1))
    print(f"{name}: {len(rows)} rows in {time.time() - t0:.0f} s", flush=True)


def keep(out: Path, keys: tuple[str, ...] = KEYS, path: Path = KEPT) -> None:
    """Every rediagnosed world's rows (``keys`` only; a lookahead interval as its estimate) into ``path``, one row per
    line."""
    def number(v):  # run_v2.rows_of gives the lookahead's own columns as {estimate, lo, hi, ...}
        return v.get("estimate") if isinstance(v, dict) else v
    worlds = [w for w in dict.fromkeys([*WORLDS, *LATER]) if (out / w / "lookahead.json").is_file()]
    look2.write_records(path, {"worlds": {w: [{k: number(r.get(k)) for k in keys} for r in json.loads(
        (out / w / "lookahead.json").read_text())["rows"]] for w in worlds}})


def kept(path: Path = KEPT) -> dict[str, list[dict]]:
    """World -> its kept rows."""
    return json.loads(path.read_text())["worlds"]


def world_table(name: str, source: dict[str, list[dict]], columns: tuple[str, ...]) -> list[dict]:
    """The world's rows (realised outcomes, shipped features) with ``columns`` from the kept rows ``source``."""
    la = {(r["config"], r["method"]): r for r in source[name]}
    return [{**r, **{k: la[(r["config"], r["method"])][k] for k in columns}}
            for r in look2.load_rows({"worlds": [name]})]


def report(source: dict[str, list[dict]]) -> int:
    col = "lookahead_forgetting"
    return forgetting_report(source, (col,), lambda b: {"refit": b, "refit+forgetting": [*b, col]}, (20, 18), col,
                             lambda f, m: f"; coefficient of {col} {m['coef'][-1]:+.3f}" if col in f else "")


def forgetting_report(source: dict[str, list[dict]], columns: tuple[str, ...], feats_of, widths: tuple[int, int],
                      what: str, coef_text) -> int:
    """Both forgetting explorations' report: per world and pooled, the Spearman with the realised d_regression of
    ``columns``, the shipped v2 forgetting prediction and G; then v2's forgetting model refitted with the feature
    sets ``feats_of(its features)`` (``coef_text(features, model)`` ends each line)."""
    shipped = model_file(16)
    base = shipped["models"]["v2"]["d_regression"]
    worlds = [w for w in dict.fromkeys([*WORLDS, *LATER]) if w in source]
    rows = {w: world_table(w, source, columns) for w in worlds}
    y = {w: v2.target(rows[w], "d_regression") for w in worlds}
    cols = {w: {**{k: np.array([v2._num(r[k]) for r in rows[w]]) for k in columns},
                "shipped v2": model.predict(base, v2.matrix(rows[w], base["features"])),
                "G": np.array([v2._num(r["accuracy_gap"]) for r in rows[w]])} for w in worlds}
    names, (cw, fw) = list(cols[worlds[0]]), widths
    print(f"Spearman with the realised d_regression ({len(worlds)} worlds)")
    print(f"{'world':34s} rows  " + "  ".join(f"{k:>{cw}s}" for k in names))
    for w in worlds:
        tag = " (v2 fitted on it)" if w in look8.FITTED else ""
        print(f"{w + tag:34s} {len(rows[w]):4d}  "
              + "  ".join(f"{stats.spearman(cols[w][k], y[w]):+{cw}.2f}" for k in names))
    for scope, keep in (("all", worlds), ("never fitted on", [w for w in worlds if w not in look8.FITTED])):
        yy = np.concatenate([y[w] for w in keep])
        print(f"pooled over the rows of the {len(keep)} worlds ({scope}): " + ", ".join(
            f"{k} {stats.spearman(np.concatenate([cols[w][k] for w in keep]), yy):+.2f}" for k in names)
              + "; mean of worlds: " + ", ".join(
            f"{k} {np.nanmean([stats.spearman(cols[w][k], y[w]) for w in keep]):+.2f}" for k in names))
    fitted = [r for w in look8.FITTED if w in rows for r in rows[w]]
    yf = v2.target(fitted, "d_regression")
    other = [w for w in worlds if w not in look8.FITTED]
    print(f"\nv2's forgetting model refitted (ridge, alpha as shipped), with and without {what}:")
    for k, f in feats_of(list(base["features"])).items():
        pred = v2.lowo(fitted, f, "d_regression", base["alpha"], inner=False)["pred"]
        ok = np.isfinite(yf)
        m = model.fit(v2.matrix(fitted, f)[ok], yf[ok], f, base["alpha"])
        p = {w: model.predict(m, v2.matrix(rows[w], f)) for w in other}
        pooled = stats.spearman(np.concatenate([p[w] for w in other]), np.concatenate([y[w] for w in other]))
        print(f"  {k:{fw}s} LOWO over the seven, pooled {stats.spearman(pred, yf):+.2f}; fitted on the seven, on the "
              f"{len(other)} others pooled {pooled:+.2f}, mean of worlds "
              f"{np.nanmean([stats.spearman(p[w], y[w]) for w in other]):+.2f}" + coef_text(f, m))
    return 0


def main(argv: list[str] | None = None, doc: str = __doc__, report_of=None, keep=None, kept_rows=kept,
         rediagnose_world=rediagnose) -> int:
    """Rediagnose (``--out``: ``rediagnose_world``), print the report from the kept rows (``--report``:
    ``report_of(kept_rows())``) or, where ``keep`` is given, keep ``--out``'s rows (``--keep``); the lookahead
    explorations' command line."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--study", type=Path, action="append", default=[], help="a worlds study whose --spec worlds to add")
    ap.add_argument("--worlds", help="comma-separated subset")
    ap.add_argument("--report", action="store_true", help="print the report from the kept rows")
    if keep is not None:
        ap.add_argument("--keep", action="store_true", help="keep --out's rows (the kept-rows file)")
    args = ap.parse_args(argv)
    if args.report:
        return (report_of or report)(kept_rows())
    if args.out is None:
        ap.error("--out is required")
    if getattr(args, "keep", False):
        keep(args.out)
        return 0
    plans = run_worlds.load()
    for study in args.study:
        plans["worlds"].update(run_worlds.load_study(study)["worlds"])
    names = args.worlds.split(",") if args.worlds else [w for w in dict.fromkeys([*WORLDS, *LATER])
                                                         if w in plans["worlds"]]
    for name in names:
        rediagnose_world(name, plans, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
