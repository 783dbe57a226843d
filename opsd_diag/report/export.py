"""Exports: a figure as self-contained HTML, PNG or SVG; a table as CSV, Parquet or JSON bytes.

PNG and SVG need kaleido (the ``export`` extra) and a Chrome or Chromium; HTML needs nothing.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import threading

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from opsd_diag.errors import OpsdError

IMAGE_FORMATS = ("png", "svg")
TABLE_FORMATS = ("csv", "parquet", "json")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
_KALEIDO = threading.Lock()


def figure_html(fig: go.Figure, full_html: bool = True, include_plotlyjs: bool | str = True) -> str:
    """HTML of a figure; the default inlines plotly.js so the file works offline."""
    return pio.to_html(fig, full_html=full_html, include_plotlyjs=include_plotlyjs)


def check_image_export() -> None:
    """Raise the actionable OpsdError when static export (kaleido) is not installed."""
    if importlib.util.find_spec("kaleido") is None:
        raise OpsdError("PNG/SVG export needs kaleido, which is not installed: "
                        "pip install 'opsd-diag[export]' (HTML export works without it)")


def image_export_available() -> bool:
    return importlib.util.find_spec("kaleido") is not None


def figure_image(fig: go.Figure, fmt: str = "png", width: int = 1100, height: int | None = None,
                 scale: float = 2.0) -> bytes:
    if fmt not in IMAGE_FORMATS:
        raise OpsdError(f"unknown image format '{fmt}': use one of {', '.join(IMAGE_FORMATS)}")
    check_image_export()
    error = None
    for _ in range(2):  # kaleido's first call in a process can fail while it starts its browser: one retry
        try:
            with _KALEIDO:  # one export at a time: the app's sessions share kaleido's browser
                return pio.to_image(fig, format=fmt, width=width, height=height or fig.layout.height or 500,
                                    scale=scale)
        except Exception as e:  # kaleido raises several types when it cannot start a browser
            error = e
    first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")[:160]
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    where = (f"a browser was found ({shutil.which(browser)}) but kaleido could not drive it; try again, or "
             if browser else "kaleido needs Chrome or Chromium: install one (e.g. apt-get install chromium), or ")
    raise OpsdError(f"{fmt.upper()} export failed twice ({type(error).__name__}: {first}): {where}"
                    "use the HTML export, which needs no browser") from error


def _lists(frame: pd.DataFrame, to_text: bool) -> pd.DataFrame:
    """List/array cells (token ids) as plain lists, or as JSON text for CSV (numpy's repr truncates)."""
    out = frame.copy()
    for c in out.columns:
        if out[c].dtype == object and out[c].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).any():
            out[c] = out[c].map(lambda v: (json.dumps if to_text else list)(np.asarray(v).tolist())
                                if isinstance(v, (list, tuple, np.ndarray)) else v)
    return out


_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a cell starting so as a formula


def _no_formulas(frame: pd.DataFrame) -> pd.DataFrame:
    """Text cells that a spreadsheet would run as a formula get a leading ``'`` (OWASP's advice for CSV
    injection); numbers, and the column names we write, are untouched."""
    out = frame.copy()
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c]):
            out[c] = out[c].map(lambda v: "'" + v if isinstance(v, str) and v.startswith(_FORMULA) else v)
    return out


def table_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """A table as CSV (text cells never read as formulas), Parquet or JSON (records; NaN -> null) bytes."""
    if fmt == "csv":
        return _no_formulas(_lists(frame, to_text=True)).to_csv(index=False).encode()
    if fmt == "parquet":
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        return buf.getvalue()
    if fmt == "json":
        return _lists(frame, to_text=False).to_json(orient="records", force_ascii=False).encode()
    raise OpsdError(f"unknown table format '{fmt}': use one of {', '.join(TABLE_FORMATS)}")
