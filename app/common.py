"""What every page shares: which run is open (kept in the URL), loading it (cached), the sidebar picker,
downloads that never go stale, and messages in the page's own words."""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from app import jobs
from opsd_diag import jobs as job_protocol
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.schema import SIGNAL_COLUMNS, label, signal_name  # noqa: F401 (signal_name: for the pages)

if TYPE_CHECKING:
    from opsd_diag.run import Run

SMALL_TABLE = 50_000  # rows: below this a table's bytes are made at once, above on request


def __getattr__(name: str):
    """``FIGURE_HELP`` and ``default_alignment_config`` for the pages, imported on first use: the sidebar and a
    run still in progress need neither plotly nor scipy, so a first page view right after the server starts
    (during a diagnosis, on busy cores) does not wait for them (bench_app.py measures it)."""
    if name in ("FIGURE_HELP", "default_alignment_config"):
        from opsd_diag.report import figures

        return getattr(figures, name)
    raise AttributeError(name)


def init_state(argv: list[str]) -> None:
    """``--run DIR`` / ``--runs-root DIR`` from the command line, unless the session (or the URL) chose."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--run")
    p.add_argument("--runs-root", default=str(jobs.RUNS_ROOT))
    args, _ = p.parse_known_args(argv)
    # the URL's ?run= survives a reload (session state does not)
    st.session_state.setdefault("run_dir", st.query_params.get("run") or args.run)
    st.session_state.setdefault("runs_root", args.runs_root)


def canonical(path: str | None) -> str | None:
    """One spelling per run directory (absolute, resolved), so a run is listed once."""
    return str(Path(path).resolve()) if path else None


def open_run(path: str) -> None:
    """Open ``path``: the URL and the session say so, and the sidebar picker follows it on the next run
    (its stored selection is the old run's until then, so it is dropped here: it never wins over a new choice)."""
    st.session_state["run_dir"] = canonical(path)
    st.query_params["run"] = st.session_state["run_dir"]
    st.session_state.pop("picked_run", None)


def _picked() -> None:
    open_run(st.session_state["picked_run"])


def sidebar_run_picker() -> None:
    """The open run, chosen from the runs under the runs folder or typed. Only a change made in the picker
    opens a run from it (``on_change``): whatever opened the run last (a page's button, a typed path, the URL)
    is what the picker shows."""
    runs = [str(p) for p in job_protocol.find_runs(st.session_state["runs_root"], "diagnosis")]
    current = canonical(st.session_state.get("run_dir"))
    if current and current not in runs:
        runs.insert(0, current)
    if runs and not current:  # nothing opened yet: the newest run, as the picker shows it
        open_run(runs[0])
        current = runs[0]
    with st.sidebar:
        if runs:
            if current in runs:
                st.session_state["picked_run"] = current  # before the widget exists: allowed, and it shows current
            elif st.session_state.get("picked_run") not in runs:
                st.session_state.pop("picked_run", None)
            st.selectbox("Run", runs, help=f"run directories under {st.session_state['runs_root']}/",
                         key="picked_run", on_change=_picked)
            if current and st.query_params.get("run") != current:
                st.query_params["run"] = current
        else:
            st.info(f"No runs under {st.session_state['runs_root']}/: start one on 'New diagnosis'.")
        typed = st.text_input("…or open a run directory", key="typed_run")
        if typed and typed != st.session_state.get("opened"):
            st.session_state["opened"] = typed
            open_run(typed)
            st.rerun()


@st.cache_resource(show_spinner="loading run", max_entries=4)
def _load(path: str, stamp: int) -> Run:
    # Shared, read-only: cache_resource avoids copying a large token table on every rerun.
    from opsd_diag.run import Run  # heavy (pandas tables, scipy, plotly): only where a finished run is read

    return Run.load(Path(path))


def stamp(run_dir: str | Path) -> int:
    """Changes when the run is finished or its predictor rerun (which rewrites only summary.json)."""
    return sum(p.stat().st_mtime_ns for p in (Path(run_dir) / "manifest.json", Path(run_dir) / "summary.json")
               if p.is_file())


def load(run_dir: str | Path) -> Run:
    return _load(canonical(str(run_dir)), stamp(run_dir))


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
        return load(run_dir)
    except OpsdError as e:
        st.error(plain(str(e)))
        st.stop()


@st.cache_resource(show_spinner=False, max_entries=4)
def _tokenizer(path: str, stamp: int):
    return _load(path, stamp).tokenizer()


def tokenizer(run: Run, note: bool = True):
    """The student's tokenizer for decoding top-k ids (remote code never runs), or None: ids are shown."""
    tok = _tokenizer(canonical(str(run.path)), stamp(run.path))
    if tok is None and note:
        st.caption("Top-k alternatives shown as token ids: the student's tokenizer is not available here.")
    return tok


def signal_select(key: str, default: str = "r_opd", label_text: str = "Signal") -> str:
    cols = list(SIGNAL_COLUMNS)
    return st.selectbox(label_text, cols, index=cols.index(default), key=key, format_func=label)


_FLAGS = ((r"pass --resume to continue it, or choose another --out", "use Resume to continue it, or choose "
           "another run directory"), (r"--resume: ", ""), (r"--resume", "Resume"), (r"--out", "run directory"),
          (r"--from-diagnosis", "diagnosis"), (r"--config", "config"), (r"--signal", "signal"),
          (r"--max-steps", "steps"), (r"--eval-data", "evaluation data"), (r"opsd-train: error: ", ""))


def plain(message: str) -> str:
    """A library message in the page's own words: no command-line flag names."""
    for pattern, words in _FLAGS:
        message = message.replace(pattern, words)
    return re.sub(r"(?<!\w)--([a-z][\w-]*)", lambda m: m.group(1).replace("-", " "), message)


@st.cache_data(show_spinner="preparing the file", max_entries=32, ttl=3600)
def _table_bytes(path: str, stamp_: int, table: str, fmt: str) -> bytes:
    from opsd_diag.report import export

    return export.table_bytes(_load(path, stamp_).export_table(table), fmt)


def table_bytes(run: Run, table: str, fmt: str) -> bytes:
    return _table_bytes(canonical(str(run.path)), stamp(run.path), table, fmt)


def download(label_text: str, data: bytes | str, file_name: str, key: str, mime: str | None = None,
             **kw) -> None:
    """A download that works every time: the bytes are made before the click (never a deferred callable,
    whose file a rerun can drop), the click does not rerun the page, and the key names the content."""
    raw = data.encode() if isinstance(data, str) else data
    digest = hashlib.sha1(raw).hexdigest()[:10]
    st.download_button(label_text, raw, file_name=file_name, mime=mime, key=f"{key}-{digest}", on_click="ignore",
                       **kw)
