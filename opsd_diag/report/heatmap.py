"""The token heatmap: one rollout's tokens as coloured spans with hover details (an HTML fragment).

Signed signals (``schema.Column.signed``) get a diverging scale (red below 0, white at 0, blue
above, symmetric); non-negative ones, ranks and log-probs a sequential one on |value| (white to
purple), so ``rank_t`` reads 0 … 17 and never "−17". The tooltip is a two-column table shown
in a gutter right of the text, level with its token, and never catches the mouse: it hides no token. It stays
inside the viewport (CSS anchor positioning, no script): below-aligned with its token, else above it, else
clamped to the viewport's top, and never taller than the viewport (it scrolls inside). A browser without
anchor positioning shows it level with its token, height capped the same. Token text
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
    return [f"rgb({r},{g},{b})" if ok else NAN_COLOR for ok, (r, g, b) in zip(np.isfinite(v).tolist(), rgb.tolist())]


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


def _alternatives(topk: pd.DataFrame | None, config: str, sampled: dict[int, int], decode) -> dict[int, str]:
    """Position -> the tooltip rows of its student and teacher (``config``) top-k, the sampled token
    underlined: built over the whole rollout at once (one sort, one pass), not token by token."""
    if topk is None or topk.empty:
        return {}
    keep = topk[(topk["role"] == "student") | ((topk["role"] == "teacher") & (topk["config"] == config))]
    keep = keep.sort_values(["role", "pos", "rank"], kind="stable")
    roles, pos = keep["role"].astype(str).tolist(), keep["pos"].to_numpy().tolist()
    items = [("<span><u>%s</u> %.2f</span>" if sampled.get(p) == t else "<span>%s %.2f</span>") % (decode(t), lp)
             for p, t, lp in zip(pos, keep["token_id"].to_numpy().tolist(), keep["logprob"].to_numpy(dtype=float).tolist())]
    out: dict[int, str] = {}
    i, n = 0, len(items)
    while i < n:  # rows are sorted by (role, pos): each run of equal keys is one table row
        j = i + 1
        while j < n and pos[j] == pos[i] and roles[j] == roles[i]:
            j += 1
        out[pos[i]] = out.get(pos[i], "") + (f"<tr><td>{roles[i]} top-{j - i}</td><td class='alt'>"
                                             f"{' '.join(items[i:j])}</td></tr>")
        i = j
    return out


def cell(col: str, v) -> str:
    """A number as the heatmap and the tooltip print it (n/a when missing)."""
    if v is None or not math.isfinite(v):
        return "n/a"
    if col in _INT_COLUMNS:
        return f"{v:g}"
    sign = "+" if is_signed(col) else ""  # a sign only where both signs mean something
    return f"{v:{sign}.3f}" if v == 0 or abs(v) >= 1e-3 else f"{v:{sign}.1e}"  # never a bare "-0.000"


def _cells(col: str, values: np.ndarray) -> list[str]:
    """``cell`` of every value of one column, as table rows (the label is a schema name: no escaping).
    One %-format over the column; the few values ``cell`` prints otherwise (n/a, tiny) go through it."""
    values = np.asarray(values, dtype=float)
    row = f"<tr><td>{col}</td><td>%s</td></tr>"
    if col in _INT_COLUMNS:
        out, odd = [row % f"{v:g}" for v in values.tolist()], ~np.isfinite(values)
    else:
        fmt = row.replace("%s", "%+.3f" if is_signed(col) else "%.3f")
        out = [fmt % v for v in values.tolist()]
        with np.errstate(invalid="ignore"):
            odd = ~np.isfinite(values) | ((values != 0) & (np.abs(values) < 1e-3))
    for i in np.flatnonzero(odd).tolist():
        out[i] = row % cell(col, values[i])
    return out


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


def tooltips(t: pd.DataFrame, topk: pd.DataFrame | None = None, config: str = "", tokenizer=None) -> list[str]:
    """Per token of ``t`` (one rollout x one config, in position order) the tooltip's rows below its header:
    every signal, span rows, top-k alternatives. They do not depend on the signal shown (the chosen one is
    marked in ``render_heatmap``), so ``Run.heatmap`` keeps them while the signal or the scale changes."""
    cols = [c for c in SIGNAL_COLUMNS if c in t.columns]
    rows = [_cells(c, t[c].to_numpy(dtype=float)) for c in cols]
    if "teacher_tokens" in t.columns:  # span rows of a teacher with another tokenizer (engine.cross_scoring)
        rows.append(_span_rows(t))
    positions, ids = t["pos"].to_numpy().tolist(), t["token_id"].to_numpy().tolist()
    alts = _alternatives(topk, config, dict(zip(positions, ids)), _decoder(tokenizer))
    return ["".join(parts) + alts.get(pos, "") for pos, parts in zip(positions, zip(*rows))] if rows else \
        [alts.get(pos, "") for pos in positions]


CSS = """<style>
.opsd-hm{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:14px;line-height:1.9;margin-bottom:1em}
.opsd-hm .body{position:relative;white-space:pre-wrap;word-break:break-word;padding-right:25em}
.opsd-hm .t{border-radius:3px;padding:1px 0;cursor:default;box-shadow:inset -1px 0 rgba(0,0,0,.12)}
.opsd-hm .t.dim{opacity:.25}
.opsd-hm .t.hot{box-shadow:inset 0 -3px 0 #d97706,inset -1px 0 rgba(0,0,0,.12);font-weight:700}
.opsd-hm .t i.w{font-style:normal;opacity:.45}
.opsd-hm .t .tip{display:none;position:absolute;right:0;z-index:20;width:24em;box-sizing:border-box;
 max-height:calc(100vh - 16px);overflow-y:auto;pointer-events:none;white-space:normal;background:#fff;color:#111;
 border:1px solid #999;border-radius:4px;font-size:12px;line-height:1.35;box-shadow:0 2px 8px rgba(0,0,0,.25)}
.opsd-hm .t:hover .tip{display:block}
.opsd-hm .tip table{border-collapse:collapse;width:100%}
@position-try --opsd-above{top:auto;bottom:anchor(bottom)}
@position-try --opsd-fit{top:8px;bottom:auto}
@supports (position-try-fallbacks:flip-block){
.opsd-hm{anchor-scope:--opsd-body}
.opsd-hm .body{anchor-name:--opsd-body}
.opsd-hm .t:hover{anchor-name:--opsd-tok}
.opsd-hm .t .tip{position:fixed;position-anchor:--opsd-tok;top:anchor(top);right:anchor(--opsd-body right);
 position-try-fallbacks:--opsd-above,--opsd-fit}
}
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
                   dim: np.ndarray | None = None, hot: set[int] | None = None, tips: list[str] | None = None) -> str:
    """One rollout's tokens (rows of one rollout x one config) as coloured spans, with hover details.

    ``topk`` holds that rollout's top-k rows; alternatives are decoded with ``tokenizer`` when given,
    else shown as ``#id``. ``scale`` fixes the colour scale (e.g. per run; default: this rollout's);
    ``dim`` (a boolean per position, in position order) fades filtered-out tokens and ``hot`` outlines
    the given positions; ``tips`` are ``tooltips`` of these tokens (in position order) made before (they are made here
    otherwise). Returns an HTML fragment with its own scoped CSS and no script.
    """
    if signal not in SIGNAL_COLUMNS:
        raise OpsdError(f"unknown signal '{signal}': choose one of {', '.join(SIGNAL_COLUMNS)}")
    t = tokens.sort_values("pos", kind="stable")
    signed = is_signed(signal)
    vals = t[signal].to_numpy(dtype=float)
    scale = scale if scale and np.isfinite(scale) and scale > 0 else heatmap_scale(vals)
    colours = _rgb(vals, scale, signed)
    ink = np.where(np.isfinite(vals) & (np.abs(vals) / scale > 0.6), "#fff", "#111").tolist()
    tips = tooltips(t, topk, config, tokenizer) if tips is None else tips
    plain, marked = f"<tr><td>{signal}</td>", f"<tr class=sel><td>{signal}</td>"  # the chosen signal stands out
    who = (f"<tr><th colspan='2' class='who'>config {html.escape(config)} · coloured by {html.escape(signal)}"
           "</th></tr>") if config else ""
    positions, ids, texts = t["pos"].to_numpy().tolist(), t["token_id"].to_numpy().tolist(), t["token"].astype(str).tolist()
    shown = {x: (_token_html(x), html.escape(json.dumps(x, ensure_ascii=False))) for x in set(texts)}  # once per string
    faded = dim.tolist() if dim is not None else [False] * len(texts)
    hot = hot or set()
    spans = [f"<span class='t{' dim' if d else ''}{' hot' if pos in hot else ''}' data-pos='{pos}' style='background:"
             f"{c};color:{k}'>{shown[x][0]}<span class='tip'><table><tr><th colspan='2'>pos {pos} · id {tid} · "
             f"{shown[x][1]}</th></tr>{who}{tip.replace(plain, marked, 1)}</table></span></span>"
             for pos, tid, x, c, k, d, tip in zip(positions, ids, texts, colours, ink, faded, tips)]
    return (f"<div class='opsd-hm'>{CSS}<div class='head'>{html.escape(title)}</div>{legend(signal, scale, scope)}"
            f"<div class='body'>{''.join(spans)}</div></div>")


def document(fragments: list[str], title: str) -> str:
    """A standalone HTML page of heatmap fragments: no script, no link, no network request."""
    e = html.escape
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><meta http-equiv='Content-Security-Policy' "
            "content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{e(title)}</title><style>body{{font-family:sans-serif;margin:2em}}</style>"
            f"</head><body><h1>{e(title)}</h1>" + "<hr>".join(fragments) + "</body></html>")
