"""Rediagnose the outcome worlds with the lookahead of predictor v2 (plan.yaml here), one world after another.

    python benchmarks/validity/v2/run_v2.py --out DIR [--worlds capacity,style] [--plan default|quick] [--look 2]
        [--study WORLDS_STUDY]   # with the worlds its run_worlds.py --spec added

Each world's diagnosis configs are the worlds study's own (``worlds/run_worlds.py`` lays them out:
same data, seeds, sampling and scoring, so the same student rollouts), plus this plan's ``lookahead``
section; the ideal-gradient predictor is left out (its v1 columns, like every realised outcome, are
read from the committed worlds analysis). Writes ``DIR/<world>/diag/<run>/`` (an ordinary run
directory) and ``DIR/<world>/lookahead.json`` (the rows' lookahead columns and cost). Resumable:
rerun the same command and finished diagnoses are skipped. ``--look 2``: the second look's settings
(plan_look2.yaml: its worlds, and fresh samples in the lookahead, whose pass@1 change is ``lookahead_fresh``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import runs_io  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan.yaml"
PLAN_LOOK2 = HERE / "plan_look2.yaml"
# the row's method -> the loss the lookahead steps with (a self-teacher's opsd_* trains that loss, frozen teacher)
LOSS = {"opd": "opd", "jsd": "jsd", "opd2": "opd2", "exopd": "exopd", "opsd_opd": "opd", "opsd_jsd": "jsd"}


def lookahead_section(v2: dict, worlds_plan: dict, fresh_samples: int = 0) -> dict:
    la = v2["lookahead"]
    tr = worlds_plan["training"]
    return {"methods": ["opd", "jsd", "opd2", "exopd"], "steps": la["steps"],
            "rollouts_per_step": la["rollouts_per_step"], "learning_rate": tr["learning_rate"], "clip": 1.0,
            "seed": la["seed"], **({"fresh_samples": fresh_samples} if fresh_samples else {})}


def diag_configs(plan: dict, out: Path, section: dict) -> dict[str, Path]:
    """The world's diagnosis configs (as the worlds study lays them out), with the lookahead, without ``ideal``."""
    layout = run_worlds.layout_world(plan, out)
    paths = {}
    for run, path in layout["diagnoses"].items():
        cfg = yaml.safe_load(Path(path).read_text())
        cfg.pop("ideal", None)
        cfg["lookahead"] = section
        new = out / "configs" / f"v2.{run}.yaml"
        new.write_text(yaml.safe_dump(cfg, sort_keys=False))
        paths[run] = new
    return paths


def diagnose(plan: dict, world_dir: Path, section: dict) -> dict[str, Path]:
    """The world's diagnoses with the lookahead ``section`` (run -> directory); finished ones are reused."""
    runs = {}
    for run, cfg in diag_configs(plan, world_dir, section).items():
        d = world_dir / "diag" / run
        if not runs_io.diag_finished(d):
            subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", str(cfg), "--out", str(d), "--quiet"],
                           check=True)
        runs[run] = d
    return runs


def rows_of(plan: dict, runs: dict[str, Path], world_dir: Path) -> list[dict]:
    """One record per trained (configuration, method) row: its lookahead columns and their cost."""
    out = []
    trained = {(c, m) for c, m, _ in (n.split("__") for n in run_worlds.layout_world(plan, world_dir)["trainings"])}
    tr = plan["training"]
    run_cost = tr["max_steps"] * tr["per_device_train_batch_size"]  # completions sampled, scored, trained per run
    for row in plan_mod.rows(plan):
        if (row.config, row.method) not in trained:
            continue
        run, inner = plan_mod.diag_source(plan, row.config)
        la = json.loads((runs[run] / "summary.json").read_text())["lookahead"]
        r = la["configs"][inner][LOSS[row.method]]
        fresh = r.get("fresh", {}).get("pass@1", {})
        out.append({"config": row.config, "method": row.method, "loss": LOSS[row.method], "diagnosis_run": run,
                    "lookahead_dv": r["dv"], "lookahead_dll": r["dll"], "lookahead_kl": r["kl"],
                    "trained_tokens": r["trained_tokens"], "partner_scored_tokens": r["partner_scored_tokens"],
                    "measured_tokens": r["measured_tokens"], "n_step_rollouts": la["n_step_rollouts"],
                    **({"lookahead_fresh": fresh.get("estimate"), "lookahead_fresh_lo": fresh.get("lo"),
                        "lookahead_fresh_hi": fresh.get("hi"), "fresh_sampled_tokens": r.get("fresh_sampled_tokens"),
                        "fresh_initial_tokens": la.get("fresh_initial_tokens")} if fresh else {}),
                    "n_measure_rollouts": la["n_measure_rollouts"], "training_run_completions": run_cost})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--worlds", help="comma-separated subset (default: the plan's seven)")
    ap.add_argument("--plan", default="default", choices=("default", "quick"), help="the worlds plan variant")
    ap.add_argument("--look", type=int, default=1, choices=(1, 2), help="the first look's settings or the second's")
    ap.add_argument("--study", type=Path, help="the worlds study (run_worlds.py --out) whose --spec worlds to add")
    args = ap.parse_args(argv)
    v2 = yaml.safe_load(PLAN.read_text())
    look2 = yaml.safe_load(PLAN_LOOK2.read_text()) if args.look == 2 else None
    fresh = look2["lookahead"]["fresh_samples"] if look2 else 0
    plans = run_worlds.load_study(args.study, args.plan) if args.study else run_worlds.load(args.plan)
    worlds = args.worlds.split(",") if args.worlds else (look2 or v2)["worlds"]
    for name in worlds:
        world_dir = (args.out / name).resolve()
        if (world_dir / "lookahead.json").is_file():
            continue
        plan = run_worlds.resolve(plans, name)
        t0 = time.time()
        rows = rows_of(plan, diagnose(plan, world_dir, lookahead_section(v2, plan, fresh)), world_dir)
        (world_dir / "lookahead.json").write_text(json.dumps(
            {"world": name, "seconds": round(time.time() - t0, 1), "rows": rows}, indent=1))
        print(f"{name}: {len(rows)} rows in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
