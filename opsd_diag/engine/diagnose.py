"""One diagnosis end to end: config -> problems -> models -> views -> rollouts -> scores -> run dir.

Everything a user can get wrong (config, data, models, templates, prompt lengths) is checked in
``prepare`` before the run directory exists, so a user error never leaves a half-written run.
Work is cut into shards of prompts; each shard's sampling seed depends only on the run seed and the
shard index, so the result does not depend on how many processes share the work, or on resumes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from opsd_diag import jobs
from opsd_diag.core import aggregate
from opsd_diag.engine import cross, lookahead
from opsd_diag.engine.fast import fast_decode, fused_scoring
from opsd_diag.engine.cross_nodes import CrossSide
from opsd_diag.engine.cross_scoring import CrossTeacher, left_out
from opsd_diag.engine.manifest import manifest
from opsd_diag.engine.nodes import NodeModels, Sampler
from opsd_diag.engine.predict import run_predictor
from opsd_diag.engine.shard_clock import ShardClock
from opsd_diag.engine.sampling import cut_at_strings, sample_hf, sample_vllm
from opsd_diag.engine.shard_scoring import NONFINITE_FIX, score_rollouts
from opsd_diag.errors import NonFiniteLogits, OpsdError
from opsd_diag.io import safe, store, templates
from opsd_diag.config.spec import DiagnosisConfig, ModelSpec, to_yaml
from opsd_diag.io.data import load_problems
from opsd_diag.config.model_options import teacher_model_spec
from opsd_diag.io.models import check_finite_logits, check_fits, fingerprint, load_spec, positions, stop_token_ids
from opsd_diag.io.thinking import check
from opsd_diag.io.view_set import (base_renderer, build_views, rendered_text, student_renderer, system_tokens,
                                   teacher_renderer, template_notes)
from opsd_diag.config.settings import SamplingSettings, derive_seed


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
    rendered: dict[str, str] = field(default_factory=dict)  # the first problem's views, as text
    notes: list[str] = field(default_factory=list)  # template warnings
    cross: dict[str, CrossTeacher] = field(default_factory=dict)  # configs with another tokenizer

    @property
    def n_shards(self) -> int:
        return -(-len(self.problems) // self.cfg.shard_size)

    def node_models(self) -> NodeModels:
        return NodeModels(self.tok, self.student, self.teacher_models, self.stop_ids,
                          {n: CrossSide(ct, self.tok, self.stop_ids) for n, ct in self.cross.items()})

    def sampler(self) -> Sampler:
        """The student's sampler (HF in-process, or the vLLM engine), for the predictor's continuations."""
        return lambda prompts, s: sample(self, self.student, self.cfg.student.model, prompts, s,
                                          f"the student model '{self.cfg.student.model}'")


def _load(spec: ModelSpec | None, device: str):
    return (None, None) if spec is None else load_spec(spec, device)


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
        teacher_toks[t.name], teacher_models[t.name] = _load(teacher_model_spec(cfg.student, t), cfg.device)
        named[f"teacher '{t.name}'"] = (t.model, teacher_toks[t.name], teacher_models[t.name])
    crossed = cross.plan(cfg, named, teacher_toks)  # same tokenizer checked, or another one planned
    # Each model renders its own view (io.view_set); a same-tokenizer model scores the sampled ids themselves
    # after its own prompt, a teacher with another tokenizer its own re-tokenisation (engine.cross_scoring).
    s_render = student_renderer(cfg, tok)
    renders = {t.name: teacher_renderer(cfg, t, tok, teacher_toks.get(t.name)) for t in cfg.teachers}
    n_new, key = cfg.sampling.max_completion_length, "sampling.max_completion_length"
    other = {f"teacher '{n}'" for n in crossed} | ({"base"} if any(c.base_side == "teacher" for c in crossed.values())
                                                   else set())  # models of another family: their own prompts

    system = ("data.system_prompt", system_tokens(s_render, problems[0], cfg.data.system_prompt))

    def question_fits(student_prompts):  # the question itself must fit every model, context aside
        for role, (name, _, model) in named.items():
            if role not in other:
                check_fits(model, f"the {role} model '{name}'" if role in ("student", "base") else
                           f"{role} (model '{name}')", student_prompts, problems, n_new, key, system=system)
    room = min((n - n_new for _, _, m in named.values() if (n := positions(m))), default=None)  # caps the default
    views = build_views(cfg, problems, s_render, renders, cfg.data.system_prompt, check_student=question_fits,
                        room=room)
    student_prompts, teacher_prompts, truncated = views.student, views.teachers, views.truncated
    for t in cfg.teachers:
        check_fits(teacher_models[t.name], f"teacher config '{t.name}'", teacher_prompts[t.name], problems, n_new,
                   key, "lower scoring.max_prompt_length (its context is then shortened)")
    for t in cfg.teachers:  # the base next to a teacher with another tokenizer reads its own family's tokens
        c = crossed.get(t.name)
        if c is not None and c.base_side is not None:
            c.base_prompts = _base_prompts(cfg, problems, t, c, views, s_render, renders[t.name], room)
            if c.base_side == "teacher":
                check_fits(base, f"the base model '{cfg.base.model}'", c.base_prompts, problems, n_new, key)
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
    notes = template_notes(cfg, tok, teacher_toks)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    stops = stop_token_ids(student, tok, cfg.student.prompt_format == "chat")
    return Prepared(cfg, problems, tok, student, base, teacher_models, stops, student_prompts, teacher_prompts,
                    truncated, fps, rendered_text(views, s_render, renders), notes, crossed)


def sample(prep: Prepared, model, model_name: str, prompts, settings: SamplingSettings, who: str = "",
           own: CrossTeacher | None = None):
    """Samples of ``model``; ``own``: a teacher with another tokenizer, which ends on its own stop ids."""
    tok, stop_ids = (prep.tok, prep.stop_ids) if own is None else (own.tok, own.stop_ids)
    if prep.cfg.sampling.backend == "vllm":
        s = prep.cfg.student
        revision = s.revision if model_name == s.model else next(t.revision for t in prep.cfg.teachers
                                                                 if t.model == model_name)
        return _cut(prep, sample_vllm(model_name, prompts, settings, stop_ids, s.dtype, s.trust_remote_code,
                                      revision, prep.cfg.sampling.vllm_gpu_memory_utilization), tok)
    sample_fn = fast_decode.pick(sample_hf, prep.cfg.sampling.engine)  # hf: today's path; static: engine.fast
    try:
        return _cut(prep, sample_fn(model, tok, prompts, settings, stop_ids), tok)
    except NonFiniteLogits as e:
        raise OpsdError(f"{who or f'model {model_name!r}'} produced non-finite logits (NaN or inf) while sampling, "
                        f"at completion position {e.position}: {NONFINITE_FIX}") from None


def _cut(prep: Prepared, samples, tok):
    """The student's stop strings (a Base student's raw prompts) applied to every completion, decoded by ``tok``
    (the sampling model's tokenizer)."""
    strings = prep.cfg.student.stop_strings
    return samples if not strings else [[cut_at_strings(tok, c, strings) for c in per] for per in samples]


def _checked(prep: Prepared, problem: dict, prompt: list[int], c, tok=None) -> dict:
    """The answer columns of one completion; ``tok``: the tokenizer of its ids (default the student's)."""
    a = prep.cfg.analysis
    r = check(tok or prep.tok, prompt, c.ids, c.finished, problem.get("answer"), a.checker, a.truncated)
    return {"text": r.text, "answer_pred": r.pred, "correct": r.correct, "truncated": r.truncated,
            "in_thinking": r.in_thinking}


def _base_prompts(cfg, problems: list[dict], t, c: CrossTeacher, views, s_render, t_render,
                  room: int | None) -> list[list[int]]:
    """The base's prompt ids next to cross config ``t`` (``io.view_set.base_renderer``), reusing a view
    already rendered where the base reads exactly that one."""
    r = base_renderer(cfg, t, s_render, t_render, c.tok if c.base_side == "teacher" else None)
    if r is s_render or r is t_render:
        return views.student if r is s_render else views.teachers[t.name]
    on_teacher = cfg.scoring.base_view == "teacher"
    own = build_views(cfg, problems, r, {t.name: r}, cfg.data.system_prompt, [t] if on_teacher else [], room=room)
    return own.teachers[t.name] if on_teacher else own.student


def run_shard(prep: Prepared, index: int, on_scoring=None) -> dict[str, pd.DataFrame]:
    """Sample, check and score the prompts of one shard; ``on_scoring()`` is called between the two (progress)."""
    cfg = prep.cfg
    lo = index * cfg.shard_size
    idx = list(range(lo, min(len(prep.problems), lo + cfg.shard_size)))
    k = cfg.sampling.num_samples
    settings = cfg.sampling.settings(derive_seed(cfg.sampling.seed, index))
    samples = sample(prep, prep.student, cfg.student.model, [prep.student_prompts[i] for i in idx], settings,
                      f"the student model '{cfg.student.model}'")

    rollouts = []
    for i, per_prompt in zip(idx, samples):
        p = prep.problems[i]
        for j, c in enumerate(per_prompt):
            row = {"rollout_id": i * k + j, "problem_id": p["id"], "problem_index": i, "sample_idx": j,
                   "difficulty": (p.get("meta") or {}).get("difficulty"), "completion_ids": c.ids,
                   "length": len(c.ids), "finished": c.finished,
                   **_checked(prep, p, prep.student_prompts[i], c), "prompt_ids.student": prep.student_prompts[i]}
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
        outs = sample(prep, prep.teacher_models[t.name], model_name, prompts, ts,
                       f"teacher config '{t.name}' (model '{model_name}')", own)
        for i, per_prompt in zip(idx, outs):
            for j, c in enumerate(per_prompt):
                teacher_rows.append({"config": t.name, "problem_id": prep.problems[i]["id"], "sample_idx": j,
                                     "completion_ids": c.ids,  # a cross teacher's ids: in its own tokenizer
                                     **_checked(prep, prep.problems[i], prep.teacher_prompts[t.name][i], c,
                                               own and own.tok)})

    if on_scoring is not None:
        on_scoring()
    tokens, topk = score_rollouts(prep, rollouts)
    return {"rollouts": pd.DataFrame(rollouts), "tokens": tokens, "topk": topk,
            "teacher_rollouts": pd.DataFrame(teacher_rows)}


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
    store.write_summary(out_dir, summary)  # stamped with the run's id
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
        clock = ShardClock(lambda **f: jobs.write_status(out_dir, **f), state.num_processes) if main else None
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
                              show_progress=show_progress, status=lambda **f: jobs.write_status(out_dir, **f))
            if cfg.lookahead is not None and cfg.lookahead.enabled:
                jobs.write_status(out_dir, stage="lookahead")
                lookahead.for_diagnosis(out_dir, cfg, prep.student, prep.teacher_models, prep.base, prep.tok,
                                        list(prep.cross))
            store.atomic_write_json(out_dir / "manifest.json",
                                    manifest(prep, "finished", seconds=round(time.time() - started, 2),
                                             run_id=store.run_id(out_dir)))
            jobs.write_status(out_dir, "finished", stage="done")
        state.wait_for_everyone()
    except BaseException as e:
        full = safe.resource_error(e, out_dir) if isinstance(e, Exception) else None  # a full disk: one line
        full = full and full.after("run")  # which says that a rerun resumes
        if main and isinstance(e, KeyboardInterrupt):  # Ctrl-C or a stop (SIGTERM): finished shards are kept
            jobs.write_status(out_dir, "stopped", error="interrupted; rerun the same command to resume")
        elif main:
            with contextlib.suppress(OpsdError, OSError):  # the failure itself is what must reach the user
                jobs.write_status(out_dir, "failed", error=str(full or e) if isinstance(full or e, OpsdError)
                                  else f"{type(e).__name__}: {e}")
        if full is not None:
            raise full from None
        raise
    finally:
        if lock is not None:
            jobs.release_lock(lock)
    return out_dir
