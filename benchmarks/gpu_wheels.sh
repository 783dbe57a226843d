#!/usr/bin/env bash
# Downloads, here, the wheels the GPU machine lacks (its Python has torch, transformers and accelerate but
# no pydantic or plotly) into .whl/ (ignored by git), for the device's Python (PYVER, 3.12 by default) on x86-64 Linux.
# gpu_check.sh installs them there into a private folder when `import pydantic` fails, after checking that
# the wheels' tag (cp312) is the device Python's. Pass .whl in the device run's `carry`.
#
#   bash benchmarks/gpu_wheels.sh              # once, on a machine that reaches PyPI
#   PYVER=3.13 bash benchmarks/gpu_wheels.sh   # for a device with another Python
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PYVER=${PYVER:-3.12}
PYD=$("$PY" -c "import pydantic; print(pydantic.VERSION)" 2>/dev/null || echo 2.14.4)
mkdir -p .whl
rm -f .whl/*.whl
dl() {
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$@"
}
dl "pydantic==$PYD"
CORE=$(unzip -p .whl/pydantic-"$PYD"-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: pydantic-core==\([^ ;]*\).*/\1/p')
dl "pydantic-core==$CORE" annotated-types typing-inspection typing-extensions
# the trainer imports opsd_diag.run, which draws with Plotly (the H100 run of 2026-12-05 lacked it)
PLT=$("$PY" -c "import plotly; print(plotly.__version__)" 2>/dev/null || echo 7.1.0)
NW=$("$PY" -c "import narwhals; print(narwhals.__version__)" 2>/dev/null || echo 2.29.0)
dl "plotly==$PLT" "narwhals==$NW"
ls -l .whl
