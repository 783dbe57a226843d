"""Show that the shipped zoo is reproducible: rebuild it with the same seed and compare.

    python -m opsd_diag.zoo.rebuild_check [--models sample_data/models] [--record]

Builds the ``full`` size with the seed of the shipped ``build_report.json`` into a temporary
directory, then compares, per model, the SHA-256 of ``model.safetensors`` and every accuracy cell
of the model card. Bit-identity is a property of one CPU kind: a CPU of another make trains other
weights from the same code (benchmarks/zoo_rebuild/). ``--record`` writes the comparison into the
shipped MODEL_CARD.md (replacing an earlier record), so the card states when and how reproducibility
was last shown. Exit status 1 when anything differs. Takes as long as a build (about 20 minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch

from opsd_diag.zoo.build import build

MODELS = Path(__file__).resolve().parents[2] / "sample_data" / "models"
RECORD_HEADING = "## Rebuild check"


def cpu_model() -> str:
    """The CPU's model name: float arithmetic, hence bit-identity, holds per CPU kind (MKL picks kernels by it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def weights_sha256(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()


def compare(shipped: Path, rebuilt: Path) -> tuple[bool, str]:
    """(identical?, a Markdown section describing the comparison)."""
    a = json.loads((shipped / "build_report.json").read_text())
    b = json.loads((rebuilt / "build_report.json").read_text())
    rows, same = [], True
    for name in ("base", "teacher", "student"):
        ha, hb = weights_sha256(shipped / name), weights_sha256(rebuilt / name)
        same &= ha == hb
        rows.append(f"| {name} weights (SHA-256) | `{ha[:16]}` | `{hb[:16]}` | {'yes' if ha == hb else 'NO'} |")
    cells = [(row, col) for row in a["accuracy"] for col in a["accuracy"][row]]
    differing = [(r, c) for r, c in cells if a["accuracy"][r][c] != b["accuracy"].get(r, {}).get(c)]
    same &= not differing
    rows.append(f"| accuracy cells of the card | {len(cells)} | {len(cells) - len(differing)} equal | "
                f"{'yes' if not differing else 'NO: ' + ', '.join(f'{r} / {c}' for r, c in differing)} |")
    text = (f"{RECORD_HEADING}\n\n"
            f"Rebuilt with `python -m opsd_diag.zoo.rebuild_check --record` on {datetime.date.today()} "
            f"(seed {a['seed']}, {platform.machine()}, {cpu_model()}, torch {torch.__version__}) "
            f"and compared with the shipped build:\n\n"
            "| what | shipped | rebuilt | identical |\n|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            + ("The rebuild is bit-identical: same weights, same accuracies (tolerance 0).\n" if same else
               "The rebuild DIFFERS from the shipped build (see the table).\n"))
    return same, text


def record(card: Path, section: str) -> None:
    """Replace (or append) the rebuild-check section of the model card."""
    text = card.read_text()
    head = text.split(RECORD_HEADING)[0].rstrip("\n")
    card.write_text(head + "\n\n" + section)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=MODELS, help="the shipped zoo to check")
    ap.add_argument("--record", action="store_true", help="write the result into its MODEL_CARD.md")
    args = ap.parse_args(argv)
    shipped = json.loads((args.models / "build_report.json").read_text())
    with tempfile.TemporaryDirectory(prefix="zoo-rebuild-") as tmp:
        out = Path(tmp) / "models"
        build(out, problems_dir=Path(tmp) / "problems", size=shipped["size"], seed=shipped["seed"])
        same, section = compare(args.models, out)
    print(section)
    if args.record:
        record(args.models / "MODEL_CARD.md", section)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
