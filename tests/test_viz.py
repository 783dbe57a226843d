"""Figures, token heatmap and exports of opsd_diag.viz on small synthetic runs (no models: fast)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from opsd_diag.core import aggregate as analysis
from opsd_diag.report import figures as viz
from opsd_diag.errors import OpsdError

EVIL = "<script>alert(1)</script>"
BASE_COLUMNS = ("lp_b", "r_delta", "a_delta", "gate", "a_d2", "h_b")


def fake_run(with_base: bool = True, configs=("teacher", "self_ctx"), n_prompts=4, n_samples=2, length=10) -> dict:
    """A run dict shaped like store.load_run's, with hostile token text in rollout 0."""
    rng = np.random.default_rng(0)
    rollouts, tokens, topk = [], [], []
    words = [EVIL, "\n", "a&b", ' "q"', "x"]
    for p in range(n_prompts):
        for j in range(n_samples):
            rid = p * n_samples + j
            ids = rng.integers(0, 50, size=length).tolist()
            correct = None if rid == 1 else bool(rid % 3 == 0)
            rollouts.append({"rollout_id": rid, "problem_id": f"p{p}", "sample_idx": j, "completion_ids": ids,
                             "length": length, "finished": True, "text": "".join(words), "answer_pred": "1",
                             "correct": correct, "difficulty": 1})
            for c in configs:
                for pos, tid in enumerate(ids):
                    vals = {col: float(rng.normal()) for col in analysis.TOKEN_COLUMNS}
                    vals.update(h_s=float(rng.uniform(0, 3)), h_t=float(rng.uniform(0, 3)),
                                kl_rev=float(rng.uniform(0, 1)), gate=float(vals["a_opd"] * vals["a_delta"] > 0))
                    if not with_base:
                        vals.update({col: np.nan for col in BASE_COLUMNS})
                    tokens.append({"rollout_id": rid, "config": c, "pos": pos, "token_id": tid,
                                   "token": words[pos % len(words)], **vals})
            for pos, tid in enumerate(ids):
                for role, c in [("student", "")] + [("teacher", c) for c in configs]:
                    topk += [{"rollout_id": rid, "pos": pos, "role": role, "config": c, "rank": r,
                              "token_id": tid if r == 0 else r, "logprob": -float(r)} for r in range(3)]
    rollouts, tokens = pd.DataFrame(rollouts), pd.DataFrame(tokens)
    teacher = pd.DataFrame([{"config": c, "problem_id": f"p{p}", "sample_idx": 0, "correct": bool((p + k) % 2)}
                            for k, c in enumerate(configs) for p in range(n_prompts)])
    summary = analysis.summarize(tokens, rollouts, teacher, ks=(1, 2), n_boot=20)
    manifest = {"status": "finished", "config": {"student": {"model": "none"}}, "n_problems": n_prompts}
    return {"manifest": manifest, "summary": summary, "rollouts": rollouts, "tokens": tokens,
            "topk": pd.DataFrame(topk), "teacher_rollouts": teacher}


@pytest.fixture(scope="module")
def runs() -> dict[bool, dict]:
    return {True: fake_run(True), False: fake_run(False)}


@pytest.mark.parametrize("with_base", [True, False])
def test_every_figure_builds(runs, with_base):
    figs = viz.run_figures(runs[with_base], signal="a_d2" if with_base else "r_opd")
    assert list(figs) == list(viz.FIGURE_HELP)
    for name, fig in figs.items():
        assert isinstance(fig, go.Figure), name
        assert fig.layout.title.text or fig.layout.annotations, f"{name} has no title"
        fig.to_json()  # serialisable: what st.plotly_chart and HTML export need
    notes = " ".join(a.text for a in figs["alignment"].layout.annotations)
    if with_base:
        counts = [int(re.search(r": (\d+) \(", a.text).group(1)) for a in figs["alignment"].layout.annotations]
        st = analysis.alignment_stats(runs[True]["tokens"].query("config == 'teacher'"))
        assert sum(counts) == st["q_pp"] + st["q_pn"] + st["q_np"] + st["q_nn"]
    else:
        assert "base model" in notes


def test_verdict_table_when_present(runs):
    v = {"verdict": "helps", "reason": "A > 0.", "score": 0.4}
    summary = {**runs[True]["summary"],
               "verdicts": {"teacher": {"r_opd": v}, "self_ctx": {"r_opd": {**v, "verdict": "hurts", "score": -1}}},
               "ranking": [{"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.4},
                           {"config": "self_ctx", "signal": "r_opd", "verdict": "hurts", "score": -1.0}],
               "ideal": {"status": "ok", "estimator": "our estimator", "budget": 64, "continuations_used": 60,
                         "n_nodes": 5, "n_prompts": 3, "k": 3, "m": 4}}
    frame = viz.verdict_frame(summary)
    assert list(frame["rank"]) == [1, 2] and list(frame["verdict"]) == ["helps", "hurts"]
    assert frame.loc[0, "reason"] == "A > 0."
    assert "our estimator" in viz.ideal_note(summary) and "budget 64" in viz.ideal_note(summary)
    assert "helps" in viz.report_html({**runs[True], "summary": summary}, n_heatmaps=0)
    assert viz.verdict_frame(runs[True]["summary"]) is None and viz.ideal_note(runs[True]["summary"]) is None


def test_alignment_scatter_samples_at_most_n(runs):
    fig = viz.alignment_figure(runs[True]["tokens"], "teacher", max_points=25)
    assert len(fig.data[0].x) == 25
    assert "of 80 tokens" in fig.layout.title.text


def test_figure_help_is_one_sentence_each():
    for name, text in viz.FIGURE_HELP.items():
        assert text.endswith(".") and text.count(". ") == 0, name


def test_heatmap_escapes_untrusted_text(runs):
    class EvilTokenizer:
        def decode(self, ids):
            return f"<img src=x onerror=alert({ids[0]})>"

    html = viz.rollout_heatmap(runs[True], 0, "teacher", "r_opd", tokenizer=EvilTokenizer())
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(" in html  # top-k alternatives decoded, then escaped
    assert "a&amp;b" in html and "&quot;q&quot;" in html
    assert "⏎\n" in html  # newlines kept as line breaks (with a visible mark)
    assert html.count("class='t'") == 10


def test_heatmap_without_tokenizer_shows_ids_and_marks_nan(runs):
    html = viz.rollout_heatmap(runs[False], 2, "self_ctx", "a_d2")
    assert "#1 " in html and "student top-3" in html and "teacher top-3" in html
    assert html.count("rgb(215,215,215)") == 10  # no base: every a_d2 is n/a, drawn grey
    with pytest.raises(OpsdError, match="unknown signal"):
        viz.rollout_heatmap(runs[True], 0, "teacher", "nope")


def test_colour_scale_is_symmetric_and_robust():
    assert viz.signal_color(0.0, 2.0) == "rgb(255,255,255)"
    for v in (0.1, 0.7, 1.5, 2.0, 9.0):
        pos = re.findall(r"\d+", viz.signal_color(v, 2.0))
        neg = re.findall(r"\d+", viz.signal_color(-v, 2.0))
        assert pos == neg[::-1], v  # mirrored channels: same intensity, opposite hue
    assert viz.signal_color(9.0, 2.0) == viz.signal_color(2.0, 2.0)  # saturates at the scale
    values = np.r_[np.linspace(-1, 1, 99), 1000.0, np.nan]
    assert viz.heatmap_scale(values) < 2  # one outlier does not wash out the colours
    assert viz.heatmap_scale([np.nan]) == 1.0 and viz.heatmap_scale([0.0, 0.0]) == 1.0


@pytest.mark.parametrize("fmt", viz.TABLE_FORMATS)
def test_table_export_round_trips(runs, fmt):
    tables = viz.run_tables(runs[True])
    for name in ("summary", "tokens", "entropy_bins"):
        back = viz.read_table_bytes(viz.table_bytes(tables[name], fmt), fmt)
        pd.testing.assert_frame_equal(back, tables[name].reset_index(drop=True), check_dtype=False,
                                      check_exact=False, rtol=1e-6)
    ids = viz.read_table_bytes(viz.table_bytes(tables["rollouts"], fmt), fmt)["completion_ids"]
    first = ids.iloc[0] if fmt != "csv" else json.loads(ids.iloc[0])
    assert list(first) == list(tables["rollouts"]["completion_ids"].iloc[0])


def test_png_export_works_or_names_the_extra(runs, monkeypatch):
    fig = viz.headline_figure(runs[True]["summary"])
    assert "<div" in viz.figure_html(fig)
    try:
        png = viz.figure_image(fig, "png")
    except OpsdError as e:
        assert "opsd-diag[export]" in str(e) or "Chrom" in str(e)
    else:
        assert png.startswith(b"\x89PNG")
    monkeypatch.setattr(viz.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(OpsdError, match=r"pip install 'opsd-diag\[export\]'"):
        viz.figure_image(fig, "svg")
    assert not viz.image_export_available()


def test_report_is_self_contained(runs, tmp_path):
    html = viz.report_html(runs[True], "a_opd", n_heatmaps=2, title="r <b>1</b>")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc=", html)  # nothing fetched: plotly.js is inlined
    assert html.count("plotly.js v") >= 1  # the library itself is inlined
    assert EVIL not in html and "r &lt;b&gt;1&lt;/b&gt;" in html
    assert html.count("class='opsd-hm'") == 2
    for text in viz.FIGURE_HELP.values():
        assert text.replace("'", "&#x27;") in html
    assert viz.save_table(viz.run_tables(runs[True])["ci"], tmp_path / "ci.csv").stat().st_size > 0
    assert viz.save_figure(viz.accuracy_figure(runs[True]["summary"]), tmp_path / "acc.html").stat().st_size > 0
