"""The Run object and the report (figures, token heatmap, exports) on small synthetic run directories (fast)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from opsd_diag.core import aggregate as analysis
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.report import export, figures, heatmap
from opsd_diag.run import Run
from opsd_diag.schema import BASE_COLUMNS, SIGNAL_COLUMNS

EVIL = "<script>alert(1)</script>"


def fake_run(root, with_base: bool = True, configs=("teacher", "self_ctx"), n_prompts=4, n_samples=2,
             length=10, summary_extra: dict | None = None) -> Run:
    """A finished run directory written like the engine writes one, with hostile token text in rollout 0."""
    rng = np.random.default_rng(0)
    rollouts, tokens, topk = [], [], []
    words = [EVIL, "\n", "a&b", ' "q"', "x"]
    for p in range(n_prompts):
        for j in range(n_samples):
            rid = p * n_samples + j
            ids = rng.integers(0, 50, size=length).tolist()
            correct = None if rid == 1 else bool(rid % 3 == 0)
            rollouts.append({"rollout_id": rid, "problem_id": f"p{p}", "problem_index": p, "sample_idx": j,
                             "completion_ids": ids,
                             "length": length, "finished": True, "text": "".join(words), "answer_pred": "1",
                             "correct": correct, "difficulty": 1})
            for c in configs:
                for pos, tid in enumerate(ids):
                    vals = {col: float(rng.normal()) for col in SIGNAL_COLUMNS}
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
    summary = {**analysis.summarize(tokens, rollouts, teacher, ks=(1, 2), n_boot=20), **(summary_extra or {})}
    manifest = {"status": "finished", "config": {"student": {"model": "none"}}, "n_problems": n_prompts}
    root.mkdir(parents=True)
    store.atomic_write_json(root / "manifest.json", manifest)
    store.atomic_write_json(root / "summary.json", summary)
    for name, frame in (("rollouts", rollouts), ("tokens", tokens), ("topk", pd.DataFrame(topk)),
                        ("teacher_rollouts", teacher)):
        store.atomic_write_parquet(root / f"{name}.parquet", frame)
    return Run.load(root)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[bool, Run]:
    root = tmp_path_factory.mktemp("runs")
    return {True: fake_run(root / "base"), False: fake_run(root / "nobase", with_base=False)}


@pytest.mark.parametrize("with_base", [True, False])
def test_every_figure_builds(runs, with_base):
    figs = runs[with_base].figures(signal="a_d2" if with_base else "r_opd")
    assert list(figs) == list(figures.FIGURE_HELP)
    for name, fig in figs.items():
        assert isinstance(fig, go.Figure), name
        assert fig.layout.title.text or fig.layout.annotations, f"{name} has no title"
        fig.to_json()  # serialisable: what st.plotly_chart and HTML export need
    notes = " ".join(a.text for a in figs["alignment"].layout.annotations)
    if with_base:
        counts = [int(re.search(r": (\d+) \(", a.text).group(1)) for a in figs["alignment"].layout.annotations]
        st = analysis.alignment_stats(runs[True].tokens.query("config == 'teacher'"))
        assert sum(counts) == st["q_pp"] + st["q_pn"] + st["q_np"] + st["q_nn"]
    else:
        assert "base model" in notes


def test_verdict_table_when_present(runs, tmp_path):
    v = {"verdict": "helps", "reason": "A > 0.", "score": 0.4}
    extra = {"verdicts": {"teacher": {"r_opd": v}, "self_ctx": {"r_opd": {**v, "verdict": "hurts", "score": -1}}},
             "ranking": [{"config": "teacher", "signal": "r_opd", "verdict": "helps", "score": 0.4},
                         {"config": "self_ctx", "signal": "r_opd", "verdict": "hurts", "score": -1.0}],
             "ideal": {"status": "ok", "estimator": "our estimator", "budget": 64, "continuations_used": 60,
                       "n_nodes": 5, "n_prompts": 3, "k": 3, "m": 4}}
    run = fake_run(tmp_path / "run", summary_extra=extra)
    frame = run.verdicts()
    assert list(frame["rank"]) == [1, 2] and list(frame["verdict"]) == ["helps", "hurts"]
    assert frame.loc[0, "reason"] == "A > 0."
    assert "our estimator" in run.summary.ideal.note() and "budget 64" in run.summary.ideal.note()
    assert "helps" in run.report_html(n_heatmaps=0)
    assert runs[True].verdicts() is None and runs[True].summary.ideal is None


def test_run_load_refuses_unfinished_missing_and_corrupt_runs(runs, tmp_path):
    import shutil

    for case in ("unfinished", "no_summary", "corrupt_summary", "corrupt_manifest", "wrong_schema"):
        d = tmp_path / case
        shutil.copytree(runs[True].path, d)
        if case == "unfinished":
            store.atomic_write_json(d / "manifest.json", {**runs[True].manifest, "status": "running"})
        elif case == "no_summary":
            (d / "summary.json").unlink()
        elif case == "corrupt_summary":
            (d / "summary.json").write_text("{not json")
        elif case == "corrupt_manifest":
            (d / "manifest.json").write_bytes(b"\xff\xfe")
        else:
            store.atomic_write_json(d / "summary.json", {"configs": 3})
        with pytest.raises(OpsdError) as e:
            Run.load(d)
        assert str(d) in str(e.value) and "\n" not in str(e.value), case


def test_alignment_scatter_samples_at_most_n(runs):
    fig = figures.alignment_figure(runs[True].tokens, "teacher", max_points=25)
    assert len(fig.data[0].x) == 25
    assert "of 80 tokens" in fig.layout.title.text


def test_figure_help_is_one_sentence_each():
    for name, text in figures.FIGURE_HELP.items():
        assert text.endswith(".") and text.count(". ") == 0, name


def test_heatmap_escapes_untrusted_text(runs):
    class EvilTokenizer:
        def decode(self, ids):
            return f"<img src=x onerror=alert({ids[0]})>"

    html = runs[True].heatmap(0, ["teacher"], "r_opd", tokenizer=EvilTokenizer())
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(" in html  # top-k alternatives decoded, then escaped
    assert "a&amp;b" in html and "&quot;q&quot;" in html
    assert "⏎\n" in html  # newlines kept as line breaks (with a visible mark)
    assert html.count("class='t'") == 10


def test_heatmap_without_tokenizer_shows_ids_and_marks_nan(runs):
    html = runs[False].heatmap(2, ["self_ctx"], "a_d2")
    assert "#1 " in html and "student top-3" in html and "teacher top-3" in html
    assert html.count("rgb(215,215,215)") == 10  # no base: every a_d2 is n/a, drawn grey
    with pytest.raises(OpsdError, match="unknown signal"):
        runs[True].heatmap(0, ["teacher"], "nope")


def test_colour_scale_is_symmetric_and_robust():
    assert heatmap.signal_color(0.0, 2.0) == "rgb(255,255,255)"
    for v in (0.1, 0.7, 1.5, 2.0, 9.0):
        pos = re.findall(r"\d+", heatmap.signal_color(v, 2.0))
        neg = re.findall(r"\d+", heatmap.signal_color(-v, 2.0))
        assert pos == neg[::-1], v  # mirrored channels: same intensity, opposite hue
    assert heatmap.signal_color(9.0, 2.0) == heatmap.signal_color(2.0, 2.0)  # saturates at the scale
    values = np.r_[np.linspace(-1, 1, 99), 1000.0, np.nan]
    assert heatmap.heatmap_scale(values) < 2  # one outlier does not wash out the colours
    assert heatmap.heatmap_scale([np.nan]) == 1.0 and heatmap.heatmap_scale([0.0, 0.0]) == 1.0


def read_table_bytes(data: bytes, fmt: str) -> pd.DataFrame:
    import io

    if fmt == "csv":
        return pd.read_csv(io.BytesIO(data))
    if fmt == "parquet":
        return pd.read_parquet(io.BytesIO(data))
    return pd.read_json(io.StringIO(data.decode()), orient="records")


@pytest.mark.parametrize("fmt", export.TABLE_FORMATS)
def test_table_export_round_trips(runs, fmt):
    tables = runs[True].tables()
    for name in ("summary", "tokens", "entropy_bins"):
        back = read_table_bytes(export.table_bytes(tables[name], fmt), fmt)
        pd.testing.assert_frame_equal(back, tables[name].reset_index(drop=True), check_dtype=False,
                                      check_exact=False, rtol=1e-6)
    ids = read_table_bytes(export.table_bytes(tables["rollouts"], fmt), fmt)["completion_ids"]
    first = ids.iloc[0] if fmt != "csv" else json.loads(ids.iloc[0])
    assert list(first) == list(tables["rollouts"]["completion_ids"].iloc[0])


def test_png_export_works_or_names_the_extra(runs, monkeypatch):
    fig = figures.headline_figure(runs[True].summary)
    assert "<div" in export.figure_html(fig)
    try:
        png = export.figure_image(fig, "png")
    except OpsdError as e:
        assert "opsd-diag[export]" in str(e) or "Chrom" in str(e)
    else:
        assert png.startswith(b"\x89PNG")
    monkeypatch.setattr(export.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(OpsdError, match=r"pip install 'opsd-diag\[export\]'"):
        export.figure_image(fig, "svg")
    assert not export.image_export_available()


def test_report_is_self_contained(runs, tmp_path):
    html = runs[True].report_html("a_opd", n_heatmaps=2, title="r <b>1</b>")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]*\bsrc=", html)  # nothing fetched: plotly.js is inlined
    assert html.count("plotly.js v") >= 1  # the library itself is inlined
    assert EVIL not in html and "r &lt;b&gt;1&lt;/b&gt;" in html
    assert html.count("class='opsd-hm'") == 2
    for text in figures.FIGURE_HELP.values():
        assert text.replace("'", "&#x27;") in html


def test_export_writes_every_table_figure_and_the_report(runs, tmp_path):
    files = runs[True].export(tmp_path / "out", table_format="parquet")
    names = {f.name for f in files}
    assert {"tokens.parquet", "summary.parquet", "ci.parquet", "headline.html", "report.html"} <= names
    assert all(f.stat().st_size > 0 for f in files)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "tokens.parquet"), runs[True].tokens)
    with pytest.raises(OpsdError, match="unknown table format"):
        runs[True].export(tmp_path / "x", table_format="xlsx")
