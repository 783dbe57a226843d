"""File access that a hostile or broken run directory cannot turn against the user (docs/design.md).

A run directory is data from anywhere (a colleague's, a download) and may change while a run writes,
so every read and write of a run's files, and every output a command writes, goes through here:

- reads open regular files only, never through a final symbolic link and never blocking on a FIFO,
  and are bounded in size (JSON also in nesting depth);
- writes go to a temp file beside the target, renamed over it; the target must be absent or a
  regular file (never a link, FIFO, device or folder), and is never a file of a run unless the
  caller writes its own run (``own_run``); the temp file goes on every exit path (an exception,
  Ctrl-C);
- a full disk, no inodes or no file descriptors is one ResourceError naming the file (its fix, what to
  rerun, is said by the command that failed);
- ``check_name`` turns a NUL or an over-long name into one error (every path a config names goes through
  it), ``check_path`` a symbolic-link loop too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from opsd_diag.errors import OpsdError, ResourceError

NAME_MAX, PATH_MAX = 255, 4096  # bytes: Linux's limits for one path component and a whole path
MAX_JSON_BYTES = 64 << 20  # a summary of many configs is a few MB; anything larger is not ours
MAX_JSON_DEPTH = 64  # our files nest under 10 levels
RUN_MARKERS = ("manifest.json", "status.json", "metrics.jsonl")  # a folder holding one is a run directory
_RESOURCE = {errno.ENOSPC: "no space (or no free inodes) left on its file system",
             errno.EDQUOT: "the disk quota is used up", errno.EMFILE: "too many open files in this process",
             errno.ENFILE: "too many open files on this machine"}
_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once, at import (os.umask can only be read by setting it)


def publish_mode(path, directory: bool = False) -> None:
    """Give a temp file or folder (mkstemp/mkdtemp make them private, 0600/0700) the mode an ordinary
    file or folder gets under the user's umask, before it is renamed into place: a shared run stays
    readable by whoever could read the user's other files."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_UMASK)


def _show(path) -> str:
    s = os.fspath(path)
    return s if s.isprintable() and len(s) <= 200 else repr(s[:200])


def kind(mode: int) -> str | None:
    """What a non-regular file is ("a named pipe (FIFO)", ...), or None for a regular file."""
    return next((name for test, name in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


# ------------------------------------------------------------------------------------ paths

def check_name(path, what: str = "path") -> str:
    """``path`` as text, or one OpsdError for what no file system call can take: a NUL, undecodable
    characters, a path or one name over Linux's limits. Pure (no file system call): a config's paths are
    checked with it when the config is read (``config.spec``), whatever machine reads it. ``what`` may be
    empty when the caller names the path itself (a config key)."""
    s = os.fspath(path)
    lead = f"{what} " if what else "the path "
    if "\0" in s:
        raise OpsdError(f"{lead}contains a NUL character, which no file name can hold: check how it was typed")
    try:
        raw = os.fsencode(s)
    except UnicodeEncodeError:
        raise OpsdError(f"{lead}{_show(s)} holds characters that cannot be a file name: retype it") from None
    if len(raw) >= PATH_MAX:
        raise OpsdError(f"{lead}is {len(raw)} bytes long, over the limit of {PATH_MAX - 1}: use a shorter path")
    long = next((part for part in raw.split(b"/") if len(part) > NAME_MAX), None)
    if long is not None:
        raise OpsdError(f"{what + ': ' if what else ''}the name {_show(os.fsdecode(long[:40]))}... is {len(long)} "
                        f"bytes, over the file system's limit of {NAME_MAX} per name: use a shorter name")
    return s


PATH_KEYS = ("model", "adapter", "path")  # the config keys that name a file or folder, in any section


def path_field(v):
    """``check_name`` as the validator of every path field of a config (problem sets, model and adapter
    folders): a NUL or an over-long name is that key's error, not a traceback where the file is opened."""
    if isinstance(v, str):
        try:
            check_name(v, "")
        except OpsdError as e:
            raise ValueError(str(e)) from None
    return v


def check_path(path, what: str = "path") -> Path:
    """``path`` as a Path, or one OpsdError for what no file system call can take (checked before any work):
    ``check_name``'s limits, and a symbolic-link loop or a path the file system finds too long."""
    s = check_name(path, what)
    try:
        os.stat(s)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OpsdError(f"{what} {_show(s)} goes through a loop of symbolic links: fix or remove the link") \
                from None
        if e.errno == errno.ENAMETOOLONG:
            raise OpsdError(f"{what} {_show(s)} is too long for the file system: use a shorter path") from None
    return Path(s)


def resource_error(e: BaseException, path) -> ResourceError | None:
    """The one-line error for a write that failed for want of space, inodes or descriptors, else None; its
    fix is generic until the command that failed names what to rerun (``ResourceError.after``).

    torch and safetensors wrap the OS error in their own types: then the file system itself is asked."""
    if isinstance(e, ResourceError):
        return e
    code = getattr(e, "errno", None)
    if code not in _RESOURCE:
        wrapped = code is None and (isinstance(e, (OSError, RuntimeError)) or type(e).__name__ == "SafetensorError")
        if not (wrapped and _full(path)):
            return None
        code = errno.ENOSPC
    return ResourceError(f"cannot write {_show(path)}: {_RESOURCE[code]} ({errno.errorcode[code]})")


def _full(path) -> bool:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        v = os.statvfs(p)
    except OSError:
        return False
    return v.f_bavail * v.f_frsize < (1 << 20) or (v.f_files > 0 and v.f_favail == 0)


# ------------------------------------------------------------------------------------ reads

def open_regular(path, flags: int = os.O_RDONLY, *, follow: bool = False) -> int:
    """A descriptor of the regular file ``path`` (created with ``os.O_CREAT``), never blocking on a FIFO and
    (unless ``follow``) never through a final symbolic link; OSError when it cannot be opened at all."""
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow and os.path.islink(path):
            raise OpsdError(f"{_show(path)} is a symbolic link: a run's files are never followed out of its "
                            "folder; replace the link with the file itself") from None
        if e.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
            raise OpsdError(f"{_show(path)} is a named pipe (FIFO), not a regular file: remove it") from None
        raise
    what = kind(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise OpsdError(f"{_show(path)} is {what}, not a regular file: remove it or choose another path")
    os.set_blocking(fd, True)
    return fd


def read_bytes(path, limit: int = MAX_JSON_BYTES, *, follow: bool = False) -> bytes:
    """The content of a regular file of at most ``limit`` bytes (FileNotFoundError when it is absent)."""
    with os.fdopen(open_regular(path, follow=follow), "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OpsdError(f"{_show(path)} is larger than {limit >> 20} MiB: it was not written by this tool")
    return data


def parse_json(data: bytes | str, path, depth: int = MAX_JSON_DEPTH):
    """JSON text as Python objects, nested at most ``depth`` levels (json.JSONDecodeError, UnicodeDecodeError)."""
    try:
        obj = json.loads(data)
    except RecursionError:
        obj, deep = None, True
    else:
        deep = _depth(obj) > depth
    if deep:
        raise OpsdError(f"{_show(path)} nests deeper than {depth} levels: it was not written by this tool")
    return obj


def _depth(obj) -> int:
    best, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            best = max(best, d)
            if d <= MAX_JSON_DEPTH:
                stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return best


def read_json(path, limit: int = MAX_JSON_BYTES):
    """A bounded JSON file (OpsdError for a link, FIFO, huge or deep file; FileNotFoundError when absent)."""
    return parse_json(read_bytes(path, limit), path)


# ----------------------------------------------------------------------------------- writes

def run_of(path) -> Path | None:
    """The run directory ``path`` lies in (itself or a folder above holds a run's marker file), or None."""
    p = Path(os.path.abspath(path))
    for d in (p, *p.parents):
        if any(os.path.lexists(d / m) for m in RUN_MARKERS):
            return d
    return None


def check_target(path, *, own_run: bool = False) -> None:
    """``path`` may be written: absent or a regular file, and not a file of a run unless the caller writes
    its own run (``own_run``: the one way to ask for it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    what = kind(st.st_mode)
    if what is not None:
        raise OpsdError(f"{_show(path)} is {what}: it is never replaced by a file; choose another path")
    if not own_run and (run := run_of(Path(path).parent)) is not None:
        raise OpsdError(f"{_show(path)} is a file of the run {_show(run)}: a command never replaces another's files; "
                        "choose a path outside the run directory")


def write_file(path, data: bytes | Callable[[BinaryIO], None], *, own_run: bool = False,
               in_place_fallback: bool = False) -> None:
    """Write ``data`` (bytes, or a function writing into a binary file) to ``path`` atomically: a temp file
    beside it, renamed over it; readers see the old file or the new one, never part of either.

    ``in_place_fallback``: when the disk is too full for a temp file, overwrite the existing regular file
    in place (status.json must still say ``failed`` on a full disk)."""
    path = Path(path)
    check_target(path, own_run=own_run)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        publish_mode(tmp)
        with os.fdopen(fd, "wb") as f:
            data(f) if callable(data) else f.write(data)
        check_target(path, own_run=own_run)  # again: it may have changed while we wrote
        os.replace(tmp, path)
        tmp = None
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        err = resource_error(e, path) if isinstance(e, Exception) else None
        if err is None:
            raise
        if in_place_fallback and isinstance(data, bytes) and _overwrite(path, data):
            return
        raise err from None


def _overwrite(path: Path, data: bytes) -> bool:
    try:
        fd = open_regular(path, os.O_WRONLY)
    except (OSError, OpsdError):
        return False
    try:
        os.ftruncate(fd, 0)  # frees the old blocks, which the new content then reuses
        os.write(fd, data)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def open_append(path):
    """``path`` opened to append text (created if absent): a regular file, never through a link or a FIFO."""
    try:
        return os.fdopen(open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8")
    except OSError as e:
        raise resource_error(e, path) or OpsdError(f"cannot write {_show(path)} ({e.strerror})") from None


def append_text(path, text: str) -> None:
    """Append ``text`` in one write (a record is one line, flushed at once)."""
    with open_append(path) as f:
        try:
            f.write(text)
            f.flush()
        except OSError as e:
            raise resource_error(e, path) or OpsdError(f"cannot write {_show(path)} ({e.strerror})") from None


def check_run_files(run_dir, files: Iterable[str], folders: Iterable[str] = ()) -> None:
    """Each of ``files`` in ``run_dir`` absent or a regular file, each of ``folders`` absent or a real folder
    (no link, FIFO or device among them): checked before a run writes into a folder it did not make."""
    run_dir = Path(run_dir)
    for name in files:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            what = kind(os.lstat(run_dir / name).st_mode)
            if what is not None:
                raise OpsdError(f"{_show(run_dir / name)} is {what}, not a regular file: a run never writes through "
                                "it; remove it, or choose another --out")
    for name in folders:
        p = run_dir / name
        if p.is_symlink() or (os.path.lexists(p) and not p.is_dir()):
            raise OpsdError(f"{_show(p)} is {'a symbolic link' if p.is_symlink() else 'not a folder'}: a run writes "
                            "only inside its own folder; remove it, or choose another --out")


def real_dir(path, run_dir) -> Path:
    """``path``, a folder inside ``run_dir``: created if absent, refused when it is a link or not inside."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OpsdError(f"{_show(path)} is {'a symbolic link' if path.is_symlink() else 'not a folder'}: a run's "
                        "folders are never followed out of it; remove it")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise resource_error(e, path) or OpsdError(f"cannot create {_show(path)} ({e.strerror})") from None
    if not path.resolve().is_relative_to(Path(run_dir).resolve()):
        raise OpsdError(f"{_show(path)} resolves outside its run directory {_show(run_dir)}: remove it")
    return path
