"""Trainer throughput and peak memory, side by side with TRL's on-policy distillation trainer.

Same student, teacher, prompts and settings for both (on-policy sampling at temperature 1, no top-k
or top-p, the same completion length, batch, learning rate and optimizer, float32 on CPU / bf16 on
CUDA, no gradient checkpointing unless stated). Each configuration runs in its own fresh process,
configurations are interleaved, repeated, and the median is reported.

- prompts: every trainer trains on the same prompts in the same order: TRL's sampler is replaced by
  a sequential one over a dataset laid out in our trainer's step order (``trainer.rollouts.
  step_problems``), and the prompt ids are the same chat-template ids (checked once by hand);
- throughput: generated tokens trained per second = completion tokens in the loss (up to and
  including the first stop id, as both count them) / wall time from the end of the last warm-up
  step to the end of the last step (sampling, scoring, backward, optimizer step and each
  framework's own per-step bookkeeping and logging), warm-up steps excluded;
- peak memory: CUDA ``max_memory_allocated``; on CPU the peak RSS (``VmHWM``, reset through
  ``/proc/self/clear_refs`` after imports) minus the RSS after imports: models, tokenizer,
  activations, optimizer state and each framework's own structures.

Pairs: ``opd`` (sampled-token reverse-KL policy gradient) against TRL with ``beta=1`` (full-vocabulary
reverse KL, TRL's closest objective; TRL has no sampled-token OPD loss), and ``jsd`` (beta 0.5)
against TRL with ``beta=0.5``; each against both of TRL's on-policy distillation trainers:
``DistillationTrainer`` (TRL's maintained one, always on-policy, chunked loss) and the older
``trl.experimental.gkd.GKDTrainer`` with ``lmbda=1.0`` (every step samples from the student) and
``seq_kd=False`` (full-sequence logits). ``--with-gc`` adds a pair with gradient checkpointing on
both sides (TRL's ``DistillationConfig`` default).

TRL is only needed here, never by the package or its tests: install it into a separate
environment that reuses this one's torch and transformers (``--no-deps`` never upgrades them) and
pass its Python:

    python -m venv --system-site-packages /tmp/trlenv
    /tmp/trlenv/bin/pip install --no-deps trl==1.16.0 datasets dill xxhash multiprocess
    python benchmarks/bench_trainer.py --trl-python /tmp/trlenv/bin/python --repeats 5

Tested with TRL 1.16.0 (transformers 5.24.0, torch 2.13.0+cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _memory_baseline(cuda: bool) -> float:
    """RSS (or CUDA allocation) now, with the peak counter reset so that only what follows counts."""
    import gc

    import torch

    gc.collect()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        pass
    return _rss_mb()


def _memory_growth(cuda: bool, base: float) -> float:
    import torch

    return (torch.cuda.max_memory_allocated() / 2**20 if cuda else _hwm_mb()) - base


def _result(tokens: int, seconds: float, generation_s: float, peak_mb: float) -> dict:
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "generation_share":
            generation_s / seconds, "train_tokens_per_s": tokens / (seconds - generation_s), "peak_mb": peak_mb}


def _step_timer(ends: list[float]):
    """A TRL/transformers callback recording when each optimizer step ends (after ``optimizer.step``)."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    return Timer()


def _ordered_problems(a) -> list[dict]:
    """The prompts our trainer trains on, in its order: step 0's batch, then step 1's, ..."""
    from trainer.rollouts import step_problems

    problems = _problems(Path(a.data), a.limit)
    return [problems[i] for s in range(a.warmup + a.steps) for i in step_problems(len(problems), s, a.batch, a.seed)]


def _sequential(trainer, ds) -> None:
    """Replace TRL's (shuffling) sampler: the dataset is already in our trainer's order."""
    from torch.utils.data import SequentialSampler

    trainer._get_train_sampler = lambda *args, **kw: SequentialSampler(ds)


def _problems(path: Path, limit: int) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:limit]


# ----------------------------------------------------------------------------------- workers

def _preimport(models: Path) -> None:
    """Import the model code before the memory baseline, so neither side is charged for imports."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(models / "student"))]


def run_ours(a) -> dict:
    import torch
    import yaml

    from trainer import cli, loop, setup  # noqa: F401  (imported before the memory baseline)

    torch.set_num_threads(a.threads)
    models = Path(a.models)
    _preimport(models)
    cuda = a.device == "cuda"
    cfg = {
        "student": {"model": str(models / "student")},
        "teachers": [{"name": "teacher", "model": str(models / "teacher")}],
        "data": {"path": a.data, "limit": a.limit},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_completion_length": a.max_new},
        "device": a.device,
        "training": {"method": a.method, "max_steps": a.warmup + a.steps, "per_device_train_batch_size": a.batch,
                     "learning_rate": a.lr, "max_grad_norm": 1.0, "beta": 0.5 if a.method == "jsd" else None,
                     "eval": {"data": None}, "report_to": "none", "seed": a.seed,
                     "mixed_precision": "bf16" if cuda else "no", "gradient_checkpointing": a.gc},
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench-ours-"))
    (tmp / "c.yaml").write_text(yaml.safe_dump(cfg))
    base = _memory_baseline(cuda)
    rc = cli.main([str(tmp / "c.yaml"), "--out", str(tmp / "run")])
    mem = _memory_growth(cuda, base)
    if rc != 0:
        raise SystemExit(f"ours failed with {rc}")
    recs = [json.loads(x) for x in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in recs] == list(range(1, a.warmup + a.steps + 1))
    timed = recs[a.warmup:]
    tokens = sum(r["tokens"] for r in timed)
    seconds = timed[-1]["elapsed_s"] - recs[a.warmup - 1]["elapsed_s"]  # end of warm-up -> end of last step
    gen = sum(r["sampling_s"] for r in timed)
    return _result(tokens, seconds, gen, mem)


def run_trl(a) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DistillationConfig, DistillationTrainer

    torch.set_num_threads(a.threads)
    models = Path(a.models)
    _preimport(models)
    cuda = a.device == "cuda"
    rows = [{"prompt": [{"role": "user", "content": p["prompt"]}]} for p in _ordered_problems(a)]
    ds = Dataset.from_list(rows)
    tmp = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    base = _memory_baseline(cuda)
    dtype = torch.float32  # master weights, as ours; bf16 autocast on CUDA for both
    tok = AutoTokenizer.from_pretrained(models / "student")
    student = AutoModelForCausalLM.from_pretrained(models / "student", dtype=dtype)
    teacher = AutoModelForCausalLM.from_pretrained(models / "teacher", dtype=torch.bfloat16 if cuda else dtype)
    args = DistillationConfig(
        output_dir=str(tmp), per_device_train_batch_size=a.batch, gradient_accumulation_steps=1,
        max_steps=a.warmup + a.steps, learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, temperature=1.0, top_p=1.0, top_k=0,
        max_completion_length=a.max_new, beta=1.0 if a.method == "opd" else 0.5, bf16=cuda,
        gradient_checkpointing=a.gc, logging_steps=1, save_strategy="no", report_to="none",
        seed=a.seed, use_cpu=not cuda, dataloader_num_workers=0, disable_tqdm=True)
    ends: list[float] = []
    tokens: list[int] = []
    trainer = DistillationTrainer(model=student, teacher_model=teacher, args=args, train_dataset=ds,
                                  processing_class=tok, callbacks=[_step_timer(ends)])
    _sequential(trainer, ds)
    generate, gen_s = trainer._generate_and_score_completions, []

    def counted(inputs):
        t0 = time.perf_counter()
        out = generate(inputs)  # sampling plus padding the batch (no scoring happens here)
        gen_s.append(time.perf_counter() - t0)
        tokens.append(int(out["completion_mask"].sum()))
        return out

    trainer._generate_and_score_completions = counted
    trainer.train()
    mem = _memory_growth(cuda, base)
    w = a.warmup
    assert len(ends) == len(tokens) == w + a.steps, (len(ends), len(tokens))
    return _result(sum(tokens[w:]), ends[-1] - ends[w - 1], sum(gen_s[w:]), mem)


def run_gkd(a) -> dict:
    """TRL's older GKDTrainer, fully on-policy (lmbda=1): full-sequence logits, no chunking."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.experimental.gkd import GKDConfig, GKDTrainer

    from opsd_diag.zoo.task import reasoning_response

    torch.set_num_threads(a.threads)
    models = Path(a.models)
    _preimport(models)
    cuda = a.device == "cuda"
    rows = [{"messages": [{"role": "user", "content": p["prompt"]},
                          {"role": "assistant", "content": reasoning_response(p)}]}
            for p in _ordered_problems(a)]
    ds = Dataset.from_list(rows)
    tmp = Path(tempfile.mkdtemp(prefix="bench-gkd-"))
    base = _memory_baseline(cuda)
    tok = AutoTokenizer.from_pretrained(models / "student")
    student = AutoModelForCausalLM.from_pretrained(models / "student", dtype=torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(models / "teacher",
                                                   dtype=torch.bfloat16 if cuda else torch.float32)
    args = GKDConfig(
        output_dir=str(tmp), per_device_train_batch_size=a.batch, gradient_accumulation_steps=1,
        max_steps=a.warmup + a.steps, learning_rate=a.lr, lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=1.0, temperature=1.0, lmbda=1.0, seq_kd=False,
        beta=1.0 if a.method == "opd" else 0.5,
        max_new_tokens=a.max_new, bf16=cuda, gradient_checkpointing=a.gc, logging_steps=1, save_strategy="no",
        report_to="none", seed=a.seed, use_cpu=not cuda, dataloader_num_workers=0, disable_tqdm=True)
    ends: list[float] = []
    tokens: list[int] = []
    trainer = GKDTrainer(model=student, teacher_model=teacher, args=args, train_dataset=ds, processing_class=tok,
                         callbacks=[_step_timer(ends)])
    _sequential(trainer, ds)
    generate, gen_s = trainer.generate_on_policy_outputs, []

    def counted(model, inputs, generation_config):
        t0 = time.perf_counter()
        ids, att, labels = generate(model, inputs, generation_config)
        gen_s.append(time.perf_counter() - t0)
        tokens.append(int((labels != -100).sum()))
        return ids, att, labels

    trainer.generate_on_policy_outputs = counted
    trainer.train()
    mem = _memory_growth(cuda, base)
    w = a.warmup
    assert len(ends) == len(tokens) == w + a.steps, (len(ends), len(tokens))
    return _result(sum(tokens[w:]), ends[-1] - ends[w - 1], sum(gen_s[w:]), mem)


# ----------------------------------------------------------------------------------- driver

def _worker_argv(python: str, impl: str, method: str, a, gc: bool = False) -> list[str]:
    argv = [python, str(Path(__file__).resolve()), "--worker", impl, "--method", method, "--models", a.models,
            "--data", a.data, "--limit", str(a.limit), "--steps", str(a.steps), "--warmup", str(a.warmup),
            "--batch", str(a.batch), "--max-new", str(a.max_new), "--lr", str(a.lr), "--threads", str(a.threads),
            "--device", a.device, "--seed", str(a.seed)]
    return argv + (["--gc"] if gc else [])


def _run(argv: list[str], threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"worker failed: {' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=["ours", "trl", "gkd"])
    p.add_argument("--method", default="opd")
    p.add_argument("--models", default=str(ROOT / "sample_data" / "models"))
    p.add_argument("--data", default=str(ROOT / "sample_data" / "problems" / "train.jsonl"))
    p.add_argument("--limit", type=int, default=512)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-new", type=int, default=72)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gc", action="store_true", help="worker: gradient checkpointing (TRL's default)")
    p.add_argument("--with-gc", action="store_true", help="add a jsd pair with gradient checkpointing on both sides")
    p.add_argument("--trl-python", default=sys.executable, help="a Python that can import trl")
    p.add_argument("--json", help="write all measurements here")
    a = p.parse_args()
    if a.worker:
        res = {"ours": run_ours, "trl": run_trl, "gkd": run_gkd}[a.worker](a)
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    if a.warmup < 1:
        p.error("--warmup must be at least 1 (the timed window starts at the end of the last warm-up step)")
    names = {("ours", "opd", False): "ours opd", ("trl", "opd", False): "TRL DistillationTrainer beta=1",
             ("gkd", "opd", False): "TRL GKDTrainer beta=1 (lmbda=1)", ("ours", "jsd", False): "ours jsd beta=0.5",
             ("trl", "jsd", False): "TRL DistillationTrainer beta=0.5",
             ("gkd", "jsd", False): "TRL GKDTrainer beta=0.5 (lmbda=1)"}
    pairs = [(("ours", "opd", False), ("trl", "opd", False)), (("ours", "opd", False), ("gkd", "opd", False)),
             (("ours", "jsd", False), ("trl", "jsd", False)), (("ours", "jsd", False), ("gkd", "jsd", False))]
    if a.with_gc:
        names[("ours", "jsd", True)] = "ours jsd beta=0.5 + gradient checkpointing"
        names[("trl", "jsd", True)] = "TRL DistillationTrainer beta=0.5 + gradient checkpointing (its default)"
        pairs.append((("ours", "jsd", True), ("trl", "jsd", True)))
    configs = list(names)
    results: dict[tuple, list[dict]] = {c: [] for c in configs}
    t_start = time.time()
    for r in range(a.repeats):
        for c in (configs if r % 2 == 0 else configs[::-1]):  # interleave: drift hits every config alike
            python = sys.executable if c[0] == "ours" else a.trl_python
            results[c].append(_run(_worker_argv(python, c[0], c[1], a, c[2]), a.threads))
            print(r, c, json.dumps(results[c][-1]), flush=True)

    def med(c, key):
        return statistics.median(x[key] for x in results[c])

    print(f"\n## bench_trainer ({a.device}, {a.threads} torch thread(s), batch {a.batch}, max {a.max_new} new tokens, "
          f"{a.warmup} warm-up + {a.steps} timed steps, median of {a.repeats} fresh processes per config, "
          f"{time.time() - t_start:.0f} s in all, load avg {os.getloadavg()[0]:.1f})\n")
    print("| run | generated tokens trained/s | min..max | timed tokens | share of time sampling | "
          "peak memory MiB | min..max |")
    print("|---|---|---|---|---|---|---|")
    for c in configs:
        tps = [x["tokens_per_s"] for x in results[c]]
        mb = [x["peak_mb"] for x in results[c]]
        print(f"| {names[c]} | {med(c, 'tokens_per_s'):.0f} | {min(tps):.0f}..{max(tps):.0f} | "
              f"{med(c, 'tokens'):.0f} | {med(c, 'generation_share'):.0%} | {med(c, 'peak_mb'):.1f} | "
              f"{min(mb):.1f}..{max(mb):.1f} |")
    print("\n| ours vs TRL | throughput ratio | memory ratio | target >= 1.25x at <= 1.0x |")
    print("|---|---|---|---|")
    verdicts = []
    for ours, trl in pairs:
        t = med(ours, "tokens_per_s") / med(trl, "tokens_per_s")
        m = med(ours, "peak_mb") / med(trl, "peak_mb")
        verdict = "PASS" if t >= 1.25 and m <= 1.0 else "FAIL"
        verdicts.append(f"RESULT trainer {names[ours]} vs {names[trl]}: {t:.2f}x throughput, {m:.2f}x memory {verdict}")
        print(f"| {names[ours]} vs {names[trl]} | {t:.2f}x | {m:.2f}x | {verdict} |")
    print()
    print("\n".join(verdicts))
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "results": {"/".join(map(str, c)): v
                                                                            for c, v in results.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
