"""The bad-input corpus grown by what the second hardening pass left (issue 30, part 7).

Each class below gets rows run by the corpus' own runners (``tests/test_bad_inputs.py``): one line
``opsd-diag: error: ...`` / ``opsd-train: error: ...``, exit 2, no traceback, and the test's folder and
the shared finished run unchanged; an app row shows its error in place and writes nothing. The
classes:

- paths inside a config (data files, model and adapter folders) pass the same path check as the
  command line's: a name over 255 bytes, a path over 4095 bytes or a NUL is the key's error;
- a FIFO (or a device) given as a config, a data file or the app's "Save as" is named as such, never
  read (a read would block forever) and never reported as "not found";
- a full disk's message says what to rerun for the command that failed (a diagnosis resumes by itself,
  a training run with ``--resume``, predict and export start over);
- a prompt too long because of ``data.system_prompt`` names the system prompt; "raise the limit" is
  said only where the models hold more, and the default ``scoring.max_prompt_length`` is capped at
  what the models hold (a context that does not fit is shortened, as the setting says);
- a second launch that loses the run's lock leaves the running run's status alone.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from test_bad_inputs import (GOOD, MAIN, AppCase, Env, _shared, diag, env, fifo, finished,  # noqa: F401 (fixtures)
                             jsonl, link_loop, manifest_config, run_over, train, train_over, tree, world)
from test_bad_inputs import test_app_bad_input as run_app_case
from test_bad_inputs import test_cli_bad_input as run_cli_case

from opsd_diag import cli as diag_cli
from opsd_diag import jobs
from opsd_diag.errors import AFTER_FULL, ResourceError
from opsd_diag.io import safe
from trainer import cli as train_cli

REPO = Path(__file__).resolve().parents[1]
NAME_300 = "/tmp/" + "n" * 300  # a name no file system holds (255 bytes at most)
PATH_5K = "/" + "/".join(["d" * 200] * 25)  # a path longer than any (4095 bytes at most)
LONG_TEXT = "Start at 1. Apply in order, mod 10. " * 300  # about 3,000 tokens: more than the world's 1,024 positions


# ------------------------------------------------------------------------------------- (1) config paths

CASES = [
    run_over("cfg-path-data-name-300", {"data": {"path": NAME_300 + ".jsonl"}},
             "data.path: the name nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn... is 306 bytes, over the file system's "
             "limit of 255 per name: use a shorter name"),
    run_over("cfg-path-data-5k", {"data": {"path": PATH_5K}}, "data.path: the path is 5025 bytes long, over the "
             "limit of 4095: use a shorter path"),
    run_over("cfg-path-data-nul", {"data": {"path": "d\0.jsonl"}}, "data.path: the path contains a NUL character"),
    run_over("cfg-path-student-name-300", {"student": {"model": NAME_300}}, "student.model: the name"),
    run_over("cfg-path-base-5k", {"base": {"model": PATH_5K}}, "base.model: the path is 5025 bytes long"),
    run_over("cfg-path-teacher-name-300", {"teachers": [{"name": "t", "model": NAME_300}]},
             "teachers.0.model: the name"),
    run_over("cfg-path-student-adapter-name-300", {"student": {"adapter": NAME_300}}, "student.adapter: the name"),
    run_over("cfg-path-teacher-adapter-nul", {"teachers": [{"name": "t", "model": "m", "adapter": "a\0"}]},
             "teachers.0.adapter: the path contains a NUL character"),
    train_over("cfg-path-training-data-name-300", {"data": {"path": NAME_300 + ".jsonl"}},
               "training.data.path: the name"),
    train_over("cfg-path-training-eval-data-5k", {"eval": {"data": {"path": PATH_5K}}},
               "training.eval.data.path: the path is 5025 bytes long"),
    train_over("cfg-path-training-regression-name-300", {"eval": {"regression": {"path": NAME_300}}},
               "training.eval.regression.path: the name"),
    diag("cfg-path-data-link-loop", lambda e: ["run", e.cfg({"data": {"path": str(link_loop(e))}}), "--out", e.out],
         "loop_a goes through a loop of symbolic links: set data.path to a JSONL, CSV or Parquet file"),
    diag("cfg-path-in-a-received-manifest", lambda e: ["predict", str(e.run_copy(manifest_config(
        student={"model": NAME_300}))), "--budget", "4"], "manifest.json config: student.model: the name"),
]

# ---------------------------------------------------------------------- (2) FIFOs and devices as inputs

CASES += [
    diag("fifo-run-config", lambda e: ["run", fifo(e.tmp / "c.yaml"), "--out", e.out],
         "c.yaml is a named pipe (FIFO), not a regular file"),
    train("fifo-train-config", lambda e: [fifo(e.tmp / "c.yaml"), "--out", e.out],
          "c.yaml is a named pipe (FIFO), not a regular file"),
    diag("fifo-run-data-jsonl", lambda e: ["run", e.cfg({"data": {"path": fifo(e.tmp / "d.jsonl")}}), "--out", e.out],
         "d.jsonl is a named pipe (FIFO), not a regular file: set data.path to a JSONL, CSV or Parquet file"),
    diag("fifo-run-data-parquet", lambda e: ["run", e.cfg({"data": {"path": fifo(e.tmp / "d.parquet")}}), "--out",
                                             e.out], "d.parquet is a named pipe (FIFO), not a regular file"),
    diag("fifo-run-data-csv", lambda e: ["run", e.cfg({"data": {"path": fifo(e.tmp / "d.csv")}}), "--out", e.out],
         "d.csv is a named pipe (FIFO)"),
    train("fifo-train-data", lambda e: [e.train_cfg({"data": {"path": fifo(e.tmp / "t.jsonl")}}), "--out", e.out],
          "t.jsonl is a named pipe (FIFO), not a regular file: set training.data.path"),
    train("fifo-train-eval-data", lambda e: [e.train_cfg({"eval": {"data": {"path": fifo(e.tmp / "h.jsonl")}}}),
                                             "--out", e.out], "h.jsonl is a named pipe (FIFO)"),
    train("fifo-fd-eval-data", lambda e: ["--from-diagnosis", str(e.run), "--config", "teacher", "--signal", "r_opd",
                                          "--eval-data", fifo(e.tmp / "h.jsonl"), "--out", e.out],
          "h.jsonl is a named pipe (FIFO)"),
    diag("device-run-config-dev-zero", lambda e: ["run", "/dev/zero", "--out", e.out],
         "config file /dev/zero is a device or a socket, not a regular file"),
    run_over("device-run-data-dev-null", {"data": {"path": "/dev/null"}},
             "data file /dev/null is a device or a socket, not a regular file"),
]

# ------------------------------------------------------------------------------ (5) prompt lengths

LONG_SOLUTION = {**GOOD, "id": "long", "solution": "a) 1+2=3\n" * 600}

CASES += [
    run_over("prompt-data-system-prompt-too-long", {"data": {"system_prompt": LONG_TEXT}},
             "error: data.system_prompt is 5709 tokens, which makes the prompt of problem"),
    train_over("prompt-train-system-prompt-too-long", {}, "error: data.system_prompt is 5709 tokens",
               over={"data": {"system_prompt": LONG_TEXT}}),
    train("prompt-training-data-system-prompt-too-long", lambda e: [e.train_cfg({"data": {
        "path": str(e.world / "train.jsonl"), "system_prompt": LONG_TEXT}}), "--out", e.out],
        "error: training.data.system_prompt is 5709 tokens"),
    run_over("prompt-teacher-system-prompt-too-long", {"teachers": [{"name": "self_full", "context": "full_solution",
                                                                     "system_prompt": LONG_TEXT}]},
             "its system prompt (the teacher's system_prompt, else data.system_prompt) takes "),
    run_over("prompt-template-beyond-positions", {"teachers": [{"name": "boiler", "context": "{prompt} " + LONG_TEXT}]},
             "the teacher prompt alone (it has no privileged context to shorten) is "),
    run_over("prompt-template-over-explicit-limit", {"scoring": {"max_prompt_length": 16}, "teachers": [
        {"name": "plain", "context": "Question: {prompt}"}]}, "over scoring.max_prompt_length=16: raise the limit "
             "(the models hold 1020 prompt tokens)"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli_leftover(case, env: Env, capsys, monkeypatch):
    run_cli_case(case, env, capsys, monkeypatch)


def test_prompt_messages_that_cannot_help_are_never_offered(env: Env, capsys):
    """Over the cap of the default limit, no row says "raise the limit"; a template too long says why not."""
    argv = ["run", env.cfg({"teachers": [{"name": "boiler", "context": "{prompt} " + LONG_TEXT}]}), "--out", env.out]
    assert diag_cli.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "over scoring.max_prompt_length=1020" in line and "raise the limit" not in line, line
    assert "the models hold at most 1020 prompt tokens beside the completion, so a higher limit cannot help" in line


def test_a_context_longer_than_the_models_hold_is_shortened_by_default(env: Env, capsys):
    """Rightly accepted: the default limit is capped at the models' positions, so a long solution is cut to fit
    (and recorded), where the uncapped default of 2048 failed on a 1024-position model."""
    data = env.file("long.jsonl", jsonl(LONG_SOLUTION))
    cfg = env.cfg({"data": {"path": data}, "teachers": [{"name": "self_full", "context": "full_solution"}]})
    assert diag_cli.main(["run", cfg, "--out", env.out, "--quiet"]) == 0, capsys.readouterr().err
    summary = json.loads((env.tmp / "out" / "summary.json").read_text())
    assert summary["context_truncated"] == {"self_full": 1}
    stored = yaml.safe_load((env.tmp / "out" / "config.yaml").read_text())
    assert stored["scoring"]["max_prompt_length"] is None  # the stored config stays the user's: a resume matches


# --------------------------------------------------------------------------------- (4) a full disk

def test_each_command_names_what_to_rerun_after_a_full_disk():
    err = ResourceError("cannot write x: no space (or no free inodes) left on its file system (ENOSPC)")
    assert str(err).endswith("free some space (or raise the limit) and try again")
    assert "rerun the same command, which resumes" in str(err.after("run"))
    assert "rerun it with --resume" in str(err.after("train --resume"))
    for command in ("train", "predict", "export", "zoo"):
        text = str(err.after(command))
        assert "resumes" not in text and "--resume" not in text, text
    assert set(AFTER_FULL) >= {None, "run", "train", "train --resume", "predict", "export", "zoo"}


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _one_line(err: str, prog: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_full_disk_in_export_says_to_run_it_again(env: Env, capsys, monkeypatch):
    before = tree(env.tmp), tree(env.run)
    monkeypatch.setattr(tempfile, "mkstemp", _enospc)
    assert diag_cli.main(["export", str(env.run), "--out", str(env.tmp / "h.html")]) == 2
    line = _one_line(capsys.readouterr().err, "opsd-diag")
    assert "(ENOSPC): free some space (or raise the limit) and run the export again" in line, line
    assert "resumes" not in line
    assert (tree(env.tmp), tree(env.run)) == before


def test_a_full_disk_in_predict_says_it_starts_over(env: Env, capsys, monkeypatch):
    from opsd_diag.io import store

    run = env.run_copy()
    before = tree(env.tmp)
    monkeypatch.setattr(store, "write_table", lambda *a, **k: _enospc())
    assert diag_cli.main(["predict", str(run), "--replace", "--budget", "4", "--k", "1", "--m", "1"]) == 2
    err = capsys.readouterr().err  # the predictor's progress bar, then the error
    assert "Traceback" not in err
    line = _one_line(err.strip().splitlines()[-1], "opsd-diag")
    assert "run predict again (the run keeps the verdicts it had; a predictor run starts over)" in line, line
    assert {k: v for k, v in tree(env.tmp).items() if k != "run/.lock"} == \
        {k: v for k, v in before.items() if k != "run/.lock"}


def test_a_full_disk_before_a_training_run_exists_says_to_run_the_same_command(env: Env, capsys, monkeypatch):
    from opsd_diag.io import store

    argv = [env.train_cfg(), "--out", env.out]
    before = tree(env.tmp)
    monkeypatch.setattr(store, "check_writable", lambda out: (_ for _ in ()).throw(
        safe.resource_error(OSError(errno.ENOSPC, "No space left on device"), out)))
    assert train_cli.main(argv) == 2
    line = _one_line(capsys.readouterr().err, "opsd-train")
    assert line.endswith("free some space (or raise the limit) and run the same command again"), line
    assert tree(env.tmp) == before


def test_a_full_disk_mid_training_says_resume_and_resume_works(env: Env, capsys, monkeypatch):
    from trainer import checkpoint

    argv = [env.train_cfg(), "--out", env.out]
    outside = {k: v for k, v in tree(env.tmp).items() if not k.startswith("out")}
    real = checkpoint.write_model
    monkeypatch.setattr(checkpoint, "write_model", _enospc)
    assert train_cli.main(argv) == 2
    line = _one_line(capsys.readouterr().err, "opsd-train")
    assert "(ENOSPC): free some space (or raise the limit) and rerun it with --resume" in line, line
    assert "rerun the same command" not in line
    st = jobs.read_status(env.out)
    assert st["status"] == "failed" and "rerun it with --resume" in st["error"]
    assert {k: v for k, v in tree(env.tmp).items() if not k.startswith("out")} == outside  # only the run changed
    monkeypatch.setattr(checkpoint, "write_model", real)
    assert train_cli.main([*argv, "--resume"]) == 0, capsys.readouterr().err  # the advice works
    assert jobs.read_status(env.out)["status"] == "finished"


# -------------------------------------------------------------------- (6) a second launch loses the lock

HOLDER = """import sys
from opsd_diag import jobs
held = jobs.acquire_lock(sys.argv[1], "opsd-diag run")
jobs.write_status(sys.argv[1], "running", kind=sys.argv[2], argv=sys.argv[3:])
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture()
def holder(monkeypatch):
    """``hold(run_dir, kind, argv)``: another process holds the run's lock and has recorded itself running with
    ``argv``, and this process looks launched with that same argv (what a second launch sees)."""
    procs = []

    def hold(run_dir: Path, kind: str, argv: list[str]) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir), kind, *argv], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        monkeypatch.setenv(jobs.ARGV_ENV, json.dumps(argv))

    yield hold
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


@pytest.mark.parametrize("prog", ["opsd-diag", "opsd-train"])
def test_a_second_launch_that_loses_the_lock_leaves_the_running_status(env: Env, holder, capsys, monkeypatch, prog):
    out = env.tmp / "busy"
    argv = ["run", env.cfg(), "--out", str(out)] if prog == "opsd-diag" else [env.train_cfg(), "--out", str(out)]
    holder(out, "diagnosis" if prog == "opsd-diag" else "training", [sys.executable, "-m", "x", *argv])
    status = (out / jobs.STATUS).read_bytes()
    case = (diag if prog == "opsd-diag" else train)(f"lock-lost-{prog}", lambda e: argv,
                                                    "is in use by opsd-diag run pid")
    run_cli_case(case, env, capsys, monkeypatch)  # one line, exit 2, and nothing under env.tmp changed...
    assert (out / jobs.STATUS).read_bytes() == status  # ...least of all the running run's status
    assert jobs.status(out)["status"] == "running"


def test_fail_writes_only_when_no_other_process_holds_the_lock(tmp_path, holder, monkeypatch):
    free, mine, theirs = tmp_path / "free", tmp_path / "mine", tmp_path / "theirs"
    for d in (free, mine):
        jobs.write_status(d.mkdir() or d, "starting", owner=False, argv=["launched"])
    monkeypatch.setenv(jobs.ARGV_ENV, json.dumps(["launched"]))
    jobs.fail(free, "bad config")  # a launched job that failed before the lock: its status says why
    assert jobs.read_status(free)["status"] == "failed"
    held = jobs.acquire_lock(mine, "opsd-diag run")
    try:
        jobs.fail(mine, "failed while holding the lock")  # this process holds it: it is the run
        assert jobs.read_status(mine)["status"] == "failed"
    finally:
        held.close()
    holder(theirs, "training", ["launched"])
    jobs.fail(theirs, "lost the lock")
    assert jobs.read_status(theirs)["status"] == "running"


# ------------------------------------------------------------------------------------------- the app

def _save_as(target) -> AppCase:
    """The New diagnosis form filled with the world, saved ("Save") as ``target(env)``."""
    def inputs(e: Env) -> dict:
        return {"nr_student": str(e.world / "student"), "nr_base": str(e.world / "base"),
                "nr_t0_model": str(e.world / "teacher"), "nr_data_path": str(e.world / "dev.jsonl"),
                "nr_save_as": target(e)}
    return inputs


def _form(id: str, target, expect: str) -> AppCase:
    return AppCase(id, _shared, "views/new_run.py", expect, _save_as(target), "nr_save", {"nr_source": "path"})


APP_CASES = [
    _form("app-save-config-onto-fifo", lambda e: fifo(e.tmp / "saved.yaml"),
          "saved.yaml is a named pipe (FIFO): it is never replaced by a file"),
    _form("app-save-config-onto-link", lambda e: ((e.tmp / "saved.yaml").symlink_to(e.file("victim.yaml", "keep")),
                                                  str(e.tmp / "saved.yaml"))[1], "saved.yaml is a symbolic link"),
    _form("app-save-config-name-300", lambda e: str(e.tmp / ("s" * 300 + ".yaml")), "the config file: the name"),
    AppCase("app-start-form-onto-fifo", _shared, "views/new_run.py", "start.yaml is a named pipe (FIFO)",
            _save_as(lambda e: fifo(e.tmp / "start.yaml")), "start", {"nr_source": "path"}),
    AppCase("app-new-run-config-fifo", _shared, "views/new_run.py", "c.yaml is a named pipe (FIFO), not a regular "
            "file", lambda e: {"config_path": fifo(e.tmp / "c.yaml")}, "validate", {"nr_mode": "file"}),
    AppCase("app-new-run-data-fifo", _shared, "views/new_run.py", "d.jsonl is a named pipe (FIFO), not a regular file",
            lambda e: {"nr_data_path": fifo(e.tmp / "d.jsonl")}, None, {"nr_source": "path"}),
    AppCase("app-new-run-config-data-name-300", _shared, "views/new_run.py", "data.path: the name",
            lambda e: {"config_path": e.cfg({"data": {"path": NAME_300}})}, "validate", {"nr_mode": "file"}),
    AppCase("app-train-config-fifo", _shared, "views/train.py", "c.yaml is a named pipe (FIFO)",
            lambda e: {"train_config": fifo(e.tmp / "c.yaml")}, "train_start"),
]


@pytest.mark.parametrize("case", APP_CASES, ids=lambda c: c.id)
def test_app_leftover(case: AppCase, env: Env):
    run_app_case(case, env)


def test_a_draft_that_is_a_fifo_or_a_linked_folder_never_hangs_or_leaks(env: Env):
    """The form's draft (runs/.drafts/ID.json) is read without blocking and never written through a link."""
    from streamlit.testing.v1 import AppTest

    for make in ("fifo", "link"):
        root = env.tmp / f"runs-{make}"
        root.mkdir()
        outside = env.tmp / f"outside-{make}"
        outside.mkdir()
        if make == "fifo":
            (root / ".drafts").mkdir()
            fifo(root / ".drafts" / "0123456789ab.json")
        else:
            (root / ".drafts").symlink_to(outside)
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.session_state["runs_root"] = str(root)
        at.query_params["draft"] = "0123456789ab"
        at.run()
        at.switch_page("views/new_run.py").run()
        at.text_input(key="nr_student").input("other/student").run()
        assert not at.exception, [e.value for e in at.exception]
        assert list(outside.iterdir()) == []
        if make == "fifo":
            assert not (root / ".drafts" / "0123456789ab.json").is_file()  # still the FIFO, never replaced
