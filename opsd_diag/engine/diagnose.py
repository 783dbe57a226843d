"""One diagnosis end to end: config -> problems -> models -> views -> rollouts -> scores -> run dir.

Everything a user can get wrong (config, data, models, templates, prompt lengths) is checked in
``prepare`` before the run directory exists, so a user error never leaves a half-written run.
Work is cut into shards of prompts; each shard's sampling seed depends only on the run seed and the
shard index, so the result does not depend on how many processes share the work, or on resumes.
"""

from __future__ import annotations

import importlib.util
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from opsd_diag import __version__, jobs
from opsd_diag.core import aggregate
from opsd_diag.engine import cross, fast_decode, fused_scoring
from opsd_diag.engine.cross_scoring import CrossTeacher, left_out, score_cross_configs
from opsd_diag.engine.nodes import NodeModels, Sampler
from opsd_diag.engine.predict import run_predictor
from opsd_diag.engine.sampling import sample_hf, sample_vllm
from opsd_diag.engine.shard_clock import ShardClock
from opsd_diag.engine.scoring import TeacherInput, score_batch
from opsd_diag.errors import NonFiniteLogits, OpsdError
from opsd_diag.io import store, templates
from opsd_diag.io.config import DiagnosisConfig, ModelSpec, to_yaml
from opsd_diag.io.data import load_problems
from opsd_diag.io.models import (
    check_finite_logits,
    fingerprint,
    load_model,
    load_tokenizer,
    stop_token_ids,
)
from opsd_diag.io.verify import extract_answer, is_correct
from opsd_diag.io.views import student_view, teacher_view
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.settings import SamplingSettings, derive_seed


@dataclass
class Prepared:
    cfg: DiagnosisConfig
    problems: list[dict]
    tok: object
    student: torch.nn.Module
    base: torch.nn.Module | None
    teacher_models: dict[str, torch.nn.Module]
    stop_ids: list[int]
    student_prompts: list[list[int]]
    teacher_prompts: dict[str, list[list[int]]]
    truncated: dict[str, list[bool]]
    fingerprints: dict[str, str] = field(default_factory=dict)
    cross: dict[str, CrossTeacher] = field(default_factory=dict)  # configs with another tokenizer

    @property
    def n_shards(self) -> int:
        return -(-len(self.problems) // self.cfg.shard_size)

    def node_models(self) -> NodeModels:
        return NodeModels(self.tok, self.student, self.teacher_models, self.stop_ids)

    def sampler(self) -> Sampler:
        """The student's sampler (HF in-process, or the vLLM engine), for the predictor's continuations."""
        return lambda prompts, s: _sample(self, self.student, self.cfg.student.model, prompts, s,
                                          f"the student model '{self.cfg.student.model}'")


def _load(spec: ModelSpec | None, device: str, name: str | None = None):
    if spec is None:
        return None, None
    args = (name or spec.model, spec.revision)
    tok = load_tokenizer(*args, spec.allow_download, spec.trust_remote_code)
    model = load_model(*args, spec.dtype, device, spec.allow_download, spec.trust_remote_code)
    return tok, model


def check_inputs(cfg: DiagnosisConfig) -> list[dict]:
    """The problems, checked against every teacher's context (and the sampling backend), before any
    model loads: a data or template mistake costs a fraction of a second, not a model load."""
    problems = load_problems(cfg.data)
    for n, t in enumerate(cfg.teachers):
        templates.check_problems(templates.resolve(t.context), problems,
                                 f"teachers.{n} '{t.name}' (context {t.context[:40]!r})", cfg.data.fields,
                                 t.partial_fraction)
    if cfg.sampling.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise OpsdError("sampling.backend is 'vllm' but vLLM is not installed: pip install 'opsd-diag[vllm]' "
                        "or use backend: hf")
    return problems


def prepare(cfg: DiagnosisConfig) -> Prepared:
    """Load and validate everything; no file is written."""
    problems = check_inputs(cfg)
    tok, student = _load(cfg.student, cfg.device)
    fused_scoring.check_available(cfg.scoring.engine, next(student.parameters()).device)
    base_tok, base = _load(cfg.base, cfg.device)
    named = {"student": (cfg.student.model, tok, student)}
    if base is not None:
        named["base"] = (cfg.base.model, base_tok, base)
    teacher_models, teacher_toks = {}, {}
    for t in cfg.teachers:
        if t.is_self:
            teacher_models[t.name] = student
            continue
        spec = cfg.student.model_copy(update={"model": t.model, "revision": t.revision})
        teacher_toks[t.name], teacher_models[t.name] = _load(spec, cfg.device)
        named[f"teacher '{t.name}'"] = (t.model, teacher_toks[t.name], teacher_models[t.name])
    crossed = cross.plan(cfg, problems, named, teacher_toks)  # same tokenizer checked, or another one planned

    system = cfg.data.system_prompt
    # Views use the student's tokenizer and chat template, except for a teacher with another tokenizer
    # (its own): a same-tokenizer teacher scores the sampled ids themselves after its own prompt.
    student_prompts = [student_view(tok, p, system).ids for p in problems]
    teacher_prompts, truncated = {}, {}
    for t in cfg.teachers:
        views = [teacher_view(crossed[t.name].tok if t.name in crossed else tok, p, t.context, partial_fraction=t.partial_fraction,
                              system_prompt=t.system_prompt or system, max_length=cfg.scoring.max_prompt_length)
                 for p in problems]
        teacher_prompts[t.name] = [v.ids for v in views]
        truncated[t.name] = [v.context_truncated for v in views]
    if not cfg.scoring.allow_nonfinite:  # broken weights fail here, before the run directory exists
        first = f"problem '{problems[0]['id']}'"
        check_finite_logits(student, student_prompts[0], f"the student model '{cfg.student.model}'",
                            f"the prompt of {first}")
        if base is not None:  # a base of a cross teacher's family reads that family's ids
            own = next((c.base_prompts[0] for c in crossed.values() if c.base_side == "teacher"), student_prompts[0])
            check_finite_logits(base, own, f"the base model '{cfg.base.model}'", f"the prompt of {first}")
        for t in cfg.teachers:
            if not t.is_self:
                check_finite_logits(teacher_models[t.name], teacher_prompts[t.name][0],
                                    f"teacher config '{t.name}' (model '{t.model}')", f"its view of {first}")
    fps = {role: fingerprint(m) for role, (_, _, m) in named.items()}
    return Prepared(cfg, problems, tok, student, base, teacher_models, stop_token_ids(student, tok),
                    student_prompts, teacher_prompts, truncated, fps, crossed)


def _sample(prep: Prepared, model, model_name: str, prompts, settings: SamplingSettings, who: str = "",
            own: CrossTeacher | None = None):
    """Samples of ``model``; ``own``: a teacher with another tokenizer, which ends on its own stop ids."""
    tok, stop_ids = (prep.tok, prep.stop_ids) if own is None else (own.tok, own.stop_ids)
    if prep.cfg.sampling.backend == "vllm":
        return sample_vllm(model_name, prompts, settings, stop_ids, prep.cfg.student.dtype,
                           prep.cfg.student.trust_remote_code)
    sample = fast_decode.pick(sample_hf, prep.cfg.sampling.engine)  # hf: today's path; static: engine.fast_decode
    try:
        return sample(model, tok, prompts, settings, stop_ids)
    except NonFiniteLogits as e:
        raise OpsdError(f"{who or f'model {model_name!r}'} produced non-finite logits (NaN or inf) while sampling, "
                        f"at completion position {e.position}: {NONFINITE_FIX}") from None


NONFINITE_FIX = "check its weights for NaN/inf and its dtype (float16 overflows: use bfloat16 or float32)"


def _checked(prep: Prepared, problem: dict, ids: list[int], tok=None) -> tuple[str, str | None, bool | None]:
    text = (tok or prep.tok).decode(ids, skip_special_tokens=True)
    if problem.get("answer") is None:
        return text, extract_answer(text, prep.cfg.analysis.checker), None
    return text, extract_answer(text, prep.cfg.analysis.checker), is_correct(text, problem["answer"],
                                                                            prep.cfg.analysis.checker)


def run_shard(prep: Prepared, index: int, on_scoring=None) -> dict[str, pd.DataFrame]:
    """Sample, check and score the prompts of one shard; ``on_scoring()`` is called between the two (progress)."""
    cfg = prep.cfg
    lo = index * cfg.shard_size
    idx = list(range(lo, min(len(prep.problems), lo + cfg.shard_size)))
    k = cfg.sampling.num_samples
    settings = cfg.sampling.settings(derive_seed(cfg.sampling.seed, index))
    samples = _sample(prep, prep.student, cfg.student.model, [prep.student_prompts[i] for i in idx], settings,
                      f"the student model '{cfg.student.model}'")

    rollouts = []
    for i, per_prompt in zip(idx, samples):
        p = prep.problems[i]
        for j, c in enumerate(per_prompt):
            text, pred, correct = _checked(prep, p, c.ids)
            row = {"rollout_id": i * k + j, "problem_id": p["id"], "problem_index": i, "sample_idx": j,
                   "difficulty": (p.get("meta") or {}).get("difficulty"), "completion_ids": c.ids,
                   "length": len(c.ids), "finished": c.finished, "text": text, "answer_pred": pred,
                   "correct": correct, "prompt_ids.student": prep.student_prompts[i]}
            for t in cfg.teachers:
                row[f"prompt_ids.{t.name}"] = prep.teacher_prompts[t.name][i]
                row[f"context_truncated.{t.name}"] = prep.truncated[t.name][i]
            rollouts.append(row)

    teacher_rows = []
    has_answers = any(prep.problems[i].get("answer") is not None for i in idx)
    for n_t, t in enumerate(cfg.teachers):
        if cfg.sampling.teacher_samples == 0 or not has_answers:
            continue
        ts = cfg.sampling.settings(derive_seed(cfg.sampling.seed, index, 1 + n_t),
                                   num_samples=cfg.sampling.teacher_samples)
        model_name = cfg.student.model if t.is_self else t.model
        prompts = [prep.teacher_prompts[t.name][i] for i in idx]
        own = prep.cross.get(t.name)
        outs = _sample(prep, prep.teacher_models[t.name], model_name, prompts, ts,
                       f"teacher config '{t.name}' (model '{model_name}')", own)
        for i, per_prompt in zip(idx, outs):
            for j, c in enumerate(per_prompt):
                text, pred, correct = _checked(prep, prep.problems[i], c.ids, own and own.tok)
                teacher_rows.append({"config": t.name, "problem_id": prep.problems[i]["id"], "sample_idx": j,
                                     "completion_ids": c.ids, "text": text, "answer_pred": pred, "correct": correct})

    if on_scoring is not None:
        on_scoring()
    tokens, topk = _score(prep, rollouts)
    return {"rollouts": pd.DataFrame(rollouts), "tokens": tokens, "topk": topk,
            "teacher_rollouts": pd.DataFrame(teacher_rows)}


def _score(prep: Prepared, rollouts: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    cfg = prep.cfg
    s = cfg.score_settings()
    pad = prep.tok.pad_token_id
    token_parts, topk_parts = [], []
    names = cache_token_names(prep.tok)
    bs = cfg.scoring.batch_size
    scoreable = [r for r in rollouts if r["length"] > 0]
    score = fused_scoring.pick(score_batch, cfg.scoring.engine)  # reference, or engine.fused_scoring
    for start in range(0, len(scoreable), bs):
        batch = scoreable[start:start + bs]
        comps = [r["completion_ids"] for r in batch]
        teachers = {t.name: TeacherInput(prep.teacher_models[t.name], [r[f"prompt_ids.{t.name}"] for r in batch],
                                         [r[f"prompt_ids.{t.name}"] for r in batch]
                                         if cfg.scoring.base_view == "teacher" else None)
                    for t in cfg.teachers if t.name not in prep.cross}
        base_prompts = [r["prompt_ids.student"] for r in batch] if cfg.scoring.base_view == "student" else None
        rid = np.array([r["rollout_id"] for r in batch])
        token_parts += score_cross_configs(prep, batch, rid, s, _check_finite)
        if not teachers:
            continue
        tokens, topk = score(prep.student, comps, [r["prompt_ids.student"] for r in batch], teachers, s, pad,
                              base=prep.base, base_prompts=base_prompts)
        if not cfg.scoring.allow_nonfinite:
            _check_finite(prep, tokens, rid)
        flat_ids = np.array([t for c in comps for t in c])
        for name, cols in tokens.items():
            frame = pd.DataFrame({"rollout_id": rid[cols["row"]], "config": name, "pos": cols["pos"],
                                  "token_id": flat_ids, "token": [names(t) for t in flat_ids],
                                  **{c: cols[c] for c in SIGNAL_COLUMNS}})
            token_parts.append(frame)
        any_cols = next(iter(tokens.values()))
        for role, (vals, ids) in topk.items():
            kk = vals.shape[1]
            topk_parts.append(pd.DataFrame({
                "rollout_id": np.repeat(rid[any_cols["row"]], kk), "pos": np.repeat(any_cols["pos"], kk),
                "role": "student" if role == "student" else "teacher",
                "config": "" if role == "student" else role, "rank": np.tile(np.arange(kk), len(vals)),
                "token_id": ids.reshape(-1), "logprob": vals.reshape(-1)}))
    empty = pd.DataFrame()
    return (pd.concat(token_parts, ignore_index=True) if token_parts else empty,
            pd.concat(topk_parts, ignore_index=True) if topk_parts else empty)


def _check_finite(prep: Prepared, tokens: dict, rid: np.ndarray, names=None) -> None:
    """Stop at the first position where a model's logits were NaN or inf (its entropy is NaN exactly then)."""
    cfg = prep.cfg
    for t in cfg.teachers:
        if t.name not in (tokens if names is None else names):
            continue
        cols = tokens[t.name]
        checks = [("h_s", f"the student model '{cfg.student.model}'"),
                  ("h_t", f"teacher config '{t.name}' (model '{cfg.student.model if t.is_self else t.model}')")]
        if prep.base is not None:
            checks.append(("h_b", f"the base model '{cfg.base.model}'"))
        for col, who in checks:
            bad = np.flatnonzero(~np.isfinite(cols[col]))
            if bad.size:
                i = bad[0]
                raise OpsdError(f"{who} produced non-finite logits (NaN or inf) scoring rollout {rid[cols['row'][i]]} "
                                f"at completion position {cols['pos'][i]}: {NONFINITE_FIX}; or set "
                                "scoring.allow_nonfinite: true to keep going with NaN in every column derived from it")


def cache_token_names(tok):
    cache: dict[int, str] = {}

    def name(t: int) -> str:
        t = int(t)
        if t not in cache:
            cache[t] = tok.decode([t])
        return cache[t]
    return name


def _versions() -> dict:
    import accelerate
    import transformers
    return {"opsd_diag": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "python": platform.python_version()}


def manifest(prep: Prepared, status: str, **extra) -> dict:
    cfg = prep.cfg
    return {"status": status, "config": cfg.model_dump(mode="json"), "versions": _versions(),
            "seed": cfg.sampling.seed, "sampling_temperature": cfg.sampling.temperature,
            "scoring_temperature": cfg.scoring_temperature, "centering": cfg.scoring.centering,
            "n_problems": len(prep.problems), "n_shards": prep.n_shards, "shard_size": cfg.shard_size,
            "model_fingerprints": prep.fingerprints, "stop_ids": prep.stop_ids, **extra}


def finish(prep: Prepared, out_dir: Path) -> dict:
    """Merge shards and aggregate them into summary.json."""
    tables = store.merge_shards(out_dir, prep.n_shards)
    dropped = left_out(tables["rollouts"], list(prep.cross))  # a config no rollout aligns with: an error here
    a = prep.cfg.analysis
    summary = aggregate.summarize(tables["tokens"], tables["rollouts"], tables["teacher_rollouts"],
                                  entropy_edges=a.entropy_edges, entropy_quantiles=a.entropy_quantiles,
                                  high_entropy=a.high_entropy, ks=tuple(a.pass_k or (1, 4)), n_boot=a.bootstrap,
                                  seed=prep.cfg.sampling.seed)
    summary["context_truncated"] = {t: int(sum(v)) for t, v in prep.truncated.items()}
    if dropped:
        summary["left_out"] = dropped  # rollouts a teacher with another tokenizer could not align with, and why
    store.atomic_write_json(Path(out_dir) / "summary.json", summary)
    return summary


def run_diagnosis(cfg: DiagnosisConfig, out_dir: Path, show_progress: bool = True) -> Path:
    """Run (or resume) a diagnosis into ``out_dir``; shards are spread over accelerate processes.

    The main process holds the run directory's lock and reports each stage in status.json
    (``opsd_diag.jobs``); the manifest says ``finished`` only once the predictor is done too.
    """
    from accelerate import PartialState
    from tqdm.auto import tqdm

    state = PartialState()
    if state.num_processes > 1:
        if cfg.device == "auto":
            cfg = cfg.model_copy(update={"device": str(state.device)})
        if state.device.type == "cpu":  # several CPU processes share the cores
            torch.set_num_threads(max(1, (torch.get_num_threads()) // state.num_processes))
    started = time.time()
    out_dir = Path(out_dir)
    jobs.check_free(out_dir)  # a busy or unusable directory fails before the models load
    store.check_run_dir(out_dir, cfg.model_dump(mode="json"))
    prep = prepare(cfg)
    store.check_run_dir(out_dir, cfg.model_dump(mode="json"))  # every process checks: a refusal leaves none waiting
    main = state.is_main_process
    lock = jobs.acquire_lock(out_dir, "opsd-diag run") if main else None
    try:
        if main:
            store.check_run_dir(out_dir, cfg.model_dump(mode="json"))  # again, now that no other run writes here
            store.open_run_dir(out_dir, to_yaml(cfg), manifest(prep, "running", started=started))
        state.wait_for_everyone()
        done = [store.shard_done(out_dir, i) for i in range(prep.n_shards)]
        if main:
            jobs.write_status(out_dir, "running", kind="diagnosis", stage="rollouts and scoring", done=sum(done),
                              total=prep.n_shards)
        mine = [i for i in range(prep.n_shards) if i % state.num_processes == state.process_index and not done[i]]
        clock = ShardClock(out_dir, state.num_processes) if main else None
        for i in tqdm(mine, desc="shards", unit="shard", disable=not (show_progress and main)):
            if clock is not None:
                clock.lap("rollouts")
            shard = run_shard(prep, i, on_scoring=(lambda: clock.lap("scoring")) if clock is not None else None)
            store.write_shard(out_dir, i, shard)
            if clock is not None:
                clock.lap(None, done=sum(store.shard_done(out_dir, j) for j in range(prep.n_shards)))
        state.wait_for_everyone()
        if main:
            jobs.write_status(out_dir, stage="aggregates")
            finish(prep, out_dir)
            if cfg.ideal is not None and cfg.ideal.enabled:
                jobs.write_status(out_dir, stage="predictor")
                run_predictor(out_dir, cfg, prep.problems, prep.node_models(), prep.sampler(), cfg.ideal,
                              show_progress=show_progress)
            store.atomic_write_json(out_dir / "manifest.json",
                                    manifest(prep, "finished", seconds=round(time.time() - started, 2)))
            jobs.write_status(out_dir, "finished", stage="done")
        state.wait_for_everyone()
    except BaseException as e:
        if main and isinstance(e, KeyboardInterrupt):  # Ctrl-C or a stop (SIGTERM): finished shards are kept
            jobs.write_status(out_dir, "stopped", error="interrupted; rerun the same command to resume")
        elif main:
            jobs.write_status(out_dir, "failed", error=str(e) if isinstance(e, OpsdError) else
                              f"{type(e).__name__}: {e}")
        raise
    finally:
        if lock is not None:
            jobs.release_lock(lock)
    return out_dir
