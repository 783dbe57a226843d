"""What every page shares: which run is open (kept in the URL), loading it (cached), the sidebar picker,
downloads that never go stale, and messages in the page's own words."""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
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


MAX_PATH = 4096  # PATH_MAX on Linux: no longer path can be opened


def user_path(text: str, what: str = "path") -> Path:
    """A path typed into a field (or the URL's ?run=) that the system can use, or one OpsdError saying why
    not: a NUL, a path or a name too long, a symbolic-link loop. Pages call it before using the text."""
    shown = text if len(text) <= 120 else f"{text[:60]}…{text[-40:]} ({len(text)} characters)"
    if "\x00" in text:
        raise OpsdError(f"{what} {shown!r} contains a NUL character, which no file name can hold: retype it")
    if len(os.fsencode(text)) > MAX_PATH:
        raise OpsdError(f"{what} {shown} is longer than any path can be ({MAX_PATH} bytes): check what was pasted")
    long = next((c for c in Path(text).parts if len(os.fsencode(c)) > 255), None)
    if long is not None:
        raise OpsdError(f"{what} {shown} has a name of {len(os.fsencode(long))} bytes; a file or folder name holds "
                        "at most 255: shorten it")
    try:
        path = Path(text).expanduser().resolve()
        path.exists()  # raises what the system refuses beyond a missing file (a parent it may not read...)
    except RuntimeError:  # Python 3.11's resolve() on a symbolic-link loop
        raise OpsdError(f"{what} {shown} is a symbolic-link loop: point to the real folder") from None
    except OSError as e:
        why = "is a symbolic-link loop" if e.errno == errno.ELOOP else f"cannot be used ({e.strerror})"
        raise OpsdError(f"{what} {shown} {why}: point to the real file or folder") from None
    return path


def check_fields(fields: dict[str, str | None]) -> None:
    """Every filled path field (label -> text) is usable (``user_path``), before a job starts."""
    for what, text in fields.items():
        if text:
            user_path(text, what)


def path_problem(e: BaseException) -> str | None:
    """The message for an exception a typed path raises inside a library call (a name too long, a link
    loop, a NUL), or None for any other exception (a bug keeps its traceback). main.py shows it in place."""
    if isinstance(e, OSError) and e.errno in (errno.ENAMETOOLONG, errno.ELOOP):
        what = "a name or path too long" if e.errno == errno.ENAMETOOLONG else "a symbolic-link loop"
        return f"a path given here is unusable ({what}): check the path fields ({e.strerror})"
    if isinstance(e, ValueError) and "null byte" in str(e):
        return "a path given here contains a NUL character, which no file name can hold: check the path fields"
    if isinstance(e, RuntimeError) and "Symlink loop" in str(e):
        return "a path given here is a symbolic-link loop: check the path fields"
    return None


def canonical(path: str | None) -> str | None:
    """One spelling per run directory (absolute, resolved), so a run is listed once; an unusable path is an
    OpsdError (``user_path``)."""
    return str(user_path(path, "run directory")) if path else None


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
    is what the picker shows; a damaged run folder is skipped with a note."""
    skipped: list = []
    runs = [str(p) for p in job_protocol.find_runs(st.session_state["runs_root"], "diagnosis", skipped)]
    try:
        current = canonical(st.session_state.get("run_dir"))
    except OpsdError as e:  # the page says so too (require_run); the picker still lists the others
        current = None
        st.sidebar.error(plain(str(e)))
    if current and current not in runs:
        runs.insert(0, current)
    if runs and not current:  # nothing opened yet: the newest run, as the picker shows it
        open_run(runs[0])
        current = runs[0]
    with st.sidebar:
        if skipped:
            st.caption(f"{len(skipped)} folder(s) under {md(st.session_state['runs_root'])}/ skipped, unreadable: "
                       + "; ".join(f"{md(p.name[:60])} ({md(why[:120])})" for p, why in skipped[:5]))
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
            try:
                open_run(typed)
            except OpsdError as e:
                st.error(plain(str(e)))
                return
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
    try:
        manifest = user_path(run_dir, "run directory") / "manifest.json"
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


@st.cache_data(show_spinner=False, max_entries=16, ttl=3600)
def _heatmap(path: str, stamp_: int, rollout: int, configs: tuple, signal: str, scale: str, entropy_bin, hot: tuple,
             fmt: str) -> str | bytes:
    run, tok = _load(path, stamp_), _tokenizer(path, stamp_)
    if fmt == "page":
        return run.heatmap(rollout, list(configs), signal, tok, scale=scale, entropy_bin=entropy_bin, hot=set(hot))
    return run.export_heatmap(rollout, list(configs), signal, fmt, tok, scale=scale)


def heatmap(run: Run, rollout: int, configs: list[str], signal: str, *, scale: str = "rollout", entropy_bin=None,
            hot=(), fmt: str = "page") -> str | bytes:
    """``Run.heatmap`` (``fmt`` "page") or ``Run.export_heatmap`` (html, png, svg) with the student's tokenizer,
    kept per run (its manifest's and summary's stamp) and arguments: a rerun of the Tokens page for any other
    widget redraws no heatmap (a 4,000-token one takes a second on a busy machine)."""
    return _heatmap(canonical(str(run.path)), stamp(run.path), int(rollout), tuple(configs), signal, scale,
                    entropy_bin, tuple(sorted(int(h) for h in hot)), fmt)


def signal_select(key: str, default: str = "r_opd", label_text: str = "Signal") -> str:
    cols = list(SIGNAL_COLUMNS)
    return st.selectbox(label_text, cols, index=cols.index(default), key=key, format_func=label)


_FLAGS = ((r"pass --resume to continue it, or choose another --out", "use Resume to continue it, or choose "
           "another run directory"), (r"--resume: ", ""), (r"--resume", "Resume"), (r"--out", "run directory"),
          (r"--from-diagnosis", "diagnosis"), (r"--config", "config"), (r"--signal", "signal"),
          (r"--max-steps", "steps"), (r"--eval-data", "evaluation data"), (r"opsd-train: error: ", ""))


def plain(message: str) -> str:
    """A library message in the page's own words: no command-line flag names, and no link or image the
    browser would follow (a message quotes paths and names from a run, which may be crafted)."""
    for pattern, words in _FLAGS:
        message = message.replace(pattern, words)
    message = re.sub(r"(?<!\w)--([a-z][\w-]*)", lambda m: m.group(1).replace("-", " "), message)
    # a backslash before punctuation (markdown's escape) is doubled, then brackets: no link or image
    return re.sub(r"([\[\]])", r"\\\1", re.sub(r"\\(?=[!-/:-@\[-`{-~])", r"\\\\", message))


_MARKUP = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$^=])")


def md(text) -> str:
    """Text from a run or a user inside markdown, every markup character escaped: shown as written, never
    an image, a link, HTML or a colour directive (st.write, st.caption and st.info render markdown)."""
    return _MARKUP.sub(r"\\\1", str(text))


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
