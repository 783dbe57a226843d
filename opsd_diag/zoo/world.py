"""A world spec: everything that decides a toy world's models, read from one YAML file.

``opsd-diag zoo build --world WORLD.yaml`` builds the world it describes. Every field is checked
here (pydantic, unknown keys refused) so a bad spec is one clear error before anything is built.
The defaults are today's bundled zoo: ``sample_data/worlds/chains.yaml`` only names them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveInt, confloat, model_validator

from opsd_diag.errors import OpsdError
from opsd_diag.io import templates
from opsd_diag.io.config import Strict, validate
from opsd_diag.io.yamlfile import read_mapping
from opsd_diag.zoo.effects import KINDS

Op = Literal["+", "-", "*"]
Share = confloat(ge=0.0, le=1.0)
NAME = r"^[a-z][a-z0-9_]{0,39}$"



class Spec(Strict):
    """The config's rules (unknown keys and non-finite numbers refused), with YAML lists read as the
    tuples below (strict types would refuse a list where a tuple is declared)."""
    model_config = ConfigDict(**{**Strict.model_config, "strict": False})

class Shape(Spec):
    hidden: PositiveInt
    layers: PositiveInt
    heads: PositiveInt
    kv_heads: PositiveInt
    intermediate: PositiveInt

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must be a multiple of heads, and heads a multiple of kv_heads")
        return self


class Misconception(Spec):
    """``op`` with one of ``operands`` comes out ``shift`` too high (mod 10), in a ``rate`` share of uses.

    ``survives``: world contexts the student uses that do not correct this one (a rule about another
    step); every other used context corrects it.
    """
    op: Op = "*"
    operands: list[int] = Field(default_factory=lambda: [8, 9], min_length=1)
    shift: int = 1
    rate: confloat(gt=0.0, le=1.0) = 1.0
    survives: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _digits(self):
        if any(not 1 <= a <= 9 for a in self.operands) or self.shift % 10 == 0:
            raise ValueError("operands must be digits 1..9 and shift must not be a multiple of 10")
        return self


class Task(Spec):
    family: Literal["chains"] = "chains"
    levels: dict[PositiveInt, PositiveInt] = Field(default_factory=lambda: {1: 1, 2: 2, 3: 4, 4: 6}, min_length=1)
    ops: list[Op] = Field(default_factory=lambda: ["+", "-", "*"], min_length=1)
    splits: dict[Literal["test", "dev", "train"], tuple[PositiveInt, int]] = Field(
        default_factory=lambda: {"test": (400, 1001), "dev": (200, 1002), "train": (2000, 1003)})
    pool: PositiveInt = 20000        # distinct training problems of the zoo models (dev/test excluded)
    pool_seed: int = 7               # added to the world's seed

    @model_validator(mode="after")
    def _fit(self):
        if max(self.levels.values()) > 10:
            raise ValueError("a chain has at most 10 operations (labels a..j)")
        if set(self.splits) != {"test", "dev", "train"}:
            raise ValueError("splits needs test, dev and train")
        return self


class SecondSkill(Spec):
    """A different task family the student masters and distillation never shows (forgetting check)."""
    family: Literal["reverse"] = "reverse"
    lengths: list[PositiveInt] = Field(default_factory=lambda: [3, 4, 5], min_length=1)
    share: Share = 0.2               # share of the student's training batches
    test: PositiveInt = 120          # held-out problems written as second_skill.jsonl
    seed: int = 2001


class Student(Spec):
    shape: Shape = Shape(hidden=96, layers=3, heads=4, kv_heads=2, intermediate=256)
    steps: PositiveInt = 3000
    misconceptions: list[Misconception] = Field(default_factory=lambda: [Misconception()])
    # context name (built-in or one of the world's ``contexts``) -> share of the student's prompts
    contexts: dict[str, NonNegativeFloat] = Field(default_factory=lambda: {
        "none": 0.25, "full_solution": 0.35, "answer_only": 0.05, "partial_solution": 0.25, "hint": 0.1})
    # a world context (e.g. a rule) -> how often the student uses it to correct its own steps
    uses: dict[str, Share] = Field(default_factory=dict)
    fact_pages: Share = 0.1
    second_skill: SecondSkill | None = None
    probe_steps: PositiveInt | None = None  # the card's capacity probe: this many more SFT steps on correct solutions


class Teacher(Spec):
    steps: PositiveInt = 1100
    level_weights: dict[PositiveInt, NonNegativeFloat] = Field(
        default_factory=lambda: {1: 0.1, 2: 0.3, 3: 0.3, 4: 0.3})
    misconceptions: list[Misconception] = Field(default_factory=list)  # a teacher can hold its own


class Base(Spec):
    shape: Shape = Shape(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=384)  # the teacher's too
    steps: PositiveInt = 1000
    fact_pages: Share = 0.4
    prefers: str | None = Field(None, min_length=1, max_length=200)  # a preamble base and teacher write first


class Training(Spec):
    batch: PositiveInt = 32
    lr: confloat(gt=0.0, le=1.0) = 3e-3
    vocab_size: int = Field(512, ge=300, le=4096)
    eval_per_level: PositiveInt = 100
    subset_per_level: PositiveInt = 10
    max_new_tokens: PositiveInt = 72
    pass_k_samples: int = Field(0, ge=0, le=64)  # > 0: the card also gives sampled pass@1 / pass@4 from this many samples


class Expect(Spec):
    """A check the world's card must pass (``zoo/effects.py``): ``value - minus`` within the bounds."""
    what: str = Field(min_length=1, max_length=120)
    value: str
    minus: str | None = None
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _known(self):
        for name in filter(None, (self.value, self.minus)):
            kind, _, row = name.partition(":")
            if kind not in KINDS or (kind != "probe" and not row):
                raise ValueError(f"quantity {name!r}: write KIND:ROW with KIND one of {', '.join(KINDS)} "
                                 "(e.g. accuracy:student); probe takes no row")
        if self.at_least is None and self.at_most is None:
            raise ValueError("an expectation needs at_least or at_most")
        return self


class World(Spec):
    name: str = Field("chains", pattern=NAME)
    seed: int = 0
    out: str | None = None           # models folder, relative to the spec file (default <name>/models)
    problems: str | None = None      # problem splits folder (default <name>/problems)
    shows: str | None = None         # the card's "what this world shows": which rule of thumb misleads
    expect: list[Expect] = Field(default_factory=list)  # pre-declared checks the card must pass
    task: Task = Task()
    student: Student = Student()
    teacher: Teacher = Teacher()
    base: Base = Base()
    training: Training = Training()
    contexts: dict[str, str] = Field(default_factory=dict)  # extra named context templates
    card_contexts: dict[str, tuple[str, confloat(gt=0.0, le=1.0)]] = Field(default_factory=lambda: {
        "full solution": ("full_solution", 1.0), "final answer only": ("answer_only", 1.0),
        "first half of the solution": ("partial_solution", 0.5)})

    @model_validator(mode="after")
    def _consistent(self):
        for name, text in self.contexts.items():
            if name in templates.BUILTIN:
                raise ValueError(f"context {name!r} is a built-in name: choose another name")
            try:
                templates.resolve(text)
            except OpsdError as e:
                raise ValueError(f"context {name!r}: {e}") from None
        known = set(templates.BUILTIN) | set(self.contexts)
        named = [*self.student.contexts, *self.student.uses, *(c for c, _ in self.card_contexts.values()),
                 *(c for m in self.student.misconceptions for c in m.survives)]
        unknown = sorted({c for c in named if c not in known})
        if unknown:
            raise ValueError(f"unknown context(s) {', '.join(unknown)}: use a built-in "
                             f"({', '.join(templates.BUILTIN)}) or define it under contexts")
        if sum(self.student.contexts.values()) <= 0:
            raise ValueError("student.contexts needs a positive share")
        if set(self.teacher.level_weights) != set(self.task.levels):
            raise ValueError("teacher.level_weights must name exactly the task's levels")
        if 0 < self.training.pass_k_samples < 4:
            raise ValueError("training.pass_k_samples must be 0 (off) or at least 4 (pass@4 needs 4 samples)")
        ops = set(self.task.ops)
        if any(m.op not in ops for m in [*self.student.misconceptions, *self.teacher.misconceptions]):
            raise ValueError("a misconception's op must be one of task.ops")
        return self

    def is_bundled(self) -> bool:
        """Is this the bundled zoo (every field the default; where it is written does not count)?"""
        where = {"out", "problems"}
        return self.model_dump(exclude=where) == World().model_dump(exclude=where)

    def template(self, context: str) -> str:
        """The template text of a context name (built-in or the world's own)."""
        return templates.resolve(self.contexts.get(context, context))


def load(path: str | Path) -> World:
    """Read and check a world spec; any mistake is one OpsdError naming the key."""
    return validate(World, read_mapping(path, "world spec", "name, task, student, teacher, base, ..."), str(path))


def folders(world: World, spec_path: Path) -> tuple[Path, Path]:
    """(models folder, problems folder) of a world, relative to its spec file."""
    root = Path(spec_path).resolve().parent
    return (root / (world.out or f"{world.name}/models"), root / (world.problems or f"{world.name}/problems"))
