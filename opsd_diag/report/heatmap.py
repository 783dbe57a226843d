"""The token heatmap: one rollout's tokens as coloured spans with hover details (an HTML fragment).

Signed signals (``schema.Column.signed``) get a diverging scale (red below 0, white at 0, blue
above, symmetric); non-negative ones, ranks and log-probs a sequential one on |value| (white to
purple), so ``rank_t`` reads 0 … 17 and never "−17". The tooltip is a two-column table shown
in a gutter right of the text, level with its token, and never catches the mouse: it hides no token. Token text
is untrusted (whatever the student sampled): every string that reaches HTML goes through
``html.escape``, and neither the fragment nor the standalone document holds a script or a link.
"""

from __future__ import annotations

import html
import json
import math

import numpy as np
import pandas as pd

from opsd_diag.errors import OpsdError
from opsd_diag.schema import BY_NAME, SIGNAL_COLUMNS, label

_NEG, _POS = (190, 30, 45), (45, 30, 190)  # mirrored channels: equal intensity on both sides of 0
_SEQ = (84, 39, 143)  # the dark end of the sequential scale (purple: never read as a sign)
NAN_COLOR = "rgb(215,215,215)"
_INT_COLUMNS = ("gate", "rank_t", "top1_agree")


def is_signed(signal: str) -> bool:
    """A diverging scale for signed signals, a sequential one for the rest (schema.Column.signed)."""
    return BY_NAME[signal].signed if signal in BY_NAME else True


def heatmap_scale(values, signed: bool = True) -> float:
    """Robust colour scale: 95th percentile of |value| over finite values (1.0 when there are none)."""
    v = np.abs(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    scale = float(np.quantile(v, 0.95)) if v.size else 0.0
    return scale if scale > 0 else 1.0


def _rgb(values, scale: float, signed: bool) -> list[str]:
    """Vectorised colours of ``values``: diverging around 0 or sequential on |value|, saturating at scale."""
    v = np.asarray(values, dtype=float)
    x = np.clip(np.nan_to_num(v / scale, nan=0.0), -1.0, 1.0)
    if signed:
        end = np.where(x[:, None] < 0, np.array(_NEG), np.array(_POS))
    else:
        end = np.broadcast_to(np.array(_SEQ), (len(x), 3))
    rgb = np.rint(255 + np.abs(x)[:, None] * (end - 255)).astype(int)
    return [NAN_COLOR if not np.isfinite(val) else f"rgb({r},{g},{b})" for val, (r, g, b) in zip(v, rgb)]


def signal_color(value: float, scale: float, signed: bool = True) -> str:
    """One value's colour (``_rgb`` for one value); grey when it is missing."""
    if value is None:
        return NAN_COLOR
    return _rgb([value], scale, signed)[0]


def visible(text: str) -> str:
    """Whitespace and control characters made visible, line breaks kept (⏎ then the break)."""
    out = text.replace("\r", "␍").replace("\t", "⇥")
    out = "".join(ch if ch == "\n" or ch.isprintable() else f"\\x{ord(ch):02x}" for ch in out)
    out = out.replace("\n", "⏎\n")
    return out if out else "∅"


def _token_html(text: str) -> str:
    """Escaped token text with spaces as faint middle dots (the text keeps its width and wraps)."""
    return "<i class='w'>·</i>".join(html.escape(part) for part in visible(text).split(" "))


def _decoder(tokenizer):
    """Token id -> its text, escaped for HTML (``#id`` without a tokenizer), cached per id."""
    cache: dict[int, str] = {}

    def decode(i: int) -> str:
        i = int(i)
        if i not in cache:
            cache[i] = f"#{i}" if tokenizer is None else html.escape(json.dumps(tokenizer.decode([i]),
                                                                               ensure_ascii=False))
        return cache[i]
    return decode


def _alternatives(topk: pd.DataFrame | None, config: str) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    if topk is None or topk.empty:
        return {}
    keep = topk[(topk["role"] == "student") | ((topk["role"] == "teacher") & (topk["config"] == config))]
    keep = keep.sort_values(["role", "pos", "rank"])
    ids, lps = keep["token_id"].to_numpy(), keep["logprob"].to_numpy(dtype=float)
    return {(str(role), int(pos)): (ids[idx], lps[idx])
            for (role, pos), idx in keep.groupby(["role", "pos"], sort=False).indices.items()}


def cell(col: str, v) -> str:
    """A number as the heatmap and the tooltip print it (n/a when missing)."""
    if v is None or not math.isfinite(v):
        return "n/a"
    if col in _INT_COLUMNS:
        return f"{v:g}"
    sign = "+" if is_signed(col) else ""  # a sign only where both signs mean something
    return f"{v:{sign}.3f}" if v == 0 or abs(v) >= 1e-3 else f"{v:{sign}.1e}"  # never a bare "-0.000"


def _cells(col: str, values: np.ndarray) -> list[str]:
    """``cell`` of every value of one column, as table rows (the label is a schema name: no escaping)."""
    return [f"<tr><td>{col}</td><td>{cell(col, v)}</td></tr>" for v in values.tolist()]


def _span_rows(t: pd.DataFrame) -> list[str]:
    """Per span row: its student token count, the teacher's own pieces, its top-k pieces at the span's first
    position (text: ids of another vocabulary) and ``uld`` (NaN rows: a same-vocabulary config stacked in
    the same table has none)."""
    out = []
    n_rows = len(t)
    tops = t["teacher_topk"].tolist() if "teacher_topk" in t.columns else [None] * n_rows  # runs before the column
    top_lps = t["teacher_topk_lp"].tolist() if "teacher_topk_lp" in t.columns else [None] * n_rows
    for n, pieces, d, top, top_lp in zip(t["span_len"].tolist(), t["teacher_tokens"].tolist(), t["uld"].tolist(),
                                         tops, top_lps):
        if pieces is None or (isinstance(pieces, float) and math.isnan(pieces)):
            out.append("")
            continue
        shown = " ".join(f"<span>{_token_html(str(x))}</span>" for x in pieces)
        dist = f"{d:.3f}" if math.isfinite(d) else "n/a"  # >= 0: no sign
        row = (f"<tr><td>span</td><td>{n:g} student tokens</td></tr><tr><td>teacher tokens</td>"
               f"<td class='alt'>{shown}</td></tr><tr><td>uld</td><td>{dist}</td></tr>")
        if top is not None and not isinstance(top, float) and len(top):
            first = str(pieces[0]) if len(pieces) else None  # the teacher's own first piece, underlined
            items = " ".join(("<span><u>{}</u>" if str(x) == first else "<span>{}").format(
                html.escape(json.dumps(str(x), ensure_ascii=False))) + f" {float(lp):.2f}</span>"
                for x, lp in zip(top, top_lp))
            row += f"<tr><td>teacher top-{len(top)}</td><td class='alt'>{items}</td></tr>"
        out.append(row)
    return out


def _tooltip(pos: int, token_id: int, text: str, rows: list[str], alts, decode, config: str = "",
             signal: str = "") -> str:
    who = (f"<tr><th colspan='2' class='who'>config {html.escape(config)} · coloured by {html.escape(signal)}"
           "</th></tr>") if config else ""
    out = [f"<tr><th colspan='2'>pos {pos} · id {token_id} · {html.escape(json.dumps(text, ensure_ascii=False))}"
           f"</th></tr>{who}", *rows]
    for role in ("student", "teacher"):
        got = alts.get((role, pos))
        if got is None:
            continue
        items = " ".join(("<span><u>{}</u>" if t == token_id else "<span>{}").format(decode(t)) + f" {lp:.2f}</span>"
                         for t, lp in zip(got[0].tolist(), got[1].tolist()))
        out.append(f"<tr><td>{role} top-{len(got[0])}</td><td class='alt'>{items}</td></tr>")
    return "<table class='tip'>" + "".join(out) + "</table>"


CSS = """<style>
.opsd-hm{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:14px;line-height:1.9;margin-bottom:1em}
.opsd-hm .body{position:relative;white-space:pre-wrap;word-break:break-word;padding-right:25em}
.opsd-hm .t{border-radius:3px;padding:1px 0;cursor:default;box-shadow:inset -1px 0 rgba(0,0,0,.12)}
.opsd-hm .t.dim{opacity:.25}
.opsd-hm .t.hot{box-shadow:inset 0 -3px 0 #d97706,inset -1px 0 rgba(0,0,0,.12);font-weight:700}
.opsd-hm .t i.w{font-style:normal;opacity:.45}
.opsd-hm .t .tip{display:none;position:absolute;right:0;z-index:20;width:24em;
 pointer-events:none;white-space:normal;background:#fff;color:#111;border:1px solid #999;border-radius:4px;
 font-size:12px;line-height:1.35;box-shadow:0 2px 8px rgba(0,0,0,.25);border-collapse:collapse}
.opsd-hm .t:hover .tip{display:table}
.opsd-hm .tip th{text-align:left;font-weight:600;padding:3px 6px;border-bottom:1px solid #ddd;
 white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:24em}
.opsd-hm .tip th.who{white-space:normal;font-weight:400;color:#333}
.opsd-hm .tip td{padding:0 6px;vertical-align:top}
.opsd-hm .tip td:first-child{white-space:nowrap;color:#444}
.opsd-hm .tip td:last-child{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.opsd-hm .tip td.alt{text-align:left;white-space:normal}
.opsd-hm .tip td.alt span{white-space:nowrap;margin-right:.6em}
.opsd-hm .tip tr.sel td{font-weight:700;background:#fef3c7}
.opsd-hm .legend .bar{display:inline-block;width:12em;height:.9em;vertical-align:middle;border:1px solid #888;
 border-radius:2px}
.opsd-hm .legend .na{display:inline-block;width:1.2em;height:.9em;vertical-align:middle;background:#d7d7d7;
 border:1px solid #888}
.opsd-hm .head{font-family:sans-serif;font-size:13px;color:#444;line-height:1.5}
</style>"""


def legend(signal: str, scale: float, scope: str = "this rollout") -> str:
    """The colour bar of a heatmap: a continuous gradient with its end values, and the n/a swatch."""
    signed = is_signed(signal)
    e = html.escape
    if signed:
        stops = ", ".join(signal_color(x * scale, scale) for x in (-1, -0.5, 0, 0.5, 1))
        lo, hi, what = f"−{scale:.3g}", f"+{scale:.3g}", f"95th percentile of |{e(signal)}|"
    else:
        stops = ", ".join(signal_color(x * scale, scale, False) for x in (0, 0.5, 1))
        lo, hi, what = "0", f"{scale:.3g}", f"95th percentile of |{e(signal)}|"
        if signal.startswith("lp_"):
            lo, hi = "0", f"−{scale:.3g}"
    kind = "diverging: red below 0, blue above" if signed else "sequential: darker is larger in size"
    return (f"<div class='head legend'>{e(label(signal))}: {lo} <span class='bar' style='background:"
            f"linear-gradient(to right, {stops})'></span> {hi} · {kind}; saturates at the {what} in {e(scope)}"
            f" · <span class='na'></span> n/a</div>")


def render_heatmap(tokens: pd.DataFrame, signal: str, topk: pd.DataFrame | None = None, config: str = "",
                   tokenizer=None, title: str = "", *, scale: float | None = None, scope: str = "this rollout",
                   dim: np.ndarray | None = None, hot: set[int] | None = None) -> str:
    """One rollout's tokens (rows of one rollout x one config) as coloured spans, with hover details.

    ``topk`` holds that rollout's top-k rows; alternatives are decoded with ``tokenizer`` when given,
    else shown as ``#id``. ``scale`` fixes the colour scale (e.g. per run; default: this rollout's);
    ``dim`` (a boolean per position, in position order) fades filtered-out tokens and ``hot`` outlines
    the given positions. Returns an HTML fragment with its own scoped CSS and no script.
    """
    if signal not in SIGNAL_COLUMNS:
        raise OpsdError(f"unknown signal '{signal}': choose one of {', '.join(SIGNAL_COLUMNS)}")
    t = tokens.sort_values("pos")
    signed = is_signed(signal)
    vals = t[signal].to_numpy(dtype=float)
    scale = scale if scale and np.isfinite(scale) and scale > 0 else heatmap_scale(vals)
    colours = _rgb(vals, scale, signed)
    strong = np.isfinite(vals) & (np.abs(vals) / scale > 0.6)
    alts, decode = _alternatives(topk, config), _decoder(tokenizer)
    cols = [c for c in SIGNAL_COLUMNS if c in t.columns]
    rows = [_cells(c, t[c].to_numpy(dtype=float)) for c in cols]
    sel = cols.index(signal)
    rows[sel] = [r.replace("<tr>", "<tr class=sel>", 1) for r in rows[sel]]  # the chosen signal stands out
    if "teacher_tokens" in t.columns:  # span rows of a teacher with another tokenizer (engine.cross_scoring)
        rows += [_span_rows(t)]
    positions, ids, texts = t["pos"].to_numpy().tolist(), t["token_id"].to_numpy().tolist(), t["token"].astype(str).tolist()
    hot = hot or set()
    spans = []
    for i, (pos, tid, text) in enumerate(zip(positions, ids, texts)):
        classes = "t" + (" dim" if dim is not None and dim[i] else "") + (" hot" if pos in hot else "")
        tip = _tooltip(pos, tid, text, [r[i] for r in rows], alts, decode, config, signal)
        spans.append(f"<span class='{classes}' data-pos='{pos}' style='background:{colours[i]};color:"
                     f"{'#fff' if strong[i] else '#111'}'>{_token_html(text)}{tip}</span>")
    return (f"<div class='opsd-hm'>{CSS}<div class='head'>{html.escape(title)}</div>{legend(signal, scale, scope)}"
            f"<div class='body'>{''.join(spans)}</div></div>")


def document(fragments: list[str], title: str) -> str:
    """A standalone HTML page of heatmap fragments: no script, no link, no network request."""
    e = html.escape
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><meta http-equiv='Content-Security-Policy' "
            "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{e(title)}</title><style>body{{font-family:sans-serif;margin:2em}}</style>"
            f"</head><body><h1>{e(title)}</h1>" + "<hr>".join(fragments) + "</body></html>")
