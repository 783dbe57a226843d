#!/usr/bin/env bash
# Issue 14's targets, side by side with today's paths, in one run of at most 8 minutes on one CUDA GPU, in
# bf16, with random-initialised models of Qwen3-1.7B's shape (hidden 2048, 28 layers, 16/8 heads, head_dim
# 128, intermediate 6144, vocab 151936, tied):
#  - decode:    tokens/s of the static-cache CUDA-graph sampler (sampling.engine: static) vs sample_hf
#               (HF generate) and the row-dropping loop (engine.decode), at batch 8 and 64, 128-token prompts, 128 new tokens; plus
#               a check of its per-step logits against unpadded forwards. Target >= 5x.
#  - train:     opd and jsd at the 1.7B shape through trainer.cli (bf16 autocast, 8 prompts x up to 256 new
#               tokens): generated tokens trained/s and the sampling share, static engine vs today's
#               sampler measured in the same run. Targets: >= 4x today's, sampling < 50% of the step. Last of all
#               (after memory), every method for 2 steps on the bundled toy models with the static engine
#               (finite metrics, a loadable checkpoint, an evaluation).
#  - scoring:   score_batch vs fused vs compiled (scoring.engine; engine/fused_scoring.py) / bare full-logit forwards at the
#               default chunk size (128). Target <= 1.10.
#  - quickstart: the bundled example on CUDA with the static sampler and fused scoring. Target: no slower
#               than on a 2-core CPU (14.3 s, RESULTS.md).
#  - memory:    extra peak memory of score_batch and fused scoring at chunk 128 / a naive scorer. Target <= 0.10.
# Parts run in that order, each under its own cap and all under one deadline (BUDGET, 470 s): a part that
# would not fit is skipped and says so.
#
# The GPU machine's Python has no pydantic (which the package needs): run `bash benchmarks/gpu_wheels.sh`
# here first and carry `.whl` to the device; the wheels are installed into a private folder there.
#
#   bash benchmarks/gpu_check.sh                  # CUDA, bf16, Qwen3-1.7B shape
#   bash benchmarks/gpu_check.sh --smoke          # CPU, float32, tiny shapes: checks the invocations only
#   PARTS="decode train" bash benchmarks/gpu_check.sh    # some parts only
#
# Output: stdout and "$OUT/gpu_check.log" ($OUT if set, else a temp directory), "$OUT/gpu_check.log.summary"
# (the RESULT lines). A CUDA run also appends the log to benchmarks/RESULTS.md (APPEND=0: not; APPEND=1
# with --smoke: also) and copies what it appended to "$OUT/RESULTS-append.md".
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

PY=${PYTHON:-$(command -v python3 || command -v python)}
PARTS=${PARTS:-decode train scoring quickstart memory}
BUDGET=${BUDGET:-470}
QUICKSTART_CPU_S=${QUICKSTART_CPU_S:-14.3}
LOG_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check.log"
: >"$LOG"
START=$SECONDS

if [[ "${1:-}" == "--smoke" ]]; then
  MODE=smoke
  APPEND=${APPEND:-0}
  COMMON=(--device cpu --dtype float32 --hidden 64 --layers 2 --heads 2 --kv-heads 1 --head-dim 32
          --intermediate 128)
  DECODE=(--vocab 2048 --batch-sizes 2,4 --prompt-len 16 --max-new-tokens 8)
  SCORING=(--vocab 2048 --batch 2 --prompt-len 16 --context-len 16 --completion-len 32 --chunk-size 16
           --engines reference,fused,compiled --warmup 1 --repeats 2)
  MEMORY=(--vocab 4096 --rollouts 2 --completion-len 64 --chunk-sizes 16 --engines reference,fused)
  CAP=(120 300 240 120 240)
else
  MODE=cuda
  APPEND=${APPEND:-1}
  COMMON=(--device cuda --dtype bfloat16 --hidden 2048 --layers 28 --heads 16 --kv-heads 8 --head-dim 128
          --intermediate 6144 --vocab 151936)
  # decode: batch 8 and 64, 128-token prompts, 128 new tokens, each sampler once after a same-shape warm-up
  DECODE=(--batch-sizes 8,64 --prompt-len 128 --max-new-tokens 128)
  # scoring: 8 rollouts of up to 1024 tokens, question up to 256, privileged context up to 512, chunk 128
  SCORING=(--batch 8 --prompt-len 256 --context-len 512 --completion-len 1024 --chunk-size 128
           --engines reference,fused,compiled --warmup 2 --repeats 5)
  # memory: 8 x 512 completion tokens, chunk 128, today's and the fused scorer
  MEMORY=(--rollouts 8 --completion-len 512 --chunk-sizes 128 --engines reference,fused)
  #    decode train scoring quickstart memory
  CAP=(110 170 130 80 80)
fi

# Python packages: pydantic is missing on the GPU machine; install the carried wheels privately
if ! "$PY" -c "import pydantic" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/opsd-site \
      .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/opsd-site"
  fi
  "$PY" -c "import pydantic" 2>/dev/null ||
    echo "WARNING: no pydantic (run benchmarks/gpu_wheels.sh where PyPI is reachable, carry .whl): parts fail" |
    tee -a "$LOG"
fi

run() {  # run NAME CAP_SECONDS CMD...: log the command, its output and its status (NAME's part in PARTS)
  local name=$1 cap=$2
  shift 2
  [[ " $PARTS " == *" ${name%%-*} "* ]] || return 0
  local left=$((BUDGET - (SECONDS - START)))
  ((cap > left)) && cap=$left
  if ((cap < 20)); then
    echo "### $name: SKIPPED, ${left}s left of the ${BUDGET}s budget" | tee -a "$LOG"
    return 0
  fi
  local shown="$*"
  [[ ${2:-} == -c ]] && shown="$1 -c \"\$${INLINE:-TRAIN}\" ${*:4}"  # an inline script, by name
  echo "### $name (cap ${cap}s): $shown" | tee -a "$LOG"
  timeout "$cap" "$@" 2>&1 | grep --line-buffered -v "Loading weights\|Writing model shards\|it/s\]$" | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 124 ]] && echo "### $name: TIMED OUT after ${cap}s" | tee -a "$LOG"
  echo "### $name: exit $rc after $((SECONDS - START))s in all" | tee -a "$LOG"
  echo | tee -a "$LOG"
}

# The trainer through trainer.cli (what `opsd-train` runs), bf16 autocast on CUDA; the sampling engine per run.
read -r -d '' TRAIN <<'PYEOF'
import json, math, os, sys, tempfile, time
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


def train(models, training, max_new, name, eval_data=None, engine="hf"):
    cfg = {"student": {"model": str(models / "student")}, "base": {"model": str(models / "base")},
           "teachers": [{"name": "teacher", "model": str(models / "teacher")},
                        {"name": "self_full", "context": "full_solution"}],
           "data": {"path": "sample_data/problems/train.jsonl", "limit": 256},
           "sampling": {"temperature": 1.0, "max_completion_length": max_new, "engine": engine},
           "analysis": {"checker": "toy"},
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


if part == "methods":  # every method, 2 steps, on the bundled toy models, with an evaluation, static engine
    from transformers import AutoModelForCausalLM

    dev = {"path": "sample_data/problems/dev.jsonl", "limit": 16}
    for training in ({"method": "opd"}, {"method": "jsd", "beta": 0.5},
                     {"method": "opsd", "loss": "jsd", "teacher_weights": "frozen"},
                     {"method": "opsd", "loss": "opd", "teacher_weights": "ema"},
                     {"method": "opd2"}, {"method": "exopd"},
                     {"method": "sft", "sft_target": "{solution}\nAnswer: {answer}"}):
        t0 = time.time()
        name = "-".join(str(v) for v in training.values() if len(str(v)) < 12)
        out, steps, evals, peak = train(Path("sample_data/models"), {**training, "max_steps": 2}, 72, name, dev,
                                        engine="static")
        AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-000002")
        print(f"RESULT train {name} [static]: loss {steps[-1]['loss']:.4f}, pass@1 "
              f"{evals[-1].get('pass@1', math.nan):.3f}, peak {peak:.2f} GiB, {time.time() - t0:.0f} s PASS", flush=True)
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
    today = {}
    # today's sampler: 1 warm-up + 2 timed steps (97% of a step is sampling: its rate is set by then)
    for method, engine, n_steps in (("opd", "hf", 3), ("opd", "static", 4), ("jsd", "hf", 3), ("jsd", "static", 4)):
        out, steps, _, peak = train(models, {"method": method, "max_steps": n_steps}, 256 if cuda else 16,
                                    f"scale-{method}-{engine}", engine=engine)
        timed = steps[1:]  # the first step is the warm-up (and, for static, the graph captures)
        seconds = sum(r["step_time_s"] for r in timed)
        rate = sum(r["tokens"] for r in timed) / seconds
        share = sum(r["sampling_s"] for r in timed) / seconds
        line = (f"RESULT train scale {method} [{engine}]: {rate:.0f} generated tokens trained/s ({share:.0%} of it "
                f"sampling), {timed[-1]['tokens']} tokens/step, first step {steps[0]['step_time_s']:.1f} s, "
                f"peak {peak:.1f} GiB")
        if engine == "hf":
            today[method] = rate
            line += " (today's sampler)"
        else:
            ref = today.get(method) or today.get("opd")
            ratio = rate / ref
            ok = ratio >= 4.0 and share < 0.5
            line += (f"; {ratio:.2f}x today's {ref:.0f} tok/s measured here (targets >= 4x and sampling < 50%) "
                     f"{'PASS' if ok else 'FAIL'}")
        print(line, flush=True)
PYEOF

# The bundled quickstart on this device with the new engines (a subprocess, as a user runs it).
read -r -d '' QUICK <<'PYEOF'
import os, subprocess, sys, tempfile, time
import yaml
cpu_s = float(sys.argv[1])
with tempfile.TemporaryDirectory() as d:
    cfg = yaml.safe_load(open("sample_data/configs/quickstart.yaml"))
    cfg["sampling"]["engine"], cfg.setdefault("scoring", {})["engine"] = "static", "fused"  # the new paths
    with open(os.path.join(d, "quick.yaml"), "w") as f:
        yaml.safe_dump(cfg, f)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", os.path.join(d, "quick.yaml"),
                           "--out", os.path.join(d, "q"), "--quiet"], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
print(done.stdout[-1500:], done.stderr[-3000:] if done.returncode else "", sep="\n")
assert done.returncode == 0, done.returncode
print(f"RESULT quickstart [static sampler, fused scoring] {seconds:.1f} s vs {cpu_s:.1f} s on a 2-core CPU "
      f"(RESULTS.md; today's path took 68 s on the H200 on 2026-11-30): ratio {seconds / cpu_s:.2f}  target <= 1.00  "
      f"{'PASS' if seconds <= cpu_s else 'FAIL'}", flush=True)
PYEOF

{
  echo "## gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "parts: $PARTS (issue 14: static sampler, fused scoring, trainer)"
  [[ $MODE == smoke ]] && echo "SMOKE RUN: tiny CPU shapes, checks the invocations; its ratios mean nothing"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available(), '| transformers', transformers.__version__, '| accelerate', \
accelerate.__version__)"
  echo
} 2>&1 | tee -a "$LOG"

run decode "${CAP[0]}" "$PY" benchmarks/bench_decode.py "${COMMON[@]}" "${DECODE[@]}"
run train-scale "${CAP[1]}" "$PY" -c "$TRAIN" "$MODE" scale
run scoring "${CAP[2]}" "$PY" benchmarks/bench_scoring.py "${COMMON[@]}" "${SCORING[@]}"
INLINE=QUICK run quickstart "${CAP[3]}" "$PY" -c "$QUICK" "$QUICKSTART_CPU_S"
run memory "${CAP[4]}" "$PY" benchmarks/bench_memory.py "${COMMON[@]}" "${MEMORY[@]}"
run train-methods 60 "$PY" -c "$TRAIN" "$MODE" methods
echo "## gpu_check done in $((SECONDS - START)) s; log: $LOG" | tee -a "$LOG"
grep -h "^RESULT\|^check:\|^engine:\|TIMED OUT\|SKIPPED" "$LOG" | tee "$LOG.summary"

if [[ $APPEND == 1 ]]; then
  {
    echo
    echo "## gpu_check (issue 14) $(date -u +%Y-%m-%d), $MODE"
    echo
    echo '```'
    cat "$LOG"
    echo '```'
  } | tee "$LOG_DIR/RESULTS-append.md" >>benchmarks/RESULTS.md
fi
