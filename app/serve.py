"""Launch the app on 127.0.0.1: ``python -m app.serve [--run DIR] [--port N]``.

Without ``--run`` (and ``--runs-root``) it opens the bundled example run ``runs/quickstart``, producing
it first with ``opsd-diag run sample_data/configs/quickstart.yaml --out runs/quickstart`` when it is
missing or unfinished (a rerun resumes). ``--runs-root DIR`` lists the runs of another folder (and
builds nothing). Everything runs as child processes from argument lists, never a shell; a stop (Ctrl+C,
SIGTERM) stops the child too, so no Streamlit is left serving the port.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

from opsd_diag.argparser import stop_as_interrupt

REPO = Path(__file__).resolve().parents[1]
QUICKSTART_CONFIG = Path("sample_data/configs/quickstart.yaml")
QUICKSTART_RUN = Path("runs/quickstart")
HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def run_finished(run_dir: Path) -> bool:
    manifest = run_dir / "manifest.json"
    return manifest.is_file() and json.loads(manifest.read_text()).get("status") == "finished"


def diagnose_command(config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "opsd_diag.cli", "run", str(config), "--out", str(out)]


def streamlit_command(port: int, run_dir: Path | None, runs_root: Path | None = None) -> list[str]:
    tail = [*(["--run", str(run_dir)] if run_dir else []), *(["--runs-root", str(runs_root)] if runs_root else [])]
    return [sys.executable, "-m", "streamlit", "run", str(REPO / "app" / "main.py"),
            "--server.address", HOST, "--server.port", str(port), "--", *tail]


def child(argv: list[str], cwd: Path) -> int:
    """Run a child process to its end. On a stop of this process the child is stopped too: given a moment to
    end by itself (Ctrl+C reaches the whole terminal group), then SIGTERM, then after 10 s SIGKILL."""
    proc = subprocess.Popen(argv, cwd=cwd)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(timeout=2)  # Ctrl+C in a terminal reached the child too: it ends by itself
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise


def main(argv: list[str] | None = None) -> int:
    with stop_as_interrupt():  # SIGTERM as Ctrl+C, so it reaches the child (below) instead of orphaning it
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.serve", description=__doc__.splitlines()[0])
    p.add_argument("--run", help=f"run directory to open (default {QUICKSTART_RUN}, built when missing)")
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--runs-root", help="folder whose runs the app lists (default runs/); builds no example")
    args = p.parse_args(argv)

    runs_root = Path(args.runs_root).resolve() if args.runs_root else None
    run_dir = Path(args.run).resolve() if args.run else (None if runs_root else QUICKSTART_RUN)  # streamlit: REPO
    if not args.run and not runs_root and not run_finished(REPO / run_dir):
        cmd = diagnose_command(QUICKSTART_CONFIG, run_dir)
        print(f"building the example run: {' '.join(cmd)}", flush=True)
        try:
            rc = child(cmd, REPO)
        except KeyboardInterrupt:
            print("python -m app.serve: interrupted while building the example run; run it again to resume the "
                  "build (its finished shards are kept)", file=sys.stderr)
            return 130
        if rc != 0:
            print(f"opsd-diag: error: the example run failed (status {rc}); if sample_data/models is missing, "
                  "build it with 'opsd-diag zoo build', or pass --run DIR", file=sys.stderr)
            return 2
    port = args.port or free_port()
    print(f"OPSD-Diag app: http://{HOST}:{port}  (run {run_dir or 'none'}; Ctrl+C to stop)", flush=True)
    try:
        return child(streamlit_command(port, run_dir, runs_root), REPO)
    except KeyboardInterrupt:  # the usual way to stop the app: Streamlit has been stopped with it
        return 0


if __name__ == "__main__":
    sys.exit(main())
