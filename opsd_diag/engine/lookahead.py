"""The lookahead: a few optimiser steps of one method's own training loss, measured on held-out rollouts.

Per (teacher config, loss method), on a float32 copy of the student: ``steps`` AdamW steps of the
trainer's own micro-batch step (``engine.train_step``, the loss of ``core.losses``) over the
diagnosis rollouts of the even-indexed problems, ``rollouts_per_step`` at a time in a seeded order;
then the odd-indexed problems' rollouts are scored under the stepped student and compared with the
initial one (``core.lookahead``: the success change by importance weighting, the correct-minus-
incorrect log-likelihood gap, KL to the initial student). It draws no new samples: the diagnosis'
student rollouts are the training run's first, on-policy batch. The student itself is never changed.
With ``lookahead.fresh_samples`` = n > 0 it also samples n completions of every measurement prompt from
the stepped and from the initial student (the same seeds) and reports the change of pass@1 and of
pass@k (k of ``analysis.pass_k`` up to n) with intervals over prompts (``fresh``). With ``lookahead.forgetting``
(a problem set) it samples ``forgetting_samples`` completions of every forgetting problem, rendered as the student's
view, from the initial student once and from each stepped one with the same seeds, and reports the pass@1 change
(``forgetting``): how much a few steps cost on problems the training does not see; and it scores the initial
student's samples there under each stepped student (``forgetting_ll``: the log-likelihood change of the correct
ones; ``forgetting_kl``: KL to the initial student at their positions), which move where no sample flips. With
``lookahead.reference`` (a template) it scores each measurement problem's reference response the same way
(``reference_ll``, ``reference_kl``): does a step make the known-good solution of an unseen problem more likely?
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from opsd_diag.core import signals
from opsd_diag.core import lookahead as maths
from opsd_diag.core.stats import bootstrap_mean_over_prompts, ci_dict, jsonable
from opsd_diag.engine.train_step import CompletionHidden, Roles
from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.engine.step_sums import StepSums
from opsd_diag.engine.train_step import (MicroBatch, auto_chunk_size, logprobs_of, micro_batch_backward,
                                         rescale_to_kept)
from opsd_diag.io import store
from opsd_diag.io.thinking import answer_text
from opsd_diag.io.verify import is_correct
from opsd_diag.io.views import reference_ids
from opsd_diag.config.spec import TrainingSpec, centering_k
from opsd_diag.config.settings import LossSettings, derive_seed

LOSS_METHODS = ("opd", "jsd", "opd2", "exopd")  # per-token losses a teacher config can be looked ahead with
FRESH_STREAM = 41  # the fresh samples' seed: derive_seed(lookahead.seed, 41), the same for every student
FORGETTING_STREAM = 43  # the forgetting samples' seed: derive_seed(lookahead.seed, 43), the same for every student


@dataclass(frozen=True, kw_only=True)
class LookaheadSettings:
    steps: int
    rollouts_per_step: int
    learning_rate: float
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    max_grad_norm: float | None
    seed: int
    sampling_temperature: float  # the temperature the rollouts were drawn at: the policy whose success counts


@dataclass
class Measured:
    """The measurement half, scored once under the initial student."""
    rows: pd.DataFrame  # rollouts of the odd-indexed problems with a known outcome
    old_logp: list[torch.Tensor]  # per row: [L_i] log pi_0 of its sampled tokens
    old_full: torch.Tensor  # [N, V] log pi_0 at every position (for the KL)


@dataclass
class Fresh:
    """Fresh samples of some prompts (the measurement half's, or a forgetting set's): ``draw(model)`` -> (``[P, n]``
    0/1 outcomes, tokens sampled, the completions)."""
    problem_ids: list
    draw: Callable[[torch.nn.Module], tuple]  # draw(model): (outcomes [P, n], tokens sampled, completions)
    ks: list[int]  # pass@k reported (k <= n)
    prompts: list[list[int]] = field(default_factory=list)  # [P] the student-view prompt ids drawn from
    initial: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    initial_tokens: int = 0
    initial_rows: pd.DataFrame | None = None  # the initial student's samples as rollout rows (``start``)

    def start(self, student) -> None:
        """The initial student's samples, drawn once: outcomes, tokens and the samples as rows to score."""
        self.initial, self.initial_tokens, comps = self.draw(student)
        self.initial_rows = pd.DataFrame(
            [{"problem_id": pid, "prompt_ids.student": prompt, "completion_ids": list(c.ids),
              "correct": bool(win)} for pid, prompt, cs, wins in zip(self.problem_ids, self.prompts, comps,
                                                                     self.initial)
             for c, win in zip(cs, wins) if len(c.ids)],  # an empty completion has no token to score
            columns=["problem_id", "prompt_ids.student", "completion_ids", "correct"])


def prompt_sampler(ids: list, prompts: list[list[int]], answers: list[str], tok, sample, settings, checker: str,
                   ks: list[int]) -> Fresh:
    """``Fresh`` over ``prompts`` (student-view ids) with their ``answers``; ``sample(model, prompts, settings)`` is
    the diagnosis' own sampler of a model in memory, each completion checked as the diagnosis checks its rollouts."""
    def draw(model) -> tuple:
        comps = sample(model, prompts, settings)
        wins = np.array([[is_correct(answer_text(tok, c.ids), a, checker) for c in cs]
                         for cs, a in zip(comps, answers)], dtype=bool)  # [P, n]
        return wins, sum(len(c.ids) for cs in comps for c in cs), comps
    return Fresh(list(ids), draw, sorted({1, *(k for k in ks if k <= settings.num_samples)}), list(prompts))


def fresh_sampler(rows: pd.DataFrame, problems: list[dict], tok, sample, settings, checker: str,
                  ks: list[int]) -> Fresh:
    """``prompt_sampler`` over the measurement rows' prompts."""
    first = rows.drop_duplicates("problem_id")
    return prompt_sampler(list(first["problem_id"]), _ids(first["prompt_ids.student"]),
                          [str(problems[int(i)]["answer"]) for i in first["problem_index"]], tok, sample, settings,
                          checker, ks)


def measure_fresh(stepped, f: Fresh, n_boot: int, seed: int, key: str = "fresh") -> dict:
    """The stepped student's samples against the initial one's: per k the mean over prompts of the pass@k
    change (``core.lookahead.pass_change``) with a bootstrap interval over prompts; ``key``: ``fresh`` or
    ``forgetting``."""
    new, tokens, _ = f.draw(stepped)
    out = {f"pass@{k}": ci_dict(bootstrap_mean_over_prompts(maths.pass_change(f.initial, new, k), f.problem_ids,
                                                            n_boot, seed), len(f.problem_ids)) for k in f.ks}
    return {key: out, f"{key}_sampled_tokens": tokens}


def measure_anchor(stepped, m: Measured, pad_id: int, temperature: float, n_boot: int, seed: int,
                   key: str = "forgetting") -> dict:
    """The stepped student on completions scored once under the initial one (``m``: the forgetting samples, ``key``
    ``forgetting``, or the reference responses, ``reference``): per problem the mean per-token log-likelihood change
    of its correct ones (``core.lookahead.loglik_change``), and the KL to the initial student, intervals over problems."""
    r = _rescore(stepped, m, pad_id, temperature)
    correct = m.rows["correct"].to_numpy(dtype=bool)
    ll = np.array([maths.loglik_change(r.per_token[g], correct[g]) for g in r.groups.values()])
    return {f"{key}_ll": ci_dict(bootstrap_mean_over_prompts(ll, r.ids, n_boot, seed), int(np.isfinite(ll).sum())),
            f"{key}_kl": ci_dict(bootstrap_mean_over_prompts(r.kl, r.token_prompt, n_boot, seed), len(r.ids)),
            f"{key}_measured_tokens": r.tokens}


def reference_rows(rows: pd.DataFrame, problems: list[dict], ids_of: Callable[[dict], list[int]]) -> pd.DataFrame:
    """Per problem of ``rows`` with a ``solution``, its reference response ``ids_of(problem)`` after the student's
    prompt, counted correct."""
    first = rows.drop_duplicates("problem_id")
    return pd.DataFrame([(pid, prompt, ids_of(problems[int(i)]), True) for pid, prompt, i in zip(
        first["problem_id"], _ids(first["prompt_ids.student"]), first["problem_index"])
        if str(problems[int(i)].get("solution") or "").strip()],
        columns=["problem_id", "prompt_ids.student", "completion_ids", "correct"])


@dataclass
class ForgettingSet:
    """``lookahead.forgetting``'s problems with an answer and their student-view ids (``engine.diagnose``)."""
    problems: list[dict]
    prompts: list[list[int]] = field(default_factory=list)


def _ids(column) -> list[list[int]]:
    """A table column of id arrays (parquet gives numpy arrays) as lists of ints."""
    return [[int(t) for t in x] for x in column]


def split(rollouts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(step half: even problem_index, measurement half: odd problem_index with a known outcome)."""
    known = rollouts[rollouts["length"] > 0]
    odd = known["problem_index"] % 2 == 1
    return known[~odd].reset_index(drop=True), known[odd & known["correct"].notna()].reset_index(drop=True)


@torch.no_grad()
def policy_logp(model, rows: pd.DataFrame, pad_id: int, temperature: float) -> torch.Tensor:
    """``[N, V]`` log-probs of ``model`` (as the policy samples: at ``temperature``) at the rows' completion
    positions, rows concatenated in order."""
    h = completion_hidden(model, _ids(rows["prompt_ids.student"]), _ids(rows["completion_ids"]), pad_id)  # [N, H]
    return signals.log_probs(lm_logits(model, h), temperature)  # [N, V]


def measure_initial(student, rows: pd.DataFrame, pad_id: int, temperature: float) -> Measured:
    full = policy_logp(student, rows, pad_id, temperature)  # [N, V]
    return Measured(rows, _per_row(full, rows), full)


def _per_row(full: torch.Tensor, rows: pd.DataFrame) -> list[torch.Tensor]:
    ids = torch.tensor([t for c in rows["completion_ids"] for t in c], dtype=torch.long)  # [N]
    lp = signals.token_logprob(full, ids.to(full.device)).double().cpu()  # [N]
    return list(torch.split(lp, [len(c) for c in rows["completion_ids"]]))


def take_steps(student, roles_for, rows: pd.DataFrame, config: str, loss: LossSettings, ref: str | None,
               s: LookaheadSettings, pad_id: int, base_view: str = "student", mask=None,
               view_of=None) -> tuple[torch.nn.Module, dict]:
    """A stepped float32 copy of ``student`` and the counts of what the steps cost.

    ``roles_for(trainable)`` gives the ``Roles`` around the copy (its teacher, base and initial student);
    ``mask``: a ``training.token_mask`` (``engine.levers``), the loss normalised by its kept tokens as in training;
    ``view_of(step, batch rows)``: the config whose teacher view that step trains on (a schedule's course,
    ``engine.schedule_points``; None: ``config`` at every step).
    """
    trainable = copy.deepcopy(student).float().train().requires_grad_(True)
    roles: Roles = roles_for(trainable)
    params = [p for p in trainable.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=s.learning_rate, betas=s.betas, eps=s.eps, weight_decay=s.weight_decay)
    hidden = CompletionHidden(trainable)
    order = list(range(len(rows)))
    random.Random(derive_seed(s.seed, 23)).shuffle(order)
    chunk = auto_chunk_size(trainable.get_output_embeddings().weight.shape[0])
    trained = 0
    for step in range(s.steps):
        idx = [order[(step * s.rollouts_per_step + i) % len(order)] for i in range(s.rollouts_per_step)]
        batch = rows.iloc[idx]
        view = config if view_of is None else view_of(step, batch)
        student_prompts, teacher_prompts = _ids(batch["prompt_ids.student"]), _ids(batch[f"prompt_ids.{view}"])
        mb = MicroBatch(step, [int(i) for i in batch["problem_index"]], student_prompts, teacher_prompts,
                        teacher_prompts if base_view == "teacher" else student_prompts,
                        _ids(batch["completion_ids"]), [bool(f) for f in batch["finished"]],
                        None if mask is None else [None if pd.isna(c) else bool(c) for c in batch["correct"]],
                        None if mask is None else logprobs_of(batch))
        sums = micro_batch_backward(hidden, roles, mb, loss, pad_id=pad_id, chunk_size=chunk,
                                    scale=1.0 / mb.n_tokens, ref=ref, sums=StepSums(), mask=mask)
        if mask is not None:
            rescale_to_kept(params, float(sums.stats["kept"]) / max(1, sums.counts["kept"]))
        if not np.isfinite(float(sums.loss)):
            raise FloatingPointError(f"the lookahead's loss is not finite at step {step + 1}")
        if s.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        trained += mb.n_tokens
    return trainable.eval(), {"trained_tokens": trained, "partner_scored_tokens": trained}


def measure(stepped, m: Measured, pad_id: int, temperature: float, n_boot: int, seed: int,
            per_prompt: bool = False) -> dict:
    """The stepped student against the initial one on the measurement half (``core.lookahead``). ``per_prompt``:
    also each prompt's Δll (``dll_prompts``, {problem id: value}), to compare two steppings prompt by prompt."""
    r = _rescore(stepped, m, pad_id, temperature)
    correct = m.rows["correct"].astype(float).to_numpy()
    dv = np.array([maths.success_change(r.sequence[g], correct[g]) for g in r.groups.values()])
    dll = np.array([maths.loglik_gap(r.per_token[g], correct[g]) for g in r.groups.values()])
    return {
        "dv": ci_dict(bootstrap_mean_over_prompts(dv, r.ids, n_boot, seed), len(r.ids)),
        "dll": ci_dict(bootstrap_mean_over_prompts(dll, r.ids, n_boot, seed), int(np.isfinite(dll).sum())),
        "kl": ci_dict(bootstrap_mean_over_prompts(r.kl, r.token_prompt, n_boot, seed), len(r.ids)),
        "measured_tokens": r.tokens,
        **({"dll_prompts": dict(zip(r.ids, dll.tolist()))} if per_prompt else {}),
    }


@dataclass
class Rescored:
    """Rows scored once under the initial student (``Measured``), scored again under a stepped one."""
    kl: np.ndarray  # [N] KL(pi_1 || pi_0) per token
    sequence: np.ndarray  # [R] log pi_1 / pi_0 of each whole completion
    per_token: np.ndarray  # [R] its mean per token
    groups: dict  # problem id -> the positions of its rows, ids sorted
    ids: list  # the problem ids, sorted
    token_prompt: np.ndarray  # [N] each token's problem id
    tokens: int


def _rescore(stepped, m: Measured, pad_id: int, temperature: float) -> Rescored:
    """What ``measure`` and ``measure_anchor`` both read: the stepped student's log-probs of ``m``'s rows."""
    new_full = policy_logp(stepped, m.rows, pad_id, temperature)  # [N, V]
    kl = maths.kl_per_token(new_full.double(), m.old_full.double())  # [N]
    deltas = [n - o for n, o in zip(_per_row(new_full, m.rows), m.old_logp)]  # [R] per-token log pi_1 / pi_0
    prompts = m.rows["problem_id"].to_numpy()
    groups = pd.Series(range(len(m.rows))).groupby(prompts, sort=True)
    lengths = m.rows["completion_ids"].map(len).to_numpy()
    return Rescored(kl.numpy(), np.array([float(d.sum()) for d in deltas]), np.array([float(d.mean()) for d in deltas]),
                    dict(groups.indices), list(groups.groups), np.repeat(prompts, lengths), int(lengths.sum()))


def run(student, teacher_models: dict, base, rollouts: pd.DataFrame, configs: list[str], methods: list[str],
        loss_of, s: LookaheadSettings, *, pad_id: int, exopd_reference: str, base_view: str, n_boot: int,
        boot_seed: int, skip: dict[str, str] | None = None, fresh: Callable[[pd.DataFrame], Fresh] | None = None,
        forgetting: Fresh | None = None, per_prompt: bool = False,
        reference: Callable[[pd.DataFrame], pd.DataFrame] | None = None) -> dict:
    """Every (config, method) lookahead of a diagnosis: ``{"configs": {config: {method: result}}, ...}``.

    ``loss_of(method)`` gives the method's ``LossSettings``; ``skip``: configs left out, with the reason
    (a teacher with another tokenizer). The initial student is scored on the measurement half once.
    ``fresh(measurement rows)``: the fresh samples (``fresh_sampler``); the initial student draws them once, as it
    does ``forgetting``'s (``prompt_sampler`` over the forgetting set), which every stepped student draws again.
    ``per_prompt``: each result also holds its per-prompt Δll (``measure``), which ``engine.schedule_points`` pairs.
    ``reference(measurement rows)``: the measurement problems' reference responses as rows (``reference_rows``),
    scored once under the initial student and again under each stepped one (``reference_ll``, ``reference_kl``).
    """
    step_rows, measure_rows = split(rollouts)
    if step_rows.empty or measure_rows.empty:
        return {"status": "skipped", "reason": "skipped: the lookahead needs scored rollouts with known outcomes on "
                                               "at least two problems (one to step on, one to measure)"}
    m = measure_initial(student, measure_rows, pad_id, s.sampling_temperature)
    f = fresh(measure_rows) if fresh is not None else None
    if f is not None:
        f.initial, f.initial_tokens, _ = f.draw(student)
    fixed = {}  # completions scored once under the initial student: its forgetting samples, the reference responses
    if forgetting is not None:
        forgetting.start(student)
        fixed["forgetting"] = forgetting.initial_rows
    if reference is not None:
        fixed["reference"] = reference(measure_rows)
    anchors = {k: measure_initial(student, r, pad_id, s.sampling_temperature) for k, r in fixed.items() if len(r)}
    out: dict[str, dict] = {}
    for config in configs:
        if config in (skip or {}):
            out[config] = {"skipped": skip[config]}
            continue
        for method in methods:
            if method == "opd2" and base is None:
                out.setdefault(config, {})[method] = {"skipped": "opd2 needs a base model"}
                continue
            ref = exopd_reference if method == "exopd" else None

            def roles_for(trainable, config=config, method=method, ref=ref):
                return Roles(trainable, None, "external", teacher_models[config],
                             base if (method == "opd2" or ref == "base") else None, student)

            stepped, cost = take_steps(student, roles_for, step_rows, config, loss_of(method), ref, s, pad_id,
                                       base_view)
            out.setdefault(config, {})[method] = {**measure(stepped, m, pad_id, s.sampling_temperature, n_boot,
                                                            boot_seed, per_prompt), **cost,
                                                  **(measure_fresh(stepped, f, n_boot, boot_seed) if f else {}),
                                                  **(measure_fresh(stepped, forgetting, n_boot, boot_seed, "forgetting")
                                                     if forgetting else {}),
                                                  **{k: v for key, a in anchors.items() for k, v in measure_anchor(
                                                      stepped, a, pad_id, s.sampling_temperature, n_boot, boot_seed,
                                                      key).items()}}
            del stepped
    return {"status": "ok", "configs": out, "n_step_rollouts": len(step_rows), "n_measure_rollouts": len(measure_rows),
            "settings": {k: v for k, v in vars(s).items()},
            **({"fresh_prompts": len(f.problem_ids), "fresh_initial_tokens": f.initial_tokens} if f else {}),
            **({"forgetting_prompts": len(forgetting.problem_ids),
                "forgetting_initial_tokens": forgetting.initial_tokens,
                "forgetting_initial_pass1": float(forgetting.initial.mean(axis=1).mean())} if forgetting else {}),
            **({"reference_prompts": len(fixed["reference"])} if reference is not None else {})}


def settings(cfg) -> tuple[LookaheadSettings, float | None]:
    """(the lookahead's settings, the advantage clip) of a diagnosis config: the training section's optimiser
    where the config has one (a diagnosis then looks ahead with what it will train with), else its defaults."""
    spec, tr = cfg.lookahead, cfg.training or TrainingSpec(method="opd")
    return LookaheadSettings(
        steps=spec.steps, rollouts_per_step=spec.rollouts_per_step,
        learning_rate=spec.learning_rate or tr.learning_rate, betas=(tr.adam_beta1, tr.adam_beta2), eps=tr.adam_epsilon,
        weight_decay=tr.weight_decay, max_grad_norm=tr.max_grad_norm, seed=spec.seed,
        sampling_temperature=cfg.sampling.temperature), spec.clip if spec.clip is not None else tr.clip


def loss_settings(cfg, method: str, clip: float | None) -> LossSettings:
    """The loss a lookahead steps ``method`` with: the diagnosis' scoring settings, ``clip`` for sampled tokens."""
    sc = cfg.scoring
    return LossSettings(method=method, temperature=cfg.scoring_temperature, beta=sc.jsd_beta,
                        centering=centering_k(sc.centering), exopd_lambda=sc.exopd_lambda,
                        clip=None if method == "jsd" else clip)


def forgetting_sampler(cfg, tok, sample, forgetting: ForgettingSet | None) -> Fresh | None:
    """``prompt_sampler`` over the forgetting set (``lookahead.forgetting_samples`` per problem, its own seed
    stream), or None without a set or a sampler; shared by the lookahead and the lever lookahead (``engine.levers``)."""
    if forgetting is None or sample is None:
        return None
    return prompt_sampler(
        [p["id"] for p in forgetting.problems], forgetting.prompts, [str(p["answer"]) for p in forgetting.problems],
        tok, sample, cfg.sampling.settings(derive_seed(cfg.lookahead.seed, FORGETTING_STREAM),
                                           num_samples=cfg.lookahead.forgetting_samples), cfg.analysis.checker, [1])


def for_diagnosis(run_dir, cfg, student, teacher_models: dict, base, tok, cross: list[str], *,
                  problems: list[dict] | None = None, sample=None, forgetting: ForgettingSet | None = None,
                  stop_id: int | None = None) -> dict:
    """The lookahead of a finished diagnosis in ``run_dir``, stored in its ``summary.json`` under ``lookahead``;
    with ``lookahead.fresh_samples`` > 0, ``sample(model, prompts, settings)`` draws the fresh samples, and the
    samples of ``forgetting`` (``engine.diagnose.render_forgetting``'s); with ``lookahead.reference``, the reference
    responses, each ending in ``stop_id`` (default: the tokenizer's EOS) as the trainer's do."""
    s, clip = settings(cfg)
    n = cfg.lookahead.fresh_samples
    fresh = None if not n or sample is None or problems is None else (
        lambda rows: fresh_sampler(rows, problems, tok, sample, cfg.sampling.settings(
            derive_seed(cfg.lookahead.seed, FRESH_STREAM), num_samples=n), cfg.analysis.checker,
            list(cfg.analysis.pass_k or [1, 4])))
    forget = forgetting_sampler(cfg, tok, sample, forgetting)
    template, stop = cfg.lookahead.reference, tok.eos_token_id if stop_id is None else stop_id
    refs = None if template is None or problems is None else (
        lambda rows: reference_rows(rows, problems, lambda p: reference_ids(tok, p, template, stop)))
    sc = cfg.scoring

    def loss_of(method: str) -> LossSettings:
        return loss_settings(cfg, method, clip)

    result = run(student, teacher_models, base, store.read_table(run_dir, "rollouts"), [t.name for t in cfg.teachers],
                 list(cfg.lookahead.methods), loss_of, s, pad_id=tok.pad_token_id,
                 exopd_reference=sc.exopd_reference, base_view=sc.base_view, n_boot=cfg.analysis.bootstrap,
                 boot_seed=cfg.sampling.seed,
                 skip={c: "a teacher with another tokenizer: no lookahead yet" for c in cross}, fresh=fresh,
                 forgetting=forget, per_prompt=bool(cfg.lookahead.schedule_points), reference=refs)
    path = Path(run_dir) / "summary.json"
    summary = {**store.read_json(path), "lookahead": jsonable(result)}
    store.atomic_write_json(path, summary)
    return result
