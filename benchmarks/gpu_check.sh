#!/usr/bin/env bash
# The fast engines' targets on one CUDA GPU: every part side by side with today's path measured in
# the same run, in bf16, on random-initialised models of Qwen3-1.7B's shape (hidden 2048, 28 layers, 16/8 heads,
# head_dim 128, intermediate 6144, vocab 151936, tied):
#  - decode:        tokens/s of the static-cache CUDA-graph sampler (sampling.engine: static) vs sample_hf (HF
#                   generate) and the trainer's loop (engine.decode), batch 8 and 64, 128-token prompts, 128 new
#                   tokens (target >= 5x); its per-step logits replayed from graphs vs the same engine uncaptured.
#  - train-scale:   opd and jsd at the 1.7B shape through trainer.cli (bf16 autocast, 8 prompts x up to 128 new
#                   tokens): generated tokens trained/s, static vs today's sampler (targets >= 4x, sampling < 50%
#                   of the step). No checkpoint is saved (_save is stubbed); each run folder is deleted once read.
#  - scoring-*:     reference, fused (eager) and compiled scoring (scoring.engine) / bare full-logit forwards, chunk 128,
#                   one process per engine (a failed compile loses only its own row). Target <= 1.10.
#  - memory:        extra peak memory of reference and compiled scoring at chunk 128 / a naive scorer. Target <= 0.10.
#  - train-methods: every method for 2 steps on the bundled toy models with the static engine (finite metrics,
#                   a loadable checkpoint, an evaluation); each run folder deleted once checked.
#  - decode-hf:     transformers' own static cache, compiled by generate (mode reduce-overhead), beside the static
#                   engine and HF generate: does the library's path meet the target as well? Late, since compiling
#                   a 1.7B model may take most of its cap; its own process, so a slow compile loses only its rows.
#  - quickstart:    the bundled example on this machine's CPU (today's engines), on CUDA with today's engines and
#                   on CUDA with the new ones. Target: new CUDA <= this machine's CPU.
#
# One budget per call: before anything runs, the device's Python is checked against the carried wheels and the
# disk for headroom (a failure there: `gpu_check: error: ...`, exit 2). Every part then runs under its own cap
# (`timeout -k`: SIGTERM at the cap, SIGKILL GRACE s later, so a trainer's graceful stop cannot overrun), the caps
# plus the grace plus the preflight sum to at most BUDGET (800 s; `--plan` prints the sum), and a part that fails
# is listed in the summary while the next part runs. Temporary files live under one folder removed at the end.
#
# The GPU machine's Python has no pydantic or plotly (which the package needs): run `bash benchmarks/gpu_wheels.sh` (for the
# device's Python, PYVER=3.12 by default) where PyPI is reachable and carry `.whl` to the device.
#
#   bash benchmarks/gpu_check.sh                           # CUDA, bf16, Qwen3-1.7B shape
#   bash benchmarks/gpu_check.sh --smoke                   # CPU, float32, tiny shapes: runs every part to the end
#   bash benchmarks/gpu_check.sh --smoke --inject-failure memory   # that part fails (exit 3): the summary lists it
#   bash benchmarks/gpu_check.sh --plan                    # the parts, their caps and the sum; runs nothing
#   PARTS="decode train" bash benchmarks/gpu_check.sh      # some parts only (train: train-scale and train-methods;
#                                                          # a part by its whole name too: PARTS=decode-hf)
#   BUDGET=575 PARTS="decode train" bash ...; BUDGET=575 PARTS="scoring memory quickstart" bash ...
#                                                          # the whole check as two calls of at most 600 s each
#   HF_BATCHES=64 ...                                      # decode-hf at these batch sizes only
#
# Output: stdout and "$OUT/gpu_check.log" ($OUT if set, else a temp directory), "$OUT/gpu_check.log.summary" (the
# RESULT lines, each with its threshold, and every part's exit status). Exit status: 0 when every part exited 0,
# 1 when one failed or timed out, 2 when the preflight stopped the run. A CUDA run also appends the log to
# benchmarks/RESULTS.md (APPEND=0: not) and copies what it appended to "$OUT/RESULTS-append.md".
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

PY=${PYTHON:-$(command -v python3 || command -v python)}
PARTS=${PARTS:-decode train scoring quickstart memory}
BUDGET=${BUDGET:-800}  # one device call is at most 600 s: there, two calls (see above), BUDGET=575 each
GRACE=3       # seconds between a part's SIGTERM and its SIGKILL
PREFLIGHT=15  # what the preflight may take (counted in the sum)
WHEELS=${WHEELS:-.whl}
MODE=cuda INJECT="" PLAN=0
while (($#)); do
  case $1 in
    --smoke) MODE=smoke ;;
    --plan) PLAN=1 ;;
    --inject-failure) INJECT=${2:?--inject-failure needs a part name, e.g. memory or scoring-fused}; shift ;;
    *) echo "gpu_check: error: unknown argument '$1': use --smoke, --plan or --inject-failure PART" >&2; exit 2 ;;
  esac
  shift
done

# part name -> cap in seconds, in the order they run
NAMES=(decode train-scale scoring-reference scoring-fused scoring-compiled memory train-methods decode-hf quickstart)
if [[ $MODE == smoke ]]; then
  APPEND=${APPEND:-0}
  # a shared 2-core CPU, whose load varies tenfold: the smoke checks that every part runs to the end, not its time
  BUDGET=${SMOKE_BUDGET:-7200}
  NEED_GIB=1
  COMMON=(--device cpu --dtype float32 --hidden 64 --layers 2 --heads 2 --kv-heads 1 --head-dim 32
          --intermediate 128)
  DECODE=(--vocab 2048 --batch-sizes 2,4 --prompt-len 16 --max-new-tokens 8)
  SCORING=(--vocab 2048 --batch 2 --prompt-len 16 --context-len 16 --completion-len 32 --chunk-size 16
           --warmup 1 --repeats 2)
  MEMORY=(--vocab 4096 --rollouts 2 --completion-len 64 --chunk-sizes 16 --engines reference,compiled)
  CAPS=(600 600 600 600 600 600 600 600 1800)
else
  APPEND=${APPEND:-1}
  NEED_GIB=16  # two 1.7B bf16 models on disk (7 GiB) and room to spare; no checkpoint is written
  COMMON=(--device cuda --dtype bfloat16 --hidden 2048 --layers 28 --heads 16 --kv-heads 8 --head-dim 128
          --intermediate 6144 --vocab 151936)
  DECODE=(--batch-sizes 8,64 --prompt-len 128 --max-new-tokens 128)
  # 8 rollouts of up to 1024 tokens, question up to 256, privileged context up to 512, chunk 128
  SCORING=(--batch 8 --prompt-len 256 --context-len 512 --completion-len 1024 --chunk-size 128 --warmup 1 --repeats 3)
  MEMORY=(--rollouts 8 --completion-len 512 --chunk-sizes 128 --engines reference,compiled)
  # the order is the decisions' priority: a budget that runs out takes the last parts. Sized from the H100 run of
  # 2026-12-05 (benchmarks/logs/gpu_check_h100_2026-12-05*): decode took 73 s, scoring 25-30 s a engine, a compile
  # of HF's static cache 31 s a batch size, the bundled quickstart over 18 s even on the device's CPU
  #     decode train-scale scoring-ref scoring-fused scoring-compiled memory train-methods decode-hf quickstart
  CAPS=(90     150         35          35            60               60     60            150       90)
fi
chosen() { [[ " $PARTS " == *" $1 "* || " $PARTS " == *" ${1%%-*} "* ]]; }  # a part by its name or its prefix
TOTAL=$PREFLIGHT
for i in "${!NAMES[@]}"; do chosen "${NAMES[$i]}" && TOTAL=$((TOTAL + CAPS[i] + GRACE)); done
if ((PLAN)) || ((TOTAL > BUDGET)); then
  for i in "${!NAMES[@]}"; do
    chosen "${NAMES[$i]}" && printf '%-18s cap %4ss (+%ss to SIGKILL)\n' "${NAMES[$i]}" "${CAPS[$i]}" "$GRACE"
  done
  echo "preflight ${PREFLIGHT}s; sum ${TOTAL}s of a ${BUDGET}s budget ($MODE)"
  ((TOTAL > BUDGET)) && { echo "gpu_check: error: the caps sum to ${TOTAL}s, over the ${BUDGET}s budget" >&2; exit 2; }
  exit 0
fi

LOG_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/gpu_check.log"
: >"$LOG"
START=$SECONDS
export TMPDIR
TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")  # every temporary file of every part; removed at the end
trap 'rm -rf "$TMPDIR"' EXIT
fatal() { echo "gpu_check: error: $*" | tee -a "$LOG" >&2; exit 2; }

# -- preflight: nothing below runs unless the Python, its packages and the disk are right
pytag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")') || fatal "no Python at '$PY'"
if ! "$PY" -c "import pydantic" 2>/dev/null; then
  core=$(compgen -G "$WHEELS/pydantic_core-*.whl" | head -n 1)
  [[ -n $core ]] || fatal "this Python has no pydantic and $WHEELS holds no wheels: run 'bash benchmarks/gpu_wheels.sh'" \
    "where PyPI is reachable and carry $WHEELS"
  [[ ${core##*/} == *"-$pytag-"* ]] || fatal "the wheels in $WHEELS (${core##*/}) are not for this Python ($pytag):" \
    "rebuild them with PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') bash benchmarks/gpu_wheels.sh"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$TMPDIR/site" "$WHEELS"/*.whl ||
    fatal "installing the wheels of $WHEELS failed"
  export PYTHONPATH="$PYTHONPATH:$TMPDIR/site"
fi
"$PY" -c "import pydantic, torch, transformers, accelerate, opsd_diag.engine.fast.fast_decode, trainer.loop" 2>>"$LOG" ||
  fatal "the package does not import with $PY (see $LOG)"
if [[ $MODE == cuda ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
    fatal "CUDA is not available to torch: run with --smoke on a CPU machine"
fi
free_gib=$(($(df -Pk "$TMPDIR" | awk 'NR == 2 {print $4}') / 1048576))
((free_gib >= NEED_GIB)) || fatal "only ${free_gib} GiB free under $TMPDIR, the check needs ${NEED_GIB} GiB: free disk space"

FAILED=()
run() {  # run NAME CMD...: log the command, its output and its status, under NAME's cap (NAME's part in PARTS)
  local name=$1 cap
  shift
  chosen "$name" || return 0
  for i in "${!NAMES[@]}"; do [[ ${NAMES[$i]} == "$name" ]] && cap=${CAPS[$i]}; done
  local left=$((BUDGET - PREFLIGHT - (SECONDS - START)))
  ((cap > left)) && cap=$left
  if ((cap < 10)); then
    echo "### $name: SKIPPED, ${left}s left of the ${BUDGET}s budget" | tee -a "$LOG"
    FAILED+=("$name(skipped)")
    return 0
  fi
  local shown="$*"
  [[ ${2:-} == -c ]] && shown="$1 -c \"\$${INLINE:-TRAIN}\" ${*:4}"  # an inline script, by name
  if [[ -n $INJECT && ($INJECT == "$name" || $INJECT == "${name%%-*}") ]]; then
    set -- "$PY" -c "import sys; print('injected failure (--inject-failure $INJECT)'); sys.exit(3)"
    shown="$shown [replaced by an injected failure]"
  fi
  echo "### $name (cap ${cap}s): $shown" | tee -a "$LOG"
  timeout -k "$GRACE" "$cap" "$@" 2>&1 | grep --line-buffered -v "Loading weights\|Writing model shards\|it/s\]$" |
    tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  ((rc == 124 || rc == 137)) && echo "### $name: TIMED OUT after ${cap}s" | tee -a "$LOG"
  ((rc != 0)) && FAILED+=("$name")
  echo "### $name: exit $rc after $((SECONDS - START))s in all" | tee -a "$LOG"
  echo | tee -a "$LOG"
}

# The trainer through trainer.cli (what `opsd-train` runs), bf16 autocast on CUDA; the sampling engine per run.
read -r -d '' TRAIN <<'PYEOF'
import json, math, shutil, sys, tempfile, time
from pathlib import Path

import torch
import yaml

mode, part = sys.argv[1], sys.argv[2]
cuda = mode == "cuda"
if not cuda:
    torch.set_num_threads(1)
from trainer import cli, loop

tmp = Path(tempfile.mkdtemp(prefix="train-"))  # under the check's TMPDIR


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


try:
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
            shutil.rmtree(out)  # read: its checkpoint is not needed any more
            ok = math.isfinite(steps[-1]["loss"]) and evals
            print(f"RESULT train {name} [static]: loss {steps[-1]['loss']:.4f}, pass@1 "
                  f"{evals[-1].get('pass@1', math.nan):.3f}, peak {peak:.2f} GiB, {time.time() - t0:.0f} s  "
                  f"target: finite loss, an evaluation, a loadable checkpoint  {'PASS' if ok else 'FAIL'}", flush=True)
    else:  # scale: random weights at Qwen3-1.7B's shape (tiny with --smoke), initialised on the device
        from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

        loop._save = lambda *args, **kwargs: None  # no checkpoint: ~20 GB each at this shape, and ~16 s of the cap
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
        # 1 warm-up step (and, for static, the graph captures), then the timed steps
        for method, engine, n_steps in (("opd", "hf", 2), ("opd", "static", 3), ("jsd", "hf", 2), ("jsd", "static", 3)):
            try:
                out, steps, _, peak = train(models, {"method": method, "max_steps": n_steps}, 128 if cuda else 16,
                                            f"scale-{method}-{engine}", engine=engine)
            except Exception as e:  # noqa: BLE001 - one failed run keeps the other rows
                print(f"engine: train scale {method} [{engine}] failed: {type(e).__name__}: {e}"[:400], flush=True)
                continue
            shutil.rmtree(out)
            timed = steps[1:]
            seconds = sum(r["step_time_s"] for r in timed)
            rate = sum(r["tokens"] for r in timed) / seconds
            share = sum(r["sampling_s"] for r in timed) / seconds
            line = (f"RESULT train scale {method} [{engine}]: {rate:.0f} generated tokens trained/s ({share:.0%} of it "
                    f"sampling), {timed[-1]['tokens']} tokens/step, first step {steps[0]['step_time_s']:.1f} s, "
                    f"peak {peak:.1f} GiB")
            if engine == "hf":
                today[method] = rate
                line += "  (today's sampler: the reference of the next line)"
            elif method in today:
                ratio = rate / today[method]
                ok = ratio >= 4.0 and share < 0.5
                line += (f"; {ratio:.2f}x today's {today[method]:.0f} tok/s measured here  target >= 4x and "
                         f"sampling < 50%  {'PASS' if ok else 'FAIL'}")
            else:
                line += "; today's sampler failed: no ratio  FAIL"
            print(line, flush=True)
        if len(today) < 2:
            sys.exit(1)
finally:
    shutil.rmtree(tmp, ignore_errors=True)  # the 1.7B models and every run folder
PYEOF

# The bundled quickstart as a user runs it (a subprocess): this machine's CPU and CUDA with today's engines, CUDA
# with the new ones (smoke: the CPU twice). Each run has its own cap; one that fails or overruns is reported.
read -r -d '' QUICK <<'PYEOF'
import os, signal, subprocess, sys, tempfile, time
import yaml
mode = sys.argv[1]
dev = "cuda" if mode == "cuda" else "cpu"
cuda = mode == "cuda"
runs = [("cpu", "today's engines", "cpu", "hf", "reference", 28 if cuda else 850),  # caps: the part's, split
        (dev, "today's engines", dev, "hf", "reference", 28),
        (dev, "static sampler, compiled scoring", dev, "static", "compiled", 28 if cuda else 850)]
if not cuda:
    runs = [runs[0], runs[2]]
seconds = {}
for where, what, device, sampling, scoring, cap in runs:
    d = tempfile.mkdtemp(prefix="quick-")
    cfg = yaml.safe_load(open("sample_data/configs/quickstart.yaml"))
    cfg["device"], cfg["sampling"]["engine"], cfg.setdefault("scoring", {})["engine"] = device, sampling, scoring
    with open(os.path.join(d, "quick.yaml"), "w") as f:
        yaml.safe_dump(cfg, f)
    env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "opsd_diag.cli", "run", os.path.join(d, "quick.yaml"), "--out",
                             os.path.join(d, "q"), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=cap)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        print(f"quickstart on {where} [{what}]: over its {cap} s cap (killed)", flush=True)
        seconds[(where, what)] = None
        continue
    finally:
        subprocess.run(["rm", "-rf", d])
    took = time.perf_counter() - t0
    print(f"quickstart on {where} [{what}]: exit {proc.returncode} in {took:.1f} s", flush=True)
    if proc.returncode:
        print(out[-2000:], flush=True)
    seconds[(where, what)] = took if proc.returncode == 0 else None
cpu, new = seconds.get(("cpu", "today's engines")), seconds.get((dev, "static sampler, compiled scoring"))
today = seconds.get((dev, "today's engines")) if cuda else None
fmt = lambda s: "failed or over its cap" if s is None else f"{s:.1f} s"
ok = cpu is not None and new is not None and new <= cpu
print(f"RESULT quickstart on {dev} [static sampler, compiled scoring] {fmt(new)} vs this machine's CPU [today's engines] "
      f"{fmt(cpu)}" + (f" (today's engines on CUDA: {fmt(today)}, measured here)" if cuda else "") +
      f"  target: new {dev} <= CPU  {'PASS' if ok else 'FAIL'}", flush=True)
sys.exit(0 if cpu is not None and new is not None else 1)
PYEOF

{
  echo "## gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) git $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
       "parts: $PARTS; budget ${BUDGET}s, caps ${NAMES[*]}: ${CAPS[*]} (sum with grace and preflight ${TOTAL}s)"
  [[ $MODE == smoke ]] && echo "SMOKE RUN: tiny CPU shapes, checks the invocations; its ratios mean nothing"
  [[ -n $INJECT ]] && echo "INJECTED: --inject-failure $INJECT"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import sys, torch, transformers, accelerate; print('python', sys.version.split()[0], '| torch', \
torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), '| transformers', \
transformers.__version__, '| accelerate', accelerate.__version__)"
  echo "disk: ${free_gib} GiB free under $TMPDIR (needs ${NEED_GIB})"
  echo
} 2>&1 | tee -a "$LOG"

run decode "$PY" benchmarks/bench_decode.py "${COMMON[@]}" "${DECODE[@]}" --samplers sample_hf,trainer.sampler,static
run train-scale "$PY" -c "$TRAIN" "$MODE" scale
for engine in reference fused compiled; do
  run "scoring-$engine" "$PY" benchmarks/bench_scoring.py "${COMMON[@]}" "${SCORING[@]}" --engines "$engine"
done
run memory "$PY" benchmarks/bench_memory.py "${COMMON[@]}" "${MEMORY[@]}"
run train-methods "$PY" -c "$TRAIN" "$MODE" methods
run decode-hf "$PY" benchmarks/bench_decode.py "${COMMON[@]}" "${DECODE[@]}" --samplers sample_hf,static,hf_static \
  ${HF_BATCHES:+--batch-sizes "$HF_BATCHES"}
INLINE=QUICK run quickstart "$PY" -c "$QUICK" "$MODE"
{
  echo "## gpu_check done in $((SECONDS - START)) s; log: $LOG"
  if ((${#FAILED[@]})); then echo "FAILED parts: ${FAILED[*]}"; else echo "every part exited 0"; fi
} | tee -a "$LOG"
grep -h "^RESULT\|^check:\|^engine:\|^quickstart on\|^### .*: exit\|TIMED OUT\|SKIPPED\|^FAILED parts\|^every part\|^INJECTED" \
  "$LOG" |
  tee "$LOG.summary"

if [[ $APPEND == 1 ]]; then
  {
    echo
    echo "## gpu_check $(date -u +%Y-%m-%d), $MODE"
    echo
    echo '```'
    cat "$LOG"
    echo '```'
  } | tee "$LOG_DIR/RESULTS-append.md" >>benchmarks/RESULTS.md
fi
((${#FAILED[@]} == 0))
