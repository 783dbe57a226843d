"""The wheel ships predictor v2's model file: built from a copy of the source, installed into a fresh venv, the
installed package (not this checkout) diagnoses the bundled example's models and prints the decision panel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from opsd_diag import model_file, prediction

pytestmark = pytest.mark.slow  # builds a wheel and runs a diagnosis: `make test` only
SHIPPED = Path("opsd_diag") / "data" / model_file.SHIPPED
SOURCES = ("pyproject.toml", "README.md", "opsd_diag", "trainer", "app")


def _run(args: list, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}: {r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict]:
    """(a venv with the wheel of this source installed, the model file it ships). The venv sees the system's
    site packages (torch is not installed again). Until the study has written the package's model file, the
    copy that is built ships a synthetic one (tests/calibration.py), never the checkout's."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"  # a copy: the build writes build/ and egg-info beside the sources, never in the checkout
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    if not (src / SHIPPED).is_file():
        from calibration import write

        (src / SHIPPED).parent.mkdir(exist_ok=True)
        write(src / SHIPPED)
    model = json.loads((src / SHIPPED).read_text())
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
          root / "dist", src], cwd=root)
    wheel = next((root / "dist").glob("opsd_diag-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        assert SHIPPED.as_posix() in z.namelist()
        assert json.loads(z.read(SHIPPED.as_posix())) == model
    env = root / "venv"
    venv.create(env, system_site_packages=True, with_pip=True)
    _run([env / "bin" / "python", "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel],
         cwd=root)
    return env, model


def test_the_installed_wheel_predicts_on_the_bundled_example(installed, tmp_path, monkeypatch):
    env, model = installed
    where = _run([env / "bin" / "python", "-c", "import opsd_diag.prediction as p; print(p.__file__); "
                  "c = p.load(); print(c.source, c.choice)"], cwd=tmp_path).stdout.split("\n")
    assert where[0].startswith(str(env)), where  # the installed package, not this checkout
    assert where[1].split() == ["shipped", model["choice"]]
    # the bundled example, smaller: the same models and contexts, a few problems, with its lookahead
    cfg = yaml.safe_load((REPO / "sample_data/configs/quickstart.yaml").read_text())
    for spec in (cfg["student"], cfg["base"], cfg["teachers"][0]):
        spec["model"] = str(REPO / spec["model"])
    cfg["data"] = {"path": str(REPO / cfg["data"]["path"]), "limit": 6}
    cfg["sampling"].update(num_samples=2, max_completion_length=40)
    cfg["analysis"]["pass_k"] = [1, 2]
    cfg["ideal"] = {"budget": 48, "k": 2, "m": 2}
    cfg["lookahead"].update(steps=2, rollouts_per_step=4)
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(cfg))
    _run([env / "bin" / "opsd-diag", "run", "small.yaml", "--out", "run", "--quiet"], cwd=tmp_path, timeout=1500)
    out = _run([env / "bin" / "opsd-diag", "report", "run"], cwd=tmp_path).stdout
    from opsd_diag.run import Run

    # this checkout's reading of the same run with the same model file: the installed panel says the same
    monkeypatch.setattr("opsd_diag.prediction._shipped_text", lambda: json.dumps(model))
    p = Run.load(tmp_path / "run").predictions()
    text = prediction.panel(p)
    assert "decision (predictor v2):" in out and "Calibration: shipped" in out and "v1 verdicts, ranked" in out
    for key in ("headline", "effects", "why", "ranking", "tiers"):
        assert text[key] in out, key
    looked_ahead = {"opd", "jsd", "opsd_opd", "opsd_jsd"}
    full = model["choice"] != "v2_no_lookahead"
    assert {r.tier for r in p.rows if r.method in looked_ahead} == {"v2" if full else "v2_no_lookahead"}
    assert {r.tier for r in p.rows if r.method not in looked_ahead} == {"v2_no_lookahead"}
