"""The app on a large run: Overview rendered server-side and a 4,000-token heatmap (issue 13).

Targets: on a stored run with 1,000,000 token rows, the Overview page rendered server-side (Streamlit's
AppTest, the page's whole script) in <= 2 s and one 4,000-token heatmap in <= 1 s, measured in one
run with the machine's load stated. The Overview of a run still in progress (issue 23: once 183 s under
load) is measured too: in the server process, in a new process (its imports counted), and in a new
process beside ``--load`` CPU-bound processes (a diagnosis or training run on the same cores).

The run is synthetic and written like the engine writes one (``io.store``): 5 teacher configs x
2,000 rollouts x 100 positions = 1,000,000 token rows, plus one 4,000-token rollout (x 5 configs)
with its top-5 alternatives, a summary from ``core.aggregate.summarize`` and a 30-row ranking of
verdicts. Python modules are imported (one warm-up page on a small run) before anything is timed;
the large run itself is never loaded before the timed render.

    python benchmarks/bench_app.py [--rows 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opsd_diag.core import aggregate  # noqa: E402
from opsd_diag.io import store  # noqa: E402
from opsd_diag.schema import SIGNAL_COLUMNS  # noqa: E402

CONFIGS = ("teacher", "self_full_solution", "self_answer_only", "self_partial_solution", "self_hint")
SIGNALS_RANKED = ("r_opd", "jsd", "rev_kl", "fwd_kl", "a_d2", "a_ex")
LONG = 4000


def _tokens(rollout_ids: np.ndarray, length: int, rng) -> pd.DataFrame:
    n = len(rollout_ids) * length
    frames = []
    words = np.array(["a", ")", " ", "8", "*", "7", "=", "6", "\n", "Answer", ":", "<|im_end|>"])
    for c in CONFIGS:
        cols = {s: rng.normal(0, 1, n).astype("float32") for s in SIGNAL_COLUMNS}
        cols.update(h_s=rng.exponential(0.5, n).astype("float32"), h_t=rng.exponential(0.5, n).astype("float32"),
                    kl_rev=rng.exponential(0.2, n).astype("float32"), rank_t=rng.integers(0, 20, n).astype("float32"),
                    gate=(rng.random(n) < 0.6).astype("float32"), top1_agree=(rng.random(n) < 0.8).astype("float32"))
        ids = rng.integers(0, 300, n)
        frames.append(pd.DataFrame({"rollout_id": np.repeat(rollout_ids, length), "config": c,
                                    "pos": np.tile(np.arange(length), len(rollout_ids)), "token_id": ids,
                                    "token": words[ids % len(words)], **cols}))
    return pd.concat(frames, ignore_index=True)


def build(run: Path, rows: int, seed: int = 0) -> int:
    """The synthetic run; returns the id of its 4,000-token rollout."""
    rng = np.random.default_rng(seed)
    per = 100
    n_roll = max(1, (rows - LONG * len(CONFIGS)) // (per * len(CONFIGS)))
    ids = np.arange(n_roll)
    long_id = int(n_roll)
    tokens = pd.concat([_tokens(ids, per, rng), _tokens(np.array([long_id]), LONG, rng)], ignore_index=True)
    tokens = tokens.iloc[:rows] if len(tokens) > rows else tokens
    rollouts = pd.DataFrame({"rollout_id": np.r_[ids, long_id], "problem_id": [f"p{i // 4}" for i in range(n_roll + 1)],
                             "problem_index": np.r_[ids, long_id] // 4, "sample_idx": np.r_[ids, long_id] % 4,
                             "length": [per] * n_roll + [LONG], "finished": True,
                             "completion_ids": [[1] * per] * n_roll + [[1] * LONG], "text": "a) 8*7=6\nAnswer: 6",
                             "answer_pred": "6", "correct": rng.random(n_roll + 1) < 0.5, "difficulty": 1})
    topk = pd.DataFrame([{"rollout_id": long_id, "pos": p, "role": role, "config": c, "rank": r,
                          "token_id": int(rng.integers(0, 300)), "logprob": -float(r)}
                         for p in range(LONG) for role, c in [("student", ""), ("teacher", CONFIGS[0])]
                         for r in range(5)])
    teacher = pd.DataFrame([{"config": c, "problem_id": f"p{i}", "sample_idx": 0, "correct": bool(i % 2)}
                            for c in CONFIGS for i in range(50)])
    summary = aggregate.summarize(tokens, rollouts, teacher, ks=(1, 4), n_boot=20)
    ranking = [{"config": c, "signal": s, "verdict": ["helps", "unclear", "hurts"][(i + j) % 3],
                "score": float(rng.normal())} for i, c in enumerate(CONFIGS) for j, s in enumerate(SIGNALS_RANKED)]
    summary["ranking"] = ranking
    summary["verdicts"] = {c: {r["signal"]: {"verdict": r["verdict"], "score": r["score"],
                                             "reason": "teacher advantage 0.12 [0.05, 0.20] and alignment 0.31 "
                                                       "[0.12, 0.48]: a reason of realistic length."}
                               for r in ranking if r["config"] == c} for c in CONFIGS}
    run.mkdir(parents=True)
    store.atomic_write_json(run / "manifest.json", {
        "status": "finished", "n_problems": int(rollouts["problem_id"].nunique()), "seconds": 1.0,
        "config": {"student": {"model": "none"}, "teachers": [{"name": c} for c in CONFIGS],
                   "data": {"path": "none.jsonl"}, "sampling": {"num_samples": 4}}})
    store.atomic_write_json(run / "summary.json", summary)
    for name, frame in (("rollouts", rollouts), ("tokens", tokens), ("topk", topk), ("teacher_rollouts", teacher)):
        store.atomic_write_parquet(run / f"{name}.parquet", frame)
    return long_id


def overview(run_dir: Path, root: Path, finished: bool = True) -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=120)
    at.session_state["runs_root"] = str(root)
    at.session_state["run_dir"] = str(run_dir)
    t = time.perf_counter()
    at.run()
    took = time.perf_counter() - t
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Overview" if finished else "not finished" in at.info[0].value
    return took


def in_progress(big: Path, root: Path) -> Path:
    """A diagnosis still running into a copy of the big run's folder: manifest ``running``, status.json of a
    live process (this one) between shards, a log; its Overview shows the progress instead of the pages."""
    from opsd_diag import jobs

    busy = root / "busy"
    busy.mkdir()
    for name in ("tokens", "rollouts", "topk", "teacher_rollouts"):  # the shards' tables, as big as the run's
        os.link(big / f"{name}.parquet", busy / f"{name}.parquet")
    store.atomic_write_json(busy / "manifest.json", {**store.read_manifest(big), "status": "running"})
    (busy / "stdout.log").write_text("shard 3/8 sampled\r" * 2000 + "\n")
    jobs.write_status(busy, "running", kind="diagnosis", stage="rollouts and scoring", done=3, total=8,
                      started=time.time() - 60, rollouts_n=3, rollouts_s=30.0, scoring_n=3, scoring_s=12.0)
    return busy


def fresh_process_overview(run_dir: Path, root: Path) -> tuple[float, float]:
    """(seconds of the whole process, seconds of the render) of one Overview in a new Python process: what a
    reload costs when the server process has to import the app first (a new server, or a cold module cache)."""
    code = ("import sys, time; t = time.perf_counter(); sys.path.insert(0, sys.argv[3]); "
            "from streamlit.testing.v1 import AppTest; "
            "at = AppTest.from_file(sys.argv[3] + '/app/main.py', default_timeout=600); "
            "at.session_state['runs_root'] = sys.argv[2]; at.session_state['run_dir'] = sys.argv[1]; "
            "r = time.perf_counter(); at.run(); assert not at.exception; print(time.perf_counter() - r)")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(run_dir), str(root), str(REPO)], capture_output=True,
                         text=True, check=True).stdout
    return time.perf_counter() - t, float(out.strip().splitlines()[-1])


def busy_cpus(n: int) -> list[subprocess.Popen]:
    """``n`` processes spinning on the CPU: the load of a diagnosis or a training run on the same cores."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--keep", help="build the run here and keep it")
    p.add_argument("--load", type=int, default=2, help="CPU-bound processes beside the last measure (default 2)")
    args = p.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        root = Path(args.keep or d)
        t = time.perf_counter()
        long_id = build(root / "big", args.rows)
        built = time.perf_counter() - t
        build(root / "small", 5_000 + LONG * len(CONFIGS), seed=1)
        overview(root / "small", root)  # imports Streamlit, plotly, the app: not what is measured

        cold = overview(root / "big", root)  # the large run is loaded (cached) inside this render
        warm = overview(root / "big", root)
        busy = in_progress(root / "big", root)
        running = overview(busy, root, finished=False)  # the in-progress Overview: progress from status.json, no table read
        fresh_total, fresh_render = fresh_process_overview(busy, root)
        spinners = busy_cpus(args.load)
        try:
            loaded_total, loaded_render = fresh_process_overview(busy, root)
        finally:
            for proc in spinners:
                proc.kill()
                proc.wait()

        from opsd_diag.run import Run

        run = Run.load(root / "big")
        n_tokens = len(run.tokens)
        t = time.perf_counter()
        html = run.heatmap(long_id, [CONFIGS[0]], "r_opd")
        first = time.perf_counter() - t  # includes the per-rollout index over the 1M-row table
        times, kept = [], []
        for signal in ("r_opd", "kl_rev", "rank_t"):
            run._recents.clear()  # rows and tooltips made again: a rollout opened for the first time
            t = time.perf_counter()
            run.heatmap(long_id, [CONFIGS[0]], signal)
            times.append(time.perf_counter() - t)
        for signal in ("a_d2", "jsd", "h_s"):  # the same rollout in another signal: its tooltips are kept
            t = time.perf_counter()
            run.heatmap(long_id, [CONFIGS[0]], signal)
            kept.append(time.perf_counter() - t)
        heat, again = float(np.median(times)), float(np.median(kept))
        t = time.perf_counter()
        run.heatmap(long_id, list(CONFIGS[:2]), "a_d2", scale="run")
        stacked = time.perf_counter() - t
    shown = html.count("data-pos=")
    print(f"## bench_app: the app on a {n_tokens:,}-row run (Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} before the run)\n")
    print("| measure | seconds | target |\n|---|---|---|")
    print(f"| build the synthetic run (not a target) | {built:.1f} | |")
    print(f"| Overview, server-side render, first (loads the run) | {cold:.2f} | <= 2 |")
    print(f"| Overview, server-side render, again (cached run) | {warm:.2f} | |")
    print(f"| Overview of an in-progress run (same server process) | {running:.2f} | <= 2 |")
    print(f"| in-progress Overview in a new process: render / whole process (imports) | {fresh_render:.2f} / "
          f"{fresh_total:.2f} | |")
    print(f"| the same with {args.load} CPU-bound processes beside it: render / whole process | {loaded_render:.2f} / "
          f"{loaded_total:.2f} | |")
    print(f"| heatmap, {shown:,} tokens, one config (median of 3 signals) | {heat:.2f} | <= 1 |")
    print(f"| heatmap, the same rollout in another signal (tooltips kept, median of 3) | {again:.2f} | |")
    print(f"| heatmap, first call (builds the rollout index of the token table) | {first:.2f} | |")
    print(f"| heatmap, 2 configs stacked ({2 * LONG:,} tokens, per-run scale) | {stacked:.2f} | |")
    print(f"\nRESULT overview {cold:.2f} s {'PASS' if cold <= 2 else 'FAIL'}")
    print(f"RESULT heatmap {heat:.2f} s {'PASS' if heat <= 1 else 'FAIL'}")
    print(f"RESULT in-progress overview {running:.2f} s {'PASS' if running <= 2 else 'FAIL'}")


if __name__ == "__main__":
    main()
