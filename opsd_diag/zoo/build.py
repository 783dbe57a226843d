"""Build the bundled toy world: tokenizer + three tiny Qwen3-shaped models, reproducibly on CPU.

- base:    knows the task's language (problems -> direct answers, single-step facts) but never
           chained steps; stands in for a teacher's "-Base" checkpoint.
- teacher: base further trained on step-by-step solutions.
- student: smaller, trained from scratch on solutions with a systematic misconception, most of
           the time with privileged context in its prompt (built-in templates), so it is
           error-prone alone on long chains but copies a shown solution.

Everything is built in a temporary sibling directory and swapped in at the end, so a failed or
interrupted build never touches existing models.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import random
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from opsd_diag.errors import OpsdError
from opsd_diag.io import templates
from opsd_diag.io.verify import is_correct
from opsd_diag.zoo import task
from opsd_diag.zoo.card import model_card
from opsd_diag.zoo.tokenizer import IM_END, train_tokenizer


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class BuildSize:
    """How big and how long; ``full`` is what ships, ``ci`` proves the pipeline in seconds."""
    big: ModelShape
    small: ModelShape
    base_steps: int
    teacher_steps: int
    student_steps: int
    batch: int
    eval_per_level: int
    lr: float = 3e-3


SIZES = {
    "full": BuildSize(big=ModelShape(128, 4, 4, 2, 384), small=ModelShape(96, 3, 4, 2, 256),
                      base_steps=1000, teacher_steps=1100, student_steps=3000, batch=32, eval_per_level=100),
    "ci": BuildSize(big=ModelShape(32, 2, 2, 1, 64), small=ModelShape(32, 1, 2, 1, 64),
                    base_steps=6, teacher_steps=6, student_steps=6, batch=8, eval_per_level=3),
}

# Contexts the student learns to use, with their share of its training prompts. A context in most
# prompts forces content-based lookup of the i-th step (with few, the student learns a positional
# lookup that a context in the prompt breaks, and a shown solution then makes it worse).
STUDENT_CONTEXTS = {"none": 0.25, "full_solution": 0.35, "answer_only": 0.05, "partial_solution": 0.25, "hint": 0.1}
# The teacher's draws per level: long chains need the most steps, one-step problems only a few.
TEACHER_LEVELS = {1: 0.1, 2: 0.3, 3: 0.3, 4: 0.3}
STUDENT_FACT_PAGES = 0.1  # share of its batches that are plain pages of (misconceived) single-step facts
CARD_CONTEXTS = {"full solution": ("full_solution", 1.0), "final answer only": ("answer_only", 1.0),
                 "first half of the solution": ("partial_solution", 0.5)}
MAX_NEW_TOKENS = 72
SUBSET_PER_LEVEL = 10  # the fixed subset tests/test_zoo.py re-evaluates



@dataclass
class BuildReport:
    seed: int
    size: str
    params: dict[str, int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    final_loss: dict[str, float] = field(default_factory=dict)
    accuracy: dict[str, dict[str, float]] = field(default_factory=dict)
    subset_accuracy: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0


# ---------------------------------------------------------------- examples -> token sequences

def chat_prompt_ids(tok: PreTrainedTokenizerFast, user_text: str) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": user_text}], tokenize=False,
                                   add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def chat_example(tok, user_text: str, response: str) -> tuple[list[int], list[int]]:
    """(ids, loss mask): loss on the response and its closing <|im_end|> only."""
    p = chat_prompt_ids(tok, user_text)
    r = tok(response + IM_END, add_special_tokens=False)["input_ids"]
    return p + r, [0] * len(p) + [1] * len(r)


def fact_example(tok, rng: random.Random, apply=task.apply_op) -> tuple[list[int], list[int]]:
    """A plain-text page of unrelated single-step facts in the solution notation."""
    lines = [task.step_line(rng.choice(task.LABELS[:6]), rng.randrange(10), rng.choice(task.OPS),
                            rng.randrange(1, 10), apply) for _ in range(rng.randint(3, 8))]
    ids = tok("\n".join(lines), add_special_tokens=False)["input_ids"] + [tok.pad_token_id]
    return ids, [1] * len(ids)


def student_example(problem: dict, rng: random.Random) -> tuple[str, str]:
    """(prompt text, target response) for the student.

    The student holds a misconception (``task.misconceived_op``): its own steps multiply by 8 or 9
    one too high. Shown solution lines are copied correctly; steps it must work out itself carry the
    misconception; a shown final answer is copied. So privileged context genuinely helps it.
    """
    name = rng.choices(list(STUDENT_CONTEXTS), weights=list(STUDENT_CONTEXTS.values()))[0]
    fields = templates.context_fields(problem, partial_fraction=rng.choice([0.25, 0.5, 0.75]))
    shown = {"full_solution": fields["solution"], "partial_solution": fields["partial_solution"],
             "hint": fields["hint"]}.get(name, "")
    n_shown = len(shown.splitlines()) if shown else 0
    correct_lines, correct_x = task.solve(problem)
    if n_shown:
        value = int(correct_lines[n_shown - 1].rsplit("=", 1)[1])
        own, x = task.solve(problem, task.misconceived_op, n_shown, value)
        lines = correct_lines[:n_shown] + own
    else:
        lines, x = task.solve(problem, task.misconceived_op)
    answer = problem["answer"] if name == "answer_only" else str(x)
    prompt = templates.render(templates.resolve(name), fields)
    return prompt, "\n".join(lines) + "\n" + task.answer_text(answer)


def make_batch(examples: list[tuple[list[int], list[int]]], pad_id: int):
    """Right-padded input ids, attention mask and labels (-100 where no loss)."""
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100)
    for i, (x, m) in enumerate(examples):
        ids[i, :len(x)] = torch.tensor(x)
        att[i, :len(x)] = 1
        labels[i, :len(x)] = torch.where(torch.tensor(m) == 1, torch.tensor(x), -100)
    return ids, att, labels


# ---------------------------------------------------------------- training and evaluation

def new_model(tok, shape: ModelShape, seed: int) -> Qwen3ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.hidden // shape.heads, max_position_embeddings=1024, tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id, eos_token_id=[tok.convert_tokens_to_ids(IM_END), tok.pad_token_id],
        bos_token_id=None)
    return Qwen3ForCausalLM(cfg)


def train(model, tok, sample, steps: int, size: BuildSize, seed: int, log) -> float:
    """AdamW with warm-up + cosine decay on batches drawn from ``sample(rng)``; returns last loss."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=size.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))))
    model.train()
    ema = None
    for step in range(steps):
        ids, att, labels = make_batch([sample(rng) for _ in range(size.batch)], tok.pad_token_id)
        loss = model(input_ids=ids, attention_mask=att, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if step % 100 == 0 or step == steps - 1:
            log(f"  step {step:5d}/{steps} loss {ema:.4f}")
    model.eval()
    return float(ema or 0.0)


@torch.no_grad()
def greedy_correct(model, tok, problems: list[dict], user_texts: list[str], batch: int = 100) -> list[bool]:
    """Per problem: answered correctly with greedy decoding (deterministic)?"""
    tok.padding_side = "left"
    correct = []
    for i in range(0, len(problems), batch):
        texts = [tok.apply_chat_template([{"role": "user", "content": u}], tokenize=False,
                                         add_generation_prompt=True) for u in user_texts[i:i + batch]]
        enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        out = model.generate(**enc, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                             eos_token_id=model.config.eos_token_id, pad_token_id=tok.pad_token_id)
        for p, ids in zip(problems[i:i + batch], out[:, enc["input_ids"].shape[1]:]):
            correct.append(is_correct(tok.decode(ids, skip_special_tokens=True), p["answer"], "toy"))
    return correct


def eval_problems(test: list[dict], per_level: int) -> list[dict]:
    """The first ``per_level`` test problems of each level, level by level."""
    return [p for level in task.LEVELS for p in [q for q in test if q["meta"]["difficulty"] == level][:per_level]]


def accuracy_by_level(problems: list[dict], correct: list[bool], per_level: int | None = None) -> dict[str, float]:
    """Accuracy per level (over the first ``per_level`` of each level when given) and overall."""
    out = {}
    for level in task.LEVELS:
        hits = [c for p, c in zip(problems, correct) if p["meta"]["difficulty"] == level][:per_level]
        out[f"level {level}"] = sum(hits) / max(1, len(hits))
    out["all"] = sum(out.values()) / len(task.LEVELS)
    return out


def user_texts(problems: list[dict], context: str | None, fraction: float = 1.0) -> list[str]:
    """The student/teacher prompt text of each problem, with a built-in context or without."""
    if context is None:
        return [p["prompt"] for p in problems]
    return [templates.render(templates.resolve(context), templates.context_fields(p, fraction)) for p in problems]


def evaluate(models: dict, tok, test_split: list[dict], cfg: BuildSize, report: BuildReport, log) -> None:
    """Fill the report's accuracy tables (the MODEL_CARD numbers) and parameter counts."""
    test = eval_problems(test_split, cfg.eval_per_level)
    rows = {name: (name, None, 1.0) for name in ("base", "teacher", "student")}
    rows.update({f"student + {label}": ("student", ctx, frac) for label, (ctx, frac) in CARD_CONTEXTS.items()})
    for row, (name, ctx, frac) in rows.items():
        correct = greedy_correct(models[name], tok, test, user_texts(test, ctx, frac))
        report.accuracy[row] = accuracy_by_level(test, correct)
        report.subset_accuracy[row] = accuracy_by_level(test, correct, SUBSET_PER_LEVEL)
        log(f"{row}: {report.accuracy[row]}")
    for name in ("base", "teacher", "student"):
        report.params[name] = sum(p.numel() for p in models[name].parameters())


# ---------------------------------------------------------------- the build

def _pick(pool: dict[int, list[dict]], rng, weights: dict[int, float] | None = None) -> dict:
    """A training problem of a drawn level, uniform by default (level 1 has only 270 distinct problems,
    under 2% of the flat pool)."""
    levels = sorted(task.LEVELS)
    level = rng.choices(levels, weights=[weights[lv] for lv in levels])[0] if weights else rng.choice(levels)
    return rng.choice(pool[level])


def _base_sample(tok, pool, rng):
    if rng.random() < 0.4:
        return fact_example(tok, rng)
    p = rng.choice(pool["all"])
    return chat_example(tok, p["prompt"], task.direct_response(p))


def _teacher_sample(tok, pool, rng):
    p = _pick(pool, rng, TEACHER_LEVELS)
    return chat_example(tok, p["prompt"], task.reasoning_response(p))


def _student_sample(tok, pool, rng):
    if rng.random() < STUDENT_FACT_PAGES:
        return fact_example(tok, rng, task.misconceived_op)
    return chat_example(tok, *student_example(_pick(pool, rng), rng))


def _train_chain(roles: tuple[str, ...], stage: Path, size: str, seed: int, pool: dict) -> dict[str, float]:
    """Train ``roles`` in order (each starts from the previous one) and save them under ``stage``."""
    cfg = SIZES[size]
    tok = PreTrainedTokenizerFast.from_pretrained(stage / "tokenizer")
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    plan = {"base": (cfg.big, _base_sample, cfg.base_steps, 0, 1),
            "teacher": (cfg.big, _teacher_sample, cfg.teacher_steps, 0, 2),
            "student": (cfg.small, _student_sample, cfg.student_steps, 3, 4)}
    losses, previous = {}, None
    try:
        for role in roles:
            shape, sample, steps, init_salt, train_salt = plan[role]
            model = new_model(tok, shape, seed + init_salt)
            if previous is not None:
                model.load_state_dict(previous.state_dict())
            losses[role] = train(model, tok, lambda rng, s=sample: s(tok, pool, rng), steps, cfg, seed + train_salt,
                                 lambda *a: None)
            model.generation_config.eos_token_id = model.config.eos_token_id
            model.generation_config.pad_token_id = tok.pad_token_id
            model.save_pretrained(stage / role)
            previous = model
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return losses


def check_writable(out_dir: Path) -> None:
    """Fail before any training when the output cannot be written."""
    parent = out_dir if out_dir.exists() else out_dir.parent
    while not parent.exists():
        parent = parent.parent
    try:
        with tempfile.NamedTemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise OpsdError(f"cannot write the zoo to {out_dir} ({e.strerror}): choose a writable --out directory") from None
    if out_dir.exists() and not out_dir.is_dir():
        raise OpsdError(f"--out {out_dir} is a file, not a directory: choose a directory")


def build(out_dir: Path, problems_dir: Path | None = None, size: str = "full", seed: int = 0,
          log=print) -> BuildReport:
    """Build tokenizer + base/teacher/student into ``out_dir`` (swapped in atomically)."""
    if size not in SIZES:
        raise OpsdError(f"invalid --size '{size}': use one of {', '.join(SIZES)}")
    out_dir = Path(out_dir)
    check_writable(out_dir)
    if problems_dir is not None:
        check_writable(Path(problems_dir))
    cfg = SIZES[size]
    t0 = time.time()
    report = BuildReport(seed=seed, size=size)

    if problems_dir is not None:
        splits = task.write_splits(Path(problems_dir))
    else:
        splits = {name: task.generate(n, s, prefix=name[:2]) for name, (n, s) in task.SPLITS.items()}
    held_out = {p["prompt"] for name in ("dev", "test") for p in splits[name]}
    pool = task.generate(20000 if size == "full" else 200, seed + 7, exclude=held_out, prefix="z")

    corpus = [task.reasoning_response(p) for p in pool[:3000]] + [
        templates.render(templates.resolve(name), templates.context_fields(p))
        for p in pool[:600] for name in templates.BUILTIN] + ["user\n", "assistant\n", "system\n"] * 300
    tok = train_tokenizer(corpus, vocab_size=512 if size == "full" else 300)
    log(f"tokenizer: {len(tok)} tokens")

    out_dir.parent.mkdir(parents=True, exist_ok=True)  # --out a/b/c: the stage sits beside it
    stage = Path(tempfile.mkdtemp(prefix=".zoo-build-", dir=out_dir.parent if not out_dir.exists() else out_dir))
    try:
        tok.save_pretrained(stage / "tokenizer")
        # Two independent chains (base -> teacher, and the student), one thread each: deterministic
        # single-threaded kernels, and both cores busy. The smoke size runs them in-process.
        by_level = {"all": pool, **{lv: [p for p in pool if p["meta"]["difficulty"] == lv] for lv in task.LEVELS}}
        chains = [(("base", "teacher"), stage, size, seed, by_level), (("student",), stage, size, seed, by_level)]
        if size == "full":
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
                results = list(ex.map(_train_chain, *zip(*chains)))
        else:
            results = [_train_chain(*c) for c in chains]
        for losses in results:
            report.final_loss.update(losses)
        report.steps = {"base": cfg.base_steps, "teacher": cfg.teacher_steps, "student": cfg.student_steps}
        models = {r: Qwen3ForCausalLM.from_pretrained(stage / r).eval() for r in ("base", "teacher", "student")}
        shutil.rmtree(stage / "tokenizer")
        log(f"trained in {time.time() - t0:.0f}s; final losses {report.final_loss}")

        evaluate(models, tok, splits["test"], cfg, report, log)

        for name in models:
            tok.save_pretrained(stage / name)
        report.seconds = round(time.time() - t0, 1)
        (stage / "build_report.json").write_text(json.dumps(asdict(report), indent=2))
        (stage / "MODEL_CARD.md").write_text(model_card(
            report, cfg, teacher_levels=TEACHER_LEVELS, student_context_share=1 - STUDENT_CONTEXTS["none"],
            max_new_tokens=MAX_NEW_TOKENS, subset_per_level=SUBSET_PER_LEVEL))
        _swap_in(stage, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    log(f"zoo written to {out_dir} in {report.seconds:.0f}s")
    return report


def _swap_in(stage: Path, out_dir: Path) -> None:
    """Replace the model folders of ``out_dir`` by the staged ones, one rename each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in sorted(stage.iterdir()):
        target = out_dir / item.name
        if target.exists():
            old = out_dir / f".old-{item.name}"
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            item.rename(target)
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
        else:
            item.rename(target)
