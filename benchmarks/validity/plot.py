"""The predicted-vs-realised scatter as a PNG, with whatever renderer is installed.

Order: plotly + kaleido (needs a Chromium; ``pip install 'opsd-diag[export]'``), else matplotlib,
else Pillow (always there: streamlit depends on it), so the report never needs an extra install.
``panels``: [{title, xlabel, ylabel, points: [{x, y, lo, hi, color, marker, label}]}];
marker is "circle" or "square".  Returns the renderer used.
"""

from __future__ import annotations

import math
from pathlib import Path

WIDTH, HEIGHT = 640, 520  # per panel, pixels


def _finite(p) -> bool:
    return all(isinstance(p[k], (int, float)) and math.isfinite(p[k]) for k in ("x", "y"))


def render(path: Path, panels: list[dict], backend: str = "auto") -> str:
    path = Path(path)
    order = ["plotly", "matplotlib", "pil"] if backend == "auto" else [backend]
    errors = []
    for name in order:
        try:
            {"plotly": _plotly, "matplotlib": _matplotlib, "pil": _pil}[name](path, panels)
            return name
        except Exception as e:  # a missing package or browser: try the next renderer
            errors.append(f"{name}: {type(e).__name__}: {str(e)[:120]}")
    raise RuntimeError("no PNG renderer worked: " + "; ".join(errors))


def _plotly(path, panels):
    import importlib.util

    if importlib.util.find_spec("kaleido") is None:
        raise ImportError("kaleido is not installed")
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=[p["title"] for p in panels])
    for i, panel in enumerate(panels, start=1):
        for p in filter(_finite, panel["points"]):
            err = None
            if math.isfinite(p.get("lo", math.nan)) and math.isfinite(p.get("hi", math.nan)):
                err = {"type": "data", "symmetric": False, "array": [p["hi"] - p["y"]], "arrayminus": [p["y"] - p["lo"]]}
            fig.add_trace(go.Scatter(x=[p["x"]], y=[p["y"]], error_y=err, mode="markers+text", text=[p["label"]],
                                     textposition="top center", textfont={"size": 9}, showlegend=False,
                                     marker={"color": p["color"], "size": 10, "symbol": p["marker"]}), row=1, col=i)
        fig.update_xaxes(title_text=panel["xlabel"], row=1, col=i)
        fig.update_yaxes(title_text=panel["ylabel"], row=1, col=i)
        fig.add_hline(y=0, line_dash="dot", line_color="grey", row=1, col=i)
    fig.update_layout(width=WIDTH * len(panels), height=HEIGHT, template="plotly_white")
    fig.write_image(str(path))


def _matplotlib(path, panels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH * len(panels) / 100, HEIGHT / 100), dpi=100, squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for p in filter(_finite, panel["points"]):
            ax.errorbar([p["x"]], [p["y"]], yerr=[[p["y"] - p["lo"]], [p["hi"] - p["y"]]], fmt="o" if p["marker"] == "circle"
                        else "s", color=p["color"], ms=7, capsize=3)
            ax.annotate(p["label"], (p["x"], p["y"]), fontsize=7, xytext=(3, 4), textcoords="offset points")
        ax.axhline(0, color="grey", ls=":")
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel(panel["xlabel"])
        ax.set_ylabel(panel["ylabel"])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    raw = span / max(1, n)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=mag)
    start = math.ceil(lo / step) * step
    out, t = [], start
    while t <= hi + 1e-12:
        out.append(round(t, 10))
        t += step
    return out


def _pil(path, panels):
    from PIL import Image, ImageDraw, ImageFont

    img = Image.new("RGB", (WIDTH * len(panels), HEIGHT), "white")
    draw = ImageDraw.Draw(img)
    try:
        font = ImageFont.load_default(size=12)  # scalable (FreeType) default font, Pillow >= 10.1
    except TypeError:
        font = ImageFont.load_default()
    left, right, top, bottom = 70, 20, 40, 60
    for i, panel in enumerate(panels):
        ox = i * WIDTH
        pts = list(filter(_finite, panel["points"]))
        xs = [p["x"] for p in pts] or [0.0, 1.0]
        ys = [v for p in pts for v in (p["y"], p.get("lo"), p.get("hi")) if isinstance(v, (int, float)) and math.isfinite(v)]
        ys = ys + [0.0] if ys else [-1.0, 1.0]
        x0, x1 = min(xs), max(xs)
        y0, y1 = min(ys), max(ys)
        padx = (x1 - x0) * 0.08 or 0.5
        pady = (y1 - y0) * 0.08 or 0.5
        x0, x1, y0, y1 = x0 - padx, x1 + padx, y0 - pady, y1 + pady
        W, H = WIDTH - left - right, HEIGHT - top - bottom

        def sx(x):
            return ox + left + (x - x0) / (x1 - x0) * W

        def sy(y):
            return top + (y1 - y) / (y1 - y0) * H

        draw.rectangle([ox + left, top, ox + left + W, top + H], outline="black")
        for t in _ticks(x0, x1):
            draw.line([sx(t), top + H, sx(t), top + H + 4], fill="black")
            draw.text((sx(t) - 12, top + H + 6), f"{t:g}", fill="black", font=font)
        for t in _ticks(y0, y1):
            draw.line([ox + left - 4, sy(t), ox + left, sy(t)], fill="black")
            draw.text((ox + 5, sy(t) - 5), f"{t:g}", fill="black", font=font)
        if y0 < 0 < y1:
            for xx in range(int(ox + left), int(ox + left + W), 6):
                draw.line([xx, sy(0), xx + 2, sy(0)], fill="grey")
        for p in pts:
            cx, cy = sx(p["x"]), sy(p["y"])
            lo, hi = p.get("lo"), p.get("hi")
            if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and math.isfinite(lo) and math.isfinite(hi):
                draw.line([cx, sy(lo), cx, sy(hi)], fill=p["color"])
                draw.line([cx - 3, sy(lo), cx + 3, sy(lo)], fill=p["color"])
                draw.line([cx - 3, sy(hi), cx + 3, sy(hi)], fill=p["color"])
            box = [cx - 5, cy - 5, cx + 5, cy + 5]
            (draw.ellipse if p["marker"] == "circle" else draw.rectangle)(box, fill=p["color"], outline="black")
            draw.text((cx + 7, cy - 14 if p["marker"] == "circle" else cy + 2), p["label"], fill="black", font=font)
        draw.text((ox + left, 12), panel["title"], fill="black", font=font)
        draw.text((ox + left + W // 2 - 60, HEIGHT - 22), panel["xlabel"], fill="black", font=font)
        draw.text((ox + 5, top - 16), panel["ylabel"], fill="black", font=font)
    img.save(path, format="PNG")
