"""Run directories: manifest + Parquet tables, written atomically, resumable shard by shard.

Layout of ``runs/<id>/``::

    manifest.json         config, versions, seeds, model fingerprints, status, timings
    shards/NNNNN/*.parquet one finished shard (a rename makes it visible: all or nothing)
    rollouts.parquet tokens.parquet topk.parquet teacher_rollouts.parquet summary.json
                          merged when every shard is done

A killed run leaves finished shard folders and possibly a hidden temp folder; resuming skips the
finished shards, so the merged tables equal those of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe
from opsd_diag.schema import LATER_COLUMNS, TABLE_COLUMNS

RUN_ID_KEY = b"opsd_run_id"
SUMMARY_ID = "run_id"  # summary.json's copy of the manifest's run id (``write_summary``)
# What the manifest's ``stamps`` lists: the files that carry its run id. A run of an older version, made before
# summary.json was stamped, lacks the entry, so its unstamped summary still opens.
STAMPS = ("tables", "summary.json")
SPACE_PROBE = 64 << 10  # bytes written once to prove the run directory's disk has room

TABLES = ("rollouts", "tokens", "topk", "teacher_rollouts")
# What a run directory may hold before the run itself writes: what the job launcher leaves (opsd_diag.jobs)
JOB_FILES = frozenset({"status.json", "stdout.log", "STOP", ".lock"})
RUN_FILES = ("manifest.json", "config.yaml", "summary.json", *(f"{t}.parquet" for t in TABLES), "nodes.parquet",
             "acting_nodes.parquet",
             *sorted(JOB_FILES))


publish_mode = safe.publish_mode


def atomic_write_bytes(path: Path, data: bytes, *, own_run: bool = True) -> None:
    """Write a file of a run this process writes: a temp file beside ``path``, then a rename (readers see
    the old file or the new one). Through ``io.safe.write_file``: a link, FIFO, device or folder in the
    way is refused. A command's outputs use ``safe.write_file`` with ``own_run=False``."""
    safe.write_file(path, data, own_run=own_run)


def atomic_write_text(path: Path, text: str, *, own_run: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), own_run=own_run)


def atomic_write_json(path: Path, obj, *, own_run: bool = True) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n", own_run=own_run)


def _arrow(frame: pd.DataFrame, run_id: str | None):
    """The frame as an Arrow table stamped with the run's id (a table copied in from another run is caught)."""
    import pyarrow as pa

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if run_id:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_ID_KEY: run_id.encode()})
    return table


def _write_parquet(f, frame: pd.DataFrame, run_id: str | None) -> None:
    import pyarrow.parquet as pq

    pq.write_table(_arrow(frame, run_id), f)


def atomic_write_parquet(path: Path, frame: pd.DataFrame, *, own_run: bool = True) -> None:
    safe.write_file(path, lambda f: _write_parquet(f, frame, None), own_run=own_run)


def write_table(run_dir: Path, name: str, frame: pd.DataFrame) -> None:
    """``RUN/<name>.parquet``, atomically, stamped with the run's id."""
    run_dir = Path(run_dir)
    rid = run_id(run_dir)
    safe.write_file(run_dir / f"{name}.parquet", lambda f: _write_parquet(f, frame, rid), own_run=True)


def run_id(run_dir: Path) -> str | None:
    """The id the manifest gives this run (None for a run of an earlier version, or without a manifest)."""
    try:
        rid = read_json(Path(run_dir) / "manifest.json").get("run_id")
    except OpsdError:
        return None
    return rid if isinstance(rid, str) else None


def shard_dir(run_dir: Path, index: int) -> Path:
    return Path(run_dir) / "shards" / f"{index:05d}"


def shard_done(run_dir: Path, index: int) -> bool:
    return shard_dir(run_dir, index).is_dir()


def write_shard(run_dir: Path, index: int, tables: dict[str, pd.DataFrame]) -> None:
    """Write a shard's tables into a temp folder, then rename it into place in one step (the temp folder
    goes on any failure: a full disk leaves nothing half-written)."""
    final = shard_dir(run_dir, index)
    safe.real_dir(final.parent, run_dir)
    rid = run_id(run_dir)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        publish_mode(tmp, directory=True)
        for name, frame in tables.items():
            with open(tmp / f"{name}.parquet", "xb") as f:  # a new file in our own new folder
                _write_parquet(f, frame, rid)
        os.replace(tmp, final)
    except BaseException as e:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        err = safe.resource_error(e, final) if isinstance(e, Exception) else None
        if err is None:
            raise
        raise err from None


def merge_shards(run_dir: Path, n_shards: int) -> dict[str, pd.DataFrame]:
    """Concatenate shard tables in shard order and write the run-level tables."""
    run_dir = Path(run_dir)
    merged = {}
    for name in TABLES:
        parts = [_read_parquet(p, run_id(run_dir)) for i in range(n_shards)
                 if (p := shard_dir(run_dir, i) / f"{name}.parquet").is_file()]
        merged[name] = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        write_table(run_dir, name, merged[name])
    return merged


def clean_temp(run_dir: Path) -> None:
    """Remove half-written shard folders left by a killed run."""
    shards = Path(run_dir) / "shards"
    if shards.is_dir() and not shards.is_symlink():
        for p in shards.glob(".*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


def read_json(path: Path) -> dict:
    """A JSON object written by this tool, or an OpsdError naming the file (missing, corrupt, a link or a
    FIFO, too large or too deeply nested: ``io.safe``)."""
    path = Path(path)
    try:
        obj = safe.read_json(path)
    except FileNotFoundError:
        raise OpsdError(f"{path} is missing: the run is incomplete; rerun it with the same --out to resume") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OpsdError(f"{path} is unreadable or corrupt ({type(e).__name__}): rerun the run into a new --out") \
            from None
    if not isinstance(obj, dict):
        raise OpsdError(f"{path} is corrupt (not a JSON object): rerun the run into a new --out")
    return obj


def read_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / "manifest.json"
    if not os.path.lexists(path):
        if not Path(run_dir).exists():
            raise OpsdError(f"{run_dir} does not exist: pass a folder made by 'opsd-diag run'")
        if any((Path(run_dir) / name).exists() for name in ("config.yaml", "metrics.jsonl", "checkpoints")):
            raise OpsdError(f"{run_dir} is a training run (made by opsd-train), not a diagnosis: follow it in the "
                            "app's Train page, or compare it with its prediction by 'opsd-diag scoreboard'")
        raise OpsdError(f"{run_dir} is not a run directory (no manifest.json): pass a folder made by 'opsd-diag run'")
    return read_json(path)


def parquet_table(data: bytes):
    """A Parquet file's bytes as an Arrow table, read from a copy Arrow owns. Read from a Python object (a file, a
    ``bytes``), the reader's last reference may be dropped by a thread of Arrow's own pool, which then needs the GIL:
    after the program's end, while Python shuts down, that thread cannot have it and the process aborts
    ("terminate called without an active exception", exit 134) after its work is done."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    sink.write(data)
    return pq.read_table(pa.BufferReader(sink.getvalue()))


def _read_parquet(path: Path, expected_id: str | None, columns: dict[str, str] | None = None,
                  vocab_size=None) -> pd.DataFrame:
    """A parquet file of a run, refused when it is not a regular file, does not hold ``columns``
    (``check_table``) or carries another run's id."""
    try:
        with os.fdopen(safe.open_regular(path), "rb") as f:
            table = parquet_table(f.read())
        frame = table.to_pandas()
    except OpsdError:
        raise
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise OpsdError(f"{path} is corrupt ({type(e).__name__}): rerun the run into a new --out") from None
    if columns is not None:
        frame = check_table(frame, path, columns, vocab_size)
    _check_stamp(path, table.schema.metadata, expected_id)
    return frame


def _check_stamp(path: Path, metadata: dict | None, expected_id: str | None) -> None:
    """A table of a run whose manifest has a run id carries that id in its Parquet metadata."""
    found = (metadata or {}).get(RUN_ID_KEY, b"").decode(errors="replace") or None
    if expected_id is None or found == expected_id:
        return
    if found is None:
        raise OpsdError(f"{path} lacks the run-id stamp that every table of an OPSD-Diag run of this version "
                        f"carries (this run's is {expected_id}): it was not written by this run (another tool, or "
                        "an older version); rerun the diagnosis into a new --out")
    raise OpsdError(f"{path} belongs to another run (run id {found}; this run's manifest.json says "
                    f"{expected_id}): tables were copied between runs; rerun the diagnosis into a new --out")


def table_columns(run_dir: Path, name: str) -> list[str]:
    """The column names of a stored table, from its schema alone (no rows are read), checked to be this run's
    like ``read_table``; [] when the table is absent."""
    import pyarrow.parquet as pq

    path = Path(run_dir) / f"{name}.parquet"
    if not os.path.lexists(path):
        return []
    rid = run_id(run_dir)
    try:
        with os.fdopen(safe.open_regular(path), "rb") as f:
            schema = pq.read_schema(f)
    except OpsdError:
        raise
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise OpsdError(f"{path} is corrupt ({type(e).__name__}): rerun the run into a new --out") from None
    _check_stamp(path, schema.metadata, rid)
    return list(schema.names)


def write_summary(run_dir: Path, summary: dict) -> None:
    """``RUN/summary.json``, atomically, stamped with the run's id (a summary copied in from another
    diagnosis is caught by ``read_summary``)."""
    rid = run_id(run_dir)
    atomic_write_json(Path(run_dir) / "summary.json", {**summary, **({SUMMARY_ID: rid} if rid else {})})


def read_summary(run_dir: Path, manifest: dict | None = None) -> dict:
    """``RUN/summary.json`` as ``read_json`` reads it, refused when it is another run's (``check_summary``)."""
    run_dir = Path(run_dir)
    summary = read_json(run_dir / "summary.json")
    check_summary(run_dir, summary, read_manifest(run_dir) if manifest is None else manifest)
    return summary


def check_summary(run_dir: Path, summary: dict, manifest: dict) -> None:
    """The run's summary carries the manifest's run id where the manifest says its run stamps its summary
    (``STAMPS``); checked after the schema, as the tables are."""
    path = Path(run_dir) / "summary.json"
    rid = manifest.get("run_id") if isinstance(manifest.get("run_id"), str) else None
    stamps = manifest.get("stamps")
    found = summary.get(SUMMARY_ID)
    if rid is None or found == rid:
        return
    if found is not None:
        raise OpsdError(f"{path} belongs to another run (run id {str(found)[:64]}; this run's manifest.json says "
                        f"{rid}): it was copied in from another diagnosis; put back this run's own summary.json or "
                        "rerun the diagnosis into a new --out")
    if isinstance(stamps, list) and "summary.json" in stamps:
        raise OpsdError(f"{path} lacks the run-id stamp this run's summary carries (its manifest.json says run id "
                        f"{rid}): it is not this run's summary (copied from another diagnosis, or written by another "
                        "tool); put back this run's own summary.json or rerun the diagnosis into a new --out")
    # else: a run of a version that did not stamp its summary yet


def read_table(run_dir: Path, name: str, optional: bool = False) -> pd.DataFrame:
    """One stored table of a run, checked against its schema (``schema.TABLE_COLUMNS``) and the run's
    vocabulary; a missing file is an OpsdError unless ``optional`` (then an empty table)."""
    path = Path(run_dir) / f"{name}.parquet"
    if not os.path.lexists(path):
        if optional:
            return pd.DataFrame()
        raise OpsdError(f"{path} is missing: the run is incomplete or damaged; rerun the diagnosis into a new --out")
    manifest = read_manifest(run_dir)
    frame = _read_parquet(path, manifest.get("run_id") if isinstance(manifest.get("run_id"), str) else None,
                          TABLE_COLUMNS.get(name, {}), manifest.get("vocab_size"))
    later = LATER_COLUMNS.get(name, ())
    frame = check_table(frame, path, {c: "f" for c in later if c in frame.columns})  # numbers where present
    for c in later:  # a run of an older version: not measured (NaN), never a zero
        if c not in frame.columns:
            frame[c] = pd.Series(float("nan"), index=frame.index, dtype="float32")
    return frame


def check_table(frame: pd.DataFrame, path: Path, columns: dict[str, str], vocab_size=None) -> pd.DataFrame:
    """The table with its required ``columns`` (name -> kind: i integer, f number, s text, b flag, l list),
    or an OpsdError naming the file and the first bad column; token ids must lie in the vocabulary."""
    from pandas.api import types

    if frame.empty and not len(frame.columns):  # a run with no rows of this kind stores an empty table
        return pd.DataFrame({c: pd.Series(dtype=_EMPTY[k]) for c, k in columns.items()})
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise OpsdError(f"{path} lacks the columns {missing[:5]} (written by another version, or damaged): rerun the "
                        "diagnosis into a new --out")
    ok = {"i": types.is_integer_dtype, "f": lambda s: types.is_numeric_dtype(s) and not types.is_bool_dtype(s),
          "s": lambda s: types.is_string_dtype(s) or types.is_object_dtype(s),
          "b": lambda s: types.is_bool_dtype(s) or types.is_object_dtype(s), "l": types.is_object_dtype}
    for c, k in columns.items():
        if not ok[k](frame[c]):
            raise OpsdError(f"{path}: column '{c}' holds {frame[c].dtype}, not {_KIND_NAMES[k]} (damaged, or written "
                            "by another tool): rerun the diagnosis into a new --out")
    if isinstance(vocab_size, int) and vocab_size > 0:
        for c in (c for c in ("token_id", "completion_ids", "cand_ids") if c in frame.columns and len(frame)):
            ids = frame[c] if c == "token_id" else frame[c].explode().dropna()
            ids = pd.to_numeric(ids, errors="coerce")
            if ids.isna().any() or len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
                raise OpsdError(f"{path}: column '{c}' holds token ids outside the vocabulary (0 to {vocab_size - 1}) "
                                "of the run's models: the table does not belong to this run; rerun the diagnosis")
    return frame


_KIND_NAMES = {"i": "integers", "f": "numbers", "s": "text", "b": "true/false flags", "l": "lists"}
_EMPTY = {"i": "int64", "f": "float64", "s": "object", "b": "object", "l": "object"}


def default_run_dir(config_path: str | Path, root: str | Path = "runs", prefix: str = "") -> Path:
    """``<root>/<prefix><config name>-<UTC time>``: where a run goes without --out."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{prefix}{Path(config_path).stem}-{stamp}"


def check_writable(out_dir: Path) -> None:
    """The run directory can be written (created, if it does not exist): checked before any model loads."""
    out_dir = Path(out_dir)
    parent = out_dir if out_dir.exists() else out_dir.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise OpsdError(f"--out {out_dir}: {parent} is a file, not a directory: choose another --out")
    try:
        with tempfile.NamedTemporaryFile(dir=parent) as f:  # some data too: a full disk is said now, not mid-run
            f.write(b"\0" * SPACE_PROBE)
            f.flush()
    except OSError as e:
        raise safe.resource_error(e, out_dir) or \
            OpsdError(f"cannot write the run directory {out_dir} ({e.strerror}): choose a writable --out") from None


def check_run_dir(out_dir: Path, config: dict) -> None:
    """A new or empty folder, or a run of this same config (resume), that can be written; anything else
    is refused."""
    out_dir = Path(out_dir)
    safe.check_run_files(out_dir, RUN_FILES, ("shards",))  # nothing here is written through a link or a FIFO
    if os.path.lexists(out_dir / "manifest.json"):
        if read_manifest(out_dir).get("config") != config:
            raise OpsdError(f"{out_dir} holds a run of a different config: choose another --out to start a new run")
    elif out_dir.exists() and not out_dir.is_dir():
        raise OpsdError(f"--out {out_dir} is a file, not a directory: choose an empty or new --out")
    elif out_dir.exists() and not is_job_dir(out_dir):
        raise OpsdError(f"{out_dir} exists and is not a run directory: choose an empty or new --out")
    check_writable(out_dir)


def is_job_dir(path: Path) -> bool:
    """An empty folder, or one holding only what the job launcher leaves before the run writes (as plain
    files: a folder or a link in their place is not the launcher's)."""
    path = Path(path)
    if not path.is_dir():
        return False
    names = set(os.listdir(path))
    return names <= JOB_FILES and all((path / n).is_file() and not (path / n).is_symlink() for n in names)


def open_run_dir(out_dir: Path, config_yaml: str, manifest: dict) -> None:
    """Create the run directory with its config and manifest, or clean a resumed one's half-written shards."""
    out_dir = Path(out_dir)
    if (out_dir / "manifest.json").is_file():
        clean_temp(out_dir)
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise safe.resource_error(e, out_dir) or \
            OpsdError(f"cannot create run directory {out_dir} ({e.strerror}): choose a writable --out") from None
    atomic_write_text(out_dir / "config.yaml", config_yaml)
    atomic_write_json(out_dir / "manifest.json", {**manifest, "run_id": uuid.uuid4().hex})
