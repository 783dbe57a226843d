"""An exploration kept as a look (committed before it ran): does the launched run's own held-out evaluation after a
quarter of its steps say how much the run will realise?

explore_early_read.py read the first 10 of 40 steps through the trainer's per-step log (loss, student-teacher KL on a
batch of 16 fresh problems) and found nothing (the recommended row's KL drop ranks what it realised at +0.09). The
trainer's periodic evaluation (``training.eval``: held-out pass@1 at the start and every ``eval_steps``) is what a user
following the run live reads instead; nobody has measured whether its quarter-run value says where the run ends. The
step-10 checkpoints of explore_early_read's 286 runs are on disk, so this costs evaluations only.

Definitions, fixed before any of it ran:
- rows: explore_early_read's (every world with its build in the repository and its rows committed, its 30; every row
  with G > 0; seed 0; trained exactly as the worlds study trains it for its first 10 of 40 steps);
- each row's step-10 checkpoint and the world's initial student are evaluated by the study's own evaluator
  (``benchmarks/validity/evaluate.py``: the test split at the selected level, the study's samples, seed and common
  random numbers, so the initial evaluation must reproduce the committed one: checked per world);
- ``early_d1``: the step-10 held-out pass@1 minus the initial (mean over problems); ``early_kl``: KL(step-10 || initial
  student) per token on its own test samples; ``early_dreg``: the regression set's pass@1 change;
- the realised Δpass@1 is the committed one (the study's two seeds, 40 steps).
Reported: pooled over every row of the 30 worlds, each column's Spearman with the realised Δpass@1 and AUROC for
realised < +0.02 (low values flag), and the 2 x 2 table of early_d1 < +0.02 against realised < +0.02; per world, the
Spearman over its rows (what a quarter of every candidate run would buy as a ranking) beside G's over the same rows,
averaged over the never-fitted worlds; the recommended row across the never-fitted worlds (explore_early_read's size
figures).
The look (fixed now): the same on the worlds built after the 30 whose builds are in the repository, `sable` and `tawny`
(their rows with G > 0, trained for 10 steps here as the 30 were).
Decision rule: the app's view of a running training run gains an early read (once the run has evaluated at or after a
quarter of its steps: the held-out pass@1 change since the start, and what the study's runs with such a read realised,
from figures generated into the package's model file) only if, pooled over the 30 worlds' rows, early_d1 reaches
Spearman >= +0.70 and AUROC >= 0.85, and pooled over the look's rows Spearman >= +0.50 with AUROC >= 0.80 (AUROC only
where both classes have at least two rows). Otherwise the columns are reported and nothing else follows.

Second look (written and committed with plan_checks.yaml amendment 18, before `clinker` was built; the first look's
results had been read): the first look's worlds had no row that realised below +0.02, so it tested the read's order
and not its flag. `clinker` comes from the recipe of capacity, cinder and shale, where rows realise least. After its
check (plan_checks.yaml), its rows with G > 0 are trained for 10 steps (seed 0) and evaluated as the others were
(``--worlds clinker``). The early read stays only if over clinker's rows early_d1 reaches Spearman >= +0.50 with the
realised change and, where both classes have at least two rows, AUROC >= 0.80. If it does not, the read is withdrawn:
``--ship`` writes no early_read record, so the Train page, the decision panel and the trainer's log stop showing it,
and the docs say why. If clinker has fewer than three rows with G > 0 (or the plan's level rule excludes it), the look
is reported as not made and the read stays as shipped.

Third look (written and committed with plan_checks.yaml amendment 19, before `ashlar` was built; after the second look
failed and the read was withdrawn). On clinker every one of the ten rows realised within 0.03 of zero and was read
below +0.02: the flag was right on all ten, and the second look's rule asked for an order among them that was not
there. What the Train page says of a read is its flag, so this look judges the flag, on a world from the recipe most
worlds share, whose rows spread widest: `ashlar`, its rows with G > 0 trained for 10 steps and evaluated as the others
(``--worlds ashlar``, after its check). The read ships again only if (a) of its rows read below +0.02 at least 60%
realised below +0.02, and of its rows read at least +0.02 at least 80% realised at least +0.02, each judged where the
group has at least three rows and at least one group judged; and (b) where at least three of its rows realised on each
side of +0.02, early_d1 ranks what they realised at Spearman >= +0.50. Otherwise it stays withdrawn and the product's
early-read code is removed. The figures the read then ships with stay the 30 worlds'.

Fourth look (written and committed with plan_checks.yaml amendment 40b, while barite, the first of amendment 40's five
worlds, was building: before any study, check or early read of them): the third look's rule, unchanged, judged on the
rows with G > 0 (10 steps, seed 0; ``--out STUDY --worlds W`` after each check, then ``--keep``, which adds what that
folder holds) of `barite`, `calcite`, `spinel`, `epidote` and `zoisite` pooled, once all five are checked or excluded
and only with three rows or more. If it holds, the read stays as shipped (the record names this look); if not, it is
withdrawn: ``--ship`` writes no early_read record, so the Train page, the decision panel and the trainer's log stop
showing it, and the docs say why.

Reading of its output (explore_early_success.txt; 300 checkpoints evaluated in 708 s in two processes, each world's
initial evaluation equal to the committed one). First look: the rule fires. Pooled over the 30 worlds' 286 rows the
step-10 held-out change ranks the realised 40-step change at +0.82 (AUROC 0.93; G +0.04 over the same rows): of 137
runs read below +0.02, 101 realised below it; of 149 read at least +0.02, 141 realised at least that. On the look's 14
rows (sable, tawny) +0.50, at the threshold itself, and none realised below +0.02, so the look tested the order and
not the flag. Within a world, a quarter of every candidate run ranks its rows at +0.664 over the never-fitted worlds
(G +0.250 over the same rows); the step-10 KL to the initial student does not rank them (+0.11 pooled). So the Train
page showed the early read (opsd_diag.early_read). Second look (clinker, 10 runs of 10 steps and their evaluations in
60 s): fails, Spearman -0.09 among ten rows that all realised within 0.03 of zero, all read below +0.02; the read was
withdrawn (--ship wrote no record). Third look (ashlar, 82 s): holds, 8 of its 10 rows read below +0.02 realised below
it (0.80); no row was read at least +0.02 and only two realised that much, so neither the other side nor the order
was judged. The read ships again with the 30 worlds' figures. Fourth look (42 rows of five worlds, 83-177 s a world):
fails. 2 of the 7 rows read below +0.02 realised below it (0.29), 32 of the 35 read at least +0.02 realised at least
that, and the read ranks the 42 at +0.24. The low reads are all barite's (listed in the output); the read is withdrawn.

    python benchmarks/validity/v2/explore_early_success.py --out DIR [--worlds a,b]   # train if needed, evaluate
    python benchmarks/validity/v2/explore_early_success.py --out DIR --keep           # rows: early_success_rows.json
    python benchmarks/validity/v2/explore_early_success.py --report > benchmarks/validity/v2/explore_early_success.txt
    python benchmarks/validity/v2/explore_early_success.py --ship     # its figures into the model file (--check: fail
                                                                      # where the file's differ)
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
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import explore_coherence as coherence  # noqa: E402
from benchmarks.validity.v2 import explore_early_read as early  # noqa: E402
from benchmarks.validity.v2 import explore_lookahead_reach as reach  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_checks as checks  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import SMALL, recommended_rows  # noqa: E402
from benchmarks.validity.v2.explore_size_floor import auroc, initial, size_figures, size_lines  # noqa: E402
from benchmarks.validity.v2.looks import explore_cli, model_file  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "early_success_rows.json"
EVALUATE = HERE.parent / "evaluate.py"
LOOK = ("sable", "tawny")
LOOK2 = ("clinker",)  # the second look (plan_checks.yaml amendment 18)
LOOK3 = ("ashlar",)  # the third look (plan_checks.yaml amendment 19)
LOOK4 = ("barite", "calcite", "spinel", "epidote", "zoisite")  # the fourth look (plan_checks.yaml amendment 40b)
COLUMNS = ("early_d1", "early_kl", "early_dreg")


def worlds() -> list[str]:
    """The worlds of the first three looks (the fourth's are kept beside them; the explorations built on these read
    only these)."""
    return [*early.worlds(), *LOOK, *LOOK2, *LOOK3]


def measure(out: Path, names: list[str]) -> None:
    train_and_evaluate(out, names, keys, early.STEPS)


def train_and_evaluate(out: Path, names: list[str], keys_of, steps: int, tag: str = "early") -> None:
    """Train each world's rows ``keys_of(name)`` for the first ``steps`` of their 40 steps exactly as the worlds study
    trains them (``<world>/<tag>/<key>``, resumable per run), then evaluate every checkpoint, and the initial student
    where it is missing (``<world>/early_eval/initial.json``), with the study's evaluator in one process per world
    (``<world>/<tag>_eval/<key>.json``, resumable per output)."""
    jobs = []
    for name in names:
        world_dir, todo = (out / name).resolve(), keys_of(name)
        # a row's config made for its early read (the same run), else the study's, laid out once per world
        made = {k: world_dir / "configs" / f"early.{k}.yaml" for k in todo}
        if not all(p.is_file() for p in made.values()):
            trainings = run_worlds.layout_world(reach.plan_of(name), world_dir)["trainings"]
            made = {k: p if p.is_file() else Path(trainings[k]) for k, p in made.items()}
        for key in todo:
            cfg = yaml.safe_load(made[key].read_text())
            cfg["training"]["max_steps"] = steps
            path = world_dir / "configs" / f"{tag}.{key}.yaml"
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            jobs.append((path, world_dir / tag / key))
    t0 = time.time()
    with ThreadPoolExecutor(early.WORKERS) as pool:
        list(pool.map(lambda j: early.train(*j), jobs))
    print(f"{len(jobs)} runs of {steps} steps in {time.time() - t0:.0f} s", flush=True)

    def evaluate(name: str) -> None:
        world = (out / name).resolve()
        todo = [] if (world / "early_eval" / "initial.json").is_file() else [
            {"model": "initial", "out": str(world / "early_eval" / "initial.json")}]
        todo += [{"model": str(world / tag / key / f"checkpoints/step-{steps:06d}"),
                  "out": str(world / f"{tag}_eval" / f"{key}.json")}
                 for key in keys_of(name) if not (world / f"{tag}_eval" / f"{key}.json").is_file()]
        if todo:
            path = world / f"{tag}_eval.jobs.json"
            path.write_text(json.dumps(todo))
            subprocess.run([sys.executable, str(EVALUATE), "--study", str(world), "--jobs", str(path)], check=True,
                           stdout=subprocess.DEVNULL)
    t0 = time.time()
    with ThreadPoolExecutor(early.WORKERS) as pool:
        list(pool.map(evaluate, names))
    print(f"{len(names)} worlds evaluated in {time.time() - t0:.0f} s", flush=True)


def keys(name: str) -> list[str]:
    return [f"{r['config']}__{r['method']}__s0" for r in early.candidates(name)]


def pass1(ev: dict, part: str) -> dict[str, float]:
    return {pid: c / n for pid, (n, c) in ev[part].items()}


def columns(ev: dict, ini: dict, prefix: str = "early") -> dict[str, float]:
    """An evaluation against the initial one, paired per problem."""
    d1 = [p - pass1(ini, "test")[pid] for pid, p in pass1(ev, "test").items()]
    dreg = [p - pass1(ini, "regression")[pid] for pid, p in pass1(ev, "regression").items()]
    kl_sum, kl_n = np.array(list(ev["kl"].values()), dtype=float).sum(0)
    return {f"{prefix}_d1": float(np.mean(d1)), f"{prefix}_kl": float(kl_sum / max(kl_n, 1.0)),
            f"{prefix}_dreg": float(np.mean(dreg))}


def kept_rows(out: Path, names: list[str], keys_of, tag: str = "early") -> dict:
    """Per world with an initial evaluation, the ``columns`` (prefixed ``tag``) of each evaluated row of
    ``keys_of(world)`` (``train_and_evaluate``'s outputs)."""
    kept = {}
    for w in names:
        ini_path, d = out / w / "early_eval" / "initial.json", out / w / f"{tag}_eval"
        if not ini_path.is_file():
            continue
        ini = json.loads(ini_path.read_text())
        runs = {k: columns(json.loads((d / f"{k}.json").read_text()), ini, tag)
                for k in keys_of(w) if (d / f"{k}.json").is_file()}
        kept[w] = {"initial_pass1": float(np.mean(list(pass1(ini, "test").values()))), "test_problems": len(ini["test"]),
                   "runs": runs}
    return kept


def keep(out: Path) -> None:
    """The kept rows, with those of every world ``out`` holds measured put in (a world's study folder holds one)."""
    names, kept = [*worlds(), *LOOK4], json.loads(KEPT.read_text()) if KEPT.is_file() else {}
    kept.update(kept_rows(out, names, keys))
    KEPT.write_text(look2.records_json({w: kept[w] for w in names if w in kept}) + "\n")


def pooled(rows: list[dict], col: str) -> dict:
    x, y = np.array([r[col] for r in rows], dtype=float), v2.target(rows, "d_pass1")
    small = y < SMALL
    enough = min(small.sum(), (~small).sum()) >= 2
    return {"spearman": stats.spearman(x, y), "auroc": auroc(x, small) if enough else float("nan"), "n": len(rows),
            "small": int(small.sum())}


def table(rows: list[dict], col: str = "early_d1") -> dict[str, int]:
    """The read ``col`` < SMALL (flagged) against realised < SMALL."""
    e = np.array([r[col] < SMALL for r in rows])
    y = v2.target(rows, "d_pass1") < SMALL
    return {"flag_small": int((e & y).sum()), "flag_moved": int((e & ~y).sum()),
            "pass_small": int((~e & y).sum()), "pass_moved": int((~e & ~y).sum())}


def world_figures(base: list[dict], shipped: dict, columns) -> dict:
    """Per world, each of ``columns`` and G's Spearman over its rows, their means over the never-fitted worlds, and the
    recommended row's ``columns`` against what it realised across them."""
    cols = (*columns, "accuracy_gap")
    per = {c: v2.per_world(np.array([r[c] for r in base], dtype=float), base, "d_pass1")["worlds"] for c in cols}
    names = list(per["accuracy_gap"])
    never = [x for x in names if x not in look8.FITTED]
    picked = coherence.recommended(base, recommended_rows(shipped), names, columns)
    return {"worlds": names, "never_fitted": never, "per_world": per,
            "mean_never_fitted": {c: float(np.nanmean([per[c][x] for x in never])) for c in cols},
            "size": size_figures(picked, never, columns), "recommended": picked}


def report() -> dict:
    kept, shipped = json.loads(KEPT.read_text()), model_file(16)
    rows = [{**r, **kept[w]["runs"][f"{r['config']}__{r['method']}__s0"]} for w in kept for r in early.candidates(w)]
    base = [r for r in rows if r["world"] not in (*LOOK, *LOOK2, *LOOK3, *LOOK4)]
    look = [r for r in rows if r["world"] in LOOK]
    look2 = [r for r in rows if r["world"] in LOOK2]
    look3 = [r for r in rows if r["world"] in LOOK3]
    look4 = [r for r in rows if r["world"] in LOOK4]
    cols = (*COLUMNS, "accuracy_gap")
    ini = {w: (kept[w]["initial_pass1"], initial(w)["pass@1"]["estimate"]) for w in kept}
    res = {**world_figures(base, shipped, COLUMNS), "look_worlds": [w for w in LOOK if w in kept],
           "pooled": {c: pooled(base, c) for c in cols}, "look": {c: pooled(look, c) for c in cols},
           "table": table(base), "look_table": table(look), "initial_check": max(abs(a - b) for a, b in ini.values())}
    p, q = res["pooled"]["early_d1"], res["look"]["early_d1"]
    first = bool(p["spearman"] >= 0.70 and p["auroc"] >= 0.85 and q["spearman"] >= 0.50 and not q["auroc"] < 0.80)
    res["fires"] = first
    if len(look2) >= 3:  # the second look (docstring): made only with three rows or more
        res.update(look2={c: pooled(look2, c) for c in cols}, look2_table=table(look2),
                   look2_worlds=[w for w in LOOK2 if w in kept])
        q2 = res["look2"]["early_d1"]
        res["look2_holds"] = bool(q2["spearman"] >= 0.50 and not q2["auroc"] < 0.80)
        res["fires"] = res["fires"] and res["look2_holds"]
    if look3:  # the third look (docstring) decides once made: the flag, and the order where both sides have 3 rows
        res.update(look3={c: pooled(look3, c) for c in cols}, look3_table=table(look3),
                   look3_worlds=[w for w in LOOK3 if w in kept], look3_flag=flag_rule(table(look3)),
                   look3_order=order_rule(look3))
        res["look3_holds"] = bool(res["look3_flag"]["holds"] and res["look3_order"]["holds"])
        res["fires"] = first and res["look3_holds"]
    done = all(w in kept or checks.status(w) == "excluded" for w in LOOK4)
    if done and len(look4) >= 3:  # the fourth look (docstring): the third look's rule on amendment 40's worlds
        res.update(look4={c: pooled(look4, c) for c in cols}, look4_table=table(look4),
                   look4_worlds=[w for w in LOOK4 if w in kept], look4_flag=flag_rule(table(look4)),
                   look4_order=order_rule(look4), look4_low=[r for r in look4 if r["early_d1"] < SMALL])
        res["look4_holds"] = bool(res["look4_flag"]["holds"] and res["look4_order"]["holds"])
        res["fires"] = res["fires"] and res["look4_holds"]
    return res


def flag_rule(t: dict) -> dict:
    """The third look's (a): of rows read below SMALL >= 60% realised below, of rows read at least SMALL >= 80%
    realised at least that, each judged with three rows or more, one group at least."""
    low, high = t["flag_small"] + t["flag_moved"], t["pass_small"] + t["pass_moved"]
    judged = {"low": low >= 3, "high": high >= 3}
    share = {"low": t["flag_small"] / low if low else float("nan"), "high": t["pass_moved"] / high if high else float("nan")}
    ok = {"low": share["low"] >= 0.60, "high": share["high"] >= 0.80}
    return {"share": share, "judged": judged,
            "holds": any(judged.values()) and all(ok[g] for g in ok if judged[g])}


def order_rule(rows: list[dict], col: str = "early_d1") -> dict:
    """The third look's (b): where three rows or more realised on each side of SMALL, the read's Spearman >= +0.50."""
    y = v2.target(rows, "d_pass1")
    judged = bool((y < SMALL).sum() >= 3 and (y >= SMALL).sum() >= 3)
    rho = stats.spearman(np.array([r[col] for r in rows], dtype=float), y)
    return {"judged": judged, "spearman": rho, "holds": not judged or rho >= 0.50}


def render(res: dict) -> str:
    cols = (*COLUMNS, "accuracy_gap")
    lines = [f"The initial evaluation reproduces the committed initial pass@1 of every world within "
             f"{res['initial_check']:.1e}.", "",
             f"Pooled over every row with G > 0 (seed 0, evaluated after the first {early.STEPS} of 40 steps): Spearman "
             f"with the realised held-out Δpass@1, AUROC for realised < {SMALL:+.2f} (low values flag)"]
    blocks = [(f"the {len(res['worlds'])} worlds", "pooled", "table"),
              ("the look: " + ", ".join(res["look_worlds"]), "look", "look_table")]
    if "look2" in res:
        blocks.append(("the second look: " + ", ".join(res["look2_worlds"]), "look2", "look2_table"))
    if "look3" in res:
        blocks.append(("the third look: " + ", ".join(res["look3_worlds"]), "look3", "look3_table"))
    if "look4" in res:
        blocks.append(("the fourth look: " + ", ".join(res["look4_worlds"]), "look4", "look4_table"))
    for label, key, tkey in blocks:
        lines.append(f"  {label}")
        lines += [f"    {c:13s} Spearman {s['spearman']:+.2f}  AUROC {s['auroc']:.2f}  (n = {s['n']}, {s['small']} below)"
                  for c, s in res[key].items()]
        t = res[tkey]
        lines.append(f"    early_d1 < {SMALL:+.2f}: {t['flag_small']} of {t['flag_small'] + t['flag_moved']} realised below "
                     f"{SMALL:+.2f}; early_d1 >= {SMALL:+.2f}: {t['pass_moved']} of {t['pass_small'] + t['pass_moved']} "
                     "realised at least that")
    lines += ["", "Spearman within each world over its rows with G > 0 (* the shipped models were fitted on it)", "",
              *early.world_table(res, cols)]
    lines += size_lines(res["size"])
    if "look3" in res:
        f, o = res["look3_flag"], res["look3_order"]
        lines += ["", "the third look's rule (docstring): " + flag_words(f, o) + ": "
                  + ("holds" if res["look3_holds"] else "does not hold")]
    if "look4" in res:
        f, o = res["look4_flag"], res["look4_order"]
        low = ", ".join(f"{r['world']} {r['config']}/{r['method']} {r['early_d1']:+.3f} -> {r['d_pass1']['estimate']:+.3f}"
                        for r in res["look4_low"])
        lines += ["the fourth look's rule (docstring): " + flag_words(f, o) + ": "
                  + ("holds" if res["look4_holds"] else "does not hold"),
                  f"  its rows read below {SMALL:+.2f} (read -> realised): " + low]
    lines += ["", "decision rule (docstring): the early read " + ("ships" if res["fires"] else "does not ship")]
    return "\n".join(lines + recommended_lines(res, COLUMNS))


def flag_words(f: dict, o: dict) -> str:
    """``flag_rule``'s and ``order_rule``'s results in words."""
    return "; ".join(
        f"rows read {'below' if g == 'low' else 'at least'} {SMALL:+.2f}: {f['share'][g]:.2f} realised "
        f"{'below' if g == 'low' else 'at least that'} ({'judged' if f['judged'][g] else 'not judged: under three rows'})"
        for g in ("low", "high")) + f"; order {o['spearman']:+.2f} ({'judged' if o['judged'] else 'not judged'})"


def recommended_lines(res: dict, columns) -> list[str]:
    """The recommended row of each world (``world_figures``): what it realised and its ``columns``."""
    lines = ["", "the recommended row per world: realised, " + ", ".join(columns)]
    return lines + [f"  {n + (' *' if n not in res['never_fitted'] else ''):20s} {r['row']:22s} {r['realised']:+.3f}  "
                    + "  ".join(f"{r[c]:+.3f}" for c in columns) for n, r in res["recommended"].items()]


def figures(res: dict) -> dict:
    """The model file's ``early_read`` record (what the product worded while the read shipped), from ``report()``."""
    p, t, q = res["pooled"]["early_d1"], res["table"], res["look"]["early_d1"]
    total = {reach.plan_of(w)["training"]["max_steps"] for w in res["worlds"]}
    assert len(total) == 1, f"the worlds train for {sorted(total)} steps: one early-read fraction cannot cover them"
    total = total.pop()
    return {"generated_by": "benchmarks/validity/v2/explore_early_success.py",
            "rows": "benchmarks/validity/v2/early_success_rows.json", "fraction": early.STEPS / total,
            "steps": [early.STEPS, total], "threshold": SMALL, "worlds": len(res["worlds"]), "runs": p["n"],
            "spearman": round(p["spearman"], 2), "auroc": round(p["auroc"], 2),
            "low": {"runs": t["flag_small"] + t["flag_moved"], "realised_below": t["flag_small"]},
            "high": {"runs": t["pass_small"] + t["pass_moved"], "realised_at_least": t["pass_moved"]},
            "look": {"worlds": res["look_worlds"], "runs": q["n"], "spearman": round(q["spearman"], 2)},
            **({"look2": {"worlds": res["look2_worlds"], "runs": res["look2"]["early_d1"]["n"],
                          "spearman": round(res["look2"]["early_d1"]["spearman"], 2),
                          "auroc": round(res["look2"]["early_d1"]["auroc"], 2)}} if "look2" in res else {}),
            **({"look3": {"worlds": res["look3_worlds"], "runs": res["look3"]["early_d1"]["n"],
                          "low": round(res["look3_flag"]["share"]["low"], 2),
                          "high": round(res["look3_flag"]["share"]["high"], 2)}} if "look3" in res else {}),
            **({"look4": {"worlds": res["look4_worlds"], "runs": res["look4"]["early_d1"]["n"],
                          "low": round(res["look4_flag"]["share"]["low"], 2),
                          "high": round(res["look4_flag"]["share"]["high"], 2),
                          "spearman": round(res["look4"]["early_d1"]["spearman"], 2)}} if "look4" in res else {})}


def ship(check: bool) -> int:
    """Write ``figures`` into the model file where the rule fired (the docstring), or check that it holds them."""
    res, shipped = report(), json.loads(v2.SHIPPED.read_text())
    want = v2.stats_jsonable(figures(res)) if res["fires"] else None  # as the file holds it (NaN: null)
    if check:
        if shipped.get("early_read") != want:
            print(f"explore_early_success: the early_read of {v2.SHIPPED} is stale: rerun with --ship", file=sys.stderr)
            return 1
        return 0
    shipped.pop("early_read", None)
    shipped.update({"early_read": want} if want else {})
    v2.SHIPPED.write_text(json.dumps(v2.stats_jsonable(shipped), indent=1, sort_keys=True) + "\n")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv in (["--ship"], ["--check"]):
        return ship(argv == ["--check"])
    return explore_cli(argv, __doc__, measure, keep, lambda: render(report()), worlds)


if __name__ == "__main__":
    sys.exit(main())
