"""Tables the workbench shows that are not in ``summary.json``: token types, disagreement, comparisons.

Pure functions of the run's frames (no Streamlit, no files), so the app, the CLI and the tests read
the very same numbers.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from opsd_diag.report.figures import who
from opsd_diag.schema import label
from opsd_diag.summary import Summary


def token_types(tokens: pd.DataFrame, signal: str, config: str, min_count: int = 5) -> pd.DataFrame:
    """Per token string: how often it was sampled and the mean / total ``signal`` on it under ``config``.

    The word-level view of OPD²: which tokens a signal pushes up (mean > 0) or down most.
    Strings seen fewer than ``min_count`` times are left out (their means are noise).
    """
    d = tokens.loc[tokens["config"] == config, ["token", signal]]
    d = d[np.isfinite(d[signal].to_numpy(dtype=float))]
    g = d.groupby("token", sort=False)[signal].agg(["size", "mean", "sum"]).reset_index()
    g.columns = ["token", "count", "mean", "total"]
    g = g[g["count"] >= min_count].sort_values("mean", ascending=False, kind="stable")
    return g.reset_index(drop=True)


def token_types_figure(types: pd.DataFrame, signal: str, config: str, n: int = 12) -> go.Figure:
    """The ``n`` token strings pushed up most and the ``n`` pushed down most under ``config`` (bars of the means)."""
    top, bottom = types.head(n), types.tail(n)
    both = pd.concat([top, bottom[~bottom["token"].isin(top["token"])]]).sort_values("mean")
    names = [repr(t)[1:-1] or "∅" for t in both["token"]]
    fig = go.Figure(go.Bar(x=both["mean"], y=names, orientation="h",
                           marker_color=np.where(both["mean"] < 0, "#be1e2d", "#2d1ebe"),
                           customdata=both["count"],
                           hovertemplate=who(config, signal) + "<br>%{y}: mean %{x:.3f} over %{customdata} "
                                                                "tokens<extra></extra>"))
    fig.update_layout(title=f"Token strings {signal} pushes up and down most under {config} (mean per occurrence)",
                      xaxis_title=f"mean {label(signal)}", height=max(320, 22 * len(both) + 120),
                      yaxis=dict(type="category"))
    return fig


def disagreement(tokens: pd.DataFrame, signal: str, configs: list[str], n: int = 20,
                 rollout_id: int | None = None) -> pd.DataFrame:
    """Tokens where ``configs`` disagree most on ``signal``: spread = max − min over the configs.

    One row per (rollout, position) with each config's value, the spread, and the token; the ``n``
    largest spreads first (within ``rollout_id`` when given).
    """
    d = tokens[tokens["config"].isin(configs)]
    if rollout_id is not None:
        d = d[d["rollout_id"] == rollout_id]
    if d.empty or len(configs) < 2:
        return pd.DataFrame(columns=["rollout_id", "pos", "token", "spread", *configs])
    wide = d.pivot_table(index=["rollout_id", "pos"], columns="config", values=signal, aggfunc="first")
    wide = wide.reindex(columns=configs)
    vals = wide.to_numpy(dtype=float)
    with np.errstate(all="ignore"):
        spread = np.nanmax(vals, axis=1) - np.nanmin(vals, axis=1)
    wide = wide.assign(spread=spread).dropna(subset=["spread"])
    top = wide.nlargest(n, "spread").reset_index()
    words = d.drop_duplicates(["rollout_id", "pos"]).set_index(["rollout_id", "pos"])["token"]
    top.insert(2, "token", words.reindex(pd.MultiIndex.from_frame(top[["rollout_id", "pos"]])).to_numpy())
    top.columns.name = None
    return top[["rollout_id", "pos", "token", "spread", *configs]]


def compare_summaries(a: Summary, b: Summary, names: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """The headline rows of two diagnoses side by side: one row per config, the columns of each
    run suffixed with its name, and B − A for the configs both have."""
    ha, hb = a.headline_frame().set_index("config"), b.headline_frame().set_index("config")
    both = ha.merge(hb, left_index=True, right_index=True, how="outer",
                    suffixes=(f" ({names[0]})", f" ({names[1]})"))
    for c in ("r_opd", "a_opd", "a_d2", "kl_rev", "jsd", "teacher_accuracy"):
        both[f"{c} ({names[1]} − {names[0]})"] = hb[c].reindex(both.index) - ha[c].reindex(both.index)
    return both.reset_index()


def compare_verdicts(a: Summary, b: Summary, names: tuple[str, str] = ("A", "B")) -> pd.DataFrame:
    """(config, signal) with each run's verdict and score, and whether they agree."""
    def frame(s: Summary, n: str) -> pd.DataFrame:
        v = s.verdict_frame()
        if v is None:
            return pd.DataFrame(columns=["config", "signal", f"rank ({n})", f"verdict ({n})", f"score ({n})"])
        return v[["config", "signal", "rank", "verdict", "score"]].rename(
            columns={"rank": f"rank ({n})", "verdict": f"verdict ({n})", "score": f"score ({n})"})
    out = frame(a, names[0]).merge(frame(b, names[1]), on=["config", "signal"], how="outer")
    out["same verdict"] = out[f"verdict ({names[0]})"] == out[f"verdict ({names[1]})"]
    return out


def compare_curves(records: dict[str, pd.DataFrame], metric: str, kind: str = "train",
                   origins: dict[str, dict | None] | None = None) -> go.Figure:
    """One metric of several training runs on one axis: run name -> its metrics records; ``origins``: run
    name -> the prediction it was started from (config, signal), named in the hover."""
    fig = go.Figure()
    for name, r in records.items():
        if r.empty or metric not in r:
            continue
        d = r[(r["kind"] == kind) & r[metric].notna()]
        pred = (origins or {}).get(name) or {}
        head = who(pred["config"], pred.get("signal")) if pred.get("config") else "not started from a diagnosis"
        fig.add_trace(go.Scatter(x=d["step"], y=d[metric], mode="lines+markers", name=name,
                                 hovertemplate=f"run {html.escape(name)} · {head}<br>step %{{x}}: {metric} "
                                               "%{y:.4g}<extra></extra>"))
    fig.update_layout(title=f"{metric} ({kind})", xaxis_title="step", yaxis_title=metric, height=380,
                      legend=dict(orientation="h", y=-0.2, yanchor="top"))
    return fig


def compare_training(runs: dict[str, tuple[pd.DataFrame, dict, dict | None]]) -> pd.DataFrame:
    """Training runs side by side: status, steps, method, what they were started from, and their first
    and last held-out evaluation. ``runs``: name -> (metrics records, status.json, prediction or None)."""
    rows = []
    for name, (frame, status, pred) in runs.items():
        evals = frame[frame["kind"] == "eval"] if "kind" in frame else frame.iloc[:0]
        first, last = (evals.iloc[0], evals.iloc[-1]) if len(evals) else (None, None)

        def at(r, k):
            return float(r[k]) if r is not None and k in r and pd.notna(r[k]) else np.nan
        rows.append({"run": name, "status": status.get("status"), "step": status.get("step"),
                     "method": status.get("method"), "from": f"{pred.get('config')} / {pred.get('signal')}" if pred
                     else "", "predicted": (pred or {}).get("verdict"), "pass@1 first": at(first, "pass@1"),
                     "pass@1 last": at(last, "pass@1"), "gain": at(last, "pass@1") - at(first, "pass@1"),
                     "kl_to_initial last": at(last, "kl_to_initial")})
    return pd.DataFrame(rows)


def track_record_figure(board: pd.DataFrame) -> go.Figure:
    """Predicted score vs realised pass@1 gain of each scored training run (``scoreboard``), with its 95%
    interval; the hover names the run's config and signal (the schema's name)."""
    done = board.dropna(subset=["score", "gain"])
    fig = go.Figure()
    colors = {"helps": "#2d1ebe", "hurts": "#be1e2d"}
    for verdict in dict.fromkeys(done["verdict"].astype(str)):
        d = done[done["verdict"].astype(str) == verdict]
        heads = [who(c, s) for c, s in zip(d["config"].astype(str), d["signal"].astype(str))]
        fig.add_trace(go.Scatter(
            x=d["score"], y=d["gain"], mode="markers", name=verdict, marker=dict(color=colors.get(verdict, "#888"), size=9),
            error_y=dict(type="data", array=d["gain_hi"] - d["gain"], arrayminus=d["gain"] - d["gain_lo"]),
            customdata=np.stack([heads, d["run"].astype(str).map(html.escape), d["outcome"].astype(str)], axis=1),
            hovertemplate="%{customdata[0]} · " + html.escape(verdict) + "<br>run %{customdata[1]}<br>score %{x:.3f} · gain "
                          "%{y:+.3f} (%{customdata[2]})<extra></extra>"))
    fig.add_hline(y=0, line_color="#444", line_width=1)
    fig.update_layout(title="Predicted score vs realised pass@1 gain (95% interval over held-out problems)",
                      xaxis_title="predicted score", yaxis_title="realised pass@1 gain", legend_title="verdict")
    return fig
