"""The bad-input corpus, grown (issue 30): received and cross-tokenizer runs, a summary from another
diagnosis, wrong-typed manifests, unstamped tables, and damaged training runs on the scoreboard.

The rows reuse the machinery of ``tests/test_bad_inputs.py`` (its world, its finished run, ``Env``,
``corrupt_run``, ``set_manifest``, ``restamp``): every CLI row ends in exit status 2 with exactly one
``PROG: error: ...`` line containing its ``expect``, no traceback, and nothing changed under the test's
folder, the shared finished run or the shared cross-tokenizer run. What is rightly accepted (a damaged
training run is a row of the scoreboard with its reason, a manifest fact of the wrong type is shown as
missing) has its own tests below the rows.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
from fixtures_crosstok import build_model_dir, corpus, teacher_tokenizer
from test_bad_inputs import (  # noqa: F401 (world, finished and env are fixtures)
    MAIN, AppCase, Case, Env, _open_run, assert_one_error_line, base_config, corrupt_run, diag, env, fifo, finished, manifest_config,
    restamp, same_stamp, set_manifest, train, tree, world, write)
from test_bad_inputs import test_app_bad_input as check_app_case

from opsd_diag import cli as diag_cli
from opsd_diag import jobs, scoreboard
from trainer import cli as train_cli

FD = ["--config", "teacher", "--signal", "r_opd"]


# ------------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def family(world, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(teacher, base) of another family (tests/fixtures_crosstok.py) that use the student's chat template, so a
    diagnosis on them prints no template warning; and a teacher of that family with its own (Llama-like) one."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("family")
    tok = teacher_tokenizer(corpus())
    llama = build_model_dir(root / "llama_teacher", tok, 2)
    tok.chat_template = AutoTokenizer.from_pretrained(world / "student").chat_template
    return build_model_dir(root / "x_teacher", tok, 0), build_model_dir(root / "x_base", tok, 1), llama


@pytest.fixture(scope="module")
def cross_run(world, family, tmp_path_factory) -> Path:
    """A finished diagnosis whose config 'teacher' has another tokenizer (scored span by span)."""
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict

    out = tmp_path_factory.mktemp("cross") / "run"
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_diagnosis(from_dict(base_config(world, teachers=[{"name": "teacher", "model": str(family[0])},
                                                             {"name": "self_full", "context": "full_solution"}])),
                      out, show_progress=False)
    finally:
        torch.set_num_threads(old)
    return out


@dataclass
class XEnv(Env):
    """``Env`` plus the other family's models and the finished cross-tokenizer run."""
    family: tuple[Path, Path, Path] = ()
    cross: Path = Path()

    def cross_copy(self, change: Callable[[Path], None] | None = None) -> Path:
        dst = self.tmp / "xrun"
        shutil.copytree(self.cross, dst)
        if change is not None:
            change(dst)
        return dst


@pytest.fixture()
def xenv(env, family, cross_run) -> XEnv:
    return XEnv(env.tmp, env.world, env.run, family, cross_run)


# ----------------------------------------------------------------------------------- input makers

def teacher_model(model: str | Callable[[XEnv], str]) -> Callable[[XEnv, Path], None]:
    """The manifest's config 'teacher' made to name another model (a received, edited manifest)."""
    def change(e: XEnv, run: Path) -> None:
        m = json.loads((run / "manifest.json").read_text())
        for t in m["config"]["teachers"]:
            if t["name"] == "teacher":
                t["model"] = model(e) if callable(model) else model
        (run / "manifest.json").write_text(json.dumps(m))
    return change


def other_family(e: XEnv) -> str:
    return str(e.family[0])


def own_family(e: XEnv) -> str:
    return str(e.world / "teacher")


def received(change: Callable[[XEnv, Path], None], *tail: str, cmd: str = "predict", cross: bool = False):
    """``cmd`` on a copy of the finished run (or of the cross-tokenizer run) changed by ``change``."""
    def make(e: XEnv) -> list[str]:
        run = e.cross_copy() if cross else e.run_copy()
        change(e, run)
        return [cmd, str(run), *tail] if cmd != "--from-diagnosis" else [cmd, str(run), *tail, "--out", e.out]
    return make


def summary_of(source: str) -> Callable[[XEnv, Path], None]:
    """The run's summary.json replaced by another diagnosis' (``cross``) or by its own without the stamp."""
    def change(e: XEnv, run: Path) -> None:
        if source == "cross":
            shutil.copyfile(e.cross / "summary.json", run / "summary.json")
        else:
            s = json.loads((run / "summary.json").read_text())
            s.pop("run_id")
            (run / "summary.json").write_text(json.dumps(s))
    return change


def just(change: Callable[[Path], None]) -> Callable[[XEnv, Path], None]:
    return lambda e, run: change(run)


def prompts_beyond_vocabulary(frame):
    return frame.assign(**{"prompt_ids.teacher": frame["prompt_ids.teacher"].map(lambda ids: [int(i) + 10**6
                                                                                               for i in ids])})


def renamed_teacher(run: Path) -> None:
    m = json.loads((run / "manifest.json").read_text())
    m["config"]["teachers"][0]["name"] = "teacher2"
    (run / "manifest.json").write_text(json.dumps(m))


def extra_teacher(run: Path) -> None:
    m = json.loads((run / "manifest.json").read_text())
    m["config"]["teachers"].append({**m["config"]["teachers"][0], "name": "extra"})
    (run / "manifest.json").write_text(json.dumps(m))


OTHER = "was scored with a teacher of the student's tokenizer, but the model its manifest names has another"
OWN = "was scored with a teacher of another tokenizer, but the model its manifest names has the student's"

CASES: list[Case] = [
    # ------------------------------------------- 5. cross-tokenizer and received runs (predict, --from-diagnosis)
    diag("x-predict-teacher-swapped-to-another-family", received(teacher_model(other_family)), OTHER),
    diag("x-predict-teacher-swapped-to-a-family-with-its-own-template",  # refused before its template warns
         received(teacher_model(lambda e: str(e.family[2]))), OTHER),
    diag("x-predict-cross-teacher-swapped-to-the-students-family",
         received(teacher_model(own_family), cross=True), OWN),
    train("x-fd-teacher-swapped-to-another-family", received(teacher_model(other_family), *FD, cmd="--from-diagnosis"),
          OTHER),
    train("x-fd-cross-teacher-swapped-to-the-students-family",
          received(teacher_model(own_family), *FD, cmd="--from-diagnosis", cross=True), OWN),
    diag("x-predict-teacher-prompts-beyond-vocabulary",
         received(just(same_stamp("rollouts", prompts_beyond_vocabulary))),
         "column 'prompt_ids.teacher' holds ids outside the vocabulary"),
    diag("x-predict-teacher-renamed-in-manifest", received(just(renamed_teacher)),
         "tokens.parquet has no rows of config 'teacher2'"),
    train("x-fd-teacher-the-diagnosis-never-scored",
          received(just(extra_teacher), "--config", "extra", "--signal", "r_opd", cmd="--from-diagnosis"),
          "the diagnosis has no summary of config 'extra'"),
    diag("x-predict-summary-of-another-diagnosis", received(summary_of("cross")),
         "summary.json belongs to another run (run id "),
    diag("x-report-summary-of-another-diagnosis", received(summary_of("cross"), cmd="report"),
         "summary.json belongs to another run"),
    diag("x-export-summary-of-another-diagnosis", received(summary_of("cross"), cmd="export"),
         "summary.json belongs to another run"),
    train("x-fd-summary-of-another-diagnosis", received(summary_of("cross"), *FD, cmd="--from-diagnosis"),
          "summary.json belongs to another run"),
    diag("x-predict-summary-without-stamp", received(summary_of("unstamped")),
         "summary.json lacks the run-id stamp"),
    train("x-fd-summary-without-stamp", received(summary_of("unstamped"), *FD, cmd="--from-diagnosis"),
          "summary.json lacks the run-id stamp"),
    diag("x-predict-cross-run-summary-of-the-other", received(lambda e, run: shutil.copyfile(
        e.run / "summary.json", run / "summary.json"), cross=True), "summary.json belongs to another run"),
    # ------------------------------------------------------- 7. wrong-typed manifests, unstamped tables
    diag("x-predict-manifest-config-a-list", corrupt_run(set_manifest(config=[1, 2]), cmd="predict"),
         "manifest.json: its config is list, not an object"),
    diag("x-predict-manifest-config-null", corrupt_run(set_manifest(config=None), cmd="predict"),
         "manifest.json: its config is missing"),
    train("x-fd-manifest-config-text", lambda e: ["--from-diagnosis", str(e.run_copy(set_manifest(config="x"))), *FD,
                                                  "--out", e.out], "its config is str, not an object"),
    diag("x-predict-manifest-sampling-text", corrupt_run(manifest_config(sampling="fast"), cmd="predict"),
         "config: sampling: Input should be a valid dictionary"),
    diag("x-show-tokens-unstamped", corrupt_run(restamp("tokens", None), "--rollout", "0", cmd="show"),
         "tokens.parquet lacks the run-id stamp that every table of an OPSD-Diag run of this version carries"),
    diag("x-predict-rollouts-unstamped", corrupt_run(restamp("rollouts", None), cmd="predict"),
         "rollouts.parquet lacks the run-id stamp"),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_cli_bad_input(case: Case, xenv: XEnv, capsys):
    argv = case.make(xenv)
    before = tree(xenv.tmp), tree(xenv.run), tree(xenv.cross)
    main = diag_cli.main if case.prog == "opsd-diag" else train_cli.main
    code = main(argv)
    out, err = capsys.readouterr()
    assert_one_error_line(code, out, err, case.prog, case.expect)
    assert (tree(xenv.tmp), tree(xenv.run), tree(xenv.cross)) == before, "a user error left files or changed a run"


APP_CASES: list[AppCase] = [
    AppCase("x-app-summary-of-another-diagnosis", lambda e: {"run_dir": str(e.run_copy(write(
        "summary.json", json.dumps({**json.loads((e.run / "summary.json").read_text()), "run_id": "f" * 32}))))},
        "views/overview.py", "summary.json belongs to another run"),
    AppCase("x-app-tokens-unstamped", _open_run(restamp("tokens", None)), "views/tokens.py",
            "tokens.parquet lacks the run-id stamp"),
    AppCase("x-app-summary-unstamped", _open_run(lambda run: (run / "summary.json").write_text(json.dumps(
        {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k != "run_id"}))),
        "views/overview.py", "summary.json lacks the run-id stamp"),
]


@pytest.mark.parametrize("case", APP_CASES, ids=lambda c: c.id)
def test_app_bad_input(case: AppCase, env: Env):
    check_app_case(case, env)


def test_the_grown_corpus_has_unique_ids():
    import test_bad_inputs

    ids = [c.id for c in (*test_bad_inputs.CASES, *test_bad_inputs.APP_CASES, *CASES, *APP_CASES)]
    assert len(ids) == len(set(ids))
    assert len(CASES) + len(APP_CASES) >= 20


# ----------------------------------------------------------------- rightly accepted: the run opens

def test_a_run_of_the_version_before_summary_stamps_still_opens(env: Env, capsys):
    """A manifest that does not list summary.json among its stamps (made before them): its summary opens."""
    def older(run: Path) -> None:
        m = json.loads((run / "manifest.json").read_text())
        m.pop("stamps")
        (run / "manifest.json").write_text(json.dumps(m))
        summary_of("unstamped")(None, run)

    run = env.run_copy(older)
    assert diag_cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    assert "student accuracy" in capsys.readouterr().out


def test_a_fresh_run_stamps_its_summary_and_lists_it(env: Env):
    m = json.loads((env.run / "manifest.json").read_text())
    assert json.loads((env.run / "summary.json").read_text())["run_id"] == m["run_id"]
    assert m["stamps"] == ["tables", "summary.json"]


WRONG_FACTS = {"n_problems": {"a": 1}, "seconds": [1, 2], "seed": "0; rm", "sampling_temperature": None,
               "centering": "![pixel](http://127.0.0.1:9/p.png)", "status": "finished"}


@pytest.mark.parametrize("change", [
    set_manifest(config=[1, 2]), set_manifest(config="x"), set_manifest(config=None), manifest_config(sampling="x"),
    manifest_config(sampling=[2]), manifest_config(student=3), set_manifest(**WRONG_FACTS)],
    ids=["config-list", "config-text", "config-null", "sampling-text", "sampling-list", "student-number", "facts"])
def test_report_shows_a_manifest_of_the_wrong_types_with_its_facts_missing(env: Env, capsys, change):
    """Report reads only the manifest's facts: a value of the wrong type is shown as None, never a crash."""
    from opsd_diag.run import Run

    run = env.run_copy(change)
    facts = Run.load(run).facts()
    assert all(v is None or isinstance(v, (int, float, str)) for v in facts.values()), facts
    assert diag_cli.main(["report", str(run)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(f"run {run}: ") and "Traceback" not in out


@pytest.mark.parametrize("change", [set_manifest(config=[1, 2]), manifest_config(sampling="x"),
                                    set_manifest(**WRONG_FACTS)], ids=["config-list", "sampling-text", "facts"])
def test_app_overview_of_a_manifest_of_the_wrong_types(env: Env, change):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = str(env.tmp / "runs")
    at.session_state["run_dir"] = str(env.run_copy(change))
    at.run()
    at.switch_page("views/overview.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("Traceback" in e.value for e in at.error)
    shown = " ".join(c.value for c in at.caption)
    assert "](http" not in shown  # the manifest's text is escaped, never a markdown image


# ------------------------------------------------------------------- 6. the scoreboard's inputs

def _training_run(root: Path, name: str, metrics: str | bytes | None, prediction: str | None = None,
                  status: str = "finished") -> Path:
    d = root / name
    d.mkdir(parents=True)
    if metrics is not None:
        (d / "metrics.jsonl").write_bytes(metrics if isinstance(metrics, bytes) else metrics.encode())
    (d / "prediction.json").write_text(prediction if prediction is not None else json.dumps(
        {"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.25}))
    jobs.write_status(d, status, owner=False, kind="training", step=2, max_steps=2)
    return d


def _evals(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


START = {"kind": "eval", "step": 0, "pass@1": 0.25, "per_problem": [[0, 4, 1], [1, 4, 1]]}
END = {"kind": "eval", "step": 2, "pass@1": 0.5, "per_problem": [[0, 4, 2], [1, 4, 2]]}
GOOD = _evals(START, {"kind": "train", "step": 1, "loss": 1.0}, END)


def end(**fields) -> str:
    return _evals(START, {**END, **fields})


# (id, metrics.jsonl, prediction.json or None for a good one, a substring of the run's one-line reason)
BOARD_CASES = [
    ("prediction-torn", GOOD, "{", "prediction.json is unreadable or corrupt (JSONDecodeError)"),
    ("prediction-a-list", GOOD, "[1, 2]", "prediction.json is not a JSON object"),
    ("prediction-deep", GOOD, "[" * 100_000 + "]" * 100_000, "nests deeper than 64 levels"),
    ("prediction-without-config", GOOD, json.dumps({"signal": "r_opd", "verdict": "helps", "score": 0.1}),
     "prediction.json lacks its 'config'"),
    ("prediction-config-a-number", GOOD, json.dumps({"config": 3, "signal": "r_opd", "score": 0.1}),
     "prediction.json: 'config' is 3, not a name"),
    ("prediction-verdict-unknown", GOOD, json.dumps({"config": "t", "signal": "r_opd", "verdict": "great",
                                                     "score": 0.1}), "verdict 'great' is not one of"),
    ("prediction-score-nan", GOOD, '{"config": "t", "signal": "r_opd", "verdict": "helps", "score": NaN}',
     "score nan is not a finite number"),
    ("prediction-score-infinite", GOOD, '{"config": "t", "signal": "r_opd", "verdict": "helps", "score": 1e999}',
     "score inf is not a finite number"),
    ("prediction-score-text", GOOD, json.dumps({"config": "t", "signal": "r_opd", "verdict": "helps",
                                                "score": "big"}), "score 'big' is not a finite number"),
    ("pass-nan", end(**{"pass@1": float("nan")}), None, "pass@1 nan is not a number in [0, 1]"),
    ("pass-infinite", _evals(START) + '{"kind": "eval", "step": 2, "pass@1": 1e999}\n', None,
     "pass@1 inf is not a number in [0, 1]"),
    ("pass-above-one", end(**{"pass@1": 1.5}), None, "pass@1 1.5 is not a number in [0, 1]"),
    ("pass-negative", end(**{"pass@1": -0.1}), None, "pass@1 -0.1 is not a number in [0, 1]"),
    ("pass-text", end(**{"pass@1": "high"}), None, "pass@1 'high' is not a number in [0, 1]"),
    ("pass-a-400-digit-integer", _evals(START) + '{"kind": "eval", "step": 2, "pass@1": ' + "9" * 400 + "}\n",
     None, "is not a number in [0, 1]"),
    ("pass-missing", _evals(START, {"kind": "eval", "step": 2}), None, "on line 2: it lacks pass@1"),
    ("step-negative", end(step=-2), None, "step -2 is not a whole number >= 0"),
    ("step-fraction", end(step=1.5), None, "step 1.5 is not a whole number >= 0"),
    ("step-text", end(step="end"), None, "step 'end' is not a whole number >= 0"),
    ("step-huge", end(step=10**30), None, "is not a whole number >= 0"),
    ("kl-infinite", _evals(START) + '{"kind": "eval", "step": 2, "pass@1": 0.5, "kl_to_initial": -1e999}\n', None,
     "kl_to_initial -inf is not a finite number"),
    ("per-problem-more-correct-than-samples", end(per_problem=[[0, 4, 5], [1, 4, 2]]), None,
     "per_problem holds [0, 4, 5]"),
    ("per-problem-negative", end(per_problem=[[0, -4, -1]]), None, "per_problem holds [0, -4, -1]"),
    ("per-problem-duplicate-problem", end(per_problem=[[0, 4, 1], [0, 4, 2]]), None, "per_problem holds [0, 4, 2]"),
    ("per-problem-text", end(per_problem="torn"), None, "per_problem is not a list"),
    ("torn-eval-line", _evals(START) + '{"kind": "eval", "step": 2, "pass@1"\n' + _evals(END), None,
     "metrics.jsonl: line 2 is not a JSON record (damaged)"),
    ("deep-eval-line", _evals(START) + '{"kind": "eval", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n", None,
     "metrics.jsonl: line 2 nests too deep (damaged)"),
    ("no-evaluations", _evals({"kind": "train", "step": 1, "loss": 1.0}), None,
     "metrics.jsonl has no held-out evaluation at step 0"),
    ("no-final-evaluation", _evals(START, {"kind": "train", "step": 1, "loss": 1.0}), None,
     "metrics.jsonl has no held-out evaluation after step 0"),
    ("metrics-not-utf8", _evals(START).encode() + b'{"kind": "eval", "step": 2, "pass@1": "\xff"}\n', None,
     "line 2 is not a JSON record"),
]


def _board_root(tmp_path: Path, metrics, prediction) -> tuple[Path, Path]:
    root = tmp_path / "runs"
    _training_run(root, "good", GOOD)
    return root, _training_run(root, "bad", metrics, prediction)


def _listing(root: Path) -> dict:
    """Every path under ``root`` with its kind, size and time: a tree too large to hash (a sparse file)."""
    return {str(p): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _check_board(root: Path, bad: Path, reason: str, capsys, fingerprint=tree) -> None:
    """The CLI prints the board and one 'not scored' line for the bad run (exit 0); the good run is scored,
    and nothing under the runs folder changes."""
    before = fingerprint(root)
    assert diag_cli.main(["scoreboard", str(root)]) == 0
    out, err = capsys.readouterr()
    assert not err and "Traceback" not in out
    lines = [x for x in out.splitlines() if x.startswith("not scored: ")]
    assert len(lines) == 1 and lines[0].startswith(f"not scored: {bad}: ") and reason in lines[0], lines
    board = scoreboard.scoreboard(root)
    f = board.frame.set_index(board.frame["run"].map(lambda p: Path(p).name))
    assert set(f.index) == {"good", "bad"} and f.loc["bad", "outcome"] == "not scored"
    assert board.n_scored == 1 and f.loc["good", "gain"] == pytest.approx(0.25) and pd.isna(f.loc["good", "problem"])
    assert fingerprint(root) == before


@pytest.mark.parametrize("name,metrics,prediction,reason", BOARD_CASES, ids=[c[0] for c in BOARD_CASES])
def test_scoreboard_shows_a_damaged_training_run_with_its_reason(tmp_path, capsys, name, metrics, prediction, reason):
    root, bad = _board_root(tmp_path, metrics, prediction)
    _check_board(root, bad, reason, capsys)


def _special(kind: str) -> Callable[[Path], None]:
    def make(run: Path) -> None:
        target = run / ("prediction.json" if kind.startswith("prediction") else "metrics.jsonl")
        target.unlink(missing_ok=True)
        if kind.endswith("fifo"):
            fifo(target)
        elif kind.endswith("link"):
            (run.parent / "elsewhere.jsonl").write_text(GOOD)
            target.symlink_to(run.parent / "elsewhere.jsonl")
        else:
            target.mkdir()
    return make


@pytest.mark.parametrize("kind,reason", [
    ("prediction-fifo", "prediction.json is a named pipe (FIFO)"), ("metrics-fifo", "metrics.jsonl is a named pipe"),
    ("metrics-link", "metrics.jsonl is a symbolic link"), ("metrics-folder", "metrics.jsonl is a folder"),
    ("prediction-folder", "prediction.json is a folder")])
def test_scoreboard_never_reads_through_a_link_fifo_or_folder(tmp_path, capsys, kind, reason):
    root, bad = _board_root(tmp_path, GOOD, None)
    _special(kind)(bad)
    _check_board(root, bad, reason, capsys)


def test_scoreboard_refuses_an_oversized_metrics_file_without_reading_it(tmp_path, capsys):
    root, bad = _board_root(tmp_path, GOOD, None)
    with open(bad / "metrics.jsonl", "r+b") as f:  # sparse: 4 GiB on paper, nothing on disk
        f.truncate(4 << 30)
    started = time.perf_counter()
    _check_board(root, bad, "metrics.jsonl is 4096 MiB, more than the 256 MiB a training run writes", capsys,
                 fingerprint=_listing)
    assert time.perf_counter() - started < 10


def test_scoreboard_refuses_a_record_longer_than_its_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(scoreboard, "MAX_RECORD_BYTES", 4096)
    root, bad = _board_root(tmp_path, _evals(START, {**END, "pad": "x" * 10_000}), None)
    _check_board(root, bad, "metrics.jsonl: line 2 is longer than", capsys)


def test_scoreboard_streams_metrics_in_bounded_memory(tmp_path, monkeypatch):
    """300 evaluations of 1,500 problems (~6 MB of JSON, ~70 MB as Python lists): the scoreboard keeps two
    records, never all, and its bootstrap holds BOOT_CELLS draws at a time whatever replicates x problems is."""
    monkeypatch.setattr(scoreboard, "BOOT_CELLS", 1 << 16)
    lines = [json.dumps({"kind": "eval", "step": s, "pass@1": 0.5,
                         "per_problem": [[i, 4, (i + s) % 5] for i in range(1500)]}) for s in range(300)]
    root = tmp_path / "runs"
    _training_run(root, "long", "\n".join(lines) + "\n")
    tracemalloc.start()
    try:
        board = scoreboard.scoreboard(root)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    row = board.frame.iloc[0]
    assert pd.isna(row["problem"]) and row["steps"] == 299 and row["n_problems"] == 1500 and board.n_scored == 1
    assert peak < 10 << 20, peak


def test_scoreboard_streamed_interval_equals_the_library_bootstrap():
    """The blocked bootstrap draws the same prompts as core.stats (one block, or many)."""
    from opsd_diag.core.stats import bootstrap_mean_over_prompts

    start = {"per_problem": [[i, 4, i % 5] for i in range(300)]}
    stop = {"per_problem": [[i, 4, (3 * i) % 5] for i in range(300)]}
    d = [((3 * i) % 5) / 4 - (i % 5) / 4 for i in range(300)]
    ref = bootstrap_mean_over_prompts(d, list(range(300)), n_boot=500, seed=0)
    assert scoreboard.gain_interval(start, stop, n_boot=500)[:3] == pytest.approx(ref, abs=1e-12)
    old = scoreboard.BOOT_CELLS
    try:
        scoreboard.BOOT_CELLS = 7 * 300 + 1  # blocks of 7 replicates
        assert scoreboard.gain_interval(start, stop, n_boot=500)[:3] == pytest.approx(ref, abs=1e-12)
    finally:
        scoreboard.BOOT_CELLS = old


def test_app_track_record_shows_damaged_runs_with_their_reasons(env: Env):
    from streamlit.testing.v1 import AppTest

    root = env.tmp / "runs"
    _training_run(root, "good", GOOD)
    for name, metrics, prediction, _ in BOARD_CASES[:12:3]:
        _training_run(root, name, metrics, prediction)
    _special("metrics-fifo")(_training_run(root, "fifo", GOOD))
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = str(root)
    at.run()
    at.switch_page("views/track_record.py").run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    board = at.dataframe[0].value.set_index("run")
    assert board["problem"].notna().sum() == 5 and board.loc["good", "gain"] == pytest.approx(0.25)
    assert "named pipe" in board.loc["fifo", "problem"]


def test_a_running_run_without_evaluations_yet_is_no_problem(tmp_path):
    root = tmp_path / "runs"
    _training_run(root, "young", _evals({"kind": "train", "step": 1, "loss": 1.0}), status="running")
    (root / "young" / "status.json").write_text(json.dumps({"status": "running", "pid": os.getpid()}))
    row = scoreboard.scoreboard(root).frame.iloc[0]
    assert pd.isna(row["problem"]) and row["outcome"] == "no interval"
