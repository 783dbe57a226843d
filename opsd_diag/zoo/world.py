"""A world spec: everything that decides a toy world's models, read from one YAML file.

``opsd-diag zoo build --world WORLD.yaml`` builds the world it describes. Every field is checked
here (pydantic, unknown keys refused, numbers strict) and so is every combination that could not
build (an odd head size, too few distinct problems, a context the student never uses...), so a bad
spec is one clear error naming the key before anything is built. The defaults are today's bundled
zoo: ``sample_data/worlds/chains.yaml`` only names them. Every key: docs/worlds.md (generated from
this module by docs/generate.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, Strict, ValidationError, model_validator

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, templates
from opsd_diag.config.spec import Strict as StrictModel
from opsd_diag.config.errors import format_error
from opsd_diag.config.yamlfile import read_mapping
from opsd_diag.zoo.effects import KINDS

DOC = "docs/worlds.md"
Op = Literal["+", "-", "*"]
# Numbers are strict (YAML's yes/no/on/off are booleans, never a count or a share); floats take integers.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Share = Annotated[float, Strict(), Field(ge=0.0, le=1.0)]
Weight = Annotated[float, Strict(), Field(ge=0.0)]
Seed = Annotated[int, Strict(), Field(ge=0, lt=2 ** 32)]  # numpy, torch and CUDA seed generators take 0 <= seed < 2**32
Steps = Annotated[int, Strict(), Field(gt=0, le=1_000_000)]
Count = Annotated[int, Strict(), Field(gt=0, le=100_000)]
NAME = r"[a-z][a-z0-9_]{0,39}"


def _name(v: str) -> str:
    if not re.fullmatch(NAME, v):
        raise ValueError(f"{v[:60]!r}{'...' if len(v) > 60 else ''} ({len(v)} characters): a name is 1 to 40 "
                         "lower-case letters, digits and '_', starting with a letter")
    return v


def _line(limit: int):
    def check(v: str) -> str:
        if not 1 <= len(v) <= limit or "|" in v or any(c in v for c in "\n\r"):
            raise ValueError(f"{v[:60]!r}{'...' if len(v) > 60 else ''} ({len(v)} characters): write one line of 1 to "
                             f"{limit} characters without '|' (it becomes a row of the card's Markdown tables)")
        return v
    return AfterValidator(check)


Name = Annotated[str, AfterValidator(_name)]
Label = Annotated[str, _line(60)]  # a row of the card's tables
SEQ = 256  # tokens of a long training example (a 10-step chain with its solution in context)
PAIRS = 9  # operands 1..9 for each operation
SECOND_POOL = {"full": 5000, "ci": 50}  # the second skill's training problems, by build size


class Spec(StrictModel):
    """The config's rules (unknown keys and non-finite numbers refused), with YAML lists read as the
    tuples below (strict types would refuse a list where a tuple is declared); numbers stay strict through
    the types above."""
    model_config = ConfigDict(**{**StrictModel.model_config, "strict": False})


class Shape(Spec):
    """A model's shape (Qwen3): hidden size, layers, attention heads, key/value heads, MLP width."""
    hidden: Annotated[int, Strict(), Field(gt=0, le=4096)] = Field(description="hidden size")
    layers: Annotated[int, Strict(), Field(gt=0, le=64)] = Field(description="transformer layers")
    heads: Annotated[int, Strict(), Field(gt=0, le=64)] = Field(description="attention heads")
    kv_heads: Annotated[int, Strict(), Field(gt=0, le=64)] = Field(description="key/value heads (grouped-query attention)")
    intermediate: Annotated[int, Strict(), Field(gt=0, le=16384)] = Field(description="MLP width")

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError("hidden must be a multiple of heads, and heads a multiple of kv_heads")
        if (self.hidden // self.heads) % 2:
            raise ValueError(f"the head size hidden / heads = {self.hidden // self.heads} is odd: rotary position "
                             "embeddings rotate pairs of dimensions, so choose hidden and heads that give an even one")
        return self

    def params(self, vocab: int) -> int:
        """Parameters of a Qwen3 model of this shape (tied embeddings), as ``zoo.build.new_model`` makes it."""
        h, head = self.hidden, self.hidden // self.heads
        attention = 2 * h * h + 2 * h * self.kv_heads * head + 2 * head  # q, o; k, v; q and k norms
        return vocab * h + h + self.layers * (attention + 3 * h * self.intermediate + 2 * h)

    def train_bytes(self, vocab: int, batch: int) -> int:
        """About the memory training this model takes: float32 weights, gradients and AdamW's two moments,
        plus one batch's saved activations (attention scores included) and logits."""
        per_token = self.layers * (10 * self.hidden + 3 * self.intermediate + 2 * self.heads * SEQ) + 3 * vocab
        return 16 * self.params(vocab) + 4 * batch * SEQ * per_token


class Misconception(Spec):
    """``op`` with one of ``operands`` comes out ``shift`` too high (mod 10), in a ``rate`` share of uses.

    ``survives``: world contexts the student uses that do not correct this one (a rule about another
    step); every other used context corrects it.
    """
    op: Op = Field("*", description="the operation it affects")
    operands: list[Annotated[int, Strict()]] = Field(default_factory=lambda: [8, 9], min_length=1, max_length=9,
                                                     description="the operands (digits 1..9) it affects")
    shift: Annotated[int, Strict(), Field(ge=-9, le=9)] = Field(1, description="how far off the result comes out (mod 10, not 0)")
    rate: Annotated[float, Strict(), Field(gt=0.0, le=1.0)] = Field(1.0, description="share of its uses that go wrong")
    survives: list[Name] = Field(default_factory=list, max_length=20,
                                 description="contexts of `student.uses` that do not correct it (student misconceptions only)")

    @model_validator(mode="after")
    def _digits(self):
        if any(not 1 <= a <= 9 for a in self.operands) or self.shift % 10 == 0:
            raise ValueError("operands must be digits 1..9 and shift must not be a multiple of 10")
        return self


class Task(Spec):
    """The problems: chains of single-digit operations mod 10, by difficulty level."""
    family: Literal["chains"] = Field("chains", description="the task family")
    levels: dict[Annotated[int, Strict(), Field(gt=0, le=99)], Annotated[int, Strict(), Field(gt=0)]] = Field(
        default_factory=lambda: {1: 1, 2: 2, 3: 4, 4: 6}, min_length=1, max_length=10,
        description="difficulty level -> operations in its chains (at most 10)")
    ops: list[Op] = Field(default_factory=lambda: ["+", "-", "*"], min_length=1, max_length=3,
                          description="the operations chains draw from")
    splits: dict[Literal["test", "dev", "train"], tuple[Count, Seed]] = Field(
        default_factory=lambda: {"test": (400, 1001), "dev": (200, 1002), "train": (2000, 1003)},
        description="split -> [problems, seed]; dev excludes test, train excludes both")
    pool: Annotated[int, Strict(), Field(gt=0, le=1_000_000)] = Field(
        20000, description="distinct training problems of the models (dev/test excluded)")
    pool_seed: Seed = Field(7, description="added to the world's seed to draw the pool")

    @model_validator(mode="after")
    def _fit(self):
        if max(self.levels.values()) > 10:
            raise ValueError("a chain has at most 10 operations (labels a..j)")
        if set(self.splits) != {"test", "dev", "train"}:
            raise ValueError("splits needs test, dev and train")
        return self

    def distinct(self) -> int:
        """How many distinct problems the levels and ops can make (levels of one length share them)."""
        return sum(10 * (PAIRS * len(set(self.ops))) ** n for n in set(self.levels.values()))


class SecondSkill(Spec):
    """A different task family the student masters and distillation never shows (forgetting check)."""
    family: Literal["reverse"] = Field("reverse", description="reversing digit strings")
    lengths: list[Annotated[int, Strict(), Field(gt=0, le=64)]] = Field(
        default_factory=lambda: [3, 4, 5], min_length=1, max_length=10, description="digit-string lengths, in turn")
    share: Share = Field(0.2, description="share of the student's training batches")
    test: Annotated[int, Strict(), Field(gt=0, le=10_000)] = Field(
        120, description="held-out problems written as second_skill.jsonl")
    seed: Seed = Field(2001, description="seed of the held-out problems (the training ones use seed + 1)")

    def distinct(self) -> int:
        return sum(10 ** n for n in set(self.lengths))


class Student(Spec):
    """The student: the smaller model, trained from scratch with its misconceptions and privileged context."""
    shape: Shape = Field(Shape(hidden=96, layers=3, heads=4, kv_heads=2, intermediate=256), description="its shape")
    steps: Steps = Field(3000, description="training steps")
    misconceptions: list[Misconception] = Field(default_factory=lambda: [Misconception()], max_length=20,
                                                description="what it gets wrong in the steps it works out itself")
    contexts: dict[Name, Weight] = Field(default_factory=lambda: {
        "none": 0.25, "full_solution": 0.35, "answer_only": 0.05, "partial_solution": 0.25, "hint": 0.1},
        max_length=50, description="context name (built-in or one of the world's `contexts`) -> share of its prompts")
    uses: dict[Name, Share] = Field(default_factory=dict, max_length=50, description=(
        "a context it sees (a key of `contexts`, e.g. a rule) -> how often it uses it to correct its own steps"))
    fact_pages: Share = Field(0.1, description="share of plain-text pages of single-step facts")
    second_skill: SecondSkill | None = Field(None, description="a second skill it masters (none: no second skill)")
    probe_steps: Steps | None = Field(None, description=(
        "the card's capacity probe: this many more SFT steps on correct solutions (none: no probe)"))


class Teacher(Spec):
    """The teacher: the base trained further on step-by-step solutions."""
    steps: Steps = Field(1100, description="training steps (after the base's)")
    level_weights: dict[Annotated[int, Strict(), Field(gt=0)], Weight] = Field(
        default_factory=lambda: {1: 0.1, 2: 0.3, 3: 0.3, 4: 0.3},
        description="task level -> weight of its problems in the teacher's batches (exactly the task's levels)")
    misconceptions: list[Misconception] = Field(default_factory=list, max_length=20,
                                                description="misconceptions of its own (`survives` not allowed)")


class Base(Spec):
    """The base: the larger model, trained from scratch on direct answers and fact pages (never a chain)."""
    shape: Shape = Field(Shape(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=384),
                         description="its shape, which the teacher shares")
    steps: Steps = Field(1000, description="training steps")
    fact_pages: Share = Field(0.4, description="share of plain-text pages of single-step facts")
    prefers: str | None = Field(None, min_length=1, max_length=200,
                                description="a preamble base and teacher write first (the style world)")


class Training(Spec):
    """Optimiser, tokenizer and evaluation settings shared by the three models."""
    batch: Annotated[int, Strict(), Field(gt=0, le=1024)] = Field(32, description="examples a step")
    lr: Annotated[float, Strict(), Field(gt=0.0, le=1.0)] = Field(3e-3, description="AdamW peak learning rate")
    vocab_size: Annotated[int, Strict(), Field(ge=300, le=4096)] = Field(512, description="tokenizer vocabulary")
    eval_per_level: Count = Field(100, description="test problems a level for the card's accuracy table")
    subset_per_level: Count = Field(10, description="the first ones of those that tests/test_zoo.py re-evaluates")
    max_new_tokens: Annotated[int, Strict(), Field(gt=0, le=512)] = Field(72, description="greedy decoding limit")
    pass_k_samples: Annotated[int, Strict(), Field(ge=0, le=64)] = Field(
        0, description="> 0: the card also gives sampled pass@1 / pass@4 from this many samples (0 or >= 4)")


class Expect(Spec):
    """A check the world's card must pass (``zoo/effects.py``): ``value - minus`` within the bounds."""
    what: Annotated[str, _line(120)] = Field(description="what it shows (one line, at most 120 characters)")
    value: str = Field(max_length=200, description="a quantity `KIND:ROW` of the card, e.g. `accuracy:student`")
    minus: str | None = Field(None, max_length=200, description="a quantity subtracted from `value`")
    at_least: Float | None = Field(None, description="lower bound (inclusive)")
    at_most: Float | None = Field(None, description="upper bound (inclusive)")

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
    """A toy world: its task, its three models and what its card must show."""
    name: Name = Field("chains", description="the world's name: 1 to 40 lower-case letters, digits and `_`")
    seed: Seed = Field(0, description="seed of the models and the training pool (`--seed` overrides it)")
    out: str | None = Field(None, max_length=1000,
                            description="models folder, relative to the spec file (none: `<name>/models`)")
    problems: str | None = Field(None, max_length=1000,
                                 description="problem splits folder, relative to the spec file (none: `<name>/problems`)")
    shows: str | None = Field(None, max_length=4000,
                              description="the card's \"what this world shows\": which rule of thumb misleads")
    expect: list[Expect] = Field(default_factory=list, max_length=50, description="pre-declared checks the card must pass")
    task: Task = Field(Task(), description="the problems")
    student: Student = Field(Student(), description="the student")
    teacher: Teacher = Field(Teacher(), description="the teacher")
    base: Base = Field(Base(), description="the base")
    training: Training = Field(Training(), description="optimiser, tokenizer and evaluation")
    contexts: dict[Name, Annotated[str, Field(max_length=4000)]] = Field(
        default_factory=dict, max_length=50, description="extra named context templates (with `{prompt}`)")
    card_contexts: dict[Label, tuple[Name, Annotated[float, Strict(), Field(gt=0.0, le=1.0)]]] = Field(
        default_factory=lambda: {"full solution": ("full_solution", 1.0), "final answer only": ("answer_only", 1.0),
                                 "first half of the solution": ("partial_solution", 0.5)}, max_length=20,
        description="card row label -> [context, partial fraction]: the student shown that context")

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
        if sum(self.teacher.level_weights.values()) <= 0:
            raise ValueError("teacher.level_weights sum to 0: give at least one level a positive weight")
        if 0 < self.training.pass_k_samples < 4:
            raise ValueError("training.pass_k_samples must be 0 (off) or at least 4 (pass@4 needs 4 samples)")
        ops = set(self.task.ops)
        if any(m.op not in ops for m in [*self.student.misconceptions, *self.teacher.misconceptions]):
            raise ValueError("a misconception's op must be one of task.ops")
        self._check_uses()
        self._check_generation()
        return self

    def _check_uses(self) -> None:
        """``uses`` and ``survives`` name contexts the student really sees and uses (else they do nothing)."""
        seen = {c for c, share in self.student.contexts.items() if share > 0}
        unseen = sorted(c for c in self.student.uses if c not in seen)
        if unseen:
            raise ValueError(f"student.uses names {', '.join(unseen)}, which the student never sees (no share in "
                             "student.contexts): give it a share there or remove it")
        used = {c for c, share in self.student.uses.items() if share > 0}
        for i, m in enumerate(self.student.misconceptions):
            idle = sorted(c for c in m.survives if c not in used)
            if idle:
                raise ValueError(f"student.misconceptions.{i}.survives: the student never uses {', '.join(idle)} to "
                                 "correct its steps (not in student.uses with a positive share): add it to "
                                 "student.uses or remove it")
        if any(m.survives for m in self.teacher.misconceptions):
            raise ValueError("teacher.misconceptions: survives applies to the student's misconceptions only (the "
                             "teacher uses no context to correct itself): remove it")

    def _check_generation(self) -> None:
        """Enough distinct problems for every split and pool, so drawing them always ends."""
        t = self.task
        n = {k: v[0] for k, v in t.splits.items()}
        have = t.distinct()
        levels = ", ".join(f"{k}: {v}" for k, v in t.levels.items())
        where = f"the levels ({levels}) and ops ({', '.join(t.ops)}) make only {have} distinct problems"
        if n["test"] + n["dev"] + n["train"] > have:
            raise ValueError(f"task.splits: {where}, fewer than test + dev + train = "
                             f"{n['test'] + n['dev'] + n['train']}: ask for fewer problems, longer chains or more ops")
        if n["test"] + n["dev"] + t.pool > have:
            raise ValueError(f"task.pool: {where}, fewer than test + dev + pool = {n['test'] + n['dev'] + t.pool}: "
                             "ask for a smaller pool, longer chains or more ops")
        skill = self.student.second_skill
        if skill is not None and skill.test + SECOND_POOL["full"] > skill.distinct():
            raise ValueError(f"student.second_skill.lengths: lengths {skill.lengths} make only {skill.distinct()} "
                             f"distinct digit strings, fewer than its test problems ({skill.test}) plus its "
                             f"{SECOND_POOL['full']} training ones: use longer lengths")

    def train_bytes(self) -> int:
        """About the memory a full-size build trains with: the base/teacher chain and the student side by side."""
        t = self.training
        return self.base.shape.train_bytes(t.vocab_size, t.batch) + self.student.shape.train_bytes(t.vocab_size, t.batch)

    def is_bundled(self) -> bool:
        """Is this the bundled zoo (every field the default; where it is written does not count)?"""
        return self.same_world(World())

    def same_world(self, other: World) -> bool:
        """Does ``other`` build the same models (every field equal but where they are written)?"""
        where = {"out", "problems"}
        return self.model_dump(exclude=where) == other.model_dump(exclude=where)

    def matches_spec_file(self, path: Path) -> bool:
        """Is this the world the spec file ``path`` describes (a shipped spec: only it rebuilds its build)?"""
        try:
            return Path(path).is_file() and self.same_world(load(path))
        except OpsdError:
            return False

    def card_rows(self) -> dict[str, tuple[str, str | None, float]]:
        """The rows of the card's accuracy tables: row -> (model, context, partial fraction)."""
        rows = {name: (name, None, 1.0) for name in ("base", "teacher", "student")}
        rows.update({f"student + {label}": ("student", ctx, frac) for label, (ctx, frac) in self.card_contexts.items()})
        return rows

    def template(self, context: str) -> str:
        """The template text of a context name (built-in or the world's own)."""
        return templates.resolve(self.contexts.get(context, context))


def load(path: str | Path) -> World:
    """Read and check a world spec; any mistake is one OpsdError naming the key (unknown keys point at
    docs/worlds.md, the spec's reference)."""
    data = read_mapping(path, "world spec", "name, task, student, teacher, base, ...")
    try:
        return World.model_validate(data)
    except ValidationError as e:
        raise OpsdError(format_error(e, str(path), doc=DOC)) from None


def folders(world: World, spec_path: Path) -> tuple[Path, Path]:
    """(models folder, problems folder) of a world, relative to its spec file."""
    root = Path(spec_path).resolve().parent
    for key in ("out", "problems"):
        if getattr(world, key):
            safe.check_path(root / getattr(world, key), f"{spec_path}: {key}")
    return (root / (world.out or f"{world.name}/models"), root / (world.problems or f"{world.name}/problems"))
