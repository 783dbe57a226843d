#!/usr/bin/env bash
# Does the builder at commit NEW train the same chains zoo as the builder at commit OLD, on this CPU?
# Builds the `full` chains zoo (its real shapes, pool, tokenizer and splits) at both commits with every
# training shortened to STEPS steps and in-process (single-threaded, deterministic kernels, as the full
# build's worker processes), then prints the SHA-256 of each model's weights. Equal hashes: the same
# code path; a full-size mismatch with the shipped weights is then the CPU's arithmetic, not the code.
#   benchmarks/zoo_rebuild/same_code.sh [OLD [NEW [STEPS]]]     (default a222f84 HEAD 40; ~2 min each)
set -eu
OLD=${1:-a222f84}; NEW=${2:-HEAD}; STEPS=${3:-40}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d); trap 'git -C "$REPO" worktree prune; rm -rf "$TMP"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); torch $(python -c 'import torch; print(torch.__version__)'); steps $STEPS"
for c in "$OLD" "$NEW"; do
  sha=$(git -C "$REPO" rev-parse --short "$c")
  git -C "$REPO" worktree add -q --detach "$TMP/$sha" "$sha"
  (cd "$TMP/$sha" && python - "$TMP/$sha" "$STEPS" <<'PY'
import hashlib, pathlib, sys
from dataclasses import replace
root, steps = pathlib.Path(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, str(root))
import opsd_diag.zoo.build as b

class InProcess:  # the full build's two worker processes, run one after the other here
    def __init__(self, *a, **k): pass
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def map(self, f, *its): return map(f, *its)

b.ProcessPoolExecutor = InProcess
few = dict(base_steps=steps, teacher_steps=steps, student_steps=steps, eval_per_level=2)
if hasattr(b, "size_of"):  # the spec-driven builder (issue 20)
    full = b.size_of
    b.size_of = lambda w, s: replace(full(w, s), **few)
else:  # the builder before the world specs
    b.SIZES["full"] = replace(b.SIZES["full"], **few)
b.build(root / "zoo", problems_dir=root / "problems", size="full", seed=0, log=lambda *a, **k: None)
print(root.name, *(f"{r} {hashlib.sha256((root / 'zoo' / r / 'model.safetensors').read_bytes()).hexdigest()[:16]}"
                   for r in ("base", "teacher", "student")))
PY
  ) 2>/dev/null
done
