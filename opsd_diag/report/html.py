"""The one-file HTML report of a run: facts, predictor v2's decision and table, the summary table, the v1
verdicts, every figure, heatmaps.

Self-contained (plotly.js inlined once, no network request) so it can be mailed or archived.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from opsd_diag import checks as failure_checks, prediction
from opsd_diag.report.export import figure_html
from opsd_diag.report.figures import FIGURE_HELP
from opsd_diag.summary import Summary


def report_html(facts: dict, summary: Summary, figures: dict[str, go.Figure], heatmaps: list[str], *,
                heatmap_title: str = "", title: str = "", predictions: prediction.Predictions | None = None,
                checks: list | None = None) -> str:
    """The page; ``facts`` are shown as a line of key/value pairs, ``heatmaps`` are HTML fragments,
    ``predictions`` predictor v2's (none: the section is left out), ``checks`` the failure checks (``Check``s)."""
    e = html.escape
    title = title or "OPSD-Diag report"
    parts = [f"<h1>{e(title)}</h1>",
             "<p>" + " · ".join(f"<b>{e(str(k))}</b> {e(str(v))}" for k, v in facts.items()) + "</p>"]
    if predictions is not None:
        text = prediction.panel(predictions)
        parts += ["<h2>Decision (predictor v2)</h2>", f"<p><b>{e(text['headline'])}</b></p>",
                  *(f"<p>{e(text[k])}</p>" for k in prediction.PANEL_TEXT if k in text),
                  *(["<details><summary>How the rule in force was chosen</summary><p>"
                     + "<br>".join(map(e, text["looks"].splitlines())) + "</p></details>"]
                    if "looks" in text else []),
                  predictions.frame().drop(columns="calibration").to_html(
                      index=False, float_format=lambda v: f"{v:+.4f}", na_rep="n/a")]
    if checks:
        parts += ["<h2>Failure checks</h2>",
                  "<ul>" + "".join(f"<li>{e(c)}</li>" for c in failure_checks.lines(checks)) + "</ul>"]
    parts += ["<h2>Summary per teacher config</h2>",
              summary.headline_frame().to_html(index=False, float_format=lambda v: f"{v:.4f}", na_rep="n/a")]
    verdicts = summary.verdict_frame()
    if verdicts is not None:
        parts += ["<h2>Verdict (v1 rule on the ideal-gradient quantities; secondary evidence)</h2>",
                  verdicts.to_html(index=False, na_rep="n/a")]
        notes = (summary.ideal.note() if summary.ideal else None, summary.verdict_rule)
        parts += [f"<p>{e(str(x))}</p>" for x in notes if x]
    for i, (name, fig) in enumerate(figures.items()):
        parts += [f"<h2>{e(name)}</h2><p>{e(FIGURE_HELP[name])}</p>",
                  figure_html(fig, full_html=False, include_plotlyjs=(i == 0))]
    if heatmaps:
        parts.append(f"<h2>Token heatmaps ({e(heatmap_title)})</h2>")
        parts += [h + "<hr>" for h in heatmaps]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{e(title)}</title><style>body{{font-family:sans-serif;margin:2em}}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}</style></head><body>"
            + "\n".join(parts) + "</body></html>")
