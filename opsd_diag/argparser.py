"""The command-line parser of ``opsd-diag`` and ``opsd-train``: a usage mistake is one line, exit 2.

argparse prints the whole usage block and then ``opsd-diag run: error: ...``; every other user error
of the tools is one ``PROG: error: ...`` line on stderr (errors.py). This parser (subcommands
included) prints that same one line, with the subcommand's ``--help`` as the fix.
"""

from __future__ import annotations

import argparse


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
