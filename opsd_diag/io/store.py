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
from pathlib import Path

import pandas as pd

from opsd_diag.errors import OpsdError

TABLES = ("rollouts", "tokens", "topk", "teacher_rollouts")


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False, default=str) + "\n")


def atomic_write_parquet(path: Path, frame: pd.DataFrame) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
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


def read_manifest(run_dir: Path) -> dict:
    path = Path(run_dir) / "manifest.json"
    if not path.is_file():
        raise OpsdError(f"{run_dir} is not a run directory (no manifest.json): pass a folder made by 'opsd-diag run'")
    return json.loads(path.read_text())


def load_run(run_dir: Path) -> dict:
    """Manifest, summary and tables of a finished run."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if manifest.get("status") != "finished":
        raise OpsdError(f"run {run_dir} is not finished (status: {manifest.get('status')}): "
                        f"resume it with 'opsd-diag run {run_dir / 'config.yaml'} --out {run_dir}'")
    out = {"manifest": manifest, "summary": json.loads((run_dir / "summary.json").read_text())}
    for name in TABLES:
        path = run_dir / f"{name}.parquet"
        out[name] = pd.read_parquet(path) if path.is_file() else pd.DataFrame()
    return out
