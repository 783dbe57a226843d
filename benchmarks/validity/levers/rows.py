"""The lever study's rows, read from its runs: per (world, setting) the realised changes against the initial
student, their bootstrap intervals and their table (report_levers.py and later_looks.py build on them).

Per (world, setting): the final evaluation of each seed's run against the initial student (the ``all``
seed-0 run's step-0 evaluation; every run shares it); held-out Δpass@1 and Δpass@4 per problem, averaged
over the seeds that finished, with a 95% percentile bootstrap over problems (2000 draws, seed 0); the
forgetting set's Δpass@1 and the KL to the initial student as seed means (with each seed's value); the
kept share of tokens over the run. Differences against ``all`` are paired by problem.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.levers.run_levers import settings_for  # noqa: E402
from opsd_diag.core.stats import ci_text, pass_at_k  # noqa: E402

N_BOOT, SEED = 2000, 0


def _records(run: Path) -> tuple[list[dict], list[dict]] | None:
    status = run / "status.json"
    if not status.is_file() or json.loads(status.read_text()).get("status") != "finished":
        return None
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r["kind"] == "train"], [r for r in recs if r["kind"] == "eval"]


def per_problem(ev: dict, k: int) -> dict[int, float]:
    return {int(i): pass_at_k(int(n), int(c), k) for i, n, c in ev["per_problem"]}


def boot(values: np.ndarray, level: float = 0.95) -> dict:
    """Mean with a percentile bootstrap over the rows (problems), its ``level`` interval."""
    rng = np.random.default_rng(SEED)
    idx = rng.integers(0, len(values), (N_BOOT, len(values)))
    means = values[idx].mean(axis=1)
    tail = 100 * (1 - level) / 2
    return {"estimate": float(values.mean()), "lo": float(np.percentile(means, tail)),
            "hi": float(np.percentile(means, 100 - tail)), "n": int(len(values))}


def world_rows(plan: dict, root: Path, world: str, settings: list[str] | None = None,
               seeds: list[int] | None = None, level: float | None = None) -> dict:
    """Per setting (default the plan's for ``world``), over ``seeds`` (default the plan's), against the initial
    student (the ``all`` run of the first seed, evaluated at step 0); ``level``: the differences against ``all``
    also with that interval (``vs_all_judged``), for a look that tests several settings at once."""
    wdir = root / world / "runs"
    first = _records(wdir / f"all__s{(seeds or plan['training']['seeds'])[0]}")
    initial = next((e for e in first[1] if e["step"] == 0), None) if first else None
    if initial is None:
        return {"status": "no initial evaluation (the all seed-0 run did not finish)"}
    init = {k: per_problem(initial, k) for k in (1, 4)}
    problems = sorted(init[1])
    rows, deltas = {}, {}
    for s in settings or settings_for(plan, world):
        done, d1, d4, forget, kl, kept, tokens = [], [], [], [], [], 0, 0
        for seed in seeds or plan["training"]["seeds"]:
            got = _records(wdir / f"{s}__s{seed}")
            if got is None:
                continue
            train, evals = got
            final = max(evals, key=lambda e: e["step"])
            done.append(seed)
            for k, acc in ((1, d1), (4, d4)):
                pp = per_problem(final, k)
                acc.append([pp[i] - init[k][i] for i in problems])
            forget.append(final["regression_pass@1"] - initial["regression_pass@1"])
            kl.append(final["kl_to_initial"])
            kept += sum(r.get("kept_tokens", r["tokens"]) for r in train)
            tokens += sum(r["tokens"] for r in train)
        if not done:
            rows[s] = {"status": "not run or not finished"}
            continue
        deltas[s] = {1: np.mean(d1, axis=0), 4: np.mean(d4, axis=0)}
        rows[s] = {"status": "ok", "second_look": s in (plan.get("second_look") or {}).get("settings", {})
                   and world in plan["second_look"]["worlds"], "seeds": done, "d_pass1": boot(deltas[s][1]),
                   "d_pass4": boot(deltas[s][4]), "d_forgetting": {"estimate": float(np.mean(forget)), "per_seed": forget},
                   "kl_to_initial": {"estimate": float(np.mean(kl)), "per_seed": kl},
                   "kept_share": kept / tokens, "kept_tokens": kept, "tokens": tokens}
    for s, d in deltas.items():
        if s != "all" and "all" in deltas:
            rows[s]["vs_all"] = {f"d_pass{k}": boot(d[k] - deltas["all"][k]) for k in (1, 4)}
            if level is not None:
                rows[s]["vs_all_judged"] = {f"d_pass{k}": boot(d[k] - deltas["all"][k], level) for k in (1, 4)}
    return {"status": "ok", "initial": {k: initial[k] for k in ("pass@1", "pass@4", "regression_pass@1")},
            "n_problems": len(problems), "settings": rows}


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rho (average ranks for ties), NaN below 3 pairs or without spread."""
    if len(x) < 3:
        return math.nan
    rx, ry = (np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(float) for v in (x, y))
    for r, v in ((rx, np.asarray(x)), (ry, np.asarray(y))):
        for val in set(v.tolist()):  # average ranks of ties
            r[v == val] = r[v == val].mean()
    if rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def finite(x) -> bool:
    return x is not None and math.isfinite(x)


def world_table(wr: dict) -> list[str]:
    """One world's initial student and its settings' rows."""
    i = wr["initial"]
    L = [f"Initial student: pass@1 {i['pass@1']:.3f}, pass@4 {i['pass@4']:.3f}, forgetting set pass@1 "
         f"{i['regression_pass@1']:.3f} ({wr['n_problems']} held-out problems).", "",
         "| setting | seeds | Δpass@1 | Δpass@4 | Δpass@1 − all's | Δpass@4 − all's | Δforgetting | KL to initial "
         "| kept share |", "|---|---|---|---|---|---|---|---|---|"]
    for s, r in wr["settings"].items():
        if r.get("status") != "ok":
            L.append(f"| {s} | {r['status']} | | | | | | | |")
            continue
        va = r.get("vs_all")
        L.append(f"| {s}{' (second look)' if r.get('second_look') else ''} | {','.join(map(str, r['seeds']))} | "
                 f"{ci_text(r['d_pass1'], 3)} | {ci_text(r['d_pass4'], 3)} | "
                 f"{ci_text(va['d_pass1'], 3) if va else '—'} | {ci_text(va['d_pass4'], 3) if va else '—'} | "
                 f"{r['d_forgetting']['estimate']:+.3f} | {r['kl_to_initial']['estimate']:.4f} | "
                 f"{r['kept_share']:.3f} |")
    return L + [""]


def keeps_pass4(name: str, r: dict, base: dict, key: str = "vs_all") -> dict:
    """Target 1's test of one setting against all tokens: Δpass@1 at least all's, the paired Δpass@4 difference's
    interval (``key``: the 95% one, or ``vs_all_judged``) above 0."""
    ok = r["d_pass1"]["estimate"] >= base["d_pass1"]["estimate"] and r[key]["d_pass4"]["lo"] > 0
    return {"setting": name, "d_pass1": r["d_pass1"]["estimate"], "d_pass1_all": base["d_pass1"]["estimate"],
            "d_pass4_minus_all": r[key]["d_pass4"], "meets": ok}
