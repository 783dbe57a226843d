"""``opsd-diag``: run a diagnosis, report it, show one rollout, export a heatmap, rerun its predictor, score
predictions against training runs, build the toy zoo.

User errors print one line on stderr and exit with status 2 (no traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from opsd_diag.argparser import Parser, check_paths, parse, stop_as_interrupt
from opsd_diag.errors import OpsdError, ResourceError, printable

MODELS_DIR = Path("sample_data/models")
PROBLEMS_DIR = Path("sample_data/problems")
PATHS = {"config": "the config file", "out": "--out", "run_dir": "the run directory", "root": "the runs folder",
         "problems_dir": "--problems-dir", "world": "--world",
         "calibration": "--calibration", "rollouts": "--rollouts"}


def _cmd_run(args) -> None:
    from opsd_diag.config.spec import load_config

    cfg = load_config(args.config)  # before importing torch: a bad config fails in a fraction of a second
    if args.rollouts or cfg.rollouts is not None:  # a rollouts file: --rollouts replaces the config's, read now
        from opsd_diag.io import rollouts_file
        cfg = rollouts_file.checked(cfg, args.rollouts)
    if cfg.ideal is not None and cfg.ideal.calibration is not None:
        from opsd_diag import prediction
        prediction.load(cfg.ideal.calibration)  # a missing or foreign calibration: said before any work
    from opsd_diag import jobs
    from opsd_diag.io import store

    out = Path(args.out) if args.out else store.default_run_dir(args.config)
    jobs.check_free(out)  # another run writes there: say so now, not after loading the models
    store.check_run_dir(out, cfg.model_dump(mode="json"))
    if (out / "manifest.json").is_file() and store.read_manifest(out).get("status") == "finished":
        print(f"run {out} is already finished: nothing to do (opsd-diag report {out} shows it; a new --out "
              "starts a new run)")
        return
    from opsd_diag.engine.diagnose import run_diagnosis

    run_diagnosis(cfg, out, show_progress=not args.quiet)
    from accelerate import PartialState
    if PartialState().is_main_process:
        print(f"run written to {out}")
        if not args.quiet:
            _print_report(out)


def _print_report(run_dir: Path, calibration: str | None = None) -> None:
    """The summary, predictor v2's decision (the shipped models or ``calibration``'s) and the v1 verdicts; text
    from the run (names, reasons) is escaped before it reaches the terminal (a received run can hold escape
    sequences)."""
    from opsd_diag.run import Run

    run = Run.load(run_dir)
    s, f = run.summary, run.facts()
    lines = [f"run {run_dir}: {f['n_problems']} problems x {f['samples']} samples, "
             f"T_sample={f['sampling_temperature']} T_score={f['scoring_temperature']} centering={f['centering']}",
             f"student accuracy: {s.student_accuracy.text()}"]
    if s.pass_at_k:
        lines.append("pass@k: " + ", ".join(f"{k}={v:.3f}" if v is not None else f"{k}=n/a"
                                            for k, v in s.pass_at_k.items()))
    with _pd_options():
        lines.append(s.headline_frame().to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    from opsd_diag.checks import lines as check_lines
    found = run.failure_checks()
    lines += ["failure checks (thresholds: docs/design.md#failure-checks):", *check_lines(found)]
    if s.ideal is not None and s.ideal.status != "ok":
        lines.append(f"ideal-gradient predictor: {printable(str(s.ideal.reason))}")  # one line, whatever it holds
    pred = run.predictions(calibration)
    if pred is not None:
        from opsd_diag.report.terminal import decision_line, prediction_text
        lines.append(prediction_text(pred))
    from opsd_diag.levers import text as lever_lines
    lines += [printable(x) for x in lever_lines(s.levers)]
    from opsd_diag.schedule_points import text as schedule_lines
    lines += [printable(x) for x in schedule_lines(s.schedule)]
    verdicts = s.verdict_frame()
    if verdicts is not None:
        lines.append("\nv1 verdicts, ranked by verdict then score (secondary evidence; rule: docs/verdict.md):")
        with _pd_options():
            lines.append(verdicts.drop(columns="rank").to_string(index=False, float_format=lambda v: f"{v:.4f}",
                                                                 max_colwidth=110))
    if s.ranking:
        from opsd_diag import decision
        lines.append(decision.text(decision.decide(s)))
    if pred is not None:
        lines.append(decision_line(pred))
    print(printable("\n".join(lines), keep_newlines=True))


def _pd_options():
    import pandas as pd
    return pd.option_context("display.width", 200, "display.max_columns", 50)


def _cmd_report(args) -> None:
    _print_report(Path(args.run_dir), args.calibration)


def _cmd_show(args) -> None:
    from opsd_diag.report.terminal import render_rollout
    from opsd_diag.run import Run

    row, tokens, config = Run.load(Path(args.run_dir)).rollout(args.rollout, args.config)
    # colour only on a terminal (a redirected file gets plain text) unless --color asks for it
    color = args.color or (not args.no_color and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    print(render_rollout(row, tokens, config, signal=args.signal, color=color))


def _cmd_export(args) -> None:
    from opsd_diag.run import Run

    run = Run.load(Path(args.run_dir))
    configs = [c.strip() for c in args.configs.split(",") if c.strip()] if args.configs is not None \
        else [run.top_config()]
    if not configs:
        raise OpsdError(f"--configs names no config: give one or more of {', '.join(run.configs)}, "
                        "separated by commas")
    for c in configs:
        if c not in run.configs:
            raise OpsdError(f"unknown config '{c}': this run has {', '.join(run.configs)}")
    out = Path(args.out) if args.out else Path(f"{run.path.name}-rollout{args.rollout}-{args.signal}.{args.format}")
    from opsd_diag import jobs
    from opsd_diag.io import safe

    _check_output(out, args.format)  # before the heatmap is made: a refusal costs nothing
    data = run.export_heatmap(args.rollout, configs, args.signal, args.format,
                              run.tokenizer() if args.format == "html" else None, scale=args.scale)
    with jobs.mapped(out, "export"):  # a full disk: one line (an export writes outside any run: no lock)
        try:
            safe.write_file(out, data)
        except OSError as e:
            raise OpsdError(f"cannot write {out} ({e.strerror}): choose another --out") from None
    print(f"heatmap of rollout {args.rollout} ({', '.join(configs)}, {args.signal}) written to {out}")


def _check_output(out: Path, fmt: str) -> None:
    """An export replaces only what could be an earlier export: a regular file outside any run directory,
    with the format's suffix (a data file, a config or a run's summary.json is never overwritten)."""
    from opsd_diag.io import safe

    safe.check_target(out)
    if out.exists() and out.suffix.lower() != f".{fmt}":
        raise OpsdError(f"--out {out} exists and is not a .{fmt} file: an export only replaces an earlier export; "
                        "choose another --out")


def _cmd_predict(args) -> None:
    from opsd_diag.config.spec import IdealSpec, validate
    from opsd_diag.run import Run

    run_dir = Path(args.run_dir)
    run = Run.load(run_dir)  # a finished run, or a clear error
    cfg, note = run.config_for_models(args.trust_remote_code)  # the user's flag decides, never the manifest
    if run.summary.ranking and not args.replace:  # its verdicts are not thrown away unasked
        raise OpsdError(f"{run_dir} has verdicts already: pass --replace to replace them with a new predictor run "
                        "(they are not kept), or copy the run directory first")
    spec = (cfg.ideal or IdealSpec()).model_dump()
    spec.update({k: v for k, v in (("budget", args.budget), ("k", args.k), ("m", args.m)) if v is not None})
    spec = validate(IdealSpec, {**spec, "enabled": True}, "predict options", "ideal")
    from opsd_diag import jobs
    from opsd_diag.engine.diagnose import prepare
    from opsd_diag.engine.predict import check_tables, run_predictor

    jobs.check_free(run_dir)  # another process writes this run: say so before the models load
    from opsd_diag.io import safe, store

    safe.check_run_files(run_dir, store.RUN_FILES)  # no link or FIFO where predict writes
    run.table("rollouts"), run.table("tokens")  # damaged or foreign tables: said before the models load
    from opsd_diag.engine import cross

    cross.check_scored(run_dir, cfg, code=args.trust_remote_code)  # a teacher of another family than its tables
    if note:
        print(f"opsd-diag: {note}", file=sys.stderr)
    prep = prepare(cfg.model_copy(update={"ideal": spec}))  # what the predictor cannot do is refused here
    check_tables(run.rollouts, run.tokens, [t.name for t in cfg.teachers], prep.node_models())  # models vs tables
    with jobs.hold(run_dir, "opsd-diag predict", after="predict"):  # one writer per run directory
        if run.summary.ranking:
            print(f"opsd-diag: replacing the verdicts and ranking of {run_dir} with a new predictor run",
                  file=sys.stderr)
        result = run_predictor(run_dir, cfg, prep.problems, prep.node_models(), prep.sampler(), spec,
                               show_progress=True)
    if result.get("status") != "ok":
        print(result.get("reason", "skipped"))
    _print_report(run_dir)


def _cmd_scoreboard(args) -> None:
    from opsd_diag.scoreboard import scoreboard

    if args.out is not None and not args.fit:
        raise OpsdError("--out names the calibration file of --fit: add --fit, or drop --out")
    board = scoreboard(Path(args.root))
    if args.fit:  # predictor v2 refitted on these runs (opsd_diag.calibration)
        from opsd_diag import calibration
        from opsd_diag.run import Run

        print(calibration.fit_and_save(board.frame, lambda d: Run.load(d).summary, args.root, args.out))
        return
    if board.frame.empty:
        print(f"no training runs started from a diagnosis under {args.root}: start one with "
              "'opsd-train --from-diagnosis RUN_DIR --config NAME --signal SIGNAL'")
        return
    with _pd_options():  # names from the runs' prediction.json files: escaped for the terminal
        print(printable(board.frame.drop(columns=["diagnosis", "problem"]).to_string(
            index=False, float_format=lambda v: f"{v:.3f}"), keep_newlines=True))
    for run, problem in board.frame.dropna(subset=["problem"])[["run", "problem"]].itertuples(index=False):
        print(printable(f"not scored: {run}: {problem}"))  # one line each, whatever the run's files hold
    print(f"\nSpearman(predicted score, realised pass@1 gain) over {board.n_scored} finished runs: "
          f"{board.spearman:.3f}" + ("  (needs 3 or more)" if board.n_scored < 3 else "")
          + f"; verdict accuracy over the {board.n_judged} helps/hurts runs whose gain interval excludes zero: "
          + (f"{board.n_right} of {board.n_judged}" if board.n_judged else "none yet"))


def _cmd_zoo_build(args) -> None:
    from opsd_diag.zoo import guard, stored
    from opsd_diag.zoo import world as world_mod

    if args.world:  # the spec is checked before torch is imported and before anything is written
        spec = world_mod.load(args.world)
        models, problems = world_mod.folders(spec, Path(args.world))
        out = Path(args.out) if args.out else models
        problems_dir = problems if args.problems_dir is None else (Path(args.problems_dir) if args.problems_dir else None)
        command = f"opsd-diag zoo build --world {args.world}"
    else:
        spec, out, command = world_mod.World(), Path(args.out or MODELS_DIR), ""
        problems_dir = PROBLEMS_DIR if args.problems_dir is None else (Path(args.problems_dir) if args.problems_dir else None)
    if args.card_only:  # the folder and its report, checked before torch is imported
        guard.check_card(spec, out, args.replace)
        stored.read_report(out, spec)
    else:  # where it would write (never another world's folder, a link or the shipped data), before any work
        guard.check_build(spec, out, problems_dir, args.size, args.seed, args.replace)
    from opsd_diag.zoo.build import build, rerender_card

    if args.card_only:
        rerender_card(out, spec, command=command, replace=args.replace)
        return
    build(out, problems_dir=problems_dir, size=args.size, seed=args.seed, world=spec, command=command,
          replace=args.replace)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="opsd-diag", description=__doc__.split("\n\n")[0].replace("``", ""))
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="sample, score and aggregate a diagnosis config into a run directory")
    r.add_argument("config", help="YAML config, e.g. sample_data/configs/quickstart.yaml")
    r.add_argument("--out", help="run directory (default runs/<config>-<time>); an existing one is resumed")
    r.add_argument("--quiet", action="store_true", help="no progress bar or report")
    r.add_argument("--rollouts", help="JSON Lines file of rollouts to diagnose instead of sampling (the config's "
                                      "rollouts.path; formats: docs/design.md#rollouts-from-a-file)")
    r.set_defaults(func=_cmd_run)

    rep = sub.add_parser("report", help="a finished run's summary per teacher config, failure checks and decision "
                                        "(predictor v2; the v1 rule's call after it)")
    rep.add_argument("run_dir")
    rep.add_argument("--calibration", help="a predictor v2 model file to apply instead of the shipped one "
                                           "(the format of opsd_diag/data/predictor_v2.json)")
    rep.set_defaults(func=_cmd_report)

    s = sub.add_parser("show", help="one rollout's tokens with their signals, coloured")
    s.add_argument("run_dir")
    s.add_argument("--rollout", type=int, default=0, help="rollout id (default 0)")
    s.add_argument("--config", help="teacher config name (default: the first)")
    s.add_argument("--signal", default="r_opd", help="per-token column that colours the tokens")
    colour = s.add_mutually_exclusive_group()
    colour.add_argument("--no-color", action="store_true",
                        help="plain text (the default when stdout is not a terminal)")
    colour.add_argument("--color", action="store_true", help="colour even when stdout is not a terminal")
    s.set_defaults(func=_cmd_show)

    e = sub.add_parser("export", help="one rollout's token heatmap (one config or several stacked) as a file")
    e.add_argument("run_dir")
    e.add_argument("--rollout", type=int, default=0, help="rollout id (default 0)")
    e.add_argument("--configs", help="comma-separated teacher configs, stacked (default: the top-ranked one)")
    e.add_argument("--signal", default="r_opd", help="per-token column that colours the tokens")
    e.add_argument("--format", choices=("html", "png", "svg"), default="html",
                   help="html: self-contained, no network request; png/svg: need kaleido and Chromium")
    e.add_argument("--scale", choices=("rollout", "run"), default="rollout",
                   help="colour scale from this rollout's values or the whole run's")
    e.add_argument("--out", help="file to write (default RUN-rolloutN-SIGNAL.FORMAT here)")
    e.set_defaults(func=_cmd_export)

    pr = sub.add_parser("predict", help="add the ideal-gradient analysis (and verdicts) to a finished run")
    pr.add_argument("run_dir")
    pr.add_argument("--budget", type=int, help="student continuations in all (default: the config's ideal.budget)")
    pr.add_argument("--k", type=int, help="top-k candidates per model at each node")
    pr.add_argument("--m", type=int, help="continuations per candidate")
    pr.add_argument("--replace", action="store_true", help="replace the verdicts the run already has")
    pr.add_argument("--trust-remote-code", action="store_true",
                    help="let the run's models run their own code (off: a run directory never enables it)")
    pr.set_defaults(func=_cmd_predict)

    sb = sub.add_parser("scoreboard", help="predicted vs realised for every training run started from a diagnosis")
    sb.add_argument("root", nargs="?", default="runs", help="folder to search for training runs (default runs)")
    sb.add_argument("--fit", action="store_true", help="refit predictor v2 on these runs (8 or more), print its "
                                                       "cross-validated error beside the shipped model's, save it")
    sb.add_argument("--out", help="with --fit: the calibration file (default ROOT/calibration.json)")
    sb.set_defaults(func=_cmd_scoreboard)

    z = sub.add_parser("zoo", help="the bundled toy world")
    zsub = z.add_subparsers(dest="zoo_command", required=True)
    b = zsub.add_parser("build", help="train the tiny base/teacher/student models reproducibly on CPU")
    b.add_argument("--world", help="world spec (e.g. sample_data/worlds/capacity.yaml; default: the bundled zoo, "
                                   "sample_data/worlds/chains.yaml)")
    b.add_argument("--out", help=f"output directory (default {MODELS_DIR}, or the world's models folder)")
    b.add_argument("--problems-dir",
                   help=f"where the train/dev/test splits are written (default {PROBLEMS_DIR}, or the world's "
                        "problems folder); '' to skip")
    b.add_argument("--size", default="full", help="full (the spec's models) or ci (a seconds-long smoke build)")
    b.add_argument("--seed", type=int, help="seed (default: the world's, 0 for the bundled zoo)")
    b.add_argument("--card-only", action="store_true",
                   help="train nothing: render MODEL_CARD.md again from the built build_report.json and the spec")
    b.add_argument("--replace", action="store_true",
                   help="replace the build's files in an --out / --problems-dir folder that holds no earlier build of "
                        "this world (never a symbolic link, never the shipped sample_data/ of another world or size)")
    b.set_defaults(func=_cmd_zoo_build)
    return p


# what a stop leaves, per command: only `run` has finished work to resume
INTERRUPTED = {"run": "rerun the same command to resume",
               "predict": "the run keeps the verdicts it had (a predictor run cannot be resumed): run predict "
                          "again to start it over",
               "export": "nothing was written (there is nothing to resume): run the command again",
               "zoo": "run zoo build again to build the models (it starts over)"}


def main(argv: list[str] | None = None) -> int:
    args, status = parse(parser(), argv)  # a usage mistake: one line, exit 2
    if args is None:
        return status
    with stop_as_interrupt():  # a stop, from the first moment: finished shards are kept, a rerun resumes
        return _main(args)


def _main(args) -> int:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bar is the one that matters
    hf_logging.set_verbosity_error()
    from opsd_diag.io import safe

    try:
        check_paths(args, PATHS)  # a NUL, an over-long name, a link loop: one line before any work
        try:
            args.func(args)
        except OSError as e:  # a write that met a full disk outside io.safe (a library's own file)
            raise safe.resource_error(e, getattr(args, "out", None) or getattr(args, "run_dir", None) or ".") or e
    except OpsdError as e:
        if isinstance(e, ResourceError):  # a full disk: what to rerun depends on the command (errors.AFTER_FULL)
            e = e.after(args.command)
        print(f"opsd-diag: error: {e}", file=sys.stderr)
        if getattr(args, "out", None) and args.command == "run":
            from opsd_diag import jobs

            jobs.fail(Path(args.out), str(e))  # a launched job shows why it failed
        return 2
    except KeyboardInterrupt:
        print(f"opsd-diag: interrupted; {INTERRUPTED.get(args.command, 'nothing was changed')}", file=sys.stderr)
        if getattr(args, "out", None) and args.command == "run":
            from opsd_diag import jobs

            jobs.fail(Path(args.out), jobs.STOPPED_EARLY, status="stopped")  # stopped while loading
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
