"""``opsd-train CONFIG``: the full training run of a chosen configuration.

User errors print one line on stderr and exit with status 2 before anything is written; a run
started as a job (``trainer.launch``) also gets ``status.json`` = failed with the message, so the
app can show it. Failures during training are recorded by the loop (status ``failed`` with the
message) and keep their traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from opsd_diag import jobs
from opsd_diag.errors import OpsdError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opsd-train", description="Train the chosen configuration of a diagnosis "
                                "config (its 'training' section) with the same signal code.")
    p.add_argument("config", help="diagnosis config with a 'training' section")
    p.add_argument("--out", help="training run directory (default runs/train-<config>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    return p


def _is_main() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _command(argv: list[str] | None) -> list[str]:
    if os.environ.get(jobs.ARGV_ENV):
        return json.loads(os.environ[jobs.ARGV_ENV])
    if argv is not None or sys.argv[0].endswith("__main__.py"):
        return [sys.executable, "-m", "trainer", *(sys.argv[1:] if argv is None else argv)]
    return list(sys.argv)


def _logging() -> None:
    logger = logging.getLogger("opsd-train")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO if _is_main() else logging.WARNING)
    logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from trainer import rundir

    run_dir = Path(args.out) if args.out else None
    try:
        from trainer import config, loop

        tc = config.load(args.config)
        if args.resume and run_dir is None:
            raise OpsdError("--resume needs --out RUN_DIR: the run directory to continue")
        run_dir = run_dir or rundir.default_dir(args.config)
        _logging()
        status = loop.run(tc, run_dir, resume=args.resume, argv=_command(argv))
    except OpsdError as e:
        if _is_main():
            print(f"opsd-train: error: {e}", file=sys.stderr)
            if run_dir is not None:
                jobs.fail(run_dir, str(e))
        return 2
    if _is_main():
        print(f"opsd-train: {status}: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
