"""Run the pre-registered study over outcome worlds (plan.yaml here), one world after another.

    python benchmarks/validity/worlds/run_worlds.py [--plan default|quick|tiny] --out DIR [--workers 2]
        [--worlds capacity,style] [--spec NEW_WORLD.yaml] [--layout-only]

Each world is one study of ``benchmarks/validity`` in ``DIR/<world>/`` (same driver, jobs, evaluation
and stored files as ``run_study.py``), resolved from this plan by ``resolve``. Resumable: rerun the
same command and finished diagnoses, training runs and evaluations are skipped; a world whose
evaluations are all written is marked in ``DIR/worlds.json`` and skipped. Progress goes to
``DIR/<world>/study.log``; the per-world wall time to ``DIR/worlds.json``. ``--spec``: a world not in the plan
(one nobody has seen), from its built spec with the common settings; the study records it in ``worlds.json`` so
``v2/check_world.py --study DIR`` finds it.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import run_study, runs_io  # noqa: E402
from opsd_diag.errors import OpsdError  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PLAN_FILE = HERE / "plan.yaml"
VARIANTS = ("default", "quick", "tiny")
NEEDS_BASE = ("opd2", "exopd")


def load(variant: str = "default", path: Path = PLAN_FILE) -> dict:
    """plan.yaml with a variant's overrides applied to ``common`` (and ``order``)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown plan variant {variant!r}: use one of {', '.join(VARIANTS)}")
    raw = yaml.safe_load(Path(path).read_text())
    over = copy.deepcopy((raw.get("variants") or {}).get(variant, {})) if variant != "default" else {}
    order = over.pop("order", raw["order"])
    names = over.pop("configurations", None)
    only = over.pop("methods_only", None)
    common = plan_mod._merge(raw["common"], over)
    return {"variant": variant, "order": order, "worlds": raw["worlds"], "common": common,
            "configuration_names": names, "methods_only": only}


def add_world(plans: dict, spec_path: Path) -> str:
    """A world nobody has seen, from its spec alone (built by ``opsd-diag zoo build --world SPEC``), added to the
    loaded plan with the common settings as the plan's amendments add one, so checking it needs no edit of
    plan.yaml; its name (the spec's) must be new. A student with a second skill is measured for forgetting on it,
    as the plan's ``forgetting`` world is (the task's easy levels otherwise); each of the spec's own ``contexts``
    (a rule) adds a self-teacher and an external teacher shown it, as the plan adds ``rule_vs_instance2``'s."""
    from opsd_diag.zoo import world as world_mod

    spec = world_mod.load(spec_path)
    if spec.name in plans["worlds"]:
        raise ValueError(f"world {spec.name!r} of {spec_path} is already in the plan: run it with --worlds "
                         f"{spec.name}, or give the new world another name in its spec")
    models, problems = world_mod.folders(spec, Path(spec_path))
    plans["worlds"][spec.name] = {"models": str(models), "problems": str(problems),
                                  "spec": str(Path(spec_path).resolve())}
    if spec.contexts:  # a world's own contexts (a rule) teach as rule_vs_instance2's do: self-taught and taught
        plans["worlds"][spec.name]["extra_configurations"] = [
            x for c in spec.contexts for x in ({"name": f"self_{c}", "context": c},
                                               {"name": f"teacher_{c}", "teacher": "teacher", "context": c})]
    if spec.student.second_skill is not None:
        plans["worlds"][spec.name]["splits"] = copy.deepcopy(plans["worlds"]["forgetting"]["splits"])
    return spec.name


def load_study(study: Path, variant: str = "default") -> dict:
    """The plan a study directory was run with: ``load(variant)`` plus the worlds ``--spec`` added to it (recorded
    in ``STUDY/worlds.json``)."""
    state = Path(study) / "worlds.json"
    plans = load(variant)
    for spec in (json.loads(state.read_text()).get("specs", {}) if state.is_file() else {}).values():
        add_world(plans, Path(spec))
    return plans


def resolve(plans: dict, name: str, repo: Path = REPO, models_root: Path | None = None) -> dict:
    """One world's study plan in ``benchmarks/validity/plan.py``'s schema (plus ``reference`` and the
    forgetting-set file). ``models_root``: the world's models and problems are read from
    ``ROOT/<world>/models`` and ``ROOT/<world>/problems`` instead (a test's ci-size builds)."""
    from opsd_diag.zoo import world as world_mod

    w = dict(plans["worlds"][name])
    if models_root is not None:
        w["models"], w["problems"] = (str(Path(models_root).resolve() / name / d) for d in ("models", "problems"))
    c = copy.deepcopy(plans["common"])
    configs = [*c.pop("configurations"), *copy.deepcopy(w.get("extra_configurations", []))]
    if plans["configuration_names"] is not None:
        configs = [x for x in configs if x["name"] in plans["configuration_names"]]
    contexts = world_mod.load(repo / w["spec"]).contexts if w.get("spec") else {}
    for x in configs:  # a world's own context (the rule) is passed as its template text
        if x.get("context") in contexts:
            x["context_name"], x["context"] = x["context"], contexts[x["context"]]
    only = plans["methods_only"]
    methods = {kind: [m for m in ms if only is None or m["name"] in only] for kind, ms in c.pop("methods").items()}
    reference = [m for m in c.pop("reference") if only is None or m["name"] in only]
    plan = {**c, "world": {"models": w["models"], "problems": w["problems"], "checker": c.pop("checker")},
            "configurations": configs, "methods": methods, "reference": reference,
            "variant": f"worlds-{plans['variant']}", "world_name": name,
            "regression_file": (w.get("splits") or {}).get("regression")}
    return plan


def _skip(plan: dict, train_name: str) -> bool:
    config, method, _ = train_name.split("__")
    ms = [m for kind in plan["methods"].values() for m in kind if m["name"] == method]
    return bool(ms) and config in ms[0].get("not_for", [])


def layout_world(plan: dict, out: Path) -> dict:
    """The validity study's layout for one world, with this plan's additions: the base for the
    delta methods, the methods' exclusions, the reference arm and the forgetting-set file."""
    layout = run_study.build(plan, out)
    models = (REPO / plan["world"]["models"]).resolve()
    keep = {n: p for n, p in layout["trainings"].items() if not _skip(plan, n)}
    for n in set(layout["trainings"]) - set(keep):  # written by prepare, not part of this plan
        Path(layout["trainings"][n]).unlink(missing_ok=True)
    for n, path in keep.items():
        if n.split("__")[1] in NEEDS_BASE:
            cfg = yaml.safe_load(Path(path).read_text())
            cfg["base"] = {"model": str(models / "base")}
            plan_mod._write_text(Path(path), yaml.safe_dump(cfg, sort_keys=False))
    tr = plan["training"]
    for ref in plan["reference"]:
        for seed in tr["seeds"]:
            name = plan_mod.run_name("demonstrations", ref["name"], seed)
            training = {**ref["training"], "max_steps": tr["max_steps"],
                        "per_device_train_batch_size": tr["per_device_train_batch_size"],
                        "learning_rate": tr["learning_rate"], "warmup_steps": tr["warmup_steps"],
                        "lr_scheduler_type": tr["lr_scheduler_type"], "save_total_limit": tr["save_total_limit"],
                        "seed": seed, "report_to": "none", "eval": {"data": None}}
            cfg = {"student": {"model": str(models / "student")},
                   "teachers": [{"name": "self_full", "context": "full_solution"}],
                   "data": {"path": str(plan_mod.data_file(out, "train").resolve())},
                   "sampling": {"temperature": tr["temperature"], "max_completion_length": tr["max_completion_length"]},
                   "analysis": {"checker": plan["world"]["checker"]}, "training": training}
            path = out / "configs" / "train" / f"{name}.yaml"
            plan_mod._write_text(path, yaml.safe_dump(cfg, sort_keys=False))
            keep[name] = str(path)
    if plan["regression_file"]:
        spec = plan["regression_file"]
        rows = plan_mod._read_jsonl(REPO / plan["world"]["problems"] / spec["file"])[:spec.get("first")]
        plan_mod._write_jsonl(plan_mod.data_file(out, "regression"), rows)
    py = sys.executable
    layout["trainings"] = keep
    layout["jobs"]["trainings"] = [
        run_study.Job(f"train.{n}", "training", [py, "-m", "trainer", p, "--out", str(out / "train" / n)],
                      out / "train" / n, done=lambda d=out / "train" / n: runs_io.train_finished(d), fresh=True)
        for n, p in keep.items()]
    return layout


def run_world(plan: dict, out: Path, workers: int, echo: bool = True) -> int:
    study = run_study.Study(out, workers, echo=echo)
    layout = layout_world(plan, out)
    study.log(f"world {plan['world_name']} ({plan['variant']}): level {layout['plan']['level_selected']} "
              f"(gaps {layout['plan']['level_gaps']}); {len(layout['jobs']['diagnoses'])} diagnoses, "
              f"{len(layout['jobs']['trainings'])} training runs")
    if study.run(layout["jobs"]["diagnoses"] + layout["jobs"]["trainings"]):
        return 1
    checks = run_study.check_same_rollouts(out, list(layout["diagnoses"]))
    (out / "checks.json").write_text(json.dumps(checks, indent=1))
    compat = [run_study.Job(f"compat.{run}", "compat", [sys.executable, str(HERE / "compat.py"), "--diag", str(d)],
                            d / "compat.json", done=lambda d=d: (d / "compat.json").is_file())
              for run in layout["diagnoses"] for d in [out / "diag" / run]]
    return 1 if study.run(compat + run_study.eval_jobs(out, layout, workers)) else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default="default", choices=VARIANTS)
    ap.add_argument("--out", required=True, help="study directory (created; rerun to resume)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--worlds", help="comma-separated subset of the plan's order")
    ap.add_argument("--spec", type=Path, action="append", default=[],
                    help="a world not in plan.yaml, from its spec (built first: opsd-diag zoo build --world SPEC); "
                         "repeatable; without --worlds only these worlds run")
    ap.add_argument("--layout-only", action="store_true", help="write data and configs, run nothing")
    ap.add_argument("--models-root", type=Path,
                    help="read each world from ROOT/<world>/models and ROOT/<world>/problems (e.g. ci-size builds)")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    state_path = out / "worlds.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"plan": args.plan, "worlds": {}}
    if state["plan"] != args.plan:
        print(f"run_worlds: error: {out} holds the '{state['plan']}' plan, not '{args.plan}'", file=sys.stderr)
        return 2
    recorded = state.get("specs", {})  # world name -> its spec's resolved path
    names = []
    try:
        plans = load_study(out, args.plan)  # with the worlds an earlier --spec added to this study
        for p in args.spec:  # a spec this study already holds resumes its world
            known = [n for n, q in recorded.items() if q == str(p.resolve())]
            names.append(known[0] if known else add_world(plans, p))
    except (ValueError, OpsdError) as e:  # the world spec's own errors are one clear line too
        print(f"run_worlds: error: {e}", file=sys.stderr)
        return 2
    order = args.worlds.split(",") if args.worlds else names or plans["order"]
    unknown = [w for w in order if w not in plans["worlds"]]
    if unknown:
        print(f"run_worlds: error: unknown world(s) {unknown}: use {', '.join(plans['worlds'])}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    state["specs"] = {**recorded, **{n: plans["worlds"][n]["spec"] for n in names}}
    rc = 0
    for name in order:
        if state["worlds"].get(name, {}).get("finished"):
            continue
        plan = resolve(plans, name, models_root=args.models_root)
        if not (REPO / plan["world"]["models"] / "build_report.json").is_file():
            print(f"{name}: not built ({plan['world']['models']}): skipped", flush=True)
            state["worlds"][name] = {"finished": False, "skipped": "not built"}
            continue
        try:  # the pre-registered level rule alone excludes a world (any other error is not an exclusion)
            plan_mod.select_level(plan)
        except RuntimeError as e:
            print(f"{name}: {e}", flush=True)
            if not args.layout_only:
                state["worlds"][name] = {"finished": True, "excluded": str(e)}
                state_path.write_text(json.dumps(state, indent=1))
            continue
        if args.layout_only:
            layout_world(plan, out / name)
            continue
        t0 = time.time()
        entry = state["worlds"].setdefault(name, {})
        entry.pop("error", None)
        entry.pop("skipped", None)  # built since an earlier run skipped it
        try:
            code = run_world(plan, out / name, args.workers)
        except Exception as e:  # noqa: BLE001 - one world's failure must not stop the others; rerun resumes
            print(f"{name}: FAILED: {type(e).__name__}: {e}", flush=True)
            entry["error"] = f"{type(e).__name__}: {e}"
            code = 1
        entry["seconds"] = round(entry.get("seconds", 0) + time.time() - t0, 1)
        entry["finished"] = code == 0
        state_path.write_text(json.dumps(state, indent=1))
        rc |= code
    state_path.write_text(json.dumps(state, indent=1))
    return rc


if __name__ == "__main__":
    sys.exit(main())
