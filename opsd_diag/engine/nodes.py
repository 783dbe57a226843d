"""Where the predictor looks and what it costs: node selection, continuation jobs, success estimates.

Cost: one node per depth window [2^i, 2^(i+1)) of each rollout (depth = pos + 1), the most
uncertain (highest h_s) position of the window; nodes of incorrect rollouts first, round-robin
over rollouts; nodes are admitted in that order until the next one would overspend the budget of
continuations, so the cost grows with the budget, not with rollout length. Continuations stop at
EOS or after min(ideal.max_continuation_length, max_completion_length − depth) tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from opsd_diag.core import signals
from opsd_diag.engine.sampling import Completion
from opsd_diag.engine.scoring import completion_hidden, lm_logits
from opsd_diag.io.verify import is_correct
from opsd_diag.config.settings import SamplingSettings, derive_seed


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


PUSH = "kl_rev"  # where the objective pushes hardest: the student's full-vocabulary reverse KL to the teacher


def plan_acting(tokens: pd.DataFrame, rollouts: pd.DataFrame, configs: list[str]) -> pd.DataFrame:
    """Nodes where training acts, in priority order: per config, per rollout the position of each depth window
    where the config's objective pushes hardest (highest ``PUSH``: large where a confident teacher disagrees
    with the student), on correct and incorrect rollouts alike.

    ``tokens``: config, rollout_id, pos, h_s, kl_rev (the token table); ``rollouts``: rollout_id, problem_id,
    correct. Each config's order is ``plan_nodes``' round-robin without the correctness groups (every rollout's
    best node, a problem's rollouts by their best push, before any second-best); the configs are interleaved
    (each config's first node, then each one's second, ...). A position chosen by several configs is one node;
    ``acting_for`` lists them. Columns: ``plan_nodes``' plus ``push`` (the first chooser's) and ``acting_for``.
    """
    plans = []
    for c in configs:
        t = tokens.loc[tokens["config"] == c, ["rollout_id", "pos", "h_s", PUSH]].dropna(subset=[PUSH])
        t = t.assign(depth=t["pos"].astype(int) + 1).rename(columns={PUSH: "push"})
        t["window"] = np.floor(np.log2(t["depth"].to_numpy())).astype(int)
        best = t.loc[t.groupby(["rollout_id", "window"], sort=True)["push"].idxmax()]
        best = best.merge(rollouts[["rollout_id", "problem_id", "correct"]], on="rollout_id", validate="many_to_one")
        best["rank"] = best.groupby("rollout_id")["push"].rank(method="first", ascending=False).astype(int) - 1
        top = best.groupby("rollout_id").agg(top=("push", "max"), problem_id=("problem_id", "first")).reset_index()
        top = top.sort_values(["top", "rollout_id"], ascending=[False, True])
        top["sample_rank"] = top.groupby("problem_id").cumcount()
        best = best.merge(top[["rollout_id", "sample_rank"]], on="rollout_id")
        best = best.sort_values(["rank", "sample_rank", "push", "rollout_id"], ascending=[True, True, False, True])
        plans.append(best.reset_index(drop=True).assign(order=lambda d: np.arange(len(d)), config=c))
    cols = ["rollout_id", "problem_id", "pos", "depth", "window", "h_s", "correct", "group", "rank", "sample_rank",
            "push", "acting_for"]
    if not plans:
        return pd.DataFrame(columns=cols)
    both = pd.concat(plans).sort_values(["order", "config"], key=lambda s: s.map(configs.index) if s.name == "config"
                                        else s, kind="stable")
    chooser = both.groupby(["rollout_id", "pos"], sort=False)["config"].agg(list).rename("acting_for")
    first = both.drop_duplicates(["rollout_id", "pos"]).join(chooser, on=["rollout_id", "pos"])
    first["group"] = np.where(first["correct"].astype(bool), 1, 0)
    return first.reset_index(drop=True)[cols]


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
            settings = SamplingSettings(num_samples=m, temperature=temperature, top_p=top_p, max_new_tokens=max_new,
                                        seed=derive_seed(seed, 0, g_idx), batch_size=max(1, len(prompts) * m))
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


@dataclass(frozen=True)
class NodeModels:
    """The models the predictor runs: the student (candidates and continuations) and each config's scorer."""
    tok: object
    student: torch.nn.Module
    teachers: dict[str, torch.nn.Module]  # config name -> the model that scores its view (the student for `self`)
    stop_ids: list[int]
    cross: dict = field(default_factory=dict)  # config name -> engine.cross_nodes.CrossSide (another tokenizer)


def _ids(x) -> list[int]:
    return [int(v) for v in x]


def _teacher_topk(models: NodeModels, config: str, t_logp: torch.Tensor, k: int, prefix: list[int]) -> list[int]:
    """A config's top-k candidates as student ids (a cross config's: the student tokens its top-k spell
    after its own ``prefix`` ids)."""
    side = models.cross.get(config)
    return t_logp.topk(k).indices.tolist() if side is None else side.topk(t_logp, k, prefix)


def build_jobs(models: NodeModels, rollouts: pd.DataFrame, problems: list[dict], plan: pd.DataFrame,
               configs: list[str], *, budget: int, k: int, m: int, cap: int, max_completion_length: int,
               temperature: float, chunk: int = 16) -> list[tuple]:
    """Walk the plan in priority order, compute K and node log-probs chunk by chunk, admit within budget.

    Returns (node, rollout row, NodeJob, cost, student log-probs of K, {config: teacher log-probs of K},
    {config: positions in K of that config's own candidates}) per admitted node, K being the union
    of every config's candidates (each estimated once); ``cap`` bounds each continuation. A config in
    ``models.cross`` (another tokenizer) is scored by its ``engine.cross_nodes.CrossSide``, at nodes the plan took from
    its one-token spans (``cross_nodes.plan_rows``).
    """
    ro = rollouts.set_index("rollout_id")
    pad = models.tok.pad_token_id
    left, admitted, full, lo = budget, [], False, 0
    while lo < len(plan) and not full:
        # at most this many more nodes can fit (|K| >= k): no candidates computed for nodes past the budget
        size = int(np.clip(left // (m * k), 1, chunk))
        part = plan.iloc[lo:lo + size]
        lo += size
        rows = [ro.loc[r] for r in part["rollout_id"]]
        prefixes = [_ids(r["completion_ids"])[:t] for r, t in zip(rows, part["pos"])]
        sampled = [int(r["completion_ids"][t]) for r, t in zip(rows, part["pos"])]
        s_lp = node_logprobs(models.student, [_ids(r["prompt_ids.student"]) for r in rows], prefixes, pad,
                             temperature)
        t_prompts = {c: [_ids(r[f"prompt_ids.{c}"]) for r in rows] for c in configs}
        t_pre = {c: side.prefixes([_ids(r["completion_ids"]) for r in rows], list(part["pos"]), c)
                 for c, side in models.cross.items() if c in configs}  # a cross config reads its own ids of y_<t
        t_lp = {c: node_logprobs(models.teachers[c], t_prompts[c], t_pre.get(c, prefixes),
                                 models.cross[c].pad_id if c in t_pre else pad, temperature)
                for c in configs}  # [n, V] of each config's own vocabulary
        for j, (node, r) in enumerate(zip(part.itertuples(index=False), rows)):
            own = {c: [sampled[j], *s_lp[j].topk(k).indices.tolist(),
                       *_teacher_topk(models, c, t_lp[c][j], k, t_pre.get(c, prefixes)[j])]
                   for c in configs}  # each config's own candidates: the sampled token, its and the student's top-k
            cands = list(dict.fromkeys(int(x) for c in configs for x in own[c]))  # the union: one estimate each
            own = {c: [cands.index(int(x)) for x in dict.fromkeys(int(x) for x in ks)] for c, ks in own.items()}
            problem = problems[int(r["problem_index"])]
            if problem["id"] != node.problem_id:
                raise ValueError("the run's problems differ from the config's")
            job = NodeJob(_ids(r["prompt_ids.student"]), prefixes[j], cands, str(problem["answer"]),
                          max(0, min(cap, max_completion_length - node.depth)))
            cost = job.cost(m, models.stop_ids)
            if not within_budget([cost], left)[0]:  # the plan is taken as a prefix
                full = True
                break
            left -= cost
            q = {c: t_lp[c][j][cands].numpy() if c not in t_pre else models.cross[c].logprobs(
                models.teachers[c], t_prompts[c][j], t_pre[c][j], t_lp[c][j], cands, temperature)
                for c in configs}  # a cross config: NaN where a candidate has no ids
            admitted.append((node, r, job, cost, s_lp[j][cands].numpy(), q, own))
    return admitted
