"""The one exception type for mistakes a user can fix (bad file, bad config, missing model...), and the
one escaper of text that reaches a terminal or a one-line message.

The CLI prints its message on one line and exits with status 2; the app shows it in place.
Anything else is a bug and keeps its traceback. A message often quotes a path, an id or a value from a
user's file; ``printable`` escapes the characters in it that could break the line or drive the terminal.
"""

from __future__ import annotations

import re

# C0/C1 controls (ESC included), DEL, line/paragraph separators, bidi overrides and lone surrogates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: str, keep_newlines: bool = False) -> str:
    """``text`` with control characters, escape sequences, bidi overrides and lone surrogates written as
    ``\\n``, ``\\x1b``, ``\\u202e``...: nothing from a run or a user's file drives the terminal or splits a line
    (``keep_newlines``: plain newlines stay, for multi-line output)."""
    if keep_newlines:
        return "\n".join(_UNSAFE.sub(_escape, part) for part in text.split("\n"))
    return _UNSAFE.sub(_escape, text)


class OpsdError(Exception):
    """A user-fixable problem; the message names the problem and the fix, always on one printable line."""

    def __str__(self) -> str:
        return printable(super().__str__())


# What to do once space is freed depends on the command that met the full disk: only a diagnosis resumes by
# itself; a training run continues with --resume; predict and export are written whole or not at all.
AFTER_FULL = {
    None: "try again",
    "run": "rerun the same command, which resumes from the finished shards",
    "train": "run the same command again",
    "train --resume": "rerun it with --resume (opsd-train CONFIG --out RUN_DIR --resume), which continues from the "
                      "last checkpoint saved",
    "predict": "run predict again (the run keeps the verdicts it had; a predictor run starts over)",
    "export": "run the export again (nothing of it was kept; it starts over)",
    "zoo": "run zoo build again (it starts over)",
}


class ResourceError(OpsdError):
    """A write that failed for want of space, inodes or file descriptors (``problem`` names the file and the
    want); the fix names what to rerun, chosen by the command that failed (``after``)."""

    def __init__(self, problem: str, command: str | None = None):
        then = AFTER_FULL.get(command, AFTER_FULL[None])
        super().__init__(f"{problem}: free some space (or raise the limit) and {then}")
        self.problem = problem

    def after(self, command: str | None) -> ResourceError:
        """The same error, its fix for ``command`` (a key of ``AFTER_FULL``: run, train, train --resume...)."""
        return ResourceError(self.problem, command)


class NonFiniteLogits(OpsdError):
    """A model produced NaN or inf logits while sampling: at completion ``position`` of batch ``row``.

    Raised where the model's name is not known; the caller re-raises it as one OpsdError naming the model.
    """

    def __init__(self, row: int, position: int):
        super().__init__(f"non-finite logits (NaN or inf) at completion position {position} of sampled row {row}")
        self.row, self.position = row, position
