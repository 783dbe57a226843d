"""Show that a built world is reproducible: rebuild it from its spec with the same seed and compare.

    python -m opsd_diag.zoo.rebuild_check [--world sample_data/worlds/chains.yaml] [--record | --write FILE]

Builds the world's ``full`` size with the seed of its committed ``build_report.json`` into a
temporary directory, then compares, per model, the SHA-256 of ``model.safetensors``, every accuracy
cell of the model card and every problem split file. Bit-identity is a property of one CPU kind: a
CPU of another make trains other weights from the same code (benchmarks/zoo_rebuild/). ``--record``
writes the comparison into the bundled zoo's MODEL_CARD.md (replacing an earlier record), so the card
states when and how reproducibility was last shown; a world's card is the render of its build
report alone, so its comparison goes to a file (``--write``): a new file, or an earlier record, never
through a link nor into a build's folder. Exit status 1 when anything differs, 2 with one line
``rebuild_check: error: ...`` for a user's mistake (a bad spec, a damaged committed report, a bad
``--write``), found before the rebuild starts. Takes as long as a build (7 to 45 minutes on 2 CPU cores,
by world).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch

from opsd_diag.argparser import Parser
from opsd_diag.errors import OpsdError
from opsd_diag.io import safe
from opsd_diag.zoo import guard, stored
from opsd_diag.zoo import world as world_mod
from opsd_diag.zoo.build import build
from opsd_diag.zoo.card import RECORD_HEADING

BUNDLED = Path(__file__).resolve().parents[2] / "sample_data" / "worlds" / "chains.yaml"


def cpu_model() -> str:
    """The CPU's model name: float arithmetic, hence bit-identity, holds per CPU kind (MKL picks kernels by it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def weights_sha256(model_dir: Path) -> str:
    return sha256(model_dir / "model.safetensors")


def compare(shipped: Path, rebuilt: Path, problems: tuple[Path, Path] | None = None,
            how: str = "") -> tuple[bool, str]:
    """(identical?, a Markdown section describing the comparison); ``problems``: (committed, rebuilt)
    split folders, compared file by file; ``how``: the command and machine line of the record."""
    a = json.loads((shipped / "build_report.json").read_text())
    b = json.loads((rebuilt / "build_report.json").read_text())
    rows, same = [], True

    def row(what: str, x: str, y: str) -> None:
        nonlocal same
        same &= x == y
        rows.append(f"| {what} | `{x[:16]}` | `{y[:16]}` | {'yes' if x == y else 'NO'} |")

    for name in ("base", "teacher", "student"):
        row(f"{name} weights (SHA-256)", weights_sha256(shipped / name), weights_sha256(rebuilt / name))
    cells = [(r, c) for r in a["accuracy"] for c in a["accuracy"][r]]
    differing = [(r, c) for r, c in cells if a["accuracy"][r][c] != b["accuracy"].get(r, {}).get(c)]
    same &= not differing
    rows.append(f"| accuracy cells of the card | {len(cells)} | {len(cells) - len(differing)} equal | "
                f"{'yes' if not differing else 'NO: ' + ', '.join(f'{r} / {c}' for r, c in differing)} |")
    if problems:
        old, new = problems
        for f in sorted(old.glob("*.jsonl")):
            row(f"problems/{f.name} (SHA-256)", sha256(f), sha256(new / f.name) if (new / f.name).exists() else "missing")
    how = how or (f"Rebuilt with `python -m opsd_diag.zoo.rebuild_check --record` on {datetime.date.today()} "
                  f"({platform.machine()}, {cpu_model()}, torch {torch.__version__})")
    text = (f"{RECORD_HEADING}\n\n{how} (seed {a['seed']}) and compared with the committed build:\n\n"
            "| what | committed | rebuilt | identical |\n|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            + ("The rebuild is bit-identical: same weights, same accuracies (tolerance 0).\n" if same else
               "The rebuild DIFFERS from the committed build (see the table).\n"))
    return same, text


def record(card: Path, section: str) -> None:
    """Replace (or append) the rebuild-check section of the model card."""
    text = safe.read_bytes(card).decode("utf-8")
    head = text.split(RECORD_HEADING)[0].rstrip("\n")
    safe.write_file(card, (head + "\n\n" + section).encode("utf-8"))


def check_write_target(path: Path) -> None:
    """``--write FILE``: a new file or an earlier record (it starts with the record's heading), in an existing
    folder that is no build's (a build's files are the build's); never through a link. Checked before the
    rebuild, which takes up to 45 minutes."""
    safe.check_path(path, "--write")
    if not path.parent.is_dir():
        raise OpsdError(f"--write {path}: no folder {path.parent}: create it or choose another path")
    host = next((d for d in (path.parent, *Path(os.path.abspath(path.parent)).parents)
                 if os.path.lexists(d / guard.MARKER)), None)
    if host is not None:
        raise OpsdError(f"--write {path} lies in the build folder {host}, whose files only a build writes: choose a "
                        "path outside it")
    safe.check_target(path)
    if os.path.lexists(path):
        try:
            earlier = safe.read_bytes(path, limit=1 << 20).startswith(RECORD_HEADING.encode())
        except (OSError, OpsdError):
            earlier = False
        if not earlier:
            raise OpsdError(f"--write {path} exists and is not an earlier rebuild record (it does not start with "
                            f"'{RECORD_HEADING}'): a record replaces only an earlier record; choose another path")


def load_avg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="rebuild_check", description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, default=BUNDLED, help="the world spec whose committed build is checked")
    out = ap.add_mutually_exclusive_group()
    out.add_argument("--record", action="store_true", help="write the result into the bundled zoo's MODEL_CARD.md")
    out.add_argument("--write", type=Path, metavar="FILE", help="write the result (a Markdown section) to FILE")
    args = ap.parse_args(argv)
    safe.check_path(args.world, "--world")
    spec = world_mod.load(args.world)
    models, problems = world_mod.folders(spec, args.world)
    if args.record and not spec.is_bundled():
        raise OpsdError(f"--record writes into the bundled zoo's card only; {args.world} is another world, "
                        "whose card is the render of its build report: use --write FILE")
    if not (models / stored.REPORT).is_file():
        raise OpsdError(f"no committed build at {models}: build it first (opsd-diag zoo build --world {args.world})")
    shipped = stored.read_report(models, spec)  # its size and seed rebuild it: checked before 45 minutes of work
    if args.write:
        check_write_target(args.write)
    if args.record:
        safe.check_target(models / "MODEL_CARD.md")
    words = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    load0, t0 = load_avg(), time.time()
    with tempfile.TemporaryDirectory(prefix="zoo-rebuild-") as tmp:
        out_dir = Path(tmp) / "models"
        build(out_dir, problems_dir=Path(tmp) / "problems", size=shipped["size"], seed=shipped["seed"], world=spec)
        command = " ".join(["python -m opsd_diag.zoo.rebuild_check", *([words] if words else [])])
        how = (f"Rebuilt with `{command}` on {datetime.date.today()} ({platform.machine()}, {cpu_model()}, "
               f"torch {torch.__version__}; {time.time() - t0:.0f} s, load average {load0} before, {load_avg()} after)")
        same, section = compare(models, out_dir, (problems, Path(tmp) / "problems"), how)
    print(section)
    if args.record:
        record(models / "MODEL_CARD.md", section)
    if args.write:
        safe.write_file(args.write, section.encode("utf-8"))
    return 0 if same else 1


def cli(argv: list[str] | None = None) -> int:
    """``main`` with a user's mistake (a bad spec, a damaged report, a bad --write) as one line, status 2."""
    try:
        return main(argv)
    except OpsdError as e:
        print(f"rebuild_check: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # argparse: its one line is printed already
        return e.code if isinstance(e.code, int) else 2


if __name__ == "__main__":
    sys.exit(cli())
