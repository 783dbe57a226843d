#!/usr/bin/env bash
# The three issue-3 ratios in bf16 on one CUDA GPU, with a random-initialised model of Qwen3-1.7B's
# shape (hidden 2048, 28 layers, 16/8 heads, head_dim 128, intermediate 6144, vocab 151936, tied).
# About 3-4 minutes on one H200; each benchmark is capped (90 + 120 + 80 s) so the whole stays under 5.
#
#   bash benchmarks/gpu_check.sh            # CUDA, bf16, Qwen3-1.7B shape
#   bash benchmarks/gpu_check.sh --smoke    # CPU, float32, tiny shapes: checks the invocations only
#
# All output goes to stdout and to "$OUT/gpu_check.log" ($OUT if set, else a temp directory).
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
LOG_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check.log"
: >"$LOG"

if [[ "${1:-}" == "--smoke" ]]; then
  COMMON=(--device cpu --dtype float32 --hidden 64 --layers 2 --heads 2 --kv-heads 1 --head-dim 32
          --intermediate 128)
  SCORING=(--vocab 2048 --batch 2 --prompt-len 16 --context-len 16 --completion-len 32 --warmup 1 --repeats 2)
  MEMORY=(--vocab 4096 --rollouts 2 --completion-len 64 --chunk-sizes 64,16)
  ROLLOUT=(--vocab 2048 --prompts 8 --batch-size 8 --sequential-prompts 2 --prompt-len 16 --max-new-tokens 8)
  CAP=(300 300 300)
else
  COMMON=(--device cuda --dtype bfloat16 --hidden 2048 --layers 28 --heads 16 --kv-heads 8 --head-dim 128
          --intermediate 6144 --vocab 151936)
  # scoring: 8 rollouts of up to 1024 tokens, question up to 256, privileged context up to 512
  SCORING=(--batch 8 --prompt-len 256 --context-len 512 --completion-len 1024 --chunk-size 64,256,1024
           --warmup 2 --repeats 7)
  # memory: issue setting, 8 x 512 completion tokens (model shape from COMMON, 3 x 3.4 GB of weights)
  MEMORY=(--rollouts 8 --completion-len 512 --chunk-sizes 256,128,64)
  # rollout: 64 prompts in one batch vs 8 prompts one at a time
  ROLLOUT=(--prompts 64 --batch-size 64 --sequential-prompts 8 --prompt-len 128 --max-new-tokens 128)
  CAP=(90 120 80)
fi

run() {  # run NAME CAP_SECONDS CMD...: log the command, its output and its status
  local name=$1 cap=$2
  shift 2
  echo "### $name: $*" | tee -a "$LOG"
  timeout "$cap" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 124 ]] && echo "### $name: TIMED OUT after ${cap}s" | tee -a "$LOG"
  echo "### $name: exit $rc" | tee -a "$LOG"
  echo | tee -a "$LOG"
}

{
  echo "## gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  [[ "${1:-}" == "--smoke" ]] && echo "SMOKE RUN: tiny CPU shapes, checks the invocations; its ratios mean nothing"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), '| transformers', transformers.__version__)"
  echo
} 2>&1 | tee -a "$LOG"

START=$SECONDS
run scoring "${CAP[0]}" "$PY" benchmarks/bench_scoring.py "${COMMON[@]}" "${SCORING[@]}"
run memory "${CAP[1]}" "$PY" benchmarks/bench_memory.py "${COMMON[@]}" "${MEMORY[@]}"
run rollout "${CAP[2]}" "$PY" benchmarks/bench_rollout.py "${COMMON[@]}" "${ROLLOUT[@]}"
echo "## gpu_check done in $((SECONDS - START)) s; log: $LOG" | tee -a "$LOG"
grep -h "^RESULT\|^chunk sizes meeting" "$LOG" | tee -a "$LOG.summary"
