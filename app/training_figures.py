"""Figures of a training run's ``metrics.jsonl``: training curves and the held-out evaluation.

The training curves can be smoothed (an exponential moving average, drawn over the raw points)
and drawn on a log axis; every evaluation point is drawn, each metric on its own axis, with the
diagnosis' prediction for the run next to the realised pass@1 when the run has one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from opsd_diag.report.figures import who

TRAIN_METRICS = ("loss", "r_opd", "kl_k3", "entropy_student", "grad_norm", "tokens_per_s")
EVAL_FIRST = ("pass@1", "kl_to_initial", "regression_nll", "regression_accuracy")


TEXT_FIELDS = ("kind", "method")  # every other scalar field of a metrics record is a number


def _numeric(column: pd.Series) -> pd.Series:
    """A metric column as numbers: text or booleans (a damaged or hand-edited record) become NaN."""
    if pd.api.types.is_bool_dtype(column):
        return pd.Series(np.nan, index=column.index)
    if pd.api.types.is_numeric_dtype(column) or column.map(lambda v: isinstance(v, (list, dict))).any():
        return column
    return pd.to_numeric(column.map(lambda v: v if isinstance(v, (int, float)) and not isinstance(v, bool)
                                    else None), errors="coerce")


def records_frame(records: list[dict]) -> pd.DataFrame:
    """metrics.jsonl records as one frame; metric columns numeric whatever a record holds."""
    frame = pd.DataFrame([r for r in records if isinstance(r, dict)])
    if frame.empty or "kind" not in frame:
        return pd.DataFrame(columns=["kind", "step"])
    return frame.apply(lambda c: c if c.name in TEXT_FIELDS else _numeric(c))


def smooth(values, weight: float) -> np.ndarray:
    """Exponential moving average with ``weight`` in [0, 1) (0: the raw values), NaN skipped, debiased."""
    v = np.asarray(values, dtype=float)
    out, avg, norm = np.full_like(v, np.nan), 0.0, 0.0
    for i, x in enumerate(v):
        if np.isfinite(x):
            avg, norm = weight * avg + (1 - weight) * x, weight * norm + (1 - weight)
        out[i] = avg / norm if norm > 0 else np.nan
    return out


def train_figure(frame: pd.DataFrame, metrics: list[str] | None = None, smoothing: float = 0.0,
                 log_y: bool = False) -> go.Figure:
    """One panel per training metric, the raw points faint and the smoothed curve over them."""
    train = frame[frame["kind"] == "train"] if "kind" in frame else frame.iloc[:0]
    shown = [m for m in (metrics or TRAIN_METRICS) if m in train and train[m].notna().any()]
    fig = make_subplots(rows=max(1, (len(shown) + 2) // 3), cols=min(3, max(1, len(shown))),
                        subplot_titles=shown or ["no training steps yet"])
    for i, m in enumerate(shown):
        d = train[["step", m]].dropna()
        r, c = i // 3 + 1, i % 3 + 1
        fig.add_trace(go.Scatter(x=d["step"], y=d[m], mode="markers", marker=dict(size=4, color="#9ab"),
                                 name=m, showlegend=False, hovertemplate=f"step %{{x}}: {m} %{{y:.4g}}<extra></extra>"),
                      row=r, col=c)
        if smoothing > 0:
            fig.add_trace(go.Scatter(x=d["step"], y=smooth(d[m], smoothing), mode="lines",
                                     line=dict(color="#1f4e9c"), name=f"{m} (smoothed)", showlegend=False,
                                     hovertemplate=f"step %{{x}}: smoothed {m} %{{y:.4g}}<extra></extra>"),
                          row=r, col=c)
        if log_y and (d[m] > 0).all():
            fig.update_yaxes(type="log", row=r, col=c)
    fig.update_xaxes(title_text="step")
    fig.update_layout(height=280 * max(1, (len(shown) + 2) // 3), title="Training")
    return fig


def eval_metrics(frame: pd.DataFrame) -> list[str]:
    evals = frame[frame["kind"] == "eval"] if "kind" in frame else frame.iloc[:0]
    skip = ("kind", "step", "time", "n_problems", "seconds", "eval_s", "eval_samples")  # bookkeeping, not metrics
    cols = [c for c in evals.columns if c not in skip
            and pd.api.types.is_numeric_dtype(evals[c]) and evals[c].notna().any()]
    return sorted(cols, key=lambda c: (EVAL_FIRST.index(c) if c in EVAL_FIRST else len(EVAL_FIRST), c))


def eval_figure(frame: pd.DataFrame, prediction: dict | None = None) -> go.Figure:
    """Every held-out evaluation point, each metric on its own axis; with a prediction, pass@1 gets
    the diagnosis' verdict and score as a note next to the realised change."""
    evals = frame[frame["kind"] == "eval"] if "kind" in frame else frame.iloc[:0]
    shown = eval_metrics(frame)
    fig = make_subplots(rows=1, cols=max(1, len(shown)), subplot_titles=shown or ["no evaluation yet"])
    for i, m in enumerate(shown):
        d = evals[["step", m]].dropna()
        fig.add_trace(go.Scatter(x=d["step"], y=d[m], mode="lines+markers+text", name=m, showlegend=False,
                                 text=[f"{v:.3g}" for v in d[m]], textposition="top center",
                                 hovertemplate=f"step %{{x}}: {m} %{{y:.4g}}<extra></extra>"), row=1, col=i + 1)
    if prediction and "pass@1" in shown:
        d = evals[["step", "pass@1"]].dropna()
        realised = (d["pass@1"].iloc[-1] - d["pass@1"].iloc[0]) if len(d) > 1 else np.nan
        score = prediction.get("score")
        origin = f" for {who(prediction['config'], prediction.get('signal'))}" if prediction.get("config") else ""
        note = (f"predicted: {prediction.get('verdict') or 'n/a'}"
                f"{'' if score is None else f' (score {score:+.3f})'}{origin}<br>realised pass@1 change: "
                f"{'n/a' if not np.isfinite(realised) else f'{realised:+.3f}'}")
        col = shown.index("pass@1") + 1
        fig.add_annotation(text=note, xref=f"x{'' if col == 1 else col} domain",
                           yref=f"y{'' if col == 1 else col} domain", x=0.02, y=0.02, showarrow=False,
                           align="left", xanchor="left", yanchor="bottom", bgcolor="rgba(255,255,255,.85)",
                           bordercolor="#999")
    fig.update_xaxes(title_text="step")
    fig.update_layout(height=340, title="Held-out evaluation")
    return fig
