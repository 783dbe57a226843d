"""Run the predictive-validity study: every diagnosis, training run and evaluation of a plan variant.

    python benchmarks/validity/run_study.py [--plan default|quick|tiny] --out DIR [--workers 2]

Resumable: rerun the same command and what is finished is skipped (a diagnosis resumes from its
finished shards; an unfinished training run is started again from scratch; an evaluation output is
written atomically).  Background-friendly: every job logs to ``DIR/logs/<job>.log``, progress goes
to stdout and ``DIR/study.log``, timings to ``DIR/jobs.jsonl``; nohup it and follow the log.

The product is driven only through its CLIs (``python -m opsd_diag.cli run``, ``python -m
trainer``), started with argument lists, each in its own process with ``OMP_NUM_THREADS=1``:
on 2 shared cores, two single-threaded processes side by side train ~4x faster than one process
with 2 threads (measured, README of this folder).  Then the final checkpoints are evaluated
(evaluate.py) and the report is written (report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import runs_io  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@dataclass
class Job:
    name: str
    kind: str  # diagnosis | training | evaluation
    argv: list[str]
    out: Path
    done: callable = field(repr=False, default=None)
    fresh: bool = False  # remove an unfinished output before starting


class Study:
    def __init__(self, out: Path, workers: int, echo: bool = True):
        self.out = Path(out)
        self.workers = max(1, workers)
        self.echo = echo
        (self.out / "logs").mkdir(parents=True, exist_ok=True)

    def log(self, msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        with open(self.out / "study.log", "a") as f:
            f.write(line + "\n")
        if self.echo:
            print(line, flush=True)

    def env(self) -> dict:
        env = dict(os.environ)
        env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                    "PYTHONPATH": os.pathsep.join([str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                                  if p and Path(p).resolve() != REPO]])})
        return env

    def run(self, jobs: list[Job]) -> list[str]:
        """Run the unfinished jobs, ``workers`` at a time; returns the names of failed jobs."""
        todo = [j for j in jobs if not (j.done and j.done())]
        skipped = len(jobs) - len(todo)
        if skipped:
            self.log(f"{skipped} finished job(s) skipped")
        running: list[tuple[Job, subprocess.Popen, float, object]] = []
        failed: list[str] = []
        total, started = len(todo), 0
        while todo or running:
            while todo and len(running) < self.workers:
                job = todo.pop(0)
                if job.fresh and job.out.exists():
                    shutil.rmtree(job.out)
                logf = open(self.out / "logs" / f"{job.name}.log", "w")
                proc = subprocess.Popen(job.argv, stdout=logf, stderr=subprocess.STDOUT, env=self.env(), cwd=str(REPO))
                started += 1
                running.append((job, proc, time.time(), logf))
                self.log(f"start [{started}/{total}] {job.kind} {job.name}")
            time.sleep(0.2)
            for item in list(running):
                job, proc, t0, logf = item
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # reap ourselves: the child's CPU time
                if pid == 0:
                    continue
                rc = proc.returncode = os.waitstatus_to_exitcode(status)
                running.remove(item)
                logf.close()
                secs = time.time() - t0
                ok = rc == 0 and (job.done is None or job.done())
                with open(self.out / "jobs.jsonl", "a") as f:
                    f.write(json.dumps({"job": job.name, "kind": job.kind, "rc": rc, "ok": ok, "start": t0,
                                        "seconds": round(secs, 2),
                                        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                                        "load1": round(os.getloadavg()[0], 2), "workers": self.workers}) + "\n")
                self.log(f"{'done' if ok else 'FAILED'} {job.kind} {job.name} in {secs:.1f} s "
                         f"(cpu {usage.ru_utime + usage.ru_stime:.1f} s)"
                         + ("" if ok else f" (rc {rc}; see logs/{job.name}.log)"))
                if not ok:
                    failed.append(job.name)
        return failed


def check_same_rollouts(out: Path, runs: list[str]) -> dict:
    """The student rollouts of every diagnosis run are identical (same seed, same prompts): asserted."""
    frames = {r: runs_io.diag_rollouts(out / "diag" / r) for r in runs}
    ref_name = runs[0]
    ref = frames[ref_name]
    result = {"reference": ref_name, "n_rollouts": int(len(ref)), "identical": {}}
    for name, f in frames.items():
        same = (len(f) == len(ref)
                and f["problem_id"].tolist() == ref["problem_id"].tolist()
                and [list(x) for x in f["completion_ids"]] == [list(x) for x in ref["completion_ids"]]
                and [list(x) for x in f["prompt_ids.student"]] == [list(x) for x in ref["prompt_ids.student"]])
        result["identical"][name] = bool(same)
        if not same:
            raise AssertionError(f"student rollouts of diagnosis '{name}' differ from '{ref_name}': the derived "
                                 "data changed the student's prompts or the seed; the comparison is invalid")
    return result


def build(plan: dict, out: Path) -> dict:
    layout = plan_mod.prepare(plan, out)
    py = sys.executable
    diag_jobs = []
    for run, cfg in layout["diagnoses"].items():
        d = out / "diag" / run
        diag_jobs.append(Job(f"diag.{run}", "diagnosis", [py, "-m", "opsd_diag.cli", "run", cfg, "--out", str(d), "--quiet"],
                             d, done=lambda d=d: runs_io.diag_finished(d)))
    train_jobs = []
    for name, cfg in layout["trainings"].items():
        d = out / "train" / name
        train_jobs.append(Job(f"train.{name}", "training", [py, "-m", "trainer", cfg, "--out", str(d)], d,
                              done=lambda d=d: runs_io.train_finished(d), fresh=True))
    layout["jobs"] = {"diagnoses": diag_jobs, "trainings": train_jobs}
    return layout


def eval_jobs(out: Path, layout: dict, workers: int) -> list[Job]:
    """Evaluation of the initial student and of every final checkpoint, spread over ``workers`` processes."""
    items = [{"model": "initial", "out": str(out / "eval" / "initial.json")}]
    for name in layout["trainings"]:
        ckpt = runs_io.final_checkpoint(out / "train" / name)
        if ckpt is not None:
            items.append({"model": str(ckpt), "out": str(out / "eval" / f"{name}.json")})
    todo = [i for i in items if not Path(i["out"]).is_file()]
    jobs = []
    for w in range(min(workers, len(todo))):
        part = todo[w::workers]
        jf = out / "eval" / f"jobs.{w}.json"
        jf.parent.mkdir(parents=True, exist_ok=True)
        jf.write_text(json.dumps(part, indent=1))
        jobs.append(Job(f"eval.{w}", "evaluation",
                        [sys.executable, str(HERE / "evaluate.py"), "--study", str(out), "--jobs", str(jf)], jf,
                        done=lambda part=part: all(Path(i["out"]).is_file() for i in part)))
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="default", choices=plan_mod.VARIANTS)
    ap.add_argument("--out", required=True, help="study directory (created; rerun to resume)")
    ap.add_argument("--workers", type=int, default=2, help="processes side by side (default 2: one per core)")
    ap.add_argument("--results", help="RESULTS.md to write (default DIR/RESULTS.md; the PNG goes beside it)")
    ap.add_argument("--no-report", action="store_true", help="stop after the evaluations")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_mod.load(args.plan)
    old = out / "plan.resolved.json"
    if old.is_file():
        stored = json.loads(old.read_text())
        if stored.get("variant") != plan["variant"]:
            print(f"run_study: error: {out} holds a study of plan '{stored.get('variant')}', not '{plan['variant']}'",
                  file=sys.stderr)
            return 2
    study = Study(out, args.workers, echo=not args.quiet)
    t0 = time.time()
    study.log(f"plan {plan['variant']}: {len(plan['configurations'])} configurations, "
              f"seeds {plan['training']['seeds']}, {plan['training']['max_steps']} steps; {args.workers} workers")
    layout = build(plan, out)
    study.log(f"level {layout['plan']['level_selected']} (gaps {layout['plan']['level_gaps']}); "
              f"{len(layout['jobs']['diagnoses'])} diagnoses, {len(layout['jobs']['trainings'])} training runs")
    phases = {}
    t = time.time()
    failed = study.run(layout["jobs"]["diagnoses"] + layout["jobs"]["trainings"])
    phases["diagnoses_and_training_s"] = round(time.time() - t, 1)
    if failed:
        study.log(f"FAILED: {failed}; fix and rerun the same command to resume")
        return 1
    checks = check_same_rollouts(out, list(layout["diagnoses"]))
    (out / "checks.json").write_text(json.dumps(checks, indent=1))
    study.log(f"student rollouts identical across diagnoses {list(layout['diagnoses'])}: "
              f"{all(checks['identical'].values())}")
    t = time.time()
    failed = study.run(eval_jobs(out, layout, args.workers))
    phases["evaluation_s"] = round(time.time() - t, 1)
    if failed:
        study.log(f"FAILED: {failed}; rerun the same command to resume")
        return 1
    state_path = out / "study.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"sessions": []}
    state["sessions"].append({"plan": plan["variant"], "workers": args.workers, "started": t0,
                              "seconds": round(time.time() - t0, 1), **phases})
    state_path.write_text(json.dumps(state, indent=1))
    study.log(f"runs and evaluations finished in {time.time() - t0:.0f} s")
    if args.no_report:
        return 0
    from benchmarks.validity import report

    results = Path(args.results) if args.results else out / "RESULTS.md"
    rc = report.main(["--study", str(out), "--out", str(results)])
    study.log(f"report written to {results} (total {time.time() - t0:.0f} s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
