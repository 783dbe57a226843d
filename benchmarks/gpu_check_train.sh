#!/usr/bin/env bash
# The trainer's GPU check (issue 5): real training steps in bf16 mixed precision on one CUDA GPU.
#  1. every method (opd, jsd, opsd frozen/ema, opd2, exopd, sft) for 2 steps on the toy models
#     (sample_data/models, or a ci-size zoo built on the spot): finite metrics, status finished,
#     a checkpoint that from_pretrained loads, an evaluation at the end;
#  2. opd and jsd at Qwen3-1.7B's shape (random weights, fp32 master weights + bf16 autocast, bf16
#     teacher): generated tokens trained per second and peak CUDA memory, 1 warm-up + 3 steps.
# About 2-3 minutes on one H200; each part is capped.
#
#   bash benchmarks/gpu_check_train.sh            # CUDA, bf16
#   bash benchmarks/gpu_check_train.sh --smoke    # CPU, float32, tiny shapes: checks the invocation only
#
# Output goes to stdout and "$OUT/gpu_check_train.log" ($OUT if set, else a temp directory).
# benchmarks/gpu_check.sh may call this script; it is kept separate (one owner per file).
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
LOG_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check_train.log"
: >"$LOG"
MODE=cuda
[[ "${1:-}" == "--smoke" ]] && MODE=smoke
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false

run() {  # run NAME CAP_SECONDS CMD...
  local name=$1 cap=$2
  shift 2
  echo "### $name" | tee -a "$LOG"
  timeout "$cap" "$@" 2>&1 | grep -v "Loading weights\|Writing model shards" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 124 ]] && echo "### $name: TIMED OUT after ${cap}s" | tee -a "$LOG"
  echo "### $name: exit $rc" | tee -a "$LOG"
}

read -r -d '' SCRIPT <<'EOF'
import json, math, sys, tempfile, time
from pathlib import Path

import torch
import yaml

mode, part = sys.argv[1], sys.argv[2]
cuda = mode == "cuda"
if cuda and not torch.cuda.is_available():
    sys.exit("CUDA is not available: run with --smoke on a CPU machine")
device = "cuda" if cuda else "cpu"
if not cuda:
    torch.set_num_threads(1)
from opsd_diag.zoo import task
from trainer import cli

tmp = Path(tempfile.mkdtemp(prefix="gpu-check-train-"))


def problems(name, n, seed):
    shipped = Path("sample_data/problems") / f"{name}.jsonl"
    if shipped.is_file():
        return str(shipped)
    path = tmp / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in task.generate(n, seed, prefix=name[:2])))
    return str(path)


def run(models, training, max_new, eval_data=None, name="run"):
    cfg = {"student": {"model": str(models / "student")}, "base": {"model": str(models / "base")},
           "teachers": [{"name": "teacher", "model": str(models / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": problems("train", 64, 1)},
           "sampling": {"temperature": 1.0, "max_completion_length": max_new}, "analysis": {"checker": "toy"},
           "device": device,
           "training": {"per_device_train_batch_size": 8, "learning_rate": 1e-5, "report_to": "none",
                        "mixed_precision": "bf16" if cuda else "no", "eval": {"data": eval_data}, **training}}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp / name
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    assert cli.main([str(tmp / f"{name}.yaml"), "--out", str(out)]) == 0, name
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    status = json.loads((out / "status.json").read_text())["status"]
    assert status == "finished", status
    train = [r for r in recs if r["kind"] == "train"]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in train), train
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    return out, train, [r for r in recs if r["kind"] == "eval"], peak


if part == "methods":
    models = Path("sample_data/models")
    if not (models / "student" / "model.safetensors").is_file():
        from opsd_diag.zoo.build import build
        models = tmp / "zoo"
        build(models, size="ci", log=lambda *a: None)
    from transformers import AutoModelForCausalLM
    dev = {"path": problems("dev", 16, 2), "limit": 16}
    for training in ({"method": "opd"}, {"method": "jsd", "beta": 0.5},
                     {"method": "opsd", "loss": "jsd", "teacher_weights": "frozen"},
                     {"method": "opsd", "loss": "opd", "teacher_weights": "ema"},
                     {"method": "opd2"}, {"method": "exopd"},
                     {"method": "sft", "sft_target": "{solution}\nAnswer: {answer}"}):
        t0 = time.time()
        name = "-".join(str(v) for v in training.values() if len(str(v)) < 12)
        out, train, evals, peak = run(models, {**training, "max_steps": 2}, 72, dev, name)
        AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-000002")
        print(f"RESULT methods {name}: loss {train[-1]['loss']:.4f} tokens/s {train[-1]['tokens_per_s']:.0f} "
              f"pass@1 {evals[-1].get('pass@1', float('nan')):.3f} peak {peak:.2f} GiB "
              f"({time.time() - t0:.0f} s) PASS", flush=True)
else:  # scale: random weights at Qwen3-1.7B's shape (tiny shapes with --smoke)
    from opsd_diag.zoo.build import chat_prompt_ids  # noqa: F401  (the zoo tokenizer is reused)
    from opsd_diag.zoo.tokenizer import train_tokenizer
    from opsd_diag.zoo import task as toy
    from transformers import Qwen3Config, Qwen3ForCausalLM
    tok = train_tokenizer([toy.reasoning_response(p) for p in toy.generate(300, 5)] + ["user\n", "assistant\n"] * 20,
                          vocab_size=400)
    shape = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=6144, vocab_size=151936) if cuda else \
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
             intermediate_size=128, vocab_size=2048)
    models = tmp / "big"
    for i, role in enumerate(("student", "teacher")):  # opd and jsd load no base
        torch.manual_seed(i)
        cfg = Qwen3Config(**shape, tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                          eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>")], max_position_embeddings=4096)
        Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(models / role)
        tok.save_pretrained(models / role)
    max_new = 256 if cuda else 16
    for method in ("opd", "jsd"):
        out, train, _, peak = run(models, {"method": method, "max_steps": 4, "eval": {"data": None}}, max_new,
                                  None, f"scale-{method}")
        rest = train[1:]
        tps = sum(r["tokens"] for r in rest) / sum(r["step_time_s"] for r in rest)
        print(f"RESULT scale {method}: {tps:.0f} generated tokens trained/s, peak {peak:.1f} GiB, "
              f"{rest[-1]['tokens']} tokens/step PASS", flush=True)
EOF

{
  echo "## gpu_check_train $(date -u +%Y-%m-%dT%H:%M:%SZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?') ($MODE)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
} 2>&1 | tee -a "$LOG"
START=$SECONDS
run "trainer: every method, toy models" 150 "$PY" -c "$SCRIPT" "$MODE" methods
run "trainer: opd and jsd at Qwen3-1.7B shape" 150 "$PY" -c "$SCRIPT" "$MODE" scale
echo "## gpu_check_train done in $((SECONDS - START)) s; log: $LOG" | tee -a "$LOG"
grep -h "^RESULT" "$LOG" | tee "$LOG.summary"
