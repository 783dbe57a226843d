"""The diagnosis' lever recommendation (``engine.levers``) on the worlds' stored diagnoses, for the study's rows.

    python benchmarks/validity/levers/recommend_levers.py [--diag-root /work/runs/v2] [--out /work/runs/levers/recommend]
        [--look 3]
    python benchmarks/validity/levers/recommend_levers.py --look 5 [--out /work/runs/levers5/recommend]

Per world of plan.yaml: the worlds study's diagnosis (``DIAG_ROOT/<world>/diag/main``: its config with its
lookahead settings, its rollouts), the world's best configuration and the loss its method trains (jsd for
jsd and opsd_jsd), and ``engine.levers.run``: each candidate mask's kept shares and lookahead, and the
recommendation (rule 2 of amendment 4 from then on; the first rule, the largest lookahead Δll, is read off the
stored settings by report_levers.py). Written to ``OUT/<world>.json``; report_levers.py reads them. ``--look 3``:
the four first worlds (seen) and the third look's (amendment 4), into ``/work/runs/levers/recommend3`` by default.
``--look 6`` or ``8`` (amendments 7, 9): the sixth or eighth look's worlds, into ``/work/runs/levers/recommendN``. ``--look 5`` (amendment 6): per fifth-look world, its main diagnosis config with the best configuration as its only
teacher, no ideal nodes, and the first-look lookahead on that loss with the plan's ``schedule_points``, diagnosed into
``/work/runs/levers5/<world>/diag/schedule``; its ``schedule`` entry (both rules read it) goes to ``OUT/<world>.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.levers.run_levers import best_of, load_plan, worlds_of  # noqa: E402
from benchmarks.validity.v2 import run_v2  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402
from opsd_diag.config.spec import load_config  # noqa: E402
from opsd_diag.core.stats import jsonable  # noqa: E402
from opsd_diag.engine import levers, lookahead, schedule_points  # noqa: E402
from opsd_diag.io import store  # noqa: E402
from opsd_diag.io.models import load_spec  # noqa: E402

LOSS = {"jsd": "jsd", "opsd_jsd": "jsd", "opd": "opd", "opsd_opd": "opd", "opd2": "opd2", "exopd": "exopd"}


def schedule_diagnosis(plan: dict, world: str, root: Path) -> dict:
    """The fifth look's diagnosis of ``world`` (resumable): its ``schedule`` entry."""
    five = plan["fifth_look"]
    best = five["worlds"][world]
    wplan = run_worlds.resolve(run_worlds.load("default", run_worlds.REPO / plan["worlds_plan"]), world)
    wdir = root / world
    cfg = yaml.safe_load(Path(run_worlds.layout_world(wplan, wdir)["diagnoses"]["main"]).read_text())
    cfg.pop("ideal", None)
    cfg["teachers"] = [t for t in cfg["teachers"] if t["name"] == best["config"]]
    v2 = yaml.safe_load(run_v2.PLAN.read_text())
    cfg["lookahead"] = {**run_v2.lookahead_section(v2, wplan), "methods": [LOSS[best["method"]]],
                        "schedule_points": five["schedule_points"]}
    path = wdir / "configs" / "schedule.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    diag = wdir / "diag" / "schedule"
    if not (diag / "summary.json").is_file() or "schedule" not in json.loads((diag / "summary.json").read_text()):
        subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", str(path), "--out", str(diag), "--quiet"],
                       check=True)
    schedule = json.loads((diag / "summary.json").read_text())["schedule"]
    return {**schedule, "recommendation": schedule_points.recommend(schedule["rows"])}  # the rule as of amendment 6b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diag-root", type=Path, default=Path("/work/runs/v2"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--look", type=int, default=1, choices=(1, 3, 5, 6, 8))
    args = ap.parse_args(argv)
    plan = load_plan()
    if args.look == 5:
        root = Path(plan["fifth_look"]["out"])
        out = args.out or root / "recommend"
        out.mkdir(parents=True, exist_ok=True)
        for world in plan["fifth_look"]["worlds"]:
            schedule = schedule_diagnosis(plan, world, root)
            (out / f"{world}.json").write_text(json.dumps(schedule, indent=1))
            print(world, (schedule.get("recommendation") or {}).get("share"), flush=True)
        return 0
    args.out = args.out or Path("/work/runs/levers/recommend" + (str(args.look) if args.look in (3, 6, 8) else ""))
    args.out.mkdir(parents=True, exist_ok=True)
    worlds = ([*worlds_of(plan, 3), *worlds_of(plan)] if args.look == 3  # the judged worlds first
              else list(worlds_of(plan, args.look)) if args.look in (6, 8) else list(worlds_of(plan)))
    for world in worlds:
        best = best_of(plan, world)
        diag = args.diag_root / world / "diag" / "main"
        if (args.out / f"{world}.json").is_file():  # resumable
            continue
        cfg = load_config(diag / "config.yaml")
        tok, student = load_spec(cfg.student, "cpu")
        t = next(x for x in cfg.teachers if x.name == best["config"])
        teacher = student if t.is_self else load_spec(cfg.student.model_copy(update={"model": t.model}), "cpu")[1]
        base = load_spec(cfg.base, "cpu")[1] if cfg.base is not None else None
        result = levers.run(cfg, student, teacher, base, store.read_table(diag, "rollouts"), best["config"],
                            LOSS[best["method"]], tok.pad_token_id, lookahead)
        (args.out / f"{world}.json").write_text(json.dumps(jsonable({"diagnosis": str(diag), **result}), indent=1))
        print(world, (result.get("recommendation") or {}).get("setting"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
