"""Load and validate problem sets (JSONL / CSV / Parquet) into plain problem records.

A record is ``{"id", "prompt", "solution", "answer", "meta"}``; ``prompt`` is a string or a list of
chat messages. Other datasets' column names are mapped through ``DataSpec.fields``
(our name -> their name). Errors name the file, the line or row, and the fix.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.io.config import DataSpec

OUR_FIELDS = ("id", "prompt", "solution", "answer", "meta")


def _read_rows(path: Path, fmt: str) -> list[dict]:
    if fmt == "auto":
        fmt = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix.lower(), "")
        if not fmt:
            raise OpsdError(f"cannot tell the format of {path} from its extension: set data.format to jsonl, csv or parquet")
    if fmt == "jsonl":
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise OpsdError(f"{path} line {n} is not valid JSON ({e.msg}): fix or remove that line") from None
            if not isinstance(row, dict):
                raise OpsdError(f"{path} line {n} is not a JSON object: each line must be one problem record")
            rows.append(row)
        return rows
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False) if fmt == "csv" else pd.read_parquet(path)
    except Exception as e:  # pandas/pyarrow raise many types for a corrupt file
        raise OpsdError(f"cannot read {path} as {fmt} ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    return frame.to_dict(orient="records")


def _clean(value):
    """Missing values from CSV/Parquet (NaN, None, '') become None."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value.strip()):
        return None
    if hasattr(value, "tolist"):  # numpy arrays from Parquet list columns
        return value.tolist()
    return value


def _check_prompt(prompt, where: str):
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt):
        if prompt[-1]["role"] != "user":
            raise OpsdError(f"{where}: the last chat message of the prompt must have role 'user'")
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise OpsdError(f"{where}: 'prompt' must be a string or a list of {{role, content}} chat messages")


def load_problems(spec: DataSpec) -> list[dict]:
    """All problems of the data source, validated; ``limit`` keeps the first N."""
    path = Path(spec.path)
    if not path.is_file():
        raise OpsdError(f"data file {path} not found: set data.path to a JSONL, CSV or Parquet file")
    unknown = set(spec.fields) - set(OUR_FIELDS)
    if unknown:
        raise OpsdError(f"data.fields maps unknown field(s) {sorted(unknown)}: map only {', '.join(OUR_FIELDS)}")
    rows = _read_rows(path, spec.format)
    if not rows:
        raise OpsdError(f"{path} contains no problems: add records with at least a 'prompt' field")
    what = "line" if spec.format == "jsonl" or path.suffix.lower() in (".jsonl", ".json") else "row"
    problems, seen = [], set()
    for n, row in enumerate(rows, start=1):
        where = f"{path} {what} {n}"
        rec = {f: _clean(row.get(spec.fields.get(f, f))) for f in OUR_FIELDS}
        if rec["prompt"] is None:
            col = spec.fields.get("prompt", "prompt")
            raise OpsdError(f"{where} has no '{col}' field: map your prompt column with data.fields "
                            f"(e.g. fields: {{prompt: question}})")
        rec["prompt"] = _check_prompt(rec["prompt"], where)
        rec["id"] = str(rec["id"]) if rec["id"] is not None else f"row{n:06d}"
        if rec["id"] in seen:
            raise OpsdError(f"{where}: duplicate id '{rec['id']}': ids must be unique")
        seen.add(rec["id"])
        for key in ("solution", "answer"):
            if rec[key] is not None and not isinstance(rec[key], str):
                rec[key] = str(rec[key])
        if isinstance(rec["meta"], str):
            try:
                rec["meta"] = json.loads(rec["meta"])
            except json.JSONDecodeError:
                rec["meta"] = {"text": rec["meta"]}
        rec["meta"] = rec["meta"] or {}
        problems.append(rec)
        if spec.limit and len(problems) >= spec.limit:
            break
    return problems

