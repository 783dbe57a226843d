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


def test_the_teachers_top_k_are_its_own_pieces_as_text():
    frame = span_rows().assign(teacher_topk=[["Step", "So"], [" ", " 1"], ["<", "\u4e2d"]],
                               teacher_topk_lp=[[-0.1, -2.5], [-0.7, -0.9], [-1.0, -3.0]])
    out = render_heatmap(frame, "r_opd", config="xt")
    assert out.count("teacher top-2") == 3
    q = "&quot;"  # text as JSON, escaped as the student's alternatives are
    assert f"<span><u>{q}Step{q}</u> -0.10</span> <span>{q}So{q} -2.50</span>" in out  # its own first piece underlined
    assert f"{q}\u4e2d{q} -3.00" in out and f"<u>{q}&lt;{q}</u> -1.00" in out
    assert "teacher top" not in render_heatmap(span_rows(), "r_opd", config="xt")  # a run without the columns


def test_a_same_vocabulary_config_has_no_span_rows():
    frame = span_rows().drop(columns=["span_len", "teacher_tokens", "uld"])
    assert "student tokens" not in render_heatmap(frame, "r_opd", config="t")
