"""The bad-input corpus of `opsd-diag zoo build` and `rebuild_check`: world specs that cannot build, build
reports that cannot be trusted, and folders a build must not write (beside tests/test_bad_inputs.py, with
its row type and file-tree hash).

Every row ends in exit status 2 with exactly one `PROG: error: ...` line that contains the row's `expect`,
no traceback, and nothing changed: not the row's folder and not the shipped zoo and worlds
(`sample_data/models`, `sample_data/problems`, `sample_data/worlds` are hashed before and after the module).
Rows that name the shipped data run the real commands on the real repository; a full-size build, or any
build into `sample_data/`, fails the row before it starts (`no_real_build`). The rightly accepted inputs
(a ci build of the bundled spec written elsewhere, a rebuild into its own folder, `--replace`, the shipped
specs' own rebuilds) are the tests at the end.

To add a case, add one row to CASES: `make(env)` writes the row's inputs under `env.tmp` and returns argv.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from test_bad_inputs import Case, assert_one_error_line, diag, fifo, merge, tree

from opsd_diag import cli as diag_cli
from opsd_diag.zoo import build as zoo_build
from opsd_diag.zoo import guard, rebuild_check, stored, world

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_data"
WORLDS = SAMPLE / "worlds"
SHIPPED = [SAMPLE / "models", SAMPLE / "problems", WORLDS]
TINY = {"name": "tiny", "out": "m", "problems": "p"}  # the bundled world's settings under another name


def shipped_bytes() -> dict:
    return {str(p): tree(p) for p in SHIPPED}


@pytest.fixture(scope="module", autouse=True)
def shipped_data_untouched():
    """Nothing any row or test here does changes a byte of the shipped zoo and worlds."""
    before = shipped_bytes()
    yield
    assert shipped_bytes() == before, "the shipped zoo or a shipped world changed"


def _in_sample_data(path) -> bool:  # said independently of guard.shipped, which is what is tested
    return path is not None and os.path.realpath(path).startswith(os.path.realpath(SAMPLE) + os.sep)


@pytest.fixture(autouse=True)
def no_real_build(monkeypatch):
    """A row that gets past the checks may build a ci world into its own folder, nothing more."""
    real = zoo_build.build

    def build(out_dir, problems_dir=None, size="full", *args, **kw):
        assert size != "full", "a full-size build was started"
        assert not _in_sample_data(out_dir) and not _in_sample_data(problems_dir), "a build into sample_data/"
        return real(out_dir, problems_dir, size, *args, **kw)

    def refused(*args, **kw):
        raise AssertionError("rebuild_check started a rebuild")

    monkeypatch.setattr(zoo_build, "build", build)
    monkeypatch.setattr(rebuild_check, "build", refused)


# ------------------------------------------------------------------------------------------ inputs

@dataclass
class Env:
    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    def spec(self, over: dict | None = None, name: str = "w.yaml", base: dict | None = None) -> str:
        """A world spec: ``base`` (default TINY) with dotted keys of ``over`` set."""
        data = merge(TINY if base is None else base, {})
        for key, value in (over or {}).items():
            node = data
            *parents, last = key.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = value
        return self.file(name, yaml.safe_dump(data, sort_keys=False))

    def file(self, name: str, content: str | bytes) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def build_folder(self, name: str = "m", world_name: str = "tiny", holds: str = "models",
                     report: dict | None = None) -> Path:
        """A folder as a ci build of ``world_name`` leaves it (its marker, report and card; no weights)."""
        d = self.tmp / name
        d.mkdir(parents=True, exist_ok=True)
        (d / guard.MARKER).write_bytes(guard.marker(world_name, "ci", 0, holds))
        if holds == "models":
            (d / "build_report.json").write_text(json.dumps(good_report() if report is None else report))
            (d / "MODEL_CARD.md").write_text("# card\n")
            for role in ("base", "teacher", "student"):
                (d / role).mkdir(exist_ok=True)
        return d

    def victim(self) -> Path:
        path = self.tmp / "victim"
        path.mkdir(exist_ok=True)
        (path / "keep.txt").write_text("keep me")
        return path


def good_report(world_name: str = "tiny") -> dict:
    """A build report of the TINY world that --card-only accepts (every card row and level)."""
    cols = [f"level {lv}" for lv in (1, 2, 3, 4)] + ["all"]
    rows = world.World(name=world_name).card_rows()
    roles = ("base", "teacher", "student")
    return {"seed": 0, "size": "ci", "params": {r: 1000 for r in roles}, "steps": {r: 6 for r in roles},
            "final_loss": {r: 1.5 for r in roles}, "accuracy": {row: dict.fromkeys(cols, 0.5) for row in rows},
            "subset_accuracy": {row: dict.fromkeys(cols, 0.5) for row in rows}, "seconds": 3.0, "world": world_name}


def report_with(**change) -> dict:
    r = good_report()
    for key, value in change.items():
        node = r
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return r


DELETE = object()


def bad_spec(id: str, over: dict, expect: str, size: str = "ci", base: dict | None = None, **kw) -> Case:
    return diag(id, lambda e: ["zoo", "build", "--world", e.spec(over, base=base), "--size", size], expect, **kw)


def raw_spec(id: str, text: str, expect: str) -> Case:
    """A spec written as text (YAML 1.1 booleans, which yaml.safe_dump would quote)."""
    return diag(id, lambda e: ["zoo", "build", "--world", e.file("w.yaml", text), "--size", "ci"], expect)


def card_only(id: str, report: dict | str | None, expect: str, change=None) -> Case:
    """--card-only on a TINY build whose report is ``report`` (text as written), changed by ``change``."""
    def make(e: Env) -> list[str]:
        d = e.build_folder()
        if isinstance(report, str):
            (d / "build_report.json").write_text(report)
        elif report is not None:
            (d / "build_report.json").write_text(json.dumps(report))
        if change is not None:
            change(e, d)
        return ["zoo", "build", "--world", e.spec(), "--card-only"]
    return diag(id, make, expect)


def rc(id: str, make, expect: str) -> Case:
    return Case(id, "rebuild_check", make, expect)


def committed(e: Env, report: dict | None = None) -> str:
    """A TINY spec with a (fake) committed ci build: what rebuild_check checks before it rebuilds."""
    e.build_folder(report=report)
    return e.spec()


def link(path: Path, target: Path) -> str:
    path.symlink_to(target)
    return str(path)


def loop(e: Env) -> str:
    a, b = e.tmp / "loop_a", e.tmp / "loop_b"
    a.symlink_to(b)
    b.symlink_to(a)
    return str(a)


def small_memory(e: Env) -> Env:
    e.monkeypatch.setattr(guard, "machine_memory", lambda: 8 << 30)
    return e


CHAINS = str(WORLDS / "chains.yaml")
CAPACITY = str(WORLDS / "capacity.yaml")
BIG = {"hidden": 4096, "layers": 64, "heads": 32, "kv_heads": 8, "intermediate": 16384}
ONE_LEVEL = {"task.levels": {1: 1}, "task.ops": ["+"], "teacher.level_weights": {1: 1.0},
             "student.misconceptions": [{"op": "+", "operands": [8, 9]}]}
SPEC_TEXT = "name: tiny\nout: m\nproblems: p\n"

CASES: list[Case] = [
    # ------------------------------------------- builds never clobber: the shipped zoo and worlds
    diag("shipped-zoo-ci", lambda e: ["zoo", "build", "--world", CHAINS, "--size", "ci"],
         "is in the shipped sample_data/ folder, where only full-size builds go: a ci build"),
    diag("shipped-zoo-ci-default-folders", lambda e: (os.chdir(REPO), ["zoo", "build", "--size", "ci"])[1],
         "sample_data/models is in the shipped sample_data/ folder"),
    diag("shipped-world-ci", lambda e: ["zoo", "build", "--world", CAPACITY, "--size", "ci"],
         "worlds/capacity/models is in the shipped sample_data/ folder"),
    diag("shipped-world-problems-ci", lambda e: ["zoo", "build", "--world", CAPACITY, "--out", str(e.tmp / "m"),
                                                 "--size", "ci"],
         "the problem splits folder"),
    diag("shipped-zoo-other-seed", lambda e: ["zoo", "build", "--world", CHAINS, "--seed", "3"],
         "built with the spec's seed 0: a build with --seed 3 goes elsewhere"),
    diag("shipped-zoo-other-world", lambda e: ["zoo", "build", "--world", e.spec({"out": str(SAMPLE / "models")})],
         "is shipped data holding the models of a build of the world 'chains': a build of the world 'tiny'"),
    diag("shipped-zoo-other-world-replace", lambda e: ["zoo", "build", "--world", e.spec({"out": str(SAMPLE / "models")}),
                                                       "--replace"],
         "never replaces it"),
    diag("shipped-world-into-the-zoo", lambda e: ["zoo", "build", "--world", CAPACITY, "--out", str(SAMPLE / "models"),
                                                  "--problems-dir", str(e.tmp / "p")],
         "holding the models of a build of the world 'chains': a build of the world 'capacity'"),
    diag("shipped-zoo-by-a-changed-spec", lambda e: [
        "zoo", "build", "--world", e.spec({"out": str(SAMPLE / "models"), "problems": str(SAMPLE / "problems"),
                                           "student.steps": 5}, base={"name": "chains"})],
         "which only its own spec"),
    diag("shipped-new-folder-ci", lambda e: ["zoo", "build", "--world",
                                             e.spec({"out": str(WORLDS / "tiny_new" / "models")}), "--size", "ci"],
         "where only full-size builds go"),
    diag("shipped-zoo-through-a-link", lambda e: ["zoo", "build", "--out", link(e.tmp / "zoo", SAMPLE / "models"),
                                                  "--problems-dir", str(e.tmp / "p")],
         "is a symbolic link: a build never writes through one"),
    diag("shipped-card-by-another-world", lambda e: ["zoo", "build", "--world", CAPACITY, "--out", str(SAMPLE / "models"),
                                                     "--card-only"],
         "is shipped data holding the models of a build of the world 'chains'"),
    diag("shipped-card-by-a-changed-spec", lambda e: [
        "zoo", "build", "--world", e.spec({"out": str(SAMPLE / "models"), "student.steps": 5}, base={"name": "chains"}),
        "--card-only"],
         "whose card only its own spec"),
    # ------------------------------------------- builds never clobber: other folders
    diag("out-a-folder-of-the-users", lambda e: (e.file("mine/notes.txt", "mine"),
                                                 ["zoo", "build", "--world", e.spec({"out": "mine"}), "--size", "ci"])[1],
         "holds no build marker (zoo_build.json), not the models of an earlier build of the world 'tiny'"),
    diag("problems-a-folder-of-the-users", lambda e: (e.file("p/train.jsonl", "{}\n"),
                                                      ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "the problem splits folder"),
    diag("out-another-worlds-build", lambda e: (e.build_folder(world_name="capacity"),
                                                ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "holds the models of a build of the world 'capacity', not the models of an earlier build of the world 'tiny'"),
    diag("out-a-problems-folder", lambda e: (e.build_folder(holds="problems"),
                                             ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "holds the problems of a build of the world 'tiny', not the models of an earlier build"),
    diag("out-marker-not-json", lambda e: (e.file("m/zoo_build.json", "{not json"),
                                           ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "holds no build marker"),
    diag("out-a-link-to-its-own-build", lambda e: (e.build_folder("own"), link(e.tmp / "m", e.tmp / "own"),
                                                   ["zoo", "build", "--world", e.spec(), "--size", "ci"])[2],
         "is a symbolic link"),
    diag("out-a-link-with-replace", lambda e: (link(e.tmp / "m", e.victim()),
                                               ["zoo", "build", "--world", e.spec(), "--size", "ci", "--replace"])[1],
         "is a symbolic link"),
    diag("out-a-model-folder-is-a-link", lambda e: (shutil.rmtree(e.build_folder() / "base"),
                                                    link(e.tmp / "m" / "base", e.victim()),
                                                    ["zoo", "build", "--world", e.spec(), "--size", "ci"])[2],
         "m/base is a symbolic link: a build never writes through or over it"),
    diag("out-the-card-is-a-fifo", lambda e: (fifo(e.build_folder() / "MODEL_CARD.md"),
                                              ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "MODEL_CARD.md is a named pipe (FIFO): a build never writes"),
    diag("problems-a-split-is-a-link", lambda e: (link(e.build_folder("p", holds="problems") / "train.jsonl",
                                                       Path(e.file("victim.jsonl", "{}\n"))),
                                                  ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "train.jsonl is a symbolic link"),
    diag("out-is-a-file", lambda e: (e.file("m", "x"), ["zoo", "build", "--world", e.spec(), "--size", "ci"])[1],
         "is a file, not a folder"),
    diag("out-inside-another-build", lambda e: (e.build_folder("own"),
                                                ["zoo", "build", "--world", e.spec({"out": "own/sub"}), "--size", "ci"])[1],
         "lies inside the build folder"),
    diag("out-inside-a-run", lambda e: (e.file("run/manifest.json", "{}"),
                                        ["zoo", "build", "--world", e.spec({"out": "run/models"}), "--size", "ci"])[1],
         "lies inside the run directory"),
    diag("out-and-problems-the-same", lambda e: ["zoo", "build", "--world", e.spec({"problems": "m"}), "--size", "ci"],
         "overlap (the same folder, or one inside the other)"),
    diag("problems-inside-out", lambda e: ["zoo", "build", "--world", e.spec({"problems": "m/p"}), "--size", "ci"],
         "overlap"),
    diag("out-a-link-loop", lambda e: ["zoo", "build", "--out", loop(e), "--problems-dir", "", "--size", "ci"],
         "goes through a loop of symbolic links"),
    diag("world-spec-missing", lambda e: ["zoo", "build", "--world", str(e.tmp / "nope.yaml")], "not found"),
    # ------------------------------------------- the spec, checked before anything is built
    bad_spec("spec-unknown-key-points-at-its-doc", {"student.shap": 1},
             "student.shap: unknown key (check its spelling against docs/worlds.md)"),
    bad_spec("spec-head-size-odd", {"student.shape": {"hidden": 36, "layers": 1, "heads": 4, "kv_heads": 2,
                                                      "intermediate": 64}},
             "student.shape: the head size hidden / heads = 9 is odd"),
    bad_spec("spec-base-head-size-odd", {"base.shape": {"hidden": 18, "layers": 1, "heads": 2, "kv_heads": 1,
                                                        "intermediate": 64}},
             "base.shape: the head size hidden / heads = 9 is odd"),
    bad_spec("spec-shape-beyond-bounds", {"student.shape.hidden": 100_000}, "student.shape.hidden: Input should be "
             "less than or equal to 4096"),
    diag("spec-memory-cannot-fit", lambda e: ["zoo", "build", "--world", small_memory(e).spec({"base.shape": BIG})],
         "base.shape, student.shape and training.batch of the world 'tiny': a full-size build trains with about"),
    bad_spec("spec-seed-negative", {"seed": -1}, "seed: Input should be greater than or equal to 0"),
    bad_spec("spec-seed-too-big", {"seed": 2 ** 32}, "seed: Input should be less than 4294967296"),
    bad_spec("spec-split-seed-negative", {"task.splits": {"test": [400, -5], "dev": [200, 1002],
                                                          "train": [2000, 1003]}}, "task.splits.test.1"),
    bad_spec("spec-pool-seed-too-big", {"task.pool_seed": 2 ** 40}, "task.pool_seed: Input should be less than"),
    bad_spec("spec-second-skill-seed-negative", {"student.second_skill": {"seed": -1}}, "student.second_skill.seed"),
    diag("cli-seed-negative", lambda e: ["zoo", "build", "--world", e.spec(), "--size", "ci", "--seed", "-1"],
         "invalid --seed -1: use a whole number from 0 to 4294967295"),
    diag("cli-seed-too-big", lambda e: ["zoo", "build", "--world", e.spec(), "--size", "ci", "--seed", str(2 ** 32)],
         "invalid --seed 4294967296"),
    bad_spec("spec-level-weights-sum-to-0", {"teacher.level_weights": {1: 0, 2: 0, 3: 0, 4: 0}},
             "teacher.level_weights sum to 0"),
    bad_spec("spec-second-skill-too-few-strings", {"student.second_skill": {"lengths": [1]}},
             "student.second_skill.lengths: lengths [1] make only 10 distinct digit strings"),
    bad_spec("spec-second-skill-test-too-large", {"student.second_skill": {"lengths": [2, 3], "test": 10_000}},
             "make only 1100 distinct digit strings"),
    bad_spec("spec-survives-a-context-never-used", {"student.misconceptions": [{"op": "*", "survives": ["hint"]}]},
             "student.misconceptions.0.survives: the student never uses hint"),
    bad_spec("spec-uses-a-context-never-seen", {"contexts": {"rule": "{prompt} Rule: mind the products."},
                                                "student.uses": {"rule": 0.5}},
             "student.uses names rule, which the student never sees"),
    bad_spec("spec-teacher-survives", {"teacher.misconceptions": [{"op": "*", "survives": ["hint"]}]},
             "teacher.misconceptions: survives applies to the student's misconceptions only"),
    raw_spec("spec-yes-for-steps", SPEC_TEXT + "student: {steps: yes}\n",
             "student.steps: Input should be a valid integer, got the boolean true"),
    raw_spec("spec-on-for-a-share", SPEC_TEXT + "student: {fact_pages: on}\n", "student.fact_pages: Input should be "
             "a valid number, got the boolean true"),
    raw_spec("spec-off-for-lr", SPEC_TEXT + "training: {lr: off}\n", "training.lr: Input should be a valid number, "
             "got the boolean false"),
    raw_spec("spec-yes-for-a-split-count", SPEC_TEXT + "task: {splits: {test: [yes, 1001], dev: [200, 1002], "
             "train: [2000, 1003]}}\n", "task.splits.test.0: Input should be a valid integer, got the boolean true"),
    raw_spec("spec-no-for-a-level", SPEC_TEXT + "task: {levels: {no: 1}}\n", "got the boolean false"),
    raw_spec("spec-quoted-number-for-steps", SPEC_TEXT + "student: {steps: '3000'}\n",
             "student.steps: Input should be a valid integer"),
    bad_spec("spec-name-too-long", {"name": "a" * 41}, "(41 characters): a name is 1 to 40 lower-case letters"),
    bad_spec("spec-context-name-too-long", {"contexts": {"r" * 60: "{prompt} x"}}, "(60 characters): a name is 1 to 40"),
    bad_spec("spec-card-label-with-a-pipe", {"card_contexts": {"a | b": ["full_solution", 1.0]}}, "without '|'"),
    bad_spec("spec-card-label-too-long", {"card_contexts": {"x" * 61: ["full_solution", 1.0]}},
             "(61 characters): write one line of 1 to 60 characters"),
    bad_spec("spec-expect-what-two-lines", {"expect": [{"what": "a\nb", "value": "accuracy:student", "at_least": 0.1}]},
             "expect.0.what"),
    bad_spec("spec-out-with-a-nul", {"out": "m\0x"}, "contains a NUL character"),
    bad_spec("spec-out-name-too-long", {"out": "n" * 300}, "over the file system's limit of 255 per name"),
    # ------------------------------------------- problem generation always ends
    bad_spec("spec-splits-beyond-the-distinct-problems", {**ONE_LEVEL, "task.pool": 10},
             "task.splits: the levels (1: 1) and ops (+) make only 90 distinct problems, fewer than test + dev + "
             "train = 2600"),
    bad_spec("spec-pool-beyond-the-distinct-problems", {**ONE_LEVEL, "task.levels": {1: 2}, "task.pool": 5000,
                                                       "task.splits": {"test": [10, 1], "dev": [10, 2],
                                                                       "train": [10, 3]}},
             "task.pool: the levels (1: 2) and ops (+) make only 810 distinct problems, fewer than test + dev + pool"),
    bad_spec("spec-a-level-left-without-training-problems",
             {**ONE_LEVEL, "task.levels": {1: 1, 2: 3}, "teacher.level_weights": {1: 0.5, 2: 0.5}, "task.pool": 1000,
              "task.splits": {"test": [4000, 1001], "dev": [100, 1002], "train": [100, 1003]}},
             "task.levels: level 1 (1 operation) has no training problem left"),
    # ------------------------------------------- --card-only: its folder and its stored report
    diag("card-only-no-build", lambda e: ["zoo", "build", "--world", e.spec(), "--card-only"],
         "does not exist or is not a folder: build the world first"),
    diag("card-only-another-worlds-build", lambda e: (e.build_folder(world_name="other"),
                                                      ["zoo", "build", "--world", e.spec(), "--card-only"])[1],
         "holds the models of a build of the world 'other'"),
    card_only("card-only-report-not-json", "{not json", "is not a JSON build report"),
    card_only("card-only-report-a-list", "[]", "holds a JSON list, not a build report"),
    card_only("card-only-report-missing", None, "no build report", change=lambda e, d: (d / "build_report.json").unlink()),
    card_only("card-only-report-accuracy-above-1", report_with(**{"accuracy.student.all": 1.5}),
              "accuracy.student.all: Input should be less than or equal to 1"),
    card_only("card-only-report-nan-loss", json.dumps(good_report()).replace('"base": 1.5', '"base": NaN'),
              "final_loss.base: Input should be a finite number"),
    card_only("card-only-report-unknown-size", report_with(size="huge"), "size: Input should be 'full' or 'ci'"),
    card_only("card-only-report-seed-text", report_with(seed="0"), "seed: Input should be a valid integer"),
    card_only("card-only-report-unknown-key", report_with(extra=1), "extra: unknown key"),
    card_only("card-only-report-missing-model", report_with(**{"params.teacher": DELETE}), "params lacks teacher"),
    card_only("card-only-report-missing-row", report_with(**{"accuracy.student + full solution": DELETE}),
              "accuracy lacks the row(s) student + full solution"),
    card_only("card-only-report-missing-level", report_with(**{"subset_accuracy.teacher": {"all": 0.5}}),
              "subset_accuracy.teacher lacks level 1, level 2, level 3, level 4"),
    card_only("card-only-report-of-another-world", report_with(world="capacity"),
              "is the build report of the world 'capacity', not of the world 'tiny'"),
    card_only("card-only-report-deep", "[" * 5000 + "]" * 5000, "nests deeper than"),
    card_only("card-only-report-a-link", None, "is a symbolic link: a build's report is read from its own folder only",
              change=lambda e, d: ((d / "build_report.json").rename(e.tmp / "r.json"),
                                   link(d / "build_report.json", e.tmp / "r.json"))),
    card_only("card-only-report-a-fifo", None, "named pipe", change=lambda e, d: fifo(d / "build_report.json")),
    card_only("card-only-card-a-link", None, "MODEL_CARD.md is a symbolic link",
              change=lambda e, d: ((d / "MODEL_CARD.md").unlink(),
                                   link(d / "MODEL_CARD.md", Path(e.file("victim.md", "keep me"))))),
    # ------------------------------------------- rebuild_check: its committed report and --write
    rc("rebuild-check-report-damaged", lambda e: ["--world", committed(e, report_with(**{"accuracy.base.all": -1}))],
       "accuracy.base.all: Input should be greater than or equal to 0"),
    rc("rebuild-check-no-committed-build", lambda e: ["--world", e.spec()], "no committed build at"),
    rc("rebuild-check-record-another-world", lambda e: ["--world", committed(e), "--record"],
       "writes into the bundled zoo's card only"),
    rc("rebuild-check-write-over-a-file", lambda e: ["--world", committed(e), "--write", e.file("notes.md", "mine")],
       "is not an earlier rebuild record"),
    rc("rebuild-check-write-into-a-build", lambda e: ["--world", committed(e), "--write", str(e.tmp / "m" / "r.md")],
       "lies in the build folder"),
    rc("rebuild-check-write-through-a-link", lambda e: ["--world", committed(e), "--write",
                                                        link(e.tmp / "r.md", Path(e.file("victim.md", "keep me")))],
       "is a symbolic link"),
    rc("rebuild-check-write-no-folder", lambda e: ["--world", committed(e), "--write", str(e.tmp / "nowhere" / "r.md")],
       "no folder"),
    rc("rebuild-check-write-into-the-shipped-zoo", lambda e: ["--world", CHAINS, "--write",
                                                               str(SAMPLE / "models" / "r.md")],
       "lies in the build folder"),
    rc("rebuild-check-bad-spec", lambda e: ["--world", e.spec({"seed": -1})], "seed: Input should be greater"),
    rc("rebuild-check-unknown-option", lambda e: ["--wrtie", "x"], "unrecognized arguments: --wrtie"),
]

MAINS = {"opsd-diag": diag_cli.main, "rebuild_check": rebuild_check.cli}


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default folder (sample_data/models here) would be a leftover
    return Env(tmp_path, monkeypatch)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_zoo_bad_input(case: Case, env: Env, capsys):
    argv = case.make(env)
    before = tree(env.tmp)
    code = MAINS[case.prog](argv)
    out, err = capsys.readouterr()
    assert_one_error_line(code, out, err, case.prog, case.expect)
    assert tree(env.tmp) == before, "a refused build left files behind or changed the folder"


def test_the_corpus_covers_every_class_and_its_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 80
    for prefix in ("shipped-", "out-", "problems-", "spec-", "cli-seed", "card-only-", "rebuild-check-"):
        assert any(i.startswith(prefix) for i in ids), prefix


# ------------------------------------------------------------------------------------ rightly accepted

@pytest.mark.parametrize("spec", sorted(WORLDS.glob("*.yaml")), ids=lambda p: p.stem)
def test_each_shipped_spec_may_rebuild_its_own_folders_and_its_report_is_valid(spec, monkeypatch):
    """`make zoo` and `zoo build --world sample_data/worlds/W.yaml` (full size, the spec's seed) pass every
    check, on a machine of 8 GiB too; so do `rebuild_check` and `--card-only` on the committed reports."""
    monkeypatch.setattr(guard, "machine_memory", lambda: 8 << 30)
    w = world.load(spec)
    models, problems = world.folders(w, spec)
    guard.check_build(w, models, problems, "full", None)
    guard.check_build(w, models, problems, "full", w.seed)
    guard.check_card(w, models)
    report = stored.read_report(models, w)
    assert report["size"] == "full" and report["seed"] == w.seed
    assert guard.read_marker(models)["world"] == guard.read_marker(problems)["world"] == w.name
    if w.is_bundled():  # the Makefile's command: no --world, the bundled defaults
        guard.check_build(world.World(), SAMPLE / "models", SAMPLE / "problems", "full", 0)


@pytest.mark.slow  # three ci builds (seconds each, more beside other work)
def test_a_build_writes_elsewhere_replaces_its_own_build_and_replaces_a_users_folder_only_when_asked(tmp_path, capsys):
    m, p = tmp_path / "m", tmp_path / "p"
    argv = ["zoo", "build", "--world", CHAINS, "--size", "ci", "--out", str(m), "--problems-dir", str(p)]
    assert diag_cli.main(argv) == 0  # the bundled spec at the smoke size, written elsewhere
    assert json.loads((m / guard.MARKER).read_text()) == {"written_by": "opsd-diag zoo build", "world": "chains",
                                                         "size": "ci", "seed": 0, "holds": "models"}
    assert guard.read_marker(p)["holds"] == "problems" and (p / "test.jsonl").is_file()
    weights = (m / "student" / "model.safetensors").read_bytes()
    assert diag_cli.main(argv) == 0  # its own earlier build: replaced
    assert (m / "student" / "model.safetensors").read_bytes() == weights
    card = (m / "MODEL_CARD.md").read_bytes()
    assert diag_cli.main(["zoo", "build", "--world", CHAINS, "--out", str(m), "--card-only"]) == 0
    assert (m / "MODEL_CARD.md").read_bytes() == card
    assert not [q for q in tmp_path.rglob("*") if q.name.startswith((".old-", ".zoo-build-"))]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    spec = tmp_path / "w.yaml"
    spec.write_text(yaml.safe_dump({"name": "tiny", "out": "mine", "problems": "tp"}))
    capsys.readouterr()
    assert diag_cli.main(["zoo", "build", "--world", str(spec), "--size", "ci"]) == 2
    assert "pass --replace" in capsys.readouterr().err
    assert diag_cli.main(["zoo", "build", "--world", str(spec), "--size", "ci", "--replace"]) == 0
    assert (mine / "notes.txt").read_text() == "mine"  # only the build's own names are replaced
    assert guard.read_marker(mine)["world"] == "tiny" and (mine / "student" / "model.safetensors").is_file()


def test_the_world_reference_lists_every_key():
    text = (REPO / "docs" / "worlds.md").read_text(encoding="utf-8")
    sections = {"": world.World, "task.": world.Task, "student.": world.Student, "teacher.": world.Teacher,
                "base.": world.Base, "training.": world.Training, "student.shape.": world.Shape,
                "student.misconceptions[].": world.Misconception, "student.second_skill.": world.SecondSkill,
                "expect[].": world.Expect}
    for prefix, model in sections.items():
        for name in model.model_fields:
            assert f"| `{prefix}{name}` |" in text, f"{prefix}{name} missing from docs/worlds.md"


def test_card_only_renders_a_copy_of_the_shipped_card_byte_for_byte_keeping_its_rebuild_record(tmp_path):
    """`--card-only` rewrites the card from the report and the spec; `rebuild_check --record`'s section stays."""
    models = tmp_path / "models"
    shutil.copytree(SAMPLE / "models", models)
    card = (models / "MODEL_CARD.md").read_bytes()
    assert b"## Rebuild check" in card
    (models / "MODEL_CARD.md").write_text("# stale\n\n## Rebuild check" + card.decode().split("## Rebuild check", 1)[1])
    assert diag_cli.main(["zoo", "build", "--out", str(models), "--card-only"]) == 0
    assert (models / "MODEL_CARD.md").read_bytes() == card
