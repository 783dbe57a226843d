"""An exploration kept as a look (committed before it ran; no product change follows from it alone): does the first
quarter of a training run say how much the run will realise?

explore_size_drift.py found that the recommended rows that realised about nothing had hardly moved the student (its
realised KL to the initial student ranks the recommended row's realised Δpass@1 across the 28 never-fitted worlds at
+0.71), which nothing the diagnosis computes before training sees (explore_coherence.py: the agreement of the signal
across problems does not either). A user who launches the run from the app follows it live; if its first steps already
show whether the student is moving towards the teacher, the app can say so after a quarter of the run instead of after
all of it. The trainer logs, per step, its loss and the student-teacher KL on the fresh on-policy batch (``kl_k3``).

Definitions, fixed before any of it ran:
- per world (every world whose build is in the repository and whose rows are committed: explore_coherence.py's 30),
  every trained row with G > 0 (the rows a user would train), seed 0, trained again exactly as the worlds study trains
  it (its own training config from ``run_worlds.layout_world``) for the first 10 of its 40 steps (``max_steps: 10``; the
  schedule is constant after 4 warm-up steps, so the first 10 steps are the 40-step run's, checked on one row first);
- ``loss_drop``: 1 - (mean loss of steps 9 and 10) / (mean loss of steps 5 and 6), the first two steps after warm-up
  against the last two of the quarter; ``kl_drop``: the same of ``kl_k3``;
- the realised Δpass@1 is the committed one (the study's two seeds, 40 steps); no evaluation is run here.
Reported: per world, the Spearman of each column with the realised Δpass@1 over its G > 0 rows, and the mean over the
never-fitted worlds beside G's over the same rows; across worlds, for the recommended row (explore_recommended_size's
pick), each column's Spearman with what it realised and AUROC for realised < +0.02 (low values flag).
Decision rule: a look on an early read of the run (judged on worlds built after its plan) is planned only if a column
reaches, over the never-fitted worlds, a recommended-row Spearman of at least +0.50 and an AUROC of at least 0.85.
Otherwise the columns are reported and nothing else follows.

Reading of its output (explore_early_read.txt, 286 runs of 10 steps, 1339 s in two processes): no. Across the
never-fitted worlds the recommended row's loss drop over the quarter ranks what it realised at -0.06 (AUROC 0.43 for
"about nothing"), its drop of the student-teacher KL at +0.09 (0.38): the runs that realised about nothing were not
told apart by their first steps. Within a world, over its rows with G > 0, the KL drop ranks the realised change at
+0.281 on average against G's +0.250 over the same rows (diversity has two such rows, one configuration: no
Spearman), with a spread from -0.83 to +1.00: a batch of 16 fresh
problems per step makes these step-to-step figures too noisy to read after 10 steps. The rule does not fire: no look is
planned on it.

    python benchmarks/validity/v2/explore_early_read.py --out DIR [--worlds a,b]    # measure (resumable per run)
    python benchmarks/validity/v2/explore_early_read.py --out DIR --keep            # rows: early_read_rows.json
    python benchmarks/validity/v2/explore_early_read.py --report > benchmarks/validity/v2/explore_early_read.txt
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import explore_coherence as coherence  # noqa: E402
from benchmarks.validity.v2 import explore_lookahead_reach as reach  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import recommended_rows  # noqa: E402
from benchmarks.validity.v2.explore_size_floor import size_figures, size_lines, size_rule  # noqa: E402
from benchmarks.validity.v2.looks import explore_cli, model_file  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "early_read_rows.json"
STEPS = 10
EARLY, LATE = (5, 6), (9, 10)
COLUMNS = ("loss_drop", "kl_drop")
WORKERS = 2


def worlds() -> list[str]:
    return coherence.worlds()


def candidates(name: str) -> list[dict]:
    """The world's trained rows with G > 0."""
    return [r for r in look2.load_rows({"worlds": [name]}) if v2._num(r["accuracy_gap"]) > 0]


def train(cfg_path: Path, out: Path) -> None:
    if (out / "status.json").is_file() and json.loads((out / "status.json").read_text()).get("status") == "finished":
        return
    subprocess.run([sys.executable, "-m", "trainer", str(cfg_path), "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(out: Path, names: list[str]) -> None:
    jobs = []
    for name in names:
        world_dir = (out / name).resolve()
        trainings = run_worlds.layout_world(reach.plan_of(name), world_dir)["trainings"]
        for r in candidates(name):
            key = f"{r['config']}__{r['method']}__s0"
            cfg = yaml.safe_load(Path(trainings[key]).read_text())
            cfg["training"]["max_steps"] = STEPS
            path = world_dir / "configs" / f"early.{key}.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            jobs.append((path, world_dir / "early" / key))
    t0 = time.time()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda j: train(*j), jobs))
    print(f"{len(jobs)} runs of {STEPS} steps in {time.time() - t0:.0f} s", flush=True)


def columns(metrics: Path) -> dict[str, float]:
    steps = {r["step"]: r for r in map(json.loads, metrics.read_text().splitlines()) if r.get("kind") == "train"}

    def drop(key):
        return 1 - np.mean([steps[s][key] for s in LATE]) / np.mean([steps[s][key] for s in EARLY])
    return {"loss_drop": float(drop("loss")), "kl_drop": float(drop("kl_k3"))}


def keep(out: Path) -> None:
    kept = {}
    for w in worlds():
        runs = {}
        for r in candidates(w):
            key = f"{r['config']}__{r['method']}__s0"
            m = out / w / "early" / key / "metrics.jsonl"
            if m.is_file():
                runs[key] = columns(m)
        if runs:
            kept[w] = runs
    KEPT.write_text(look2.records_json(kept) + "\n")


def report() -> dict:
    kept, shipped = json.loads(KEPT.read_text()), model_file(16)
    rows = [{**r, **kept[w][f"{r['config']}__{r['method']}__s0"]} for w in kept for r in candidates(w)]
    cols = {c: np.array([r[c] for r in rows], dtype=float) for c in (*COLUMNS, "accuracy_gap")}
    per = {k: v2.per_world(x, rows, "d_pass1")["worlds"] for k, x in cols.items()}
    names = list(per["accuracy_gap"])
    never = [x for x in names if x not in look8.FITTED]
    picked = coherence.recommended(rows, recommended_rows(shipped), names, COLUMNS)
    size = size_figures(picked, never, COLUMNS)
    return {"worlds": names, "never_fitted": never, "per_world": per,
            "mean_never_fitted": {k: float(np.nanmean([per[k][x] for x in never])) for k in per},
            "size": size, "look": size_rule(size), "recommended": picked}

def world_table(res: dict, cols) -> list[str]:
    """Per world, each column's Spearman over its rows (``res['per_world']``), and their mean over the never-fitted."""
    lines = [f"{'world':20s} " + " ".join(f"{c:>13s}" for c in cols)]
    for n in res["worlds"]:
        lines.append(f"{n + (' *' if n not in res['never_fitted'] else ''):20s} "
                     + " ".join(f"{res['per_world'][c][n]:+13.2f}" for c in cols))
    return lines + [f"{'mean, never fitted':20s} " + " ".join(f"{res['mean_never_fitted'][c]:+13.3f}" for c in cols)]


def render(res: dict) -> str:
    lines = ["Spearman with the realised held-out Δpass@1 over each world's rows with G > 0 (seed 0, the first "
             f"{STEPS} of 40 steps; * the shipped models were fitted on it)", "",
             *world_table(res, ("accuracy_gap", *COLUMNS))]
    lines += size_lines(res["size"])
    lines += ["", "decision rule (docstring): a look on an early read of the run is " +
              ("planned" if res["look"] else "not planned"), "",
              "the recommended row per world: realised, loss_drop, kl_drop"]
    for n, r in res["recommended"].items():
        lines.append(f"  {n + (' *' if n not in res['never_fitted'] else ''):20s} {r['row']:22s} "
                     f"{r['realised']:+.3f}  {r['loss_drop']:+.3f}  {r['kl_drop']:+.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    return explore_cli(argv, __doc__, measure, keep, lambda: render(report()), worlds)


if __name__ == "__main__":
    sys.exit(main())
