"""The bad-input corpus: mistaken and hostile inputs to `opsd-diag`, `opsd-train` and the app.

Every CLI row must end in exit status 2 with exactly one `PROG: error: ...` line on stderr that
contains the row's `expect`, no traceback, and the file tree under the test's folder (and the shared
finished run) unchanged: a user error never leaves a file behind. Every app row must show its error
in place (an `st.error` containing `expect`), raise nothing, and leave nothing behind either.

The CLIs run in-process through their `main(argv)`; most rows fail in validation, before any model
loads; the rows that need a model load the tiny random world built once per module (a fraction of a
second each).

To add a case, add one row to CASES (or APP_CASES): `make(env)` writes the row's inputs under
`env.tmp` (helpers below: `env.cfg`, `env.file`, `env.model_copy`, ...) and returns the argv.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from fixtures_trainer import build_world

from opsd_diag import cli as diag_cli
from opsd_diag import jobs
from trainer import cli as train_cli

REPO = Path(__file__).resolve().parents[1]
DROP = object()  # a key to remove from the base config


# ------------------------------------------------------------------------------------------ fixtures

def base_config(world: Path, **over) -> dict:
    """A valid, small diagnosis config over the world (tests change one thing in it)."""
    cfg = {"student": {"model": str(world / "student")}, "base": {"model": str(world / "base")},
           "teachers": [{"name": "teacher", "model": str(world / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": str(world / "dev.jsonl")},
           "sampling": {"num_samples": 2, "max_completion_length": 4, "teacher_samples": 0},
           "analysis": {"bootstrap": 10, "checker": "toy"}, "shard_size": 4}
    return merge(cfg, over)


TRAINING = {"method": "opd", "max_steps": 1, "per_device_train_batch_size": 2, "eval": {"data": None},
            "report_to": "none"}


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if v is DROP:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def finished(world, tmp_path_factory) -> Path:
    """A finished diagnosis of the world, shared by every row (read-only: the rows check it is unchanged)."""
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict

    out = tmp_path_factory.mktemp("finished") / "run"
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_diagnosis(from_dict(base_config(world)), out, show_progress=False)
    finally:
        torch.set_num_threads(old)
    return out


@dataclass
class Env:
    """What a row's ``make`` works with: its own folder, the world and the finished run."""
    tmp: Path
    world: Path
    run: Path

    @property
    def out(self) -> str:
        return str(self.tmp / "out")

    def file(self, name: str, content: str | bytes) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)

    def cfg(self, over: dict | None = None, *, training: dict | None = None, name: str = "c.yaml") -> str:
        cfg = base_config(self.world, **(over or {}))
        if training is not None:
            cfg["training"] = merge(TRAINING, training)
        return self.file(name, yaml.safe_dump(cfg, sort_keys=False))

    def train_cfg(self, training: dict | None = None, over: dict | None = None) -> str:
        return self.cfg(over, training=training or {})

    def model_copy(self, role: str = "student", name: str = "m") -> Path:
        dst = self.tmp / name
        shutil.copytree(self.world / role, dst)
        return dst

    def run_copy(self, change: Callable[[Path], None] | None = None) -> Path:
        """A copy of the finished run, changed by ``change`` (a corruption) when given."""
        dst = self.tmp / "run"
        shutil.copytree(self.run, dst)
        if change is not None:
            change(dst)
        return dst

    def held(self, path: Path) -> str:
        """A live lock on ``path`` (this test process holds it, as a running diagnosis would)."""
        _HELD.append(jobs.acquire_lock(path, "opsd-diag run"))
        return str(path)


_HELD: list = []


@pytest.fixture()
def env(world, finished, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default run directory (runs/...) would be a leftover here
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield Env(tmp_path, world, finished)
    for s, h in handlers.items():
        signal.signal(s, h)
    while _HELD:
        _HELD.pop().close()


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its kind and content hash: equal trees mean nothing was written."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link"
        elif p.is_dir():
            out[rel] = "dir"
        elif not p.is_file():  # a FIFO or a device: never read (it would block or never end)
            out[rel] = "special"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ----------------------------------------------------------------------------------- input makers

def alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 9)]
    return "\n".join(lines) + "\nstudent: {model: x}\n"


def jsonl(*rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def damaged(kind: str) -> Callable[[Env], list[str]]:
    """A run over a copy of the student model damaged one way."""
    def make(e: Env) -> list[str]:
        m = e.model_copy()
        if kind == "corrupt_weights":
            (m / "model.safetensors").write_bytes(b"\x00garbage" * 64)
        elif kind == "truncated_weights":
            data = (m / "model.safetensors").read_bytes()
            (m / "model.safetensors").write_bytes(data[:len(data) // 2])
        elif kind == "vocab_mismatch":
            c = json.loads((m / "config.json").read_text())
            (m / "config.json").write_text(json.dumps({**c, "vocab_size": c["vocab_size"] + 200}))
        elif kind == "no_config":
            (m / "config.json").unlink()
        elif kind == "no_chat_template":
            (m / "chat_template.jinja").unlink()
        elif kind == "tokenizer_garbage":
            (m / "tokenizer.json").write_text("{not json")
        elif kind == "small_embedding":  # weights with fewer rows than the tokenizer has tokens
            from transformers import AutoModelForCausalLM
            model = AutoModelForCausalLM.from_pretrained(m)
            model.resize_token_embeddings(100)
            model.save_pretrained(m)
        return ["run", e.cfg({"student": {"model": str(m)}}), "--out", e.out]
    return make


def nan_teacher(e: Env, prog: str = "run") -> list[str]:
    from transformers import AutoModelForCausalLM
    m = e.model_copy("teacher", "nan_teacher")
    model = AutoModelForCausalLM.from_pretrained(m)
    with torch.no_grad():
        model.get_output_embeddings().weight[7] = float("nan")
    model.save_pretrained(m)
    over = {"teachers": [{"name": "teacher", "model": str(m)}, {"name": "self_full", "context": "full_solution"}]}
    if prog == "run":
        return ["run", e.cfg(over), "--out", e.out]
    return [e.cfg(over, training={}), "--out", e.out]


def other_vocabulary(e: Env) -> list[str]:
    from opsd_diag.zoo.build import SIZES, new_model
    from opsd_diag.zoo.tokenizer import train_tokenizer
    tok = train_tokenizer(["completely different text 123"] * 50, vocab_size=280)
    other = e.tmp / "other"
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # the save's progress bar would land in the captured stderr
    try:
        new_model(tok, SIZES["ci"].small, 0).save_pretrained(other)
    finally:
        hf_logging.enable_progress_bar()
    tok.save_pretrained(other)
    # another vocabulary is scored span by span and predicted (tests/test_cross_*.py); a base of that family
    # beside a teacher of the student's has no single side to sit on
    return ["run", e.cfg({"teachers": [{"name": "t", "model": str(other)}, {"name": "self_full", "context": "full_solution"}],
                          "base": {"model": str(other)}}), "--out", e.out]


def corrupt_run(change: Callable[[Path], None], *tail: str, cmd: str = "report") -> Callable[[Env], list[str]]:
    def make(e: Env) -> list[str]:
        run = e.run_copy()
        change(run)
        return [cmd, str(run), *tail]
    return make


def set_manifest(**fields) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        m = json.loads((run / "manifest.json").read_text())
        m.update(fields)
        (run / "manifest.json").write_text(json.dumps(m))
    return change


def manifest_config(**over) -> Callable[[Path], None]:
    def change(run: Path) -> None:
        m = json.loads((run / "manifest.json").read_text())
        m["config"] = merge(m["config"], over)
        (run / "manifest.json").write_text(json.dumps(m))
    return change


def write(name: str, content: str | bytes) -> Callable[[Path], None]:
    return lambda run: (run / name).write_bytes(content if isinstance(content, bytes) else content.encode())


def remove(name: str) -> Callable[[Path], None]:
    return lambda run: (run / name).unlink()


def unwritable_dir(e: Env) -> str:
    """An existing, empty folder this process cannot write (root ignores permissions: a sysfs folder)."""
    d = e.tmp / "locked"
    d.mkdir()
    os.chmod(d, 0o500)
    if not os.access(d, os.W_OK):
        return str(d)
    os.chmod(d, 0o700)
    for candidate in ("/sys/kernel/iommu_groups", "/sys/fs/pstore", "/sys/kernel/software_nodes"):
        p = Path(candidate)
        if p.is_dir() and not any(p.iterdir()):
            try:
                (p / ".w").touch()
            except OSError:
                return candidate
    pytest.skip("no unwritable empty folder on this machine")


def training_run_dir(e: Env) -> Path:
    d = e.tmp / "trained"
    d.mkdir()
    (d / "config.yaml").write_text("student: {model: other}\n")
    return d


def resumable_run(e: Env, state: bytes | None = None, config: bytes | None = None) -> list[str]:
    """A training run directory of this very config with a checkpoint whose state file is ``state``."""
    from opsd_diag.config import training as train_config

    cfg = e.train_cfg()
    d = e.tmp / "trained"
    (d / "checkpoints" / "step-000001").mkdir(parents=True)
    (d / "config.yaml").write_bytes(config if config is not None else train_config.load(cfg).to_yaml().encode())
    (d / "checkpoints" / "step-000001" / "trainer_state.pt").write_bytes(state or b"not a torch file")
    return [cfg, "--out", str(d), "--resume"]


def no_package(name: str) -> tuple[str, ...]:
    """The packages a row hides (as if not installed), so the row runs whether or not they are here."""
    return (name,)


# --- issue 19: run directories, writes, locks, limits (helpers) ---

def fifo(path: Path) -> str:
    """A named pipe at ``path`` (in place of a file, if one is there): opening it to read would block."""
    Path(path).unlink(missing_ok=True)
    os.mkfifo(path)
    return str(path)


def replace_with_fifo(name: str) -> Callable[[Path], None]:
    return lambda run: fifo(run / name)


def device_node(e: Env) -> str:
    """A character device like /dev/null, made in the test folder (root only): never overwritten."""
    path = e.tmp / "null.html"
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return str(path)


def not_root() -> str | None:
    return None if os.geteuid() == 0 else "making a device node needs root (CI runs as root)"


def link_loop(e: Env) -> Path:
    a, b = e.tmp / "loop_a", e.tmp / "loop_b"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def deep(n: int, obj: bool = False) -> str:
    return ('{"a": ' * n + "1" + "}" * n) if obj else "[" * n + "]" * n


def restamp(name: str, run_id: str | None, change: Callable[[pd.DataFrame], pd.DataFrame] = lambda f: f):
    """Rewrite a run's table (changed by ``change``) stamped with ``run_id``: a table from another run."""
    def apply(run: Path) -> None:
        from opsd_diag.io import store
        frame = change(pd.read_parquet(run / f"{name}.parquet"))
        with open(run / f"{name}.parquet", "wb") as f:
            store._write_parquet(f, frame, run_id)
    return apply


def same_stamp(name: str, change: Callable[[pd.DataFrame], pd.DataFrame]):
    """Change a run's table keeping its own run id (only the content is wrong)."""
    def apply(run: Path) -> None:
        restamp(name, json.loads((run / "manifest.json").read_text())["run_id"], change)(run)
    return apply


def resumable_with(e: Env, change: Callable[[Path], None]) -> list[str]:
    """``resumable_run`` whose run directory is then changed by ``change`` (a link or a FIFO put in)."""
    argv = resumable_run(e)
    change(Path(argv[2]))
    return argv


def link_to_victim(name: str) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        victim = run.parent / "victim.txt"
        victim.write_text("keep me")
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(victim)
    return apply


def outside_checkpoint(root: bool) -> Callable[[Path], None]:
    """The run's checkpoint (or its whole checkpoints folder) moved out of the run and linked back in."""
    def apply(run: Path) -> None:
        elsewhere = run.parent / "elsewhere"
        if root:
            shutil.move(run / "checkpoints", elsewhere)
            (run / "checkpoints").symlink_to(elsewhere)
        else:
            shutil.move(run / "checkpoints" / "step-000001", elsewhere)
            (run / "checkpoints" / "step-000001").symlink_to(elsewhere)
    return apply


def resuming_run(change: Callable[[Path], None]) -> Callable[[Env], list[str]]:
    """``opsd-diag run`` resuming a copy of the finished run (made unfinished), changed by ``change``."""
    def make(e: Env) -> list[str]:
        run = e.run_copy(set_manifest(status="running"))
        change(run)
        return ["run", e.cfg(), "--out", str(run)]
    return make


LONG = "n" * 256  # one byte over a file name's limit
# --- end of issue 19 (helpers) ---

# ------------------------------------------------------------------------------------------ the rows

@dataclass(frozen=True)
class Case:
    id: str
    prog: str  # opsd-diag | opsd-train
    make: Callable[[Env], list[str]]
    expect: str  # a substring of the one error line
    skip: Callable[[], str | None] | None = None
    slow: bool = False
    hide: tuple[str, ...] = ()  # packages that look uninstalled while the row runs


def diag(id, make, expect, **kw) -> Case:
    return Case(id, "opsd-diag", make, expect, **kw)


def train(id, make, expect, **kw) -> Case:
    return Case(id, "opsd-train", make, expect, **kw)


def run_over(id, over, expect, **kw) -> Case:
    return diag(id, lambda e: ["run", e.cfg(over), "--out", e.out], expect, **kw)


def run_text(id, text, expect) -> Case:
    return diag(id, lambda e: ["run", e.file("c.yaml", text), "--out", e.out], expect)


def run_data(id, content, expect, name="d.jsonl", fields=None, teachers=None, **data) -> Case:
    def make(e: Env) -> list[str]:
        over = {"data": {"path": e.file(name, content), **({"fields": fields} if fields else {}), **data}}
        if teachers is not None:
            over["teachers"] = teachers
        return ["run", e.cfg(over), "--out", e.out]
    return diag(id, make, expect)


def train_over(id, training, expect, over=None, **kw) -> Case:
    return train(id, lambda e: [e.train_cfg(training, over), "--out", e.out], expect, **kw)


def from_diag(id, tail, expect, change=None) -> Case:
    def make(e: Env) -> list[str]:
        run = e.run
        if change is not None:
            run = e.run_copy()
            change(run)
        return ["--from-diagnosis", str(run), *tail, "--out", e.out]
    return train(id, make, expect)


GOOD = {"prompt": "Start at 1. Apply in order, mod 10: a)+2. What is the result?", "solution": "a) 1+2=3",
        "answer": "3"}
SELF_ONLY = [{"name": "self_full", "context": "full_solution"}]

CASES: list[Case] = [
    # -------------------------------------------------------------- opsd-diag: the command line
    diag("argv-empty", lambda e: [], "the following arguments are required: command"),
    diag("argv-unknown-command", lambda e: ["frobnicate"], "invalid choice: 'frobnicate'"),
    diag("argv-run-without-config", lambda e: ["run"], "the following arguments are required: config"),
    diag("argv-run-unknown-option", lambda e: ["run", "c.yaml", "--outt", "x"], "unrecognized arguments: --outt"),
    diag("argv-show-rollout-not-int", lambda e: ["show", str(e.run), "--rollout", "abc"], "invalid int value: 'abc'"),
    diag("argv-report-extra", lambda e: ["report", str(e.run), "more"], "unrecognized arguments: more"),
    diag("argv-zoo-without-subcommand", lambda e: ["zoo"], "required: zoo_command"),
    diag("argv-zoo-seed-not-int", lambda e: ["zoo", "build", "--seed", "x"], "invalid int value: 'x'"),
    diag("argv-predict-budget-not-int", lambda e: ["predict", str(e.run), "--budget", "1e3"], "invalid int value"),
    # ------------------------------------------------------------ opsd-diag run: the config file
    diag("cfg-missing", lambda e: ["run", "nope.yaml"], "config file nope.yaml not found"),
    diag("cfg-directory", lambda e: ["run", str(e.tmp)], "is a directory, not a file"),
    run_text("cfg-latin1", "student: {model: caf\xe9}\n".encode("latin-1"), "is not UTF-8 text"),
    run_text("cfg-utf16", "student: {model: x}\n".encode("utf-16"), "is not UTF-8 text"),
    run_text("cfg-binary", bytes(range(256)), "is not UTF-8 text"),
    run_text("cfg-invalid-yaml", "student: [unclosed", "is not valid YAML"),
    run_text("cfg-tab-indent", "student:\n\tmodel: x\n", "is not valid YAML"),
    run_text("cfg-empty", "", "must contain a YAML mapping"),
    run_text("cfg-list", "- a\n- b\n", "must contain a YAML mapping"),
    run_text("cfg-scalar", "42\n", "must contain a YAML mapping"),
    run_text("cfg-duplicate-key", "student: {model: a}\nstudent: {model: b}\n", "duplicate key 'student'"),
    run_text("cfg-duplicate-nested-key", "sampling:\n  seed: 1\n  seed: 2\n", "duplicate key 'seed'"),
    run_text("cfg-alias-bomb", alias_bomb(), "expands to more than"),
    run_text("cfg-python-tag", "student: !!python/object/apply:os.system ['touch pwned']\n", "is not valid YAML"),
    diag("cfg-bom-then-unknown-key",
         lambda e: ["run", e.file("c.yaml", "\ufeff" + yaml.safe_dump({**base_config(e.world), "bogus": 1})),
                    "--out", e.out], "bogus: unknown key"),
    # ----------------------------------------------------------- opsd-diag run: config values
    run_over("key-unknown-top", {"bogus": 1}, "bogus: unknown key"),
    run_over("key-unknown-nested", {"sampling": {"num_sampels": 3}}, "sampling.num_sampels: unknown key"),
    run_over("key-missing-student", {"student": DROP}, "student: Field required"),
    run_over("key-missing-teachers", {"teachers": DROP}, "teachers: Field required"),
    run_over("key-missing-data", {"data": DROP}, "data: Field required"),
    run_over("key-student-is-string", {"student": "some/model"}, "student: Input should be a valid dictionary"),
    run_over("teachers-empty", {"teachers": []}, "teachers: List should have at least 1 item"),
    run_over("num-samples-string", {"sampling": {"num_samples": "four"}}, "sampling.num_samples"),
    run_over("num-samples-zero", {"sampling": {"num_samples": 0}}, "sampling.num_samples"),
    run_over("num-samples-huge", {"sampling": {"num_samples": 10 ** 9}}, "sampling.num_samples"),
    run_over("max-completion-zero", {"sampling": {"max_completion_length": 0}}, "sampling.max_completion_length"),
    run_over("temperature-zero", {"sampling": {"temperature": 0}}, "sampling.temperature"),
    run_over("temperature-nan", {"sampling": {"temperature": float("nan")}}, "sampling.temperature"),
    run_over("temperature-inf", {"sampling": {"temperature": float("inf")}}, "sampling.temperature"),
    run_over("top-p-above-one", {"sampling": {"top_p": 1.5}}, "sampling.top_p"),
    run_over("top-p-nan", {"sampling": {"top_p": float("nan")}}, "sampling.top_p"),
    run_over("sampling-backend-unknown", {"sampling": {"backend": "tgi"}}, "sampling.backend"),
    run_over("sampling-engine-unknown", {"sampling": {"engine": "warp"}}, "sampling.engine"),
    run_over("scoring-temperature-inf", {"scoring": {"temperature": float("inf")}}, "scoring.temperature"),
    run_over("exopd-lambda-nan", {"scoring": {"exopd_lambda": float("nan")}}, "scoring.exopd_lambda"),
    run_over("exopd-lambda-negative", {"scoring": {"exopd_lambda": -1}}, "scoring.exopd_lambda"),
    run_over("jsd-beta-above-one", {"scoring": {"jsd_beta": 2}}, "scoring.jsd_beta"),
    run_over("jsd-beta-nan", {"scoring": {"jsd_beta": float("nan")}}, "scoring.jsd_beta"),
    run_over("centering-bad", {"scoring": {"centering": "top5"}}, "use 'full' or 'topk=N'"),
    run_over("centering-topk-zero", {"scoring": {"centering": "topk=0"}}, "use 'full' or 'topk=N'"),
    run_over("scoring-top-k-negative", {"scoring": {"top_k": -1}}, "scoring.top_k"),
    run_over("scoring-chunk-zero", {"scoring": {"chunk_size": 0}}, "scoring.chunk_size"),
    run_over("scoring-engine-unknown", {"scoring": {"engine": "turbo"}}, "scoring.engine"),
    # removed after the H100 run (benchmarks/RESULTS.md): refused in one line that names the values left
    run_over("scoring-engine-fused-removed", {"scoring": {"engine": "fused"}}, "'reference' or 'compiled'"),
    run_over("max-prompt-length-tiny", {"scoring": {"max_prompt_length": 1}}, "scoring.max_prompt_length"),
    run_over("allow-nonfinite-not-bool", {"scoring": {"allow_nonfinite": "sometimes"}}, "scoring.allow_nonfinite"),
    run_over("exopd-reference-base-without-base", {"base": DROP, "scoring": {"exopd_reference": "base"}},
             "no base model"),
    run_over("checker-unknown", {"analysis": {"checker": "regex"}}, "analysis.checker"),
    run_over("pass-k-zero", {"analysis": {"pass_k": [0]}}, "analysis.pass_k"),
    run_over("pass-k-above-samples", {"analysis": {"pass_k": [1, 8]}}, "exceeds sampling.num_samples=2"),
    run_over("entropy-edges-and-quantiles", {"analysis": {"entropy_edges": [0.5, 1], "entropy_quantiles": 4}},
             "not both"),
    run_over("entropy-edges-decreasing", {"analysis": {"entropy_edges": [1.0, 0.5]}}, "strictly increasing"),
    run_over("entropy-edges-empty", {"analysis": {"entropy_edges": []}}, "strictly increasing"),
    run_over("high-entropy-nan", {"analysis": {"high_entropy": float("nan")}}, "analysis.high_entropy"),
    run_over("bootstrap-too-few", {"analysis": {"bootstrap": 5}}, "analysis.bootstrap"),
    run_over("device-tpu", {"device": "tpu"}, "unknown device 'tpu'"),
    run_over("device-cuda-typo", {"device": "cuda:x"}, "unknown device 'cuda:x'"),
    run_over("device-cuda-without-cuda", {"device": "cuda"}, "CUDA is not available",
             skip=lambda: "CUDA is available here" if torch.cuda.is_available() else None),
    run_over("device-mps-without-mps", {"device": "mps"}, "MPS is not available",
             skip=lambda: "MPS is available here" if torch.backends.mps.is_available() else None),
    run_over("shard-size-zero", {"shard_size": 0}, "shard_size"),
    run_over("dtype-unknown", {"student": {"dtype": "fp8"}}, "student.dtype"),
    run_over("teacher-named-student", {"teachers": [{"name": "student", "context": "full_solution"}]},
             "'student' is reserved"),
    run_over("teacher-named-column", {"teachers": [{"name": "lp_s", "context": "full_solution"}]},
             "'lp_s' is reserved"),
    run_over("teacher-named-key", {"teachers": [{"name": "rollout_id", "context": "full_solution"}]},
             "'rollout_id' is reserved"),
    run_over("teacher-name-with-space", {"teachers": [{"name": "my teacher"}]},
             "teachers.0.name: 'my teacher': a name may hold only letters, digits"),
    run_over("teacher-name-path", {"teachers": [{"name": "../../x"}]}, "teachers.0.name"),
    run_over("teacher-names-repeated", {"teachers": [{"name": "a", "context": "hint"},
                                                     {"name": "a", "context": "hint"}]}, "repeated: a"),
    run_over("context-without-prompt", {"teachers": [{"name": "t", "context": "Solution: {solution}"}]},
             "no {prompt} placeholder"),
    run_over("context-attribute-access", {"teachers": [{"name": "t", "context": "{prompt} {prompt.__class__}"}]},
             "not allowed"),
    run_over("context-unmatched-brace", {"teachers": [{"name": "t", "context": "{prompt} {"}]}, "unmatched"),
    run_over("partial-fraction-zero", {"teachers": [{"name": "t", "context": "partial_solution",
                                                     "partial_fraction": 0}]}, "teachers.0.partial_fraction"),
    run_over("ideal-budget-zero", {"ideal": {"budget": 0}}, "ideal.budget"),
    run_over("data-limit-zero", {"data": {"limit": 0}}, "data.limit"),
    run_over("data-format-unknown", {"data": {"format": "xml"}}, "data.format"),
    run_over("training-method-unknown", {"training": {"method": "ppo"}}, "unknown method 'ppo'"),
    run_over("training-key-unknown", {"training": {"method": "opd", "lr": 1e-3}}, "training.lr: unknown key"),
    run_over("training-teacher-unknown", {"training": {"method": "opd", "teacher": "nope"}},
             "'nope' is not a configured teacher"),
    run_over("training-lr-nan", {"training": {"method": "opd", "learning_rate": float("nan")}},
             "training.learning_rate"),
    run_over("training-opsd-with-model-teacher", {"training": {"method": "opsd", "teacher": "teacher"}},
             "use method opd"),
    run_over("sampling-backend-vllm-missing", {"sampling": {"backend": "vllm"}}, "vLLM is not installed",
             hide=no_package("vllm")),
    # ------------------------------------------------------------------- opsd-diag run: the data
    run_over("data-missing", {"data": {"path": "missing.jsonl"}}, "data file missing.jsonl not found"),
    diag("data-directory", lambda e: ["run", e.cfg({"data": {"path": str(e.tmp)}}), "--out", e.out],
         "is a directory, not a file"),
    run_data("data-latin1", jsonl(GOOD).replace("Start", "Caf\xe9").encode("latin-1"), "is not UTF-8 text"),
    run_data("data-bom-then-bad-line", ("\ufeff" + jsonl(GOOD, "{oops")).encode(), "line 2 is not valid JSON"),
    run_data("data-bad-json-line", jsonl(GOOD, '{"prompt": "x"'), "line 2 is not valid JSON"),
    run_data("data-line-not-object", jsonl(GOOD, "[1, 2]"), "line 2 is not a JSON object"),
    run_data("data-empty", "", "contains no problems"),
    run_data("data-blank-lines", "\n \n\n", "contains no problems"),
    run_data("data-no-prompt-field", jsonl(GOOD, {"question": "q"}), "line 2 has no 'prompt' field"),
    run_data("data-prompt-empty", jsonl(GOOD, {"prompt": ""}), "line 2: 'prompt' is empty"),
    run_data("data-prompt-blank", jsonl(GOOD, {"prompt": "   \n"}), "line 2: 'prompt' is empty"),
    run_data("data-prompt-null", jsonl(GOOD, {"prompt": None}), "line 2: 'prompt' is empty"),
    run_data("data-prompt-number", jsonl({"prompt": 5}), "line 1: 'prompt' must be a string"),
    run_data("data-prompt-empty-list", jsonl({"prompt": []}), "line 1: 'prompt' is empty"),
    run_data("data-chat-last-assistant", jsonl({"prompt": [{"role": "user", "content": "q"},
                                                           {"role": "assistant", "content": "a"}]}),
             "last chat message of the prompt must have role 'user'"),
    run_data("data-chat-without-content", jsonl({"prompt": [{"role": "user"}]}), "list of {role, content}"),
    run_data("data-chat-empty-content", jsonl({"prompt": [{"role": "user", "content": " "}]}),
             "last chat message of 'prompt' is empty"),
    run_data("data-duplicate-id", jsonl({**GOOD, "id": 1}, {**GOOD, "id": 1}), "line 2: duplicate id '1'"),
    run_data("data-meta-list", jsonl({**GOOD, "meta": [1, 2]}), "'meta' must be a mapping"),
    run_data("data-meta-number", jsonl({**GOOD, "meta": 3}), "'meta' must be a mapping"),
    run_data("data-mapped-column-absent", jsonl(GOOD), "maps answer to 'final', but no record",
             fields={"answer": "final"}),
    run_data("data-mapped-prompt-absent", jsonl(GOOD), "maps prompt to 'question', but no record",
             fields={"prompt": "question"}),
    run_data("data-fields-unknown", jsonl(GOOD), "data.fields maps unknown field(s) ['question']",
             fields={"question": "prompt"}),
    run_data("data-csv-semicolons", "prompt;answer\nq1;1\n", "separated by ';'", name="d.csv"),
    run_data("data-csv-tabs", "prompt\tanswer\nq1\t1\n", "separated by '\\t'", name="d.csv"),
    run_data("data-csv-no-prompt-column", "question,answer\nq1,1\n", "has no 'prompt' column (columns: answer, "
             "question)", name="d.csv"),
    run_data("data-csv-latin1", "prompt,answer\ncaf\xe9,1\n".encode("latin-1"), "is not UTF-8 text", name="d.csv"),
    run_data("data-parquet-corrupt", b"PAR1 not really", "cannot read", name="d.parquet"),
    run_data("data-json-object", json.dumps({"data": [GOOD]}, indent=2), "JSON Lines (one record per line) or one "
             "JSON array", name="d.json"),
    run_data("data-json-array-of-strings", json.dumps(["a", "b"]), "record 1 of its JSON array is not a JSON object",
             name="d.json"),
    run_data("data-unknown-extension", "prompt: x", "cannot tell the format", name="d.txt"),
    run_data("data-context-needs-solution", jsonl({"id": "p1", "prompt": "q", "answer": "1"}),
             "teachers.0 'self_full' (context 'full_solution') needs {solution}, but in problem 'p1' the column "
             "'solution' is missing", teachers=SELF_ONLY),
    run_data("data-context-needs-mapped-solution", jsonl({"id": "p1", "prompt": "q", "sol": ""}),
             "the column 'sol' (data.fields maps solution to it) is missing or empty", teachers=SELF_ONLY,
             fields={"solution": "sol"}),
    run_data("data-answer-only-rationale", jsonl({"id": "p1", "prompt": "q", "answer": "3 + 4 = 7\nso 7"}),
             "'answer_only') needs {answer}, but in problem 'p1' the column 'answer' holds a whole solution",
             teachers=[{"name": "ans", "context": "answer_only"}]),
    # ------------------------------------------------------------------ opsd-diag run: --out
    diag("out-is-a-file", lambda e: ["run", e.cfg(), "--out", e.file("out", "x")], "is a file, not a directory"),
    diag("out-not-empty", lambda e: (e.file("out/notes.txt", "mine"), ["run", e.cfg(), "--out", e.out])[1],
         "exists and is not a run directory"),
    diag("out-under-a-file", lambda e: ["run", e.cfg(), "--out", e.file("afile", "x") + "/run"],
         "is a file, not a directory"),
    diag("out-other-config", lambda e: ["run", e.cfg({"sampling": {"seed": 9}}), "--out", str(e.run_copy())],
         "holds a run of a different config"),
    diag("out-manifest-corrupt", lambda e: ["run", e.cfg(), "--out", str(e.run_copy(write("manifest.json", "{")))],
         "manifest.json is unreadable or corrupt"),
    diag("out-lock-is-a-link", lambda e: (e.file("victim.txt", "keep me"), (e.tmp / "out").mkdir(),
                                          (e.tmp / "out" / ".lock").symlink_to(e.tmp / "victim.txt"),
                                          ["run", e.cfg(), "--out", e.out])[-1], ".lock is a symbolic link, not a "
         "regular file"),
    diag("out-status-is-a-folder", lambda e: ((e.tmp / "out" / "status.json").mkdir(parents=True),
                                              ["run", e.cfg(), "--out", e.out])[-1],
         "status.json is a folder, not a regular file"),
    diag("out-in-use", lambda e: ["run", e.cfg(), "--out", e.held(e.tmp / "busy")], "is in use by opsd-diag run pid"),
    diag("out-empty-unwritable", lambda e: ["run", e.cfg(), "--out", unwritable_dir(e)], "cannot write the run "
         "directory"),
    # --------------------------------------------------------- opsd-diag run: models (a load each)
    run_over("model-missing-absolute", {"student": {"model": "/nonexistent/model"}},
             "model directory /nonexistent/model does not exist"),
    run_over("model-missing-relative", {"student": {"model": "./models/student"}},
             "model directory ./models/student does not exist"),
    run_over("model-hub-id-offline", {"student": {"model": "no-such-org/no-such-model"}},
             "cannot load model 'no-such-org/no-such-model'"),
    diag("model-is-a-file", lambda e: ["run", e.cfg({"student": {"model": e.file("weights.bin", "x")}}), "--out",
                                       e.out], "is a file: point to the directory"),
    diag("model-without-config", damaged("no_config"), "has no config.json"),
    diag("model-corrupt-weights", damaged("corrupt_weights"), "its files look damaged"),
    diag("model-truncated-weights", damaged("truncated_weights"), "its files look damaged"),
    diag("model-config-vocab-disagrees", damaged("vocab_mismatch"), "do not have the shapes its config.json declares"),
    diag("model-tokenizer-garbage", damaged("tokenizer_garbage"), "cannot load model"),
    diag("model-no-chat-template", damaged("no_chat_template"), "has no chat template"),
    diag("model-fewer-embeddings-than-tokens", damaged("small_embedding"), "embedding rows but its tokenizer"),
    diag("base-of-another-family-beside-a-same-family-teacher", other_vocabulary, "has another tokenizer than the "
         "student"),
    diag("teacher-nan-weights", nan_teacher, "teacher config 'teacher' (model"),
    run_over("base-missing", {"base": {"model": "/nonexistent/base"}}, "model directory /nonexistent/base does not"),
    # ----------------------------------------------------------------------- report / show
    diag("report-missing-dir", lambda e: ["report", "nowhere"], "nowhere does not exist"),
    diag("report-a-training-run", lambda e: ["report", str(training_run_dir(e))], "is a training run (made by "
         "opsd-train), not a diagnosis"),
    diag("report-a-file", lambda e: ["report", e.file("f.txt", "x")], "not a run directory"),
    diag("report-empty-dir", lambda e: ["report", str(e.tmp)], "not a run directory (no manifest.json)"),
    diag("report-manifest-corrupt", corrupt_run(write("manifest.json", "{broken")), "is unreadable or corrupt"),
    diag("report-manifest-a-list", corrupt_run(write("manifest.json", "[1]")), "not a JSON object"),
    diag("report-manifest-latin1", corrupt_run(write("manifest.json", '{"status": "caf\xe9"}'.encode("latin-1"))),
         "is unreadable or corrupt"),
    diag("report-unfinished", corrupt_run(set_manifest(status="running")), "is not finished (status: running)"),
    diag("report-summary-missing", corrupt_run(remove("summary.json")), "summary.json is missing"),
    diag("report-summary-corrupt", corrupt_run(write("summary.json", "nan{")), "summary.json is unreadable or corrupt"),
    diag("report-summary-schema", corrupt_run(write("summary.json", '{"configs": 5}')), "does not match the summary"),
    diag("export-configs-empty", lambda e: ["export", str(e.run), "--configs", " , ", "--out", str(e.tmp / "h.html")],
         "--configs names no config"),
    diag("show-rollout-unknown", lambda e: ["show", str(e.run), "--rollout", "999"], "no rollout 999"),
    diag("show-rollout-negative", lambda e: ["show", str(e.run), "--rollout", "-1"], "no rollout -1"),
    diag("show-config-unknown", lambda e: ["show", str(e.run), "--config", "nope"], "unknown config 'nope'"),
    diag("show-color-and-no-color", lambda e: ["show", str(e.run), "--color", "--no-color"],
         "--no-color: not allowed with argument --color"),
    diag("show-signal-token", lambda e: ["show", str(e.run), "--signal", "token"], "unknown signal 'token'"),
    diag("show-signal-key-column", lambda e: ["show", str(e.run), "--signal", "rollout_id"],
         "unknown signal 'rollout_id'"),
    diag("show-tokens-corrupt", corrupt_run(write("tokens.parquet", b"PAR1junk"), cmd="show"),
         "tokens.parquet is corrupt"),
    diag("show-rollouts-corrupt", corrupt_run(write("rollouts.parquet", b"junk"), cmd="show"),
         "rollouts.parquet is corrupt"),
    diag("show-tokens-missing-columns", corrupt_run(lambda r: pd.DataFrame({"rollout_id": [0]}).to_parquet(
        r / "tokens.parquet"), cmd="show"), "lacks the columns"),
    # ------------------------------------------------------------------- predict / scoreboard
    diag("predict-budget-zero", lambda e: ["predict", str(e.run), "--budget", "0"], "ideal.budget"),
    diag("predict-k-zero", lambda e: ["predict", str(e.run), "--k", "0"], "ideal.k"),
    diag("predict-k-huge", lambda e: ["predict", str(e.run), "--k", "100"], "ideal.k"),
    diag("predict-m-negative", lambda e: ["predict", str(e.run), "--m", "-1"], "ideal.m"),
    diag("predict-run-in-use", lambda e: ["predict", e.held(e.run_copy(lambda d: (d / jobs.LOCK).unlink()))],
         "is in use by opsd-diag run pid"),
    diag("predict-unfinished", corrupt_run(set_manifest(status="running"), cmd="predict"), "is not finished"),
    diag("predict-config-of-another-version", corrupt_run(manifest_config(teachers=DROP), cmd="predict"),
         "manifest.json config: teachers: Field required"),
    diag("predict-models-gone", corrupt_run(manifest_config(student={"model": "/gone/student"}), cmd="predict"),
         "model directory /gone/student does not exist"),
    diag("scoreboard-root-missing", lambda e: ["scoreboard", "nowhere"], "nowhere is not a folder"),
    diag("scoreboard-root-a-file", lambda e: ["scoreboard", e.file("f.txt", "x")], "is not a folder"),
    # --------------------------------------------------------------------- opsd-train: argv
    train("train-argv-empty", lambda e: [], "give a config file, or --from-diagnosis"),
    train("train-argv-unknown-option", lambda e: ["--bogus"], "unrecognized arguments: --bogus"),
    train("train-argv-max-steps-not-int", lambda e: ["--from-diagnosis", "x", "--max-steps", "ten"],
          "invalid int value: 'ten'"),
    train("train-argv-lr-not-float", lambda e: ["--from-diagnosis", "x", "--learning-rate", "fast"],
          "invalid float value: 'fast'"),
    train("train-resume-without-out", lambda e: [e.train_cfg(), "--resume"], "--resume needs --out"),
    # ------------------------------------------------------------------- opsd-train: config
    train("train-config-missing", lambda e: ["nope.yaml"], "config file nope.yaml not found"),
    train("train-config-directory", lambda e: [str(e.tmp)], "is a directory, not a file"),
    train("train-config-latin1", lambda e: [e.file("c.yaml", "student: caf\xe9\n".encode("latin-1"))],
          "is not UTF-8 text"),
    train("train-config-duplicate-key", lambda e: [e.file("c.yaml", "training: {}\ntraining: {}\n")],
          "duplicate key 'training'"),
    train("train-no-training-section", lambda e: [e.cfg(), "--out", e.out], "has no 'training' section"),
    train_over("train-method-unknown", {"method": "grpo"}, "unknown method 'grpo'"),
    train_over("train-key-unknown", {"eval": {"nsamples": 3}}, "training.eval.nsamples: unknown key"),
    train_over("train-lr-nan", {"learning_rate": float("nan")}, "training.learning_rate"),
    train_over("train-lr-negative", {"learning_rate": -1}, "training.learning_rate"),
    train_over("train-max-steps-zero", {"max_steps": 0}, "training.max_steps"),
    train_over("train-grad-norm-inf", {"max_grad_norm": float("inf")}, "training.max_grad_norm"),
    train_over("train-ema-decay-one", {"method": "opsd", "ema_decay": 1.0}, "training.ema_decay"),
    train_over("train-generation-batch", {"generation_batch_size": 3}, "generation_batch_size 3"),
    train_over("train-eval-pass-k", {"eval": {"num_samples": 2, "pass_k": [4]}}, "pass_k [4]"),
    train_over("train-opd2-without-base", {"method": "opd2"}, "needs a base model", over={"base": DROP}),
    train_over("train-self-teacher-without-context", {"method": "opsd", "teacher": "plain"},
               "every signal is zero", over={"teachers": [{"name": "plain"}]}),
    train_over("train-lora-without-peft", {"lora": {"r": 4}}, "needs the peft package", hide=no_package("peft")),
    train_over("train-report-to-wandb-missing", {"report_to": ["wandb"]}, "wandb", hide=no_package("wandb")),
    train_over("train-data-missing", {"data": {"path": "missing.jsonl"}},
               "training.data.path: data file missing.jsonl not found: set training.data.path"),
    train("train-data-directory", lambda e: [e.train_cfg({"data": {"path": str(e.tmp)}}), "--out", e.out],
          "training.data.path: data file"),
    train("train-data-latin1", lambda e: [e.train_cfg({"data": {"path": e.file("t.jsonl", jsonl(GOOD).replace(
        "Start", "Caf\xe9").encode("latin-1"))}}), "--out", e.out], "training.data.path:"),
    train("train-data-no-prompt", lambda e: [e.train_cfg({"data": {"path": e.file("t.jsonl", jsonl({"q": 1}))}}),
                                             "--out", e.out], "training.data.path:"),
    train("train-inherited-data-empty", lambda e: [e.train_cfg(over={"data": {"path": e.file("t.jsonl", "")}}),
                                                   "--out", e.out], "data.path:"),
    train_over("train-eval-data-missing", {"eval": {"data": {"path": "held.jsonl"}}},
               "training.eval.data.path: data file held.jsonl not found"),
    train("train-eval-data-no-answers", lambda e: [e.train_cfg({"eval": {"data": {"path": e.file(
        "held.jsonl", jsonl(GOOD | {"answer": None}))}}}), "--out", e.out], "training.eval.data has no answers"),
    train("train-sft-without-solutions", lambda e: [e.train_cfg({"method": "sft", "data": {"path": e.file(
        "t.jsonl", jsonl({"id": "q1", "prompt": "q"}))}}), "--out", e.out],
          "training.sft_target needs {solution}, but in problem 'q1'"),
    train("train-self-teacher-needs-solution", lambda e: [e.train_cfg({"method": "opsd", "data": {"path": e.file(
        "t.jsonl", jsonl({"id": "q1", "prompt": "q", "answer": "1"}))}}), "--out", e.out],
          "teacher 'self_full' (context 'full_solution'), the training section's teacher needs {solution}"),
    # ------------------------------------------------------------------- opsd-train: --out
    train("train-out-a-file", lambda e: [e.train_cfg(), "--out", e.file("out", "x")], "is a file, not a directory"),
    train("train-out-not-empty", lambda e: (e.file("out/x.txt", "x"), [e.train_cfg(), "--out", e.out])[1],
          "exists and is not empty"),
    train("train-out-holds-a-run", lambda e: [e.train_cfg(), "--out", str(training_run_dir(e))],
          "already holds a training run: pass --resume"),
    train("train-out-other-config-resume", lambda e: [e.train_cfg(), "--out", str(training_run_dir(e)), "--resume"],
          "holds a run of a different config"),
    train("train-resume-missing-out", lambda e: [e.train_cfg(), "--out", e.out, "--resume"], "does not exist"),
    train("train-resume-damaged-checkpoint", lambda e: resumable_run(e), "step-000001 is damaged"),
    train("train-resume-config-not-utf8", lambda e: resumable_run(e, config="student: caf\xe9\n".encode("latin-1")),
          "holds a run of a different config"),
    train("train-out-a-diagnosis", lambda e: [e.train_cfg(), "--out", str(e.run_copy())],
          "is a diagnosis run (made by opsd-diag run), not a training run"),
    train("train-out-a-diagnosis-resume", lambda e: [e.train_cfg(), "--out", str(e.run_copy()), "--resume"],
          "is a diagnosis run (made by opsd-diag run), not a training run: choose another --out"),
    train("train-signal-without-diagnosis", lambda e: [e.train_cfg(), "--signal", "r_opd"],
          "--config and --signal choose what to train from a diagnosis"),
    train("train-option-invalid", lambda e: [e.train_cfg(), "--max-steps", "0", "--out", e.out],
          "with the command-line options"),
    train("train-out-in-use", lambda e: [e.train_cfg(), "--out", e.held(e.tmp / "busy")], "is in use by opsd-diag "
          "run pid"),
    train("train-out-under-a-file", lambda e: [e.train_cfg(), "--out", e.file("afile", "x") + "/run"],
          "is a file, not a directory"),
    train("train-out-empty-unwritable", lambda e: [e.train_cfg(), "--out", unwritable_dir(e)],
          "cannot write the run directory"),
    # ------------------------------------------------------------------- opsd-train: models
    train_over("train-student-missing", {}, "model directory /nonexistent/s does not exist",
               over={"student": {"model": "/nonexistent/s"}}),
    train("train-teacher-nan", lambda e: nan_teacher(e, "train"), "teacher 'teacher' (model"),
    # ----------------------------------------------------------- opsd-train --from-diagnosis
    from_diag("fd-with-config-file", ["c.yaml", "--config", "teacher", "--signal", "r_opd"], "and no config file"),
    from_diag("fd-without-signal", ["--config", "teacher"], "takes --config NAME and --signal SIGNAL"),
    train("fd-run-missing", lambda e: ["--from-diagnosis", "nowhere", "--config", "teacher", "--signal", "r_opd"],
          "nowhere does not exist"),
    from_diag("fd-run-unfinished", ["--config", "teacher", "--signal", "r_opd"], "is not finished",
              change=set_manifest(status="running")),
    from_diag("fd-run-summary-corrupt", ["--config", "teacher", "--signal", "r_opd"], "unreadable or corrupt",
              change=write("summary.json", "{")),
    from_diag("fd-config-unknown", ["--config", "nope", "--signal", "r_opd"], "--config 'nope' is not a teacher"),
    from_diag("fd-signal-unknown", ["--config", "teacher", "--signal", "bogus"], "--signal 'bogus' cannot be trained"),
    from_diag("fd-signal-needs-model", ["--config", "self_full", "--signal", "a_d2"], "cannot be trained with a "
              "self-teacher"),
    from_diag("fd-max-steps-zero", ["--config", "teacher", "--signal", "r_opd", "--max-steps", "0"],
              "training.max_steps"),
    from_diag("fd-lr-nan", ["--config", "teacher", "--signal", "r_opd", "--learning-rate", "nan"],
              "training.learning_rate"),
    from_diag("fd-lr-inf", ["--config", "teacher", "--signal", "r_opd", "--learning-rate", "inf"],
              "training.learning_rate"),
    from_diag("fd-batch-negative", ["--config", "teacher", "--signal", "r_opd", "--batch-size", "-1"],
              "training.per_device_train_batch_size"),
    from_diag("fd-eval-data-missing", ["--config", "teacher", "--signal", "r_opd", "--eval-data", "held.jsonl"],
              "training.eval.data.path: data file held.jsonl not found"),
    from_diag("fd-eval-problems-without-data", ["--config", "teacher", "--signal", "r_opd", "--eval-problems", "5"],
              "training.eval.data.limit is set but no held-out file is"),
    from_diag("fd-eval-samples-without-data", ["--config", "teacher", "--signal", "r_opd", "--eval-samples", "3"],
              "so --eval-samples would change nothing"),
    train("train-eval-steps-without-eval", lambda e: [e.train_cfg(), "--eval-steps", "5", "--out", e.out],
          "so --eval-steps would change nothing"),
    from_diag("fd-models-gone", ["--config", "teacher", "--signal", "r_opd"], "model directory /gone/t does not",
              change=manifest_config(teachers=[{"name": "teacher", "model": "/gone/t"}])),
    # --- issue 19: run directories, writes, locks, limits ---
    # outputs never clobber: export --out onto what is not an earlier export
    diag("i19-export-onto-fifo", lambda e: ["export", str(e.run), "--out", fifo(e.tmp / "pipe.html")],
         "is a named pipe (FIFO): it is never replaced"),
    diag("i19-export-onto-device", lambda e: ["export", str(e.run), "--out", device_node(e)],
         "is a device: it is never replaced", skip=not_root),
    diag("i19-export-onto-run-summary", lambda e: ["export", str(r := e.run_copy()), "--out", str(r / "summary.json")],
         "is a file of the run"),
    diag("i19-export-onto-shard-table", lambda e: ["export", str(r := e.run_copy()), "--format", "svg", "--out",
                                                    str(r / "shards" / "00000" / "tokens.parquet")],
         "is a file of the run"),
    diag("i19-export-onto-data-file", lambda e: ["export", str(e.run), "--out", e.file("train.jsonl", jsonl(GOOD))],
         "exists and is not a .html file"),
    diag("i19-export-onto-folder", lambda e: ((e.tmp / "x.html").mkdir(), ["export", str(e.run), "--out",
                                                                         str(e.tmp / "x.html")])[-1], "is a folder"),
    diag("i19-export-onto-link", lambda e: ((e.tmp / "x.html").symlink_to(e.file("victim.html", "keep")),
                                            ["export", str(e.run), "--out", str(e.tmp / "x.html")])[-1],
         "is a symbolic link: it is never replaced"),
    # writes never follow links (or block on FIFOs) inside run directories: refused before anything is written
    train("i19-resume-command-is-a-link", lambda e: resumable_with(e, link_to_victim("command.txt")),
          "command.txt is a symbolic link, not a regular file"),
    train("i19-resume-log-is-a-link", lambda e: resumable_with(e, link_to_victim("stdout.log")),
          "stdout.log is a symbolic link"),
    train("i19-resume-metrics-is-a-fifo", lambda e: resumable_with(e, replace_with_fifo("metrics.jsonl")),
          "metrics.jsonl is a named pipe (FIFO)"),
    train("i19-resume-status-is-a-link", lambda e: resumable_with(e, link_to_victim("status.json")),
          "status.json is a symbolic link"),
    train("i19-resume-checkpoint-from-outside", lambda e: resumable_with(e, outside_checkpoint(root=False)),
          "step-000001 is a symbolic link: a run resumes only from what it saved itself"),
    train("i19-resume-checkpoints-folder-linked", lambda e: resumable_with(e, outside_checkpoint(root=True)),
          "checkpoints is a symbolic link: a run writes only inside its own folder"),
    diag("i19-run-resume-status-is-a-link", resuming_run(link_to_victim("status.json")),
         "status.json is a symbolic link, not a regular file"),
    diag("i19-run-resume-shards-linked", resuming_run(lambda r: (shutil.move(r / "shards", r.parent / "s"),
                                                                 (r / "shards").symlink_to(r.parent / "s"))),
         "shards is a symbolic link"),
    # no FIFO can hang a command
    diag("i19-report-summary-is-a-fifo", corrupt_run(replace_with_fifo("summary.json")),
         "summary.json is a named pipe (FIFO), not a regular file"),
    diag("i19-report-manifest-is-a-fifo", corrupt_run(replace_with_fifo("manifest.json")),
         "manifest.json is a named pipe (FIFO)"),
    diag("i19-show-tokens-is-a-fifo", corrupt_run(replace_with_fifo("tokens.parquet"), cmd="show"),
         "tokens.parquet is a named pipe (FIFO)"),
    diag("i19-predict-lock-is-a-fifo", corrupt_run(replace_with_fifo(".lock"), cmd="predict"),
         ".lock is a named pipe (FIFO)"),
    diag("i19-run-out-lock-is-a-fifo", lambda e: ((e.tmp / "out").mkdir(), fifo(e.tmp / "out" / ".lock"),
                                                  ["run", e.cfg(), "--out", e.out])[-1], ".lock is a named pipe"),
    train("i19-train-out-log-is-a-fifo", lambda e: ((e.tmp / "out").mkdir(), fifo(e.tmp / "out" / "stdout.log"),
                                                    [e.train_cfg(), "--out", e.out])[-1], "stdout.log is a named pipe"),
    # paths no file system call can take: one line in every command
    diag("i19-report-name-too-long", lambda e: ["report", str(e.tmp / LONG)], "over the file system's limit of 255"),
    diag("i19-run-out-name-too-long", lambda e: ["run", e.cfg(), "--out", str(e.tmp / LONG / "run")],
         "is 256 bytes, over the file system's limit of 255"),
    diag("i19-run-config-name-too-long", lambda e: ["run", str(e.tmp / (LONG + ".yaml"))], "limit of 255"),
    diag("i19-export-out-name-too-long", lambda e: ["export", str(e.run), "--out", str(e.tmp / LONG)],
         "--out: the name"),
    diag("i19-scoreboard-root-too-long", lambda e: ["scoreboard", str(e.tmp / LONG)], "the runs folder: the name"),
    diag("i19-report-path-too-long", lambda e: ["report", "/".join(["d" * 200] * 25)], "over the limit of 4095"),
    train("i19-train-out-name-too-long", lambda e: [e.train_cfg(), "--out", str(e.tmp / LONG)], "limit of 255"),
    train("i19-fd-run-name-too-long", lambda e: ["--from-diagnosis", str(e.tmp / LONG), "--config", "teacher",
                                                 "--signal", "r_opd"], "--from-diagnosis: the name"),
    diag("i19-report-link-loop", lambda e: ["report", str(link_loop(e))], "goes through a loop of symbolic links"),
    diag("i19-run-config-link-loop", lambda e: ["run", str(link_loop(e)), "--out", e.out], "loop of symbolic links"),
    diag("i19-run-out-under-link-loop", lambda e: ["run", e.cfg(), "--out", str(link_loop(e) / "run")],
         "loop of symbolic links"),
    train("i19-train-out-link-loop", lambda e: [e.train_cfg(), "--out", str(link_loop(e))], "loop of symbolic links"),
    train("i19-fd-run-link-loop", lambda e: ["--from-diagnosis", str(link_loop(e)), "--config", "teacher",
                                             "--signal", "r_opd"], "loop of symbolic links"),
    diag("i19-report-nul", lambda e: ["report", "runs/a\0b"], "the run directory contains a NUL character"),
    diag("i19-run-out-nul", lambda e: ["run", e.cfg(), "--out", "out\0put"], "--out contains a NUL character"),
    train("i19-train-out-nul", lambda e: [e.train_cfg(), "--out", "o\0"], "--out contains a NUL character"),
    train("i19-train-eval-data-nul", lambda e: [e.train_cfg(), "--eval-data", "d\0.jsonl"], "--eval-data contains"),
    # bounded JSON: deep nesting is one line, never a RecursionError
    diag("i19-report-summary-deep-list", corrupt_run(write("summary.json", deep(200_000))),
         "summary.json nests deeper than 64 levels"),
    diag("i19-report-summary-deep-object", corrupt_run(write("summary.json", deep(70, obj=True))),
         "summary.json nests deeper than 64 levels"),
    diag("i19-report-manifest-deep", corrupt_run(write("manifest.json", deep(50_000, obj=True))),
         "manifest.json nests deeper than 64 levels"),
    from_diag("i19-fd-summary-deep", ["--config", "teacher", "--signal", "r_opd"], "nests deeper than",
              change=write("summary.json", deep(100_000))),
    # every table read is checked: present, its columns and dtypes, token ids, and that it is this run's
    diag("i19-show-without-tokens", corrupt_run(remove("tokens.parquet"), cmd="show"), "tokens.parquet is missing"),
    diag("i19-show-without-rollouts", corrupt_run(remove("rollouts.parquet"), cmd="show"),
         "rollouts.parquet is missing"),
    diag("i19-show-token-ids-as-text", corrupt_run(same_stamp("tokens", lambda f: f.assign(
        token_id=f["token_id"].astype(str))), cmd="show"), "column 'token_id' holds"),
    diag("i19-show-signal-as-text", corrupt_run(same_stamp("tokens", lambda f: f.assign(
        r_opd="high")), cmd="show"), "tokens.parquet: column 'r_opd' holds"),
    diag("i19-show-rollout-ids-float", corrupt_run(same_stamp("rollouts", lambda f: f.assign(
        rollout_id=f["rollout_id"] + 0.5)), cmd="show"), "rollouts.parquet: column 'rollout_id' holds"),
    diag("i19-show-token-id-beyond-vocabulary", corrupt_run(same_stamp("tokens", lambda f: f.assign(
        token_id=f["token_id"] + 10**6)), cmd="show"), "'token_id' holds token ids outside the vocabulary"),
    diag("i19-export-topk-negative-ids", corrupt_run(same_stamp("topk", lambda f: f.assign(token_id=-1)),
                                                     "--out", "h.html", cmd="export"), "topk.parquet: column"),
    diag("i19-show-completion-ids-beyond-vocabulary", corrupt_run(same_stamp("rollouts", lambda f: f.assign(
        completion_ids=[[10**7]] * len(f))), cmd="show"), "'completion_ids' holds token ids outside"),
    diag("i19-show-tokens-of-another-run", corrupt_run(restamp("tokens", "0123456789abcdef"), cmd="show"),
         "tokens.parquet belongs to another run (run id 0123456789abcdef"),
    diag("i19-show-tokens-unstamped", corrupt_run(restamp("tokens", None), cmd="show"),
         "tokens.parquet lacks the run-id stamp"),
    diag("i19-predict-rollouts-of-another-run", corrupt_run(restamp("rollouts", "f" * 32), cmd="predict"),
         "rollouts.parquet belongs to another run"),
    # --- end of issue 19 ---
]


# --- issue 19: text, config types, checkpoints, app, signals ---

_TRAINED: dict[Path, Path] = {}


def trained_run(e: Env, change: Callable[[Path], None]) -> list[str]:
    """A finished one-step training run of this config (trained once per module), copied and its checkpoint
    changed by ``change``; the row resumes it."""
    import contextlib
    import io

    cfg = e.train_cfg()
    if e.world not in _TRAINED:
        done = e.world.parent / "trained-once"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert train_cli.main([cfg, "--out", str(done)]) == 0
        _TRAINED[e.world] = done
    d = e.tmp / "trained"
    shutil.copytree(_TRAINED[e.world], d)
    change(d / "checkpoints" / "step-000001")
    return [cfg, "--out", str(d), "--resume"]


def tamper_state(**fields) -> Callable[[Path], None]:
    """The checkpoint's trainer_state.pt with ``fields`` replaced (DROP removes one); a callable value maps the old."""
    def change(ckpt: Path) -> None:
        state = torch.load(ckpt / "trainer_state.pt", weights_only=True)
        for k, v in fields.items():
            if v is DROP:
                state.pop(k)
            else:
                state[k] = v(state[k]) if callable(v) else v
        torch.save(state, ckpt / "trainer_state.pt")
    return change


def fewer_params(opt: dict) -> dict:
    groups = [{**g, "params": g["params"][:-1]} for g in opt["param_groups"]]
    return {**opt, "param_groups": groups}


def other_shapes(opt: dict) -> dict:
    return {**opt, "state": {i: {k: (v[..., :1] if isinstance(v, torch.Tensor) and v.dim() else v)
                                 for k, v in m.items()} for i, m in opt["state"].items()}}


def truncate(name: str) -> Callable[[Path], None]:
    def change(ckpt: Path) -> None:
        data = (ckpt / name).read_bytes()
        (ckpt / name).write_bytes(data[:len(data) // 2])
    return change


def edit_json(name: str, **fields) -> Callable[[Path], None]:
    def change(where: Path) -> None:
        data = json.loads((where / name).read_text())
        data.update(fields)
        (where / name).write_text(json.dumps(data))
    return change


def rng_from_state(ckpt: Path) -> None:
    shutil.copy(ckpt / "trainer_state.pt", ckpt / "rng_0.pt")


def long_prompt(e: Env) -> list[str]:
    path = e.file("long.jsonl", jsonl({**GOOD, "prompt": "Start at 1. " * 800}))
    return ["run", e.cfg({"data": {"path": path}}), "--out", e.out]


MERGE_YAML = """teachers:
  - &t {{name: same, context: full_solution}}
  - {{<<: *t, partial_fraction: 0.25}}
student: {{model: {world}/student}}
data: {{path: {world}/dev.jsonl}}
"""

TAB_JSON = '{{\n\t"student": {{"model": "{world}/student"}},\n\t"teachers": [{{"name": "t", "context": "hint"}}],' \
           '\n\t"data": {{"path": "{world}/dev.jsonl"}},\n\t"bogus": 1\n}}\n'

CASES += [
    # --------------------------------------------------------------- text taken as text
    run_data("text-lone-surrogate", jsonl('{"prompt": "Start at \\ud800 1."}'), "holds a lone surrogate code point"),
    run_data("data-row-nested-deep", jsonl('{"prompt": "Start at 1.", "meta": ' + "[" * 50_000 + "]" * 50_000 + "}"),
             "nests deeper than"),
    run_data("data-array-nested-deep", "[" * 50_000 + "]" * 50_000 + "\n", "nests deeper than", name="d.json"),
    run_over("text-config-lone-surrogate", {"data": {"system_prompt": "\ud800"}}, "holds a lone surrogate"),
    run_data("text-u2028-stays-in-its-line", '{"prompt": "a\u2028b\u0085c\u2029d"}\n{"prompt": \n',
             "d.jsonl line 2 is not valid JSON"),
    diag("text-path-newline-escaped", lambda e: ["run", "bad\nname\x1b[2J.yaml"],
         "config file bad\\nname\\x1b[2J.yaml not found"),
    run_over("text-data-path-escape-escaped", {"data": {"path": "/nowhere/\x1b]0;owned\x07.jsonl"}},
             "data file /nowhere/\\x1b]0;owned\\x07.jsonl not found"),
    diag("text-run-id-bidi-escaped", lambda e: ["report", str(e.tmp / "run\u202egnp.exe")], "\\u202e"),
    # ---------------------------------------------------------- config values, strict types
    diag("types-num-samples-yes", lambda e: ["run", e.file("c.yaml", yaml.safe_dump(base_config(e.world)).replace(
        "num_samples: 2", "num_samples: yes")), "--out", e.out], "sampling.num_samples: Input should be a valid "
         "integer, got the boolean true"),
    run_over("types-limit-true", {"data": {"limit": True}}, "data.limit: Input should be a valid integer, got the "
             "boolean true (YAML reads yes/no/on/off/true/false as booleans): write a number"),
    run_over("types-top-k-off", {"scoring": {"top_k": False}}, "scoring.top_k"),
    run_over("types-name-no", {"teachers": [{"name": False, "context": "hint"}]}, "teachers.0.name: Input should be "
             "a valid string, got the bool False"),
    run_over("types-model-number", {"student": {"model": 1.1}}, 'put the value in quotes as you wrote it, e.g. name: '
             '"no" or model: "1.10"'),
    run_over("types-float-for-int", {"sampling": {"max_completion_length": 4.0}}, "sampling.max_completion_length"),
    run_over("seed-negative", {"sampling": {"seed": -12345}}, "sampling.seed: Input should be greater than or equal "
             "to 0"),
    run_over("seed-2-64", {"sampling": {"seed": 2 ** 64}}, "sampling.seed: Input should be less than 4294967296"),
    train_over("seed-training-huge", {"seed": 2 ** 64}, "training.seed: Input should be less than 4294967296"),
    run_over("seed-ideal-negative", {"ideal": {"seed": -1}}, "ideal.seed"),
    run_over("temperature-subnormal", {"sampling": {"temperature": 5e-324}}, "sampling.temperature: Input should be "
             "greater than or equal to 0.0001"),
    train_over("temperature-training-tiny", {"temperature": 1e-30}, "training.temperature"),
    train_over("lr-1e308", {"learning_rate": 1e308}, "training.learning_rate: Input should be less than or equal to 1"),
    from_diag("fd-lr-huge", ["--config", "teacher", "--signal", "r_opd", "--learning-rate", "1e308"],
              "training.learning_rate: Input should be less than or equal to 1"),
    run_over("data-path-tilde-expanded", {"data": {"path": "~/opsd-no-such-file.jsonl"}},
             f"data file {Path.home() / 'opsd-no-such-file.jsonl'} not found"),
    diag("yaml-merge-key-read", lambda e: ["run", e.file("c.yaml", MERGE_YAML.format(world=e.world)), "--out", e.out],
         "teacher names must be unique; repeated: same"),
    diag("json-tab-indented-read", lambda e: ["run", e.file("c.json", TAB_JSON.format(world=e.world)), "--out", e.out],
         "bogus: unknown key"),
    train("opd-teacher-is-the-student", lambda e: [e.train_cfg({}, {"teachers": [
        {"name": "teacher", "model": str(e.world / "student")}]}), "--out", e.out], "is the student's own model"),
    run_over("completion-beyond-positions", {"sampling": {"max_completion_length": 4096}},
             "sampling.max_completion_length=4096 does not fit the student model"),
    diag("prompt-beyond-positions", long_prompt, "which has 1024 positions (max_position_embeddings) for the prompt"),
    train_over("train-completion-beyond-positions", {"max_completion_length": 2000},
               "training.max_completion_length=2000 does not fit the student model"),
    # ------------------------------------------------------------- tampered checkpoints
    train("ckpt-weights-truncated", lambda e: trained_run(e, truncate("model.safetensors")),
          "model.safetensors is truncated or padded", slow=True),
    train("ckpt-weights-replaced", lambda e: trained_run(e, write("model.safetensors", b"\x00garbage" * 64)),
          "model.safetensors is not a safetensors file", slow=True),
    train("ckpt-config-other-architecture", lambda e: trained_run(e, edit_json("config.json", hidden_size=48,
                                                                                  model_type="gpt2")),
          "its config.json describes another model than the student's", slow=True),
    train("ckpt-optimizer-other-params", lambda e: trained_run(e, tamper_state(optimizer=fewer_params)),
          "its optimizer state is for", slow=True),
    train("ckpt-optimizer-other-shapes", lambda e: trained_run(e, tamper_state(optimizer=other_shapes)),
          "its optimizer state does not fit the parameters", slow=True),
    train("ckpt-no-scheduler", lambda e: trained_run(e, tamper_state(scheduler=DROP)),
          "has no learning-rate scheduler state", slow=True),
    train("ckpt-step-not-integer", lambda e: trained_run(e, tamper_state(step="1")), "the step in trainer_state.pt "
          "is '1', not a whole number", slow=True),
    train("ckpt-step-negative", lambda e: trained_run(e, tamper_state(step=-1)), "not a whole number >= 0", slow=True),
    train("ckpt-step-other-folder", lambda e: trained_run(e, tamper_state(step=7)), "says step 7, its folder name "
          "step 1", slow=True),
    train("ckpt-wrong-rng-file", lambda e: trained_run(e, rng_from_state), "its RNG file is not an RNG state",
          slow=True),
]


def assert_one_error_line(code: int, out: str, err: str, prog: str, expect: str) -> None:
    """A user error: exit 2, exactly one ``PROG: error: ...`` line on stderr that contains ``expect``, no traceback."""
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code}\n{out}\n{err}"
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert expect in lines[0], lines[0]
    assert "Traceback" not in out + err


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else [])
                                  for c in CASES])
def test_cli_bad_input(case: Case, env: Env, capsys, monkeypatch):
    if case.skip is not None and (why := case.skip()):
        pytest.skip(why)
    for name in case.hide:  # importlib.util.find_spec(name) is None while sys.modules[name] is None
        monkeypatch.setitem(sys.modules, name, None)
    argv = case.make(env)
    before = tree(env.tmp), tree(env.run)
    main = diag_cli.main if case.prog == "opsd-diag" else train_cli.main
    code = main(argv)
    out, err = capsys.readouterr()
    assert_one_error_line(code, out, err, case.prog, case.expect)
    assert (tree(env.tmp), tree(env.run)) == before, "a user error left files behind or changed the run"


def test_compiled_scoring_without_a_compiler_fails_before_the_run_directory(env: Env, capsys, monkeypatch):
    """Inductor without a C compiler fails at the first compiled call: that must be before anything is written."""
    def no_compiler(*a, **k):
        raise RuntimeError("InductorError: Failed to find C compiler. Please specify via CC environment variable")

    argv = ["run", env.cfg({"scoring": {"engine": "compiled"}}), "--out", env.out]
    before = tree(env.tmp)
    monkeypatch.setattr(torch, "compile", no_compiler)
    assert diag_cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opsd-diag: error: scoring.engine: compiled cannot run on cpu: "
                                                   "torch.compile failed (InductorError: Failed to find C compiler")
    assert lines[0].endswith("install a C compiler (e.g. gcc) or set scoring.engine: reference")
    assert tree(env.tmp) == before


def test_the_corpus_is_large_and_its_ids_unique():
    ids = [c.id for c in CASES] + [c.id for c in APP_CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 120
    assert {c.prog for c in CASES} == {"opsd-diag", "opsd-train"}


# ------------------------------------------------------------------------------------------ the app

MAIN = str(REPO / "app" / "main.py")


@dataclass(frozen=True)
class AppCase:
    id: str
    make: Callable[[Env], dict]  # writes inputs; returns the session state (run_dir, runs_root)
    page: str
    expect: str
    inputs: Callable[[Env], dict[str, str]] | None = None  # text_input key -> value (files written here)
    button: str | None = None  # clicked after the inputs
    choices: dict[str, str] | None = None  # radio / selectbox key -> value, set before the inputs


def _open_run(change: Callable[[Path], None] | None = None, path: Callable[[Env], str] | None = None):
    return lambda e: {"run_dir": path(e) if path is not None else str(e.run_copy(change))}


def _shared(e: Env) -> dict:
    return {"run_dir": str(e.run), "runs_root": str(e.tmp / "runs")}


def new_run(id: str, content, expect: str) -> AppCase:
    """The New diagnosis page: a config file (None: a folder instead) validated in place."""
    return AppCase(id, _shared, "views/new_run.py", expect,
                   lambda e: {"config_path": e.file("c.yaml", content) if content is not None else str(e.tmp)},
                   "validate", {"nr_mode": "file"})


def train_page(id: str, config: Callable[[Env], str], expect: str, out: Callable[[Env], str] | None = None):
    """The Train page: Start with a config (and a run directory) that must be refused in place."""
    return AppCase(id, _shared, "views/train.py", expect,
                   lambda e: {"train_config": config(e), **({"train_out": out(e)} if out else {})}, "train_start")


NAN_CONFIG = yaml.safe_dump({"student": {"model": "x"}, "teachers": [{"name": "t"}], "data": {"path": "d"},
                             "scoring": {"exopd_lambda": float("nan")}})

APP_CASES: list[AppCase] = [
    AppCase("app-manifest-corrupt", _open_run(write("manifest.json", "{")), "views/overview.py",
            "is unreadable or corrupt"),
    AppCase("app-summary-missing", _open_run(remove("summary.json")), "views/overview.py", "summary.json is missing"),
    AppCase("app-summary-schema", _open_run(write("summary.json", '{"configs": 1}')), "views/overview.py",
            "does not match the summary schema"),
    AppCase("app-not-a-run", _open_run(path=lambda e: str(e.tmp)), "views/overview.py", "not a run directory"),
    AppCase("app-tokens-corrupt", _open_run(write("tokens.parquet", b"PAR1junk")), "views/tokens.py",
            "tokens.parquet is corrupt"),
    AppCase("app-rollouts-corrupt", _open_run(write("rollouts.parquet", b"junk")), "views/tokens.py",
            "rollouts.parquet is corrupt"),
    AppCase("app-signals-tokens-corrupt", _open_run(write("tokens.parquet", b"junk")), "views/signals.py",
            "tokens.parquet is corrupt"),
    AppCase("app-export-tokens-corrupt", _open_run(write("topk.parquet", b"junk")), "views/export.py",
            "topk.parquet is corrupt", choices={"exp_table": "topk"}),
    new_run("app-new-run-latin1", "student: caf\xe9\n".encode("latin-1"), "is not UTF-8 text"),
    new_run("app-new-run-duplicate-key", "student: {model: a}\nstudent: {model: b}\n", "duplicate key"),
    new_run("app-new-run-alias-bomb", alias_bomb(), "expands to more than"),
    new_run("app-new-run-directory", None, "is a directory, not a file"),
    new_run("app-new-run-nan", NAN_CONFIG, "scoring.exopd_lambda"),
    train_page("app-train-no-training", lambda e: e.cfg(), "has no 'training' section"),
    train_page("app-train-bad-method", lambda e: e.cfg(training={"method": "ppo"}), "unknown method 'ppo'"),
    train_page("app-train-out-a-file", lambda e: e.cfg(training={}), "is a file, not a directory",
               out=lambda e: e.file("out", "x")),
    train_page("app-train-out-in-use", lambda e: e.cfg(training={}), "is in use by",
               out=lambda e: e.held(e.tmp / "busy")),
    # --- issue 19: run directories, writes, locks, limits ---
    AppCase("i19-app-summary-is-a-fifo", _open_run(replace_with_fifo("summary.json")), "views/overview.py",
            "summary.json is a named pipe (FIFO)"),
    AppCase("i19-app-summary-deep", _open_run(write("summary.json", deep(100_000))), "views/overview.py",
            "nests deeper than 64 levels"),
    AppCase("i19-app-tokens-missing", _open_run(remove("tokens.parquet")), "views/tokens.py",
            "tokens.parquet is missing"),
    AppCase("i19-app-tokens-of-another-run", _open_run(restamp("tokens", "a" * 32)), "views/tokens.py",
            "belongs to another run"),
    AppCase("i19-app-tokens-wrong-dtype", _open_run(same_stamp("tokens", lambda f: f.assign(pos="x"))),
            "views/signals.py", "column 'pos' holds"),
    # --- end of issue 19 ---
]


# --- issue 19: text, config types, checkpoints, app, signals (the app) ---

def loop(e: Env) -> str:
    (e.tmp / "loop").symlink_to(e.tmp / "loop")
    return str(e.tmp / "loop")


def train_this(e: Env) -> dict:
    """The Train page opened by "Train this" on the shared run's (teacher, r_opd) verdict."""
    return {**_shared(e), "train_this": {"run": str(e.run), "config": "teacher", "signal": "r_opd"}}


APP_CASES += [
    AppCase("app-run-path-nul", _open_run(path=lambda e: str(e.tmp / "a\x00b")), "views/overview.py",
            "contains a NUL character"),
    AppCase("app-run-path-60k", _open_run(path=lambda e: "/" + "a" * 60_000), "views/overview.py",
            "is longer than any path can be (4096 bytes)"),
    AppCase("app-run-path-300-name", _open_run(path=lambda e: str(e.tmp / ("n" * 300))), "views/tokens.py",
            "has a name of 300 bytes; a file or folder name holds at most 255"),
    AppCase("app-run-symlink-loop", _open_run(path=loop), "views/signals.py", "is a symbolic-link loop"),
    AppCase("app-run-newline-escaped", _open_run(path=lambda e: str(e.tmp / "no\nsuch")), "views/overview.py",
            "no\\nsuch"),
    AppCase("app-train-held-out-missing", train_this, "views/train.py",
            "training.eval.data.path: data file missing.jsonl not found",
            lambda e: {"tt_eval": "missing.jsonl"}, "tt_start"),
    AppCase("app-train-held-out-too-long", train_this, "views/train.py", "held-out problems /xxxxxxxx",
            lambda e: {"tt_eval": "/" + "x" * 5000}, "tt_start"),
    train_page("app-train-config-name-300", lambda e: str(e.tmp / ("c" * 300 + ".yaml")),
               "has a name of 305 bytes; a file or folder name holds at most 255"),
    train_page("app-train-out-symlink-loop", lambda e: e.cfg(training={}), "is a symbolic-link loop", out=loop),
    AppCase("app-new-run-config-nul", _shared, "views/new_run.py", "config file 'c\\x00.yaml' contains a NUL",
            lambda e: {"config_path": "c\x00.yaml"}, "validate", {"nr_mode": "file"}),
    AppCase("app-new-run-out-too-long", _shared, "views/new_run.py", "run directory /ooooo",
            lambda e: {"config_path": e.cfg(), "out_dir": "/" + "o" * 5000}, "validate", {"nr_mode": "file"}),
]


@pytest.mark.parametrize("case", APP_CASES, ids=lambda c: c.id)  # an app session per row: well under a second
def test_app_bad_input(case: AppCase, env: Env):
    from streamlit.testing.v1 import AppTest

    state = case.make(env)
    values = case.inputs(env) if case.inputs is not None else {}
    before = tree(env.tmp), tree(env.run)
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = state.get("runs_root", str(env.tmp / "runs"))
    for key, value in state.items():  # run_dir, and what a row opens the page with (train_this)
        at.session_state[key] = value
    at.run()
    at.switch_page(case.page).run()
    for key, value in (case.choices or {}).items():
        widget = next(w for kind in ("radio", "selectbox") for w in at.get(kind) if w.key == key)
        widget.set_value(value).run()
    for key, value in values.items():
        at.text_input(key=key).input(value).run()
    if case.button is not None:
        at.button(key=case.button).click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any(case.expect in m for m in errors), errors
    assert not any("Traceback" in m for m in errors)
    # the New diagnosis form keeps its entries in a draft (runs/.drafts/, issue 23): form state, not output
    drafts = lambda t: {k: v for k, v in t.items() if not k.startswith("runs/.drafts") and k != "runs"}  # noqa: E731
    assert (drafts(tree(env.tmp)), tree(env.run)) == (drafts(before[0]), before[1])


# --- issue 19: text, config types, checkpoints, app, signals (tests beside the rows) ---

def _page(env: Env, page: str, runs_root: Path, run_dir: str | None, query_run: str | None = None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["runs_root"] = str(runs_root)
    if query_run is not None:
        at.query_params["run"] = query_run
    else:
        at.session_state["run_dir"] = run_dir
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _deep(n: int = 100_000) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("page", ["views/overview.py", "views/compare.py", "views/train.py", "views/track_record.py"])
def test_app_a_damaged_run_under_runs_is_skipped_with_a_note(env: Env, page: str):
    root = env.tmp / "runs"
    shutil.copytree(env.run, root / "good")
    for name, status in (("nested", '{"kind": "diagnosis", "x": ' + _deep() + "}"), ("torn", "{")):
        (root / name).mkdir()
        (root / name / "status.json").write_text(status)
        (root / name / "manifest.json").write_text("{")
    (root / "loop").symlink_to(root / "loop")
    at = _page(env, page, root, str(root / "good"))
    notes = [c.value for c in at.sidebar.caption]
    assert any("skipped, unreadable" in n and "nested" in n for n in notes), notes
    assert not [e.value for e in at.error if "Traceback" in e.value]
    if page == "views/overview.py":
        assert not at.error and "Overview" in [t.value for t in at.title]


def test_app_query_run_that_the_system_refuses_is_an_error_in_place(env: Env):
    for bad, expect in (("/" + "q" * 60_000, "is longer than any path can be"), (str(env.tmp / "a\x00"), "NUL")):
        at = _page(env, "views/overview.py", env.tmp / "runs", None, query_run=bad)
        assert any(expect in e.value for e in at.error), [e.value for e in at.error]


def _training_run(root: Path, name: str, records: list[dict], prediction: dict | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("student: {model: x}\n")
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    jobs.write_status(d, "finished", owner=False, kind="training", step="two", max_steps=[2], method="opd",
                      updated="yesterday")
    if prediction is not None:
        (d / "prediction.json").write_text(json.dumps(prediction))
    return d


def test_app_non_numeric_metrics_show_as_missing_on_track_record_and_compare(env: Env):
    root = env.tmp / "runs"
    bad = [{"kind": "eval", "step": 0, "pass@1": "high"}, {"kind": "train", "step": "1", "loss": "nan?"},
           {"kind": "train", "step": 1, "loss": True, "lr": [1]}, {"kind": "eval", "step": "end", "pass@1": None},
           ["not", "a", "record"], {"kind": "eval", "step": 2, "pass@1": 0.5, "kl_to_initial": "x"}]
    _training_run(root, "odd", bad, {"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": "big"})
    _training_run(root, "plain", [{"kind": "eval", "step": 0, "pass@1": 0.25},
                                  {"kind": "eval", "step": 2, "pass@1": 0.5}],
                  {"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.1})
    at = _page(env, "views/track_record.py", root, None)
    assert not at.error, [e.value for e in at.error]
    board = at.dataframe[0].value
    assert board.set_index("run").loc["plain", "gain"] == pytest.approx(0.25)
    assert board.set_index("run")["score"].isna().tolist().count(True) == 1  # the text score is missing
    at = _page(env, "views/compare.py", root, None)
    at.radio(key="cmp_what").set_value("training").run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert set(at.dataframe[0].value["run"]) == {"odd", "plain"}


EVIL = "![pixel](http://127.0.0.1:9/p.png) [click](http://127.0.0.1:9/) <img src=http://127.0.0.1:9/i> :red[x]"


def test_app_renders_a_crafted_summarys_text_as_text(env: Env):
    """Markdown in a received summary.json (an image from a server, a link) is shown as written, never rendered."""
    def craft(run: Path) -> None:
        s = json.loads((run / "summary.json").read_text())
        s["verdicts"] = {"teacher": {"r_opd": {"verdict": "helps", "reason": EVIL, "score": 0.3}}}
        s["ranking"] = [{"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.3}]
        s["verdict_rule"], s["context_truncated"] = EVIL, {EVIL: 1}
        s["ideal"] = {"status": "skipped", "reason": EVIL, "estimator": EVIL}
        (run / "summary.json").write_text(json.dumps(s))

    run = env.run_copy(craft)
    at = _page(env, "views/overview.py", env.tmp / "runs", str(run))
    rendered = [m.value for kind in ("markdown", "caption", "info", "warning", "error", "success")
                for m in at.get(kind)]
    assert any("127.0.0.1:9/p.png" in r for r in rendered + [t.value for t in at.text])  # it is shown...
    for r in rendered:  # ...but no markdown image, link or directive of it survives in what is rendered as markdown
        assert "![" not in r and "](" not in r and ":red[x]" not in r, r  # (the app's own badges may colour)
    assert any(EVIL in t.value for t in at.text)  # reason and rule: plain text elements


@pytest.mark.slow
def test_an_untouched_checkpoint_passes_every_check(env: Env, capsys):
    """The checks refuse only what is wrong: the checkpoint as written resumes (to 'nothing to do')."""
    from trainer import checkpoint

    argv = trained_run(env, lambda ckpt: None)
    ckpt = env.tmp / "trained" / "checkpoints" / "step-000001"
    state, rng = checkpoint.read_state(ckpt, 0, str(env.world / "student"))
    assert state["step"] == 1 and rng is not None
    assert train_cli.main(argv) == 0, capsys.readouterr().err
    assert "nothing to do" in capsys.readouterr().out


def test_report_escapes_a_runs_text_for_the_terminal(env: Env, capsys):
    def craft(run: Path) -> None:
        s = json.loads((run / "summary.json").read_text())
        s["ideal"] = {"status": "skipped", "estimator": "ours", "reason": "done\x1b]0;pwned\x07\x1b[2J\nfake line"}
        (run / "summary.json").write_text(json.dumps(s))

    run = env.run_copy(craft)
    assert diag_cli.main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "ideal-gradient predictor: done\\x1b]0;pwned\\x07\\x1b[2J\\nfake line" in out
