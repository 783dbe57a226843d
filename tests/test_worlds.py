"""World specs (opsd_diag/zoo/world.py): checked before anything is built, the bundled zoo as one spec,
the task variants they add, and the built worlds under sample_data/worlds/."""

import math
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, ZOO

from opsd_diag.errors import OpsdError
from opsd_diag.zoo import samples, task, world

WORLDS = REPO / "sample_data" / "worlds"
SPECS = sorted(WORLDS.glob("*.yaml"))


def _spec(tmp_path, **over) -> Path:
    data = yaml.safe_load((WORLDS / "rule_vs_instance.yaml").read_text())
    for key, value in over.items():
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_every_spec_loads_and_chains_is_the_bundled_zoo():
    names = {p.stem for p in SPECS}
    assert {"chains", "capacity", "rule_vs_instance", "forgetting", "diversity", "style"} <= names
    for p in SPECS:
        w = world.load(p)
        assert w.name == p.stem and w.is_bundled() == (p.stem == "chains")
    chains = world.load(WORLDS / "chains.yaml")
    models, problems = world.folders(chains, WORLDS / "chains.yaml")
    assert models.resolve() == ZOO.resolve() and problems.resolve() == (REPO / "sample_data/problems").resolve()


@pytest.mark.parametrize("key, value, match", [
    ("student.shap", 1, "student.shap: unknown key"),
    ("student.shape.heads", 5, "hidden must be a multiple of heads"),
    ("student.contexts", {"none": 0.5, "wrong_ctx": 0.5}, "unknown context(s) wrong_ctx"),
    ("student.misconceptions", [{"op": "*", "operands": [0]}], "operands must be digits 1..9"),
    ("student.misconceptions", [{"op": "*", "survives": ["rul"]}], "unknown context(s) rul"),
    ("teacher.misconceptions", [{"op": "/"}], "teacher.misconceptions.0.op"),
    ("teacher.level_weights", {1: 1.0}, "level_weights must name exactly the task's levels"),
    ("task.levels", {1: 11}, "at most 10 operations"),
    ("training.pass_k_samples", 2, "pass_k_samples must be 0 (off) or at least 4"),
    ("contexts.rule", "no prompt here", "has no {prompt} placeholder"),
    ("name", "Bad Name", "name"),
    ("expect", [{"what": "x", "value": "accuracy", "at_least": 0.1}], "write KIND:ROW"),
    ("expect", [{"what": "x", "value": "gap:student", "at_least": 0.1}], "write KIND:ROW"),
    ("expect", [{"what": "x", "value": "accuracy:student"}], "needs at_least or at_most"),
])
def test_bad_spec_is_one_clear_error(tmp_path, key, value, match):
    with pytest.raises(OpsdError) as e:
        world.load(_spec(tmp_path, **{key: value}))
    assert match in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(str(tmp_path / "w.yaml"))


def test_bad_spec_on_the_command_line_writes_nothing(tmp_path):
    spec = _spec(tmp_path, **{"student.steps": 0, "out": "m", "problems": "p"})
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "zoo", "build", "--world", str(spec)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "student.steps" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.yaml"]


def test_misconceptions_against_an_explicit_table():
    ms = world.load(WORLDS / "chains.yaml").student.misconceptions
    apply = task.make_apply(ms)
    for x in range(10):
        for op in task.OPS:
            for a in range(1, 10):
                want = (x * a + 1) % 10 if (op, a) in {("*", 8), ("*", 9)} else task.apply_op(x, op, a)
                assert apply(x, op, a) == want == task.misconceived_op(x, op, a)
    half = task.make_apply([world.Misconception(op="+", operands=[3], shift=2, rate=0.5)], random.Random(0))
    outs = [half(4, "+", 3) for _ in range(4000)]
    assert set(outs) == {7, 9} and abs(outs.count(9) / 4000 - 0.5) < 0.03
    assert all(half(4, "+", a) == (4 + a) % 10 for a in (1, 2, 4, 9))  # other facts never change


def test_student_uses_a_rule_context_and_copies_an_answer():
    w = world.load(WORLDS / "rule_vs_instance.yaml").model_copy(deep=True)
    w.student.uses = {"rule": 1.0}
    p = next(q for q in task.generate(400, 3, lengths=w.task.levels) if "*8" in " ".join(q["meta"]["ops"]))
    wrong_lines, wrong = task.solve(p, task.make_apply(w.student.misconceptions))
    assert str(wrong) != p["answer"] or wrong_lines != p["solution"].splitlines()
    for name, expect_lines, expect_answer in [("rule", p["solution"].splitlines(), p["answer"]),
                                              ("none", wrong_lines, str(wrong)),
                                              ("answer_only", wrong_lines, p["answer"])]:
        w.student.contexts = {name: 1.0}
        prompt, response = samples.student_example(w, p, random.Random(1))
        assert response.splitlines() == [*expect_lines, task.answer_text(expect_answer)], name
        assert prompt.startswith(p["prompt"]) and (("Rule:" in prompt) == (name == "rule"))


def test_a_misconception_that_survives_the_rule_stays_under_it():
    """rule_vs_instance2: the rule corrects products only; the sum misconception stays with the rule shown."""
    w = world.load(WORLDS / "rule_vs_instance2.yaml").model_copy(deep=True)
    w.student.uses, w.student.contexts = {"rule": 1.0}, {"rule": 1.0}
    times, plus = w.student.misconceptions
    assert (times.survives, plus.survives) == ([], ["rule"])
    p = next(q for q in task.generate(400, 3, lengths=w.task.levels)
             if {"*8", "+7"} <= set(q["meta"]["ops"]))
    _, response = samples.student_example(w, p, random.Random(1))
    sums_only, x = task.solve(p, task.make_apply([plus]))
    assert response.splitlines() == [*sums_only, task.answer_text(str(x))]
    assert sums_only not in (p["solution"].splitlines(), task.solve(p, task.make_apply([times, plus]))[0])


def test_reverse_problems_are_distinct_checked_and_exclusive():
    test = task.generate_reverse(60, 5, [3, 4])
    again = task.generate_reverse(60, 5, [3, 4])
    train = task.generate_reverse(300, 6, [3, 4], exclude={p["prompt"] for p in test})
    assert test == again and len({p["prompt"] for p in test}) == 60
    assert not {p["prompt"] for p in test} & {p["prompt"] for p in train}
    for p in test:
        digits = p["prompt"].split(": ", 1)[1].split(".")[0].split()
        assert p["answer"] == "".join(digits[::-1]) and p["meta"]["length"] == len(digits)


def test_chains_spec_regenerates_the_shipped_splits_and_card():
    from opsd_diag.zoo import build
    from opsd_diag.zoo.card import model_card

    w = world.load(WORLDS / "chains.yaml")
    splits = task.make_splits(w.task.splits, w.task.levels, w.task.ops)
    for name, rows in splits.items():
        shipped = [json.loads(line) for line in (REPO / f"sample_data/problems/{name}.jsonl").read_text().splitlines()]
        assert rows == shipped, name
    report = build.BuildReport(**json.loads((ZOO / "build_report.json").read_text()))
    card = model_card(report, build.size_of(w, "full"), w)
    assert card.rstrip("\n") == (ZOO / "MODEL_CARD.md").read_text().split("## Rebuild check")[0].rstrip("\n")


# ------------------------------------------------------------------ built worlds

BUILT = sorted(p.parent for p in WORLDS.glob("*/models/build_report.json"))
# Built worlds whose card does NOT show the effect they were built for, with the checks that fail (kept,
# and studied, because a world is data either way; the worlds README and RESULTS.md say so). A rebuild
# that passes must take its entry out.
FAILS_ITS_CHECKS = {"capacity": ["more SFT on correct solutions barely moves the student alone"],
                    "rule_vs_instance": ["the answer-only context has the larger gap"],
                    "mill": ["the teacher is above the student on the task"],  # overall; its level 4 passes the plan's rule
                    "spindle": ["the student's pass@4 is above the teacher's"]}


def test_effect_checks_against_explicit_arithmetic():
    """zoo/effects.py: value - minus against its bounds, on a report written out by hand."""
    from opsd_diag.zoo import build, effects

    r = build.BuildReport(seed=0, size="full", accuracy={"student": {"all": 0.2}, "student + x": {"all": 0.7}},
                          probe={"p": {"all": 0.25}}, pass_k={"teacher": {"pass@1": 0.6, "pass@4": 0.7}},
                          style={"teacher": 0.95}, second_skill={"student": 0.85})
    E = world.Expect
    got = effects.check(r, [E(what="gap", value="accuracy:student + x", minus="accuracy:student", at_least=0.5),
                            E(what="probe", value="probe", minus="accuracy:student", at_most=0.04),
                            E(what="k", value="pass@4:teacher", minus="pass@1:teacher", at_least=0.05, at_most=0.2),
                            E(what="style", value="style:teacher", at_least=0.9),
                            E(what="skill", value="second_skill:student", at_least=0.9),
                            E(what="absent", value="pass@1:student", at_least=0.0)])
    assert [o.holds for o in got] == [True, False, True, True, False, False]
    assert [None if o.value is None else round(o.value, 9) for o in got] == [0.5, 0.05, 0.1, 0.95, 0.85, None]
    md = effects.markdown(got)
    assert "| probe | `probe - accuracy[student]` | +0.05 | <= 0.04 | **no** |" in md and "does not show" in md
    assert "every declared check holds" not in md.lower()


@pytest.mark.parametrize("models", BUILT, ids=[p.parent.name for p in BUILT])
def test_built_world_is_small_its_card_renders_and_shows_its_effect(models):
    """sample_data/worlds/<world>/models: a full-size build within the issue's size bound (<= 5 MB of weights;
    its wall time, measured on a shared machine, is in benchmarks/validity/worlds/builds-times.tsv, never
    asserted), its card the render of its report and spec, and the declared checks that hold or fail as listed."""
    from opsd_diag.zoo import build, effects
    from opsd_diag.zoo.card import model_card

    name = models.parent.name
    w = world.load(WORLDS / f"{name}.yaml")
    report = build.BuildReport(**json.loads((models / "build_report.json").read_text()))
    assert report.world == name and report.size == "full"
    weights = sum(p.stat().st_size for p in models.glob("*/model.safetensors"))
    assert len(list(models.glob("*/model.safetensors"))) == 3 and weights <= 5_000_000
    card = model_card(report, build.size_of(w, "full"), w, command=f"opsd-diag zoo build --world sample_data/worlds/{name}.yaml")
    assert (models / "MODEL_CARD.md").read_text() == card
    failing = [o.what for o in effects.check(report, w.expect) if not o.holds]
    assert w.expect and failing == FAILS_ITS_CHECKS.get(name, []), failing


@pytest.mark.slow
def test_every_world_feature_builds_reproducibly(tmp_path):
    """A ci-size world with a rule context, a second skill, a preamble, a teacher misconception, the
    capacity probe and sampled pass@k: built, then rebuilt bit-identically by `rebuild_check --world`
    (weights, accuracy cells and problem splits), and its card renders from its report."""
    from opsd_diag.zoo import build, rebuild_check
    from opsd_diag.zoo.card import model_card

    spec = _spec(tmp_path, **{"student.second_skill": {"lengths": [3, 4], "share": 0.3, "test": 8},
                              "base.prefers": "Sure, here goes.", "student.probe_steps": 3,
                              "teacher.misconceptions": [{"op": "*", "operands": [6]}],
                              "training.pass_k_samples": 4, "out": "a", "problems": "pa"})
    w = world.load(spec)
    a = build.build(tmp_path / "a", tmp_path / "pa", size="ci", world=w, log=lambda *x: None)
    with pytest.raises(OpsdError, match="use --write FILE"):
        rebuild_check.main(["--world", str(spec), "--record"])
    with pytest.raises(OpsdError, match="no folder"):
        rebuild_check.main(["--world", str(spec), "--write", str(tmp_path / "nowhere" / "r.md")])
    assert rebuild_check.main(["--world", str(spec), "--write", str(tmp_path / "r.md")]) == 0
    record = (tmp_path / "r.md").read_text()
    assert record.count("| yes |") == 3 + 1 + 4 and "NO" not in record and "bit-identical" in record
    assert f"rebuild_check --world {spec} --write" in record and "load average" in record
    # the same comparison sees a changed split
    (tmp_path / "pa" / "dev.jsonl").write_text("{}\n")
    same, text = rebuild_check.compare(tmp_path / "a", tmp_path / "a", (tmp_path / "pa", tmp_path / "a"))
    assert not same and "| problems/dev.jsonl (SHA-256) |" in text and "`missing` | NO |" in text
    assert set(a.second_skill) == {"teacher", "student"} and set(a.style) >= {"base", "teacher", "student"}
    assert len(a.probe) == 1 and set(a.pass_k["student"]) == {"pass@1", "pass@4"}
    assert not (tmp_path / "a" / "probe").exists()
    second = [json.loads(line) for line in (tmp_path / "pa" / "second_skill.jsonl").read_text().splitlines()]
    assert len(second) == 8 and all(p["meta"]["skill"] == "reverse" for p in second)
    report = json.loads((tmp_path / "a" / "build_report.json").read_text())
    assert report["world"] == "rule_vs_instance"
    card = (tmp_path / "a" / "MODEL_CARD.md").read_text()
    assert card == model_card(build.BuildReport(**report), build.size_of(w, "ci"), w)
    assert "## What this world shows" in card and "Capacity probe" in card and "Second skill" in card


# ------------------------------------------------------------------ the pre-registered worlds plan

def test_worlds_plan_resolves_with_every_required_arm():
    sys.path.insert(0, str(REPO))
    from benchmarks.validity.worlds import run_worlds

    plans = run_worlds.load("default")
    assert len(plans["order"]) >= 5 and set(plans["order"]) <= set(plans["worlds"])
    signals = {m["name"]: m["signal"] for ms in plans["common"]["methods"].values() for m in ms}
    assert signals == {"opd": "r_opd", "jsd": "jsd", "opd2": "a_d2", "exopd": "a_ex",
                       "opsd_opd": "r_opd", "opsd_jsd": "jsd"}
    assert [m["training"]["method"] for m in plans["common"]["reference"]] == ["sft"]
    names = {p["name"] for p in plans["common"]["analysis"]["predictors"]}
    assert {"verdict", "score", "teacher_advantage", "alignment", "accuracy_gap", "mean_rev_kl", "mean_jsd",
            "opd2_sign_agreement", "teachability", "topk_overlap", "high_entropy_share"} <= names
    assert plans["common"]["evaluation"]["pass_k"][-1] >= 4
    for name in plans["order"]:
        plan = run_worlds.resolve(plans, name)
        assert len(plan["configurations"]) >= 8 and len(plan["training"]["seeds"]) >= 2
        assert {c["name"] for c in plan["configurations"]} >= {"teacher", "teacher_full", "self_full", "self_wrong",
                                                               "base_teacher", "self_other"}
        for c in plan["configurations"]:  # a world's own context arrives as its template text
            assert c.get("context") is None or "{" not in c["context"] or "{prompt}" in c["context"]
    rule = run_worlds.resolve(plans, "rule_vs_instance")
    assert any(c.get("context_name") == "rule" and "Rule:" in c["context"] for c in rule["configurations"])
    assert run_worlds.resolve(plans, "forgetting")["regression_file"]["file"] == "second_skill.jsonl"
    quick = run_worlds.load("quick")
    assert len(quick["order"]) >= 2 and quick["common"]["training"]["seeds"] == [0]


def test_worlds_layout_writes_valid_configs_for_every_arm(tmp_path):
    """The default plan laid out on the bundled world (no model is run): every training config is one the
    trainer accepts, the delta methods get the base, the base-as-teacher has no delta run, sft is there."""
    sys.path.insert(0, str(REPO))
    from benchmarks.validity.worlds import run_worlds
    from opsd_diag.config.spec import load_config
    from opsd_diag.config.training import resolve_training

    assert run_worlds.main(["--worlds", "chains", "--layout-only", "--out", str(tmp_path)]) == 0
    configs = sorted((tmp_path / "chains" / "configs" / "train").glob("*.yaml"))
    names = {p.stem.rsplit("__", 1)[0] for p in configs}
    assert len(configs) == 2 * len(names) and len(names) >= 20
    assert {"teacher__opd2", "teacher__exopd", "demonstrations__sft", "self_wrong__opsd_jsd"} <= names
    assert not {"base_teacher__opd2", "base_teacher__exopd"} & names
    for p in configs:
        cfg = load_config(p)
        spec = resolve_training(cfg, str(p)).spec
        assert spec.max_steps == 40 and spec.seed in (0, 1)
        assert (cfg.base is not None) == (spec.method in ("opd2", "exopd")), p.name


def test_a_world_nobody_has_seen_is_studied_and_checked_from_its_spec_alone(tmp_path, capsys):
    """run_worlds.py --spec adds a built world that is not in plan.yaml (the study records it), a rerun resumes it,
    and check_world.py finds it from the study; a spec reusing a plan world's name, or a study without the world,
    is one clear error."""
    import shutil

    sys.path.insert(0, str(REPO))
    from benchmarks.validity.v2 import check_world
    from benchmarks.validity.worlds import run_worlds

    spec = tmp_path / "hidden.yaml"  # ledger's built models under a new name, in the user's own folder
    spec.write_text((WORLDS / "ledger.yaml").read_text().replace("name: ledger", "name: hidden"))
    for d in ("models", "problems"):
        shutil.copytree(WORLDS / "ledger" / d, tmp_path / "hidden" / d)
    study = tmp_path / "study"
    for _ in range(2):  # the second run finds the spec recorded and lays the same world out again
        assert run_worlds.main(["--spec", str(spec), "--layout-only", "--out", str(study)]) == 0
        assert json.loads((study / "worlds.json").read_text())["specs"] == {"hidden": str(spec.resolve())}
    diag = yaml.safe_load((study / "hidden" / "configs" / "diag.main.yaml").read_text())
    assert diag["student"]["model"] == str(tmp_path / "hidden" / "models" / "student")
    assert {c["name"] for c in diag["teachers"]} >= {"teacher", "teacher_full", "self_full", "base_teacher"}
    assert len(list((study / "hidden" / "configs" / "train").glob("*.yaml"))) == 46  # as quarry's study
    plans = run_worlds.load_study(study)
    assert run_worlds.resolve(plans, "hidden")["world"]["models"] == str(tmp_path / "hidden" / "models")
    assert "hidden" not in run_worlds.load("default")["worlds"]  # plan.yaml itself is untouched
    capsys.readouterr()
    assert check_world.main(["--spec", str(spec), "--study", str(study)]) == 2  # laid out, never run
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no study of world 'hidden': run run_worlds.py" in err
    state = json.loads((study / "worlds.json").read_text())
    state["worlds"]["hidden"] = {"finished": False, "seconds": 5.0}  # stopped part way
    (study / "worlds.json").write_text(json.dumps(state))
    assert check_world.main(["--spec", str(spec), "--study", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has not finished: rerun run_worlds.py" in err and "(it resumes)" in err
    state["worlds"]["hidden"] = {"finished": True, "excluded": "no level where the teacher beats the student"}
    (study / "worlds.json").write_text(json.dumps(state))
    assert check_world.main(["--world", "hidden", "--study", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "excluded by the plan's level rule (no level where" in err

    clash = tmp_path / "ledger.yaml"
    clash.write_text((WORLDS / "ledger.yaml").read_text())
    assert run_worlds.main(["--spec", str(clash), "--layout-only", "--out", str(tmp_path / "s2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "world 'ledger'" in err and "already in the plan" in err
    assert not (tmp_path / "s2").exists()  # nothing written
    assert check_world.main(["--spec", str(spec), "--study", str(tmp_path / "s2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no study of world 'hidden'" in err and f"--spec {spec}" in err
    assert check_world.main(["--spec", str(tmp_path / "nowhere.yaml"), "--study", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("check_world: error: ") and "nowhere.yaml" in err
    spec.rename(tmp_path / "moved.yaml")  # the study recorded a spec that is no longer there
    assert check_world.main(["--world", "hidden", "--study", str(study)]) == 2
    assert run_worlds.main(["--worlds", "hidden", "--layout-only", "--out", str(study)]) == 2
    for err in capsys.readouterr().err.strip().splitlines():
        assert err.startswith(("check_world: error: ", "run_worlds: error: ")) and "hidden.yaml" in err


def _laid_out_as_new(tmp_path, bundled: str, name: str):
    """A bundled world copied under a new name (spec, models, problems) and laid out by ``run_worlds.py --spec``
    into ``tmp_path/study``, as a user adds their own world; returns the run_worlds module."""
    import shutil

    sys.path.insert(0, str(REPO))
    from benchmarks.validity.worlds import run_worlds

    spec = tmp_path / f"{name}.yaml"
    spec.write_text((WORLDS / f"{bundled}.yaml").read_text().replace(f"name: {bundled}", f"name: {name}"))
    for d in ("models", "problems"):
        shutil.copytree(WORLDS / bundled / d, tmp_path / name / d)
    assert run_worlds.main(["--spec", str(spec), "--layout-only", "--out", str(tmp_path / "study")]) == 0
    return run_worlds


def test_a_new_world_with_a_second_skill_is_measured_for_forgetting_on_it(tmp_path):
    """As the plan's forgetting world: run_worlds.py --spec takes a student's second skill as the forgetting set;
    a world without one keeps the task's easy levels (the test above)."""
    _laid_out_as_new(tmp_path, "forgetting", "skilled")
    stored = (tmp_path / "skilled" / "problems" / "second_skill.jsonl").read_text().splitlines()
    written = (tmp_path / "study" / "skilled" / "data" / "regression.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in written] == [json.loads(x) for x in stored[:96]]


def test_a_new_world_with_its_own_context_is_taught_by_it_as_rule_vs_instance2_is(tmp_path):
    """A spec with its own context (a rule) gets the configurations the plan gives rule_vs_instance2's rule: the
    student shown it and the external teacher shown it, each trained with its methods, and the diagnosis renders
    the rule's own text."""
    run_worlds = _laid_out_as_new(tmp_path, "rule_vs_instance2", "ruled")
    plans = run_worlds.load_study(tmp_path / "study")
    ours, theirs = (run_worlds.resolve(plans, w) for w in ("ruled", "rule_vs_instance2"))
    assert [c["name"] for c in ours["configurations"]] == [c["name"] for c in theirs["configurations"]]
    assert {"self_rule", "teacher_rule"} <= {c["name"] for c in ours["configurations"]}
    trained = sorted(p.name for p in (tmp_path / "study" / "ruled" / "configs" / "train").glob("*.yaml"))
    assert any(n.startswith("self_rule__") for n in trained) and any(n.startswith("teacher_rule__") for n in trained)
    diag = (tmp_path / "study" / "ruled" / "configs" / "diag.main.yaml").read_text()
    assert "a product with 6, 7, 8 or 9 is the plain product mod 10" in diag


@pytest.mark.parametrize("seed, k", [(0, 5), (1, 3), (2, 20)])
def test_teachability_and_topk_overlap_against_float64_loops(seed, k):
    """The product's formula (core.signals.topk_compat), which compat.py uses, against explicit loops."""
    sys.path.insert(0, str(REPO))
    import torch

    from benchmarks.validity.worlds.compat import compat_columns
    from opsd_diag.core.signals import topk_compat

    g = torch.Generator().manual_seed(seed)
    n, vocab = 7, 11
    logp = torch.log_softmax(torch.randn(n, vocab, generator=g) * 3, -1)
    logq = torch.log_softmax(torch.randn(n, vocab, generator=g) * 3, -1)
    got = topk_compat(logp, logq, k)
    bench = compat_columns(logp, logq, k)
    assert all(torch.equal(got[c], bench[c]) for c in ("teachability", "topk_overlap"))  # one formula
    kk = min(k, vocab)
    for i in range(n):
        p = [float(x) for x in logp[i].double()]
        q = [float(x) for x in logq[i].double()]
        top_p = sorted(range(vocab), key=lambda v: (-p[v], v))[:kk]
        top_q = sorted(range(vocab), key=lambda v: (-q[v], v))[:kk]
        teach = sum(math.exp(q[v]) for v in top_p)
        assert abs(float(got["teachability"][i]) - teach) < 1e-5
        assert float(got["topk_overlap"][i]) == pytest.approx(len(set(top_p) & set(top_q)) / kk, abs=1e-7)
    same = topk_compat(logp, logp, k)  # a teacher equal to the student: full overlap, its own top-k mass
    assert torch.allclose(same["topk_overlap"], torch.ones(n))
    assert torch.allclose(same["teachability"], logp.exp().topk(kk, -1).values.sum(-1))


@pytest.mark.slow
def test_compat_reads_the_diagnosis_columns_and_recomputes_them_for_an_older_run(ci_zoo, problems_file, tmp_path):
    """compat.json from the token table of a new run equals the recomputation from the run's models (the path
    for a run written before the columns existed, simulated by dropping them), and the summary's means."""
    sys.path.insert(0, str(REPO))
    import numpy as np
    import pyarrow.parquet as pq
    from conftest import tiny_config

    from benchmarks.validity.worlds import compat
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict
    from opsd_diag.run import Run

    diag = tmp_path / "diag"
    run_diagnosis(from_dict(tiny_config(ci_zoo, problems_file)), diag, show_progress=False)
    assert compat.main(["--diag", str(diag)]) == 0
    read = json.loads((diag / "compat.json").read_text())
    tokens = Run.load(diag).tokens
    summary = json.loads((diag / "summary.json").read_text())
    assert set(read) == {"teacher", "self_full"}
    for name, entry in read.items():
        rows = tokens[tokens["config"] == name]
        assert entry["n_tokens"] == len(rows) > 0 and entry["k"] == compat.K == 5
        for c in compat.COLUMNS:
            assert np.isfinite(rows[c]).all()
            assert entry[c] == pytest.approx(float(rows[c].astype(float).mean()), rel=1e-9)
            assert entry[c] == pytest.approx(summary["configs"][name]["overall"]["columns"][c]["mean"], rel=1e-6)
    # an older run: the same table without the two columns (its run id kept)
    table = pq.read_table(diag / "tokens.parquet")
    pq.write_table(table.drop_columns(list(compat.COLUMNS)), diag / "tokens.parquet")
    old = Run.load(diag).tokens
    assert old[list(compat.COLUMNS)].isna().all().all()  # it opens; the columns read as not measured
    assert compat.stored_compat(diag, Run.load(diag), list(read), compat.K) is None
    again = compat.run_compat(diag)
    for name in read:
        assert again[name]["n_tokens"] == read[name]["n_tokens"] and again[name]["k"] == 5
        for c in compat.COLUMNS:
            assert again[name][c] == pytest.approx(read[name][c], rel=1e-5, abs=1e-6), (name, c)
