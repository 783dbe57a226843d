"""An exploration kept as a look (committed before it ran; it chooses nothing, and no product change follows from it
alone): does a lookahead that moves the student as far as the training run does see what training does?

The product's lookahead (A) takes 4 AdamW steps at the training run's learning rate over 32 rollouts; the run takes
40 steps at that rate (the worlds plan). An Adam step moves each weight by about the learning rate, so A moves the
student about a tenth as far as the run, and four small steps flip almost no fresh sample (docs/verdict.md). Variant
R ("reach") takes the same 4 steps over the same rollouts at the learning rate times max_steps / steps (3e-3 in the
worlds), so its displacement matches the run's where the gradient keeps its direction, at the same trained, scored
and sampled tokens (fresh samples as the second look's: 2 per measurement prompt). Everything else is A's (loss,
split, seed, measurement).

On every world whose build is in the repository (the worlds plan's thirteen and the shipped spec worlds; a build
that was not shipped is not here to rediagnose), per world: the Spearman with the realised held-out Δpass@1 of R's
fresh pass@1 change, R's Δll and R's KL, and of the ranking ``reach_config`` (``looks.product_order`` with rule
v2_config and R's fresh pass@1 change as the gain: configurations by its mean over their methods, the fifth look's
method order within one), beside the shipped ranking and G; the mean over the worlds and how often reach_config is
above and below the shipped ranking; pooled over all rows, the Spearman and the mean absolute difference of R's fresh
change with the realised change (does it see the size, not only the order?).

Reading of its output (explore_lookahead_reach.txt): no. At the run's reach the fresh pass@1 change ranks the rows
of a world at +0.42 on average (as a configuration order +0.48), against the shipped ranking's +0.75 and G's +0.68,
above the shipped ranking in 6 of 27 worlds; pooled, it misses the realised change by 0.249 on average, more than
predicting no change would (0.235).
What R does see is distance: its KL ranks against the outcome (-0.58 on average, more movement, worse), no better
than G. Four steps along the initial gradient, however long, are not the run. No look was built on it.

    python benchmarks/validity/v2/explore_lookahead_reach.py --out DIR [--worlds a,b]    # rediagnose
    python benchmarks/validity/v2/explore_lookahead_reach.py --out DIR --keep            # rows: reach_rows.json
    python benchmarks/validity/v2/explore_lookahead_reach.py --report > benchmarks/validity/v2/explore_lookahead_reach.txt
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2 import run_v2  # noqa: E402
from benchmarks.validity.v2.looks import explore_cli, model_file, product_order  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
COLUMNS = ("lookahead_fresh", "lookahead_dll", "lookahead_kl")
RULES = ("accuracy_gap", "shipped", "reach_config")
KEPT = HERE / "reach_rows.json"


def worlds() -> list[str]:
    """Every world with committed rows whose build is in the repository, in the order they were built."""
    plans = run_worlds.load("default")
    names = [*look10.seen(), look10.plan()["added_world"]["name"]]
    return [w for w in names if w in plans["worlds"] or (v2.REPO / "sample_data" / "worlds" / f"{w}.yaml").is_file()]


def plan_of(name: str) -> dict:
    """A world's resolved plan: the worlds plan's own, else its spec's (in sample_data/worlds, or beside the checks
    where its build is not shipped: checks/clinker.yaml)."""
    plans = run_worlds.load("default")
    if name not in plans["worlds"]:
        spec = v2.REPO / "sample_data" / "worlds" / f"{name}.yaml"
        moved = Path(__file__).resolve().parent / "checks" / f"{name}.yaml"
        run_worlds.add_world(plans, spec if spec.is_file() or not moved.is_file() else moved)
    return run_worlds.resolve(plans, name)


def section(plan: dict) -> dict:
    """A's lookahead section with R's learning rate (times max_steps / steps) and the second look's fresh samples."""
    fresh = yaml.safe_load(run_v2.PLAN_LOOK2.read_text())["lookahead"]["fresh_samples"]
    s = run_v2.lookahead_section(yaml.safe_load(run_v2.PLAN.read_text()), plan, fresh)
    return {**s, "learning_rate": s["learning_rate"] * plan["training"]["max_steps"] / s["steps"]}


def rediagnose(out: Path, names: list[str]) -> None:
    for name in names:
        world_dir = (out / name).resolve()
        if (world_dir / "lookahead.json").is_file():
            continue
        plan = plan_of(name)
        s, t0 = section(plan), time.time()
        rows = run_v2.rows_of(plan, run_v2.diagnose(plan, world_dir, s), world_dir)
        (world_dir / "lookahead.json").write_text(json.dumps(
            {"world": name, "section": s, "seconds": round(time.time() - t0, 1), "rows": rows}, indent=1))
        print(f"{name}: {len(rows)} rows in {time.time() - t0:.0f} s (learning rate {s['learning_rate']:g})",
              flush=True)


def _estimate(x):
    return x.get("estimate") if isinstance(x, dict) else x


def keep(out: Path) -> None:
    """R's columns of every rediagnosed world, kept beside the script (one row per line) so the report reruns."""
    kept = {}
    for w in worlds():
        if (out / w / "lookahead.json").is_file():
            d = json.loads((out / w / "lookahead.json").read_text())
            kept[w] = {"seconds": d["seconds"], "learning_rate": d["section"]["learning_rate"],
                       "rows": [{k: _estimate(x.get(k)) for k in ("config", "method", *COLUMNS, "lookahead_fresh_lo",
                                                                  "lookahead_fresh_hi")} for x in d["rows"]]}
    KEPT.write_text(look2.records_json(kept) + "\n")


def report() -> dict:
    shipped, kept = model_file(16), json.loads(KEPT.read_text())
    done = [w for w in worlds() if w in kept]
    rows = look2.load_rows({"worlds": done})
    reach = {(w, x["config"], x["method"]): x for w in done for x in kept[w]["rows"]}
    r = {c: np.array([v2._num(reach[(x["world"], x["config"], x["method"])].get(c)) for x in rows]) for c in COLUMNS}
    gain = look8.product_gain(rows, shipped)
    w = np.array([x["world"] for x in rows])
    score = {k: np.full(len(rows), np.nan) for k in RULES}
    score["accuracy_gap"] = np.array([v2._num(x["accuracy_gap"]) for x in rows])
    for name in done:
        k = np.flatnonzero(w == name)
        sub = [rows[i] for i in k]
        score["shipped"][k] = product_order(sub, gain[k], "v2_config")
        score["reach_config"][k] = product_order(sub, np.nan_to_num(r["lookahead_fresh"][k]), "v2_config")
    per = {k: v2.per_world(x, rows, "d_pass1")["worlds"] for k, x in {**score, **r}.items()}
    y = v2.target(rows, "d_pass1")
    ok = np.isfinite(r["lookahead_fresh"]) & np.isfinite(y)
    return {"worlds": done, "per_world": per,
            "mean": {k: float(np.nanmean([per[k][n] for n in done])) for k in per},
            "above": int(sum(per["reach_config"][n] > per["shipped"][n] for n in done)),
            "below": int(sum(per["reach_config"][n] < per["shipped"][n] for n in done)),
            "pooled_fresh": {"spearman": stats.spearman(r["lookahead_fresh"][ok], y[ok]),
                             "mean_abs_difference": float(np.mean(np.abs(r["lookahead_fresh"][ok] - y[ok]))),
                             "mean_abs_realised": float(np.mean(np.abs(y[ok]))), "n": int(ok.sum())},
            "seconds": {n: kept[n]["seconds"] for n in done}}


def render(res: dict) -> str:
    cols = (*RULES, *COLUMNS)
    lines = ["Spearman with the realised held-out Δpass@1 within each world: the shipped ranking, G, and the reach "
             "lookahead (R: 4 steps at the learning rate x max_steps / steps)", "",
             f"{'world':18s} " + " ".join(f"{c:>15s}" for c in cols)]
    for n in res["worlds"]:
        lines.append(f"{n:18s} " + " ".join(f"{res['per_world'][c][n]:+15.2f}" for c in cols))
    lines.append(f"{'mean of worlds':18s} " + " ".join(f"{res['mean'][c]:+15.3f}" for c in cols))
    p = res["pooled_fresh"]
    lines += ["", f"reach_config against the shipped ranking: above in {res['above']}, below in {res['below']} of "
              f"{len(res['worlds'])} worlds",
              f"pooled over {p['n']} rows, R's fresh pass@1 change against the realised Δpass@1: Spearman "
              f"{p['spearman']:+.3f}; mean absolute difference {p['mean_abs_difference']:.3f} (mean |realised| "
              f"{p['mean_abs_realised']:.3f})",
              f"rediagnosis: {sum(res['seconds'].values()):.0f} s over {len(res['worlds'])} worlds"]
    return "\n".join(lines)


def main(argv=None) -> int:
    return explore_cli(argv, __doc__, rediagnose, keep, lambda: render(report()), worlds)


if __name__ == "__main__":
    sys.exit(main())
