"""One diagnosis end to end: config -> problems -> models -> views -> rollouts -> scores -> run dir.

Everything a user can get wrong (config, data, models, templates, prompt lengths) is checked in
``prepare`` before the run directory exists, so a user error never leaves a half-written run.
Work is cut into shards of prompts; each shard's sampling seed depends only on the run seed and the
shard index, so the result does not depend on how many processes share the work, or on resumes.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from opsd_diag import __version__, analysis, store
from opsd_diag.config import DiagnosisConfig, ModelSpec, to_yaml
from opsd_diag.data import load_problems
from opsd_diag.errors import OpsdError
from opsd_diag.models import check_compatible, fingerprint, load_model, load_tokenizer, stop_token_ids
from opsd_diag import fast_decode, fused_scoring
from opsd_diag.rollout import SamplingSettings, sample_hf, sample_vllm
from opsd_diag.scoring import COLUMNS, ScoreSettings, TeacherInput, score_batch
from opsd_diag.verify import extract_answer, is_correct
from opsd_diag.views import student_view, teacher_view


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

    @property
    def n_shards(self) -> int:
        return -(-len(self.problems) // self.cfg.shard_size)


def _load(spec: ModelSpec | None, device: str, name: str | None = None):
    if spec is None:
        return None, None
    args = (name or spec.model, spec.revision)
    tok = load_tokenizer(*args, spec.allow_download, spec.trust_remote_code)
    model = load_model(*args, spec.dtype, device, spec.allow_download, spec.trust_remote_code)
    return tok, model


def prepare(cfg: DiagnosisConfig) -> Prepared:
    """Load and validate everything; no file is written."""
    problems = load_problems(cfg.data)
    tok, student = _load(cfg.student, cfg.device)
    base_tok, base = _load(cfg.base, cfg.device)
    named = {"student": (cfg.student.model, tok, student)}
    if base is not None:
        named["base"] = (cfg.base.model, base_tok, base)
    teacher_models = {}
    for t in cfg.teachers:
        if t.is_self:
            teacher_models[t.name] = student
            continue
        spec = cfg.student.model_copy(update={"model": t.model, "revision": t.revision})
        t_tok, teacher_models[t.name] = _load(spec, cfg.device)
        named[f"teacher '{t.name}'"] = (t.model, t_tok, teacher_models[t.name])
    check_compatible(named)

    system = cfg.data.system_prompt
    # All views use the student's tokenizer and chat template (the vocabularies are checked equal):
    # the rollout is a student completion, and each model scores the same ids after its own prompt.
    student_prompts = [student_view(tok, p, system).ids for p in problems]
    teacher_prompts, truncated = {}, {}
    for t in cfg.teachers:
        views = [teacher_view(tok, p, t.context, partial_fraction=t.partial_fraction,
                              system_prompt=t.system_prompt or system, max_length=cfg.scoring.max_prompt_length)
                 for p in problems]
        teacher_prompts[t.name] = [v.ids for v in views]
        truncated[t.name] = [v.context_truncated for v in views]
    fps = {role: fingerprint(m) for role, (_, _, m) in named.items()}
    return Prepared(cfg, problems, tok, student, base, teacher_models, stop_token_ids(student, tok),
                    student_prompts, teacher_prompts, truncated, fps)


def _shard_seed(seed: int, index: int, salt: int = 0) -> int:
    return (seed * 1_000_003 + index * 9_176 + salt * 7_919) % (2**31)


def _sample(prep: Prepared, model, model_name: str, prompts, settings: SamplingSettings):
    if prep.cfg.sampling.backend == "vllm":
        return sample_vllm(model_name, prompts, settings, prep.stop_ids, prep.cfg.student.dtype,
                           prep.cfg.student.trust_remote_code)
    # engine: $OPSD_SAMPLING_ENGINE (hf, the default, or static: opsd_diag.fast_decode); config key to come
    return fast_decode.pick(sample_hf)(model, prep.tok, prompts, settings, prep.stop_ids)


def _checked(prep: Prepared, problem: dict, ids: list[int]) -> tuple[str, str | None, bool | None]:
    text = prep.tok.decode(ids, skip_special_tokens=True)
    if problem.get("answer") is None:
        return text, extract_answer(text, prep.cfg.analysis.checker), None
    return text, extract_answer(text, prep.cfg.analysis.checker), is_correct(text, problem["answer"],
                                                                            prep.cfg.analysis.checker)


def run_shard(prep: Prepared, index: int) -> dict[str, pd.DataFrame]:
    """Sample, check and score the prompts of one shard."""
    cfg = prep.cfg
    lo = index * cfg.shard_size
    idx = list(range(lo, min(len(prep.problems), lo + cfg.shard_size)))
    k = cfg.sampling.num_samples
    settings = SamplingSettings(k, cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.max_completion_length,
                                _shard_seed(cfg.sampling.seed, index), cfg.sampling.batch_size)
    samples = _sample(prep, prep.student, cfg.student.model, [prep.student_prompts[i] for i in idx], settings)

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
        ts = SamplingSettings(cfg.sampling.teacher_samples, cfg.sampling.temperature, cfg.sampling.top_p,
                              cfg.sampling.max_completion_length, _shard_seed(cfg.sampling.seed, index, 1 + n_t),
                              cfg.sampling.batch_size)
        model_name = cfg.student.model if t.is_self else t.model
        outs = _sample(prep, prep.teacher_models[t.name], model_name, [prep.teacher_prompts[t.name][i] for i in idx], ts)
        for i, per_prompt in zip(idx, outs):
            for j, c in enumerate(per_prompt):
                text, pred, correct = _checked(prep, prep.problems[i], c.ids)
                teacher_rows.append({"config": t.name, "problem_id": prep.problems[i]["id"], "sample_idx": j,
                                     "completion_ids": c.ids, "text": text, "answer_pred": pred, "correct": correct})

    tokens, topk = _score(prep, rollouts)
    return {"rollouts": pd.DataFrame(rollouts), "tokens": tokens, "topk": topk,
            "teacher_rollouts": pd.DataFrame(teacher_rows)}


def _score(prep: Prepared, rollouts: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    cfg = prep.cfg
    s = ScoreSettings(cfg.scoring_temperature, cfg.scoring.jsd_beta, cfg.scoring.centering_k, cfg.scoring.exopd_lambda,
                      cfg.scoring.exopd_reference, cfg.scoring.top_k, cfg.scoring.chunk_size)
    pad = prep.tok.pad_token_id
    token_parts, topk_parts = [], []
    names = cache_token_names(prep.tok)
    bs = cfg.scoring.batch_size
    scoreable = [r for r in rollouts if r["length"] > 0]
    # engine: $OPSD_SCORING_ENGINE (reference, the default; fused; compiled: opsd_diag.fused_scoring)
    score = fused_scoring.pick(score_batch)
    for start in range(0, len(scoreable), bs):
        batch = scoreable[start:start + bs]
        comps = [r["completion_ids"] for r in batch]
        teachers = {t.name: TeacherInput(prep.teacher_models[t.name], [r[f"prompt_ids.{t.name}"] for r in batch],
                                         [r[f"prompt_ids.{t.name}"] for r in batch]
                                         if cfg.scoring.base_view == "teacher" else None)
                    for t in cfg.teachers}
        base_prompts = [r["prompt_ids.student"] for r in batch] if cfg.scoring.base_view == "student" else None
        tokens, topk = score(prep.student, comps, [r["prompt_ids.student"] for r in batch], teachers, s, pad,
                              base=prep.base, base_prompts=base_prompts)
        rid = np.array([r["rollout_id"] for r in batch])
        flat_ids = np.array([t for c in comps for t in c])
        for name, cols in tokens.items():
            frame = pd.DataFrame({"rollout_id": rid[cols["row"]], "config": name, "pos": cols["pos"],
                                  "token_id": flat_ids, "token": [names(t) for t in flat_ids],
                                  **{c: cols[c] for c in COLUMNS}})
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


def default_out_dir(config_path: str | Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{Path(config_path).stem}-{stamp}"


def check_run_dir(prep: Prepared, out_dir: Path) -> None:
    """A new or empty folder, or a run of this same config (resume); anything else is refused."""
    out_dir = Path(out_dir)
    if (out_dir / "manifest.json").is_file():
        old = store.read_manifest(out_dir)
        if old["config"] != prep.cfg.model_dump(mode="json"):
            raise OpsdError(f"{out_dir} holds a run of a different config: choose another --out to start a new run")
    elif out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise OpsdError(f"{out_dir} exists and is not a run directory: choose an empty or new --out")


def open_run_dir(prep: Prepared, out_dir: Path) -> None:
    """Create the run directory, or clean a resumed one's half-written shards."""
    out_dir = Path(out_dir)
    if (out_dir / "manifest.json").is_file():
        store.clean_temp(out_dir)
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OpsdError(f"cannot create run directory {out_dir} ({e.strerror}): choose a writable --out") from None
    store.atomic_write_text(out_dir / "config.yaml", to_yaml(prep.cfg))
    store.atomic_write_json(out_dir / "manifest.json", manifest(prep, "running", started=time.time()))


def finish(prep: Prepared, out_dir: Path, started: float) -> dict:
    """Merge shards, aggregate, and mark the run finished."""
    tables = store.merge_shards(out_dir, prep.n_shards)
    a = prep.cfg.analysis
    summary = analysis.summarize(tables["tokens"], tables["rollouts"], tables["teacher_rollouts"],
                                 entropy_edges=a.entropy_edges, entropy_quantiles=a.entropy_quantiles,
                                 high_entropy=a.high_entropy, ks=tuple(a.pass_k), n_boot=a.bootstrap,
                                 seed=prep.cfg.sampling.seed)
    summary["context_truncated"] = {t: int(sum(v)) for t, v in prep.truncated.items()}
    store.atomic_write_json(Path(out_dir) / "summary.json", summary)
    store.atomic_write_json(Path(out_dir) / "manifest.json",
                            manifest(prep, "finished", seconds=round(time.time() - started, 2)))
    return summary


def run_diagnosis(cfg: DiagnosisConfig, out_dir: Path, show_progress: bool = True) -> Path:
    """Run (or resume) a diagnosis into ``out_dir``; shards are spread over accelerate processes."""
    from accelerate import PartialState
    from tqdm.auto import tqdm

    state = PartialState()
    if state.num_processes > 1:
        if cfg.device == "auto":
            cfg = cfg.model_copy(update={"device": str(state.device)})
        if state.device.type == "cpu":  # several CPU processes share the cores
            torch.set_num_threads(max(1, (torch.get_num_threads()) // state.num_processes))
    started = time.time()
    prep = prepare(cfg)
    out_dir = Path(out_dir)
    check_run_dir(prep, out_dir)  # every process checks, so a refusal never leaves one waiting
    if state.is_main_process:
        open_run_dir(prep, out_dir)
    state.wait_for_everyone()
    mine = [i for i in range(prep.n_shards)
            if i % state.num_processes == state.process_index and not store.shard_done(out_dir, i)]
    for i in tqdm(mine, desc="shards", unit="shard", disable=not (show_progress and state.is_main_process)):
        store.write_shard(out_dir, i, run_shard(prep, i))
    state.wait_for_everyone()
    if state.is_main_process:
        finish(prep, out_dir, started)
        if cfg.ideal is not None and cfg.ideal.enabled:
            from opsd_diag.ideal import run_ideal

            run_ideal(prep, out_dir, cfg.ideal, show_progress=show_progress)
    state.wait_for_everyone()
    return out_dir
