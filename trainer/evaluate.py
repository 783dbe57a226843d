"""Periodic evaluation: held-out accuracy (pass@1, pass@k) and the forgetting check.

Forgetting check: accuracy and the per-token NLL of the reference responses on a frozen regression
set, and KL(current policy || initial policy) on the held-out samples (full vocabulary, at the
scoring temperature). Problems are cut into fixed chunks with fixed seeds and spread over the
processes round-robin, so the numbers do not depend on how many processes run. The samples are drawn by the
training rollouts' sampler (``engine.samplers``, role ``evaluation``: ``engine.decode``'s loop by default), so one
training run samples one way.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from accelerate.utils import gather_object

from opsd_diag.core import signals
from opsd_diag.core.stats import pass_at_k
from opsd_diag.engine.samplers import for_role
from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.config.spec import EvalSpec
from opsd_diag.io.thinking import check
from opsd_diag.engine.train_step import Roles
from trainer.rollouts import ProblemSet, cut, micro_seed


@dataclass
class EvalSets:
    held_out: ProblemSet | None
    regression: ProblemSet | None  # with targets


def _chunks(n: int, size: int, world: int, rank: int) -> list[tuple[int, list[int]]]:
    starts = range(0, n, size)
    return [(c, list(range(lo, min(n, lo + size)))) for c, lo in enumerate(starts) if c % world == rank]


def _sample_and_check(model, tok, ps: ProblemSet, ev: EvalSpec, checker: str, stop_ids, world, rank, salt: int,
                      engine: str, truncated: str = "incorrect", tick=None):
    """[(problem index, n, c)] for this rank's chunks, plus the samples (for the KL check); ``tick(n)`` after
    each chunk of ``n`` problems (the progress of the evaluation stage)."""
    per_chunk = max(1, ev.batch_size // ev.num_samples)
    results, samples = [], []
    sample = for_role("evaluation", engine)  # hf: engine.decode's loop, as the rollouts; static: engine.fast
    for c, idx in _chunks(len(ps.problems), per_chunk, world, rank):
        s = ev.settings(micro_seed(ev.seed, salt, c))
        outs = cut(tok, ps, sample(model, tok, [ps.student_prompts[i] for i in idx], s, stop_ids))
        for i, per_prompt in zip(idx, outs):
            answer = ps.problems[i].get("answer")
            ok = [answer is not None and bool(check(tok, ps.student_prompts[i], o.ids, o.finished, answer, checker,
                                                    truncated).correct) for o in per_prompt]
            results.append((i, len(ok), int(sum(ok))))
            samples.extend((ps.student_prompts[i], o.ids) for o in per_prompt)
        if tick is not None:
            tick(len(idx) * world)  # every process advances alike: this rank's chunk stands for one per process
    return results, samples


def eval_size(sets: EvalSets) -> int:
    """Problems one evaluation samples (held-out plus regression): the unit of its progress."""
    return sum(len(ps.problems) for ps in (sets.held_out, sets.regression) if ps is not None)


@torch.no_grad()
def _token_sum(model, pairs, pad_id: int, batch: int, chunk: int, fn) -> tuple[float, int]:
    """Sum of ``fn(logits_chunk, ids_chunk, offset)`` over every completion token, with the count."""
    total, count = 0.0, 0
    for lo in range(0, len(pairs), batch):
        prompts = [p for p, _ in pairs[lo:lo + batch]]
        comps = [c for _, c in pairs[lo:lo + batch]]
        ids = torch.tensor([t for c in comps for t in c], dtype=torch.long)  # [N]
        h = completion_hidden(model, prompts, comps, pad_id)  # [N, H]
        for a in range(0, h.shape[0], chunk):
            sl = slice(a, min(h.shape[0], a + chunk))
            total += float(fn(lm_logits(model, h[sl]), ids[sl].to(h.device), sl).double().sum())
        count += ids.numel()
    return total, count


def _nll(model, pairs, pad_id, batch, chunk):
    return _token_sum(model, pairs, pad_id, batch, chunk,
                      lambda logits, ids, sl: -signals.token_logprob(signals.log_probs(logits, 1.0), ids))


def _kl_to_initial(roles: Roles, pairs, pad_id, batch, chunk, tau) -> tuple[float, int]:
    """Sum over tokens of KL(current || initial), both at temperature tau."""
    total, count = 0.0, 0
    for lo in range(0, len(pairs), batch):
        part = pairs[lo:lo + batch]
        prompts, comps = [p for p, _ in part], [c for _, c in part]
        with torch.no_grad():
            h_cur = completion_hidden(roles.student, prompts, comps, pad_id)  # [N, H]
            with roles.initial_model() as initial:
                h_init = completion_hidden(initial, prompts, comps, pad_id)  # [N, H]
                for a in range(0, h_cur.shape[0], chunk):
                    sl = slice(a, min(h_cur.shape[0], a + chunk))
                    cur = signals.log_probs(lm_logits(roles.student, h_cur[sl]), tau)  # [n, V]
                    init = signals.log_probs(lm_logits(initial, h_init[sl]), tau)  # [n, V]
                    total += float(signals.kl(cur, init).double().sum())  # KL(current || initial)
        count += sum(len(c) for c in comps)
    return total, count


def _accuracy(results: list[tuple[int, int, int]], ks: list[int], prefix: str) -> dict:
    known = sorted(set(results))
    out = {f"{prefix}pass@{k}": float(np.mean([pass_at_k(n, c, k) for _, n, c in known])) for k in ks}
    out[f"{prefix}problems"] = len(known)
    if not prefix:  # per problem (index, samples, correct): the realised gain's interval over problems
        out["per_problem"] = [[int(i), int(n), int(c)] for i, n, c in known]
    return out


def evaluate(roles: Roles, tok, sets: EvalSets, ev: EvalSpec, *, checker: str, stop_ids: list[int], pad_id: int,
             chunk: int, tau: float, world: int = 1, rank: int = 0, autocast=contextlib.nullcontext,
             engine: str = "hf", truncated: str = "incorrect", tick=None) -> dict:
    """Every process calls this; the returned metrics are complete on every process. ``tick(n)``: n more
    problems sampled (of ``eval_size(sets)``), for the progress of the stage."""
    model = roles.student
    was_training = model.training
    model.eval()
    out: dict = {}
    try:
        with autocast():
            if sets.held_out is not None:
                res, samples = _sample_and_check(model, tok, sets.held_out, ev, checker, stop_ids, world, rank, 0,
                                                 engine, truncated, tick)
                out.update(_accuracy(gather_object(res), ev.pass_k, ""))
                if ev.kl_to_initial and roles.has_initial:
                    kl = gather_object([_kl_to_initial(roles, samples, pad_id, ev.batch_size, chunk, tau)])
                    out["kl_to_initial"] = sum(t for t, _ in kl) / max(1, sum(n for _, n in kl))
            if sets.regression is not None:
                reg = sets.regression
                res, _ = _sample_and_check(model, tok, reg, ev, checker, stop_ids, world, rank, 1, engine, truncated,
                                           tick)
                out.update(_accuracy(gather_object(res), [1], "regression_"))
                mine = [(reg.student_prompts[i], reg.targets[i])
                        for _, idx in _chunks(len(reg.problems), ev.batch_size, world, rank) for i in idx]
                nll = gather_object([_nll(model, mine, pad_id, ev.batch_size, chunk)])
                out["regression_nll"] = sum(t for t, _ in nll) / max(1, sum(n for _, n in nll))
    finally:
        model.train(was_training)
    return out
