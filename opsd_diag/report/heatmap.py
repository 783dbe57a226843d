"""The token heatmap: one rollout's tokens as coloured spans with hover details (an HTML fragment).

Token text is untrusted (it is whatever the student sampled): every string that reaches HTML goes
through ``html.escape``, and the fragment holds no script.
"""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.schema import SIGNAL_COLUMNS, label

_NEG, _POS = (190, 30, 45), (45, 30, 190)  # mirrored channels: equal intensity on both sides of 0


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
    cells = "".join(f"<b>{e(c)}</b><span>{_cell(c, row[c])}</span>" for c in SIGNAL_COLUMNS if c in row.index)
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
    if signal not in SIGNAL_COLUMNS:
        raise OpsdError(f"unknown signal '{signal}': choose one of {', '.join(SIGNAL_COLUMNS)}")
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
