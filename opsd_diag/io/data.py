"""Load and validate problem sets (JSONL / JSON / CSV / Parquet) into plain problem records.

A record is ``{"id", "prompt", "solution", "answer", "meta"}``; ``prompt`` is a string or a list of
chat messages. Other datasets' column names are mapped through ``DataSpec.fields``
(our name -> their name). Errors name the file, the line or row, and the fix. Text files are read as
UTF-8 (a byte-order mark is dropped); a ``.json`` file may hold one JSON array of records or JSON Lines.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, store
from opsd_diag.config.spec import DataSpec
from opsd_diag.config.yamlfile import decode, read_bytes

OUR_FIELDS = ("id", "prompt", "solution", "answer", "meta")
_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}


def _json_rows(path: Path, text: str) -> tuple[list[dict], str]:
    """Records of a JSON Lines file, or of a file holding one JSON array of records."""
    if text.lstrip().startswith("["):
        try:
            data = safe.parse_json(text, path)  # a nesting bomb is one clear line, never a RecursionError
        except json.JSONDecodeError:
            data = None  # not one array: read it as JSON Lines below, which names the bad line
        if isinstance(data, list):
            for n, row in enumerate(data, start=1):
                if not isinstance(row, dict):
                    raise OpsdError(f"{path} record {n} of its JSON array is not a JSON object: each record must "
                                    "be one problem {\"prompt\": ...}")
            return data, "record"
    rows = []
    # records end at '\n' only: str.splitlines would also split at U+2028, U+0085... inside a JSON string
    for n, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = safe.parse_json(line, f"{path} line {n}")
        except json.JSONDecodeError as e:
            hint = (": the file must hold JSON Lines (one record per line) or one JSON array of records"
                    if n == 1 and line.strip() in ("{", "[") else ": fix or remove that line")
            raise OpsdError(f"{path} line {n} is not valid JSON ({e.msg}){hint}") from None
        if not isinstance(row, dict):
            raise OpsdError(f"{path} line {n} is not a JSON object: each line must be one problem record")
        rows.append(row)
    return rows, "line"


def _read_rows(path: Path, data: bytes, fmt: str, key: str) -> tuple[list[dict], list[str] | None, str]:
    """(records of the file's ``data``, the header's columns for a table format else None, what a record is)."""
    if fmt == "auto":
        fmt = _EXTENSIONS.get(path.suffix.lower(), "")
        if not fmt:
            raise OpsdError(f"cannot tell the format of {path} from its extension: set {key}.format to jsonl, csv or "
                            "parquet")
    if fmt == "jsonl":
        rows, what = _json_rows(path, decode(data, path, "data"))
        return rows, None, what
    try:
        if fmt == "csv":
            frame = pd.read_csv(io.StringIO(decode(data, path, "data")), dtype=str, keep_default_na=False)
        else:
            frame = store.parquet_table(data).to_pandas()
    except OpsdError:
        raise
    except Exception as e:  # pandas/pyarrow raise many types for a corrupt file
        raise OpsdError(f"cannot read {path} as {fmt} ({type(e).__name__}: {str(e).splitlines()[0][:120]})") from None
    return frame.to_dict(orient="records"), [str(c) for c in frame.columns], "row"


def _clean(value):
    """Missing values from CSV/Parquet (NaN, None, '') become None."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value.strip()):
        return None
    if hasattr(value, "tolist"):  # numpy arrays from Parquet list columns
        return value.tolist()
    return value


def _check_prompt(prompt, where: str, col: str):
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt):
        if prompt[-1]["role"] != "user":
            raise OpsdError(f"{where}: the last chat message of the prompt must have role 'user'")
        if not prompt[-1]["content"].strip():
            raise OpsdError(f"{where}: the last chat message of '{col}' is empty: every problem needs a question")
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise OpsdError(f"{where}: '{col}' must be a string or a list of {{role, content}} chat messages")


def _check_columns(path: Path, spec: DataSpec, rows: list[dict], header: list[str] | None, key: str) -> None:
    """The prompt column and every explicitly mapped column exist somewhere in the file."""
    present = set(header) if header is not None else {k for r in rows for k in r}
    shown = ", ".join(sorted(present)[:12]) + (" ..." if len(present) > 12 else "")
    prompt = spec.fields.get("prompt", "prompt")
    if header is not None and prompt not in present:
        delimiter = next((d for d in (";", "\t", "|") if len(header) == 1 and d in header[0]), None)
        if delimiter is not None:
            raise OpsdError(f"the header of {path} is one column {header[0][:60]!r} with no '{prompt}' column: is "
                            f"the file separated by {delimiter!r}? CSV files must use commas")
        raise OpsdError(f"{path} has no '{prompt}' column (columns: {shown}): map your prompt column with "
                        f"{key}.fields (e.g. fields: {{prompt: question}})")
    for ours, theirs in spec.fields.items():
        if theirs not in present:
            raise OpsdError(f"{key}.fields maps {ours} to '{theirs}', but no record of {path} has a '{theirs}' field "
                            f"(fields found: {shown}): check the spelling")


def _meta(value, where: str) -> dict:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            parsed = safe.parse_json(value, where)
        except json.JSONDecodeError:
            parsed = None
        return parsed if isinstance(parsed, dict) else {"text": value}
    if not isinstance(value, dict):
        raise OpsdError(f"{where}: 'meta' must be a mapping (a JSON object such as {{\"difficulty\": 2}}), got "
                        f"{json.dumps(value, default=str)[:40]}")
    return value


def _check_text(rec: dict, where: str) -> None:
    """Every string of the record is real text: a lone surrogate (JSON's "\\ud800") cannot be tokenised or stored."""
    try:
        json.dumps(rec, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as e:
        raise OpsdError(f"{where} holds a lone surrogate code point (U+{ord(e.object[e.start]):04X}, e.g. a JSON "
                        "'\\ud800' escape without its pair), which is not text: fix or remove it") from None


def load_problems(spec: DataSpec, key: str = "data") -> list[dict]:
    """All problems of the data source, validated; ``limit`` keeps the first N.

    ``key`` is where the spec sits in the config (``data``, ``training.data``...): errors name it.
    """
    path = Path(spec.path)
    data = read_bytes(path, "data", f"set {key}.path to a JSONL, CSV or Parquet file")  # a FIFO, a folder: said
    unknown = set(spec.fields) - set(OUR_FIELDS)
    if unknown:
        raise OpsdError(f"{key}.fields maps unknown field(s) {sorted(unknown)}: map only {', '.join(OUR_FIELDS)}")
    rows, header, what = _read_rows(path, data, spec.format, key)
    if not rows:
        raise OpsdError(f"{path} contains no problems: add records with at least a 'prompt' field")
    _check_columns(path, spec, rows, header, key)
    problems, seen = [], set()
    for n, row in enumerate(rows, start=1):
        where = f"{path} {what} {n}"
        rec = {f: _clean(row.get(spec.fields.get(f, f))) for f in OUR_FIELDS}
        col = spec.fields.get("prompt", "prompt")
        if col not in row:
            raise OpsdError(f"{where} has no '{col}' field: map your prompt column with {key}.fields "
                            f"(e.g. fields: {{prompt: question}})")
        if rec["prompt"] is None or rec["prompt"] == []:
            raise OpsdError(f"{where}: '{col}' is empty: every problem needs a question")
        rec["prompt"] = _check_prompt(rec["prompt"], where, col)
        rec["id"] = str(rec["id"]) if rec["id"] is not None else f"row{n:06d}"
        if rec["id"] in seen:
            raise OpsdError(f"{where}: duplicate id '{rec['id']}': ids must be unique")
        seen.add(rec["id"])
        for f in ("solution", "answer"):
            if rec[f] is not None and not isinstance(rec[f], str):
                rec[f] = str(rec[f])
        rec["meta"] = _meta(rec["meta"], where)
        _check_text(rec, where)
        problems.append(rec)
        if spec.limit and len(problems) >= spec.limit:
            break
    return problems
