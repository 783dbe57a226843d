"""``opsd-train CONFIG``: the full training run of a chosen configuration."""

from __future__ import annotations

import argparse
import sys


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opsd-train", description=__doc__.splitlines()[0])
    p.add_argument("config", help="diagnosis config with a 'training' section")
    p.add_argument("--out", help="training run directory")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    return p


def main(argv: list[str] | None = None) -> int:
    parser().parse_args(argv)
    print("opsd-train: the trainer is not available in this version yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
