"""Run the pre-registered lever study (plan.yaml here): each world's best configuration, every lever setting.

    python benchmarks/validity/levers/run_levers.py [--out /work/runs/levers] [--workers 2] [--worlds a,b] [--look 3]
    python benchmarks/validity/levers/run_levers.py --look 4 [--seeds 2,3] [--settings all,NAME]   (or --look 5, 7, 9, 10)

Per world, the worlds harness lays out the data and the training configs (``run_worlds.layout_world``:
nothing is run); the best configuration's config gets this plan's budget, evaluation and one lever
setting per run, written to ``OUT/<world>/levers/<setting>__s<seed>.yaml`` and trained by ``python -m
trainer`` into ``OUT/<world>/runs/<setting>__s<seed>``, evaluated by the trainer at its last step (the
``all`` seed-0 run also at step 0: the initial student). Resumable: a finished run is skipped, an
unfinished one is started again from scratch. Progress goes to ``OUT/levers.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan.yaml"
LOOKS = {3: "third_look", 4: "fourth_look", 5: "fifth_look", 6: "sixth_look", 7: "seventh_look",
         8: "eighth_look", 9: "ninth_look", 10: "tenth_look"}  # a later look's section of plan.yaml


def load_plan(path: Path = PLAN) -> dict:
    return yaml.safe_load(Path(path).read_text())


def worlds_of(plan: dict, look: int = 1) -> dict:
    """{world: its best (config, method)}: the first looks' four worlds, or a later look's (amendments 4-6)."""
    return (plan.get(LOOKS.get(look, "")) or plan)["worlds"]


def best_of(plan: dict, world: str) -> dict:
    """A world's best (config, method): the first looks' or a later look's (the same wherever a world recurs)."""
    for part in (plan, *(plan.get(k) or {} for k in LOOKS.values())):
        if world in part.get("worlds", {}):
            return part["worlds"][world]
    raise KeyError(world)


def settings_for(plan: dict, world: str) -> list[str]:
    """The settings run in ``world``: schedules only where the teacher's context shows the solution; then the
    second look's settings in its worlds (amendment 3); in a third-, sixth- or eighth-look world, every candidate mask
    (amendments 4, 7, 9)."""
    self_teacher = best_of(plan, world)["config"].startswith("self_")
    second = plan.get("second_look") or {}
    third = plan.get("third_look") or {}
    extra = second.get("settings", {}) if world in second.get("worlds", []) else {}
    if any(world in (plan.get(k) or {}).get("worlds", {}) for k in ("third_look", "sixth_look", "eighth_look")):
        extra = {**second.get("settings", {}), **third.get("settings", {})}  # the sixth, eighth: the third's settings
    return [s for s, v in plan["settings"].items() if self_teacher or not v.get("needs_solution")] + [
        s for s in extra if s not in plan["settings"]]


def setting_of(plan: dict, name: str) -> dict:
    for part in (plan["settings"], *((plan.get(k) or {}).get("settings", {}) for k in ("second_look", *LOOKS.values()))):
        if name in part:
            return part[name]
    raise KeyError(name)


def setting_in(plan: dict, name: str, world: str | None) -> dict:
    """A setting as ``world`` runs it: a position window ending at ``half`` ends at the world's E (amendment 8)."""
    v = json.loads(json.dumps(setting_of(plan, name)))
    pos = v.get("token_mask", {}).get("positions")
    if pos is not None and pos[1] == "half":
        pos[1] = plan["seventh_look"]["half"][world]
    return v


def run_config(plan: dict, base: dict, data_dir: Path, name: str, seed: int, world: str | None = None,
               first_seed: int | None = None) -> dict:
    """The best configuration's training config with this plan's budget, evaluation and one lever setting; the
    ``all`` run of ``first_seed`` (default the plan's first; a look's own seeds: its first) evaluates the initial
    student."""
    cfg = json.loads(json.dumps(base))
    tr, ev = plan["training"], plan["evaluation"]
    training = {k: v for k, v in cfg["training"].items() if k not in ("max_steps", "seed", "eval")}
    training.update({k: tr[k] for k in ("max_steps", "per_device_train_batch_size", "num_generations",
                                         "learning_rate", "warmup_steps", "lr_scheduler_type")})
    training.update(seed=seed, save_total_limit=1, report_to="none",
                    **{k: v for k, v in setting_in(plan, name, world).items() if k != "needs_solution"})
    training["eval"] = {
        "data": {"path": str(data_dir / f"{ev['held_out']['split']}.jsonl"), "limit": ev["held_out"]["limit"]},
        "regression": {"path": str(data_dir / f"{ev['forgetting']['split']}.jsonl"),
                       "limit": ev["forgetting"]["limit"]},
        "num_samples": ev["num_samples"], "pass_k": ev["pass_k"], "temperature": ev["temperature"],
        "max_completion_length": ev["max_completion_length"], "seed": ev["seed"], "batch_size": ev["batch_size"],
        "kl_to_initial": True, "at_start": name == "all" and seed == (plan["training"]["seeds"][0] if first_seed is None else first_seed)}
    reg = data_dir / f"{ev['forgetting']['split']}.jsonl"
    first = json.loads(reg.read_text().splitlines()[0]) if reg.is_file() else {}
    if not first.get("solution"):  # the trainer's regression NLL reads sft_target; no solution: the answer
        training["sft_target"] = "Answer: {answer}"
    cfg["training"] = training
    cfg.setdefault("sampling", {}).update(temperature=tr["temperature"], max_completion_length=tr["max_completion_length"])
    return cfg


def finished(run_dir: Path) -> bool:
    status = run_dir / "status.json"
    return status.is_file() and json.loads(status.read_text()).get("status") == "finished"


def layout(plan: dict, world: str, out: Path, settings: list[str] | None = None,
           seeds: list[int] | None = None) -> list[tuple[str, Path, Path]]:
    """(name, config, run directory) of every run of ``world`` (``settings``, ``seeds``: the look's own lists)."""
    plans = run_worlds.load("default", run_worlds.REPO / plan["worlds_plan"])
    wplan = run_worlds.resolve(plans, world)
    wdir = out / world
    if not (wdir / "data" / "train.jsonl").is_file():
        run_worlds.layout_world(wplan, wdir)
    best = best_of(plan, world)
    base = yaml.safe_load((wdir / "configs" / "train" / f"{best['config']}__{best['method']}__s0.yaml").read_text())
    jobs = []
    for setting in settings or settings_for(plan, world):
        for seed in seeds or plan["training"]["seeds"]:
            name = f"{setting}__s{seed}"
            path = wdir / "levers" / f"{name}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(run_config(plan, base, wdir / "data", setting, seed, world,
                                                      (seeds or plan["training"]["seeds"])[0]), sort_keys=False))
            jobs.append((f"{world}/{name}", path, wdir / "runs" / name))
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worlds")
    ap.add_argument("--look", type=int, default=1, choices=(1, 3, 4, 5, 6, 7, 8, 9, 10),
                    help="3, 6, 8: the third, sixth or eighth look's worlds (amendments 4, 7, 9); 4, 5, 7, 9, 10: the "
                         "fourth, fifth, seventh, ninth or tenth look's worlds, settings and seeds (amendments 5, 6, 8, "
                         "10, 11)")
    ap.add_argument("--seeds", help="comma-separated seeds (--look 4: the confirmation seeds)")
    ap.add_argument("--settings", help="comma-separated settings (--look 4: all and the setting to confirm)")
    args = ap.parse_args(argv)
    plan = load_plan()
    own = plan[LOOKS[args.look]] if args.look in (4, 5, 7, 9, 10) else {}  # a look with its own settings, seeds and out
    settings = args.settings.split(",") if args.settings else (list(own["settings"]) if own else None)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else own.get("seeds")
    out = (args.out or Path(own.get("out") or plan["out"])).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "levers.log", "a")

    def say(msg: str) -> None:
        log.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
        log.flush()

    worlds = args.worlds.split(",") if args.worlds else list(worlds_of(plan, args.look))
    jobs = [j for w in worlds for j in layout(plan, w, out, settings, seeds)]
    # interleave worlds so a late stop leaves every world with its first settings done
    order = list(dict.fromkeys([*plan["settings"], *(plan.get("second_look") or {}).get("settings", {}),
                                *(plan.get("third_look") or {}).get("settings", {}), *own.get("settings", {})]))
    jobs.sort(key=lambda j: (j[0].split("__s")[1], order.index(j[0].split("/")[1].split("__")[0])))

    def run(job) -> int:
        name, cfg, run_dir = job
        if finished(run_dir):
            return 0
        shutil.rmtree(run_dir, ignore_errors=True)
        t0 = time.time()
        with open(out / f"{name.replace('/', '.')}.log", "w") as f:
            rc = subprocess.call([sys.executable, "-m", "trainer", str(cfg), "--out", str(run_dir)], stdout=f,
                                 stderr=subprocess.STDOUT, cwd=run_worlds.REPO,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})  # one thread per trainer
        say(f"{name}: rc={rc} {time.time() - t0:.0f}s")
        return rc

    say(f"start: {len(jobs)} runs, {args.workers} workers")
    with ThreadPoolExecutor(args.workers) as pool:
        rcs = list(pool.map(run, jobs))
    say(f"done: {sum(1 for r in rcs if r)} failed")
    return 1 if any(rcs) else 0


if __name__ == "__main__":
    sys.exit(main())
