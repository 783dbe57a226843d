"""The one-writer lock of a run directory, and the kernel's view of processes (docs/design.md).

A writer holds an ``flock`` on the run directory itself (an ``O_DIRECTORY`` descriptor) for its whole
life: deleting or replacing ``.lock`` cannot let a second writer in, and the kernel drops the lock
when the holder dies. ``.lock`` only says who holds it (one line, then the holder's pid and process
start time as JSON), so a later run can say accurately why it takes over, and it serialises the
short read-modify-write of ``status.json`` (``status_lock``). Every open is non-blocking and refuses
a link, FIFO or device, so no crafted folder can hang a command or the app.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from pathlib import Path

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe

LOCK = ".lock"
STATUS_WAIT_S = 10.0  # the longest wait for status.json's moment-long lock


def process_start_time(pid: int | None) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None when it is not running."""
    if not pid:
        return None
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, OverflowError):
        return None
    return None if fields[0] == "Z" else int(fields[19])  # a zombie has finished


def _dir_fd(run_dir: Path) -> int:
    return os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _holder(run_dir: Path) -> tuple[str, int | None, int | None]:
    """(who ``.lock`` says holds the run, their pid, their process start time), read without blocking."""
    try:
        text = safe.read_bytes(run_dir / LOCK, 4096).decode("utf-8", errors="replace")
    except (OSError, OpsdError):
        return "", None, None
    first, _, rest = text.partition("\n")
    first = "".join(c if c.isprintable() else "?" for c in first.strip())[:200]
    try:
        ident = json.loads(rest)
        pid, ticks = int(ident["pid"]), int(ident["start_time"])
    except (ValueError, TypeError, KeyError, OverflowError):
        pid, ticks = None, None
    return first, pid, ticks


def _in_use(run_dir: Path) -> OpsdError:
    holder = _holder(run_dir)[0] or "another process"
    return OpsdError(f"{run_dir} is in use by {holder}: wait for it to end, stop it, or choose another --out")


def check_free(run_dir: str | Path) -> None:
    """An OpsdError naming the holder when a live process holds the run directory's lock; creates nothing.

    Called before the models load, so a second run on a busy directory fails at once (``acquire_lock``
    still decides, later). Not for a process that holds the lock itself: its own lock reads as busy.
    """
    run_dir = Path(run_dir)
    try:
        fd = _dir_fd(run_dir)
    except OSError:
        return  # no folder yet (or not one): nothing holds it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(run_dir) from None
    except OSError:
        return
    finally:
        os.close(fd)  # closing drops a lock we got


@contextlib.contextmanager
def unless_held(run_dir: str | Path):
    """Yield whether no other process holds the run directory's lock, keeping it so meanwhile (the writes
    inside cannot race a run that takes the lock): True when it is free or this process itself holds it."""
    run_dir = Path(run_dir)
    try:
        fd = _dir_fd(run_dir)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        yield False  # no folder (or not one): nothing of a run to write into
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
        except BlockingIOError:
            free = os.getpid() in holders(run_dir)  # our own lock, on another descriptor
        yield free
    finally:
        os.close(fd)  # closing drops a lock we got


class Held:
    """The lock of one run directory, held until ``close`` (or the process ends)."""

    def __init__(self, run_dir: Path, dir_fd: int):
        self.run_dir, self.dir_fd = run_dir, dir_fd

    def close(self) -> None:
        if self.dir_fd is not None:
            os.close(self.dir_fd)
            self.dir_fd = None


def _takeover(run_dir: Path) -> str | None:
    """Why the lock is free although ``.lock`` names a holder (None when it names none)."""
    who, pid, ticks = _holder(run_dir)
    if not who:
        return None
    now = process_start_time(pid)
    if pid is not None and now is not None and now != ticks:
        why = f"which has ended (its pid {pid} now belongs to another process)"
    elif pid is not None and now is not None:
        why = "which still runs but no longer holds the lock"
    else:
        why = "which is no longer running"
    return f"opsd: taking over {run_dir} from {who}, {why}"


def acquire_lock(run_dir: str | Path, what: str = "run") -> Held:
    """Hold the run directory's lock for the life of this process (one writer per run directory).

    Returns the lock (keep it referenced). A live holder is an OpsdError naming its pid; a dead holder's
    lock is free again (the kernel released it) and is taken over with a message saying why.
    """
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = _dir_fd(run_dir)
    except OSError as e:
        raise safe.resource_error(e, run_dir) or \
            OpsdError(f"cannot write the run directory {run_dir} ({e.strerror}): choose a writable --out") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(run_dir) from None
    held = Held(run_dir, fd)
    try:
        if (message := _takeover(run_dir)) is not None:
            print(message, file=sys.stderr)
        ident = json.dumps({"pid": os.getpid(), "start_time": process_start_time(os.getpid())})
        _write_holder(run_dir, f"{what} pid {os.getpid()} (started {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
                               f"{ident}\n".encode())
    except BaseException:
        held.close()
        raise
    return held


def release_lock(held: Held) -> None:
    """Let go of the lock after an end: ``.lock`` emptied first, so the next run does not read a holder to
    take over from (the kernel drops the flock itself when a process dies)."""
    with contextlib.suppress(OSError, OpsdError):
        if held.dir_fd is not None:
            _write_holder(held.run_dir, b"")
    held.close()


def _write_holder(run_dir: Path, data: bytes) -> None:
    """``.lock``'s content, written in place (its inode is what ``status_lock`` locks; emptying it needs no space)."""
    path = run_dir / LOCK
    try:
        with os.fdopen(safe.open_regular(path, os.O_RDWR | os.O_CREAT), "r+b") as f:
            f.truncate(0)
            f.write(data)
    except OSError as e:
        raise safe.resource_error(e, path) or \
            OpsdError(f"cannot write {path} ({e.strerror}): choose a writable --out") from None


@contextlib.contextmanager
def status_lock(run_dir: Path):
    """Serialise read-modify-write of status.json between the launcher and the run (an flock on ``.lock``,
    held for a moment; the writer's own lock is on the folder)."""
    try:
        fd = safe.open_regular(Path(run_dir) / LOCK, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        raise safe.resource_error(e, run_dir) or \
            OpsdError(f"cannot write the run directory {run_dir} ({e.strerror}): check that it is writable") from None
    try:
        deadline = time.monotonic() + STATUS_WAIT_S
        while True:  # bounded: a process that keeps .lock locked cannot hang the CLI or the app
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OpsdError(f"{run_dir / LOCK} has been locked by another process for {STATUS_WAIT_S:.0f} s "
                                    "(a status update never takes that long): check what holds it") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def holders(run_dir: Path) -> list[int]:
    """The pids holding an flock on the run directory (read from /proc/locks: what no file can fake)."""
    try:
        st = os.stat(run_dir)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = []
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE <pid> <maj:min:inode> 0 EOF"; waiters carry "->"
        f = line.split()
        if len(f) >= 6 and f[1] == "FLOCK" and f[5] == key:
            with contextlib.suppress(ValueError):
                out.append(int(f[4]))
    return out
