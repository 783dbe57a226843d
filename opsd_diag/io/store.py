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
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS, TOKEN_KEYS

TABLES = ("rollouts", "tokens", "topk", "teacher_rollouts")
# What a run directory may hold before the run itself writes: what the job launcher leaves (opsd_diag.jobs)
JOB_FILES = frozenset({"status.json", "stdout.log", "STOP", ".lock"})


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import (os.umask can only be read by setting it)


def publish_mode(path: str | Path, directory: bool = False) -> None:
    """Give a temp file or folder (mkstemp/mkdtemp make them private, 0600/0700) the mode an ordinary
    file or folder gets under the user's umask, before it is renamed into place: a shared run stays
    readable by whoever could read the user's other files."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_UMASK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write into a temp file beside ``path``, then rename: readers see the old file or the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        publish_mode(tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n")


def atomic_write_parquet(path: Path, frame: pd.DataFrame) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    publish_mode(tmp)
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def shard_dir(run_dir: Path, index: int) -> Path:
    return Path(run_dir) / "shards" / f"{index:05d}"


def shard_done(run_dir: Path, index: int) -> bool:
    return shard_dir(run_dir, index).is_dir()


def write_shard(run_dir: Path, index: int, tables: dict[str, pd.DataFrame]) -> None:
    """Write a shard's tables into a temp folder, then rename it into place in one step."""
    final = shard_dir(run_dir, index)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
    publish_mode(tmp, directory=True)
    for name, frame in tables.items():
        frame.to_parquet(tmp / f"{name}.parquet", index=False)
    os.replace(tmp, final)


def merge_shards(run_dir: Path, n_shards: int) -> dict[str, pd.DataFrame]:
    """Concatenate shard tables in shard order and write the run-level tables."""
    run_dir = Path(run_dir)
    merged = {}
    for name in TABLES:
        parts = [pd.read_parquet(p) for i in range(n_shards)
                 if (p := shard_dir(run_dir, i) / f"{name}.parquet").is_file()]
        merged[name] = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        atomic_write_parquet(run_dir / f"{name}.parquet", merged[name])
    return merged


def clean_temp(run_dir: Path) -> None:
    """Remove half-written shard folders left by a killed run."""
    shards = Path(run_dir) / "shards"
    if shards.is_dir():
        for p in shards.glob(".*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def read_json(path: Path) -> dict:
    """A JSON object written by this tool, or an OpsdError naming the file (missing or corrupt)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
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
    if not path.is_file():
        if not Path(run_dir).exists():
            raise OpsdError(f"{run_dir} does not exist: pass a folder made by 'opsd-diag run'")
        if any((Path(run_dir) / name).exists() for name in ("config.yaml", "metrics.jsonl", "checkpoints")):
            raise OpsdError(f"{run_dir} is a training run (made by opsd-train), not a diagnosis: follow it in the "
                            "app's Train page, or compare it with its prediction by 'opsd-diag scoreboard'")
        raise OpsdError(f"{run_dir} is not a run directory (no manifest.json): pass a folder made by 'opsd-diag run'")
    return read_json(path)


def read_table(run_dir: Path, name: str) -> pd.DataFrame:
    """One stored table of a run (empty when the run has none), or an OpsdError for a corrupt file."""
    path = Path(run_dir) / f"{name}.parquet"
    if not path.is_file():
        return pd.DataFrame()
    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise OpsdError(f"{path} is corrupt ({type(e).__name__}): rerun the run into a new --out") from None
    missing = [c for c in (TOKEN_KEYS + SIGNAL_COLUMNS if name == "tokens" else ()) if c not in frame.columns]
    if missing:
        raise OpsdError(f"{path} lacks the columns {missing[:5]} (written by another version?): rerun the diagnosis "
                        "into a new --out")
    return frame


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
        with tempfile.NamedTemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise OpsdError(f"cannot write the run directory {out_dir} ({e.strerror}): choose a writable --out") from None


def check_run_dir(out_dir: Path, config: dict) -> None:
    """A new or empty folder, or a run of this same config (resume), that can be written; anything else
    is refused."""
    out_dir = Path(out_dir)
    if (out_dir / "manifest.json").is_file():
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
        raise OpsdError(f"cannot create run directory {out_dir} ({e.strerror}): choose a writable --out") from None
    atomic_write_text(out_dir / "config.yaml", config_yaml)
    atomic_write_json(out_dir / "manifest.json", manifest)
