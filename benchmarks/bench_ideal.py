"""Cost of the ideal-gradient predictor: wall time vs budget, and vs rollout length at a fixed budget.

Two diagnoses of the same problems differ only in rollout length (max_completion_length); on each,
The predictor runs at several budgets with the same k, m and continuation cap. Expected: time grows
roughly linearly with the budget and stays flat across rollout lengths (nodes are one per depth
window and admitted until the budget is spent). Measured side by side in one process.

    python benchmarks/bench_ideal.py                   # random ci-size zoo built into a temp dir
    python benchmarks/bench_ideal.py --zoo sample_data/models
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from opsd_diag.engine.diagnose import prepare, run_diagnosis
from opsd_diag.engine.predict import run_predictor
from opsd_diag.config.spec import IdealSpec, from_dict
from opsd_diag.zoo import task


def _config(zoo: Path, data: Path, length: int) -> dict:
    return {"student": {"model": str(zoo / "student")}, "base": {"model": str(zoo / "base")},
            "teachers": [{"name": "teacher", "model": str(zoo / "teacher")},
                         {"name": "self_full", "context": "full_solution"}],
            "data": {"path": str(data)},
            "sampling": {"num_samples": 4, "max_completion_length": length, "teacher_samples": 0, "batch_size": 64},
            "scoring": {"batch_size": 16}, "analysis": {"checker": "toy", "bootstrap": 100}, "shard_size": 16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", help="model directory (default: a random ci-size zoo built into a temp dir)")
    ap.add_argument("--problems", type=int, default=16)
    ap.add_argument("--lengths", type=int, nargs=2, default=[48, 192])
    ap.add_argument("--budgets", type=int, nargs="+", default=[96, 192, 384, 768])
    ap.add_argument("--cap", type=int, default=16, help="ideal.max_continuation_length")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared CPU)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        zoo = Path(args.zoo) if args.zoo else tmp / "zoo"
        if not args.zoo:
            from opsd_diag.zoo.build import build
            build(zoo, size="ci", seed=0, log=lambda *a: None)
        data = tmp / "problems.jsonl"
        data.write_text("".join(json.dumps(p) + "\n" for p in task.generate(args.problems, 21)))
        rows = []
        for length in args.lengths:
            cfg = from_dict(_config(zoo, data, length))
            run_dir = tmp / f"run{length}"
            run_diagnosis(cfg, run_dir, show_progress=False)
            prep = prepare(cfg)

            def run_ideal(prep, run_dir, spec, **kw):
                return run_predictor(run_dir, prep.cfg, prep.problems, prep.node_models(), prep.sampler(), spec, **kw)
            mean_len = pd.read_parquet(run_dir / "rollouts.parquet")["length"].mean()
            run_ideal(prep, run_dir, IdealSpec(budget=args.budgets[0], k=2, m=4, max_continuation_length=args.cap),
                      write_summary=False)  # warm-up
            for budget in args.budgets:
                spec = IdealSpec(budget=budget, k=2, m=4, max_continuation_length=args.cap)
                times, cpu = [], []
                for _ in range(args.repeats):
                    t0, c0 = time.perf_counter(), time.process_time()
                    res = run_ideal(prep, run_dir, spec, write_summary=False)
                    times.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                rows.append({"rollout_len": round(mean_len, 1), "max_len": length, "budget": budget,
                             "nodes": res["n_nodes"], "continuations": res["continuations_used"],
                             "gen_tokens": res["continuation_tokens"], "prefix_tokens": res["prefix_tokens"],
                             "seconds": min(times), "cpu_seconds": min(cpu),
                             "ms_per_continuation": 1000 * min(times) / res["continuations_used"]})
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    for col in ("seconds", "cpu_seconds"):
        for length, part in frame.groupby("max_len"):
            slope, icpt = np.polyfit(part["budget"], part[col], 1)
            fit = np.polyval([slope, icpt], part["budget"])
            r2 = 1 - ((part[col] - fit) ** 2).sum() / ((part[col] - part[col].mean()) ** 2).sum()
            ratio = part[col].iloc[-1] / part[col].iloc[0]
            print(f"{col} at max_len {length}: {icpt:.2f} s + {1000 * slope:.2f} ms x budget (R^2 {r2:.3f}); "
                  f"budget x{part['budget'].iloc[-1] / part['budget'].iloc[0]:.0f} -> x{ratio:.2f}")
        a, b = (frame[frame["max_len"] == n].set_index("budget")[col] for n in args.lengths)
        print(f"{col} at max_len {args.lengths[1]} / at {args.lengths[0]}, same budget: "
              + ", ".join(f"{k}: {b[k] / a[k]:.2f}" for k in a.index))


if __name__ == "__main__":
    main()
