"""How often a process that read a Parquet file aborts after its work is done, side by side.

    python benchmarks/bench_exit.py [--runs N] [--write FILE]

Reading Parquet from a Python object (a file, ``bytes``) lets a thread of Arrow's pool drop the reader's last
reference after the program's end; that thread then needs the GIL while Python shuts down, cannot have it, and the
process aborts with "terminate called without an active exception" (exit 134), its output already written. The
product reads every Parquet file through ``opsd_diag.io.store.parquet_table``, which hands Arrow a copy it owns.
Each run is a fresh interpreter that reads the bundled example's ``rollouts.parquet`` (written first, into a temporary
folder) one way or the other and exits; the two ways alternate, so load on the machine falls on both alike.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READERS = {
    "pyarrow on the Python bytes (before)":
        "import sys, pyarrow as pa, pyarrow.parquet as pq; pq.read_table(pa.BufferReader(open(sys.argv[1], 'rb').read()))",
    "store.parquet_table (the product)":
        "import sys; from opsd_diag.io.store import parquet_table; parquet_table(open(sys.argv[1], 'rb').read())",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="fresh interpreters per reader")
    ap.add_argument("--write", type=Path, help="also write the table here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "q"
        subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", "sample_data/configs/quickstart.yaml",
                        "--out", str(out), "--quiet"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        table = out / "rollouts.parquet"
        codes: dict[str, list[int]] = {name: [] for name in READERS}
        for _ in range(args.runs):
            for name, code in READERS.items():
                codes[name].append(subprocess.run([sys.executable, "-c", code, str(table)], cwd=REPO,
                                                  stderr=subprocess.DEVNULL).returncode)
    rows = [{"reader": name, "runs": len(c), "exit 0": sum(x == 0 for x in c),
             "aborted (exit 134 / SIGABRT)": sum(x in (134, -6) for x in c),
             "other exit": sum(x not in (0, 134, -6) for x in c)} for name, c in codes.items()]
    text = "\n".join("| " + " | ".join(map(str, r)) + " |" for r in
                     [list(rows[0]), ["---"] * len(rows[0]), *[list(r.values()) for r in rows]])
    print(text)
    if args.write:
        args.write.write_text(f"`python benchmarks/bench_exit.py --runs {args.runs}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
