"""The command-line parser of ``opsd-diag`` and ``opsd-train`` (a usage mistake is one line, exit 2), and
their stop signal (SIGTERM raises KeyboardInterrupt from the first moment, before the heavy imports).

argparse prints the whole usage block and then ``opsd-diag run: error: ...``; every other user error
of the tools is one ``PROG: error: ...`` line on stderr (errors.py). This parser (subcommands
included) prints that same one line, with the subcommand's ``--help`` as the fix.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one ``PROG: error: MESSAGE`` line and exit status 2."""

    def error(self, message: str):
        root = self.prog.split()[0]
        self.exit(2, f"{root}: error: {message} (see '{self.prog} --help')\n")


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace | None, int]:
    """(arguments, 0), or (None, exit status) when argparse ended the parse (an error, or --help)."""
    try:
        return parser.parse_args(argv), 0
    except SystemExit as e:
        return None, e.code if isinstance(e.code, int) else 2


def check_paths(args: argparse.Namespace, names: dict[str, str]) -> None:
    """Every path argument (``names``: attribute -> how the message names it) through ``io.safe.check_path``."""
    from opsd_diag.io.safe import check_path

    for attr, what in names.items():
        value = getattr(args, attr, None)
        if isinstance(value, str) and value:
            check_path(value, what)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def stop_as_interrupt():
    """While a CLI runs, SIGTERM (a stop) raises KeyboardInterrupt, which each stage turns into ``stopped``;
    the previous handler comes back after (the CLIs also run in-process, in tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
