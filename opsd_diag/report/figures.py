"""Plotly figures of a diagnosis: pure functions of its typed summary (and tokens where needed).

No Streamlit here, so the app, the HTML report and the tests all draw the very same figures.
``Run.figures`` is the way in; ``FIGURE_HELP`` is the caption of each figure (docs/app.md lists it).
"""

from __future__ import annotations

import html
import math
import textwrap
import zlib

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from opsd_diag.core.aggregate import alignment_stats
from opsd_diag.errors import OpsdError
from opsd_diag.schema import BY_NAME, CI_COLUMNS, label, signal_name
from opsd_diag.summary import Summary

FIGURE_HELP = {
    "headline": "Mean of each headline per-token signal for every teacher config; error bars are 95% "
                "bootstrap confidence intervals that resample whole prompts, not tokens.",
    "entropy": "Tokens binned by student entropy: the share of tokens per bin, the mean chosen signal "
               "inside each bin, and how often the student vs the teacher is uncertain (entropy above "
               "the high-entropy threshold).",
    "alignment": "Each dot is one token's centred OPD advantage a_opd (x) against its centred delta "
                 "advantage a_delta (y); the corner counts are the sign quadrants of the tokens where both "
                 "are not numerically zero, and the title gives the OPD² gate keep fraction over all tokens.",
    "correctness": "Distribution of the chosen per-token signal on rollouts the answer checker marked "
                   "correct vs incorrect (box: quartiles, whiskers: 5th-95th percentile, dashed line: mean; a "
                   "signed log axis when most tokens sit near 0).",
    "position": "Mean of the chosen signal per completion-position bucket for each config; the grey bars "
                "below count the tokens behind each mean.",
    "accuracy": "Accuracy of each teacher sampled with its own (privileged) prompt next to the student "
                "alone, with 95% prompt-bootstrap CIs, and pass@k of the student samples.",
}

_GROUPS = {"correct": "#2ca02c", "incorrect": "#d62728", "unknown": "#7f7f7f"}


def _num(x) -> float:
    return math.nan if x is None else float(x)


def config_color(name: str, taken: set[str] = frozenset()) -> str:
    """A config's colour from its name alone (the same in every run and on every page), the next free one
    when another config of the same figure already has it."""
    pal = qualitative.Dark24
    start = zlib.crc32(name.encode()) % len(pal)
    return next((pal[(start + i) % len(pal)] for i in range(len(pal)) if pal[(start + i) % len(pal)] not in taken),
                pal[start])


def _colors(names) -> dict[str, str]:
    out: dict[str, str] = {}
    for n in names:
        out[n] = config_color(str(n), set(out.values()))
    return out


def who(config: str, signal: str | None = None) -> str:
    """A hover's first line: the config and the signal its value belongs to (the schema's name), in one
    wording on every figure. ``config`` may be a template field such as ``%{x}``."""
    head = f"config {html.escape(str(config))}"
    return head + (f" · {html.escape(signal_name(signal))}" if signal else "")


def _note(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


# ----------------------------------------------------------------------------------------- figures

def headline_figure(summary: Summary) -> go.Figure:
    # Config names go in the legend, not on rotated tick labels that would run into the titles below.
    ci = summary.ci_frame()
    configs = summary.config_names
    colors = _colors(configs)
    titles = [f"<b>{s}</b><br><span style='font-size:11px'>{'<br>'.join(textwrap.wrap(BY_NAME[s].meaning, 44)[:2])}"
              "</span>" for s in CI_COLUMNS]
    fig = make_subplots(rows=2, cols=3, subplot_titles=titles, vertical_spacing=0.2)
    for i, s in enumerate(CI_COLUMNS):
        d = ci[ci["signal"] == s].set_index("config").reindex(configs)
        for c in configs:
            row = d.loc[c]
            fig.add_trace(go.Bar(
                x=[c], y=[row["estimate"]], marker_color=colors[c], name=c, legendgroup=c, showlegend=i == 0,
                error_y=dict(type="data", array=[row["hi"] - row["estimate"]],
                             arrayminus=[row["estimate"] - row["lo"]]),
                customdata=[[row["lo"], row["hi"], row["n_prompts"]]],
                hovertemplate=who("%{x}", s) + "<br>mean %{y:.4f}<br>95% CI [%{customdata[0]:.4f}, "
                              "%{customdata[1]:.4f}]<br>%{customdata[2]:.0f} prompts<extra></extra>"),
                row=i // 3 + 1, col=i % 3 + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_layout(title=dict(text="Mean per-token signal per teacher config (error bars: 95% bootstrap CI over "
                                      "prompts)", y=0.985, yanchor="top"), height=700, legend=dict(title="teacher config", orientation="h", y=-0.05, yanchor="top"),
                      margin=dict(t=150, b=90))
    return fig


def entropy_figure(summary: Summary, signal: str = "r_opd") -> go.Figure:
    ef = summary.entropy_frame()
    configs = summary.config_names
    colors = _colors(configs)
    thr = next(iter(summary.configs.values())).high_entropy_share.threshold if configs else math.nan
    fig = make_subplots(rows=1, cols=3, subplot_titles=[
        "Share of tokens per student-entropy bin", f"Mean {signal} per bin",
        f"Share of tokens with entropy ≥ {thr:g} nats"])
    if ef.empty:
        return _note(fig, "no tokens in this run")
    first = ef[ef["config"] == configs[0]]  # bins use the student's entropy: same for every config
    fig.add_trace(go.Bar(x=first["bin"], y=first["share"], marker_color="#888", name="token share",
                         customdata=first["n_tokens"],
                         hovertemplate="every config · h_s (student entropy) in %{x}: %{y:.1%} of tokens "
                                       "(%{customdata})<extra></extra>"),
                  row=1, col=1)
    for c in configs:
        d = ef[ef["config"] == c]
        fig.add_trace(go.Scatter(x=d["bin"], y=d[f"mean_{signal}"], mode="lines+markers", name=c,
                                 legendgroup=c, line_color=colors[c],
                                 hovertemplate=who(c, signal) + "<br>h_s in %{x}<br>mean %{y:.4f}<extra></extra>"),
                      row=1, col=2)
    shares = {c: summary.configs[c].high_entropy_share for c in configs}
    top = 0.0
    for role, color, col in (("student", "#888", "h_s"), ("teacher", "#1f77b4", "h_t")):
        ys = [_num(getattr(shares[c], role)) for c in configs]
        top = max([top, *[y for y in ys if np.isfinite(y)]])
        fig.add_trace(go.Bar(x=configs, y=ys, marker_color=color, name=f"{role} (high-entropy share)",
                             text=["n/a" if not np.isfinite(y) else f"{y:.1%}" if y > 0 else "" for y in ys],
                             textposition="outside",  # no "0.0%" labels piled on empty bars
                             hovertemplate=who("%{x}", col) + f" ({role} entropy) ≥ {thr:g} nats on %{{y:.1%}} "
                                           "of tokens<extra></extra>"),
                      row=1, col=3)
    if top == 0:  # an empty panel says why
        fig.add_annotation(text=f"no token reaches {thr:g} nats<br>(student or teacher)", showarrow=False,
                           xref="x3 domain", yref="y3 domain", x=0.5, y=0.5)
    # a share is in [0, 1]: never a ±100% axis, and enough decimals that small shares do not all read 0%
    fig.update_yaxes(range=[0, min(1.0, top * 1.25) if top > 0 else 0.05], row=1, col=3,
                     tickformat=".1%" if top < 0.1 else ".0%")
    fig.update_xaxes(title_text="student entropy bin (nats)", type="category", row=1, col=1)
    fig.update_xaxes(title_text="student entropy bin (nats)", type="category", row=1, col=2)
    fig.update_yaxes(title_text="share of tokens", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text=signal, row=1, col=2)
    if top == 0:
        fig.add_annotation(text=f"no token at or above {thr:g} nats", showarrow=False, xref="x3 domain",
                           yref="y3 domain", x=0.5, y=0.6)
    fig.update_yaxes(title_text="share of tokens", row=1, col=3)
    fig.update_layout(title="Signals by student entropy", barmode="group", height=460)
    return fig


def alignment_figure(tokens: pd.DataFrame, config: str, max_points: int = 3000, seed: int = 0) -> go.Figure:
    df = tokens[tokens["config"] == config]
    al = alignment_stats(df)
    fig = go.Figure()
    fig.update_xaxes(title_text="a_opd: centred OPD advantage (> 0: teacher favours the token)", zeroline=True)
    fig.update_yaxes(title_text="a_delta: centred delta advantage (> 0: reasoning training favours it)",
                     zeroline=True)
    if al["n"] == 0:
        fig.update_layout(title=f"{config}: a_opd vs a_delta")
        return _note(fig, "no finite a_delta: the delta signal needs a base model, and this run has none")
    ok = df[np.isfinite(df["a_opd"]) & np.isfinite(df["a_delta"])]
    if len(ok) > max_points:
        ok = ok.iloc[np.sort(np.random.default_rng(seed).choice(len(ok), max_points, replace=False))]
    fig.add_trace(go.Scattergl(
        x=ok["a_opd"], y=ok["a_delta"], mode="markers", marker=dict(size=4, opacity=0.45),
        name="token", customdata=np.stack([ok["rollout_id"], ok["pos"]], axis=1),
        hovertemplate=who(config) + "<br>rollout %{customdata[0]} pos %{customdata[1]}<br>a_opd %{x:.3f}<br>"
                      "a_delta %{y:.3f}<extra></extra>"))
    lim = float(np.nanmax(np.abs(ok[["a_opd", "a_delta"]].to_numpy()))) or 1.0
    fig.add_trace(go.Scatter(x=[-lim, lim], y=[-lim, lim], mode="lines", name="a_delta = a_opd", hoverinfo="skip",
                             line=dict(dash="dot", color="#999")))
    n = max(1, al["n_informative"])
    for key, x, y, text in (("q_pp", 0.98, 0.98, "both > 0"), ("q_np", 0.02, 0.98, "a_opd < 0 < a_delta"),
                            ("q_nn", 0.02, 0.02, "both < 0"), ("q_pn", 0.98, 0.02, "a_delta < 0 < a_opd")):
        fig.add_annotation(text=f"{text}: {al[key]} ({al[key] / n:.1%})", xref="paper", yref="paper", x=x,
                           y=y, showarrow=False, xanchor="right" if x > 0.5 else "left",
                           bgcolor="rgba(255,255,255,0.7)")
    fig.update_layout(title=f"{config}: a_opd vs a_delta; gate keeps {al['gate_keep']:.1%}, same sign on "
                            f"{al['sign_agreement']:.1%} of the informative tokens "
                            f"({al['near_zero_share']:.0%} near zero), showing {len(ok)} of {al['n']} tokens",
                      height=560)
    return fig


def correctness_figure(tokens: pd.DataFrame, rollouts: pd.DataFrame, signal: str = "r_opd") -> go.Figure:
    # Quartiles are computed here and sent as numbers: a box of a million raw points would ship them all.
    df = tokens[["config", "rollout_id", signal]].merge(rollouts[["rollout_id", "correct"]], on="rollout_id")
    df["group"] = np.where(df["correct"].isna(), "unknown",
                           np.where(df["correct"].fillna(False).astype(bool), "correct", "incorrect"))
    df = df[np.isfinite(df[signal].astype(float))]
    fig = go.Figure()
    fig.update_layout(title=f"{label(signal)} per token, by rollout correctness", boxmode="group", height=460,
                      yaxis_title=signal, xaxis_title="teacher config")
    if df.empty:
        return _note(fig, f"no finite {signal} values in this run")
    q = df.groupby(["group", "config"], sort=False)[signal].quantile([0.05, 0.25, 0.5, 0.75, 0.95]).unstack()
    stats = q.join(df.groupby(["group", "config"], sort=False)[signal].agg(["mean", "size"]))
    # Most tokens sit near 0 and a few far out: on a linear axis the boxes collapse into lines. Then the
    # axis is a signed log (asinh) with ticks in the signal's own units.
    num = stats[[0.05, 0.25, 0.5, 0.75, 0.95, "mean"]].astype(float)
    spread, iqr = float((num[0.95] - num[0.05]).max()), float((num[0.75] - num[0.25]).max())
    width = max(float(np.nanmax(np.abs(num[[0.25, 0.75]].to_numpy()))), spread * 1e-6, 1e-12)  # boxes ~ ±asinh(1)
    symlog = bool(spread > 0 and iqr < 0.1 * spread)
    f = (lambda v: np.arcsinh(np.asarray(v, dtype=float) / width)) if symlog else (lambda v: np.asarray(v, float))
    for group, color in _GROUPS.items():
        if group not in stats.index.get_level_values(0):
            continue
        s = num.loc[group]
        fig.add_trace(go.Box(x=list(s.index), q1=f(s[0.25]), median=f(s[0.5]), q3=f(s[0.75]), lowerfence=f(s[0.05]),
                             upperfence=f(s[0.95]), mean=f(s["mean"]), name=f"{group} rollouts", marker_color=color,
                             customdata=s[[0.05, 0.25, 0.5, 0.75, 0.95, "mean"]].to_numpy(),
                             hovertemplate=who("%{x}", signal) + f" · {group} rollouts<br>5%: "
                                           "%{customdata[0]:.3g} · 25%: %{customdata[1]:.3g} · median "
                                           "%{customdata[2]:.3g}<br>75%: %{customdata[3]:.3g} · 95%: "
                                           "%{customdata[4]:.3g} · mean %{customdata[5]:.3g}<extra></extra>"))
    configs = list(dict.fromkeys(df["config"]))
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=configs)
    if symlog:
        lo, hi = float(num.min().min()), float(num.max().max())
        mags = [m for m in 10.0 ** np.arange(-4, 5) if m >= width / 2 and m <= max(abs(lo), abs(hi)) * 1.01]
        ticks = sorted({0.0, *[m for m in mags if m <= hi], *[-m for m in mags if -m >= lo]})
        fig.update_yaxes(tickvals=f(ticks), ticktext=[f"{t:g}" for t in ticks],
                         title_text=f"{signal} (signed log axis)")
    return fig


def position_figure(summary: Summary, signal: str = "r_opd") -> go.Figure:
    # Means on top, token counts in their own panel below: bars never hide the lines.
    pf = summary.position_frame()
    configs = summary.config_names
    colors = _colors(configs)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.06)
    if pf.empty:
        return _note(fig, "no tokens in this run")
    for c in configs:
        d = pf[pf["config"] == c]
        fig.add_trace(go.Scatter(x=d["bucket"], y=d[f"mean_{signal}"], mode="lines+markers", name=c,
                                 line_color=colors[c],
                                 hovertemplate=who(c, signal) + "<br>positions %{x}<br>mean %{y:.4f}<extra></extra>"),
                      row=1, col=1)
    first = pf[pf["config"] == configs[0]]
    fig.add_trace(go.Bar(x=first["bucket"], y=first["n_tokens"], name="tokens per bucket", marker_color="#bbb",
                         hovertemplate="every config · positions %{x}: %{y} tokens<extra></extra>"), row=2, col=1)
    fig.update_xaxes(type="category")
    fig.update_xaxes(title_text="position in the completion (tokens)", row=2, col=1)
    fig.update_yaxes(title_text=f"mean {signal}", row=1, col=1)
    fig.update_yaxes(title_text="tokens", row=2, col=1)
    fig.update_layout(title=f"Mean {label(signal)} along the completion", height=500)
    return fig


def accuracy_figure(summary: Summary) -> go.Figure:
    acc = summary.accuracy_frame()
    fig = make_subplots(rows=1, cols=2, column_widths=[0.7, 0.3], subplot_titles=[
        "Accuracy: student alone vs each teacher with its prompt", "Student pass@k"])
    colors = ["#888"] + list(_colors(summary.config_names).values())
    # the gap to the student goes under each bar's name: labels on the bars collide with the error bars
    gap = [("" if not np.isfinite(g) else f"{g:+.2f} vs student") for g in acc["gap_estimate"]]
    names = [w if not g else f"{w}<br>{g}" for w, g in zip(acc["who"], gap)]
    heads = ["student alone" if i == 0 else who(w) for i, w in enumerate(acc["who"])]
    fig.add_trace(go.Bar(x=names, y=acc["estimate"], marker_color=colors, showlegend=False,
                         error_y=dict(type="data", array=acc["hi"] - acc["estimate"],
                                      arrayminus=acc["estimate"] - acc["lo"]),
                         customdata=np.stack([heads, gap], axis=1),
                         hovertemplate="%{customdata[0]} · accuracy %{y:.3f} %{customdata[1]}<extra></extra>"),
                  row=1, col=1)
    student = acc.loc[0, "estimate"]
    if np.isfinite(student):
        fig.add_hline(y=student, line_dash="dash", line_color="#888", row=1, col=1)
    pk = summary.pass_at_k
    fig.add_trace(go.Bar(x=list(pk), y=[_num(v) for v in pk.values()], marker_color="#888", showlegend=False,
                         hovertemplate="student samples · %{x}: %{y:.3f}<extra></extra>"), row=1, col=2)
    fig.update_yaxes(title_text="share of sampled answers that are correct", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="P(at least one of k samples correct)", range=[0, 1.05], row=1, col=2)
    fig.update_layout(title="Teacher-with-context vs student accuracy (95% bootstrap CI over prompts)", height=460)
    return fig


def default_alignment_config(tokens: pd.DataFrame) -> str | None:
    """The first config with finite a_delta (there is a base), else the first config."""
    if tokens.empty:
        return None
    configs = list(dict.fromkeys(tokens["config"]))
    ok = set(tokens.loc[np.isfinite(tokens["a_delta"].astype(float)), "config"])
    return next((c for c in configs if c in ok), configs[0])


def figure(name: str, summary: Summary, tokens: pd.DataFrame, rollouts: pd.DataFrame, signal: str = "r_opd",
           config: str | None = None) -> go.Figure:
    """One figure of FIGURE_HELP by name; ``config`` picks the alignment scatter's config."""
    if name not in FIGURE_HELP:
        raise OpsdError(f"unknown figure '{name}': choose one of {', '.join(FIGURE_HELP)}")
    if name in ("alignment", "correctness") and tokens.empty:
        return _note(go.Figure(), "no tokens in this run")
    builders = {
        "headline": lambda: headline_figure(summary), "entropy": lambda: entropy_figure(summary, signal),
        "alignment": lambda: alignment_figure(tokens, config or default_alignment_config(tokens)),
        "correctness": lambda: correctness_figure(tokens, rollouts, signal),
        "position": lambda: position_figure(summary, signal), "accuracy": lambda: accuracy_figure(summary),
    }
    return builders[name]()
