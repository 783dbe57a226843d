"""What every page shares: which run is open, loading it (cached), the sidebar run picker."""

from __future__ import annotations

import argparse
from pathlib import Path

import streamlit as st

from app import jobs
from opsd_diag import jobs as job_protocol
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.report.figures import FIGURE_HELP, default_alignment_config  # noqa: F401 (for the pages)
from opsd_diag.run import Run
from opsd_diag.schema import SIGNAL_COLUMNS, label


def init_state(argv: list[str]) -> None:
    """``--run DIR`` / ``--runs-root DIR`` from the command line, unless the session already chose."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--run")
    p.add_argument("--runs-root", default=str(jobs.RUNS_ROOT))
    args, _ = p.parse_known_args(argv)
    st.session_state.setdefault("run_dir", args.run)
    st.session_state.setdefault("runs_root", args.runs_root)


def sidebar_run_picker() -> None:
    runs = [str(p) for p in job_protocol.find_runs(st.session_state["runs_root"], "diagnosis")]
    current = st.session_state.get("run_dir")
    current = str(Path(current).resolve()) if current else None  # one spelling per run in the list
    if current and current not in runs:
        runs.insert(0, current)
    with st.sidebar:
        if runs:
            st.session_state["run_dir"] = st.selectbox(
                "Run", runs, index=runs.index(current) if current in runs else 0,
                help=f"run directories under {st.session_state['runs_root']}/")
        else:
            st.info(f"No runs under {st.session_state['runs_root']}/: start one on 'New diagnosis'.")
        typed = st.text_input("…or open a run directory", key="typed_run")
        if typed and typed != st.session_state.get("opened"):
            st.session_state["run_dir"] = st.session_state["opened"] = typed
            st.rerun()


@st.cache_resource(show_spinner="loading run", max_entries=4)
def _load(path: str, stamp: int) -> Run:
    # Shared, read-only: cache_resource avoids copying a large token table on every rerun.
    return Run.load(Path(path))


def require_run() -> Run:
    """The open run, or a message in place of the page (no run, still running, not a run)."""
    run_dir = st.session_state.get("run_dir")
    if not run_dir:
        st.info("No run open: pick one in the sidebar, or start a diagnosis on 'New diagnosis'.")
        st.stop()
    manifest = Path(run_dir) / "manifest.json"
    try:
        if manifest.is_file() and store.read_manifest(Path(run_dir)).get("status") != "finished":
            p = jobs.progress(run_dir)
            st.progress(p.fraction, text=f"{run_dir}: {p.text}")
            st.info("This run is not finished yet; its pages open when it is (reload to check).")
            st.stop()
        # the stamp changes when the run is finished or its predictor rerun (which rewrites only summary.json)
        stamp = sum(p.stat().st_mtime_ns for p in (manifest, Path(run_dir) / "summary.json") if p.is_file())
        return _load(str(run_dir), stamp)
    except OpsdError as e:
        st.error(str(e))
        st.stop()


def tokenizer(run: Run):
    """The student's tokenizer for decoding top-k ids (remote code never runs), or None: ids are shown."""
    tok = run.tokenizer()
    if tok is None:
        st.caption("Top-k alternatives shown as token ids: the student's tokenizer is not available here.")
    return tok


def signal_select(key: str, default: str = "r_opd") -> str:
    cols = list(SIGNAL_COLUMNS)
    return st.selectbox("Signal", cols, index=cols.index(default), key=key, format_func=label)
