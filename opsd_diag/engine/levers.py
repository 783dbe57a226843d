"""The diagnosis' levers (``lookahead.levers``): per token mask, the share of the tokens and of the signal it keeps,
its lookahead, and a lever recommendation; stored in ``summary.json`` under ``levers``.

For one (teacher config, loss method): the training section's (its teacher, its per-token loss) when it has
one the lookahead can step, else the lookahead's with the largest log-likelihood-gap change. Each candidate
mask (``CANDIDATES``, the lever study's) is applied to the step half of the diagnosis rollouts with the
initial student and the teacher (``core.token_mask``: the kept share of tokens and of the summed |signal|),
then looked ahead on (``engine.lookahead.take_steps`` with the mask: the trainer's step, normalised by the kept
tokens) and measured on the other half like the lookahead, the same seeds for every mask. A lever is a change
away from all-token training, so the recommendation moves off it only on evidence: each candidate's lookahead Δll
(the correct-minus-incorrect log-likelihood gap change, the lookahead's lower-variance proxy of the success change)
is compared with all-token training's prompt by prompt (``dll_vs_all``, a paired difference with its interval),
and the recommendation is the candidate with the largest difference among those whose interval lies above 0, else
all tokens (``core.stats.beyond_noise``; rule 2 of the lever study, benchmarks/validity/levers/plan.yaml amendment
4). With ``lookahead.forgetting``, each candidate's stepped student also samples the forgetting set again (the lookahead's seeds and measure): its pass@1 change. Where the diagnosis has
ideal-gradient nodes (``ideal``), each candidate also gets the signal's alignment on the tokens it keeps: the mean
``cos(g*, d)`` of the method's objective over the nodes (of every rollout, both halves) whose token the mask keeps,
with an interval over prompts.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from opsd_diag.config.levers import CANDIDATES, TokenMaskSpec
from opsd_diag.config.training_fit import training_teacher
from opsd_diag.core import token_mask
from opsd_diag.core.stats import beyond_noise, bootstrap_mean_over_prompts, ci_dict, jsonable, paired_difference
from opsd_diag.engine.scoring import completion_hidden
from opsd_diag.engine.train_step import MicroBatch, Roles, auto_chunk_size, logprobs_of, partner_hidden, token_scores
from opsd_diag.io import store


def target(cfg, summary: dict, methods: tuple[str, ...]) -> tuple[str, str]:
    """(config, loss method) the levers are diagnosed for; ``methods``: the losses a lookahead can step."""
    tr = cfg.training
    if tr is not None and tr.loss_method in methods:
        teacher = training_teacher(cfg)
        if teacher is not None:
            return teacher.name, tr.loss_method
    la = (summary.get("lookahead") or {}).get("configs") or {}
    rows = [(r["dll"]["estimate"], c, m) for c, ms in la.items() for m, r in ms.items()
            if isinstance(r, dict) and "dll" in r and r["dll"].get("estimate") is not None]
    if rows:
        _, c, m = max(rows)
        return c, m
    return cfg.teachers[0].name, list(cfg.lookahead.methods)[0]


def _ids(column) -> list[list[int]]:
    return [[int(t) for t in x] for x in column]


def micro_batches(rows, config: str, base_view: str, size: int) -> list[MicroBatch]:
    ids = _ids
    out = []
    for lo in range(0, len(rows), size):
        b = rows.iloc[lo:lo + size]
        s, t = ids(b["prompt_ids.student"]), ids(b[f"prompt_ids.{config}"])
        out.append(MicroBatch(lo, [int(i) for i in b["problem_index"]], s, t, t if base_view == "teacher" else s,
                              ids(b["completion_ids"]), [bool(f) for f in b["finished"]],
                              [None if c != c else bool(c) for c in b["correct"]], logprobs_of(b)))
    return out


OBJECTIVE = {"opd": "r_opd", "jsd": "jsd", "opd2": "a_d2", "exopd": "a_ex"}  # a loss's signal among the nodes' objectives


@torch.no_grad()
def kept_flags(roles: Roles, mbs: list[MicroBatch], loss, ref, pad_id: int, masks: dict) -> tuple[dict, torch.Tensor]:
    """Per candidate the kept flags ``[N]`` over ``mbs``' tokens (rollouts concatenated in order), and |signal| ``[N]``."""
    chunk = auto_chunk_size(roles.student.get_output_embeddings().weight.shape[0])
    kept = {k: [] for k in masks}
    signal = []
    for mb in mbs:
        h_s = completion_hidden(roles.student, mb.student_prompts, mb.completions, pad_id)  # [N, H]
        partners = partner_hidden(roles, mb, loss, pad_id, ref, base=roles.base is not None)
        scores = token_scores(roles, mb, h_s, loss, partners, ref, chunk)
        signal.append(scores["signal"])
        for k, m in masks.items():
            kept[k].append(token_mask.keep(m, scores, [len(c) for c in mb.completions], mb.correct,
                                           mb.sampler_logprobs))
    return {k: torch.cat(v) for k, v in kept.items()}, torch.cat(signal)


def node_alignment(nodes: pd.DataFrame, rows: pd.DataFrame, flags: dict, objective: str, n_boot: int,
                   seed: int) -> dict[str, dict]:
    """Per candidate: the mean alignment ``align_<objective>`` of ``nodes`` (one config's) whose token the mask keeps,
    ``flags`` being ``kept_flags`` over ``rows`` (the rollouts, in order); interval over prompts."""
    lengths = [len(c) for c in rows["completion_ids"]]
    start = dict(zip(rows["rollout_id"].astype(int), np.cumsum([0, *lengths[:-1]])))
    at = np.array([start[int(r)] + int(p) for r, p in zip(nodes["rollout_id"], nodes["pos"])], dtype=np.int64)  # [M]
    align = nodes[f"align_{objective}"].to_numpy(dtype=np.float64)  # [M]
    out = {}
    for name, f in flags.items():
        vals = np.where(f.numpy()[at], align, math.nan)
        known = np.isfinite(vals)
        out[name] = {**ci_dict(bootstrap_mean_over_prompts(vals, nodes["problem_id"], n_boot, seed),
                               nodes["problem_id"][known].nunique()), "n_nodes": int(known.sum())}
    return out


def for_diagnosis(run_dir, cfg, student, teacher_models: dict, base, tok, cross: list[str], la,
                  forgetting=None) -> dict:
    """The levers of a finished diagnosis in ``run_dir`` (after its lookahead), into ``summary.json``. ``la``:
    the lookahead's module (``engine.lookahead``), passed in by the diagnosis (which imports both), so this
    module's imports stay within the depth limit. ``forgetting``: the forgetting set's sampler
    (``la.forgetting_sampler``; None without ``lookahead.forgetting``), measured after each candidate's steps."""
    path = Path(run_dir) / "summary.json"
    summary = store.read_json(path)
    config, method = target(cfg, summary, la.LOSS_METHODS)
    if config in cross:
        result = {"status": "skipped", "reason": "a teacher with another tokenizer: no lever lookahead yet"}
    else:
        nodes = store.read_table(run_dir, "nodes", optional=True)
        result = run(cfg, student, teacher_models[config], base, store.read_table(run_dir, "rollouts"), config, method,
                     tok.pad_token_id, la, nodes, forgetting)
    store.atomic_write_json(path, {**store.read_json(path), "levers": jsonable(result)})
    return result


def run(cfg, student, teacher, base, rollouts, config: str, method: str, pad_id: int, lookahead,
        nodes: pd.DataFrame | None = None, forgetting=None) -> dict:
    s, clip = lookahead.settings(cfg)
    loss = lookahead.loss_settings(cfg, method, clip)
    ref = cfg.scoring.exopd_reference if method == "exopd" else None
    step_rows, measure_rows = lookahead.split(rollouts)
    if step_rows.empty or measure_rows.empty:
        return {"status": "skipped", "reason": "the lever lookahead needs scored rollouts with known outcomes on "
                                               "at least two problems"}
    masks = {k: TokenMaskSpec(**v).settings() for k, v in CANDIDATES.items()}
    lps = logprobs_of(rollouts)
    missing = {k: "the rollouts carry no sampler log-probs (a rollouts file without them, or vLLM sampling)"
               for k, m in masks.items() if m.rollouts == "surprising" and (lps is None or None in lps)}
    masks = {k: m for k, m in masks.items() if k not in missing}
    with_base = base if (method == "opd2" or ref == "base") else None
    roles = Roles(student, None, "external", teacher, base, student)
    flags, signal = kept_flags(roles, micro_batches(step_rows, config, cfg.scoring.base_view, s.rollouts_per_step),
                               loss, ref, pad_id, masks)
    shares = {k: token_mask.shares(v, signal) for k, v in flags.items()}
    alignment = _alignment(roles, cfg, rollouts, nodes, config, method, loss, ref, pad_id, masks, s.rollouts_per_step)
    initial = lookahead.measure_initial(student, measure_rows, pad_id, s.sampling_temperature)
    if forgetting is not None:  # the initial student's samples of the forgetting set, once
        forgetting.start(student)
    n_boot, seed = cfg.analysis.bootstrap, cfg.sampling.seed
    out, per_prompt = {}, {}
    for name, m in masks.items():
        stepped, cost = lookahead.take_steps(
            student, lambda trainable: Roles(trainable, None, "external", teacher, with_base, student), step_rows,
            config, loss, ref, s, pad_id, cfg.scoring.base_view, mask=m)
        measured = lookahead.measure(stepped, initial, pad_id, s.sampling_temperature, n_boot, seed, per_prompt=True)
        per_prompt[name] = measured["dll_prompts"]
        out[name] = {"token_mask": CANDIDATES[name], "kept_share": shares[name][0], "signal_share": shares[name][1],
                     "alignment": alignment.get(name), **{k: measured[k] for k in ("dv", "dll", "kl")}, **cost,
                     **(lookahead.measure_fresh(stepped, forgetting, n_boot, seed, "forgetting") if forgetting else {})}
        del stepped
    for name in out:  # each mask against all tokens, prompt by prompt (the same measurement half and seeds)
        out[name]["dll_vs_all"] = paired_difference(per_prompt[name], per_prompt["all"], n_boot, seed)
    return {"status": "ok", "config": config, "method": method, "settings": out, "recommendation": recommend(out),
            **({"not_run": missing} if missing else {})}


def _alignment(roles, cfg, rollouts, nodes, config, method, loss, ref, pad_id, masks, size) -> dict:
    """``node_alignment`` over the rollouts holding ``config``'s nodes ({} without nodes or for a signal no node
    objective measures)."""
    objective = OBJECTIVE.get(method)
    if nodes is None or objective is None or f"align_{objective}" not in nodes:
        return {}
    mine = nodes[nodes["config"] == config]
    rows = rollouts[rollouts["rollout_id"].isin(set(mine["rollout_id"]))].sort_values("rollout_id")
    if rows.empty:
        return {}
    flags, _ = kept_flags(roles, micro_batches(rows, config, cfg.scoring.base_view, size), loss, ref, pad_id, masks)
    return node_alignment(mine, rows, flags, objective, cfg.analysis.bootstrap, cfg.sampling.seed)


def recommend(settings: dict) -> dict:
    """Rule 2: the candidate with the largest ``dll_vs_all`` among those whose interval lies above 0, else all
    tokens; with its Δll, all-token training's, and its difference from it."""
    diffs = {k: v.get("dll_vs_all") for k, v in settings.items() if k != "all"}
    moved = beyond_noise(diffs)
    best = moved or "all"
    chosen = settings.get(best, {})
    compared = any((d or {}).get("n_prompts") for d in diffs.values())
    return {"setting": best, "token_mask": CANDIDATES[best], "dll": chosen.get("dll"),
            "dll_all": settings.get("all", {}).get("dll"), "dll_vs_all": chosen.get("dll_vs_all"),
            "basis": "largest lookahead Δll difference from all tokens whose 95% interval lies above 0" if moved
            else "no candidate's lookahead Δll beats all-token training's beyond its 95% interval: all tokens"
            if compared else NO_COMPARISON}


NO_COMPARISON = ("no measurement prompt has both a correct and an incorrect rollout, so the lookahead's Δll cannot "
                 "compare the masks (more samples per prompt, sampling.num_samples, give it some): all tokens")
