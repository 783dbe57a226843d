"""Every Plotly figure the app shows names, in each point's hover, the config and the signal of its value
(issue 23 item 5: "tooltips naming config and signal", one name per signal: the schema's). Fast: the
figures are built from the stored golden run (a real diagnosis with a predictor) and small frames.

A hover is checked as Plotly would fill it: each ``%{field}`` of the template is replaced by the point's
value (``x``, ``y``, ``customdata[k]``, ...), so a name that only sits on an axis or in a legend fails.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from app import training_figures as training
from opsd_diag.report import tables
from opsd_diag.run import Run
from opsd_diag.schema import SIGNAL_COLUMNS

GOLDEN = Path(__file__).resolve().parent / "golden"
FIELD = re.compile(r"%\{([^}:|]+)(?:[:|][^}]*)?\}")
NOT_PER_CONFIG = {"token share": "every config", "tokens per bucket": "every config"}  # bins and counts of all
QUANTITIES = (*SIGNAL_COLUMNS, "A_T", "accuracy", "loss")  # what a value can be of (and pass@k)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    d = tmp_path_factory.mktemp("hover") / "golden"
    shutil.copytree(GOLDEN, d)
    (d / "manifest.json").write_text(json.dumps({"status": "finished", "config": {"student": {"model": "none"}}}))
    topk = pd.DataFrame(columns=["rollout_id", "pos", "role", "config", "rank", "token_id", "logprob"])
    topk.astype({"rollout_id": int, "pos": int, "rank": int, "token_id": int, "logprob": float}).to_parquet(
        d / "topk.parquet")
    return Run.load(d)


def _value(trace, field: str, i):
    """The value Plotly puts for ``field`` at point ``i`` (a (row, col) pair for a heatmap)."""
    def at(seq):
        seq = np.asarray(seq, dtype=object)
        return seq[i] if not isinstance(i, tuple) else seq[i[0]][i[1]]
    if field in ("x", "y", "text", "hovertext"):
        return at(getattr(trace, field))
    if field == "customdata":
        return at(trace.customdata)
    m = re.fullmatch(r"customdata\[(\d+)\]", field)
    if m:
        return at(trace.customdata)[int(m.group(1))]
    if field == "fullData.name":
        return trace.name
    raise AssertionError(f"the test does not know the hover field {field!r} of {trace.name!r}")


def hovers(trace) -> list[tuple[object, str]]:
    """(point, filled hover text) of every point of ``trace``."""
    assert trace.hovertemplate, f"trace {trace.name!r} ({type(trace).__name__}) has no hovertemplate"
    if isinstance(trace, go.Heatmap):
        cd = np.asarray(trace.customdata, dtype=object)
        points = [(r, c) for r in range(cd.shape[0]) for c in range(cd.shape[1]) if cd[r][c]]
    else:
        points = list(range(len(trace.x if trace.x is not None else trace.y)))
    assert points, trace.name
    return [(i, FIELD.sub(lambda m: str(_value(trace, m.group(1), i)), trace.hovertemplate)) for i in points]


def check(fig: go.Figure, configs: list[str], signal: str | None = None, x_is: str | None = None) -> int:
    """Every hover names one of ``configs`` (or says it is of every config / the student alone) and a quantity;
    ``signal`` when given; the point's own config when ``x_is`` == "config" or the trace is named by one."""
    n = 0
    for trace in fig.data:
        if trace.hoverinfo == "skip":
            continue
        for i, text in hovers(trace):
            n += 1
            named = re.search(r"config ([^\s<]+)", text)
            if trace.name in NOT_PER_CONFIG:
                assert NOT_PER_CONFIG[trace.name] in text, text
            elif text.startswith("student"):
                pass  # the student alone (its accuracy, pass@k): no config
            else:
                assert named and named.group(1) in configs, (trace.name, text)
                if x_is == "config":
                    assert f"config {_value(trace, 'x', i)}" in text, text
                if trace.name in configs:
                    assert f"config {trace.name}" in text, text
            counts = trace.name == "tokens per bucket"  # how many tokens each mean is over: a count, of no signal
            assert counts or re.search(r"pass@\d+:", text) or any(
                re.search(rf"(?<![\w@]){re.escape(q)}(?!\w)", text) for q in QUANTITIES), text
            if signal and trace.name not in NOT_PER_CONFIG and not text.startswith("student"):
                assert re.search(rf"(?<!\w){signal}(?!\w)", text), (signal, text)
    return n


def test_every_signals_page_figure_names_config_and_signal(run):
    figs = run.figures("a_d2", "teacher")  # not the default signal: a hard-coded r_opd would fail
    assert check(figs["headline"], run.configs, x_is="config")
    for trace in figs["headline"].data:  # each panel's own signal
        assert all(f"· {t.split('<br>')[0].split(' · ')[-1]}" in t for _, t in hovers(trace))
    assert {t.split("<br>")[0].split(" · ")[-1] for tr in figs["headline"].data for _, t in hovers(tr)} >= {
        "r_opd", "kl_rev", "jsd"}
    entropy = figs["entropy"]
    check(go.Figure([t for t in entropy.data if t.type == "scatter"]), run.configs, "a_d2")
    check(go.Figure([t for t in entropy.data if "high-entropy" in (t.name or "")]), run.configs, x_is="config")
    assert all(re.search(r"h_[st] ", t) for tr in entropy.data if "high-entropy" in tr.name for _, t in hovers(tr))
    check(go.Figure([t for t in entropy.data if t.name == "token share"]), run.configs, "h_s")
    assert check(figs["alignment"], run.configs, "a_opd") and all(
        "config teacher" in t for tr in figs["alignment"].data if tr.hoverinfo != "skip" for _, t in hovers(tr))
    assert check(figs["correctness"], run.configs, "a_d2", x_is="config")
    assert check(figs["position"], run.configs)
    check(go.Figure([t for t in figs["position"].data if t.name in run.configs]), run.configs, "a_d2")
    assert check(figs["accuracy"], run.configs)
    assert sum(t.startswith("config ") for tr in figs["accuracy"].data for _, t in hovers(tr)) == len(run.configs)


def test_evidence_figures_name_config_and_the_schemas_signal(run):
    figs = run.evidence_figures("rev_kl", "kl_rev")  # the predictor's objective name: shown as kl_rev
    assert check(figs["advantage"], run.configs, "A_T", x_is="config")
    assert check(figs["direction"], run.configs)
    for trace in figs["direction"].data:  # x: the signals, one trace per config
        assert all(f"config {trace.name} · {_value(trace, 'x', i)}" in t for i, t in hovers(trace))
    assert check(figs["split"], run.configs, "kl_rev", x_is="config")
    assert check(figs["scatter"], run.configs, "kl_rev")
    for fig in figs.values():
        assert "rev_kl" not in json.dumps([t.hovertemplate for t in fig.data]) + str(fig.layout.title.text)


def test_token_figures_name_config_and_signal(run):
    rid = int(run.rollouts["rollout_id"].iloc[0])
    fig = run.heatmap_figure(rid, run.configs[:2], "jsd")
    assert check(fig, run.configs, "jsd") > 0
    for trace, config in zip(fig.data, run.configs[:2]):  # one panel per config, each names its own
        assert all(t.startswith(f"config {config} · jsd<br>pos ") for _, t in hovers(trace))
    types = run.token_types("a_opd", "self_full_solution", min_count=1)
    assert check(tables.token_types_figure(types, "a_opd", "self_full_solution"), ["self_full_solution"], "a_opd")


def test_track_record_compare_and_training_name_config_and_signal():
    board = pd.DataFrame({"run": ["r1", "r2", "r3"], "config": ["teacher", "self_hint", "teacher"],
                          "signal": ["rev_kl", "jsd", "a_d2"], "verdict": ["helps", "hurts", "unclear"],
                          "score": [0.1, -0.2, 0.0], "gain": [0.05, 0.01, np.nan], "gain_lo": [0.0, -0.1, np.nan],
                          "gain_hi": [0.1, 0.1, np.nan], "outcome": ["gain", "no clear change", ""]})
    fig = tables.track_record_figure(board)
    texts = [t for tr in fig.data for _, t in hovers(tr)]
    assert len(texts) == 2  # the run without a realised gain is not drawn
    assert any(t.startswith("config teacher · kl_rev · helps") for t in texts), texts
    assert any(t.startswith("config self_hint · jsd · hurts") for t in texts), texts
    records = {"a": training.records_frame([{"kind": "train", "step": s, "loss": 1 / s} for s in (1, 2)]),
               "b": training.records_frame([{"kind": "train", "step": s, "loss": 2 / s} for s in (1, 2)])}
    curves = tables.compare_curves(records, "loss", "train", {"a": {"config": "teacher", "signal": "rev_kl"}, "b": None})
    assert [hovers(t)[0][1].split("<br>")[0] for t in curves.data] == [
        "run a · config teacher · kl_rev", "run b · not started from a diagnosis"]
    evals = training.records_frame([{"kind": "eval", "step": s, "pass@1": 0.2 + s / 10} for s in (0, 1)])
    note = training.eval_figure(evals, {"verdict": "helps", "score": 0.1, "config": "teacher",
                                        "signal": "rev_kl"}).layout.annotations[-1].text
    assert "for config teacher · kl_rev" in note
