"""Span rows of a teacher with another tokenizer in the heatmap: grouped text, the teacher's pieces in the tooltip."""

from __future__ import annotations

import math

import pandas as pd

from opsd_diag.report.heatmap import render_heatmap
from opsd_diag.schema import SIGNAL_COLUMNS


def span_rows() -> pd.DataFrame:
    rows = []
    for pos, text, n, pieces in ((0, "Step", 3, ["Step"]), (3, " 12", 1, [" ", "1", "2"]), (4, "<b>", 2, ["<", "b>"])):
        row = {c: math.nan for c in SIGNAL_COLUMNS}
        row.update(rollout_id=0, config="xt", pos=pos, token_id=7, token=text, r_opd=-0.5 * n, lp_s=-1.0,
                   span_len=n, teacher_tokens=pieces, uld=0.25)
        rows.append(row)
    return pd.DataFrame(rows)


def test_heatmap_shows_spans_and_the_teachers_tokens():
    out = render_heatmap(span_rows(), "r_opd", config="xt")
    assert out.count("data-pos=") == 3  # one coloured span per common span, not per student token
    assert "3 student tokens" in out and "1 student tokens" in out
    assert "<span>1</span> <span>2</span>" in out  # the teacher's pieces, one by one
    assert "&lt;b&gt;" in out and "<b>" not in out  # escaped
    assert "<td>uld</td><td>0.250</td>" in out
    assert "<td>kl_rev</td><td>n/a</td>" in out  # not available across vocabularies


def test_a_same_vocabulary_config_has_no_span_rows():
    frame = span_rows().drop(columns=["span_len", "teacher_tokens", "uld"])
    assert "student tokens" not in render_heatmap(frame, "r_opd", config="t")
