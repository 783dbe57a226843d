"""Read a user's YAML file into a mapping, or one clear error: no traceback, nothing silently merged.

Duplicate keys are rejected (YAML would keep the last one silently), aliases that expand the file
beyond a sane size are refused (a "billion laughs" file), a UTF-8 byte-order mark is ignored and
any other encoding than UTF-8 is named. Merge keys (``<<: *defaults``) work, ``1e-5`` is a number (YAML 1.1
would read it as a string), and a JSON file is read as JSON when YAML refuses it (tab indentation).
Every file a user names as input (this config, a problem set: ``read_bytes``) is opened without ever
blocking: a FIFO, a device, a folder or a loop of links is named as such, never read, never "not found".
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path

import yaml

from opsd_diag.errors import OpsdError

MAX_NODES = 100_000  # resolved YAML nodes (aliases expanded); a real config has a few hundred


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merged keys may be overridden by the explicit ones: that is the point of a merge
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' (line {key_node.start_mark.line + 1})", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 / JSON numbers with an exponent and no dot (1e-5), which YAML 1.1 resolves to strings
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"),
                                       list("-+0123456789"))


def _unique_pairs(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"duplicate key '{dup}'")
    return dict(pairs)


def _json_mapping(text: str):
    """The file as JSON (every JSON file is YAML, except one indented with tabs), or None."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except ValueError:
        return None


def _expanded_size(node, memo: dict) -> int:
    """Values in the document once every alias is expanded (what a validator would walk)."""
    if id(node) not in memo:
        memo[id(node)] = 1
        if isinstance(node, yaml.MappingNode):
            memo[id(node)] += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            memo[id(node)] += sum(_expanded_size(v, memo) for v in node.value)
    return memo[id(node)]


def read_bytes(path: str | Path, what: str, fix: str = "check the path") -> bytes:
    """A file a user names as input (a config, a problem set): a regular file, links followed, opened without
    ever waiting on a named pipe (a FIFO would block the read forever); else one OpsdError saying what stands
    there (nothing, a folder, a FIFO, a device, a loop of links) and ``fix``; a relative path that is missing names
    the directory it was read from (a config run from elsewhere than its own folder)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        where = "" if path.is_absolute() else f" (a relative path is read from the current directory, {Path.cwd()})"
        raise OpsdError(f"{what} file {path} not found: {fix}{where}") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path
        why = ("goes through a loop of symbolic links" if getattr(e, "errno", None) == errno.ELOOP else
               f"cannot be opened ({getattr(e, 'strerror', None) or e})")
        raise OpsdError(f"{what} file {path} {why}: {fix}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        found = ("a directory, not a file" if stat.S_ISDIR(mode) else
                 f"{'a named pipe (FIFO)' if stat.S_ISFIFO(mode) else 'a device or a socket'}, not a regular file")
        raise OpsdError(f"{what} file {path} is {found}: {fix}")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read()
        except OSError as e:
            raise OpsdError(f"cannot read {what} file {path} ({e.strerror})") from None


def read_text(path: str | Path, what: str, fix: str = "check the path") -> str:
    """A text file as UTF-8 (a byte-order mark is dropped), or an OpsdError naming the problem."""
    return decode(read_bytes(path, what, fix), path, what)


def decode(data: bytes, path: str | Path, what: str) -> str:
    """A file's bytes as UTF-8 text (a byte-order mark dropped), or an OpsdError saying to save it as UTF-8."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise OpsdError(f"{what} file {path} is not UTF-8 text (byte {e.start}): save it as UTF-8") from None


def read_mapping(path: str | Path, what: str, expected: str) -> dict:
    """The YAML mapping in ``path``; ``expected`` names its top-level keys for the error message."""
    text = read_text(path, what)
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node, {}) > MAX_NODES:
            raise OpsdError(f"{path} expands to more than {MAX_NODES} values through YAML aliases: write the "
                            "values out instead")
        data = None if node is None else loader.construct_document(node)
    except yaml.YAMLError as e:
        data = _json_mapping(text)
        if data is None:
            first = " ".join(str(e).split())[:200]
            raise OpsdError(f"{path} is not valid YAML ({first}): fix the file") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise OpsdError(f"{path} must contain a YAML mapping with keys {expected}")
    try:  # a "\ud800" escape without its pair is no text: it would fail late, in a tokenizer or a file write
        json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError as e:
        raise OpsdError(f"{path} holds a lone surrogate code point (U+{ord(e.object[e.start]):04X}, a '\\ud800' "
                        "escape without its pair), which is not text: fix that value") from None
    return data
