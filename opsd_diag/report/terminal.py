"""Terminal rendering: one rollout's tokens coloured by a per-token signal (``opsd-diag show``), and predictor v2's
decision and table (``opsd-diag report``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from opsd_diag import prediction
from opsd_diag.errors import OpsdError, printable
from opsd_diag.schema import SIGNAL_COLUMNS

# 24-bit colour backgrounds: red for negative, blue for positive (as in the app), intensity by magnitude.
_RESET = "\033[0m"


def _bg(value: float, scale: float) -> str:
    if not np.isfinite(value):
        return "\033[48;2;90;90;90m"
    x = max(-1.0, min(1.0, value / scale)) if scale > 0 else 0.0
    a = int(40 + 160 * abs(x))
    r, b = (a, 40) if x < 0 else (40, a)
    return f"\033[48;2;{r};30;{b}m\033[38;2;255;255;255m"


def _escaped(token: str) -> str:
    """A token on one line, nothing in it read by the terminal (a backslash doubled, so ``\\n`` stays unambiguous)."""
    return printable(token.replace("\\", "\\\\"))


def render_rollout(row: pd.Series, t: pd.DataFrame, config: str, signal: str = "r_opd", color: bool = True) -> str:
    """``row``: the rollout (rollouts.parquet); ``t``: its tokens under ``config``, in position order."""
    rollout_id = int(row["rollout_id"])
    if signal not in SIGNAL_COLUMNS:
        raise OpsdError(f"unknown signal '{signal}': choose one of the per-token columns: {', '.join(SIGNAL_COLUMNS)}")
    vals = t[signal].to_numpy(dtype=float)
    finite = np.abs(vals[np.isfinite(vals)])
    scale = float(np.quantile(finite, 0.95)) if finite.size else 1.0
    head = (f"rollout {rollout_id} (problem {row['problem_id']}, sample {row['sample_idx']}), config {config}, "
            f"coloured by {signal} (scale ±{scale:.3g}); correct={row['correct']} finished={row['finished']}")
    if color:
        # a token's own escape sequences are escaped: only ours colour the terminal
        body = "".join(_bg(v, scale) + printable(tok, keep_newlines=True).replace("\n", "⏎" + _RESET + "\n") + _RESET
                       for tok, v in zip(t["token"], vals))
    else:
        # escaped (\n, \t), a newline after each newline token: one [token|value] never spans two lines
        body = "".join(f"[{_escaped(tok)}|{v:+.2f}]" + ("\n" if "\n" in tok else "")
                       for tok, v in zip(t["token"], vals))
    cols = ["pos", "token", "lp_s", "lp_t", "r_opd", "a_opd", "a_d2", "kl_rev", "h_s", "h_t"]
    table = t[cols].assign(token=t["token"].map(_escaped)).to_string(index=False, float_format=lambda v: f"{v:+.3f}")
    return f"{printable(head)}\n\n{body}\n\n{printable(table, keep_newlines=True)}"


def decision_line(p: prediction.Predictions) -> str:
    """The report's last line: v2's recommendation again, below the secondary evidence a terminal shows last."""
    text = prediction.panel(p)
    flagged = " A failure check bears on it: see the caution there." if "caution" in text else ""
    return (f"\nin short: {text['headline']}. Why, and how sure: 'decision (predictor v2)' above; the v1 rule's pick "
            f"is secondary evidence.{flagged}")


def prediction_text(p: prediction.Predictions) -> str:
    """The decision panel's text and the ranked (config, method) table, as ``opsd-diag report`` prints them."""
    text = prediction.panel(p)
    lines = ["\ndecision (predictor v2):", text["headline"] + "."]
    lines += [text[k] for k in prediction.PANEL_TEXT if k in text]
    if "looks" in text:  # the history last, under the heading the app and the HTML report fold it under
        lines += ["\nhow the rule in force was chosen:", text["looks"]]
    frame = p.frame().drop(columns=["calibration", "why", "imputed", "outside_range"])  # the panel lines say them
    with pd.option_context("display.width", 200, "display.max_columns", 50):
        table = frame.to_string(index=False, float_format=lambda v: f"{v:+.4f}")
    lines += ["\npredicted effect per (config, method), ranked (columns: docs/verdict.md):", table]
    lines += ["why, for the first three:", *(f"  {r.rank}. {r.config} / {r.method}: {r.why()}" for r in p.rows[:3])]
    return "\n".join(lines)
