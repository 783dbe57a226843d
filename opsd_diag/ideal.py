"""The ideal-gradient predictor (SIGNALS.md): does a teacher/context/signal push the student the right way?

At a node u = (x, y_<t) of a student rollout, candidate next tokens K get success probabilities S_k
estimated by m student continuations each (our estimator; the published one was not available).
With p̃, q̃ the student and teacher restricted to K and renormalised, the success of the student at
u is V = Σ p̃_k S_k, and its gradient w.r.t. the student's logits z_K is the ideal direction

    g*_k = ∂V/∂z_k = p̃_k (S_k − V)                      (softmax Jacobian applied to S).

Every distillation objective also moves z_K. We write each as the *descent* direction d = −∇_z D
of its loss D on the restricted support (or +∇_z of the policy-gradient surrogate), so "d aligned
with g*" means "training on this signal raises success" (derivations; checked by finite
differences in tests/test_ideal.py):

    reverse KL   D = KL(p̃ ‖ q̃):  d_k = p̃_k (f_k − Σ_j p̃_j f_j),  f = log q̃ − log p̃
    forward KL   D = KL(q̃ ‖ p̃):  d = q̃ − p̃        (the same form with f = q̃ / p̃)
    JSD_β        D = β KL(q̃‖m̃) + (1−β) KL(p̃‖m̃), m̃ = β q̃ + (1−β) p̃:
                 ∂D/∂p̃_k = (1−β) log(p̃_k/m̃_k) exactly (the other terms cancel), so the same
                 form with f = (1−β) log(m̃/p̃); β = 0 is forward KL and β = 1 reverse KL,
                 special-cased as in signals.generalized_jsd (the formula itself vanishes there)
    sampled      surrogate A log p̃(y_t), A a stop-gradient advantage (r_opd, a_d2, a_ex):
                 d = A (e_{y_t} − p̃)

Alignment = cos(g*, d) (NaN when either vector is zero: no information either way). The
first-order gain ⟨g*, d/|d|⟩ is the success gained per unit logit step along d (0 when d = 0);
it is the verdict's ranking score. Teacher advantage A_T = Σ_k (q̃_k − p̃_k) S_k: positive when
following the teacher at u raises success. Ŝ, ĝ*, V̂ and Â_T are unbiased, with errors O(1/√m).

Caveat (outcome-based): S only sees the final answer. After an early mistake, a compensating wrong
token can have the highest Ŝ while the teacher's correct step has Ŝ = 0, so on incorrect rollouts
a teacher that follows the correct solution can show A_T < 0 at nodes after the first error (seen
on the toy zoo's 6-step problems).

Cost: one node per depth window [2^i, 2^(i+1)) of each rollout (depth = pos + 1), the most
uncertain (highest h_s) position of the window; nodes of incorrect rollouts first, round-robin
over rollouts; nodes are admitted in that order until the next one would overspend the budget of
continuations, so the cost grows with the budget, not with rollout length. Continuations stop at
EOS or after min(ideal.max_continuation_length, max_completion_length − depth) tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats
from scipy.special import logsumexp
from tqdm.auto import tqdm

from opsd_diag import analysis, signals, store, verdict
from opsd_diag.config import IdealSpec
from opsd_diag.errors import OpsdError
from opsd_diag import fast_decode
from opsd_diag.rollout import Completion, SamplingSettings, sample_hf, sample_vllm
from opsd_diag.scoring import completion_hidden, lm_logits
from opsd_diag.verify import is_correct

OBJECTIVES = ("rev_kl", "fwd_kl", "jsd", "r_opd", "a_d2", "a_ex")
SAMPLED = ("r_opd", "a_d2", "a_ex")  # single-sample signals, read from the tokens table
ESTIMATOR = ("our estimator (SIGNALS.md, ideal-gradient predictor): m student continuations per "
             "candidate token, checked by the answer checker")

# ------------------------------------------------------------------------------ pure maths (1 node)


def restrict(logp_k) -> tuple[np.ndarray, float]:
    """Full-vocabulary log-probs of the candidates -> (renormalised log p̃ over K, mass of K)."""
    logp_k = np.asarray(logp_k, dtype=np.float64)  # [K]
    lse = float(logsumexp(logp_k))
    return logp_k - lse, math.exp(lse)


def node_value(p, s) -> float:
    """V = Σ p̃_k S_k: the student's success probability at the node (restricted to K)."""
    return float(np.dot(p, s))


def ideal_direction(p, s) -> np.ndarray:
    """g*_k = ∂V/∂z_k = p̃_k (S_k − V)."""
    p, s = np.asarray(p, dtype=np.float64), np.asarray(s, dtype=np.float64)
    return p * (s - np.dot(p, s))  # [K]


def objective_direction(p, f) -> np.ndarray:
    """d_k = p̃_k (f_k − Σ_j p̃_j f_j): the softmax Jacobian applied to a per-token signal f."""
    p, f = np.asarray(p, dtype=np.float64), np.asarray(f, dtype=np.float64)
    return p * (f - np.dot(p, f))  # [K]


def direction_reverse_kl(logp, logq) -> np.ndarray:
    """−∇_z KL(student ‖ teacher) on K: f = log q̃ − log p̃."""
    logp, logq = np.asarray(logp, dtype=np.float64), np.asarray(logq, dtype=np.float64)
    return objective_direction(np.exp(logp), logq - logp)


def direction_forward_kl(logp, logq) -> np.ndarray:
    """−∇_z KL(teacher ‖ student) on K: q̃ − p̃."""
    return np.exp(np.asarray(logq, dtype=np.float64)) - np.exp(np.asarray(logp, dtype=np.float64))


def direction_jsd(logp, logq, beta: float) -> np.ndarray:
    """−∇_z JSD_β(student, teacher) on K: f = (1−β) log(m̃/p̃); ends as in signals.generalized_jsd."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return direction_forward_kl(logp, logq)
    if beta == 1.0:
        return direction_reverse_kl(logp, logq)
    logp, logq = np.asarray(logp, dtype=np.float64), np.asarray(logq, dtype=np.float64)
    log_mix = np.logaddexp(math.log(beta) + logq, math.log1p(-beta) + logp)  # [K] log m̃
    return objective_direction(np.exp(logp), (1.0 - beta) * (log_mix - logp))


def direction_sampled(p, sampled_index: int, advantage: float) -> np.ndarray:
    """+∇_z of the surrogate A·log p̃(y_t), A held constant: A (e_{y_t} − p̃)."""
    p = np.asarray(p, dtype=np.float64)
    e = np.zeros_like(p)
    e[sampled_index] = 1.0
    return float(advantage) * (e - p)  # [K]; NaN advantage (no base model) gives NaN


def cosine(a, b) -> float:
    """cos(a, b); NaN when either vector is zero or not finite (nothing to align)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if not (np.isfinite(na) and np.isfinite(nb)) or na <= 1e-300 or nb <= 1e-300:
        return math.nan
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def gain(g, d) -> float:
    """⟨g*, d/|d|⟩: first-order success gain per unit logit step along d; 0 for d = 0."""
    g, d = np.asarray(g, dtype=np.float64), np.asarray(d, dtype=np.float64)
    nd = np.linalg.norm(d)
    if not np.isfinite(nd):
        return math.nan
    return 0.0 if nd <= 1e-300 else float(np.dot(g, d) / nd)


def teacher_advantage(p, q, s) -> float:
    """A_T = Σ_k (q̃_k − p̃_k) S_k: success of following the teacher minus the student's, at the node."""
    return float(np.dot(np.asarray(q, dtype=np.float64) - np.asarray(p, dtype=np.float64), s))


def value_spread(s) -> float:
    """max_k S_k − min_k S_k: how much the choice at this node matters."""
    s = np.asarray(s, dtype=np.float64)
    return float(s.max() - s.min()) if s.size else math.nan


def node_metrics(logp_k, logq_k, s, sampled_index: int, advantages: dict[str, float],
                 jsd_beta: float = 0.5) -> dict:
    """Every per-node quantity for one teacher config; ``logp_k``/``logq_k`` are full-vocabulary
    log-probs of the candidates (restricted and renormalised here), ``s`` the success estimates."""
    logp, p_mass = restrict(logp_k)
    logq, q_mass = restrict(logq_k)
    p, q = np.exp(logp), np.exp(logq)
    s = np.asarray(s, dtype=np.float64)
    g = ideal_direction(p, s)
    dirs = {"rev_kl": direction_reverse_kl(logp, logq), "fwd_kl": direction_forward_kl(logp, logq),
            "jsd": direction_jsd(logp, logq, jsd_beta)}
    for name in SAMPLED:
        dirs[name] = direction_sampled(p, sampled_index, advantages.get(name, math.nan))
    out = {"p_tilde": p, "q_tilde": q, "p_mass": p_mass, "q_mass": q_mass, "V": node_value(p, s),
           "V_teacher": node_value(q, s), "A_T": teacher_advantage(p, q, s), "spread": value_spread(s),
           "g_norm": float(np.linalg.norm(g))}
    for name, d in dirs.items():
        out[f"align_{name}"] = cosine(g, d)
        out[f"gain_{name}"] = gain(g, d)
    return out


# ------------------------------------------------------------------------------ node selection


def plan_nodes(student_tokens: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    """Candidate nodes in priority order: per rollout the highest-h_s position of each depth window.

    ``student_tokens``: rollout_id, pos, h_s (one config's rows); ``rollouts``: rollout_id,
    problem_id, correct. Order: incorrect, then correct, then unchecked rollouts; within a group,
    round-robin so that a small budget still covers many prompts (CIs resample prompts): the best
    node of one rollout of every problem, then of a second rollout of every problem, ..., then
    every rollout's second-best node, ...; ties by higher h_s, then rollout id.
    """
    t = student_tokens[["rollout_id", "pos", "h_s"]].dropna()
    t = t.assign(depth=t["pos"].astype(int) + 1)
    t["window"] = np.floor(np.log2(t["depth"].to_numpy())).astype(int)
    best = t.loc[t.groupby(["rollout_id", "window"], sort=True)["h_s"].idxmax()]
    best = best.merge(rollouts[["rollout_id", "problem_id", "correct"]], on="rollout_id", validate="many_to_one")
    known = best["correct"].notna()
    best["group"] = np.where(~known, 2, np.where(best["correct"].where(known, False).astype(bool), 1, 0))
    best["rank"] = best.groupby("rollout_id")["h_s"].rank(method="first", ascending=False).astype(int) - 1
    top = best.groupby("rollout_id")[["h_s", "group", "problem_id"]].agg({"h_s": "max", "group": "first",
                                                                        "problem_id": "first"}).reset_index()
    top = top.sort_values(["h_s", "rollout_id"], ascending=[False, True])
    top["sample_rank"] = top.groupby(["group", "problem_id"]).cumcount()  # rollout's rank within its problem
    best = best.merge(top[["rollout_id", "sample_rank"]], on="rollout_id")
    best = best.sort_values(["group", "rank", "sample_rank", "h_s", "rollout_id"],
                            ascending=[True, True, True, False, True])
    return best.reset_index(drop=True)[["rollout_id", "problem_id", "pos", "depth", "window", "h_s",
                                        "correct", "group", "rank", "sample_rank"]]


def within_budget(costs: Sequence[int], budget: int) -> list[bool]:
    """Nodes in strict priority order until the first one that does not fit: a prefix of the plan.

    Never skipping ahead keeps the priorities honest and means no work is spent on nodes past the
    budget (a first-fit search would compute candidates for the whole plan)."""
    left, taken = budget, []
    for c in costs:
        ok = bool(taken[-1:] != [False]) and 0 <= c <= left
        taken.append(ok)
        left -= c if ok else 0
    return taken


# ------------------------------------------------------------------------------ estimation


@dataclass
class NodeJob:
    """One node's continuation work: sample from ``prompt + prefix + [k]`` for each candidate k."""
    prompt: list[int]          # the student's prompt ids
    prefix: list[int]          # y_<t
    candidates: list[int]      # K, sampled token first
    answer: str
    max_new: int               # continuation length left at this node

    def needs_sampling(self, k: int, stop_ids: Sequence[int]) -> bool:
        return k not in stop_ids and self.max_new > 0

    def cost(self, m: int, stop_ids: Sequence[int]) -> int:
        return m * sum(self.needs_sampling(k, stop_ids) for k in self.candidates)


Sampler = Callable[[list[list[int]], SamplingSettings], list[list[Completion]]]


class Estimate(NamedTuple):
    s_hat: np.ndarray      # [K] success rate per candidate
    n_samples: np.ndarray  # [K] continuations behind it (0: the text ends there, checked exactly)
    tokens: int            # continuation tokens generated for this node


def estimate_success(jobs: list[NodeJob], sampler: Sampler, decode: Callable[[list[int]], str], *, m: int,
                     stop_ids: Sequence[int], checker: str, temperature: float, top_p: float, seed: int,
                     batch_rows: int, on_progress: Callable[[int], None] | None = None
                     ) -> list[Estimate]:
    """One Estimate per job. All continuations of a node go into one generate call and
    several nodes share a call while they fit in ``batch_rows``. A candidate that ends the text
    (a stop id, or no length left) is checked once, exactly."""
    groups: list[list[int]] = []
    rows = 0
    for i, job in enumerate(jobs):
        need = job.cost(m, stop_ids)
        if not groups or rows + need > batch_rows:
            groups.append([])
            rows = 0
        groups[-1].append(i)
        rows += need
    results: dict[int, Estimate] = {}
    for g_idx, members in enumerate(groups):
        prompts, owners = [], []
        for i in members:
            job = jobs[i]
            for c, k in enumerate(job.candidates):
                if job.needs_sampling(k, stop_ids):
                    prompts.append(list(job.prompt) + list(job.prefix) + [k])
                    owners.append((i, c))
        completions = []
        if prompts:
            max_new = max(jobs[i].max_new for i in members)
            settings = SamplingSettings(m, temperature, top_p, max_new, (seed * 1_000_003 + g_idx * 7_919) % 2**31,
                                        max(1, len(prompts) * m))
            completions = sampler(prompts, settings)
            if on_progress is not None:
                on_progress(len(prompts) * m)
        wins = {i: [[] for _ in jobs[i].candidates] for i in members}
        n_tokens = dict.fromkeys(members, 0)
        for (i, c), conts in zip(owners, completions):
            job = jobs[i]
            head = list(job.prefix) + [job.candidates[c]]
            wins[i][c] = [is_correct(decode(head + list(x.ids[:job.max_new])), job.answer, checker) for x in conts]
            n_tokens[i] += sum(len(x.ids[:job.max_new]) for x in conts)
        for i in members:
            job = jobs[i]
            s, n = np.zeros(len(job.candidates)), np.zeros(len(job.candidates), dtype=int)
            for c, k in enumerate(job.candidates):
                if wins[i][c]:
                    s[c], n[c] = np.mean(wins[i][c]), len(wins[i][c])
                else:  # the text ends here: its correctness is known exactly
                    s[c] = float(is_correct(decode(list(job.prefix) + [k]), job.answer, checker))
            results[i] = Estimate(s, n, n_tokens[i])
    return [results[i] for i in range(len(jobs))]


@torch.no_grad()
def node_logprobs(model, prompts: list[list[int]], prefixes: list[list[int]], pad_id: int,
                  temperature: float) -> torch.Tensor:
    """Full-vocabulary log-probs of the next token after ``prompt + prefix``, float64 [n, V]."""
    comps = [list(p) + [pad_id] for p in prefixes]  # a placeholder token: its row predicts it from the prefix
    hidden = completion_hidden(model, prompts, comps, pad_id)  # [Σ len, H]
    ends = torch.tensor(np.cumsum([len(c) for c in comps]) - 1)  # [n]
    return signals.log_probs(lm_logits(model, hidden[ends.to(hidden.device)]), temperature).double().cpu()


# ------------------------------------------------------------------------------ orchestration


def _ids(x) -> list[int]:
    return [int(v) for v in x]


def _check_spec(spec: IdealSpec) -> None:
    """IdealSpec validates on construction; a spec built around validation is still refused here."""
    for key, value, lo, hi in (("budget", spec.budget, 1, None), ("k", spec.k, 1, 32), ("m", spec.m, 1, 256)):
        if not isinstance(value, int) or value < lo or (hi is not None and value > hi):
            rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise OpsdError(f"ideal.{key} must be an integer {rng}, got {value!r}: fix the ideal section of the config")


def skipped(reason: str, **extra) -> dict:
    return {"status": "skipped", "reason": f"skipped: {reason}", "estimator": ESTIMATOR, **extra}


def _sampler(prep) -> Sampler:
    cfg = prep.cfg
    if cfg.sampling.backend == "vllm":
        return lambda prompts, s: sample_vllm(cfg.student.model, prompts, s, prep.stop_ids, cfg.student.dtype,
                                              cfg.student.trust_remote_code)
    sample = fast_decode.pick(sample_hf)  # $OPSD_SAMPLING_ENGINE: hf (default) or static
    return lambda prompts, s: sample(prep.student, prep.tok, prompts, s, prep.stop_ids)


def _build_jobs(prep, run, spec: IdealSpec, plan: pd.DataFrame, configs: list[str], chunk: int = 16):
    """Walk the plan in priority order, compute K and node log-probs chunk by chunk, admit within budget."""
    cfg = prep.cfg
    cap = min(spec.max_continuation_length or cfg.sampling.max_completion_length, cfg.sampling.max_completion_length)
    ro = run["rollouts"].set_index("rollout_id")
    tau, pad = cfg.scoring_temperature, prep.tok.pad_token_id
    left, admitted, full, lo = spec.budget, [], False, 0
    while lo < len(plan) and not full:
        # at most this many more nodes can fit (|K| >= k): no candidates computed for nodes past the budget
        size = int(np.clip(left // (spec.m * spec.k), 1, chunk))
        part = plan.iloc[lo:lo + size]
        lo += size
        rows = [ro.loc[r] for r in part["rollout_id"]]
        prefixes = [_ids(r["completion_ids"])[:t] for r, t in zip(rows, part["pos"])]
        sampled = [int(r["completion_ids"][t]) for r, t in zip(rows, part["pos"])]
        s_lp = node_logprobs(prep.student, [_ids(r["prompt_ids.student"]) for r in rows], prefixes, pad, tau)
        t_lp = {c: node_logprobs(prep.teacher_models[c], [_ids(r[f"prompt_ids.{c}"]) for r in rows], prefixes, pad, tau)
                for c in configs}
        for j, (node, r) in enumerate(zip(part.itertuples(index=False), rows)):
            cands = [sampled[j]] + s_lp[j].topk(spec.k).indices.tolist()
            for c in configs:
                cands += t_lp[c][j].topk(spec.k).indices.tolist()
            cands = list(dict.fromkeys(int(k) for k in cands))
            problem = prep.problems[int(r["problem_index"])]
            if problem["id"] != node.problem_id:
                raise OpsdError("the run's problems differ from the config's: run the predictor with the "
                                "run's own config.yaml")
            job = NodeJob(_ids(r["prompt_ids.student"]), prefixes[j], cands, str(problem["answer"]),
                          max(0, min(cap, cfg.sampling.max_completion_length - node.depth)))
            cost = job.cost(spec.m, prep.stop_ids)
            if not within_budget([cost], left)[0]:  # the plan is taken as a prefix
                full = True
                break
            left -= cost
            admitted.append((node, r, job, cost, s_lp[j][cands].numpy(),
                             {c: t_lp[c][j][cands].numpy() for c in configs}))
    return admitted


def run_ideal(prep, run_dir: Path, spec: IdealSpec | None = None, *, write_summary: bool = True,
              show_progress: bool = False) -> dict:
    """Ideal-gradient analysis of a finished run: writes ``nodes.parquet`` and returns per-config
    aggregates with bootstrap CIs over prompts. With ``write_summary`` the result and the
    verdicts/ranking (``opsd_diag.verdict``) are also stored in ``summary.json`` under ``ideal``,
    ``verdicts`` and ``ranking``. No answers, disabled or a budget too small for one node give
    ``{"status": "skipped", "reason": "skipped: ..."}``, never an exception."""
    spec = spec or prep.cfg.ideal or IdealSpec()
    _check_spec(spec)
    run_dir = Path(run_dir)
    run = store.load_run(run_dir)
    if not spec.enabled:
        result = skipped("the ideal-gradient predictor is disabled (ideal.enabled: false)")
    elif run["rollouts"].empty or run["tokens"].empty:
        result = skipped("the run has no scored rollouts")
    elif run["rollouts"]["correct"].notna().sum() == 0 or all(p.get("answer") is None for p in prep.problems):
        result = skipped("no answers to check (the data set has no answer field)")
    else:
        result = _analyse(prep, run, run_dir, spec, show_progress)
    if result["status"] != "ok":  # never leave nodes of an earlier analysis next to a skipped one
        (run_dir / "nodes.parquet").unlink(missing_ok=True)
    if write_summary:
        attach_to_summary(run_dir, run["summary"], result)
    return result


def _analyse(prep, run, run_dir: Path, spec: IdealSpec, show_progress: bool = False) -> dict:
    cfg = prep.cfg
    configs = [t.name for t in cfg.teachers]
    tokens = run["tokens"]
    plan = plan_nodes(tokens[tokens["config"] == configs[0]], run["rollouts"][run["rollouts"]["correct"].notna()])
    admitted = _build_jobs(prep, run, spec, plan, configs)
    if not admitted:
        return skipped(f"ideal.budget={spec.budget} is too small for one node (a node costs m x |K| = "
                       f"{spec.m} x up to {1 + spec.k * (1 + len(configs))} continuations)", budget=spec.budget)
    jobs = [a[2] for a in admitted]
    with tqdm(total=sum(a[3] for a in admitted), desc="ideal continuations", unit="cont",
              disable=not show_progress) as bar:
        estimates = estimate_success(
            jobs, _sampler(prep), lambda ids: prep.tok.decode(ids, skip_special_tokens=True), m=spec.m,
            stop_ids=prep.stop_ids, checker=cfg.analysis.checker, temperature=cfg.sampling.temperature,
            top_p=cfg.sampling.top_p, seed=spec.seed, batch_rows=max(cfg.sampling.batch_size, 1),
            on_progress=bar.update)
    tok_idx = tokens.set_index(["config", "rollout_id", "pos"])[["kl_rev", "jsd", *SAMPLED]].sort_index()
    rows = []
    for n_id, ((node, r, job, cost, s_lp, t_lps), (s_hat, n_used, _)) in enumerate(zip(admitted, estimates)):
        for c in configs:
            sig = tok_idx.loc[(c, node.rollout_id, node.pos)]
            met = node_metrics(s_lp, t_lps[c], s_hat, 0, {a: float(sig[a]) for a in SAMPLED},
                               cfg.scoring.jsd_beta)
            rows.append({
                "node_id": n_id, "config": c, "rollout_id": int(node.rollout_id), "problem_id": node.problem_id,
                "problem_index": int(r["problem_index"]), "pos": int(node.pos), "depth": int(node.depth),
                "window": int(node.window), "h_s": float(node.h_s), "correct": bool(node.correct),
                "token_id": job.candidates[0], "cand_ids": job.candidates, "sampled_index": 0,
                "n_samples": n_used.tolist(), "s_hat": s_hat.tolist(), "p_tilde": met.pop("p_tilde").tolist(),
                "q_tilde": met.pop("q_tilde").tolist(), "cost": int(cost), "max_new_tokens": job.max_new,
                "kl_rev": float(sig["kl_rev"]), "jsd": float(sig["jsd"]),
                **{a: float(sig[a]) for a in SAMPLED}, **met})
    nodes = pd.DataFrame(rows)
    store.atomic_write_parquet(run_dir / "nodes.parquet", nodes)
    return {"status": "ok", "estimator": ESTIMATOR, "budget": spec.budget, "k": spec.k, "m": spec.m,
            "seed": spec.seed, "continuations_used": int(sum(a[3] for a in admitted)),
            "continuation_tokens": int(sum(e.tokens for e in estimates)),
            "prefix_tokens": int(sum(a[3] * (len(a[2].prompt) + len(a[2].prefix) + 1) for a in admitted)),
            "n_nodes": len(admitted), "n_prompts": int(nodes["problem_id"].nunique()),
            "jsd_beta": cfg.scoring.jsd_beta,
            "configs": aggregate(nodes, n_boot=cfg.analysis.bootstrap, seed=cfg.sampling.seed)}


# ------------------------------------------------------------------------------ aggregates


def _ci(values, prompts, n_boot: int, seed: int) -> dict:
    values = np.asarray(values, dtype=float)
    est, lo, hi = analysis.bootstrap_mean_over_prompts(values, prompts, n_boot, seed)
    n = int(pd.Series(np.asarray(prompts))[np.isfinite(values)].nunique())
    return {"estimate": est, "lo": lo, "hi": hi, "n_prompts": n, "n_nodes": int(np.isfinite(values).sum())}


def _spearman(x, y) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return math.nan
    return float(stats.spearmanr(x[ok], y[ok])[0])


def aggregate(nodes: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict:
    """Per config: A_T, alignment (mean and P(> 0)) and gain per objective, on all / incorrect /
    correct rollouts, with bootstrap CIs over prompts; Spearman of kl_rev and jsd vs alignment."""
    out = {}
    for config, df in nodes.groupby("config", sort=True):
        split = {"all": df, "incorrect": df[~df["correct"].astype(bool)], "correct": df[df["correct"].astype(bool)]}
        entry = {"n_nodes": int(len(df)), "n_prompts": int(df["problem_id"].nunique()),
                 "n_informative": int((df["g_norm"] > 0).sum()),
                 "teacher_advantage": {s: _ci(d["A_T"], d["problem_id"], n_boot, seed) for s, d in split.items()},
                 "value": {s: _ci(d["V"], d["problem_id"], n_boot, seed) for s, d in split.items()},
                 "alignment": {}, "gain": {}, "spearman": {"kl_rev": {}, "jsd": {}}}
        for o in OBJECTIVES:
            a = f"align_{o}"
            entry["alignment"][o] = {
                s: {"mean": _ci(d[a], d["problem_id"], n_boot, seed),
                    "p_positive": _ci(np.where(np.isfinite(d[a]), d[a] > 0, np.nan), d["problem_id"], n_boot, seed)}
                for s, d in split.items()}
            entry["gain"][o] = {s: _ci(d[f"gain_{o}"], d["problem_id"], n_boot, seed) for s, d in split.items()}
            for div in ("kl_rev", "jsd"):
                entry["spearman"][div][o] = _spearman(df[div], df[a])
        out[str(config)] = entry
    return out


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def attach_to_summary(run_dir: Path, summary: dict, result: dict) -> dict:
    """Store the result plus verdicts and ranking in ``summary.json`` (atomically); returns it."""
    summary = {**summary, "ideal": _jsonable(result)}
    summary.update(_jsonable(verdict.verdicts(summary, summary["ideal"])))
    store.atomic_write_json(Path(run_dir) / "summary.json", summary)
    return summary
