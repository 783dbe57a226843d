"""The predictors' evidence: why a prediction or a verdict came out as it did (figures and tables, no Streamlit).

Predictor v2: the contribution of each feature to one (config, method)'s predicted gain
(``prediction.contribution_frame``). The v1 rule:

From the typed summary (``summary.ideal``) and the predictor's ``nodes.parquet``: the nodes it
chose with their candidate tokens (student and teacher probability, estimated success), each
signal's alignment with the ideal gradient, that alignment on correct vs incorrect rollouts, and
the per-node divergence against the alignment.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from opsd_diag.report.figures import _colors, _note, who
from opsd_diag.schema import signal_name
from opsd_diag.summary import Summary

EVIDENCE_HELP = {
    "advantage": "Teacher advantage A_T per config: how much following the teacher's distribution instead of "
                 "the student's raises the estimated success at the chosen nodes (95% CI over prompts).",
    "direction": "Alignment of each signal's update with the ideal gradient (cosine, +1: the same direction), "
                 "mean over the nodes with its 95% CI over prompts; the verdict needs it above 0.",
    "split": "The same alignment on the nodes of incorrect and of correct rollouts, for the chosen signal.",
    "scatter": "One dot per node: the full-vocabulary divergence there (x) against the chosen signal's "
               "alignment with the ideal gradient (y); the title gives Spearman's rho.",
}
SPLITS = ("all", "incorrect", "correct")
CONTRIBUTION_HELP = ("Predictor v2: each feature's contribution to the predicted held-out pass@1 change of the chosen "
                     "(config, method), coef × (value − study mean) / study SD; the prediction is their sum plus the "
                     "study's mean change. A missing feature sits at the study's mean and contributes 0; a value "
                     "outside the study's range (study_min to study_max) is extrapolated.")


def alignment_frame(summary: Summary) -> pd.DataFrame:
    """Long table: config, signal, split, mean alignment with its CI, P(alignment > 0), nodes, prompts."""
    rows = []
    for config, entry in _in_order(summary):
        for signal, by_split in entry.alignment.items():
            for split, a in by_split.items():
                rows.append({"config": config, "signal": signal_name(signal), "split": split, "estimate": a.mean.value(),
                             "lo": _f(a.mean.lo), "hi": _f(a.mean.hi), "p_positive": a.p_positive.value(),
                             "n_nodes": a.mean.n_nodes, "n_prompts": a.mean.n_prompts})
    return pd.DataFrame(rows, columns=["config", "signal", "split", "estimate", "lo", "hi", "p_positive",
                                       "n_nodes", "n_prompts"])


def advantage_frame(summary: Summary) -> pd.DataFrame:
    """Teacher advantage and node value per config and split, with CIs."""
    rows = []
    for config, entry in _in_order(summary):
        for split in SPLITS:
            a = entry.teacher_advantage.get(split)
            if a is not None:
                rows.append({"config": config, "split": split, "estimate": a.value(), "lo": _f(a.lo), "hi": _f(a.hi),
                             "n_nodes": a.n_nodes, "n_prompts": a.n_prompts})
    return pd.DataFrame(rows, columns=["config", "split", "estimate", "lo", "hi", "n_nodes", "n_prompts"])


def contribution_figure(frame: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal bars of ``prediction.contribution_frame``: blue adds to the predicted gain, red takes away."""
    frame = frame.iloc[::-1]  # the largest at the top
    fig = go.Figure(go.Bar(x=frame["contribution"], y=frame["what"], orientation="h",
                           marker_color=["#3b6fd8" if c >= 0 else "#d84b3b" for c in frame["contribution"]],
                           customdata=np.stack([frame["value"], frame["study_mean"]], axis=1),
                           hovertemplate="%{y}: value %{customdata[0]:.4f} (study mean %{customdata[1]:.4f}), "
                                         "adds %{x:+.4f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="contribution to the predicted Δpass@1", height=120 + 32 * len(frame),
                      margin={"l": 10, "r": 10, "t": 50, "b": 40})
    return fig


def _f(x) -> float:
    return np.nan if x is None else float(x)


def _in_order(summary: Summary):
    """The predictor's configs in the run's config order (one order on every figure)."""
    ideal = summary.ideal
    return [(c, ideal.configs[c]) for c in summary.config_names if c in ideal.configs] if ideal else []


def _bars(frame: pd.DataFrame, x: str, group: str, title: str, ytitle: str, colors: dict, head) -> go.Figure:
    """Bars with CIs, one trace per ``group``; ``head(group)`` is the hover's first line (``figures.who``)."""
    fig = go.Figure()
    if frame.empty:
        return _note(fig, "the predictor has no nodes in this run")
    for g, d in frame.groupby(group, sort=False):
        fig.add_trace(go.Bar(x=d[x], y=d["estimate"], name=str(g), marker_color=colors.get(g),
                             error_y=dict(type="data", array=d["hi"] - d["estimate"],
                                          arrayminus=d["estimate"] - d["lo"]),
                             customdata=np.stack([d["lo"], d["hi"], d["n_prompts"].astype(float)], axis=1),
                             hovertemplate=head(g) + "<br>%{y:.3f} [%{customdata[0]:.3f}, "
                                           "%{customdata[1]:.3f}]<br>%{customdata[2]:.0f} prompts<extra></extra>"))
    fig.add_hline(y=0, line_color="#444", line_width=1)
    fig.update_layout(title=title, barmode="group", height=420, yaxis_title=ytitle,
                      legend=dict(orientation="h", y=-0.15, yanchor="top"))
    fig.update_xaxes(type="category")
    return fig


def advantage_figure(summary: Summary) -> go.Figure:
    f = advantage_frame(summary)
    return _bars(f[f["split"] == "all"], "config", "split", "Teacher advantage at the chosen nodes",
                 "A_T (estimated success gain)", {"all": "#555"},
                 lambda g: who("%{x}") + " · A_T (teacher advantage)")


def direction_figure(summary: Summary) -> go.Figure:
    f = alignment_frame(summary)
    f = f[f["split"] == "all"]
    return _bars(f, "signal", "config", "Each signal's update against the ideal gradient",
                 "alignment (cosine with the ideal)", _colors(summary.config_names),
                 lambda g: who(g, "%{x}") + " · alignment with the ideal")


def split_figure(summary: Summary, signal: str) -> go.Figure:
    f = alignment_frame(summary)
    f = f[(f["signal"] == signal_name(signal)) & (f["split"] != "all")]
    fig = _bars(f, "config", "split", f"Alignment of {signal_name(signal)} on incorrect vs correct rollouts",
                "alignment (cosine with the ideal)", {"incorrect": "#d62728", "correct": "#2ca02c"},
                lambda g: who("%{x}", signal) + f" · alignment on {g} rollouts")
    empty = [g for g in ("incorrect", "correct") if not f.loc[f["split"] == g, "estimate"].notna().any()]
    if empty and len(f):  # a missing bar says why
        fig.add_annotation(text=" and ".join(empty) + " rollouts: no estimate (no predictor node on such rollouts, "
                           "or too few to align)", showarrow=False, xref="paper", yref="paper", x=0.5, y=1.0,
                           yanchor="bottom", font=dict(size=11, color="#555"))
    return fig


def scatter_figure(nodes: pd.DataFrame, summary: Summary, signal: str, divergence: str = "kl_rev") -> go.Figure:
    fig = go.Figure()
    col = f"align_{signal}"
    if nodes.empty or col not in nodes or divergence not in nodes:
        return _note(fig, "the predictor has no nodes in this run")
    colors = _colors(summary.config_names)
    rhos = []
    for config, d in nodes.groupby("config", sort=False):
        ok = d[np.isfinite(d[col].astype(float)) & np.isfinite(d[divergence].astype(float))]
        ideal = summary.ideal.configs.get(config) if summary.ideal else None
        rho = (ideal.spearman.get(divergence, {}).get(signal) if ideal else None)
        rhos.append(f"{config} {'n/a' if rho is None else f'{rho:+.2f}'}")
        fig.add_trace(go.Scatter(
            x=ok[divergence], y=ok[col], mode="markers", name=str(config), marker=dict(color=colors.get(config)),
            customdata=np.stack([ok["rollout_id"], ok["pos"], ok["h_s"]], axis=1),
            hovertemplate=who(config, signal) + "<br>rollout %{customdata[0]:.0f} pos %{customdata[1]:.0f}<br>"
                          f"{divergence} %{{x:.3f}} · alignment of {signal_name(signal)} %{{y:.3f}}<br>"
                          "h_s %{customdata[2]:.2f}<extra></extra>"))
    fig.update_layout(title=f"{divergence} vs alignment of {signal_name(signal)} per node (Spearman: "
                            f"{', '.join(rhos)})", height=460, xaxis_title=f"{divergence} at the node (nats)",
                      yaxis_title=f"alignment of {signal_name(signal)} with the ideal")
    return fig


def candidates(nodes: pd.DataFrame, decode=None) -> pd.DataFrame:
    """One row per node x config x candidate token: student and teacher probability (over the
    candidates), estimated success, the continuations behind it, and whether it was the sampled one."""
    if nodes.empty:
        return pd.DataFrame(columns=["node_id", "config", "rollout_id", "pos", "h_s", "correct", "candidate",
                                     "token", "sampled", "p_student", "q_teacher", "success", "n_continuations"])
    rows = []
    for r in nodes.itertuples(index=False):
        for i, (tid, p, q, s, n) in enumerate(zip(r.cand_ids, r.p_tilde, r.q_tilde, r.s_hat, r.n_samples)):
            rows.append({"node_id": r.node_id, "config": r.config, "rollout_id": r.rollout_id, "pos": r.pos,
                         "h_s": r.h_s, "correct": r.correct, "candidate": i,
                         "token": decode(tid) if decode else f"#{int(tid)}", "sampled": i == r.sampled_index,
                         "p_student": float(p), "q_teacher": float(q), "success": float(s), "n_continuations": int(n)})
    return pd.DataFrame(rows)


def node_table(nodes: pd.DataFrame, signals: tuple[str, ...] = ("r_opd", "a_d2", "rev_kl", "jsd")) -> pd.DataFrame:
    """One row per node x config: where it is, its entropy, A_T, the value spread and the alignments."""
    if nodes.empty:
        return pd.DataFrame()
    keep = ["node_id", "config", "rollout_id", "problem_id", "pos", "h_s", "correct", "A_T", "V", "spread"]
    keep += [f"align_{s}" for s in signals if f"align_{s}" in nodes]
    return nodes[[c for c in keep if c in nodes]].sort_values(["node_id", "config"])
