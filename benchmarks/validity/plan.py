"""The study plan: plan.yaml with a variant applied, and everything derived from it.

``load(variant)`` returns the resolved plan (a plain dict, stored in the study directory as
``plan.resolved.json``); ``prepare(plan, out)`` writes the data splits, the derived data files and
every config file; ``jobs(plan, out)`` lists the diagnosis, training and evaluation jobs.  Nothing
here runs a model.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PLAN_FILE = HERE / "plan.yaml"
VARIANTS = ("default", "quick", "tiny", "second_look")
MAIN = "main"  # the diagnosis run of every configuration expressible from the train split itself


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load(variant: str = "default", path: Path = PLAN_FILE) -> dict:
    """plan.yaml with the variant's overrides applied (``configurations`` of a variant names a subset)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown plan variant {variant!r}: use one of {', '.join(VARIANTS)}")
    raw = yaml.safe_load(Path(path).read_text())
    variants = raw.pop("variants", {}) or {}
    plan = raw
    if variant != "default":
        over = copy.deepcopy(variants[variant])
        names = over.pop("configurations", None)
        extra = over.pop("extra_configurations", [])  # configurations a variant adds (the second look)
        plan = _merge(raw, over)
        plan["configurations"] = [*raw["configurations"], *extra]
        if names is not None:
            by_name = {c["name"]: c for c in plan["configurations"]}
            unknown = [n for n in names if n not in by_name]
            if unknown:
                raise ValueError(f"variant {variant} names unknown configurations {unknown}")
            plan["configurations"] = [by_name[n] for n in names]
    plan["variant"] = variant
    _check(plan)
    return plan


def _check(plan: dict) -> None:
    names = [c["name"] for c in plan["configurations"]]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate configuration names in the plan: {names}")
    for c in plan["configurations"]:
        if "teacher" not in c and "context" not in c:
            raise ValueError(f"configuration {c['name']}: give a teacher model, a context, or both")
        if c.get("derive") not in (None, "shuffled_steps", "other_solution"):
            raise ValueError(f"configuration {c['name']}: unknown derive {c['derive']!r}")
    for kind in ("external", "self"):
        if len(plan["methods"][kind]) < 2 and plan["variant"] in ("default", "second_look"):
            raise ValueError(f"the plan needs at least two {kind} methods")
    if plan["variant"] in ("default", "second_look") and (len(plan["configurations"]) < 10
                                                          or len(plan["training"]["seeds"]) < 3):
        raise ValueError("the default plan needs at least 10 configurations and 3 seeds")


# ------------------------------------------------------------------------------------ level + data

def select_level(plan: dict, repo: Path = REPO) -> tuple[int, dict]:
    """The pre-registered level rule applied to the zoo's build_report.json: (level, gaps per level)."""
    report = json.loads((repo / plan["world"]["models"] / "build_report.json").read_text())
    acc = report["accuracy"]
    rows = plan["level"]["rows"]
    gaps = {}
    for lv in acc["student"]:
        if lv == "all":
            continue
        gaps[int(lv.split()[-1])] = min(acc[r][lv] - acc["student"][lv] for r in rows)
    level = max(gaps, key=lambda k: (gaps[k], k))
    if gaps[level] < plan["level"]["min_gap"]:
        raise RuntimeError(f"no level where {rows} beat the student by {plan['level']['min_gap']} ({gaps}): "
                           "distillation cannot raise accuracy there; rebuild the zoo")
    return level, gaps


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def split_rows(plan: dict, name: str, level: int, repo: Path = REPO) -> list[dict]:
    spec = plan["splits"][name]
    levels = [level if lv == "selected" else int(lv) for lv in spec["levels"]]
    rows = [r for r in _read_jsonl(repo / plan["world"]["problems"] / f"{spec['split']}.jsonl")
            if (r.get("meta") or {}).get("difficulty") in levels]
    if spec.get("first"):
        rows = rows[:spec["first"]]
    if not rows:
        raise RuntimeError(f"split {name} of the plan is empty ({spec})")
    return rows


def shuffled_steps(rows: list[dict], seed: int) -> list[dict]:
    """Each solution's lines in a seeded random order that is never the original one."""
    out = []
    for i, r in enumerate(rows):
        lines = r["solution"].splitlines()
        rng = random.Random(seed * 1_000_003 + i)
        order = list(range(len(lines)))
        if len(set(lines)) > 1:
            while order == sorted(order):
                rng.shuffle(order)
        out.append({**r, "solution": "\n".join(lines[j] for j in order)})
    return out


def other_solution(rows: list[dict]) -> list[dict]:
    """Each problem shown the next problem's solution (cyclic; same split and level)."""
    return [{**r, "solution": rows[(i + 1) % len(rows)]["solution"]} for i, r in enumerate(rows)]


# ------------------------------------------------------------------------------------ the study layout

@dataclass(frozen=True)
class Row:
    """One (configuration, method) row of the study."""
    config: str
    method: str
    signal: str
    training: dict


def derived_runs(plan: dict) -> list[str]:
    """Diagnosis runs: ``main`` (when some configuration needs no derived data) plus one per derivation."""
    derives = sorted({c["derive"] for c in plan["configurations"] if c.get("derive")})
    return [MAIN, *derives]


def diag_source(plan: dict, config: str) -> tuple[str, str]:
    """(diagnosis run, config name inside that run) of a configuration."""
    c = config_spec(plan, config)
    return (c["derive"], "self_full") if c.get("derive") else (MAIN, c["name"])


def config_spec(plan: dict, name: str) -> dict:
    for c in plan["configurations"]:
        if c["name"] == name:
            return c
    raise KeyError(name)


def is_external(c: dict) -> bool:
    return "teacher" in c


def teacher_entry(plan: dict, c: dict, models: Path, name: str | None = None) -> dict:
    """The ``teachers`` entry of a diagnosis / training config for configuration ``c``."""
    name = name or c["name"]
    entry = {"name": name, "model": str(models / c["teacher"])} if is_external(c) else {"name": name}
    if "context" in c:  # a self-teacher's context, or a teacher model shown one
        entry["context"] = plan["wrong_solution"] if c["context"] == "wrong_solution" else c["context"]
    if "partial_fraction" in c:
        entry["partial_fraction"] = c["partial_fraction"]
    return entry


def rows(plan: dict) -> list[Row]:
    out = []
    for c in plan["configurations"]:
        for m in plan["methods"]["external" if is_external(c) else "self"]:
            out.append(Row(c["name"], m["name"], m["signal"], m["training"]))
    return out


def run_name(config: str, method: str, seed: int) -> str:
    return f"{config}__{method}__s{seed}"


def data_file(out: Path, split: str, derive: str | None = None) -> Path:
    return Path(out) / "data" / (f"{split}.jsonl" if derive in (None, MAIN) else f"{split}.{derive}.jsonl")


def prepare(plan: dict, out: Path, repo: Path = REPO) -> dict:
    """Write data files and configs into ``out``; returns the layout (paths by role)."""
    out = Path(out)
    models = (repo / plan["world"]["models"]).resolve()
    level, gaps = select_level(plan, repo)
    plan = {**plan, "level_selected": level, "level_gaps": gaps}
    splits = {name: split_rows(plan, name, level, repo) for name in plan["splits"]}
    # the diagnosis prompts are the first N of the training file, so a derived training file serves both
    train = splits["train"]
    diag_ids = [r["id"] for r in splits["diagnosis"]]
    if [r["id"] for r in train[:len(diag_ids)]] != diag_ids:
        raise RuntimeError("the diagnosis prompts must be the first problems of the training split")
    test_ids = {r["id"] for r in splits["test"]} | {r["id"] for r in splits["regression"]}
    if test_ids & {r["id"] for r in train}:
        raise RuntimeError("held-out problems overlap the training split")
    files = {"train": _write_jsonl(data_file(out, "train"), train),
             "test": _write_jsonl(data_file(out, "test"), splits["test"]),
             "regression": _write_jsonl(data_file(out, "regression"), splits["regression"])}
    derived = {"shuffled_steps": lambda r: shuffled_steps(r, plan["derive_seed"]), "other_solution": other_solution}
    for d in derived_runs(plan)[1:]:
        files[f"train.{d}"] = _write_jsonl(data_file(out, "train", d), derived[d](train))

    cfg_dir = out / "configs"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    dg = plan["diagnosis"]
    main_teachers = [teacher_entry(plan, c, models) for c in plan["configurations"] if not c.get("derive")]
    diag_cfgs = {}
    for run in derived_runs(plan):
        teachers = list(main_teachers)
        if run != MAIN and not any(t["name"] == "self_full" for t in teachers):
            teachers.append({"name": "self_full", "context": "full_solution"})
        if not teachers:
            continue
        cfg = {
            "student": {"model": str(models / "student")},
            "base": {"model": str(models / "base")},
            "teachers": teachers,
            "data": {"path": str(data_file(out, "train", run).resolve()), "limit": len(diag_ids)},
            "sampling": dg["sampling"], "scoring": dg["scoring"],
            "analysis": {"checker": plan["world"]["checker"], **dg["analysis"]},
            "shard_size": dg["shard_size"], "ideal": dg["ideal"],
        }
        path = cfg_dir / f"diag.{run}.yaml"
        _write_text(path, yaml.safe_dump(cfg, sort_keys=False))
        diag_cfgs[run] = path

    tr = plan["training"]
    train_cfgs = {}
    for row in rows(plan):
        c = config_spec(plan, row.config)
        for seed in tr["seeds"]:
            training = {**row.training, "teacher": row.config,
                        "max_steps": tr["max_steps"], "per_device_train_batch_size": tr["per_device_train_batch_size"],
                        "num_generations": tr["num_generations"], "learning_rate": tr["learning_rate"],
                        "warmup_steps": tr["warmup_steps"], "lr_scheduler_type": tr["lr_scheduler_type"],
                        "save_total_limit": tr["save_total_limit"], "seed": seed, "report_to": "none",
                        "eval": {"data": None}}
            cfg = {
                "student": {"model": str(models / "student")},
                "teachers": [teacher_entry(plan, c, models)],
                "data": {"path": str(data_file(out, "train", c.get("derive")).resolve())},
                "sampling": {"temperature": tr["temperature"], "max_completion_length": tr["max_completion_length"]},
                "scoring": {"jsd_beta": dg["scoring"]["jsd_beta"]},
                "analysis": {"checker": plan["world"]["checker"]},
                "training": training,
            }
            name = run_name(row.config, row.method, seed)
            path = cfg_dir / "train" / f"{name}.yaml"
            _write_text(path, yaml.safe_dump(cfg, sort_keys=False))
            train_cfgs[name] = path
    plan_path = out / "plan.resolved.json"
    _write_text(plan_path, json.dumps(plan, indent=1, sort_keys=True))
    return {"plan": plan, "files": {k: str(v) for k, v in files.items()},
            "diagnoses": {k: str(v) for k, v in diag_cfgs.items()},
            "trainings": {k: str(v) for k, v in train_cfgs.items()}}


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
