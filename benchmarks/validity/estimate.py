"""Estimate the wall time of a plan variant from a finished smaller study (e.g. ``quick``).

    python benchmarks/validity/estimate.py --from QUICK_DIR [--plan default] [--workers 2]

Measured per job in QUICK_DIR (jobs.jsonl: CPU seconds of each process; metrics.jsonl: the share
of a training run spent in optimizer steps; manifest.json: the share of a diagnosis spent before
the ideal-gradient predictor), each job of the target plan is costed as

- training:   fixed start-up CPU + steps x CPU per step (same batch and completion length);
- evaluation: per policy, CPU proportional to the rows sampled (test problems x samples +
              regression problems x samples), the evaluation processes' start-ups included;
- diagnosis:  start-up + sampling/scoring CPU x (prompts ratio x configurations ratio)
              + ideal-gradient CPU x (budget ratio),

and the jobs are then list-scheduled on ``workers`` single-threaded processes (diagnoses first, as
run_study.py does).  CPU seconds, not wall seconds, because on a shared machine other users'
load inflates wall time; the estimate is the wall time on an otherwise idle 2-core machine.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import runs_io  # noqa: E402


def _jobs(study: Path) -> dict[str, dict]:
    recs = [json.loads(line) for line in (study / "jobs.jsonl").read_text().splitlines() if line.strip()]
    return {r["job"]: r for r in recs if r.get("ok") and r.get("cpu_s") is not None}


def measure(study: Path) -> dict:
    plan = json.loads((study / "plan.resolved.json").read_text())
    jobs = _jobs(study)
    train_fixed, train_step = [], []
    for name, rec in jobs.items():
        if rec["kind"] != "training":
            continue
        recs = [r for r in runs_io.train_metrics(study / "train" / name.removeprefix("train."))
                if r.get("kind") == "train"]
        if not recs:
            continue
        step_wall = sum(r["step_time_s"] for r in recs)
        frac = min(1.0, step_wall / max(rec["seconds"], 1e-9))
        train_step.append(rec["cpu_s"] * frac / len(recs))
        train_fixed.append(rec["cpu_s"] * (1 - frac))
    ev = plan["evaluation"]
    n_test = len((study / "data" / "test.jsonl").read_text().splitlines())
    n_reg = len((study / "data" / "regression.jsonl").read_text().splitlines())
    eval_rows = n_test * ev["num_samples"] + n_reg * ev["regression_samples"]
    eval_cpu = sum(r["cpu_s"] for r in jobs.values() if r["kind"] == "evaluation")
    n_policies = len(list((study / "eval").glob("*.json"))) - len(list((study / "eval").glob("jobs.*.json")))
    diag = {}
    for name, rec in jobs.items():
        if rec["kind"] != "diagnosis":
            continue
        run = name.removeprefix("diag.")
        m = runs_io.diag_manifest(study / "diag" / run)
        frac = min(1.0, float(m["seconds"]) / max(rec["seconds"], 1e-9))
        n_cfg = len(m["config"]["teachers"])
        diag[run] = {"cpu": rec["cpu_s"], "score_cpu": rec["cpu_s"] * frac, "ideal_cpu": rec["cpu_s"] * (1 - frac),
                     "configs": n_cfg}
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"plan": plan, "train_fixed_cpu": mean(train_fixed), "train_step_cpu": mean(train_step),
            # process start-ups included: conservative for a plan with more policies per process
            "eval_cpu_per_row": eval_cpu / max(1, n_policies) / eval_rows, "diag": diag}


def estimate(m: dict, target: dict, workers: int) -> dict:
    src = m["plan"]
    steps = target["training"]["max_steps"]
    n_rows = len(plan_mod.rows(target)) * len(target["training"]["seeds"])
    t_train = m["train_fixed_cpu"] + steps * m["train_step_cpu"] * (
        target["training"]["per_device_train_batch_size"] / src["training"]["per_device_train_batch_size"])
    level = src["level_selected"]
    n_test = len(plan_mod.split_rows(target, "test", level))
    n_reg = len(plan_mod.split_rows(target, "regression", level))
    ev = target["evaluation"]
    t_eval = m["eval_cpu_per_row"] * (n_test * ev["num_samples"] + n_reg * ev["regression_samples"])
    ref = next(iter(m["diag"].values()))
    src_prompts = src["splits"]["diagnosis"]["first"] * src["diagnosis"]["sampling"]["num_samples"]
    tgt_prompts = target["splits"]["diagnosis"]["first"] * target["diagnosis"]["sampling"]["num_samples"]
    n_main = sum(1 for c in target["configurations"] if not c.get("derive"))
    budget_ratio = target["diagnosis"]["ideal"]["budget"] / src["diagnosis"]["ideal"]["budget"]
    startup = m["train_fixed_cpu"]
    # sampling and scoring: per rollout, one forward per view (student, base, each config)
    t_diag = startup + (ref["score_cpu"] - startup) * (tgt_prompts / src_prompts) * ((n_main + 2) / (ref["configs"] + 2)) \
        + ref["ideal_cpu"] * budget_ratio
    n_diag = len(plan_mod.derived_runs(target))
    # list scheduling on `workers` processes: diagnoses first, then training runs, then the evaluation
    heap = [0.0] * workers
    for t in [t_diag] * n_diag + [t_train] * n_rows:
        heapq.heapreplace(heap, heap[0] + t)
    runs_end = max(heap)
    evals = n_rows + 1
    eval_wall = t_eval * -(-evals // workers)
    return {"training_runs": n_rows, "diagnoses": n_diag, "train_cpu_each": t_train, "diag_cpu_each": t_diag,
            "eval_cpu_each": t_eval, "runs_wall": runs_end, "eval_wall": eval_wall,
            "total_wall_min": (runs_end + eval_wall) / 60}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="src", required=True, help="a finished study directory (quick)")
    ap.add_argument("--plan", default="default", choices=plan_mod.VARIANTS)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    m = measure(Path(args.src))
    target = plan_mod.load(args.plan)
    est = estimate(m, target, args.workers)
    print(json.dumps({"measured": {k: v for k, v in m.items() if k != "plan"}, "estimate": est}, indent=1))
    print(f"estimated wall time of plan '{args.plan}' on an idle machine with {args.workers} workers: "
          f"{est['total_wall_min']:.0f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
