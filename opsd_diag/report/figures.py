"""Plotly figures of a run, the token heatmap (HTML) and exports (HTML/PNG/SVG/CSV/Parquet/JSON).

Pure functions: a loaded run (``store.load_run``) or its summary in, a figure / string / bytes out.
No Streamlit here, so the app, the HTML report and the tests all draw the very same figures.
Token text is untrusted (it is whatever the student sampled): every string that reaches HTML goes
through ``html.escape``.
"""

from __future__ import annotations

import html
import importlib.util
import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from opsd_diag.core.aggregate import CI_COLUMNS, TOKEN_COLUMNS, alignment_stats, summary_frame
from opsd_diag.errors import OpsdError
from opsd_diag.report.terminal import rollout_tokens

FIGURE_HELP = {
    "headline": "Mean of each headline per-token signal for every teacher config; error bars are 95% "
                "bootstrap confidence intervals that resample whole prompts, not tokens.",
    "entropy": "Tokens binned by student entropy: the share of tokens per bin, the mean chosen signal "
               "inside each bin, and how often the student vs the teacher is uncertain (entropy above "
               "the high-entropy threshold).",
    "alignment": "Each dot is one token's centred OPD advantage a_opd (x) against its centred delta "
                 "advantage a_delta (y); the corner counts are the four sign quadrants over all tokens, "
                 "and the same-sign share is the OPD² gate keep fraction.",
    "correctness": "Distribution of the chosen per-token signal on rollouts the answer checker marked "
                   "correct vs incorrect (box: quartiles, whiskers: 5th-95th percentile, dashed line: mean).",
    "position": "Mean of the chosen signal per completion-position bucket for each config; grey bars "
                "(right axis) count the tokens behind each mean.",
    "accuracy": "Accuracy of each teacher sampled with its own (privileged) prompt next to the student "
                "alone, with 95% prompt-bootstrap CIs, and pass@k of the student samples.",
}

SIGNAL_LABELS = {
    "lp_s": "lp_S: student log-prob of the sampled token", "lp_t": "lp_T: teacher log-prob",
    "lp_b": "lp_B: base log-prob", "r_opd": "r_opd = lp_T − lp_S (OPD reward, nats)",
    "r_delta": "r_delta = lp_T − lp_B (OPD² delta reward, nats)",
    "kl_rev": "KL(student ‖ teacher), nats", "kl_fwd": "KL(teacher ‖ student), nats",
    "jsd": "generalised JSD_β(student, teacher), nats", "a_opd": "a_opd: centred OPD advantage",
    "a_delta": "a_delta: centred delta advantage", "gate": "gate: share with sign(a_delta) = sign(a_opd)",
    "a_d2": "a_d2 = gate · a_delta (OPD² advantage)", "a_ex": "a_ex: ExOPD advantage",
    "h_s": "student entropy (nats)", "h_t": "teacher entropy (nats)", "h_b": "base entropy (nats)",
    "rank_t": "rank of the token under the teacher (0 = top-1)", "top1_agree": "student and teacher top-1 agree",
}
IMAGE_FORMATS = ("png", "svg")
TABLE_FORMATS = ("csv", "parquet", "json")
_NEG, _POS = (190, 30, 45), (45, 30, 190)  # mirrored channels: equal intensity on both sides of 0
_GROUPS = {"correct": "#2ca02c", "incorrect": "#d62728", "unknown": "#7f7f7f"}


def label(signal: str) -> str:
    return SIGNAL_LABELS.get(signal, signal)


def _num(x) -> float:
    return math.nan if x is None else float(x)


def _colors(names) -> dict[str, str]:
    pal = qualitative.Plotly
    return {n: pal[i % len(pal)] for i, n in enumerate(names)}


def _note(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


# -------------------------------------------------------------------------- tables from a summary

def ci_frame(summary: dict) -> pd.DataFrame:
    """Long table: config, signal, estimate, lo, hi (95% prompt bootstrap), n_prompts."""
    rows = [{"config": c, "signal": s, **{k: _num(d.get(k)) for k in ("estimate", "lo", "hi")},
             "n_prompts": d.get("n_prompts")}
            for c, entry in summary["configs"].items() for s, d in entry["ci"].items()]
    return pd.DataFrame(rows, columns=["config", "signal", "estimate", "lo", "hi", "n_prompts"])


def _binned_frame(summary: dict, key: str, col: str) -> pd.DataFrame:
    rows = []
    for c, entry in summary["configs"].items():
        for name, d in entry[key].items():
            row = {"config": c, col: name, "n_tokens": d["n_tokens"]}
            row.update({k: _num(d[k]) for k in ("share", "sign_agreement") if k in d})
            row.update({f"mean_{s}": _num(v) for s, v in d["mean"].items()})
            rows.append(row)
    return pd.DataFrame(rows)


def entropy_frame(summary: dict) -> pd.DataFrame:
    """One row per config x student-entropy bin: token count, share, gate share, mean signals."""
    return _binned_frame(summary, "by_entropy_bin", "bin")


def position_frame(summary: dict) -> pd.DataFrame:
    """One row per config x position bucket: token count and mean signals."""
    return _binned_frame(summary, "by_position", "bucket")


def accuracy_frame(summary: dict) -> pd.DataFrame:
    """Student accuracy and each teacher's accuracy with its own prompt, gap to the student, CIs."""
    def ci(d, prefix=""):
        d = d or {}
        return {f"{prefix}{k}": _num(d.get(k)) for k in ("estimate", "lo", "hi")}
    rows = [{"who": "student", **ci(summary.get("student_accuracy")), **ci(None, "gap_")}]
    for c, entry in summary["configs"].items():
        rows.append({"who": c, **ci(entry.get("teacher_accuracy")),
                     **ci(entry.get("teacher_minus_student_accuracy"), "gap_")})
    return pd.DataFrame(rows)


def verdict_frame(summary: dict) -> pd.DataFrame | None:
    """Verdicts as a table (ranked when the summary has a ranking), or None when the run has none.

    ``verdicts`` is {config: {signal: {verdict, reason, score}}} (or {config: {verdict, ...}});
    ``ranking`` is [{config, signal, verdict, score}, ...], best first.
    """
    rows = []
    for config, v in (summary.get("verdicts") or {}).items():
        if isinstance(v, dict) and "verdict" not in v:
            rows += [{"config": config, "signal": sig, **(d if isinstance(d, dict) else {"verdict": d})}
                     for sig, d in v.items()]
        else:
            rows.append({"config": config, **(v if isinstance(v, dict) else {"verdict": v})})
    ranking = summary.get("ranking")
    if isinstance(ranking, list) and ranking and all(isinstance(r, dict) for r in ranking):
        ranked = pd.DataFrame(ranking)
        if rows and {"config", "signal"} <= set(ranked.columns) and "reason" in pd.DataFrame(rows).columns:
            reasons = pd.DataFrame(rows)[["config", "signal", "reason"]]
            ranked = ranked.merge(reasons, on=["config", "signal"], how="left")
        return ranked.rename_axis("rank").reset_index().assign(rank=lambda f: f["rank"] + 1)
    return pd.DataFrame(rows) if rows else None


def ideal_note(summary: dict) -> str | None:
    """One line on the ideal-gradient predictor behind the verdict: our estimator and its budget."""
    ideal = summary.get("ideal")
    if not isinstance(ideal, dict):
        return None
    what = ideal.get("estimator") or "our ideal-gradient estimator"
    if ideal.get("status") != "ok":
        return f"Ideal-gradient predictor {ideal.get('reason') or ideal.get('status')} ({what})."
    return (f"Teacher advantage and alignment come from {what}; budget {ideal.get('budget')} continuations "
            f"({ideal.get('continuations_used')} used) over {ideal.get('n_nodes')} nodes of "
            f"{ideal.get('n_prompts')} prompts, k={ideal.get('k')}, m={ideal.get('m')}.")


# ----------------------------------------------------------------------------------------- figures

def headline_figure(summary: dict) -> go.Figure:
    ci = ci_frame(summary)
    configs = list(summary["configs"])
    colors = _colors(configs)
    fig = make_subplots(rows=2, cols=3, subplot_titles=[label(s) for s in CI_COLUMNS],
                        vertical_spacing=0.18)
    for i, s in enumerate(CI_COLUMNS):
        d = ci[ci["signal"] == s].set_index("config").reindex(configs)
        fig.add_trace(go.Bar(
            x=configs, y=d["estimate"], marker_color=[colors[c] for c in configs], showlegend=False,
            error_y=dict(type="data", array=d["hi"] - d["estimate"], arrayminus=d["estimate"] - d["lo"]),
            customdata=np.stack([d["lo"], d["hi"], d["n_prompts"].astype(float)], axis=1),
            hovertemplate="%{x}<br>mean %{y:.4f}<br>95% CI [%{customdata[0]:.4f}, %{customdata[1]:.4f}]"
                          "<br>%{customdata[2]} prompts<extra>" + s + "</extra>"),
            row=i // 3 + 1, col=i % 3 + 1)
    fig.update_layout(title="Mean per-token signal per teacher config (error bars: 95% bootstrap CI over prompts)",
                      height=620)
    return fig


def entropy_figure(summary: dict, signal: str = "r_opd") -> go.Figure:
    ef = entropy_frame(summary)
    configs = list(summary["configs"])
    colors = _colors(configs)
    thr = next(iter(summary["configs"].values()))["high_entropy_share"]["threshold"] if configs else 2.0
    fig = make_subplots(rows=1, cols=3, subplot_titles=[
        "Share of tokens per student-entropy bin", f"Mean {signal} per bin",
        f"Share of tokens with entropy ≥ {thr:g} nats"])
    if ef.empty:
        return _note(fig, "no tokens in this run")
    first = ef[ef["config"] == configs[0]]  # bins use the student's entropy: same for every config
    fig.add_trace(go.Bar(x=first["bin"], y=first["share"], marker_color="#888", name="token share",
                         customdata=first["n_tokens"],
                         hovertemplate="h_s in %{x}: %{y:.1%} of tokens (%{customdata})<extra></extra>"),
                  row=1, col=1)
    for c in configs:
        d = ef[ef["config"] == c]
        fig.add_trace(go.Scatter(x=d["bin"], y=d[f"mean_{signal}"], mode="lines+markers", name=c,
                                 legendgroup=c, line_color=colors[c],
                                 hovertemplate=f"{c}<br>h_s in %{{x}}<br>mean {signal} %{{y:.4f}}<extra></extra>"),
                      row=1, col=2)
    shares = {c: summary["configs"][c]["high_entropy_share"] for c in configs}
    for who, color in (("student", "#888"), ("teacher", "#1f77b4")):
        fig.add_trace(go.Bar(x=configs, y=[_num(shares[c][who]) for c in configs], marker_color=color,
                             name=f"{who} (high-entropy share)",
                             hovertemplate=f"%{{x}}: {who} entropy ≥ {thr:g} on %{{y:.1%}} of tokens<extra></extra>"),
                      row=1, col=3)
    fig.update_xaxes(title_text="student entropy bin (nats)", type="category", row=1, col=1)
    fig.update_xaxes(title_text="student entropy bin (nats)", type="category", row=1, col=2)
    fig.update_yaxes(title_text="share of tokens", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(title_text=label(signal), row=1, col=2)
    fig.update_yaxes(title_text="share of tokens", tickformat=".0%", row=1, col=3)
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
        hovertemplate="rollout %{customdata[0]} pos %{customdata[1]}<br>a_opd %{x:.3f}<br>"
                      "a_delta %{y:.3f}<extra></extra>"))
    lim = float(np.nanmax(np.abs(ok[["a_opd", "a_delta"]].to_numpy()))) or 1.0
    fig.add_trace(go.Scatter(x=[-lim, lim], y=[-lim, lim], mode="lines", name="a_delta = a_opd",
                             line=dict(dash="dot", color="#999")))
    n = al["n"]
    for key, x, y, text in (("q_pp", 0.98, 0.98, "both > 0"), ("q_np", 0.02, 0.98, "a_opd < 0 < a_delta"),
                            ("q_nn", 0.02, 0.02, "both < 0"), ("q_pn", 0.98, 0.02, "a_delta < 0 < a_opd")):
        fig.add_annotation(text=f"{text}: {al[key]} ({al[key] / n:.1%})", xref="paper", yref="paper", x=x,
                           y=y, showarrow=False, xanchor="right" if x > 0.5 else "left",
                           bgcolor="rgba(255,255,255,0.7)")
    fig.update_layout(title=f"{config}: a_opd vs a_delta, same sign (gate keep) {al['sign_agreement']:.1%}, "
                            f"showing {len(ok)} of {n} tokens", height=560)
    return fig


def correctness_figure(tokens: pd.DataFrame, rollouts: pd.DataFrame, signal: str = "r_opd") -> go.Figure:
    # Quartiles are computed here and sent as numbers: a box of a million raw points would ship them all.
    df = tokens[["config", "rollout_id", signal]].merge(rollouts[["rollout_id", "correct"]], on="rollout_id")
    df["group"] = np.where(df["correct"].isna(), "unknown",
                           np.where(df["correct"].fillna(False).astype(bool), "correct", "incorrect"))
    df = df[np.isfinite(df[signal].astype(float))]
    fig = go.Figure()
    fig.update_layout(title=f"{signal} per token, by rollout correctness", boxmode="group", height=460,
                      yaxis_title=label(signal), xaxis_title="teacher config")
    if df.empty:
        return _note(fig, f"no finite {signal} values in this run")
    q = df.groupby(["group", "config"], sort=False)[signal].quantile([0.05, 0.25, 0.5, 0.75, 0.95]).unstack()
    stats = q.join(df.groupby(["group", "config"], sort=False)[signal].agg(["mean", "size"]))
    for group, color in _GROUPS.items():
        if group not in stats.index.get_level_values(0):
            continue
        s = stats.loc[group]
        fig.add_trace(go.Box(x=list(s.index), q1=s[0.25], median=s[0.5], q3=s[0.75], lowerfence=s[0.05],
                             upperfence=s[0.95], mean=s["mean"], name=f"{group} rollouts",
                             marker_color=color, hoverinfo="y+name"))
    configs = list(dict.fromkeys(df["config"]))
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=configs)
    return fig


def position_figure(summary: dict, signal: str = "r_opd") -> go.Figure:
    pf = position_frame(summary)
    configs = list(summary["configs"])
    colors = _colors(configs)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if pf.empty:
        return _note(fig, "no tokens in this run")
    first = pf[pf["config"] == configs[0]]
    fig.add_trace(go.Bar(x=first["bucket"], y=first["n_tokens"], name="tokens per bucket", marker_color="#ddd",
                         hovertemplate="positions %{x}: %{y} tokens<extra></extra>"), secondary_y=True)
    for c in configs:
        d = pf[pf["config"] == c]
        fig.add_trace(go.Scatter(x=d["bucket"], y=d[f"mean_{signal}"], mode="lines+markers", name=c,
                                 line_color=colors[c],
                                 hovertemplate=f"{c}<br>positions %{{x}}<br>mean {signal} %{{y:.4f}}<extra></extra>"),
                      secondary_y=False)
    fig.update_xaxes(title_text="position in the completion (tokens)", type="category")
    fig.update_yaxes(title_text=f"mean {label(signal)}", secondary_y=False)
    fig.update_yaxes(title_text="tokens in bucket", secondary_y=True, showgrid=False)
    fig.update_layout(title=f"Mean {signal} along the completion", height=460)
    return fig


def accuracy_figure(summary: dict) -> go.Figure:
    acc = accuracy_frame(summary)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.7, 0.3], subplot_titles=[
        "Accuracy: student alone vs each teacher with its prompt", "Student pass@k"])
    colors = ["#888"] + list(_colors(summary["configs"]).values())
    gap = [("" if not np.isfinite(g) else f"{g:+.2f} vs student") for g in acc["gap_estimate"]]
    fig.add_trace(go.Bar(x=acc["who"], y=acc["estimate"], marker_color=colors, text=gap, showlegend=False,
                         error_y=dict(type="data", array=acc["hi"] - acc["estimate"],
                                      arrayminus=acc["estimate"] - acc["lo"]),
                         hovertemplate="%{x}: accuracy %{y:.3f}<br>%{text}<extra></extra>"), row=1, col=1)
    student = acc.loc[0, "estimate"]
    if np.isfinite(student):
        fig.add_hline(y=student, line_dash="dash", line_color="#888", row=1, col=1)
    pk = summary.get("pass_at_k") or {}
    fig.add_trace(go.Bar(x=list(pk), y=[_num(v) for v in pk.values()], marker_color="#888", showlegend=False,
                         hovertemplate="%{x}: %{y:.3f}<extra>student samples</extra>"), row=1, col=2)
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


def figure(run: dict, name: str, signal: str = "r_opd", config: str | None = None) -> go.Figure:
    """One figure of FIGURE_HELP by name; ``config`` picks the alignment scatter's config."""
    s, tokens = run["summary"], run["tokens"]
    if name in ("alignment", "correctness") and tokens.empty:
        return _note(go.Figure(), "no tokens in this run")
    builders = {
        "headline": lambda: headline_figure(s), "entropy": lambda: entropy_figure(s, signal),
        "alignment": lambda: alignment_figure(tokens, config or default_alignment_config(tokens)),
        "correctness": lambda: correctness_figure(tokens, run["rollouts"], signal),
        "position": lambda: position_figure(s, signal), "accuracy": lambda: accuracy_figure(s),
    }
    if name not in builders:
        raise OpsdError(f"unknown figure '{name}': choose one of {', '.join(FIGURE_HELP)}")
    return builders[name]()


def run_figures(run: dict, signal: str = "r_opd", config: str | None = None) -> dict[str, go.Figure]:
    """Every figure of FIGURE_HELP for one run, in that order."""
    return {name: figure(run, name, signal, config) for name in FIGURE_HELP}


# ------------------------------------------------------------------------------------ token heatmap

def heatmap_scale(values) -> float:
    """Robust colour scale: 95th percentile of |value| over finite values (1.0 when there are none)."""
    v = np.abs(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    scale = float(np.quantile(v, 0.95)) if v.size else 0.0
    return scale if scale > 0 else 1.0


def signal_color(value: float, scale: float) -> str:
    """Diverging colour symmetric around 0: white at 0, red below, blue above, saturating at ±scale."""
    if value is None or not np.isfinite(value):
        return "rgb(215,215,215)"
    x = max(-1.0, min(1.0, float(value) / scale))
    end = _NEG if x < 0 else _POS
    r, g, b = (round(255 + abs(x) * (c - 255)) for c in end)
    return f"rgb({r},{g},{b})"


def _visible(text: str) -> str:
    """Make whitespace and control characters visible without losing the line breaks."""
    out = text.replace("\r", "␍").replace("\t", "⇥")
    out = "".join(ch if ch == "\n" or ch.isprintable() else f"\\x{ord(ch):02x}" for ch in out)
    out = out.replace("\n", "⏎\n")
    return out if out else "∅"


def _decoder(tokenizer):
    cache: dict[int, str] = {}

    def decode(i: int) -> str:
        i = int(i)
        if tokenizer is None:
            return f"#{i}"
        if i not in cache:
            cache[i] = json.dumps(tokenizer.decode([i]), ensure_ascii=False)
        return cache[i]
    return decode


def _alternatives(topk: pd.DataFrame | None, config: str) -> dict[tuple[str, int], pd.DataFrame]:
    if topk is None or topk.empty:
        return {}
    keep = topk[(topk["role"] == "student") | ((topk["role"] == "teacher") & (topk["config"] == config))]
    return {(role, int(pos)): g.sort_values("rank") for (role, pos), g in keep.groupby(["role", "pos"])}


def _cell(col: str, v) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{v:g}" if col in ("gate", "rank_t", "top1_agree") else f"{v:+.3f}"


def _tooltip(row, alts, decode, signal: str) -> str:
    e = html.escape
    cells = "".join(f"<b>{e(c)}</b><span>{_cell(c, row[c])}</span>" for c in TOKEN_COLUMNS if c in row.index)
    parts = [f"<div>pos {int(row['pos'])} · id {int(row['token_id'])} · {e(signal)} "
             f"{_cell(signal, row[signal])}</div><div class='g'>{cells}</div>"]
    for role in ("student", "teacher"):
        g = alts.get((role, int(row["pos"])))
        if g is None:
            continue
        items = ", ".join(("<u>{}</u>" if int(t) == int(row["token_id"]) else "{}").format(e(decode(t)))
                          + f" {lp:.2f}" for t, lp in zip(g["token_id"], g["logprob"]))
        parts.append(f"<div><b>{role} top-{len(g)}</b>: {items}</div>")
    return "".join(parts)


_CSS = """<style>
.opsd-hm{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:14px;line-height:1.9}
.opsd-hm .body{white-space:pre-wrap;word-break:break-word}
.opsd-hm .t{position:relative;border-radius:3px;padding:1px 0;cursor:default}
.opsd-hm .t .tip{display:none;position:absolute;left:0;top:1.7em;z-index:10;min-width:22em;max-width:36em;
 white-space:normal;background:#fff;color:#111;border:1px solid #999;border-radius:4px;padding:6px;
 font-size:12px;line-height:1.4;box-shadow:0 2px 8px rgba(0,0,0,.25)}
.opsd-hm .t:hover .tip{display:block}
.opsd-hm .tip .g{display:grid;grid-template-columns:repeat(3,auto auto);gap:0 8px;margin:4px 0}
.opsd-hm .legend span{display:inline-block;width:2.2em;height:1em;vertical-align:middle}
.opsd-hm .head{font-family:sans-serif;font-size:13px;color:#444}
</style>"""


def render_heatmap(tokens: pd.DataFrame, signal: str, topk: pd.DataFrame | None = None, config: str = "",
                   tokenizer=None, title: str = "") -> str:
    """One rollout's tokens (rows of one rollout x one config) as coloured spans, with hover details.

    ``topk`` holds that rollout's top-k rows; alternatives are decoded with ``tokenizer`` when given,
    else shown as ``#id``. Returns an HTML fragment with its own scoped CSS and no script.
    """
    if signal not in tokens.columns:
        raise OpsdError(f"unknown signal '{signal}': choose one of {', '.join(TOKEN_COLUMNS)}")
    t = tokens.sort_values("pos")
    vals = t[signal].to_numpy(dtype=float)
    scale = heatmap_scale(vals)
    alts, decode = _alternatives(topk, config), _decoder(tokenizer)
    spans = []
    for (_, row), v in zip(t.iterrows(), vals):
        strong = np.isfinite(v) and abs(v) / scale > 0.6
        spans.append(f"<span class='t' style='background:{signal_color(v, scale)};color:"
                     f"{'#fff' if strong else '#111'}'>{html.escape(_visible(str(row['token'])))}"
                     f"<span class='tip'>{_tooltip(row, alts, decode, signal)}</span></span>")
    legend = "".join(f"<span style='background:{signal_color(x * scale, scale)}'></span>"
                     for x in (-1, -0.5, 0, 0.5, 1))
    return (f"<div class='opsd-hm'>{_CSS}<div class='head'>{html.escape(title)}</div>"
            f"<div class='head legend'>{html.escape(label(signal))}: −{scale:.3g} {legend} +{scale:.3g} "
            f"(scale: 95th percentile of |{html.escape(signal)}| in this rollout; grey: n/a)</div>"
            f"<div class='body'>{''.join(spans)}</div></div>")


def rollout_heatmap(run: dict, rollout_id: int, config: str | None = None, signal: str = "r_opd",
                    tokenizer=None) -> str:
    row, t, config = rollout_tokens(run, rollout_id, config)
    topk = run.get("topk")
    if topk is not None and not topk.empty:
        topk = topk[topk["rollout_id"] == rollout_id]
    title = (f"rollout {rollout_id} · problem {row['problem_id']} · sample {row['sample_idx']} · config {config}"
             f" · correct={row['correct']} · finished={row['finished']} · {len(t)} tokens")
    return render_heatmap(t, signal, topk, config, tokenizer, title)


# ------------------------------------------------------------------------------------------ export

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
    try:
        return pio.to_image(fig, format=fmt, width=width, height=height or fig.layout.height or 500, scale=scale)
    except Exception as e:  # kaleido raises several types when it cannot start a browser
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")[:160]
        raise OpsdError(f"{fmt.upper()} export failed ({type(e).__name__}: {first}): "
                        "kaleido needs Chrome or Chromium; install one (e.g. run 'plotly_get_chrome') "
                        "or use HTML export") from e


def _lists(frame: pd.DataFrame, to_text: bool) -> pd.DataFrame:
    """List/array cells (token ids) as plain lists, or as JSON text for CSV (numpy's repr truncates)."""
    out = frame.copy()
    for c in out.columns:
        if out[c].dtype == object and out[c].map(lambda v: isinstance(v, (list, tuple, np.ndarray))).any():
            out[c] = out[c].map(lambda v: (json.dumps if to_text else list)(np.asarray(v).tolist())
                                if isinstance(v, (list, tuple, np.ndarray)) else v)
    return out


def table_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """A table as CSV, Parquet or JSON (records; NaN -> null) bytes."""
    if fmt == "csv":
        return _lists(frame, to_text=True).to_csv(index=False).encode()
    if fmt == "parquet":
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        return buf.getvalue()
    if fmt == "json":
        return _lists(frame, to_text=False).to_json(orient="records", force_ascii=False).encode()
    raise OpsdError(f"unknown table format '{fmt}': use one of {', '.join(TABLE_FORMATS)}")


def read_table_bytes(data: bytes, fmt: str) -> pd.DataFrame:
    if fmt == "csv":
        return pd.read_csv(io.BytesIO(data))
    if fmt == "parquet":
        return pd.read_parquet(io.BytesIO(data))
    if fmt == "json":
        return pd.read_json(io.StringIO(data.decode()), orient="records")
    raise OpsdError(f"unknown table format '{fmt}': use one of {', '.join(TABLE_FORMATS)}")


def run_tables(run: dict) -> dict[str, pd.DataFrame]:
    """Every exportable table of a run: the stored ones plus the summary's in long form."""
    s = run["summary"]
    out = {"summary": summary_frame(s), "ci": ci_frame(s), "accuracy": accuracy_frame(s),
           "entropy_bins": entropy_frame(s), "positions": position_frame(s)}
    out.update({k: run[k] for k in ("tokens", "rollouts", "topk", "teacher_rollouts") if k in run})
    return out


def save_table(frame: pd.DataFrame, path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(table_bytes(frame, path.suffix.lstrip(".").lower()))
    return path


def save_figure(fig: go.Figure, path: str | Path) -> Path:
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    path.write_text(figure_html(fig)) if fmt == "html" else path.write_bytes(figure_image(fig, fmt))
    return path


def pick_rollouts(run: dict, n: int = 3) -> list[int]:
    """A few rollouts worth a look: incorrect ones first, then correct, then the rest, in id order."""
    r = run["rollouts"]
    if r.empty:
        return []
    key = np.where(r["correct"].isna(), 2, np.where(r["correct"].fillna(False).astype(bool), 1, 0))
    order = r.assign(_k=key).sort_values(["_k", "rollout_id"])
    firsts = order.groupby("_k").head(1)["rollout_id"].tolist()
    rest = [i for i in order["rollout_id"] if i not in firsts]
    return [int(i) for i in (firsts + rest)[:n]]


def report_html(run: dict, signal: str = "r_opd", n_heatmaps: int = 3, tokenizer=None, title: str = "") -> str:
    """One self-contained HTML page of a run: facts, summary table, every figure, a few heatmaps."""
    e, m, s = html.escape, run["manifest"], run["summary"]
    facts = {k: m.get(k) for k in ("status", "n_problems", "sampling_temperature", "scoring_temperature",
                                   "centering", "seed", "seconds")}
    facts["student"] = (m.get("config") or {}).get("student", {}).get("model")
    parts = [f"<h1>{e(title or 'OPSD-Diag report')}</h1>",
             "<p>" + " · ".join(f"<b>{e(k)}</b> {e(str(v))}" for k, v in facts.items()) + "</p>",
             "<h2>Summary per teacher config</h2>",
             summary_frame(s).to_html(index=False, float_format=lambda v: f"{v:.4f}", na_rep="n/a")]
    verdict = verdict_frame(s)
    if verdict is not None:
        parts += ["<h2>Verdict</h2>", verdict.to_html(index=False, na_rep="n/a")]
        parts += [f"<p>{e(str(x))}</p>" for x in (ideal_note(s), s.get("verdict_rule")) if x]
    for i, (name, fig) in enumerate(run_figures(run, signal).items()):
        parts += [f"<h2>{e(name)}</h2><p>{e(FIGURE_HELP[name])}</p>",
                  figure_html(fig, full_html=False, include_plotlyjs=(i == 0))]
    configs = list(s["configs"])
    if configs:
        parts.append(f"<h2>Token heatmaps ({e(configs[0])}, coloured by {e(signal)})</h2>")
        parts += [rollout_heatmap(run, rid, configs[0], signal, tokenizer) + "<hr>"
                  for rid in pick_rollouts(run, n_heatmaps)]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{e(title or 'OPSD-Diag report')}</title><style>body{{font-family:sans-serif;margin:2em}}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
            + "\n".join(parts) + "</body></html>")
