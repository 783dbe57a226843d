"""The token heatmap as a Plotly figure (for PNG and SVG): tokens in a grid, one panel per config.

The HTML heatmap (``report.heatmap``) is what the app shows and what the HTML export holds; static
images need a figure, so here the same tokens are laid out ``width`` to a row (a new row after a
line break), coloured with the same scales: diverging around 0 for signed signals, sequential on
|value| for the rest.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from opsd_diag.report import heatmap
from opsd_diag.report.figures import who
from opsd_diag.schema import label

_ROW_PX = 22


def _grid(t: pd.DataFrame, signal: str, width: int):
    """(z, text, hover) arrays of shape rows x width for one config's tokens in position order."""
    cells: list[list[tuple[float, str, str]]] = [[]]
    for pos, tok, v in zip(t["pos"], t["token"].astype(str), t[signal].to_numpy(dtype=float)):
        if len(cells[-1]) == width:
            cells.append([])
        shown = heatmap.visible(tok).replace("\n", "").replace(" ", "·")
        cells[-1].append((v, shown[:10], f"pos {int(pos)} {html.escape(repr(tok))}<br>{signal} {heatmap.cell(signal, v)}"))
        if "\n" in tok:
            cells.append([])
    if not cells[-1] and len(cells) > 1:
        cells.pop()
    z = np.full((len(cells), width), np.nan)
    text = np.full((len(cells), width), "", dtype=object)
    hover = np.full((len(cells), width), "", dtype=object)
    for r, row in enumerate(cells):
        for c, (v, s, h) in enumerate(row):
            z[r, c], text[r, c], hover[r, c] = v, s, h
    return z, text, hover


def _colorscale(signal: str) -> list:
    if heatmap.is_signed(signal):
        return [[x, heatmap.signal_color(2 * x - 1, 1.0)] for x in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return [[x, heatmap.signal_color(x, 1.0, False)] for x in (0.0, 0.5, 1.0)]


def token_figure(panels: dict[str, pd.DataFrame], signal: str, scale: float, title: str = "",
                 width: int = 16) -> go.Figure:
    """``panels``: config -> that config's tokens of one rollout. One grid per config, stacked."""
    grids = {c: _grid(t.sort_values("pos"), signal, width) for c, t in panels.items()}
    heights = [max(1, g[0].shape[0]) for g in grids.values()] or [1]
    fig = make_subplots(rows=max(1, len(grids)), cols=1, subplot_titles=list(grids) or [""],
                        row_heights=heights, vertical_spacing=min(0.08, 60 / (sum(heights) * _ROW_PX + 200)))
    signed = heatmap.is_signed(signal)
    for i, (config, (z, text, hover)) in enumerate(grids.items()):
        shown = z if signed else np.abs(z)
        fig.add_trace(go.Heatmap(
            z=shown, text=text, customdata=hover, texttemplate="%{text}", textfont=dict(size=11),
            hovertemplate=who(config, signal) + "<br>%{customdata}<extra></extra>", colorscale=_colorscale(signal),
            zmin=-scale if signed else 0.0, zmax=scale, xgap=1, ygap=1, showscale=i == 0,
            colorbar=dict(title=dict(text=signal), len=0.5, y=1, yanchor="top")), row=i + 1, col=1)
        fig.update_yaxes(autorange="reversed", showticklabels=False, showgrid=False, row=i + 1, col=1)
        fig.update_xaxes(showticklabels=False, showgrid=False, row=i + 1, col=1)
    fig.update_layout(title=title or f"tokens coloured by {label(signal)}", plot_bgcolor="#fff",
                      height=int(160 + sum(heights) * _ROW_PX + 40 * len(grids)), width=1100,
                      margin=dict(t=90, l=20, r=20, b=20))
    return fig
