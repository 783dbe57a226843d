"""Hostile and broken inputs beyond the corpus (tests/test_bad_inputs.py): one writer per run directory
(two real processes), NaN and inf never silent (diagnosis and training), half precision on the CPU, the
job protocol's lock and stop, and the app never running code because a run was opened."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from fixtures_trainer import config_dict, one_thread, world  # noqa: F401 (fixtures)

from opsd_diag import jobs
from opsd_diag.errors import NonFiniteLogits, OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def diag_config(world: Path, **over) -> dict:
    cfg = {"student": {"model": str(world / "student")}, "base": {"model": str(world / "base")},
           "teachers": [{"name": "teacher", "model": str(world / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": str(world / "dev.jsonl")},
           "sampling": {"num_samples": 2, "max_completion_length": 8, "teacher_samples": 0},
           "analysis": {"bootstrap": 10, "checker": "toy"}, "shard_size": 3}
    cfg.update(over)
    return cfg


def poisoned_teacher(world: Path, out: Path, every: int = 8) -> Path:
    """The world's teacher whose input embeddings are NaN for some token ids that no prompt contains.

    Its logits are finite on every prompt (so the load-time check passes), and NaN at every position of
    a rollout in which the student sampled such a token (in attention a masked NaN value still meets a
    zero weight, and 0 * NaN is NaN), so some rollouts break and the others stay finite.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from opsd_diag.io import templates
    from opsd_diag.config.spec import DataSpec
    from opsd_diag.io.data import load_problems
    from opsd_diag.io.views import encode_chat, student_view

    tok = AutoTokenizer.from_pretrained(world / "teacher")
    seen = set(tok.all_special_ids) | {tok.pad_token_id, tok.eos_token_id}
    for name in ("train.jsonl", "dev.jsonl"):
        for p in load_problems(DataSpec(path=str(world / name))):
            seen |= set(student_view(tok, p).ids)
            for ctx in templates.BUILTIN:  # every privileged view too
                text = templates.render(templates.resolve(ctx), templates.context_fields(p))
                seen |= set(encode_chat(tok, [{"role": "user", "content": text}]))
    model = AutoModelForCausalLM.from_pretrained(world / "teacher")
    model.config.tie_word_embeddings = False
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False)
    head.weight.data = model.get_output_embeddings().weight.data.clone()
    model.lm_head = head
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        for t in range(emb.shape[0]):
            if t not in seen and t % every == 0:
                emb[t] = float("nan")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def one_error_line(stderr: str, prog: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.startswith(f"{prog}: error: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


# ------------------------------------------------------------------- one writer per run directory

def _wait_running(out: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while (jobs.read_status(out) or {}).get("status") != "running":
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "the first run never started"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_second_diagnosis_on_the_same_out_is_refused_naming_the_first(world, tmp_path):
    from opsd_diag.run import Run
    from opsd_diag.zoo import task

    data = tmp_path / "many.jsonl"
    n = 120  # long enough that the first is still writing when the second has started (a fast CPU did 40 first)
    data.write_text("".join(json.dumps(p) + "\n" for p in task.generate(n, 3)))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(diag_config(world, data={"path": str(data)}, shard_size=2,
                                              sampling={"num_samples": 2, "max_completion_length": 16,
                                                        "teacher_samples": 0})))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "opsd_diag.cli", "run", str(cfg), "--out", str(out), "--quiet"]
    first = subprocess.Popen(argv, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(out, first)
        second = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
        assert first.poll() is None, "the first run ended before the second started: make it longer"
        assert second.returncode == 2, second.stderr
        line = one_error_line(second.stderr, "opsd-diag")
        assert f"is in use by opsd-diag run pid {first.pid}" in line
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    run = Run.load(out)  # finished and whole: every rollout once, every shard once, nothing half-written
    assert run.manifest["status"] == "finished" and jobs.read_status(out)["status"] == "finished"
    assert len(run.rollouts) == n * 2 and run.rollouts["rollout_id"].is_unique
    assert sorted(p.name for p in (out / "shards").iterdir()) == [f"{i:05d}" for i in range(n // 2)]
    assert set(run.tokens["rollout_id"]) <= set(run.rollouts["rollout_id"])


@pytest.mark.slow
def test_a_second_training_run_on_the_same_out_is_refused_naming_the_first(world, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config_dict(world, max_steps=200, save_steps=0)))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "trainer", str(cfg), "--out", str(out)]
    first = subprocess.Popen(argv, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(out, first)
        for extra in ([], ["--resume"]):  # as a new run, and as a resume of the running one
            second = subprocess.run(argv + extra, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
            assert second.returncode == 2, second.stderr
            assert f"is in use by opsd-train pid {first.pid}" in one_error_line(second.stderr, "opsd-train")
        assert first.poll() is None, "the first run ended before the second started: make it longer"
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    steps = [json.loads(ln)["step"] for ln in (out / "metrics.jsonl").read_text().splitlines()
             if json.loads(ln)["kind"] == "train"]
    assert steps == list(range(1, 201))  # every step once: the second writer wrote nothing
    assert jobs.read_status(out)["status"] == "finished"
    assert (out / "command.txt").read_text().count("\n") == 1  # one segment: the refused ones left no line


def test_check_free_names_the_holder_and_creates_nothing(tmp_path):
    out = tmp_path / "run"
    jobs.check_free(out)  # nothing there: free, and still nothing there
    assert not out.exists()
    lock = jobs.acquire_lock(out, "opsd-diag run")
    try:
        with pytest.raises(OpsdError, match=f"is in use by opsd-diag run pid {os.getpid()} "):
            jobs.check_free(out)
        with pytest.raises(OpsdError, match=f"is in use by opsd-diag run pid {os.getpid()} "):
            jobs.acquire_lock(out, "opsd-train")
    finally:
        lock.close()
    jobs.check_free(out)  # released with its holder


def test_a_stale_lock_is_taken_over_with_a_message(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / jobs.LOCK).write_text("opsd-diag run pid 999999 (started 2020-01-01 00:00:00)")  # its holder is gone
    jobs.check_free(out)
    lock = jobs.acquire_lock(out, "opsd-train")
    lock.close()
    assert "taking over" in capsys.readouterr().err
    assert f"opsd-train pid {os.getpid()}" in (out / jobs.LOCK).read_text()


def test_a_lock_or_log_that_is_a_link_is_never_followed(tmp_path):
    """A crafted run folder cannot make the tool truncate or append to a file elsewhere."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "run"
    out.mkdir()
    (out / jobs.LOCK).symlink_to(victim)
    jobs.check_free(out)  # not read through the link either
    with pytest.raises(OpsdError, match=r"\.lock is a symbolic link: a run's files are never followed"):
        jobs.acquire_lock(out)
    (out / jobs.LOCK).unlink()
    (out / jobs.LOG).symlink_to(victim)
    with pytest.raises(OpsdError, match=r"stdout\.log is a symbolic link"):
        jobs.start([sys.executable, "-c", "print('appended')"], out, "diagnosis")
    assert victim.read_text() == "keep me"


def test_stop_signals_only_the_group_it_started(tmp_path):
    """A status.json naming a live process group whose leader started at another time (a reused pid, an
    edited file) gets the STOP file and no signal."""
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        run = tmp_path / "run"
        run.mkdir()
        jobs.write_status(run, "running", kind="training")  # this process writes it: the run reads as alive
        jobs.write_status(run, pgid=bystander.pid, leader_start_time=jobs.process_start_time(bystander.pid) + 1)
        jobs.stop(run)
        time.sleep(0.3)
        assert bystander.poll() is None, "a process the tool did not start was signalled"
        assert (run / jobs.STOP).exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_stop_needs_the_lock_or_the_launch_not_just_a_matching_status_file(tmp_path):
    """A crafted status.json naming a live group with its exact leader start time (both world-readable in
    /proc) gets no signal; a group that holds the run's lock, or that ``start`` launched for this folder, does."""
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(60)")  # the run lock: an flock on the folder itself
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    other = tmp_path / "other"
    other.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", hold, str(other)], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for victim in (bystander, holder):  # holder holds another folder's lock, not this one's
            run = tmp_path / f"crafted{victim.pid}"
            run.mkdir()
            (run / jobs.LOCK).write_text("")
            jobs.write_status(run, "running", kind="training")
            jobs.write_status(run, pgid=victim.pid, leader_start_time=jobs.process_start_time(victim.pid))
            jobs.stop(run)
            time.sleep(0.3)
            assert victim.poll() is None, "a process the run does not own was signalled"

        jobs.write_status(other, "running", kind="training")  # the lock holder's own folder: it is signalled
        jobs.write_status(other, pgid=holder.pid, leader_start_time=jobs.process_start_time(holder.pid))
        jobs.stop(other)
        assert holder.wait(timeout=10) == -15
    finally:
        for p in (bystander, holder):
            p.kill()
            p.wait()

    launched = tmp_path / "launched"  # before its lock is taken, a launched run is stopped by its environment
    job = jobs.start(["sleep", "60"], launched, "diagnosis")
    jobs.stop(launched)
    deadline = time.time() + 10
    while jobs.alive(job.pid, None) and time.time() < deadline:
        time.sleep(0.05)
    assert not jobs.alive(job.pid, None)


def _spawned_workers(parent: int) -> list[int]:
    """The multiprocessing workers ``parent`` spawned (Linux /proc; not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if ppid == parent and b"multiprocessing.spawn" in cmd:
            found.append(int(stat.parent.name))
    return found


def _ignores_ctrl_c(pid: int) -> bool:
    """The worker has run the build's initializer (SIGINT ignored: bit 1 of SigIgn in /proc/PID/status)."""
    try:
        mask = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("SigIgn:"))
        return bool(int(mask.split()[1], 16) & (1 << (signal.SIGINT - 1)))
    except (OSError, StopIteration, ValueError, IndexError):
        return False


def _running(pid: int) -> bool:
    """The process exists and is no zombie (a killed worker's parent may not have reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _square(x: int) -> int:
    return x * x


def _fail_or_wait(x: int) -> int:
    if x < 0:
        raise ValueError(f"chain {x} failed")
    time.sleep(x)
    return x


def test_the_build_s_workers_return_in_order_and_a_chain_s_error_ends_them_at_once():
    """``_train_in_workers`` (the full build's two spawned workers), with stand-in chains: the results in the chains'
    order; a chain that fails ends the build at once with its error, the other worker (a minute of work) ended too."""
    from opsd_diag.zoo import build

    assert build._train_in_workers([(2,), (3,)], _square) == [4, 9]
    start = time.time()
    with pytest.raises(ValueError, match="chain -1 failed"):
        build._train_in_workers([(60,), (-1,)], _fail_or_wait)
    assert time.time() - start < 40  # not the other chain's minute


@pytest.mark.parametrize("stop", ["term", "int", "kill"],
                         ids=["sigterm-to-the-build", "ctrl-c-to-the-group", "sigkill-to-the-build"])
def test_a_stop_ends_a_full_zoo_build_and_its_workers_at_once(tmp_path, stop):
    """SIGTERM to ``opsd-diag zoo build`` (a stop from a job manager, or ``timeout``), or Ctrl-C to its whole process
    group, ends the two training workers at once instead of waiting out minutes of training: the build exits 130
    with its one-line message and leaves neither models nor its staging folder nor a worker behind. A build killed
    outright (SIGKILL, the OOM killer) cannot clean up, but its workers end with it instead of training on."""

    out, workers = tmp_path / "models", []
    proc = subprocess.Popen([sys.executable, "-m", "opsd_diag.cli", "zoo", "build", "--world",
                             str(REPO / "sample_data" / "worlds" / "kiln.yaml"), "--out", str(out),
                             "--problems-dir", str(tmp_path / "problems")],
                            env={**ENV, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread's stack
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # its own group: Ctrl-C reaches the build and its workers only
                            # as a terminal's foreground job: a test run started in the background (`cmd &`) ignores
                            # SIGINT, and an ignored SIGINT is inherited, so the build would never see the Ctrl-C
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 120
        while len(workers) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
            workers = _spawned_workers(proc.pid)
        assert len(workers) == 2, "the full build never started its two training workers"
        while not all(map(_ignores_ctrl_c, workers)) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)  # started: imports done (seconds on a busy CI machine), the build's initializer run
        time.sleep(3)  # both chains are training (kiln's take minutes)
        if stop == "int":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if stop == "term" else signal.SIGKILL)
        try:
            err = proc.communicate(timeout=60)[1]  # before the fix: until both chains had finished training
        except subprocess.TimeoutExpired:  # say where it hung: the build's stacks, or a worker holding stderr open
            state = "still running" if proc.poll() is None else f"exited {proc.returncode}, stderr still open"
            alive = [pid for pid in workers if _running(pid)]
            if proc.poll() is None:
                proc.send_signal(signal.SIGABRT)
            for pid in workers:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            dump = proc.communicate(timeout=30)[1]
            pytest.fail(f"the build did not end within 60 s of the stop: {state}; workers alive {alive}\n{dump}")
        deadline = time.time() + 10
        while any(map(_running, workers)) and time.time() < deadline:
            time.sleep(0.1)  # a terminated worker is reaped by the build's own shutdown, an orphan by init
        alive = [pid for pid in workers if _running(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:  # a failed check leaves no training behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert not alive, "a training worker outlived the build"
    assert not out.exists()
    if stop == "kill":  # before PR_SET_PDEATHSIG: the orphaned workers held stderr open, trained on for minutes
        assert proc.returncode == -signal.SIGKILL
        return
    assert proc.returncode == 130, err
    assert "opsd-diag: interrupted; run zoo build again" in err and "Traceback" not in err, err
    assert not list(tmp_path.glob(".zoo-build-*"))


def test_a_stop_while_loading_reads_stopped_not_died(world, tmp_path, monkeypatch, capsys):
    """SIGTERM raises KeyboardInterrupt from the CLI's first moment (and the old handler comes back); a stop
    that lands while the models load leaves ``stopped`` with a plain message, for both CLIs; a process the
    stop ended before any handler (interpreter start-up) reads ``stopped`` too, by its STOP file."""

    from opsd_diag import cli as diag_cli
    from opsd_diag.argparser import stop_as_interrupt
    from opsd_diag.engine import diagnose
    from trainer import cli as train_cli
    from trainer import loop

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), stop_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal arrives first
    assert signal.getsignal(signal.SIGTERM) is before

    def stopped_while_loading(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config_dict(world)))
    monkeypatch.setattr(diagnose, "prepare", stopped_while_loading)
    monkeypatch.setattr(loop, "prepare", stopped_while_loading)
    for prog, main, argv in (("diag", diag_cli.main, ["run", str(cfg)]), ("train", train_cli.main, [str(cfg)])):
        out = tmp_path / prog
        argv = [*argv, "--out", str(out)]
        out.mkdir()
        jobs.write_status(out, "starting", owner=False, kind=prog, argv=argv)  # as jobs.start leaves it
        monkeypatch.setenv(jobs.ARGV_ENV, json.dumps(argv))
        assert main(argv) == 130
        st = jobs.status(out)
        assert (st["status"], st["error"]) == ("stopped", jobs.STOPPED_EARLY), prog
        assert signal.getsignal(signal.SIGTERM) is before
    assert "Traceback" not in capsys.readouterr().err

    early = tmp_path / "early"
    job = jobs.start([sys.executable, "-c", "import time; time.sleep(60)"], early, "diagnosis")
    jobs.stop(early)  # no handler there: SIGTERM ends it at once
    deadline = time.time() + 10
    while jobs.alive(job.pid, None) and time.time() < deadline:
        time.sleep(0.05)
    assert jobs.status(early)["status"] == "stopped"
    (early / jobs.STOP).unlink()
    assert jobs.status(early)["status"] == "died"  # gone without a stop: died
    (early / jobs.STOP).touch()  # an earlier segment's stop does not stop the next one
    jobs.start([sys.executable, "-c", "pass"], early, "diagnosis")
    assert not (early / jobs.STOP).exists()


# ------------------------------------------------------------------------------ NaN and inf

def test_sampling_from_nan_logits_is_a_clear_error(world):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from opsd_diag.engine import decode
    from opsd_diag.engine.fast.fast_decode import sample_static
    from opsd_diag.engine.sampling import sample_hf
    from opsd_diag.config.settings import SamplingSettings

    tok = AutoTokenizer.from_pretrained(world / "student")
    model = AutoModelForCausalLM.from_pretrained(world / "student").eval()
    with torch.no_grad():
        model.get_output_embeddings().weight[5, 0] = float("inf")
    s = SamplingSettings(num_samples=2, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0, batch_size=4)
    prompt = tok("Start at 1.", add_special_tokens=False)["input_ids"]
    for sampler in (decode.sample, sample_hf, sample_static):  # trainer's loop, diagnosis' generate, static engine
        with pytest.raises(NonFiniteLogits) as e:
            sampler(model, tok, [prompt], s, [tok.eos_token_id])
        assert e.value.position == 0 and "non-finite logits" in str(e.value)


def test_half_precision_on_the_cpu_warns(world, capsys):
    from opsd_diag.io.models import load_model

    load_model(str(world / "student"), dtype="float32", device="cpu")
    assert "warning" not in capsys.readouterr().err
    load_model(str(world / "student"), dtype="bfloat16", device="cpu")
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning")]
    assert len(warned) == 1 and warned[0].startswith("warning: model") and "bfloat16 on the CPU" in warned[0]


@pytest.mark.slow
def test_a_nan_teacher_stops_the_diagnosis_naming_model_and_position(world, tmp_path):
    bad = poisoned_teacher(world, tmp_path / "poisoned")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(diag_config(world, teachers=[{"name": "bad", "model": str(bad)},
                                                               {"name": "self_full", "context": "full_solution"}])))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", str(cfg), "--out", str(out), "--quiet"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-3000:]
    line = one_error_line(r.stderr, "opsd-diag")
    assert f"teacher config 'bad' (model '{bad}') produced non-finite logits (NaN or inf) scoring rollout" in line
    assert "at completion position" in line and "scoring.allow_nonfinite: true" in line
    st = jobs.read_status(out)  # the run had started (the prompts are finite): it says why it stopped
    assert st["status"] == "failed" and st["error"] in line
    assert not (out / "summary.json").exists()


@pytest.mark.slow
def test_a_nan_teacher_with_allow_nonfinite_gives_nan_in_every_column_it_enters(world, tmp_path):
    from opsd_diag.core.signals import READS
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict
    from opsd_diag.run import Run

    bad = poisoned_teacher(world, tmp_path / "poisoned")
    cfg = diag_config(world, teachers=[{"name": "bad", "model": str(bad)},
                                       {"name": "self_full", "context": "full_solution"}],
                      scoring={"allow_nonfinite": True})
    run = Run.load(run_diagnosis(from_dict(cfg), tmp_path / "run", show_progress=False))
    tokens = run.tokens
    b = tokens[tokens["config"] == "bad"]
    broken = b["h_t"].isna()
    assert 0 < broken.sum() < len(b), "the poisoned teacher should break some rollouts, not all"
    teacher_cols = list(READS["teacher"])
    assert b.loc[broken, teacher_cols].isna().all().all()  # rank_t, top1_agree, gate too: no 0 next to NaN
    assert np.isfinite(b.loc[~broken, teacher_cols].to_numpy(dtype=float)).all()
    student_cols = ["lp_s", "h_s", "lp_b", "h_b"]
    assert np.isfinite(b[student_cols].to_numpy(dtype=float)).all()
    good = tokens[tokens["config"] == "self_full"][list(SIGNAL_COLUMNS)]
    assert np.isfinite(good.to_numpy(dtype=float)).all()
    # the aggregates skip what is NaN (and summary.json, which refuses NaN, was written)
    assert run.summary.configs["bad"] is not None and run.manifest["status"] == "finished"


@pytest.mark.slow
def test_a_nan_teacher_stops_training_before_any_optimizer_step(world, tmp_path, monkeypatch, capsys):
    from trainer import cli

    bad = poisoned_teacher(world, tmp_path / "poisoned")
    d = config_dict(world, max_steps=3)
    d["teachers"][0]["model"] = str(bad)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(d))
    steps = []
    real_step = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: (steps.append(1), real_step(self, *a, **k)))
    out = tmp_path / "run"
    assert cli.main([str(cfg), "--out", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err, "opsd-train")
    assert f"teacher 'teacher' (model '{bad}') produced non-finite logits (NaN or inf) at completion position" in line
    assert "no optimizer step was taken" in line
    assert steps == []  # the NaN loss never reached the weights
    assert not (out / "checkpoints").exists() or not any((out / "checkpoints").iterdir())
    assert not (out / "metrics.jsonl").exists() or "train" not in (out / "metrics.jsonl").read_text()
    st = jobs.read_status(out)
    assert st["status"] == "failed" and st["error"] in line


# ---------------------------------------------------------------------------------- the app

def _crafted_run(tmp: Path) -> tuple[Path, Path]:
    """A finished run whose manifest points the student at a folder whose tokenizer and model come with
    code (``auto_map``) that would leave a marker file, and asks for remote code."""
    from test_report import fake_run

    marker = tmp / "PWNED"
    evil = tmp / "evil_model"
    evil.mkdir()
    (evil / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                  "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n")
    (evil / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "EvilTokenizer", "auto_map": {"AutoTokenizer": [None, "evil.EvilTokenizer"]}}))
    (evil / "config.json").write_text(json.dumps({"model_type": "evil", "auto_map": {
        "AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}}))
    run = fake_run(tmp / "runs" / "crafted").path
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["student"] = {"model": str(evil), "trust_remote_code": True, "allow_download": True}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run, marker


def test_opening_a_crafted_run_never_runs_its_code(tmp_path):
    from streamlit.testing.v1 import AppTest

    from opsd_diag.run import Run

    run, marker = _crafted_run(tmp_path)
    assert Run.load(run).tokenizer() is None  # remote code off, whatever the manifest says: ids are shown
    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60)
    at.session_state["runs_root"] = str(run.parent)
    at.session_state["run_dir"] = str(run)
    at.run()
    for page in ("views/overview.py", "views/tokens.py", "views/signals.py", "views/export.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    assert not marker.exists(), "opening a run executed code from its folder"


def test_the_stop_button_goes_through_the_job_protocol(tmp_path, monkeypatch):
    """The Train page's Stop calls opsd_diag.jobs.stop, which signals no process it did not start."""
    from streamlit.testing.v1 import AppTest

    root = tmp_path / "runs"
    run = root / "train-x"
    run.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    calls = []
    real_stop = jobs.stop
    monkeypatch.setattr(jobs, "stop", lambda d, **k: (calls.append(str(d)), real_stop(d, **k))[1])
    try:
        jobs.write_status(run, "running", kind="training", step=1, max_steps=5, argv=["python", "-m", "trainer"])
        jobs.write_status(run, pgid=bystander.pid, leader_start_time=jobs.process_start_time(bystander.pid) + 1)
        at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60)
        at.session_state["runs_root"] = str(root)
        at.session_state["run_dir"] = None
        at.run().switch_page("views/train.py").run()
        at.button(key="train_stop").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert calls == [str(run.resolve())] or calls == [str(run)]
        time.sleep(0.3)
        assert bystander.poll() is None and (run / jobs.STOP).exists()
    finally:
        bystander.kill()
        bystander.wait()


def test_non_finite_logits_in_the_held_out_evaluation_name_the_student(monkeypatch):
    """The evaluation samples too: its NonFiniteLogits becomes one message naming the model and the step."""
    from types import SimpleNamespace

    from opsd_diag.errors import NonFiniteLogits
    from trainer import loop

    def broken(*a, **k):
        raise NonFiniteLogits(0, 3)

    monkeypatch.setattr(loop, "evaluate", broken)
    cfg = SimpleNamespace(student=SimpleNamespace(model="my/student"), base=None, analysis=SimpleNamespace(checker="exact",
                                                                                                    truncated="incorrect"),
                          sampling=SimpleNamespace(engine="hf"))
    spec = SimpleNamespace(eval=None, scoring_temperature=1.0)
    st = SimpleNamespace(tc=SimpleNamespace(cfg=cfg, teacher=None, spec=spec),
                         evals=SimpleNamespace(held_out=SimpleNamespace(problems=[{}]), regression=None), roles=None, tok=None, stop_ids=[0],
                         pad_id=0, chunk_size=8)
    acc = SimpleNamespace(num_processes=1, process_index=0, autocast=None)
    with pytest.raises(OpsdError, match=r"evaluation at step 7: the student model 'my/student' produced non-finite "
                                        r"logits \(NaN or inf\) while sampling, at completion position 3"):
        loop._eval(acc, st, 7, None)


def test_written_files_get_the_users_umask_mode_and_a_clean_end_leaves_no_holder(tmp_path, capsys):
    """Atomic writes go through mkstemp/mkdtemp (0600/0700): the files and shard folders a run or an export
    writes must still be readable as the user's umask allows; a lock released at a normal end is empty, so
    the next run does not announce a take-over."""
    import pandas as pd

    from opsd_diag.io import safe, store

    mask = safe._umask()
    assert mask == safe._UMASK  # read at import, unchanged since
    store.atomic_write_bytes(tmp_path / "a.bin", b"x")
    store.atomic_write_parquet(tmp_path / "t.parquet", pd.DataFrame({"a": [1]}))
    store.write_shard(tmp_path, 0, {"tokens": pd.DataFrame({"a": [1]})})
    for path, want in ((tmp_path / "a.bin", 0o666), (tmp_path / "t.parquet", 0o666),
                       (store.shard_dir(tmp_path, 0), 0o777)):
        assert path.stat().st_mode & 0o777 == want & ~mask, path

    lock = jobs.acquire_lock(tmp_path / "run", "opsd-diag run")
    jobs.release_lock(lock)
    assert (tmp_path / "run" / jobs.LOCK).read_text() == ""
    jobs.release_lock(jobs.acquire_lock(tmp_path / "run", "opsd-diag run"))
    assert "taking over" not in capsys.readouterr().err
