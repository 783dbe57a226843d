"""What the app's forms need: a config from form fields, previews and a cost estimate, from the library's parts.

The New-diagnosis form builds a plain mapping, and everything else happens here, testable without a
browser: the mapping is validated into a ``DiagnosisConfig`` (the YAML stays the saved artefact),
the first rows of a data file are previewed raw and mapped, the exact prompt each model sees is
rendered with the chat template applied, and the work of a diagnosis is counted and, when an earlier
finished run of the same student exists, timed from it.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, store
from opsd_diag.config.spec import DataSpec, DiagnosisConfig, from_dict, to_yaml
from opsd_diag.io.data import load_problems
from opsd_diag.io.templates import BUILTIN, context_fields, placeholders, resolve
from opsd_diag.config.yamlfile import read_bytes

BUNDLED_DATA = Path(__file__).resolve().parents[1] / "sample_data" / "problems"  # beside the app, wherever it runs


def bundled_data() -> list[str]:
    """The bundled problem splits: relative to the working directory when they lie under it (the saved YAML
    stays the same in any checkout), else absolute; none in an installation without ``sample_data/``."""
    if not BUNDLED_DATA.is_dir():
        return []
    cwd = Path.cwd().resolve()
    return sorted(str(p.relative_to(cwd)) if p.is_relative_to(cwd) else str(p) for p in BUNDLED_DATA.glob("*.jsonl"))


def build_config(fields: dict) -> DiagnosisConfig:
    """The form's mapping as a validated config (empty values dropped), or one OpsdError naming the key."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x not in (None, "", {}, [])}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v
    return from_dict(clean(fields), "the form")


def config_yaml(cfg: DiagnosisConfig) -> str:
    """The YAML file of a config: only the keys that differ from the defaults, in the config's order."""
    data = cfg.model_dump(mode="json", exclude_defaults=True)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def save_config(cfg: DiagnosisConfig, path: str | Path, overwrite: bool = False) -> Path:
    """Write the config's YAML to ``path`` (refusing to replace another file unless ``overwrite``).

    What stands there is checked before it is read (a FIFO would block the read forever, a link or a
    run's file is never replaced), and the old file is read without blocking and bounded."""
    path = safe.check_path(path, "the config file")
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise OpsdError(f"{path}: a config file ends in .yaml or .yml")
    text = config_yaml(cfg)
    safe.check_target(path)
    try:
        if os.path.lexists(path) and not overwrite and safe.read_bytes(path, 16 << 20) != text.encode():
            raise OpsdError(f"{path} exists and holds another config: choose another name, or tick 'replace'")
        path.parent.mkdir(parents=True, exist_ok=True)
        safe.write_file(path, text.encode())
    except OSError as e:
        raise OpsdError(f"cannot write {path} ({e.strerror}): choose a writable place") from None
    return path


def raw_rows(path: str | Path, n: int = 5, fmt: str = "auto") -> pd.DataFrame:
    """The first ``n`` records of a data file as stored (before any field mapping)."""
    path = Path(path)
    data = io.BytesIO(read_bytes(path, "data", "pick a bundled split, give a path, or upload a file"))  # never a FIFO
    suffix = path.suffix.lower() if fmt == "auto" else f".{fmt}"
    try:
        if suffix in (".jsonl", ".json"):
            return pd.read_json(data, lines=True, nrows=n, dtype=False)
        if suffix == ".csv":
            return pd.read_csv(data, nrows=n, dtype=str, keep_default_na=False)
        if suffix == ".parquet":
            return store.parquet_table(data.getvalue()).to_pandas().head(n)
    except Exception as e:  # pandas raises many types for a malformed file
        raise OpsdError(f"cannot read {path} ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    raise OpsdError(f"cannot tell the format of {path}: use a .jsonl, .csv or .parquet file")


def problems(spec: dict, n: int = 5) -> list[dict]:
    """The first ``n`` problems after the field mapping, validated as a run would read them."""
    return load_problems(DataSpec.model_validate({**spec, "limit": n}))


def placeholder_values(problem: dict, context: str, partial_fraction: float = 0.5) -> dict[str, str]:
    """What each placeholder of a context template receives for one problem."""
    used = placeholders(resolve(context))
    values = context_fields(problem, partial_fraction)
    return {k: values[k] for k in ("prompt", "solution", "answer", "partial_solution", "hint") if k in used}


@dataclass(frozen=True)
class PromptPreview:
    who: str  # student, or the teacher config's name
    text: str  # the exact text after the chat template (decoded from the ids the model sees)
    n_tokens: int
    truncated: bool


def prompt_previews(cfg: DiagnosisConfig, problem: dict, tokenizer, teacher_tokenizers: dict | None = None
                    ) -> list[PromptPreview]:
    """The exact prompt of the student and of every teacher view for one problem, chat template applied.

    Each view is rendered as the run renders it (io.views): an external teacher's with its own
    tokenizer's template when ``teacher_tokenizers`` (config name -> tokenizer) has it, else the student's."""
    from opsd_diag.io.views import build_views, student_renderer, teacher_renderer

    s_render = student_renderer(cfg, tokenizer)
    renders = {t.name: teacher_renderer(cfg, t, tokenizer, (teacher_tokenizers or {}).get(t.name))
               for t in cfg.teachers}
    views = build_views(cfg, [problem], s_render, renders, cfg.data.system_prompt)
    out = [PromptPreview("student", tokenizer.decode(views.student[0]), len(views.student[0]), False)]
    for t in cfg.teachers:
        ids = views.teachers[t.name][0]
        out.append(PromptPreview(t.name, renders[t.name].tok.decode(ids), len(ids), views.truncated[t.name][0]))
    return out


def count_problems(cfg: DiagnosisConfig) -> int:
    try:
        n = len(load_problems(cfg.data))
    except OpsdError:
        return 0
    return n


def work(cfg: DiagnosisConfig, n_problems: int) -> dict[str, int]:
    """What a diagnosis of ``cfg`` on ``n_problems`` problems costs, in rollouts, tokens and passes (at most)."""
    s = cfg.sampling
    rollouts = n_problems * s.num_samples
    gen = rollouts * s.max_completion_length
    teacher_gen = n_problems * s.teacher_samples * len(cfg.teachers) * s.max_completion_length
    views = 1 + len(cfg.teachers) + (1 if cfg.base else 0) * (len(cfg.teachers) if cfg.scoring.base_view == "teacher"
                                                               else 1)
    ideal = cfg.ideal if cfg.ideal is not None and cfg.ideal.enabled else None
    cont_len = (ideal.max_continuation_length or s.max_completion_length) if ideal else 0
    return {"problems": n_problems, "rollouts": rollouts, "generated_tokens": gen, "teacher_tokens": teacher_gen,
            "scored_tokens": gen * views, "forward_views": views,
            "continuations": ideal.budget if ideal else 0,
            "continuation_tokens": (ideal.budget * cont_len) if ideal else 0}


def _units(w: dict[str, int]) -> float:
    # Sampling dominates on every machine we have measured; scoring is one forward per view.
    return w["generated_tokens"] + w["teacher_tokens"] + w["continuation_tokens"] + 0.1 * w["scored_tokens"]


def cost_estimate(cfg: DiagnosisConfig, n_problems: int, runs_root: str | Path = "runs") -> dict:
    """``work`` plus seconds, timed from the newest finished run of the same student under ``runs_root``
    (its seconds per unit of work); ``seconds`` is None when there is none to time from."""
    w = work(cfg, n_problems)
    root = Path(runs_root)
    for manifest in sorted(root.glob("*/manifest.json"), key=lambda p: p.stat().st_mtime, reverse=True) \
            if root.is_dir() else []:
        try:
            m = store.read_manifest(manifest.parent)
            past = from_dict(m.get("config") or {}, str(manifest))
        except OpsdError:
            continue
        if m.get("status") != "finished" or not m.get("seconds") or past.student.model != cfg.student.model:
            continue
        pw = work(past, int(m.get("n_problems") or 0))
        if _units(pw) > 0:
            rate = float(m["seconds"]) / _units(pw)
            return {**w, "seconds": rate * _units(w), "timed_from": str(manifest.parent)}
    return {**w, "seconds": None, "timed_from": None}


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    seconds = max(0, int(round(seconds)))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


CONTEXTS = tuple(BUILTIN)
__all__ = ["CONTEXTS", "build_config", "config_yaml", "cost_estimate", "duration", "placeholder_values",
           "prompt_previews", "problems", "raw_rows", "save_config", "to_yaml", "work"]
