"""An exploration kept as a look (not pre-registered; no product change follows from it alone): at the same trained
tokens, does a lookahead that takes more, smaller steps see what training does better? The committed lookahead (A: 4
steps of 8 rollouts, fresh samples 2) against B (8 steps of 4) and C (16 steps of 2), same loss, learning rate,
seed, split and measurement, on the ten worlds already seen; per world, Spearman of each lookahead column with the
realised held-out Δpass@1 of the worlds study. Anything chosen from it must be judged on a world built after its plan.

    python benchmarks/validity/v2/explore_lookahead_steps.py --variant B --out /work/runs/explore_steps   (and C)
    python benchmarks/validity/v2/explore_lookahead_steps.py --report --out /work/runs/explore_steps

Reading of its output (explore_lookahead_steps.txt, whose last lines count the worlds where each variant is above
and below A): more and smaller steps move the mean within-world Spearman of the fresh pass@1 change up a little, not
in every world, and it stays far below G's within-world mean (+0.67 over nine worlds, RESULTS_look3.md). No plan
follows from it.
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
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as L  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2 import run_v2  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
VARIANTS = {"B": (8, 4), "C": (16, 2)}  # (steps, rollouts per step): 32 rollouts trained, as A's 4 x 8
COLUMNS = ("lookahead_fresh", "lookahead_kl", "lookahead_dv", "lookahead_dll")


def rediagnose(variant: str, out: Path, worlds: list[str]) -> None:
    steps, per_step = VARIANTS[variant]
    v2plan = yaml.safe_load(run_v2.PLAN.read_text())
    fresh = yaml.safe_load(run_v2.PLAN_LOOK2.read_text())["lookahead"]["fresh_samples"]
    plans = run_worlds.load("default")
    for name in worlds:
        world_dir = (out / variant / name).resolve()
        if (world_dir / "lookahead.json").is_file():
            continue
        plan = run_worlds.resolve(plans, name)
        section = {**run_v2.lookahead_section(v2plan, plan, fresh), "steps": steps, "rollouts_per_step": per_step}
        t0 = time.time()
        rows = run_v2.rows_of(plan, run_v2.diagnose(plan, world_dir, section), world_dir)
        (world_dir / "lookahead.json").write_text(json.dumps(
            {"world": name, "variant": variant, "seconds": round(time.time() - t0, 1), "rows": rows}, indent=1))
        print(f"{variant} {name}: {len(rows)} rows in {time.time() - t0:.0f} s", flush=True)


def _value(x):
    return x.get("estimate") if isinstance(x, dict) else x


def report(out: Path) -> dict:
    plan4 = yaml.safe_load(L.PLANS[4].read_text())
    rows = L.load_rows(plan4)  # A's columns (committed) and the realised outcome
    result = {"variants": {"A": [4, 8], **{k: list(v) for k, v in VARIANTS.items()}}, "worlds": {}, "pooled": {}}
    table = {}
    for r in rows:
        key = (r["world"], r["config"], r["method"])
        table[key] = {"d_pass1": v2._num(r["d_pass1"]["estimate"]), "A": {c: _value(r.get(c)) for c in COLUMNS}}
    for variant in VARIANTS:
        for w in plan4["worlds"]:
            path = out / variant / w / "lookahead.json"
            if not path.is_file():
                continue
            for x in json.loads(path.read_text())["rows"]:
                key = (w, x["config"], x["method"])
                if key in table:
                    table[key][variant] = {c: _value(x.get(c)) for c in COLUMNS}
    for w in plan4["worlds"]:
        keys = [k for k in table if k[0] == w]
        per = {}
        for variant in ("A", *VARIANTS):
            have = [k for k in keys if variant in table[k]]
            if len(have) < 3:
                continue
            y = np.array([table[k]["d_pass1"] for k in have], float)
            per[variant] = {"n": len(have)}
            for c in COLUMNS:
                x = np.array([np.nan if table[k][variant][c] is None else table[k][variant][c] for k in have], float)
                ok = np.isfinite(x) & np.isfinite(y)  # pairs with both (Δll is missing where no prompt is mixed)
                per[variant][c] = stats.spearman(x[ok], y[ok])
        result["worlds"][w] = per
    for variant in ("A", *VARIANTS):
        done = [w for w in result["worlds"] if variant in result["worlds"][w]]
        result["pooled"][variant] = {"worlds": done, **{
            f"mean_{c}": float(np.nanmean([result["worlds"][w][variant][c] for w in done])) if done else None
            for c in COLUMNS}}
    return result


def render(res: dict) -> str:
    lines = ["Spearman with the realised held-out Δpass@1 within each world (A: the committed lookahead, 4 steps x 8 "
             "rollouts; B: 8 x 4; C: 16 x 2; same trained rollouts)", ""]
    for c in COLUMNS:
        lines.append(f"{c}:")
        for w, per in res["worlds"].items():
            lines.append(f"  {w:18s} " + "  ".join(f"{v} {per[v][c]:+.2f}" if v in per and per[v][c] == per[v][c]
                                                   else f"{v}   n/a" for v in ("A", *VARIANTS)))
        lines.append("  mean of worlds     " + "  ".join(
            f"{v} {res['pooled'][v]['mean_' + c]:+.2f} ({len(res['pooled'][v]['worlds'])} worlds)"
            if res["pooled"][v]["mean_" + c] is not None else f"{v} n/a" for v in ("A", *VARIANTS)))
        lines.append("")
    for v in VARIANTS:
        pairs = [(per[v]["lookahead_fresh"], per["A"]["lookahead_fresh"]) for per in res["worlds"].values()
                 if v in per and "A" in per]
        lines.append(f"lookahead_fresh, {v} against A: above in {sum(x > a for x, a in pairs)}, below in "
                     f"{sum(x < a for x, a in pairs)}, equal in {sum(x == a for x, a in pairs)} of {len(pairs)} worlds")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    ap.add_argument("--worlds")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args(argv)
    if args.report:
        res = report(args.out)
        (HERE / "explore_lookahead_steps.txt").write_text(render(res) + "\n")
        print(render(res))
        return 0
    worlds = args.worlds.split(",") if args.worlds else yaml.safe_load(L.PLANS[4].read_text())["worlds"]
    rediagnose(args.variant, args.out, worlds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
