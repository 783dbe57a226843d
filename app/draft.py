"""What a page keeps across a reload: its form entries in a small draft file and the job it follows,
both named in the URL (``?draft=ID&job=DIR``), so a reload (a new session on the same URL) finds them.

Session state dies with a reload; the URL does not. The draft file lives under the runs folder
(``.drafts/ID.json``), one per browser tab (a new tab gets a new id), and holds only the plain values
(text, numbers, booleans) of the page's own widget keys.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from pathlib import Path

import streamlit as st

from opsd_diag.errors import OpsdError
from opsd_diag.io import safe, store

_ID = re.compile(r"[0-9a-f]{12}")
PLAIN = (str, int, float, bool)
MAX_DRAFT = 1 << 20  # bytes: a form's entries are a few kB


def draft_id() -> str:
    """This tab's draft id: the URL's when it is well formed, else a new one (written into the URL)."""
    did = st.query_params.get("draft")
    if not (isinstance(did, str) and _ID.fullmatch(did)):
        did = st.session_state.get("_draft_id") or uuid.uuid4().hex[:12]
    st.session_state["_draft_id"] = did
    st.query_params["draft"] = did
    return did


def _path(root: str | Path) -> Path:
    return Path(root) / ".drafts" / f"{draft_id()}.json"


def _ours(k, prefix: tuple[str, ...], extra: tuple[str, ...], skip: tuple[str, ...]) -> bool:
    return isinstance(k, str) and (k.startswith(prefix) or k in extra) and k not in skip


def restore(root: str | Path, prefix: tuple[str, ...], extra: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> None:
    """Once per session: the draft's values of the page's keys into session state, before the widgets
    exist (a value the session already holds wins). A missing, torn or foreign file restores nothing;
    ``applied()`` says whether anything was restored (a widget that refuses a value: see ``forget``)."""
    if st.session_state.get("_draft_restored"):
        return
    st.session_state["_draft_restored"] = True
    try:  # bounded, and never blocking on a FIFO or following a link put where the draft was
        data = safe.read_json(_path(root), MAX_DRAFT)
    except (OSError, ValueError, OpsdError):
        return
    if not isinstance(data, dict):
        return
    for k, v in data.items():
        if _ours(k, prefix, extra, skip) and isinstance(v, PLAIN) and k not in st.session_state:
            st.session_state[k] = v
            st.session_state["_draft_applied"] = True


def applied() -> bool:
    return bool(st.session_state.get("_draft_applied"))


def save(root: str | Path, prefix: tuple[str, ...], extra: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> None:
    """The plain values of the widget keys starting with ``prefix`` (plus ``extra``) into the draft file,
    when they changed since the last save; a folder that cannot be written (or a link, a FIFO in the way)
    keeps no draft (nothing fails)."""
    values = {k: v for k, v in st.session_state.items() if _ours(k, prefix, extra, skip) and isinstance(v, PLAIN)}
    if values == st.session_state.get("_draft_saved"):
        return
    try:
        path = _path(root)
        safe.real_dir(path.parent, root)  # a link as .drafts is never followed out of the runs folder
        store.atomic_write_json(path, values)  # a link or FIFO as the draft file is refused
    except (OSError, OpsdError):
        return
    st.session_state["_draft_saved"] = values


def forget(root: str | Path, prefix: tuple[str, ...], extra: tuple[str, ...] = ()) -> None:
    """Drop the draft and the values it restored (a widget refused one: a file from another version)."""
    with contextlib.suppress(OSError):  # a folder in its place: nothing to drop
        _path(root).unlink(missing_ok=True)
    for k in [k for k in st.session_state if _ours(k, prefix, extra, ())]:
        del st.session_state[k]
    for k in ("_draft_saved", "_draft_applied"):
        st.session_state.pop(k, None)


def followed_job(key: str = "job") -> str | None:
    """The job this tab follows: the session's, else the URL's (after a reload); kept in the URL."""
    job = st.session_state.get(key) or st.query_params.get(key)
    if job:
        st.session_state[key] = job
        st.query_params[key] = job
    return job
