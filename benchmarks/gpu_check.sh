#!/usr/bin/env bash
# On one CUDA GPU in bf16, with random-initialised models of Qwen3-1.7B's shape (hidden 2048,
# 28 layers, 16/8 heads, head_dim 128, intermediate 6144, vocab 151936, tied):
#  - the three issue-3 ratios: scoring overhead, scoring memory, batched rollout;
#  - issue 5's training step: every method for 2 steps on the bundled toy models (finite metrics,
#    a checkpoint that from_pretrained loads, an evaluation), then opd and jsd at Qwen3-1.7B's
#    shape (fp32 master weights + bf16 autocast, bf16 teacher, 8 prompts x up to 256 new tokens):
#    generated tokens trained per second and peak CUDA memory, 3 steps after 1 warm-up.
# About 6 minutes on one H200; each part is capped (90 + 120 + 80 + 120 + 180 s).
#
#   bash benchmarks/gpu_check.sh                  # CUDA, bf16, Qwen3-1.7B shape
#   bash benchmarks/gpu_check.sh --smoke          # CPU, float32, tiny shapes: checks the invocations only
#   PARTS="train" bash benchmarks/gpu_check.sh    # some parts only (of: scoring memory rollout train)
#
# All output goes to stdout and to "$OUT/gpu_check.log" ($OUT if set, else a temp directory).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false

PY=${PYTHON:-python}
PARTS=${PARTS:-scoring memory rollout train}
LOG_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check.log"
: >"$LOG"

if [[ "${1:-}" == "--smoke" ]]; then
  MODE=smoke
  COMMON=(--device cpu --dtype float32 --hidden 64 --layers 2 --heads 2 --kv-heads 1 --head-dim 32
          --intermediate 128)
  SCORING=(--vocab 2048 --batch 2 --prompt-len 16 --context-len 16 --completion-len 32 --warmup 1 --repeats 2)
  MEMORY=(--vocab 4096 --rollouts 2 --completion-len 64 --chunk-sizes 64,16)
  ROLLOUT=(--vocab 2048 --prompts 8 --batch-size 8 --sequential-prompts 2 --prompt-len 16 --max-new-tokens 8)
  CAP=(300 300 300 300 300)
else
  MODE=cuda
  COMMON=(--device cuda --dtype bfloat16 --hidden 2048 --layers 28 --heads 16 --kv-heads 8 --head-dim 128
          --intermediate 6144 --vocab 151936)
  # scoring: 8 rollouts of up to 1024 tokens, question up to 256, privileged context up to 512
  SCORING=(--batch 8 --prompt-len 256 --context-len 512 --completion-len 1024 --chunk-size 64,256,1024
           --warmup 2 --repeats 7)
  # memory: issue setting, 8 x 512 completion tokens (model shape from COMMON, 3 x 3.4 GB of weights)
  MEMORY=(--rollouts 8 --completion-len 512 --chunk-sizes 256,128,64)
  # rollout: 64 prompts in one batch vs 8 prompts one at a time
  ROLLOUT=(--prompts 64 --batch-size 64 --sequential-prompts 8 --prompt-len 128 --max-new-tokens 128)
  CAP=(90 120 80 120 180)
fi

run() {  # run NAME CAP_SECONDS CMD...: log the command, its output and its status (NAME's part in PARTS)
  local name=$1 cap=$2
  shift 2
  [[ " $PARTS " == *" ${name%%-*} "* ]] || return 0
  local shown="$*"
  [[ $2 == -c ]] && shown="$1 -c \"\$TRAIN\" ${*:4}"  # the inline trainer script, by name
  echo "### $name: $shown" | tee -a "$LOG"
  timeout "$cap" "$@" 2>&1 | grep --line-buffered -v "Loading weights\|Writing model shards" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 124 ]] && echo "### $name: TIMED OUT after ${cap}s" | tee -a "$LOG"
  echo "### $name: exit $rc" | tee -a "$LOG"
  echo | tee -a "$LOG"
}

# The trainer (issue 5): real runs through trainer.cli (what `opsd-train` runs), bf16 autocast on CUDA.
read -r -d '' TRAIN <<'PYEOF'
import json, math, sys, tempfile, time
from pathlib import Path

import torch
import yaml

mode, part = sys.argv[1], sys.argv[2]
cuda = mode == "cuda"
if cuda and not torch.cuda.is_available():
    sys.exit("CUDA is not available: run with --smoke on a CPU machine")
if not cuda:
    torch.set_num_threads(1)
from trainer import cli

tmp = Path(tempfile.mkdtemp(prefix="gpu-check-train-"))


def train(models, training, max_new, name, eval_data=None):
    cfg = {"student": {"model": str(models / "student")}, "base": {"model": str(models / "base")},
           "teachers": [{"name": "teacher", "model": str(models / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": "sample_data/problems/train.jsonl", "limit": 256},
           "sampling": {"temperature": 1.0, "max_completion_length": max_new}, "analysis": {"checker": "toy"},
           "device": "cuda" if cuda else "cpu",
           "training": {"per_device_train_batch_size": 8, "learning_rate": 1e-5, "report_to": "none",
                        "mixed_precision": "bf16" if cuda else "no", "eval": {"data": eval_data}, **training}}
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp / name
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    assert cli.main([str(tmp / f"{name}.yaml"), "--out", str(out)]) == 0, name
    assert json.loads((out / "status.json").read_text())["status"] == "finished", name
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if r["kind"] == "train"]
    assert steps and all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in steps), steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else math.nan
    return out, steps, [r for r in recs if r["kind"] == "eval"], peak


if part == "methods":  # every method, 2 steps, on the bundled toy models, with an evaluation
    from transformers import AutoModelForCausalLM

    dev = {"path": "sample_data/problems/dev.jsonl", "limit": 16}
    for training in ({"method": "opd"}, {"method": "jsd", "beta": 0.5},
                     {"method": "opsd", "loss": "jsd", "teacher_weights": "frozen"},
                     {"method": "opsd", "loss": "opd", "teacher_weights": "ema"},
                     {"method": "opd2"}, {"method": "exopd"},
                     {"method": "sft", "sft_target": "{solution}\nAnswer: {answer}"}):
        t0 = time.time()
        name = "-".join(str(v) for v in training.values() if len(str(v)) < 12)
        out, steps, evals, peak = train(Path("sample_data/models"), {**training, "max_steps": 2}, 72, name, dev)
        AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-000002")
        print(f"RESULT train {name}: loss {steps[-1]['loss']:.4f}, pass@1 {evals[-1].get('pass@1', math.nan):.3f}, "
              f"peak {peak:.2f} GiB, {time.time() - t0:.0f} s PASS", flush=True)
else:  # scale: random weights at Qwen3-1.7B's shape (tiny with --smoke), initialised on the device
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained("sample_data/models/student")
    shape = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=6144, vocab_size=151936) if cuda else \
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
             intermediate_size=128, vocab_size=2048)
    models = tmp / "big"
    for i, role in enumerate(("student", "teacher")):  # opd and jsd load no base
        torch.manual_seed(i)
        cfg = Qwen3Config(**shape, tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                          eos_token_id=[tok.eos_token_id], max_position_embeddings=4096)
        with torch.device("cuda" if cuda else "cpu"):
            model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
        model.generation_config.eos_token_id = [tok.eos_token_id]
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(models / role)
        tok.save_pretrained(models / role)
        del model
    (models / "base").symlink_to(models / "teacher")  # named by the config, never loaded by opd or jsd
    for method in ("opd", "jsd"):
        out, steps, _, peak = train(models, {"method": method, "max_steps": 4}, 256 if cuda else 16,
                                    f"scale-{method}")
        timed = steps[1:]  # the first step is the warm-up
        seconds = sum(r["step_time_s"] for r in timed)
        print(f"RESULT train scale {method}: {sum(r['tokens'] for r in timed) / seconds:.0f} generated tokens "
              f"trained/s ({sum(r['sampling_s'] for r in timed) / seconds:.0%} of it sampling), "
              f"{timed[-1]['tokens']} tokens/step, peak {peak:.1f} GiB PASS", flush=True)
PYEOF

{
  echo "## gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "parts: $PARTS"
  [[ $MODE == smoke ]] && echo "SMOKE RUN: tiny CPU shapes, checks the invocations; its ratios mean nothing"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), '| transformers', transformers.__version__)"
  echo
} 2>&1 | tee -a "$LOG"

START=$SECONDS
run scoring "${CAP[0]}" "$PY" benchmarks/bench_scoring.py "${COMMON[@]}" "${SCORING[@]}"
run memory "${CAP[1]}" "$PY" benchmarks/bench_memory.py "${COMMON[@]}" "${MEMORY[@]}"
run rollout "${CAP[2]}" "$PY" benchmarks/bench_rollout.py "${COMMON[@]}" "${ROLLOUT[@]}"
run train-methods "${CAP[3]}" "$PY" -c "$TRAIN" "$MODE" methods
run train-scale "${CAP[4]}" "$PY" -c "$TRAIN" "$MODE" scale
echo "## gpu_check done in $((SECONDS - START)) s; log: $LOG" | tee -a "$LOG"
grep -h "^RESULT\|^chunk sizes meeting" "$LOG" | tee "$LOG.summary"
