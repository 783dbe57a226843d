"""The training loop on accelerate: sample on-policy, score, step, log, evaluate, checkpoint, stop.

Every process runs this function. Only the main process writes files or prints. A graceful stop
(``STOP`` file in the run directory, or SIGTERM) is agreed on by all processes at a step boundary,
saved, and reported as ``stopped``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator

from opsd_diag import jobs
from opsd_diag.errors import NonFiniteLogits, OpsdError
from trainer import checkpoint, probes, rundir, sharded
from opsd_diag.config.training import TrainConfig, trackers
from trainer.cross_step import cross_micro_batch_backward
from trainer.evaluate import eval_size, evaluate
from trainer.levers import LeverState
from trainer.rollouts import make_micro_batch, rank_micro_batches, step_problems
from trainer.setup import Setup, prepare
from opsd_diag.engine.step_sums import STAT_NAMES, StepSums
from opsd_diag.engine.train_step import micro_batch_backward

log = logging.getLogger("opsd-train")


class Stopper:
    """SIGTERM, SIGINT or a STOP file asks for a graceful stop at the next step boundary.

    Repeated SIGTERMs stay graceful (a launcher may forward the signal it got itself); a second
    Ctrl-C (SIGINT) ends the process at once.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, run_dir: Path):
        self.file = Path(run_dir) / jobs.STOP
        self.signalled = False
        self._old = {s: signal.signal(s, self._handler) for s in self.SIGNALS}

    def _handler(self, signum, frame):
        if self.signalled and signum == signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        self.signalled = True

    def requested(self, accelerator: Accelerator) -> bool:
        flag = torch.tensor([float(self.signalled or self.file.exists())], device=accelerator.device)
        return bool(accelerator.reduce(flag, "max").item() > 0)

    def restore(self) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)


def lr_lambda(spec):
    def factor(step: int) -> float:
        if step < spec.warmup_steps:
            return (step + 1) / (spec.warmup_steps + 1)
        progress = (step - spec.warmup_steps) / max(1, spec.max_steps - spec.warmup_steps)
        if spec.lr_scheduler_type == "linear":
            return max(0.0, 1.0 - progress)
        if spec.lr_scheduler_type == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return 1.0
    return factor


def _mixed_precision(spec) -> str:
    if spec.mixed_precision != "auto":
        return spec.mixed_precision
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"


def _reduce_sums(acc: Accelerator, sums: StepSums, keys: tuple[str, ...]) -> tuple[list[float], dict]:
    def t(x):
        return torch.as_tensor(x, dtype=torch.float64, device=acc.device)

    vec = [t(sums.loss), t(sums.tokens), t(sums.rows), t(sums.finished)]
    vec += [t(sums.stats.get(k, 0.0)) for k in keys] + [t(sums.counts.get(k, 0)) for k in keys]
    total = acc.reduce(torch.stack(vec), "sum").tolist()  # one all-reduce, one device sync per step
    means = {k: total[4 + i] / total[4 + len(keys) + i] for i, k in enumerate(keys) if total[4 + len(keys) + i]}
    return total[:4], means


def train_step(acc: Accelerator, st: Setup, hidden_model, optimizer, scheduler, step: int,
               levers: LeverState | None = None) -> dict:
    """One optimizer step over ``processes x accumulation`` micro-batches; returns its metrics."""
    spec = st.tc.spec
    levers = levers or LeverState(spec, None)
    world, rank = acc.num_processes, acc.process_index
    global_batch = spec.per_device_train_batch_size * world * spec.gradient_accumulation_steps
    ids = step_problems(len(st.train.problems), step, global_batch, spec.seed)
    plan = rank_micro_batches(ids, spec.per_device_train_batch_size, world, rank, spec.gradient_accumulation_steps)
    t0 = time.perf_counter()
    try:
        with torch.no_grad(), acc.autocast(), sharded.full_params(hidden_model):  # FSDP: gathered while sampling
            mbs = [make_micro_batch(st.roles.student, st.tok, st.train, j, idx, step, spec, st.stop_ids,
                                    st.tc.cfg.sampling.engine, fraction=levers.fraction(step), checker=levers.checker,
                                    sample_to=levers.sample_to)
                   for j, idx in plan]
    except NonFiniteLogits as e:
        raise OpsdError(f"step {step + 1}: {_who(st, 'student')} produced non-finite logits (NaN or inf) while "
                        f"sampling, at completion position {e.position}: {NONFINITE_FIX}") from None
    sampling_s = time.perf_counter() - t0
    local = torch.tensor([sum(mb.n_tokens for mb in mbs)], dtype=torch.float64, device=acc.device)
    n_global = int(acc.reduce(local, "sum").item())  # all-reduce the count before any backward
    sums = StepSums()
    lr = scheduler.get_last_lr()[0]
    levers.check_path(sharded.is_sharded(hidden_model), st.roles.cross is not None)
    backward = (sharded.micro_batch_backward if sharded.is_sharded(hidden_model) else
                functools.partial(micro_batch_backward, mask=levers.mask))
    if st.roles.cross is not None:  # the teacher has another tokenizer: span losses (trainer.cross_step)
        backward = functools.partial(cross_micro_batch_backward, cross=st.roles.cross)
    for a, mb in enumerate(mbs):
        sync = contextlib.nullcontext() if a == len(mbs) - 1 else acc.no_sync(hidden_model)
        with sync:
            backward(hidden_model, st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=st.chunk_size,
                     scale=world / n_global, ref=st.reference, autocast=acc.autocast, sums=sums)
    (loss, tokens, rows, finished), means = _reduce_sums(acc, sums, tuple(STAT_NAMES))
    params = st.roles.trainable()
    fraction, running = levers.after_step(step, params, means)  # gradients normalised by the kept tokens
    grad_norm = float(acc.clip_grad_norm_(params, spec.max_grad_norm or float("inf")))
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):  # every process sees the same reduced values
        raise OpsdError(_nonfinite_message(st, sums, step, loss, grad_norm))  # before any optimizer step
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    st.roles.ema_update(spec.ema_decay)
    return {"loss": loss / max(1.0, tokens * means.get("kept", 1.0)), "lr": lr,
            "kept_tokens": round(tokens * means.get("kept", 1.0)), "revealed_fraction": fraction,
            "running_accuracy": running, "grad_norm": grad_norm, "tokens": int(tokens),
            "completion_length": tokens / rows, "finished_ratio": finished / rows,
            **{STAT_NAMES[k]: v for k, v in means.items()}, "sampling_s": sampling_s}


NONFINITE_FIX = "check its weights for NaN/inf and its dtype (float16 overflows: use bfloat16 or float32)"


def _who(st: Setup, role: str) -> str:
    cfg, t = st.tc.cfg, st.tc.teacher
    return {"student": f"the student model '{cfg.student.model}'",
            "teacher": f"teacher '{t.name}' (model '{cfg.student.model if t.is_self else t.model}')" if t else "",
            "base": f"the base model '{cfg.base.model}'" if cfg.base else "",
            "reference": f"the ExOPD reference (the initial student '{cfg.student.model}')"}[role]


def _nonfinite_message(st: Setup, sums: StepSums, step: int, loss: float, grad_norm: float) -> str:
    """Which model went non-finite, where: the step stops before its optimizer step, so no weight changes."""
    found = sums.first_nonfinite()
    if found is not None:
        role, mb, row, pos = found
        problem = st.train.problems[mb.problem_idx[row]]["id"]
        return (f"step {step + 1}: {_who(st, role)} produced non-finite logits (NaN or inf) at completion position "
                f"{pos} of a rollout of problem '{problem}': {NONFINITE_FIX}; no optimizer step was taken")
    what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {grad_norm}"
    return (f"step {step + 1}: the {what} is not finite (on this or another process), with finite logits here: "
            "lower training.learning_rate or set training.max_grad_norm; no optimizer step was taken")


def _save(acc: Accelerator, st: Setup, run_dir: Path, step: int, optimizer, scheduler, elapsed: float,
          levers: LeverState | None = None) -> None:
    if acc.is_main_process:
        jobs.write_status(run_dir, stage="saving")
    tmp = checkpoint.temp_dir(run_dir, step)
    full = sharded.full_state_dict(st.roles.student)  # FSDP: gathered on every process (a collective)
    if acc.is_main_process:
        checkpoint.begin(run_dir, step)
        checkpoint.write_model(tmp, st.roles, st.tok, state_dict=full)
    acc.wait_for_everyone()
    checkpoint.write_rank_rng(tmp, acc.process_index)
    acc.wait_for_everyone()
    if acc.is_main_process:
        # FSDP: each process holds a shard of the optimizer state; it is not saved (resume refuses such a checkpoint)
        opt_state = None if sharded.is_sharded(st.roles.student) else optimizer.state_dict()
        state = {"optimizer": opt_state, "scheduler": scheduler.state_dict(), "elapsed": elapsed,
                 "levers": levers.state() if levers is not None else None}
        checkpoint.commit(run_dir, tmp, step, state, st.tc.spec.save_total_limit, {"method": st.tc.spec.method})
        log.info("checkpoint saved: step %d", step)
        jobs.write_status(run_dir, stage="train")
    acc.wait_for_everyone()


def _eval(acc, st: Setup, step: int, metrics: rundir.MetricsLog | None, wrapped=None) -> None:
    ev = st.tc.spec.eval
    if st.evals.held_out is None and st.evals.regression is None:
        return
    total, done, t0 = eval_size(st.evals), [0], time.time()
    run_dir = metrics.path.parent if metrics is not None else None  # the main process only

    def tick(n: int) -> None:  # the evaluation is a stage of its own, with its progress (status.json)
        done[0] = min(total, done[0] + n)
        if run_dir is not None:
            jobs.write_status(run_dir, stage="evaluating", eval_done=done[0])

    if run_dir is not None:
        jobs.write_status(run_dir, stage="evaluating", eval_step=step, eval_done=0, eval_total=total,
                          eval_started=t0)
    try:
        with sharded.full_params(wrapped) if wrapped is not None else contextlib.nullcontext():
            res = evaluate(st.roles, st.tok, st.evals, ev, checker=st.tc.cfg.analysis.checker, stop_ids=st.stop_ids,
                           truncated=st.tc.cfg.analysis.truncated,
                           pad_id=st.pad_id, chunk=st.chunk_size, tau=st.tc.spec.scoring_temperature,
                           world=acc.num_processes, rank=acc.process_index, autocast=acc.autocast,
                           engine=st.tc.cfg.sampling.engine, tick=tick)
    except NonFiniteLogits as e:
        raise OpsdError(f"evaluation at step {step}: {_who(st, 'student')} produced non-finite logits (NaN or inf) "
                        f"while sampling, at completion position {e.position}: {NONFINITE_FIX}") from None
    if acc.is_main_process:
        seconds = time.time() - t0
        metrics.write({"kind": "eval", "step": step, **res, "eval_s": seconds, "eval_samples": total * ev.num_samples})
        jobs.write_status(run_dir, stage="train", eval_done=total, last_eval_s=seconds)
        numbers = {k: v for k, v in res.items() if isinstance(v, (int, float))}  # per_problem is a list
        acc.log({f"eval/{k}": v for k, v in numbers.items()}, step=step)
        log.info("eval step %d: %s", step, ", ".join(f"{k}={v:.4g}" for k, v in numbers.items()))


def run(tc: TrainConfig, run_dir: Path, *, resume: bool, argv: list[str], prediction: dict | None = None) -> str:
    """Train (or resume) into ``run_dir``; returns the final status (finished / stopped)."""
    spec = tc.spec
    run_dir = Path(run_dir)
    # cpu=True on CPU machines also makes several processes under torchrun use gloo (MULTI_CPU)
    cpu = tc.cfg.device == "cpu" or (tc.cfg.device == "auto" and not torch.cuda.is_available())
    if cpu and spec.mixed_precision == "bf16" and os.environ.get("RANK", "0") == "0":
        print("warning: training.mixed_precision bf16 on the CPU is slow and loses accuracy: use auto or no",
              file=sys.stderr)
    acc = Accelerator(cpu=cpu, mixed_precision=_mixed_precision(spec), log_with=trackers(spec) or None,
                      project_dir=str(run_dir))
    sharded.check_supported(acc)  # DeepSpeed, FSDP1: refused before anything is written
    if acc.num_processes > 1 and acc.device.type == "cpu":  # CPU processes share the cores
        torch.set_num_threads(max(1, torch.get_num_threads() // acc.num_processes))
    config_yaml = tc.to_yaml()
    jobs.check_free(run_dir)  # another run writes there: say so (naming it) before anything else
    rundir.check(run_dir, config_yaml, resume)
    ckpt = checkpoint.latest(run_dir) if resume else None
    resumed = (checkpoint.read_state(ckpt, acc.process_index, None if spec.lora else tc.cfg.student.model)
               if ckpt is not None else None)  # damaged or foreign: an error now
    torch.manual_seed(spec.seed)
    st = prepare(tc, acc.device, ckpt)  # every user error surfaces before anything is written
    if resumed is not None:
        checkpoint.check_optimizer(ckpt, resumed[0], list(st.roles.trainable()))
    if st.roles.cross is not None and sharded.fsdp_requested(acc):
        raise OpsdError("a teacher with another tokenizer than the student is not supported with FSDP: train on one "
                        "process or with DDP")
    log_file = []

    def ready() -> None:  # the main process, once it holds the lock (one writer per run)
        rundir.check(run_dir, config_yaml, resume)  # again, now that no other run can write here
        rundir.create(run_dir, config_yaml, argv, prediction)
        log_file.append(rundir.attach_log_file(run_dir))
        checkpoint.clean_temp(run_dir)
        if resume:
            (run_dir / jobs.STOP).unlink(missing_ok=True)  # the STOP that ended the previous segment

    def closing() -> None:
        acc.end_training()
        rundir.detach_log_file(log_file[0] if log_file else None)

    with jobs.hold(run_dir, "opsd-train", main=acc.is_main_process, after="train --resume",  # how to continue
                   stopped=jobs.STOPPED_EARLY, ready=ready, closing=closing,  # a stop before the graceful handler
                   on_failure=lambda: checkpoint.clean_temp(run_dir)):  # a checkpoint cut short never stays
        acc.wait_for_everyone()
        return _train(acc, st, run_dir, ckpt, resumed)


def _train(acc: Accelerator, st: Setup, run_dir: Path, ckpt: Path | None, resumed: tuple | None) -> str:
    tc, spec = st.tc, st.tc.spec
    optimizer = torch.optim.AdamW(st.roles.trainable(), lr=spec.learning_rate, weight_decay=spec.weight_decay,
                                  betas=(spec.adam_beta1, spec.adam_beta2), eps=spec.adam_epsilon)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(spec))
    step, elapsed_before, saved_levers = 0, 0.0, None
    if ckpt is not None:
        state, rng = resumed
        if state["optimizer"] is None:
            raise OpsdError(f"{ckpt} comes from a sharded (FSDP) run, whose optimizer state is not saved: it cannot "
                            "be resumed (its weights load with from_pretrained)")
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, elapsed_before, saved_levers = int(state["step"]), float(state.get("elapsed", 0.0)), state.get("levers")
        if rng is not None:
            checkpoint.set_rng_state(rng)
    # DDP / one process: CompletionHidden (LM head applied outside, engine.train_step); FSDP: trainer.sharded
    hidden_model, optimizer = sharded.prepare(acc, sharded.wrap(st.roles.student, acc), optimizer, st.roles)
    metrics = rundir.MetricsLog(run_dir) if acc.is_main_process else None
    if acc.is_main_process:
        metrics.truncate_after(step)
        jobs.write_status(run_dir, "running", kind="training", stage="train", step=step, done=step,
                          total=spec.max_steps, max_steps=spec.max_steps, method=spec.method,
                          sampling_temperature=spec.temperature, scoring_temperature=spec.scoring_temperature,
                          resumed_from=str(ckpt) if ckpt else None)
        acc.init_trackers("tensorboard", config={k: v for k, v in spec.model_dump(mode="json").items()
                                                if isinstance(v, (int, float, str, bool))})
        if step >= spec.max_steps:
            log.info("already trained to step %d of %d: nothing to do (a new --out starts a new run)", step,
                     spec.max_steps)
        else:
            log.info("training %s from step %d to %d (T_sample=%s, T_score=%s, %d process(es))", spec.method,
                     step, spec.max_steps, spec.temperature, spec.scoring_temperature, acc.num_processes)
        if tc.cfg.sampling.backend != "hf":
            log.warning("sampling.backend %s is used by the diagnosis only: training samples from the live "
                        "student weights in-process (opsd_diag.engine.decode)", tc.cfg.sampling.backend)
    levers = LeverState(spec, (tc.cfg.analysis.checker, tc.cfg.analysis.truncated), saved_levers)
    stopper = Stopper(run_dir)
    started, first_step = time.time(), step
    saved_at = step if ckpt is not None else -1
    try:
        if step == 0 and spec.eval.at_start:
            _eval(acc, st, 0, metrics, hidden_model)
        if step == 0:  # training.diagnose_every: the initial policy's probe (trainer.probes)
            probes.in_training(acc, st, run_dir, 0, hidden_model)
        while step < spec.max_steps:
            t0 = time.time()
            rec = train_step(acc, st, hidden_model, optimizer, scheduler, step, levers=levers)
            step += 1
            now = time.time()
            per_step = (now - started) / (step - first_step)
            rec = {"kind": "train", "step": step, "method": spec.method, **rec,
                   "sampling_temperature": spec.temperature, "scoring_temperature": spec.scoring_temperature,
                   "tokens_per_s": rec["tokens"] / (now - t0), "step_time_s": now - t0,
                   "elapsed_s": elapsed_before + now - started, "eta_s": per_step * (spec.max_steps - step)}
            if acc.is_main_process:
                metrics.write(rec)
                acc.log({f"train/{k}": v for k, v in rec.items() if isinstance(v, (int, float)) and k != "step"},
                        step=step)
                jobs.write_status(run_dir, "running", step=step, done=step)
                log.info("step %d/%d loss %.4f tokens %d (%.0f tok/s)", step, spec.max_steps, rec["loss"],
                         rec["tokens"], rec["tokens_per_s"])
            last = step == spec.max_steps
            probes.in_training(acc, st, run_dir, step, hidden_model, last)
            if (spec.eval_steps and step % spec.eval_steps == 0) or last:
                _eval(acc, st, step, metrics, hidden_model)
            if (spec.save_steps and step % spec.save_steps == 0) or last:
                _save(acc, st, run_dir, step, optimizer, scheduler, elapsed_before + time.time() - started, levers)
                saved_at = step
            if not last and stopper.requested(acc):
                if saved_at != step:
                    _save(acc, st, run_dir, step, optimizer, scheduler, elapsed_before + time.time() - started, levers)
                if acc.is_main_process:
                    jobs.write_status(run_dir, "stopped", step=step, done=step)
                    log.info("stopped at step %d (checkpoint saved); resume with --resume", step)
                return "stopped"
        if acc.is_main_process:
            jobs.write_status(run_dir, "finished", step=step, done=step)
        return "finished"
    finally:
        stopper.restore()
