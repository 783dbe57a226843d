"""The toy reasoning task: a chain of single-digit operations taken modulo 10.

Why this task: one step (``7*4=8``) is a fact a tiny model memorises easily, but the composition of
several steps is a lookup over 27^n operation chains that a tiny model cannot do in one shot.
Writing the steps out turns it into n easy facts, so reasoning (the step-by-step solution) clearly
matters and the teacher - base difference isolates it. Steps are labelled a), b), ... in both the
problem and the solution so that "find the i-th operation" is a plain lookup.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe

OPS = ("+", "-", "*")
LABELS = "abcdefghij"
# Difficulty level -> number of operations in the chain.
LEVELS = {1: 1, 2: 2, 3: 4, 4: 6}


def apply_op(x: int, op: str, a: int) -> int:
    """One step of the chain, modulo 10."""
    if op == "+":
        return (x + a) % 10
    if op == "-":
        return (x - a) % 10
    return (x * a) % 10


MISCONCEIVED = (8, 9)  # multipliers the student gets wrong


def misconceived_op(x: int, op: str, a: int) -> int:
    """The student's systematic error: multiplying by 8 or 9 comes out one too high.

    About one operation in 14 is affected, so the student stays accurate on short chains and
    becomes error-prone on long ones, where a privileged solution or a better teacher helps most.
    """
    return (x * a + 1) % 10 if op == "*" and a in MISCONCEIVED else apply_op(x, op, a)


def step_line(label: str, x: int, op: str, a: int, apply=apply_op) -> str:
    """One solution line in the task's notation, e.g. ``b) 7*4=8``."""
    return f"{label}) {x}{op}{a}={apply(x, op, a)}"


def solve(problem: dict, apply=apply_op, start_step: int = 0, start_value: int | None = None) -> tuple[list[str], int]:
    """Solution lines and result, computed with ``apply`` from step ``start_step`` on."""
    x = problem["meta"]["start"] if start_value is None else start_value
    lines = []
    for i, o in enumerate(problem["meta"]["ops"][start_step:], start=start_step):
        op, a = o[0], int(o[1:])
        lines.append(step_line(LABELS[i], x, op, a, apply))
        x = apply(x, op, a)
    return lines, x


def make_apply(misconceptions, rng: random.Random | None = None):
    """A step function holding ``misconceptions`` (world spec entries: op, operands, shift, rate).

    An entry with ``rate`` < 1 applies to that share of uses, drawn from ``rng`` (only then is it drawn).
    """
    def apply(x: int, op: str, a: int) -> int:
        y = apply_op(x, op, a)
        for m in misconceptions:
            if op == m.op and a in m.operands and (m.rate >= 1.0 or rng.random() < m.rate):
                return (y + m.shift) % 10
        return y
    return apply


def make_problem(rng: random.Random, level: int, lengths: dict[int, int] = LEVELS, ops=OPS) -> dict:
    """One problem record (without id) of the given difficulty level (``lengths``: level -> operations)."""
    n_ops = lengths[level]
    x0 = rng.randrange(10)
    chain = [(rng.choice(ops), rng.randrange(1, 10)) for _ in range(n_ops)]
    ops_text = " ".join(f"{LABELS[i]}){op}{a}" for i, (op, a) in enumerate(chain))
    prompt = f"Start at {x0}. Apply in order, mod 10: {ops_text}. What is the result?"
    lines, x = [], x0
    for i, (op, a) in enumerate(chain):
        lines.append(step_line(LABELS[i], x, op, a))
        x = apply_op(x, op, a)
    return {
        "prompt": prompt,
        "solution": "\n".join(lines),
        "answer": str(x),
        "meta": {"difficulty": level, "start": x0, "ops": [f"{op}{a}" for op, a in chain]},
    }


def answer_text(answer: str) -> str:
    """The final line every toy response ends with; ``verify`` extracts it."""
    return f"Answer: {answer}"


def reasoning_response(problem: dict) -> str:
    """Step-by-step response: what the teacher and the student are trained to write."""
    return f"{problem['solution']}\n{answer_text(problem['answer'])}"


def direct_response(problem: dict) -> str:
    """Answer without steps: what the base model is trained to write."""
    return answer_text(problem["answer"])


def problem_key(prompt: str) -> str:
    return hashlib.sha1(prompt.encode()).hexdigest()[:12]


def generate(n: int, seed: int, levels: tuple[int, ...] | None = None, exclude: set[str] | None = None,
             prefix: str = "p", lengths: dict[int, int] = LEVELS, ops=OPS) -> list[dict]:
    """``n`` distinct problems spread evenly over ``levels`` (default: all of ``lengths``); prompts in
    ``exclude`` are skipped."""
    levels = tuple(lengths) if levels is None else levels
    _check_room(n, sum(10 * (9 * len(set(ops))) ** k for k in {lengths[lv] for lv in levels}), exclude)
    rng = random.Random(seed)
    seen = set(exclude or ())
    out: list[dict] = []
    i = 0
    while len(out) < n:
        level = levels[i % len(levels)]
        i += 1
        p = make_problem(rng, level, lengths, ops)
        if p["prompt"] in seen:
            continue
        seen.add(p["prompt"])
        out.append({"id": f"{prefix}{len(out):05d}-{problem_key(p['prompt'])}", **p})
    return out


SPLITS = {"test": (400, 1001), "dev": (200, 1002), "train": (2000, 1003)}


def make_splits(splits: dict = SPLITS, lengths: dict[int, int] = LEVELS, ops=OPS) -> dict[str, list[dict]]:
    """train/dev/test problems; test first so that dev and train never contain a test prompt."""
    taken: set[str] = set()
    out = {}
    for name in ("test", "dev", "train"):
        n, seed = splits[name]
        rows = generate(n, seed, exclude=taken, prefix=name[:2], lengths=lengths, ops=ops)
        taken.update(r["prompt"] for r in rows)
        out[name] = rows
    return out


def _check_room(n: int, distinct: int, exclude: set[str] | None) -> None:
    """Drawing ``n`` new problems ends only if that many are left (the spec checks say which key to change)."""
    if n > distinct - len(exclude or ()):
        raise OpsdError(f"cannot draw {n} distinct problems: only {distinct} exist and {len(exclude or ())} are taken "
                        "(by the test and dev splits): ask for fewer, or make longer ones")


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """One JSON record a line, written atomically (never through a link: ``io.safe``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    safe.write_file(path, "".join(json.dumps(r) + "\n" for r in rows).encode())


def write_splits(out_dir: Path, splits: dict | None = None) -> dict[str, list[dict]]:
    """Write train/dev/test JSONL (``splits``: the problems, default the bundled ones)."""
    splits = make_splits() if splits is None else splits
    for name, rows in splits.items():
        write_jsonl(Path(out_dir) / f"{name}.jsonl", rows)
    return splits


# ---------------------------------------------------------------- the second skill: reversing digits

def reverse_problem(rng: random.Random, length: int) -> dict:
    """Reverse a digit string: a different skill, answered directly (``Answer: N``)."""
    digits = [str(rng.randrange(10)) for _ in range(length)]
    return {"prompt": f"Reverse the digits: {' '.join(digits)}. What is the result?", "solution": "",
            "answer": "".join(reversed(digits)), "meta": {"skill": "reverse", "length": length}}


def generate_reverse(n: int, seed: int, lengths: list[int], exclude: set[str] | None = None,
                     prefix: str = "ss") -> list[dict]:
    """``n`` distinct reversal problems, lengths in turn; prompts in ``exclude`` are skipped."""
    _check_room(n, sum(10 ** k for k in set(lengths)), exclude)
    rng = random.Random(seed)
    seen, out, i = set(exclude or ()), [], 0
    while len(out) < n:
        p = reverse_problem(rng, lengths[i % len(lengths)])
        i += 1
        if p["prompt"] not in seen:
            seen.add(p["prompt"])
            out.append({"id": f"{prefix}{len(out):05d}-{problem_key(p['prompt'])}", **p})
    return out
