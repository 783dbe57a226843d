"""``opsd-train CONFIG``: the full training run of a chosen configuration.

User errors print one line on stderr and exit with status 2 before anything is written; a run
started as a job (``app.launch``) also gets ``status.json`` = failed with the message, so the
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
from opsd_diag.argparser import Parser, check_paths, parse, stop_as_interrupt
from opsd_diag.config.levers import CANDIDATES, named_mask
from opsd_diag.errors import OpsdError, ResourceError
from opsd_diag.io import safe

PATHS = {"config_file": "the config file", "out": "--out", "from_diagnosis": "--from-diagnosis",
         "eval_data": "--eval-data"}


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="opsd-train", description="Train the chosen configuration of a diagnosis config (its "
               "'training' section) with the same signal code.")
    p.add_argument("config_file", nargs="?", metavar="CONFIG", help="diagnosis config with a 'training' section")
    p.add_argument("--out", help="training run directory (default runs/train-<config>-<time>)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    d = p.add_argument_group("train what a finished diagnosis predicted (instead of CONFIG)")
    d.add_argument("--from-diagnosis", metavar="RUN_DIR", help="a finished diagnosis run directory")
    d.add_argument("--config", help="one of its teacher configs (without --config and --signal: the row the "
                                    "diagnosis recommends)")
    d.add_argument("--signal", help="the diagnosed signal to train on (r_opd, jsd, rev_kl, fwd_kl, a_d2, a_ex)")
    d.add_argument("--trust-remote-code", action="store_true",
                   help="let the diagnosis' models run their own code (off: a run directory never enables it)")
    d = p.add_argument_group("change the training section (with CONFIG or --from-diagnosis; --resume needs the same)")
    d.add_argument("--max-steps", type=int, help="training.max_steps")
    d.add_argument("--learning-rate", type=float, help="training.learning_rate")
    d.add_argument("--batch-size", type=int, help="training.per_device_train_batch_size")
    d.add_argument("--seed", type=int, help="training.seed")
    d.add_argument("--eval-data", help="held-out problems (training.eval.data.path), so the run can be scored")
    d.add_argument("--eval-problems", type=int, help="score the first N held-out problems (training.eval.data.limit)")
    d.add_argument("--eval-samples", type=int, help="samples per held-out problem (training.eval.num_samples)")
    d.add_argument("--eval-steps", type=int, help="evaluate every N steps too (training.eval_steps: the "
                   "evaluation curves' points)")
    d.add_argument("--token-mask", choices=list(CANDIDATES), help="training.token_mask: one of the masks the "
                   "diagnosis' lever recommendation looks ahead on (docs/training.md)")
    d.add_argument("--reveal", type=float, metavar="SHARE", help="training.context_schedule {kind: fixed, start: "
                   "SHARE}: the share of the solution a self-teacher sees at every step (the diagnosis' schedule "
                   "recommendation)")
    return p


def reveal_schedule(share: float | None) -> dict | None:
    """``training.context_schedule`` of --reveal SHARE (None: the config's own schedule)."""
    return None if share is None else {"kind": "fixed", "start": share}


def eval_overrides(data: str | None, problems: int | None, samples: int | None) -> dict | None:
    """The ``training.eval`` changes of --eval-data / --eval-problems / --eval-samples (None: none); pass@k
    keeps k <= the samples (pass@1 and pass@min(4, samples))."""
    ev: dict = {}
    if data or problems is not None:
        ev["data"] = {**({"path": str(data)} if data else {}), **({"limit": problems} if problems is not None else {})}
    if samples is not None:
        ev["num_samples"] = samples
        ev["pass_k"] = sorted({1, min(4, max(1, samples))})
    return ev or None


def check_evaluated(ev, args) -> None:
    """--eval-samples and --eval-steps change an evaluation: refuse them where the run evaluates nothing (no
    held-out problems and no regression set), rather than ignore them."""
    given = [flag for flag, v in (("--eval-samples", args.eval_samples), ("--eval-steps", args.eval_steps))
             if v is not None]
    if given and ev.data is None and ev.regression is None:
        raise OpsdError(f"this run has nothing to evaluate on, so {' and '.join(given)} would change nothing: "
                        "add --eval-data FILE (held-out problems), or set training.eval.data or "
                        "training.eval.regression in the config")


def _load(args):
    """(resolved training config, prediction record or None, a name for the default run directory)."""
    from opsd_diag.config import training as config

    overrides = {"max_steps": args.max_steps, "learning_rate": args.learning_rate,
                 "per_device_train_batch_size": args.batch_size, "seed": args.seed, "eval_steps": args.eval_steps}
    overrides["eval"] = eval_overrides(args.eval_data, args.eval_problems, args.eval_samples)
    overrides["token_mask"] = named_mask(args.token_mask)
    overrides["context_schedule"] = reveal_schedule(args.reveal)
    if args.from_diagnosis is None:
        if args.config_file is None:
            raise OpsdError("give a config file, or --from-diagnosis RUN_DIR --config NAME --signal SIGNAL")
        if args.config or args.signal:
            raise OpsdError("--config and --signal choose what to train from a diagnosis: use them with "
                            "--from-diagnosis RUN_DIR (a config file names its method in its training section)")
        return config.load(args.config_file, **overrides), None, args.config_file
    if args.config_file is not None or bool(args.config) != bool(args.signal):
        raise OpsdError("--from-diagnosis takes --config NAME and --signal SIGNAL together, or neither (then it trains "
                        "the diagnosis' recommendation), and no config file")
    from opsd_diag.run import Run
    from trainer.from_diagnosis import from_diagnosis, recommended

    run = Run.load(args.from_diagnosis)
    name, signal = (args.config, args.signal) if args.config else recommended(run)
    if not args.config and _is_main():
        print(f"opsd-train: training the diagnosis' recommendation: config {name}, signal {signal}", file=sys.stderr)
    cfg, predicted, note = from_diagnosis(run, name, signal,
                                          trust_remote_code=args.trust_remote_code, **overrides)
    source = f"training from {args.from_diagnosis}"
    tc = config.resolve_training(cfg, source)
    config.check_environment(tc.spec, source)
    if note and _is_main():
        print(f"opsd-train: {note}", file=sys.stderr)
    return tc, predicted, f"{name}-{signal}"


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
    args, status = parse(parser(), argv)  # a usage mistake: one line, exit 2
    if args is None:
        return status
    with stop_as_interrupt():  # a stop while loading; the loop installs its graceful handler for the steps
        return _main(args, argv)


def _main(args, argv) -> int:
    run_dir = None
    try:
        check_paths(args, PATHS)  # a NUL, an over-long name, a link loop: one line before any work
        run_dir = Path(args.out) if args.out else None
        if run_dir is not None:
            jobs.check_free(run_dir)  # another run writes there: say so at once, before the heavy imports
        tc, predicted, name = _load(args)  # a config mistake is reported before torch is imported
        check_evaluated(tc.spec.eval, args)
        if args.resume and run_dir is None:
            raise OpsdError("--resume needs --out RUN_DIR: the run directory to continue")
        from transformers.utils import logging as hf_logging

        from trainer import loop, rundir

        hf_logging.disable_progress_bar()  # the run logs its own progress
        hf_logging.set_verbosity_error()  # a library's report never buries the one-line error

        run_dir = run_dir or rundir.default_dir(name)
        _logging()
        status = loop.run(tc, run_dir, resume=args.resume, argv=_command(argv), prediction=predicted)
    except (OpsdError, OSError) as e:
        if isinstance(e, OSError) and (e := safe.resource_error(e, run_dir or ".")) is None:
            raise
        if isinstance(e, ResourceError):  # a full disk: once the run directory holds the run, --resume continues it
            e = e.after("train --resume" if run_dir and os.path.lexists(run_dir / "config.yaml") else "train")
        if _is_main():
            print(f"opsd-train: error: {e}", file=sys.stderr)
            if run_dir is not None:
                jobs.fail(run_dir, str(e))
        return 2
    except KeyboardInterrupt:
        if _is_main():
            print("opsd-train: interrupted before the first step; nothing was trained", file=sys.stderr)
            if run_dir is not None:
                jobs.fail(run_dir, jobs.STOPPED_EARLY, status="stopped")
        return 130
    if _is_main():
        print(f"opsd-train: {status}: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
