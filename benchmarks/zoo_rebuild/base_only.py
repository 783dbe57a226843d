"""Train only the bundled zoo's base (its full 1000 steps, the build's exact code path) and compare
its weights with the shipped base: a few minutes instead of a full rebuild, to test whether a setting
of the math libraries (e.g. ``MKL_CBWR=AVX2``) makes this CPU compute what the CPU that built the zoo
computed.

    [MKL_CBWR=AVX2] python benchmarks/zoo_rebuild/base_only.py
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import opsd_diag.zoo.build as b
from opsd_diag.zoo.rebuild_check import cpu_model

REPO = Path(__file__).resolve().parents[2]


class InProcess:
    """The build's worker pool, run in this process (each chain is single-threaded and deterministic there too)."""
    def __init__(self, *a, **k): pass
    def __enter__(self): return self
    def __exit__(self, *a): return False
    def map(self, f, *its): return map(f, *its)


def main() -> int:
    b.ProcessPoolExecutor = InProcess
    full = b.size_of
    b.size_of = lambda w, s: replace(full(w, s), teacher_steps=1, student_steps=1, eval_per_level=1)
    env = {k: os.environ[k] for k in sorted(os.environ) if k.startswith(("MKL_", "ATEN_", "ONEDNN_", "DNNL_", "OMP_"))}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        b.build(Path(tmp) / "zoo", problems_dir=None, size="full", seed=0, log=lambda *a, **k: None)
        got = hashlib.sha256((Path(tmp) / "zoo" / "base" / "model.safetensors").read_bytes()).hexdigest()
    want = hashlib.sha256((REPO / "sample_data" / "models" / "base" / "model.safetensors").read_bytes()).hexdigest()
    print(f"CPU {cpu_model()} ({platform.machine()}); env {env or 'none'}; {time.time() - t0:.0f} s")
    print(f"base weights: shipped {want[:16]}, trained here {got[:16]}: {'IDENTICAL' if got == want else 'differ'}")
    return 0 if got == want else 1


if __name__ == "__main__":
    sys.exit(main())
