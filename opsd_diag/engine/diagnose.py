"""One diagnosis end to end: config -> problems -> models -> views -> rollouts -> scores -> run dir.

Everything a user can get wrong (config, data, models, templates, prompt lengths) is checked in
``prepare`` before the run directory exists, so a user error never leaves a half-written run.
Work is cut into shards of prompts; each shard's sampling seed depends only on the run seed and the
shard index, so the result does not depend on how many processes share the work, or on resumes.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import torch

from opsd_diag import jobs
from opsd_diag.core import aggregate
from opsd_diag.engine import given_rollouts, levers, lookahead, schedule_courses, schedule_points, setup
from opsd_diag.engine.fast import fused_scoring
from opsd_diag.engine.samplers import for_role
from opsd_diag.engine.cross_nodes import CrossSide
from opsd_diag.engine.cross_scoring import CrossTeacher, left_out
from opsd_diag.engine.manifest import manifest
from opsd_diag.engine.nodes import NodeModels, Sampler
from opsd_diag.engine.predict import run_predictor
from opsd_diag.engine.shard_clock import ShardClock
from opsd_diag.engine.sampling import cut_at_strings, sample_vllm
from opsd_diag.engine.shard_scoring import NONFINITE_FIX, score_rollouts
from opsd_diag.errors import NonFiniteLogits, OpsdError
from opsd_diag.io import store, templates
from opsd_diag.io.data import load_problems
from opsd_diag.config.spec import DiagnosisConfig, to_yaml
from opsd_diag.engine.setup import Loaded
from opsd_diag.io.models import check_fits, fingerprint, limit_rows
from opsd_diag.io.thinking import check
from opsd_diag.io.views import rendered_text, system_tokens, template_notes
from opsd_diag.config.settings import SamplingSettings, derive_seed


@dataclass
class Prepared(Loaded):
    """A diagnosis set up (``engine.setup.prepare``), with what its manifest stores."""
    fingerprints: dict[str, str] = field(default_factory=dict)
    rendered: dict[str, str] = field(default_factory=dict)  # the first problem's views, as text
    notes: list[str] = field(default_factory=list)  # template warnings
    given: list | None = None  # rollouts read from a file (engine.given_rollouts), per problem
    forgetting: lookahead.ForgettingSet | None = None  # lookahead.forgetting, rendered as the student's view

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


def check_problems(cfg) -> list[dict]:
    """A diagnosis' problems, checked against every teacher's context (and the sampling backend), before any
    model loads: a data or template mistake costs a fraction of a second, not a model load."""
    problems = load_problems(cfg.data)
    for n, t in enumerate(cfg.teachers):
        templates.check_problems(templates.resolve(t.context), problems,
                                 f"teachers.{n} '{t.name}' (context {t.context[:40]!r})", cfg.data.fields,
                                 t.partial_fraction)
    schedule_points.check_problems(cfg, problems)  # a config shown a share of the solution sees some of it
    la = cfg.lookahead
    if la is not None and la.enabled and la.reference is not None:  # scored where a problem has a solution
        solved = [p for p in problems if str(p.get("solution") or "").strip()]
        if not solved:
            raise OpsdError("lookahead.reference needs problems with a solution, and none has one: map your solution "
                            "column with data.fields, or leave lookahead.reference out")
        templates.check_problems(la.reference, solved, "lookahead.reference", cfg.data.fields)
    if cfg.sampling.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise OpsdError("sampling.backend is 'vllm' but vLLM is not installed: pip install 'opsd-diag[vllm]' "
                        "or use backend: hf")
    return problems


def for_diagnosis(cfg) -> setup.SetupRoles:
    """What a diagnosis loads (every teacher config, the base) and how its checks name things."""
    return setup.SetupRoles(check_problems(cfg), tuple(cfg.teachers), cfg.base is not None, cfg.device,
                            cfg.sampling.max_completion_length, "sampling.max_completion_length",
                            "data.system_prompt", cfg.data.system_prompt,
                            check_finite=not cfg.scoring.allow_nonfinite)


def forgetting_problems(cfg) -> lookahead.ForgettingSet | None:
    """``lookahead.forgetting`` read with the diagnosis' loader and checked before any model loads (errors name the
    key); problems without an answer are left out, a set with none is an error. None: no forgetting set."""
    la = cfg.lookahead
    if la is None or not la.enabled or la.forgetting is None:
        return None
    try:
        problems = load_problems(la.forgetting, "lookahead.forgetting")
    except OpsdError as e:  # the loader's message names the key where it is about one (fields, path), else prefixed
        raise (e if "lookahead.forgetting" in str(e) else OpsdError(f"lookahead.forgetting.path: {e}")) from None
    answered = [p for p in problems if p.get("answer") is not None]
    if not answered:
        raise OpsdError(f"lookahead.forgetting ({la.forgetting.path}) has no answers, so its pass@1 cannot be "
                        "measured: map its answer field with fields: {answer: ...}, or leave lookahead.forgetting out")
    return lookahead.ForgettingSet(answered)


def render_forgetting(cfg, fs: lookahead.ForgettingSet | None, loaded) -> lookahead.ForgettingSet | None:
    """The forgetting problems rendered as the student's view (``engine.setup.render`` with the diagnosis' own
    student renderer, that of ``loaded``: an ``engine.setup.Loaded``), checked to fit the student with the
    completion length."""
    if fs is None:
        return None
    system, key = cfg.lookahead.forgetting.system_prompt, "sampling.max_completion_length"

    def fits(prompts):
        check_fits(loaded.student, f"the student model '{cfg.student.model}'", prompts, fs.problems,
                   cfg.sampling.max_completion_length, key,
                   "shorten that prompt or leave it out of lookahead.forgetting",
                   ("lookahead.forgetting.system_prompt", system_tokens(loaded.renderers[0], fs.problems[0], system)))
    views, _ = setup.render(cfg, fs.problems, loaded.renderers, system, (), loaded.room, None, fits)
    return lookahead.ForgettingSet(fs.problems, views.student)


def prepare(cfg: DiagnosisConfig, student: torch.nn.Module | None = None) -> Prepared:
    """Load and validate everything (``engine.setup``); no file is written. ``student``: a model in memory that
    replaces the one the config names (a training run's policy: ``engine.probe``)."""
    roles = for_diagnosis(cfg)
    forgetting = forgetting_problems(cfg)  # read and checked before any model loads
    if student is not None:  # as load_spec would: scored on its tokenizer's rows (io.models.limit_rows)
        roles = replace(roles, load_student=lambda tok: limit_rows(student, len(tok)))
    loaded = setup.prepare(cfg, roles)
    fused_scoring.check_available(cfg.scoring.engine, next(loaded.student.parameters()).device)
    prep = Prepared(**vars(loaded))
    prep.fingerprints = {role: fingerprint(m) for role, (_, _, m) in prep.named.items()}
    prep.rendered = rendered_text(prep.views, *prep.renderers)
    prep.notes = template_notes(cfg, prep.tok, prep.teacher_toks)
    prep.forgetting = render_forgetting(cfg, forgetting, prep)
    for note in prep.notes:
        print(f"warning: {note}", file=sys.stderr)
    return given_rollouts.attach(prep)  # unchanged unless the rollouts come from a file (config rollouts)


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
    sample_fn = for_role("diagnosis", prep.cfg.sampling.engine)  # hf: HF generate; static: engine.fast
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


def run_shard(prep: Prepared, index: int, on_scoring=None) -> dict[str, pd.DataFrame]:
    """Sample, check and score the prompts of one shard; ``on_scoring()`` is called between the two (progress)."""
    cfg = prep.cfg
    lo = index * cfg.shard_size
    idx = list(range(lo, min(len(prep.problems), lo + cfg.shard_size)))
    k = cfg.sampling.num_samples
    settings = cfg.sampling.settings(derive_seed(cfg.sampling.seed, index))
    samples = given_rollouts.completions(prep, idx) if prep.given is not None else sample(
        prep, prep.student, cfg.student.model, [prep.student_prompts[i] for i in idx], settings,
        f"the student model '{cfg.student.model}'")

    rollouts = []
    for i, per_prompt in zip(idx, samples):
        p = prep.problems[i]
        for j, c in enumerate(per_prompt):
            row = {"rollout_id": i * k + j, "problem_id": p["id"], "problem_index": i, "sample_idx": j,
                   "difficulty": (p.get("meta") or {}).get("difficulty"), "completion_ids": c.ids,
                   "length": len(c.ids), "finished": c.finished,
                   **_checked(prep, p, prep.student_prompts[i], c), "prompt_ids.student": prep.student_prompts[i],
                   **given_rollouts.columns(c)}
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
    if prep.given is not None:
        summary["sampler_mismatch"] = given_rollouts.mismatch(prep, tables)  # the file's log-probs vs the student's
    if dropped:
        summary["left_out"] = dropped  # rollouts a teacher with another tokenizer could not align with, and why
    store.write_summary(out_dir, summary)  # stamped with the run's id
    return summary


def run_diagnosis(cfg: DiagnosisConfig, out_dir: Path, show_progress: bool = True,
                  student: torch.nn.Module | None = None) -> Path:
    """Run (or resume) a diagnosis into ``out_dir``; shards are spread over accelerate processes.

    The main process holds the run directory's lock and reports each stage in status.json
    (``opsd_diag.jobs``); the manifest says ``finished`` only once the predictor is done too.
    """
    from accelerate import PartialState
    from tqdm.auto import tqdm

    cfg = schedule_points.with_schedule_points(cfg)  # a config per schedule point; the stored config holds them
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
    prep = prepare(cfg, student)  # student: a training run's live policy (engine.probe), else the config's
    store.check_run_dir(out_dir, cfg.model_dump(mode="json"))  # every process checks: a refusal leaves none waiting
    main = state.is_main_process
    with jobs.hold(out_dir, "opsd-diag run", main=main, after="run",  # a full disk: a rerun resumes
                   stopped="interrupted; rerun the same command to resume"):  # finished shards are kept
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
            courses = None  # the schedule courses' lookahead (with schedule points and a lookahead)
            if cfg.lookahead is not None and cfg.lookahead.enabled:
                jobs.write_status(out_dir, stage="lookahead")
                draw = for_role("diagnosis", cfg.sampling.engine)  # the fresh samples: the diagnosis' sampler

                def sample(m, p, s):
                    return _cut(prep, draw(m, prep.tok, p, s, prep.stop_ids), prep.tok)
                lookahead.for_diagnosis(out_dir, cfg, prep.student, prep.teacher_models, prep.base, prep.tok,
                                        list(prep.cross), problems=prep.problems, sample=sample,
                                        forgetting=prep.forgetting, stop_id=prep.stop_ids[0])
                if cfg.lookahead.levers:  # a lever recommendation (engine.levers)
                    levers.for_diagnosis(out_dir, cfg, prep.student, prep.teacher_models, prep.base, prep.tok,
                                         list(prep.cross), lookahead,
                                         forgetting=lookahead.forgetting_sampler(cfg, prep.tok, sample, prep.forgetting))
                if cfg.lookahead.schedule_points:  # the decaying and adaptive courses themselves
                    courses = schedule_courses.run(cfg, schedule_points.schedule_sources(cfg), prep.student,
                                                   prep.teacher_models, prep.base, store.read_table(out_dir, "rollouts"),
                                                   prep.tok.pad_token_id, lookahead)
            if cfg.lookahead is not None and cfg.lookahead.schedule_points:  # the schedule table
                schedule_points.for_diagnosis(out_dir, cfg, courses)
            store.atomic_write_json(out_dir / "manifest.json",
                                    manifest(prep, "finished", seconds=round(time.time() - started, 2),
                                             run_id=store.run_id(out_dir)))
            jobs.write_status(out_dir, "finished", stage="done")
        state.wait_for_everyone()
    return out_dir
