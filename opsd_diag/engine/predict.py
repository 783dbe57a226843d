"""The ideal-gradient predictor on a finished diagnosis: nodes, continuations, node metrics, verdicts.

Reads the run's tables, admits nodes within the budget (``engine.nodes``), estimates each candidate's
success with student continuations, computes the per-node maths (``core.ideal``), writes
``nodes.parquet`` and stores the aggregates, verdicts and ranking (``core.verdict``) in
``summary.json``. No answers, a disabled predictor or a budget too small for one node give a
``skipped`` result with its reason, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from opsd_diag.core import verdict
from opsd_diag.core.ideal import SAMPLED, aggregate_with_reliability, node_metrics
from opsd_diag.core.stats import jsonable
from opsd_diag.engine.cross_nodes import plan_rows
from opsd_diag.engine.nodes import NodeModels, Sampler, build_jobs, estimate_success, plan_acting, plan_nodes
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.config.spec import DiagnosisConfig, IdealSpec, validate
from opsd_diag.io.thinking import answer_text
from opsd_diag.config.settings import derive_seed

ESTIMATOR = ("our estimator (docs/signals.md, the ideal-gradient predictor): m student continuations per "
             "candidate token, checked by the answer checker")


ACTING_STREAM = 31  # the acting nodes' continuations draw from their own seed stream (derive_seed(ideal.seed, 31))
CROSS_APPROXIMATION = ("a config with another tokenizer: nodes only where the next student token is a span of "
                       "its own; a candidate's teacher probability is that of the teacher's own spelling of its "
                       "text (docs/signals.md, the predictor across vocabularies)")


def skipped(reason: str, **extra) -> dict:
    return {"status": "skipped", "reason": f"skipped: {reason}", "estimator": ESTIMATOR, **extra}


def run_predictor(run_dir: Path, cfg: DiagnosisConfig, problems: list[dict], models: NodeModels, sampler: Sampler,
                  spec: IdealSpec | None = None, *, write_summary: bool = True, show_progress: bool = False,
                  status: Callable[..., object] | None = None) -> dict:
    """The predictor on the finished run in ``run_dir`` (made from ``cfg`` and ``problems``).

    Returns the result (per-config aggregates with bootstrap CIs over prompts); with
    ``write_summary`` it and the verdicts/ranking are stored in ``summary.json`` under ``ideal``,
    ``verdicts`` and ``ranking``. ``status``: a status.json writer (``jobs.write_status`` of the run) for
    the predictor stage's progress, when a diagnosis runs it.
    """
    spec = validate(IdealSpec, (spec or cfg.ideal or IdealSpec()).model_dump(), "predictor settings", "ideal")
    run_dir = Path(run_dir)
    summary = store.read_summary(run_dir)  # this run's own (its run id), never one copied in
    rollouts, tokens = store.read_table(run_dir, "rollouts"), store.read_table(run_dir, "tokens")
    check_tables(rollouts, tokens, [t.name for t in cfg.teachers], models)
    if not spec.enabled:
        result = skipped("the ideal-gradient predictor is disabled (ideal.enabled: false)")
    elif rollouts.empty or tokens.empty:
        result = skipped("the run has no scored rollouts")
    elif rollouts["correct"].notna().sum() == 0 or all(p.get("answer") is None for p in problems):
        result = skipped("no answers to check (the data set has no answer field)")
    else:
        result = _analyse(run_dir, cfg, problems, models, sampler, spec, rollouts, tokens, show_progress, status)
    if result["status"] != "ok" or "acting" not in result:  # never leave nodes of an earlier analysis behind
        (run_dir / "acting_nodes.parquet").unlink(missing_ok=True)
    if result["status"] != "ok":
        (run_dir / "nodes.parquet").unlink(missing_ok=True)
    if write_summary:
        attach_to_summary(run_dir, summary, result)
    return result


def check_tables(rollouts: pd.DataFrame, tokens: pd.DataFrame, configs: list[str], models: NodeModels) -> None:
    """The run's tables were scored by the models the predictor loaded from its manifest: each config's rows
    and prompts are there, a config of another tokenizer (``models.cross``) has span rows and the others do not,
    and every id lies in its model's vocabulary. A manifest edited to name another teacher (or a teacher of
    another family) is one OpsdError here, before a forward meets an id its model does not have."""
    if rollouts.empty or tokens.empty:
        return
    fix = ("the manifest's teachers are not the ones that scored this run's tables (manifest.json edited, or copied "
           "from another run): use the diagnosis' own run directory, or rerun the diagnosis")  # engine.cross.SWAPPED
    spans = tokens["span_len"].notna() if "span_len" in tokens.columns else pd.Series(False, index=tokens.index)
    scored = set(tokens["config"].unique())
    for c in ["student", *configs]:
        if c != "student" and c not in scored:
            raise OpsdError(f"tokens.parquet has no rows of config '{c}': {fix}")
        if f"prompt_ids.{c}" not in rollouts.columns:
            raise OpsdError(f"rollouts.parquet has no prompts of config '{c}' (prompt_ids.{c}): {fix}")
        if c != "student" and bool(spans[tokens["config"] == c].any()) != (c in models.cross):
            was, now = ("another", "the student's") if c not in models.cross else ("the student's", "another")
            raise OpsdError(f"config '{c}' was scored with a teacher of {was} tokenizer, but the model its manifest "
                            f"names has {now}: {fix}")
        model = models.student if c == "student" else models.teachers[c]
        rows = int(model.get_input_embeddings().weight.shape[0])
        for col in [f"prompt_ids.{c}", *(["completion_ids"] if c == "student" else [])]:
            ids = pd.to_numeric(rollouts[col].explode().dropna(), errors="coerce")
            if ids.isna().any() or len(ids) and (ids.min() < 0 or ids.max() >= rows):
                raise OpsdError(f"rollouts.parquet: column '{col}' holds ids outside the vocabulary (0 to {rows - 1}) "
                                f"of the model that reads it: {fix}")


def _analyse(run_dir: Path, cfg: DiagnosisConfig, problems, models: NodeModels, sampler: Sampler, spec: IdealSpec,
             rollouts: pd.DataFrame, tokens: pd.DataFrame, show_progress: bool, status=None) -> dict:
    configs = [t.name for t in cfg.teachers]
    cross = [c for c in configs if c in models.cross]  # configs with another tokenizer: nodes on one-token spans
    plan = plan_nodes(plan_rows(tokens, configs, cross), rollouts[rollouts["correct"].notna()])
    max_len = cfg.sampling.max_completion_length
    try:
        admitted = build_jobs(models, rollouts, problems, plan, configs, budget=spec.budget, k=spec.k, m=spec.m,
                              cap=min(spec.max_continuation_length or max_len, max_len), max_completion_length=max_len,
                              temperature=cfg.scoring_temperature)
    except ValueError:
        raise OpsdError("the run's problems differ from the config's: run the predictor with the run's own "
                        "config.yaml") from None
    if not admitted:
        return skipped(f"ideal.budget={spec.budget} is too small for one node (a node costs m x |K| = "
                       f"{spec.m} x up to {1 + spec.k * (1 + len(configs))} continuations)", budget=spec.budget)
    estimates = _estimate(admitted, models, sampler, cfg, spec, spec.seed, show_progress, status)
    tok_idx = tokens.set_index(["config", "rollout_id", "pos"])[["kl_rev", "jsd", *SAMPLED]].sort_index()
    unmapped = {c: {"candidates": 0, "nodes": 0} for c in cross}
    nodes = pd.DataFrame(_node_rows(admitted, estimates, configs, cross, spec, cfg, tok_idx, unmapped))
    store.write_table(run_dir, "nodes", nodes)
    result = {"status": "ok", "estimator": ESTIMATOR, "budget": spec.budget, "k": spec.k, "m": spec.m,
              "candidates": spec.candidates,
              "seed": spec.seed, "continuations_used": int(sum(a[3] for a in admitted)),
              "continuation_tokens": int(sum(e.tokens for e in estimates)),
              "prefix_tokens": int(sum(a[3] * (len(a[2].prompt) + len(a[2].prefix) + 1) for a in admitted)),
              "n_nodes": len(admitted), "n_prompts": int(nodes["problem_id"].nunique()),
              "jsd_beta": cfg.scoring.jsd_beta,
              **({"cross_tokenizer": {"approximation": CROSS_APPROXIMATION, "left_out": unmapped}} if cross else {}),
              "configs": aggregate_with_reliability(nodes, n_boot=cfg.analysis.bootstrap, seed=cfg.sampling.seed)}
    if spec.acting_budget:
        result.update(_acting(run_dir, cfg, problems, models, sampler, spec, rollouts, tokens, tok_idx,
                              [c for c in configs if c not in cross], show_progress, status))
    return result


def _estimate(admitted, models: NodeModels, sampler: Sampler, cfg: DiagnosisConfig, spec: IdealSpec, seed: int,
              show_progress: bool, status):
    with tqdm(total=sum(a[3] for a in admitted), desc="ideal continuations", unit="cont",
              disable=not show_progress) as bar:
        return estimate_success(
            [a[2] for a in admitted], sampler, lambda ids: answer_text(models.tok, ids), m=spec.m,
            stop_ids=models.stop_ids, checker=cfg.analysis.checker, temperature=cfg.sampling.temperature,
            top_p=cfg.sampling.top_p, seed=seed, batch_rows=max(cfg.sampling.batch_size, 1),
            on_progress=_reporting(status, bar))


def _acting(run_dir: Path, cfg: DiagnosisConfig, problems, models: NodeModels, sampler: Sampler, spec: IdealSpec,
            rollouts: pd.DataFrame, tokens: pd.DataFrame, tok_idx, configs: list[str], show_progress: bool,
            status) -> dict:
    """The same estimates at the nodes where training acts (``engine.nodes.plan_acting``), within
    ``ideal.acting_budget``, on their own seed: ``acting_nodes.parquet`` and the result's ``acting`` keys. A
    config aggregates the nodes it chose. Configs of another tokenizer are left out (``acting_left_out``)."""
    plan = plan_acting(tokens, rollouts[rollouts["correct"].notna()], configs)
    max_len = cfg.sampling.max_completion_length
    admitted = build_jobs(models, rollouts, problems, plan, configs, budget=spec.acting_budget, k=spec.k, m=spec.m,
                          cap=min(spec.max_continuation_length or max_len, max_len), max_completion_length=max_len,
                          temperature=cfg.scoring_temperature) if configs else []
    left_out = sorted(set(c.name for c in cfg.teachers) - set(configs))
    if not admitted:
        (run_dir / "acting_nodes.parquet").unlink(missing_ok=True)
        return {"acting_budget": spec.acting_budget, "acting_nodes": 0, "acting_left_out": left_out}
    estimates = _estimate(admitted, models, sampler, cfg, spec, derive_seed(spec.seed, ACTING_STREAM), show_progress,
                          status)
    rows = _node_rows(admitted, estimates, configs, [], spec, cfg, tok_idx, {})
    for r in rows:
        node = admitted[r["node_id"]][0]
        r["chosen"], r["push"] = r["config"] in node.acting_for, float(node.push)
    nodes = pd.DataFrame(rows)
    store.write_table(run_dir, "acting_nodes", nodes)
    chosen = nodes[nodes["chosen"]]
    return {"acting_budget": spec.acting_budget, "acting_nodes": len(admitted), "acting_left_out": left_out,
            "acting_continuations_used": int(sum(a[3] for a in admitted)),
            "acting_continuation_tokens": int(sum(e.tokens for e in estimates)),
            "acting": aggregate_with_reliability(chosen, n_boot=cfg.analysis.bootstrap, seed=cfg.sampling.seed)}


def _node_rows(admitted, estimates, configs: list[str], cross: list[str], spec: IdealSpec, cfg: DiagnosisConfig,
               tok_idx, unmapped: dict) -> list[dict]:
    """One row per admitted node x config: the node, its candidates and every per-node number (``node_metrics``)."""
    rows = []
    for n_id, ((node, r, job, cost, s_lp, t_lps, own), (s_hat, n_used, _)) in enumerate(zip(admitted, estimates)):
        for c in configs:
            sig = tok_idx.loc[(c, node.rollout_id, node.pos)]
            # per_config: the config's own candidates only, so its numbers do not depend on the run's other configs
            ix = own[c] if spec.candidates == "per_config" else list(range(len(job.candidates)))
            if c in unmapped:  # a candidate whose text the teacher cannot spell is left out of this config's K
                kept = [i for i in ix if np.isfinite(t_lps[c][i])]
                unmapped[c]["candidates"] += len(ix) - len(kept)
                if not kept or kept[0] != 0:  # not even the sampled token: no row for this config here
                    unmapped[c]["nodes"] += 1
                    continue
                ix = kept
            met = node_metrics(s_lp[ix], t_lps[c][ix], s_hat[ix], 0, {a: float(sig[a]) for a in SAMPLED},
                               cfg.scoring.jsd_beta)
            rows.append({
                "node_id": n_id, "config": c, "rollout_id": int(node.rollout_id), "problem_id": node.problem_id,
                "problem_index": int(r["problem_index"]), "pos": int(node.pos), "depth": int(node.depth),
                "window": int(node.window), "h_s": float(node.h_s), "correct": bool(node.correct),
                "token_id": job.candidates[0], "cand_ids": [job.candidates[i] for i in ix], "sampled_index": 0,
                "n_samples": n_used[ix].tolist(), "s_hat": s_hat[ix].tolist(), "p_tilde": met.pop("p_tilde").tolist(),
                "q_tilde": met.pop("q_tilde").tolist(), "cost": int(cost), "max_new_tokens": job.max_new,
                "kl_rev": float(sig["kl_rev"]), "jsd": float(sig["jsd"]),
                **{a: float(sig[a]) for a in SAMPLED}, **met})
    return rows


def _reporting(status, bar):
    """The progress bar's update, also written to status.json (at most once a second) through ``status``
    while a diagnosis is in its predictor stage, so the app can show the phase's progress and ETA."""
    last = [0.0]
    if status is not None:
        status(done=0, total=int(bar.total or 0), stage_started=time.time())

    def update(n: int) -> None:
        bar.update(n)
        if status is not None and (time.time() - last[0] > 1.0 or bar.n >= (bar.total or 0)):
            last[0] = time.time()
            status(done=int(bar.n), total=int(bar.total or 0))
    return update


def attach_to_summary(run_dir: Path, summary: dict, result: dict) -> dict:
    """Store the result plus verdicts and ranking in ``summary.json`` (atomically); returns it."""
    summary = {**summary, "ideal": jsonable(result)}
    summary.update(jsonable(verdict.verdicts(summary, summary["ideal"])))
    store.write_summary(run_dir, summary)
    return summary
