"""One job protocol for diagnoses and training runs: start, follow and stop them through their run directory.

A job is a separate process started from an argument list (never a shell) in its own process
group, with its output in ``RUN_DIR/stdout.log``. Everything the app or a terminal needs to know
is in ``RUN_DIR/status.json``, written by the launcher and by the run itself::

    status      starting | running | finished | failed | stopped   (+ "died" when read: gone without a stop)
    kind        diagnosis | training
    stage       what runs now (diagnosis: rollouts, scoring, predictor; training: train, eval)
    done/total  progress of the stage (shards, steps)
    error       the one-line message of a failure
    pid, start_time, pgid, leader_start_time, argv, started, updated

A run holds the run directory's lock (``opsd_diag.lock``: an flock on the folder, its holder named in
``.lock``) while it writes: one writer per run directory, taken over from a killed holder. Stop
signals only a group provably this run's (``ours``). The run's own lifecycle, from the lock to its
release with the status of how it ended, is ``hold``. Every file here is opened through ``io.safe`` (no
link followed, no FIFO waited on). docs/design.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe
from opsd_diag.lock import (LOCK, acquire_lock, check_free, holders, process_start_time, release_lock, status_lock,
                            unless_held)

__all__ = ["LOCK", "acquire_lock", "check_free", "release_lock", "process_start_time"]  # the protocol's names

STATUS = "status.json"
LOG = "stdout.log"
STOP = "STOP"
ACTIVE = ("starting", "running")
ARGV_ENV = "OPSD_JOB_ARGV"  # the launcher's exact argv (JSON), recorded by the run
DIR_ENV = "OPSD_JOB_DIR"  # the run directory (resolved) a launched process was started for


def diagnosis_command(config: str | Path, out_dir: str | Path) -> list[str]:
    """``opsd-diag run`` of this very interpreter (the console script may be absent or another env's)."""
    return [sys.executable, "-m", "opsd_diag.cli", "run", str(config), "--out", str(out_dir)]


def training_command(config: str | Path, out_dir: str | Path, *, num_processes: int = 1, resume: bool = False,
                     accelerate_config: str | Path | None = None) -> list[str]:
    """``python -m trainer`` for one process, ``accelerate launch`` for more (or with an accelerate config)."""
    if num_processes < 1:
        raise OpsdError(f"the number of processes must be >= 1, got {num_processes}")
    tail = [str(config), "--out", str(out_dir), *(["--resume"] if resume else [])]
    if num_processes == 1 and accelerate_config is None:
        return [sys.executable, "-m", "trainer", *tail]
    head = [sys.executable, "-m", "accelerate.commands.launch"]
    if accelerate_config is not None:  # FSDP, DeepSpeed, several machines: the user's accelerate config
        return [*head, "--config_file", str(accelerate_config), "--num_processes", str(num_processes),
                "-m", "trainer", *tail]
    # --multi_gpu selects accelerate's torchrun launcher; on a CPU machine the trainer then runs its
    # processes on gloo (``--cpu`` would select the single-process launcher instead).
    return [*head, "--multi_gpu", "--num_machines", "1", "--num_processes", str(num_processes), "-m", "trainer",
            *tail]


# ------------------------------------------------------------------------------- processes


def alive(pid: int | None, start_time: int | None) -> bool:
    """The process ``pid`` runs and is the one that started at ``start_time`` (not a reused pid)."""
    now = process_start_time(pid)
    return now is not None and (start_time is None or now == start_time)


# -------------------------------------------------------------------------------- status


def read_status(run_dir: str | Path) -> dict | None:
    """status.json, or None when it is absent, damaged, huge, deep, a link or a FIFO (never blocks)."""
    try:
        data = safe.read_json(Path(run_dir) / STATUS, 1 << 20)
    except (OSError, ValueError, OpsdError):
        return None
    return data if isinstance(data, dict) else None


def _write(run_dir: Path, rec: dict) -> None:
    """status.json atomically; on a full disk in place, so a failure is still recorded as one."""
    data = (json.dumps(rec, indent=2, allow_nan=False, default=str) + "\n").encode()
    safe.write_file(run_dir / STATUS, data, own_run=True, in_place_fallback=True)


def write_status(run_dir: str | Path, status: str | None = None, *, owner: bool = True, **fields) -> dict:
    """Merge ``fields`` (and ``status``) into status.json atomically.

    ``owner``: the writer is the run itself, so its pid and process start time are recorded (the
    launcher writes ``starting`` with ``owner=False``).
    """
    run_dir = Path(run_dir)
    with status_lock(run_dir):
        rec = {**(read_status(run_dir) or {}), **fields, "updated": time.time()}
        if status is not None:
            rec["status"] = status
            if status in ACTIVE:
                rec.pop("error", None)
        if owner:
            rec.update(pid=os.getpid(), start_time=process_start_time(os.getpid()))
        _write(run_dir, rec)
    return rec


def fail(run_dir: str | Path, error: str, status: str = "failed") -> None:
    """Record a failure (or a stop, ``status="stopped"``) in a run directory this process owns or was launched
    into, while it still reads as active: never in another's, never over what the run itself recorded.

    Only while no other process holds the run's lock: a second launch into a folder whose run took the lock
    first (the launcher's ``starting`` and its argv may be that second launch's) loses, and says so on its
    own stderr only; the running run's status stays ``running``."""
    with unless_held(run_dir) as free:
        st = read_status(run_dir) if free else None
        launched = os.environ.get(ARGV_ENV) is not None and json.loads(os.environ[ARGV_ENV]) == (st or {}).get("argv")
        if st is not None and st.get("status") in ACTIVE and (st.get("pid") == os.getpid() or launched):
            with contextlib.suppress(OpsdError, OSError):  # the error being reported matters more than this record
                write_status(run_dir, status, error=error)


STOPPED_EARLY = "stopped while loading, before any new work: start it again to continue"


# ----------------------------------------------------------------------- the run's lifecycle

# Every command that writes a run directory (opsd-diag run, opsd-train, opsd-diag predict) checks it is free
# (``check_free``) before its models load, then does its work inside ``hold``: the lock on the main process,
# the checks repeated once it is held, the work, a full disk turned into one line naming what to rerun, a stop
# or a failure recorded in status.json, the release. An export writes outside any run: ``mapped`` only.


@contextlib.contextmanager
def mapped(path, after: str | None):
    """A write that fails for want of space, inodes or descriptors becomes one line naming ``after``, the
    command to rerun (``errors.AFTER_FULL``); every other error passes unchanged."""
    try:
        yield
    except Exception as e:
        full = safe.resource_error(e, path)
        if full is None:
            raise
        raise full.after(after) from None


@contextlib.contextmanager
def hold(run_dir: str | Path, holder: str, *, main: bool = True, after: str | None = None,
         stopped: str | None = None, ready: Callable[[], object] | None = None,
         on_failure: Callable[[], object] | None = None, closing: Callable[[], object] | None = None):
    """The lock of ``run_dir`` held by ``holder`` (on the main process) for the work inside.

    ``ready``: runs once the lock is held, before the work (its errors are not recorded in the status: the
    directory may not be this run's); ``stopped``: the status error of a stop, None when this command does not
    keep ``status.json``; ``on_failure``: cleans up after a failure (the main process, before its status);
    ``closing``: runs on every process at the end, before the lock is released."""
    run_dir = Path(run_dir)
    lock = acquire_lock(run_dir, holder) if main else None
    try:
        if main and ready is not None:
            ready()
        try:
            yield
        except BaseException as e:
            full = safe.resource_error(e, run_dir) if isinstance(e, Exception) else None  # a full disk: one line
            full = full and full.after(after)
            if main and stopped is not None:
                _record(run_dir, e, full, stopped, on_failure)
            if full is not None:
                raise full from None
            raise
        finally:
            if closing is not None:
                closing()
    finally:
        if lock is not None:
            release_lock(lock)


def _record(run_dir: Path, e: BaseException, full, stopped: str, on_failure) -> None:
    if isinstance(e, KeyboardInterrupt):  # Ctrl-C or a stop (SIGTERM) before a graceful end: what is done stays
        write_status(run_dir, "stopped", error=stopped)
        return
    if on_failure is not None:
        on_failure()
    error = str(full or e) if isinstance(full or e, OpsdError) else f"{type(e).__name__}: {e}"
    with contextlib.suppress(OpsdError, OSError):  # the failure itself is what must reach the user
        write_status(run_dir, "failed", error=error)


def status(run_dir: str | Path) -> dict:
    """status.json plus ``alive``; a run that says starting/running but whose process is gone reads ``stopped``
    when it was asked to stop (a stop that came before its handler was in place), else ``died``."""
    st = read_status(run_dir) or {"status": "unknown"}
    st["alive"] = alive(st.get("pid"), st.get("start_time")) or alive(st.get("pgid"), st.get("leader_start_time"))
    if st["status"] in ACTIVE and not st["alive"]:  # ended without a word: on a stop (its STOP file), or not
        st["status"] = "stopped" if (Path(run_dir) / STOP).exists() else "died"
    return st


# ------------------------------------------------------------------------------ launch


@dataclass
class Job:
    run_dir: Path
    pid: int  # the launched process; it leads its own process group
    argv: list[str]


def start(argv: list[str], run_dir: str | Path, kind: str, *, cwd: str | Path | None = None,
          env: dict | None = None) -> Job:
    """Start ``argv`` in a new process group with its output in ``RUN_DIR/stdout.log``."""
    run_dir = Path(run_dir)
    check_free(run_dir)  # a run writes there: its status.json is not ours to overwrite
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / STOP).unlink(missing_ok=True)  # a stop of an earlier segment is not a stop of this one
        write_status(run_dir, "starting", owner=False, kind=kind, argv=argv, started=time.time(), stage="starting")
        log_file = safe.open_append(run_dir / LOG)
        with log_file as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1",
                                         ARGV_ENV: json.dumps(argv), DIR_ENV: str(run_dir.resolve())})
    except OSError as e:
        raise OpsdError(f"cannot start the {kind} in {run_dir} ({e.strerror}): check that it is writable") from None
    # the leader's identity, so stop() can prove the group is ours; status stays whatever the run wrote
    with status_lock(run_dir):
        rec = {**(read_status(run_dir) or {}), "pgid": proc.pid, "leader_start_time": process_start_time(proc.pid)}
        rec.setdefault("pid", proc.pid)
        _write(run_dir, rec)
    return Job(run_dir, proc.pid, argv)


def stop(run_dir: str | Path, *, grace_s: float = 0.0, poll_s: float = 0.2) -> dict:
    """Ask for a graceful stop: the STOP file, then (after ``grace_s``) SIGTERM to the run's process group.

    The signal goes only to a group that is provably this run's (``ours``: the recorded leader, and the
    run's lock or launch environment); anything else gets no signal at all.
    """
    run_dir = Path(run_dir)
    os.close(safe.open_regular(run_dir / STOP, os.O_WRONLY | os.O_CREAT))  # never through a link
    deadline = time.time() + grace_s
    while time.time() < deadline and status(run_dir)["status"] in ACTIVE:
        time.sleep(poll_s)
    st = status(run_dir)
    pgid, leader_start = st.get("pgid"), st.get("leader_start_time")
    if st["status"] in ACTIVE and ours(run_dir, pgid, leader_start):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone, or another user's
            os.killpg(int(pgid), signal.SIGTERM)
    return st


def ours(run_dir: Path, pgid, leader_start) -> bool:
    """The group ``pgid`` is this run's: its leader is the process recorded (pid and start time), and a
    member holds ``RUN_DIR/.lock`` or, before the lock is taken, the leader was launched for this folder.

    status.json alone proves nothing (a crafted folder can name any live group): the lock and the
    launch environment are what another process cannot fake.
    """
    if not (isinstance(pgid, int) and isinstance(leader_start, int) and pgid > 1 and alive(pgid, leader_start)):
        return False
    try:
        if os.getpgid(pgid) != pgid:
            return False
    except OSError:
        return False
    return _group_holds_lock(Path(run_dir), pgid) or _launched_for(Path(run_dir), pgid)


def _group_holds_lock(run_dir: Path, pgid: int) -> bool:
    """A process of group ``pgid`` holds the run directory's lock (read from /proc/locks)."""
    for pid in holders(run_dir):
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid:
                return True
    return False


def _launched_for(run_dir: Path, pid: int) -> bool:
    """Process ``pid`` was started by ``start`` for this run directory (its environment says so)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{DIR_ENV}={run_dir.resolve()}".encode() in env


def stop_requested(run_dir: str | Path) -> bool:
    return (Path(run_dir) / STOP).exists()


# ----------------------------------------------------------------------------- follow


def log_tail(run_dir: str | Path, n_lines: int = 40) -> str:
    """The last lines of the run's output (tqdm's carriage-return redraws split into lines)."""
    try:
        with os.fdopen(safe.open_regular(Path(run_dir) / LOG), "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 16_000))
            text = f.read().decode("utf-8", errors="replace")
    except (OSError, OpsdError):  # absent, a link, a FIFO: nothing of this run's to show
        return ""
    lines = [ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()]
    return "\n".join(lines[-n_lines:])


def find_runs(root: str | Path = "runs", kind: str | None = None, skipped: list | None = None) -> list[Path]:
    """Run directories (a status.json or a manifest) under ``root``, newest first; a damaged one is skipped."""
    out = []
    for p in Path(root).iterdir() if Path(root).is_dir() else ():
        try:
            status = safe.read_json(p / STATUS, 1 << 20) if p.is_dir() and (p / STATUS).exists() else {}  # or raises
            k = (status.get("kind") if isinstance(status, dict) else None) or (
                "diagnosis" if (p / "manifest.json").is_file() else "training" if (p / "metrics.jsonl").is_file() else None)
            if k is not None and (kind is None or k == kind):
                out.append((p.stat().st_mtime, p.resolve()))
        except (OpsdError, OSError, ValueError, RecursionError, RuntimeError) as e:  # RuntimeError: a symlink loop
            if skipped is not None:
                skipped.append((p, str(e) if isinstance(e, OpsdError) else type(e).__name__))
    return [p for _, p in sorted(out, key=lambda mp: mp[0], reverse=True)]


def read_jsonl(path: str | Path, offset: int = 0) -> tuple[list[dict], int]:
    """(complete records after byte ``offset``, the offset to continue from); a torn last line waits."""
    try:
        with os.fdopen(safe.open_regular(Path(path)), "rb") as f:
            f.seek(offset)
            data = f.read(64 << 20)  # bounded: a huge file is read on over several polls
    except (OSError, OpsdError):
        return [], offset
    records, used = [], 0
    for line in data.split(b"\n")[:-1]:  # the part after the last newline is not complete yet
        used += len(line) + 1
        with contextlib.suppress(ValueError, OpsdError):  # a damaged or hostile line is skipped, never fatal
            records.append(safe.parse_json(line, path))
    return records, offset + used


class Follower:
    """Incremental reader of a run's ``metrics.jsonl``: each ``poll`` reads only the new records."""

    def __init__(self, run_dir: str | Path, name: str = "metrics.jsonl"):
        self.path = Path(run_dir) / name
        self.offset = 0
        self.records: list[dict] = []

    def poll(self) -> list[dict]:
        if self.path.is_file() and self.path.lstat().st_size < self.offset:
            self.offset, self.records = 0, []  # rewritten by a resume: read it again from the start
        new, self.offset = read_jsonl(self.path, self.offset)
        self.records += new
        return new


def follow(run_dir: str | Path, *, interval: float = 1.0, timeout: float | None = None) -> Iterator[dict]:
    """Yield metrics records as they appear until the run leaves starting/running."""
    f = Follower(run_dir)
    deadline = None if timeout is None else time.time() + timeout
    while True:
        yield from f.poll()
        if status(run_dir)["status"] not in ACTIVE:
            yield from f.poll()
            return
        if deadline is not None and time.time() > deadline:
            return
        time.sleep(interval)
