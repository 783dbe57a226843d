"""Build a toy world from its spec: tokenizer + base/teacher/student Qwen3-shaped models, reproducibly on CPU.

What each model learns is in ``samples.py``; what the world changes (task, sizes, misconceptions,
second skill, the base's preferences) is its spec (``world.py``). The bundled zoo is the default
spec, ``sample_data/worlds/chains.yaml``.

Everything is built in a temporary sibling directory and swapped in at the end, so a failed or
interrupted build never touches existing models; what a build may write at all (never another world's
folder, a link, or the shipped data at another size) is checked first, by ``guard.py``.
"""

from __future__ import annotations

import ctypes
import json
import math
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, templates
from opsd_diag.zoo import guard, samples, stored, task
from opsd_diag.zoo.card import RECORD_HEADING, model_card
from opsd_diag.zoo.evaluate import (  # noqa: F401  (the zoo's evaluation, as tests/test_zoo.py uses it)
    MAX_NEW_TOKENS, accuracy_by_level, eval_problems, evaluate, greedy_correct, user_texts)
from opsd_diag.zoo.tokenizer import IM_END, train_tokenizer
from opsd_diag.zoo.world import SECOND_POOL, World


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class BuildSize:
    """How big and how long; ``full`` is the spec's, ``ci`` proves the pipeline in seconds."""
    big: ModelShape
    small: ModelShape
    base_steps: int
    teacher_steps: int
    student_steps: int
    batch: int
    eval_per_level: int
    lr: float = 3e-3


CHAINS = World()
SIZES = {
    "full": BuildSize(big=ModelShape(128, 4, 4, 2, 384), small=ModelShape(96, 3, 4, 2, 256),
                      base_steps=1000, teacher_steps=1100, student_steps=3000, batch=32, eval_per_level=100),
    "ci": BuildSize(big=ModelShape(32, 2, 2, 1, 64), small=ModelShape(32, 1, 2, 1, 64),
                    base_steps=6, teacher_steps=6, student_steps=6, batch=8, eval_per_level=3),
}
CARD_CONTEXTS = CHAINS.card_contexts
SUBSET_PER_LEVEL = CHAINS.training.subset_per_level  # the fixed subset tests/test_zoo.py re-evaluates
REPORT_EXTRAS = ("style", "second_skill", "probe", "pass_k", "world")  # written only when the world has them


def size_of(world: World, size: str) -> BuildSize:
    """The world's own sizes (``full``) or the seconds-long smoke sizes (``ci``)."""
    if size == "ci":
        return SIZES["ci"]
    t = world.training
    return BuildSize(big=ModelShape(**world.base.shape.model_dump()), small=ModelShape(**world.student.shape.model_dump()),
                     base_steps=world.base.steps, teacher_steps=world.teacher.steps,
                     student_steps=world.student.steps, batch=t.batch, eval_per_level=t.eval_per_level, lr=t.lr)


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
    style: dict[str, float] = field(default_factory=dict)         # share of greedy replies opening with the preamble
    second_skill: dict[str, float] = field(default_factory=dict)  # greedy accuracy on the second skill
    probe: dict[str, dict[str, float]] = field(default_factory=dict)  # the student after more SFT on correct solutions
    pass_k: dict[str, dict[str, float]] = field(default_factory=dict)  # sampled pass@k at temperature 1
    world: str = ""

    def as_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k not in REPORT_EXTRAS or v}



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


# ---------------------------------------------------------------- training

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


# ---------------------------------------------------------------- the build

def _bind_worker_to_the_build(build_pid: int) -> None:
    """A worker ignores Ctrl-C (sent to the whole process group): the build stops every worker at once. On Linux it
    also ends with the build, even one killed outright (SIGKILL, the OOM killer), instead of training on unowned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        if os.getppid() != build_pid:  # the build died before the line above
            os._exit(1)


def _train_in_workers(chains: list[tuple], train=None) -> list[dict[str, float]]:
    """``train`` (default ``_train_chain``) of each chain in its own spawned process. A stop (Ctrl-C, or SIGTERM, which
    the CLI turns into KeyboardInterrupt) or a chain's error ends the workers at once: the executor's shutdown alone
    would wait out minutes of training."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx, initializer=_bind_worker_to_the_build,
                             initargs=(os.getpid(),)) as ex:
        futures = [ex.submit(train or _train_chain, *chain) for chain in chains]
        try:
            while True:  # short waits: a chain's error ends the build at once, whichever chain fails first
                done, running = wait(futures, timeout=0.5, return_when=FIRST_EXCEPTION)
                if failed := next((f for f in done if f.exception() is not None), None):
                    raise failed.exception()
                if not running:
                    return [f.result() for f in futures]
        except BaseException:
            for process in list(ex._processes.values()):  # no public way to end a running worker before Python 3.14
                process.terminate()
            raise


def _train_chain(roles: tuple[str, ...], stage: Path, size: str, seed: int, pool: dict,
                 world: World = CHAINS) -> dict[str, float]:
    """Train ``roles`` in order (each starts from the previous one) and save them under ``stage``."""
    cfg = size_of(world, size)
    tok = PreTrainedTokenizerFast.from_pretrained(stage / "tokenizer")
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    plan = {"base": (cfg.big, samples.base_sample, cfg.base_steps, 0, 1),
            "teacher": (cfg.big, samples.teacher_sample, cfg.teacher_steps, 0, 2),
            "student": (cfg.small, samples.student_sample, cfg.student_steps, 3, 4),
            "probe": (cfg.small, _probe_sample, world.student.probe_steps or 0, 3, 5)}
    losses, previous = {}, None
    try:
        for role in roles:
            shape, sample, steps, init_salt, train_salt = plan[role]
            model = new_model(tok, shape, seed + init_salt)
            if previous is not None:  # the teacher starts from the base, the probe from the student
                model.load_state_dict(previous.state_dict())
            losses[role] = train(model, tok, lambda rng, s=sample: s(world, tok, pool, rng), steps, cfg,
                                 seed + train_salt, lambda *a: None)
            model.generation_config.eos_token_id = model.config.eos_token_id
            model.generation_config.pad_token_id = tok.pad_token_id
            model.save_pretrained(stage / role)
            previous = model
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return losses


def _probe_sample(world, tok, pool, rng):
    """The capacity probe: correct step-by-step solutions, no context (plain SFT of the student)."""
    p = samples.pick(world, pool, rng)
    return samples.chat_example(tok, p["prompt"], task.reasoning_response(p))


def tokenizer_corpus(world: World, pool: list[dict], second: list[dict]) -> list[str]:
    """Texts the tokenizer is trained on: solutions, every context's prompts, and the world's extras."""
    corpus = [task.reasoning_response(p) for p in pool[:3000]] + [
        templates.render(templates.resolve(name), templates.context_fields(p))
        for p in pool[:600] for name in templates.BUILTIN] + ["user\n", "assistant\n", "system\n"] * 300
    extra = [templates.render(world.template(name), templates.context_fields(p))
             for p in pool[:200] for name in world.contexts]
    extra += [f"{p['prompt']} {task.direct_response(p)}" for p in second[:600]]
    extra += [world.base.prefers] * 300 if world.base.prefers else []
    return corpus + extra


def build(out_dir: Path, problems_dir: Path | None = None, size: str = "full", seed: int | None = None,
          log=print, world: World = CHAINS, command: str = "", replace: bool = False) -> BuildReport:
    """Build the world's tokenizer + base/teacher/student into ``out_dir`` (swapped in atomically).

    ``replace``: ``out_dir`` and ``problems_dir`` may hold something else than an earlier build of this world
    (``guard.py`` says what is never written, flag or not)."""
    out_dir, problems_dir = Path(out_dir), None if problems_dir is None else Path(problems_dir)
    guard.check_build(world, out_dir, problems_dir, size, seed, replace)
    seed = world.seed if seed is None else seed
    cfg = size_of(world, size)
    t0 = time.time()
    report = BuildReport(seed=seed, size=size, world="" if world.is_bundled() else world.name)
    wt = world.task

    splits = task.make_splits(wt.splits, wt.levels, wt.ops)
    held_out = {p["prompt"] for name in ("dev", "test") for p in splits[name]}
    pool = task.generate(wt.pool if size == "full" else min(wt.pool, 200), seed + wt.pool_seed, exclude=held_out,
                         prefix="z", lengths=wt.levels, ops=wt.ops)
    skill = world.student.second_skill
    second_test = task.generate_reverse(skill.test, skill.seed, skill.lengths) if skill else []
    second_pool = task.generate_reverse(SECOND_POOL[size], skill.seed + 1, skill.lengths,
                                        exclude={p["prompt"] for p in second_test}, prefix="zs") if skill else []
    by_level = {"all": pool, "second_skill": second_pool,
                **{lv: [p for p in pool if p["meta"]["difficulty"] == lv] for lv in wt.levels}}
    empty = [lv for lv in wt.levels if not by_level[lv]]
    if empty:  # samples.pick draws every level: one without training problems would fail mid-training
        n = wt.levels[empty[0]]
        raise OpsdError(f"task.levels: level {empty[0]} ({n} operation{'s' if n > 1 else ''}) has no training problem "
                        "left: the test and dev splits took every distinct problem of its length; make its chains "
                        "longer or the splits smaller")
    if problems_dir is not None:
        guard.write_marker(problems_dir, world.name, size, seed, "problems")  # the folder is this build's from now on
        task.write_splits(problems_dir, splits)
        if skill:
            task.write_jsonl(problems_dir / "second_skill.jsonl", second_test)

    tok = train_tokenizer(tokenizer_corpus(world, pool, second_pool), vocab_size=world.training.vocab_size
                          if size == "full" else 300)
    log(f"tokenizer: {len(tok)} tokens")

    out_dir.parent.mkdir(parents=True, exist_ok=True)  # --out a/b/c: the stage sits beside it
    stage = Path(tempfile.mkdtemp(prefix=".zoo-build-", dir=out_dir.parent if not out_dir.exists() else out_dir))
    try:
        tok.save_pretrained(stage / "tokenizer")
        # Two independent chains (base -> teacher, and the student), one thread each: deterministic
        # single-threaded kernels, and both cores busy. The smoke size runs them in-process.
        student_roles = ("student",) + (("probe",) if world.student.probe_steps else ())
        chains = [(("base", "teacher"), stage, size, seed, by_level, world),
                  (student_roles, stage, size, seed, by_level, world)]
        if size == "full":
            results = _train_in_workers(chains)
        else:
            results = [_train_chain(*c) for c in chains]
        for losses in results:
            report.final_loss.update({k: v for k, v in losses.items() if k != "probe"})
        report.steps = {"base": cfg.base_steps, "teacher": cfg.teacher_steps, "student": cfg.student_steps}
        models = {r: Qwen3ForCausalLM.from_pretrained(stage / r).eval() for r in ("base", "teacher", "student")}
        shutil.rmtree(stage / "tokenizer")
        log(f"trained in {time.time() - t0:.0f}s; final losses {report.final_loss}")

        evaluate(world, models, tok, splits["test"], cfg.eval_per_level, report, log, second_test)
        if world.student.probe_steps:
            probe = Qwen3ForCausalLM.from_pretrained(stage / "probe").eval()
            shutil.rmtree(stage / "probe")
            test = eval_problems(splits["test"], cfg.eval_per_level, wt.levels)
            correct = greedy_correct(probe, tok, test, user_texts(test, None), max_new_tokens=world.training.max_new_tokens)
            report.probe[f"student after {world.student.probe_steps} more steps of SFT on correct solutions"] = \
                accuracy_by_level(test, correct, levels=wt.levels)

        for name in models:
            tok.save_pretrained(stage / name)
        report.seconds = round(time.time() - t0, 1)
        (stage / "build_report.json").write_text(json.dumps(report.as_json(), indent=2))
        (stage / "MODEL_CARD.md").write_text(model_card(report, cfg, world, command=command))
        (stage / guard.MARKER).write_bytes(guard.marker(world.name, size, seed, "models"))
        _swap_in(stage, out_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    log(f"zoo written to {out_dir} in {report.seconds:.0f}s")
    return report


def rerender_card(out_dir: Path, world: World, command: str = "", replace: bool = False) -> Path:
    """MODEL_CARD.md again from a finished build's report (e.g. after the spec's ``expect`` or text changed);
    the folder and its report are checked first (``guard.check_card``, ``stored.read_report``)."""
    out_dir = Path(out_dir)
    guard.check_card(world, out_dir, replace)
    report = BuildReport(**stored.read_report(out_dir, world))
    card = out_dir / "MODEL_CARD.md"
    text = model_card(report, size_of(world, report.size), world, command=command)
    try:  # the record of `rebuild_check --record` is no render of the report: it is kept
        old = safe.read_bytes(card, limit=1 << 20).decode("utf-8")
    except (OSError, ValueError):
        old = ""
    if RECORD_HEADING in old:
        text = text.rstrip("\n") + "\n\n" + RECORD_HEADING + old.split(RECORD_HEADING, 1)[1]
    safe.write_file(card, text.encode())
    return card


def _swap_in(stage: Path, out_dir: Path) -> None:
    """Replace the model folders of ``out_dir`` by the staged ones, one rename each, the marker first (an
    interrupted swap leaves a folder this build may replace again)."""
    if out_dir.is_symlink():  # checked before the build; checked again, since it ran for minutes
        raise OpsdError(f"the models folder {out_dir} became a symbolic link during the build: nothing was replaced")
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in sorted(stage.iterdir(), key=lambda p: (p.name != guard.MARKER, p.name)):
        target = out_dir / item.name
        if os.path.lexists(target):
            old = out_dir / f".old-{item.name}"
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            item.rename(target)
            shutil.rmtree(old, ignore_errors=True) if old.is_dir() and not old.is_symlink() else old.unlink()
        else:
            item.rename(target)
