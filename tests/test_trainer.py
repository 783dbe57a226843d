"""The trainer in-process on a tiny random world: every method runs, config errors, invariances."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
import yaml
from fixtures_trainer import build_world, config_dict, one_thread, read_metrics, world, write_config  # noqa: F401 (fixtures)

from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.config.spec import from_dict
from opsd_diag.config import training as config
from trainer import cli
from opsd_diag.engine.train_step import MicroBatch
from trainer.setup import prepare
from opsd_diag.engine.train_step import micro_batch_backward


def resolve(world, **training):
    return config.resolve_training(from_dict(config_dict(world, **training)))


# ------------------------------------------------------------------------------- config errors

@pytest.mark.parametrize("training,needle", [
    ({"lr": 1e-3}, "training.lr: unknown key"),
    ({"method": "ppo"}, "unknown method 'ppo'"),
    ({"teacher": "nope"}, "'nope' is not a configured teacher"),
    ({"method": "opsd", "teacher": "teacher"}, "use method opd"),
    ({"method": "opd", "teacher": "self_full"}, "use method opsd"),
    ({"generation_batch_size": 3}, "generation_batch_size 3"),
    ({"eval": {"num_samples": 2, "pass_k": [4]}}, "pass_k [4]"),
])
def test_config_errors_name_the_key(world, training, needle):
    with pytest.raises(OpsdError) as e:
        resolve(world, **training)
    assert needle in str(e.value)


def test_opd2_without_base_is_refused(world):
    d = config_dict(world, method="opd2")
    del d["base"]
    with pytest.raises(OpsdError, match="opd2' needs a base model"):
        config.resolve_training(from_dict(d))


def test_inherited_settings_are_resolved(world):
    tc = resolve(world, method="jsd", temperature=0.8)
    assert tc.spec.beta == 0.5 and tc.spec.scoring_temperature == 0.8  # scored at the sampling temperature
    assert tc.spec.max_completion_length == 8 and tc.spec.top_p == 1.0
    assert tc.spec.generation_batch_size == 2
    assert config.resolve_training(from_dict(yaml.safe_load(tc.to_yaml()))).to_yaml() == tc.to_yaml()  # idempotent


@pytest.mark.parametrize("case", ["no_base", "unknown_method", "lora_without_peft", "unwritable", "bad_key"])
def test_cli_user_errors_exit_2_and_write_nothing(world, tmp_path, capsys, monkeypatch, case):
    d = config_dict(world)
    out = tmp_path / "runs" / "train-x"
    if case == "no_base":
        d["training"]["method"] = "opd2"
        del d["base"]
    elif case == "unknown_method":
        d["training"]["method"] = "grpo"
    elif case == "lora_without_peft":
        d["training"]["lora"] = {"r": 4}
    elif case == "bad_key":
        d["training"]["eval"] = {"nsamples": 3}
    elif case == "unwritable":
        locked = tmp_path / "locked"
        locked.mkdir()
        os.chmod(locked, 0o500)
        out = locked / "train-x"
        if os.access(locked, os.W_OK):  # root ignores permissions: use a path under a file instead
            (tmp_path / "afile").write_text("")
            out = tmp_path / "afile" / "train-x"
    if case == "lora_without_peft":  # as on a machine without peft, whether or not it is installed here
        monkeypatch.setitem(sys.modules, "peft", None)
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump(d))
    before = sorted(p for p in tmp_path.rglob("*"))
    assert cli.main([str(cfg_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("opsd-train: error: ")
    expected = {"no_base": "needs a base model", "unknown_method": "unknown method 'grpo'",
                "lora_without_peft": "needs the peft package", "unwritable": "--out",
                "bad_key": "training.eval.nsamples: unknown key"}[case]
    assert expected in err[0]
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing half-written


def test_existing_run_needs_resume_and_same_config(world, tmp_path, capsys):
    out = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=1)
    assert cli.main([str(cfg), "--out", str(out)]) == 0
    assert cli.main([str(cfg), "--out", str(out)]) == 2  # exists: needs --resume
    capsys.readouterr()
    assert cli.main([str(cfg), "--out", str(out), "--resume"]) == 0  # finished: says so, trains nothing
    said = capsys.readouterr().out
    assert "already trained to step 1 of 1: nothing to do" in said and "from step" not in said
    other = write_config(tmp_path / "d.yaml", world, max_steps=3)
    assert cli.main([str(other), "--out", str(out), "--resume"]) == 2  # a different config
    assert json.loads((out / "status.json").read_text())["status"] == "finished"


def test_command_line_options_change_a_config_files_training_section(world, tmp_path):
    """--max-steps and friends apply to CONFIG too (they were read only with --from-diagnosis, and a run of
    CONFIG silently trained its own max_steps); nested options merge (eval keeps its other keys)."""
    from opsd_diag.config import training as train_config

    out = tmp_path / "run"
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=3, eval={"data": None, "num_samples": 5})
    assert cli.main([str(cfg), "--out", str(out), "--max-steps", "1", "--seed", "7"]) == 0
    assert [m["step"] for m in read_metrics(out)] == [1]
    stored = yaml.safe_load((out / "config.yaml").read_text())["training"]
    assert (stored["max_steps"], stored["seed"]) == (1, 7)
    assert cli.main([str(cfg), "--out", str(out), "--resume"]) == 2  # resuming needs the same options
    tc = train_config.load(cfg, eval={"data": {"path": str(world / "dev.jsonl")}}, learning_rate=None)
    assert tc.spec.eval.num_samples == 5 and tc.spec.eval.data.path == str(world / "dev.jsonl")
    assert tc.spec.learning_rate == train_config.load(cfg).spec.learning_rate


def test_evaluation_is_a_stage_with_its_progress_and_its_size_is_set_from_the_command_line(world, tmp_path,
                                                                                           monkeypatch):
    """Issue 23 bug 4: the held-out evaluation ran for minutes while status.json said 'step 0 of 6'; its size
    could not be set. Now: stage 'evaluating' with eval_done/eval_total, 'saving', eval_s in metrics.jsonl."""
    import trainer.loop as loop
    from app import estimate

    seen = []
    real = loop.jobs.write_status

    def spy(run_dir, status=None, **fields):
        seen.append({"status": status, **fields})
        return real(run_dir, status, **fields)
    monkeypatch.setattr(loop.jobs, "write_status", spy)
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=2)
    out = tmp_path / "run"
    assert cli.main([str(cfg), "--out", str(out), "--eval-data", str(world / "dev.jsonl"), "--eval-problems", "3",
                     "--eval-samples", "2"]) == 0
    stored = yaml.safe_load((out / "config.yaml").read_text())["training"]["eval"]
    assert (stored["data"]["limit"], stored["num_samples"], stored["pass_k"]) == (3, 2, [1, 2])
    stages = [s.get("stage") for s in seen if s.get("stage")]
    assert stages[0] == "train" and stages.count("saving") == 1
    starts = [s for s in seen if s.get("stage") == "evaluating" and "eval_total" in s]
    assert [s["eval_step"] for s in starts] == [0, 2] and all(s["eval_total"] == 3 for s in starts)
    ticks = [s["eval_done"] for s in seen if s.get("stage") == "evaluating" and "eval_total" not in s]
    assert ticks and ticks[-1] == 3 and ticks == sorted(ticks[: len(ticks) // 2]) + sorted(ticks[len(ticks) // 2:])
    after = [i for i, s in enumerate(seen) if s.get("stage") == "evaluating"]
    assert seen[after[-1] + 1].get("stage") == "train"  # the stage ends when the evaluation does
    evals = read_metrics(out, "eval")
    assert [e["step"] for e in evals] == [0, 2] and all(e["eval_s"] > 0 and e["eval_samples"] == 6 for e in evals)
    for e in evals:  # per problem (index, samples, correct), whose mean share is pass@1
        assert [i for i, _, _ in e["per_problem"]] == [0, 1, 2] and all(n == 2 for _, n, _ in e["per_problem"])
        assert e["pass@1"] == pytest.approx(sum(c / n for _, n, c in e["per_problem"]) / 3)
    assert jobs.read_status(out)["status"] == "finished"
    # the cost estimate times evaluation from this run: seconds per held-out sample, by a plain sum
    r = estimate.rates(tmp_path)
    assert r["timed_from"] == str(out.resolve())
    assert r["eval_sample_s"] == pytest.approx(sum(e["eval_s"] for e in evals) / 12)
    steps = read_metrics(out)
    assert r["step_token_s"] == pytest.approx(sum(m["step_time_s"] for m in steps) / sum(m["tokens"] for m in steps))


def test_eval_steps_from_the_command_line_evaluate_every_n_steps_on_a_real_short_run(world, tmp_path):
    """--eval-steps evaluates every N steps too, besides the start and the end, each with its per-problem counts
    (what the Track record pairs)."""
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=4)
    out = tmp_path / "run"
    assert cli.main([str(cfg), "--out", str(out), "--eval-data", str(world / "dev.jsonl"), "--eval-problems", "3",
                     "--eval-samples", "2", "--eval-steps", "1"]) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["training"]["eval_steps"] == 1
    evals = read_metrics(out, "eval")
    assert [e["step"] for e in evals] == [0, 1, 2, 3, 4]
    for e in evals:  # every evaluation holds its per-problem counts, and pass@1 is their mean share
        assert [i for i, _, _ in e["per_problem"]] == [0, 1, 2]
        assert e["pass@1"] == pytest.approx(sum(c / n for _, n, c in e["per_problem"]) / 3, abs=1e-12)


def test_training_cost_counts_every_evaluation():
    from app import estimate

    for max_steps, eval_steps, at_start in ((6, 0, True), (6, 2, True), (7, 3, False), (0, 0, True), (5, 5, True)):
        expected = int(at_start) + len({s for s in range(1, max_steps + 1) if (eval_steps and s % eval_steps == 0)
                                        or s == max_steps})
        assert estimate.evaluations(max_steps, eval_steps, at_start) == expected, (max_steps, eval_steps)
    w = estimate.work(6, 8, 72, 400, 4)
    assert w == {"step_tokens": 6 * 8 * 72, "evaluations": 2, "eval_samples": 2 * 400 * 4}
    assert estimate.estimate(w, "/nonexistent")["eval_s"] is None


# ------------------------------------------------------------------------------- every method runs

METHODS = [
    {"method": "opd", "clip": 0.5},
    {"method": "jsd", "beta": 0.3, "gradient_checkpointing": True},
    {"method": "opsd", "loss": "jsd", "teacher_weights": "frozen"},
    {"method": "opsd", "loss": "opd", "teacher_weights": "ema", "ema_decay": 0.5},
    {"method": "opsd", "loss": "jsd", "teacher_weights": "live"},
    {"method": "opd2", "centering": "topk=5"},
    {"method": "exopd", "exopd_lambda": 1.25, "exopd_reference": "student"},
    {"method": "exopd", "exopd_reference": "base"},
    {"method": "sft", "sft_target": "{solution}\nAnswer: {answer}"},
]


@pytest.mark.parametrize("training", METHODS, ids=lambda t: "-".join(str(v) for v in t.values()))
def test_every_method_trains_and_saves_a_loadable_checkpoint(world, tmp_path, training):
    from transformers import AutoModelForCausalLM

    dev = {"path": str(world / "dev.jsonl"), "limit": 2}
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=2, num_generations=2, gradient_accumulation_steps=2,
                       eval={"data": dev, "regression": dev, "num_samples": 2, "pass_k": [1, 2]}, **training)
    out = tmp_path / "run"
    assert cli.main([str(cfg), "--out", str(out)]) == 0
    recs = read_metrics(out)
    assert [r["step"] for r in recs] == [1, 2]
    for r in recs:
        assert all(torch.isfinite(torch.tensor(r[k])) for k in ("loss", "lr", "grad_norm", "tokens_per_s"))
        assert r["sampling_temperature"] == 1.0 and r["scoring_temperature"] == 1.0
        if training["method"] != "sft":
            assert {"r_opd", "kl_k1", "kl_k3", "entropy_student", "entropy_teacher", "clipped_ratio"} <= set(r)
    if training["method"] == "opd2":
        assert 0.0 <= recs[0]["gate_fraction"] <= 1.0
    evals = read_metrics(out, "eval")
    assert [e["step"] for e in evals] == [0, 2] and "pass@2" in evals[0]
    assert {"regression_pass@1", "regression_nll"} <= set(evals[0]) and evals[0]["regression_nll"] > 0
    assert evals[0]["kl_to_initial"] == pytest.approx(0.0, abs=1e-6)
    assert json.loads((out / "status.json").read_text())["status"] == "finished"
    ckpt = out / "checkpoints" / "step-000002"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert model.config.vocab_size > 0 and (ckpt / "tokenizer.json").is_file()
    if training.get("teacher_weights") == "ema":
        assert (ckpt / "ema" / "model.safetensors").is_file()
    assert {"config.yaml", "command.txt", "metrics.jsonl", "stdout.log", "status.json", "checkpoints"} <= \
        set(os.listdir(out))


# ------------------------------------------------------------------------------- invariances

def _grads(st, mbs, n_global):
    st.roles.student.zero_grad(set_to_none=True)
    from opsd_diag.engine.train_step import CompletionHidden

    hidden = CompletionHidden(st.roles.student)
    for mb in mbs:
        micro_batch_backward(hidden, st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=st.chunk_size,
                             scale=1.0 / n_global, ref=st.reference)
    return {n: p.grad.clone() for n, p in st.roles.student.named_parameters()}


def _split(mb: MicroBatch, lo: int, hi: int) -> MicroBatch:
    cut = (lambda xs: None if xs is None else xs[lo:hi])
    return MicroBatch(mb.index, mb.problem_idx[lo:hi], cut(mb.student_prompts), cut(mb.teacher_prompts),
                      cut(mb.base_prompts), mb.completions[lo:hi], mb.finished[lo:hi])


@pytest.mark.parametrize("method", ["opd", "jsd", "opd2", "exopd"])
def test_two_half_micro_batches_equal_one_full_batch(world, method):
    """Normalising by the global token count makes accumulation exact (ragged lengths included)."""
    tc = resolve(world, method=method)
    st = prepare(tc, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    rows = list(range(6))
    comps = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (3, 9, 1, 6, 8, 2)]
    full = MicroBatch(0, rows, [st.train.student_prompts[i] for i in rows],
                      [st.train.teacher_prompts[i] for i in rows], [st.train.base_prompts[i] for i in rows],
                      comps, [False] * 6)
    n = full.n_tokens
    one = _grads(st, [full], n)
    two = _grads(st, [_split(full, 0, 3), _split(full, 3, 6)], n)
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-7)


def test_accumulation_run_equals_full_batch_run(world, tmp_path):
    """2 x half micro-batch == 1 x full micro-batch over whole steps (same generation chunks)."""
    runs = {}
    for name, kw in {"full": {"per_device_train_batch_size": 4},
                     "half": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}}.items():
        cfg = write_config(tmp_path / f"{name}.yaml", world, method="jsd", max_steps=3, generation_batch_size=2, **kw)
        assert cli.main([str(cfg), "--out", str(tmp_path / name)]) == 0
        runs[name] = read_metrics(tmp_path / name)
    for a, b in zip(runs["full"], runs["half"]):
        assert a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


# ------------------------------------------------------------------------------- run directory, launch

def test_stop_file_saves_and_resume_finishes_like_an_uninterrupted_run(world, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", world, method="opd", max_steps=4, save_steps=3)
    assert cli.main([str(cfg), "--out", str(tmp_path / "ref")]) == 0
    out = tmp_path / "run"
    out.mkdir()
    (out / "stdout.log").write_text("")  # a job directory before the run writes
    real_step = __import__("trainer.loop", fromlist=["train_step"]).train_step

    def stop_after_two(acc, st, *a, **kw):
        rec = real_step(acc, st, *a, **kw)
        if a[-1] == 1:  # the second step: ask for a graceful stop
            (out / jobs.STOP).touch()
        return rec

    import trainer.loop as loop
    loop.train_step, saved = stop_after_two, loop.train_step
    try:
        assert cli.main([str(cfg), "--out", str(out)]) == 0
    finally:
        loop.train_step = saved
    assert jobs.read_status(out)["status"] == "stopped"
    assert (out / "checkpoints" / "step-000002").is_dir()
    assert (out / jobs.STOP).exists()  # left behind: the resume must not stop at once
    assert cli.main([str(cfg), "--out", str(out), "--resume"]) == 0
    assert jobs.read_status(out)["status"] == "finished"
    from fixtures_trainer import without_time
    assert without_time(read_metrics(out)) == without_time(read_metrics(tmp_path / "ref"))


def test_launch_command_and_run_discovery(world, tmp_path):
    argv = jobs.training_command("c.yaml", "runs/train-a")
    assert argv[1:] == ["-m", "trainer", "c.yaml", "--out", "runs/train-a"]
    argv2 = jobs.training_command("c.yaml", "runs/train-a", num_processes=2, resume=True)
    assert argv2[1:3] == ["-m", "accelerate.commands.launch"] and "--num_processes" in argv2
    assert argv2[-6:] == ["-m", "trainer", "c.yaml", "--out", "runs/train-a", "--resume"]
    run = tmp_path / "runs" / "train-x"
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=1)
    assert cli.main([str(cfg), "--out", str(run)]) == 0
    assert jobs.find_runs(tmp_path / "runs", "training") == [run]
    f = jobs.Follower(run)
    recs = f.poll()
    assert [r["kind"] for r in recs] == ["train"] and f.poll() == []
    st = jobs.status(run)
    assert st["status"] == "finished"  # (alive: this test process ran it in-process)


def test_a_crash_is_recorded_as_failed_with_its_message(world, tmp_path, monkeypatch):
    import trainer.loop as loop

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(loop, "train_step", boom)
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        cli.main([str(cfg), "--out", str(tmp_path / "run")])
    st = jobs.read_status(tmp_path / "run")
    assert st["status"] == "failed" and "simulated crash" in st["error"]


def test_user_error_in_a_launched_job_is_reported_in_status(world, tmp_path, monkeypatch):
    d = config_dict(world)
    d["student"]["model"] = str(tmp_path / "no-such-model")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(d))
    out = tmp_path / "run"
    out.mkdir()
    argv = jobs.training_command(cfg, out)  # what jobs.start leaves before the process writes anything
    (out / "stdout.log").write_text("")
    jobs.write_status(out, "starting", owner=False, argv=argv)
    monkeypatch.setenv(jobs.ARGV_ENV, json.dumps(argv))
    assert cli.main([str(cfg), "--out", str(out)]) == 2
    st = jobs.read_status(out)
    assert st["status"] == "failed" and "no-such-model" in st["error"]
    assert sorted(os.listdir(out)) == [".lock", "status.json", "stdout.log"]  # .lock: status updates lock it
    assert (out / ".lock").read_text() == ""


def test_the_bundled_training_example_resolves():
    """The documented example (docs/training.md) (sample_data/configs/train_opsd.yaml) stays a valid opsd run."""
    from conftest import REPO

    tc = config.load(REPO / "sample_data/configs/train_opsd.yaml")
    assert tc.spec.method == "opsd" and tc.spec.loss_method == "jsd" and tc.spec.teacher_weights == "frozen"
    assert tc.teacher.is_self and tc.teacher.context == "full_solution"
    assert tc.spec.eval.data is not None and tc.spec.eval.temperature == tc.spec.temperature
    for path in (tc.cfg.student.model, tc.spec.data.path, tc.spec.eval.data.path):  # relative to the repository
        assert (REPO / path).exists(), path


# ------------------------------------------------------------------------------- packed forward, sampler

def _world_models(world):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(world / "student")
    models = {name: AutoModelForCausalLM.from_pretrained(world / name).eval() for name in ("student", "teacher")}
    return tok, models


def test_length_groups_cover_every_row_once_and_cut_long_tails():
    from opsd_diag.engine.scoring import length_groups

    for lengths in ([5], [7, 7, 7, 7], [3, 90, 4, 88, 5, 91, 6, 2], list(range(1, 200, 3))):
        groups = length_groups(lengths)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert length_groups([]) == []
    assert length_groups([7, 7, 7, 7]) == [[0, 1, 2, 3]]  # nothing to gain from a split
    assert len(length_groups([300] * 4 + [40] * 12)) == 2  # a long tail gets its own pass


def _left_padded_hidden(model, prompts, completions, pad_id):
    """Reference: one left-padded batch with an attention mask (every row padded to the longest)."""
    from benchmarks.reference import pack

    ids, att, pos, cmask = pack(prompts, completions, pad_id)
    P = ids.shape[1] - cmask.shape[1]
    out = model.base_model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=False)
    return out.last_hidden_state[:, P - 1:-1][cmask]  # [N, H]


def test_completion_hidden_equals_the_left_padded_layout_and_ignores_batch_composition(world):
    """Right padding, no mask and length groups change the cost, never a row's hidden states (pitfall 2)."""
    from opsd_diag.engine.scoring import completion_hidden

    tok, models = _world_models(world)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (5, 17, 9, 30, 12, 8, 22)]
    comps = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (40, 3, 0, 25, 1, 33, 9)]
    for model in models.values():
        with torch.no_grad():
            ref = _left_padded_hidden(model, prompts, comps, tok.pad_token_id)
            got = completion_hidden(model, prompts, comps, tok.pad_token_id)
            assert got.shape == ref.shape == (sum(map(len, comps)), model.config.hidden_size)
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
            part = completion_hidden(model, prompts[3:5], comps[3:5], tok.pad_token_id)  # rows 3-4 alone
            lo = sum(map(len, comps[:3]))
            torch.testing.assert_close(part, got[lo:lo + part.shape[0]], rtol=1e-4, atol=1e-5)
    empty = completion_hidden(models["student"], prompts[:2], [[], []], tok.pad_token_id)  # pitfall 9
    assert empty.shape == (0, models["student"].config.hidden_size) and empty.requires_grad


def test_sampler_decode_step_equals_each_row_alone(world):
    """A decode step over a left-padded batch (4-D mask on SDPA, 2-D on eager) gives each row's unpadded logits."""
    import inspect

    from transformers import AutoModelForCausalLM, DynamicCache

    from opsd_diag.engine import decode as sampler
    from opsd_diag.engine.sampling import cache_kwarg

    g = torch.Generator().manual_seed(8)
    rows = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (3, 11, 7)]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])  # [3, W] left-padded
    att = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])  # [3, W]
    pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 1)
    nxt = torch.tensor([[5], [6], [7]])
    for impl in ("sdpa", "eager"):
        model = AutoModelForCausalLM.from_pretrained(world / "student", attn_implementation=impl).eval()
        kw = cache_kwarg(inspect.signature(model.forward).parameters)
        cache = DynamicCache(config=model.config)
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, **{kw: cache})
            att2 = torch.cat([att, att.new_ones((3, 1))], dim=1)
            step_mask = sampler._one_token_mask(model)(att2)
            got = model(input_ids=nxt, attention_mask=step_mask, position_ids=pos[:, -1:] + 1, use_cache=True,
                        **{kw: cache}).logits[:, -1]  # [3, V]
            for i, r in enumerate(rows):
                alone = model(input_ids=torch.tensor([r + nxt[i].tolist()])).logits[0, -1]  # [V] no padding at all
                torch.testing.assert_close(got[i], alone, rtol=1e-4, atol=1e-5)


def test_sampler_draws_like_sample_hf_and_drops_finished_rows(world):
    """Identical draws until a row of the batch finishes; every row ends at its first stop id or the limit."""
    from transformers import AutoModelForCausalLM

    from opsd_diag.engine import decode as sampler
    from opsd_diag.engine.sampling import sample_hf
    from opsd_diag.config.settings import SamplingSettings

    tok, models = _world_models(world)
    eager = AutoModelForCausalLM.from_pretrained(world / "student", attn_implementation="eager").eval()
    assert models["student"].config._attn_implementation == "sdpa"  # SDPA: 4-D one-token masks; eager: 2-D
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (4, 9, 6, 12, 5, 7)]
    frequent = [tok.eos_token_id, 7, 11, 13, 17, 19]  # rows end at different lengths
    rare = [len(tok) - 1]  # rows run to the limit: the draws of every decode step (and its mask) compared
    student = models["student"]
    for model, top_p, temp, stop in ((student, 1.0, 1.0, frequent), (student, 0.8, 1.3, frequent),
                                     (student, 1.0, 1.0, rare), (eager, 0.8, 1.3, frequent), (eager, 1.0, 1.0, rare)):
        assert sampler.supported(model)
        s = SamplingSettings(num_samples=2, temperature=temp, top_p=top_p, max_new_tokens=12, seed=11, batch_size=4)
        ref = sample_hf(model, tok, prompts, s, stop)
        got = sampler.sample(model, tok, prompts, s, stop)
        assert sampler.sample(model, tok, prompts, s, stop) == got  # deterministic for a seed
        flat_ref = [c for per in ref for c in per]
        flat = [c for per in got for c in per]
        assert len(flat) == len(flat_ref) == 12
        compared = 0
        for lo in range(0, 12, s.batch_size):  # per generation batch: same tokens until the first stop
            first_end = min(len(c.ids) for c in flat_ref[lo:lo + s.batch_size])
            compared += first_end
            for a, b in zip(flat_ref[lo:lo + s.batch_size], flat[lo:lo + s.batch_size]):
                assert a.ids[:first_end] == b.ids[:first_end]
        for c in flat:
            assert c.finished == (c.ids[-1] in stop) and not any(t in stop for t in c.ids[:-1])
            assert c.finished or len(c.ids) == s.max_new_tokens
        if stop is rare:
            assert compared >= 30  # (almost) all of the 3 batches x 12 steps
