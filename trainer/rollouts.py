"""What each optimizer step trains on: the problems, the views, and fresh on-policy samples.

The global batch of a step is a pure function of (seed, step, global batch size): an epoch-wise
permutation of the training problems. It is cut into ``processes x accumulation`` micro-batches;
global micro-batch ``j = a * world + rank`` goes to ``rank`` as its accumulation step ``a``.
Sampling runs in generation chunks of ``generation_batch_size`` completions, each seeded by
(seed, step, its position in the global batch) and drawn by ``opsd_diag.engine.decode`` (the diagnosis'
``sample_hf`` distribution, finished rows dropped from the batch). So a chunk's samples do not
depend on how the global batch is split: one process with accumulation 2, one process with a
double micro-batch and two processes with accumulation 1 sample and train on identical rollouts
(for a fixed generation batch size), and a resumed run repeats exactly what the interrupted one
would have done.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable

from opsd_diag.core.context_schedule import revealed_problem

from opsd_diag.engine.samplers import for_role
from opsd_diag.engine.sampling import cut_at_strings
from opsd_diag.engine.train_step import MicroBatch
from opsd_diag.errors import OpsdError
from opsd_diag.config.spec import DiagnosisConfig, TrainingSpec
from opsd_diag.io.data import load_problems
from opsd_diag.io.thinking import check
from opsd_diag.engine.setup import render
from opsd_diag.io.views import reference_ids
from opsd_diag.config.settings import derive_seed


@dataclass
class ProblemSet:
    """Problems with every prompt view tokenised once, up front (user errors surface before the run)."""
    problems: list[dict]
    student_prompts: list[list[int]]
    teacher_prompts: list[list[int]] | None
    base_prompts: list[list[int]] | None
    targets: list[list[int]] | None  # reference responses (sft / regression NLL), ending in a stop id
    stop_strings: tuple[str, ...] = ()  # the student's (a raw Base student): samples end where one is complete
    reveal: Callable | None = None  # (problem indices, solution share) -> (teacher, base prompts): context_schedule


def build_problem_set(cfg: DiagnosisConfig, spec: TrainingSpec, renderers, problems: list[dict],
                      stop_ids: list[int], *, system: str | None = None, teacher=None,
                      with_targets: bool = False, families: dict | None = None, room: int | None = None,
                      rendered: tuple | None = None) -> ProblemSet:
    """``renderers``: (the student's ``io.views.ViewRenderer``, config -> the teacher's), as ``engine.setup``
    made them; ``rendered``: (views, the base's prompts) that ``engine.setup.prepare`` already made of these
    problems, else they are rendered here (``engine.setup.render``: ``families`` maps the teacher to the
    tokenizer of the base's family, ``room`` caps the default length of a teacher view)."""
    teachers = [teacher] if teacher is not None else []
    views, base = rendered or render(cfg, problems, renderers, system, teachers, room, families or {},
                                     every_base_view=True)
    teacher_prompts = views.teachers[teacher.name] if teacher is not None else None
    base_prompts = None if cfg.base is None else base.get(teacher.name) if teacher is not None else views.student
    targets = None
    if with_targets:
        targets = [reference_ids(renderers[0].tok, p, spec.sft_target, stop_ids[0]) for p in problems]

    def reveal(idx: list[int], fraction: float):  # a context schedule's (teacher, base) views at a solution share
        v, b = render(cfg, [revealed_problem(problems[i], fraction) for i in idx], renderers, system, teachers, room,
                      families or {}, every_base_view=True)
        return v.teachers[teacher.name], None if cfg.base is None else b.get(teacher.name)

    return ProblemSet(problems, views.student, teacher_prompts, base_prompts, targets, tuple(cfg.student.stop_strings),
                      reveal if teacher is not None else None)


def load_set(data_spec, key: str) -> list[dict]:
    """The problems of one data section of the config; every error names the section (``training.data``...)."""
    try:
        problems = load_problems(data_spec, key)
    except OpsdError as e:
        raise OpsdError(f"{key}.path: {e}") from None
    if not problems:
        raise OpsdError(f"{key}.path: the set is empty: point it at a file with problems")
    return problems


@lru_cache(maxsize=4)
def _permutation(n: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(derive_seed(seed, c=epoch)).shuffle(order)
    return tuple(order)


def step_problems(n: int, step: int, global_batch: int, seed: int) -> list[int]:
    """Problem indices of one step's global batch (epoch-wise shuffles, no problem twice per epoch)."""
    out = []
    for g in range(step * global_batch, (step + 1) * global_batch):
        epoch, i = divmod(g, n)
        out.append(_permutation(n, seed, epoch)[i])
    return out


def rank_micro_batches(problem_ids: list[int], per_device: int, world: int, rank: int,
                       accumulation: int) -> list[tuple[int, list[int]]]:
    """(global micro-batch index j, problem indices) for this rank's accumulation steps, in order."""
    out = []
    for a in range(accumulation):
        j = a * world + rank
        out.append((j, problem_ids[j * per_device:(j + 1) * per_device]))
    return out


def micro_seed(seed: int, step: int, j: int) -> int:
    return derive_seed(seed, step, j, 17)


def _sample(model, tok, ps: ProblemSet, j: int, idx: list[int], step: int, spec: TrainingSpec, stop_ids, engine: str,
            sample_to: int | None = None):
    k = spec.num_generations
    per_chunk = spec.generation_batch_size // k  # prompts per generate call
    first = j * spec.per_device_train_batch_size // per_chunk  # global index of this micro-batch's first chunk
    samples = []
    sample = for_role("rollouts", engine)  # hf: engine.decode's loop, which drops finished rows; static: engine.fast
    for c, lo in enumerate(range(0, len(idx), per_chunk)):
        s = spec.sampling_settings(micro_seed(spec.seed, step, first + c))
        if sample_to is not None and sample_to < s.max_new_tokens:  # a position window's end (LeverState.sample_to)
            s = replace(s, max_new_tokens=sample_to)
        prompts = [ps.student_prompts[i] for i in idx[lo:lo + per_chunk]]
        samples += cut(tok, ps, sample(model, tok, prompts, s, stop_ids))
    return samples


def cut(tok, ps: ProblemSet, samples):
    """The student's stop strings applied to sampled completions (as the diagnosis does)."""
    return samples if not ps.stop_strings else [[cut_at_strings(tok, c, ps.stop_strings) for c in per]
                                                for per in samples]


def make_micro_batch(model, tok, ps: ProblemSet, j: int, idx: list[int], step: int, spec: TrainingSpec,
                     stop_ids: list[int], engine: str = "hf", *, fraction: float = 1.0,
                     checker: tuple[str, str] | None = None, sample_to: int | None = None) -> MicroBatch:
    """On-policy samples from the current student (or the reference responses for sft). ``fraction``: the
    share of each solution the teacher view reveals (``training.context_schedule``); ``checker`` (name,
    truncated rule): each rollout's outcome is checked (a lever reads it); ``sample_to``: sample at most this
    many tokens (a position window's end: ``trainer.levers.LeverState.sample_to``)."""
    rows = [i for i in idx for _ in range(spec.num_generations)]
    if spec.method == "sft":
        completions = [ps.targets[i] for i in rows]
        finished = [True] * len(rows)
        logprobs = None
    else:
        was_training = model.training
        model.eval()
        samples = _sample(model, tok, ps, j, idx, step, spec, stop_ids, engine, sample_to)
        model.train(was_training)
        completions = [c.ids for per in samples for c in per]
        finished = [c.finished for per in samples for c in per]
        logprobs = [c.logprobs for per in samples for c in per]
    pick = (lambda views: None if views is None else [views[i] for i in rows])
    teacher, base = pick(ps.teacher_prompts), pick(ps.base_prompts)
    if fraction < 1.0 and ps.reveal is not None:
        teacher, base = ps.reveal(rows, fraction)
    correct = None if checker is None else [outcome(tok, ps, i, c, f, checker) for i, c, f in
                                            zip(rows, completions, finished)]
    return MicroBatch(j, rows, pick(ps.student_prompts), teacher, base, completions, finished, correct, logprobs)


def outcome(tok, ps: ProblemSet, i: int, ids: list[int], finished: bool, checker: tuple[str, str]) -> bool | None:
    """Whether a rollout of problem ``i`` is verified correct (None: the problem has no answer)."""
    answer = ps.problems[i].get("answer")
    return None if answer is None else bool(check(tok, ps.student_prompts[i], ids, finished, answer, *checker).correct)
