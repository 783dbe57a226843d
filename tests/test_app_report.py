"""The workbench's library side, fast (no models): heatmap scales and tooltip, figures, exports, the CLI's
show/export/help, progress phases, plain messages (issue 13's bugs, each with the test that shows it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_report import fake_run

from app import jobs as app_jobs
from app.common import plain
from app import training_figures as training
from app import workbench
from opsd_diag import cli
from opsd_diag.core.verdict import verdict
from opsd_diag.errors import OpsdError
from opsd_diag.report import figures, heatmap, tables, terminal
from opsd_diag.schema import SIGNALS


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return fake_run(tmp_path_factory.mktemp("wb") / "run", n_prompts=6, length=12)


# ------------------------------------------------------------------ bug 5: scales by Column.signed
def test_every_signal_gets_the_scale_its_sign_calls_for(run):
    for col in SIGNALS:
        html = run.heatmap(0, ["teacher"], col.name)
        legend = re.search(r"<div class='head legend'>(.*?)</div>", html).group(1)
        assert ("diverging" in legend) == col.signed, col.name
        if not col.signed and not col.name.startswith("lp_"):
            assert "−" not in legend.split("<span")[0], (col.name, legend)  # rank_t reads 0 … 17, never −17
    assert "linear-gradient" in legend and "<span style='background:rgb(255,255,255)'>" not in legend  # no gap swatch


def test_sequential_colour_is_one_hue_on_magnitude():
    assert heatmap.signal_color(0.0, 2.0, False) == "rgb(255,255,255)"
    assert heatmap.signal_color(-1.5, 2.0, False) == heatmap.signal_color(1.5, 2.0, False)  # |log-prob|
    dark = [int(x) for x in re.findall(r"\d+", heatmap.signal_color(5.0, 2.0, False))]
    assert dark == list(heatmap._SEQ)


def test_scale_per_rollout_or_per_run(run):
    one = run.signal_scale("kl_rev", ["teacher"], rollout=0)
    whole = run.signal_scale("kl_rev", ["teacher"])
    assert one != whole
    assert f"+{whole:.3g}" in run.heatmap(0, ["teacher"], "a_opd", scale="run") or "the whole run" in \
        run.heatmap(0, ["teacher"], "kl_rev", scale="run")
    with pytest.raises(OpsdError, match="colour scale"):
        run.heatmap(0, ["teacher"], "r_opd", scale="global")


# ------------------------------------------------------------------ bug 4: a readable tooltip
def test_tooltip_is_a_two_column_table_in_a_gutter_that_hides_no_token(run):
    html = run.heatmap(0, ["teacher"], "r_opd")
    tip = re.search(r"<span class='tip'><table>(.*?)</table>", html).group(1)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", tip)
    assert all(r.count("<td") == 2 for r in rows if "<th" not in r), rows  # label | value
    assert "class=sel" in tip  # the chosen signal stands out
    css = heatmap.CSS
    assert "pointer-events:none" in css  # the tooltip never catches the mouse
    assert re.search(r"\.tip\{display:none;position:absolute;right:0", css)  # right gutter, level with the token
    assert "right:anchor(--opsd-body right)" in css  # kept in the gutter where it is placed against the viewport
    assert "padding-right:25em" in css and "width:24em" in css  # the gutter is wider than the tooltip
    assert "-0.000" not in html  # tiny values keep their digits


def test_whitespace_and_newlines_are_visible(run):
    html = run.heatmap(0, ["teacher"], "r_opd")
    assert "⏎\n" in html and "<i class='w'>·</i>" in html  # ' "q"' starts with a space


# ------------------------------------------------------------------ item 4: stacked, filters, disagreement, types
def test_stacked_configs_share_one_scale_and_mark_disagreement(run):
    html = run.heatmap(1, ["teacher", "self_ctx"], "r_opd", hot={2, 3}, entropy_bin="[0.5, 1)")
    assert html.count("class='opsd-hm'") == 2 and "config self_ctx" in html
    assert html.count(" hot'") == 4 and " dim" in html
    d = run.disagreement("r_opd", ["teacher", "self_ctx"], n=5)
    assert len(d) == 5 and (d["spread"].diff().dropna() <= 0).all()
    assert np.allclose(d["spread"], (d["teacher"] - d["self_ctx"]).abs())
    assert run.top_config() == run.configs[0]  # no verdicts: the first config


def test_token_types_rank_strings_by_mean(run):
    types = run.token_types("r_opd", "teacher", min_count=3)
    assert list(types.columns) == ["token", "count", "mean", "total"] and (types["count"] >= 3).all()
    assert types["mean"].is_monotonic_decreasing
    assert np.allclose(types["total"], types["mean"] * types["count"])
    assert tables.token_types_figure(types, "r_opd", "teacher").data[0].orientation == "h"


# ------------------------------------------------------------------ item 8: heatmap export
def test_heatmap_html_export_is_self_contained(run):
    doc = run.export_heatmap(0, ["teacher", "self_ctx"], "a_d2", "html").decode()
    assert doc.startswith("<!DOCTYPE html>") and "default-src 'none'" in doc
    assert not re.search(r"<script|<link|src=|href=|url\(|@import", doc, re.I)
    assert doc.count("class='opsd-hm'") == 2
    fig = run.heatmap_figure(0, ["teacher", "self_ctx"], "rank_t")
    assert len(fig.data) == 2 and fig.data[0].zmin == 0  # a sequential scale starts at 0
    with pytest.raises(OpsdError, match="unknown heatmap format"):
        run.export_heatmap(0, ["teacher"], "r_opd", "pdf")


def test_cli_export_writes_the_heatmap(run, tmp_path, capsys):
    out = tmp_path / "hm.html"
    assert cli.main(["export", str(run.path), "--rollout", "2", "--configs", "teacher,self_ctx", "--signal",
                     "kl_rev", "--format", "html", "--out", str(out)]) == 0
    assert out.read_text().count("class='opsd-hm'") == 2 and "written to" in capsys.readouterr().out
    assert cli.main(["export", str(run.path), "--configs", "nope", "--out", str(out)]) == 2
    assert "unknown config 'nope'" in capsys.readouterr().err


# ------------------------------------------------------------------ bug 8: the CLI
def test_show_writes_no_colour_codes_into_a_file(run, tmp_path):
    env = {"PYTHONPATH": str(cli.Path(__file__).resolve().parents[1])}
    res = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "show", str(run.path), "--rollout", "0"],
                         capture_output=True, text=True, env={**__import__("os").environ, **env})
    assert res.returncode == 0 and "\033[" not in res.stdout and "[" in res.stdout
    forced = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "show", str(run.path), "--color"],
                            capture_output=True, text=True, env={**__import__("os").environ, **env})
    assert "\033[48;2;" in forced.stdout


def test_terminal_colours_positive_blue_like_the_app(run):
    row, t, c = run.rollout(0, "teacher")
    t = t.assign(r_opd=np.linspace(-1, 1, len(t)))
    text = terminal.render_rollout(row, t, c, "r_opd", color=True)
    r, g, b = map(int, re.findall(r"\033\[48;2;(\d+);(\d+);(\d+)m", text)[-1])
    assert b > r and b > g  # +1: blue, as the heatmap's positive end


def test_plain_show_keeps_each_token_on_one_line(run):
    """A newline token is shown escaped, then the line breaks after it: no ``[`` on one line and ``|+0.00]``
    on the next."""
    row, t, c = run.rollout(0, "teacher")
    t = t.assign(token=["a", "b\n", "\tc", "d\\n"] * (len(t) // 4) + ["e"] * (len(t) % 4))
    body = terminal.render_rollout(row, t, c, "r_opd", color=False).split("\n\n")[1]
    assert all(re.fullmatch(r"(\[[^\n\[\]]*\|[+-]\d\.\d\d\])+", line) for line in body.splitlines())
    assert "[b\\n|" in body and "[\\tc|" in body and "[d\\\\n|" in body


def test_help_texts_show_no_backticks(capsys):
    for argv in ([], ["run"], ["show"], ["export"], ["predict"], ["scoreboard"]):
        assert cli.main([*argv, "--help"]) == 0  # help is printed and main returns, as for any other command
        out = capsys.readouterr().out
        assert "usage:" in out and "`" not in out, argv


def test_unclear_reason_names_the_interval_that_includes_zero():
    ci = {"estimate": 0.2, "lo": 0.1, "hi": 0.3, "n_prompts": 20}
    wide = {"estimate": 0.1, "lo": -0.1, "hi": 0.3, "n_prompts": 20}
    one = verdict({"teacher_advantage": ci, "alignment": wide, "signal": "r_opd"})["reason"]
    assert one.startswith("the alignment interval includes zero") and "the intervals include" not in one
    both = verdict({"teacher_advantage": wide, "alignment": wide, "signal": "r_opd"})["reason"]
    assert both.startswith("both intervals include zero")


# ------------------------------------------------------------------ bug 6: figures
def test_figures_do_not_collide(run):
    s = run.summary
    head = figures.headline_figure(s)
    assert head.layout.xaxis.showticklabels is False and head.layout.showlegend is not False  # names in a legend
    ent = figures.entropy_figure(s, "r_opd")
    lo, hi = ent.layout.yaxis3.range
    assert lo == 0 and 0 < hi <= 1  # a share: never a ±100% axis
    pos = figures.position_figure(s, "r_opd")
    bars = [t for t in pos.data if t.type == "bar"]
    assert bars and all(b.yaxis == "y2" for b in bars) and all(t.yaxis == "y" for t in pos.data if t.type != "bar")
    acc = figures.accuracy_figure(s)
    assert acc.data[0].text is None and any("vs student" in str(x) for x in acc.data[0].x)  # labels off the bars
    for fig in (head, ent, pos, acc):
        fig.to_json()


def test_correctness_boxes_use_a_signed_log_axis_when_they_would_collapse(run):
    tokens = run.tokens.copy()
    rng = np.random.default_rng(0)
    tokens["r_opd"] = np.where(rng.random(len(tokens)) < 0.9, rng.normal(0, 1e-4, len(tokens)),
                               -rng.exponential(5, len(tokens)))
    fig = figures.correctness_figure(tokens, run.rollouts, "r_opd")
    assert "signed log" in fig.layout.yaxis.title.text and fig.layout.yaxis.ticktext
    box = fig.data[0]
    assert box.q3[0] - box.q1[0] > 0.02 * (box.upperfence[0] - box.lowerfence[0])  # visible boxes


def test_headline_hover_rounds_its_numbers(run):
    tpl = figures.headline_figure(run.summary).data[0].hovertemplate
    assert "%{customdata[2]:.0f} prompts" in tpl and ":.4f}" in tpl


# ------------------------------------------------------------------ bug 1: a predictor phase with an ETA
def test_progress_has_a_predictor_phase_with_eta():
    now = time.time()
    st = {"status": "running", "stage": "predictor", "done": 30, "total": 120, "started": now - 100,
          "stage_started": now - 30}
    ph = app_jobs.phases(st, predictor=True, now=now)
    assert [p.state for p in ph] == ["done", "done", "done", "running"]
    assert ph[3].eta_s == pytest.approx(90) and ph[3].fraction == 0.25
    shards = app_jobs.phases({**st, "stage": "rollouts and scoring", "done": 1, "total": 4}, True, now)
    assert [p.state for p in shards] == ["running", "running", "waiting", "waiting"]
    assert shards[0].eta_s == shards[1].eta_s == pytest.approx(300)  # no shard timed yet: from the start
    assert [p.state for p in app_jobs.phases({"status": "finished", "stage": "done"}, False)] == \
        ["done", "done", "done", "skipped"]


def test_progress_splits_a_shard_into_rollouts_and_scoring_with_their_own_eta():
    """Shard 2 of 5 is being scored: 2 shards sampled, 1 scored; a shard's rollouts took 10 s, its scoring 4 s
    in the main process, and 2 processes share the remaining shards."""
    st = {"status": "running", "stage": "rollouts and scoring", "done": 1, "total": 5, "shard_step": "scoring",
          "rollouts_s": 20.0, "rollouts_n": 2, "scoring_s": 4.0, "scoring_n": 1, "processes": 2, "started": 0}
    roll, score, agg, pred = app_jobs.phases(st, predictor=True, now=100)
    assert (roll.name, roll.state, roll.done, roll.total) == ("rollouts", "running", 2, 5)
    assert roll.eta_s == pytest.approx(10 * 3 / 2)
    assert (score.name, score.state, score.done) == ("scoring", "running", 1)
    assert score.eta_s == pytest.approx((10 * 3 + 4 * 4) / 2)
    assert (agg.state, pred.state) == ("waiting", "waiting")
    last = app_jobs.phases({**st, "done": 4, "shard_step": "scoring"}, True, now=100)  # the last shard is scored
    assert (last[0].state, last[0].done, last[0].eta_s) == ("done", 5, None) and last[1].state == "running"
    p = app_jobs.Progress("running", st["stage"], 1, 5, None, "", [roll, score, agg, pred])
    assert p.text == "running: rollouts 2 of 5 shards, scoring 1 of 5 shards, about 23 s left"


def test_train_metrics_figures(tmp_path):
    recs = [{"kind": "train", "step": s, "loss": 1.0 / s, "r_opd": -s / 10} for s in range(1, 21)]
    recs += [{"kind": "eval", "step": s, "pass@1": 0.2 + s / 100, "kl_to_initial": s / 50} for s in (0, 10, 20)]
    frame = training.records_frame(recs)
    fig = training.train_figure(frame, smoothing=0.8, log_y=True)
    assert len(fig.data) == 4 and fig.layout.yaxis.type == "log"
    ev = training.eval_figure(frame, {"verdict": "helps", "score": 0.12})
    assert len(ev.data) == 2 and len(ev.data[0].x) == 3  # every eval point, one axis per metric
    assert "predicted: helps" in ev.layout.annotations[-1].text and "+0.200" in ev.layout.annotations[-1].text
    assert np.allclose(training.smooth([1, 1, 1], 0.9), 1)


# ------------------------------------------------------------------ item 7: the page's own words
def test_messages_lose_their_flag_names():
    msg = plain("runs/x already holds a training run: pass --resume to continue it, or choose another --out")
    assert "--" not in msg and "Resume" in msg
    assert "--" not in plain("--from-diagnosis takes --config NAME and --signal SIGNAL")


def test_form_config_yaml_and_cost(tmp_path):
    fields = {"student": {"model": "sample_data/models/student"}, "base": None,
              "teachers": [{"name": "self_full", "model": "self", "context": "full_solution"}],
              "data": {"path": "sample_data/problems/dev.jsonl", "limit": 6, "fields": {}},
              "sampling": {"num_samples": 2, "max_completion_length": 16}, "ideal": {"budget": 40}}
    cfg = workbench.build_config(fields)
    text = workbench.config_yaml(cfg)
    assert "limit: 6" in text and "base" not in text
    path = workbench.save_config(cfg, tmp_path / "c.yaml")
    assert path.read_text() == text
    with pytest.raises(OpsdError, match="holds another config"):
        workbench.save_config(workbench.build_config({**fields, "shard_size": 3}), path)
    w = workbench.work(cfg, 6)
    assert w["rollouts"] == 12 and w["generated_tokens"] == 12 * 16 and w["continuations"] == 40
    (tmp_path / "runs" / "old").mkdir(parents=True)
    (tmp_path / "runs" / "old" / "manifest.json").write_text(json.dumps(
        {"status": "finished", "seconds": 10.0, "n_problems": 6, "config": cfg.model_dump(mode="json")}))
    est = workbench.cost_estimate(cfg, 6, tmp_path / "runs")  # the same work as the timed run: its time
    assert est["seconds"] == pytest.approx(10.0) and est["timed_from"].endswith("old")
    assert workbench.cost_estimate(cfg, 60, tmp_path / "runs")["seconds"] > 30
    with pytest.raises(OpsdError, match="sampling.num_samples"):
        workbench.build_config({**fields, "sampling": {"num_samples": 0}})


def test_a_run_reads_each_table_once(run, monkeypatch):
    from opsd_diag.io import store

    fresh = type(run).load(run.path)
    calls = []
    real = store.read_table
    monkeypatch.setattr(store, "read_table", lambda path, name, **kw: calls.append(name) or real(path, name, **kw))
    for _ in range(3):
        fresh.tokens, fresh.topk
        fresh.heatmap(0, ["teacher"], "r_opd")
    assert sorted(calls) == ["rollouts", "tokens", "topk"]


def test_image_export_retries_once_then_says_what_to_do(monkeypatch):
    """Issue 23 bug 6: kaleido's first call once failed ('kaleido_scopes is not defined') and the next worked."""
    import plotly.graph_objects as go

    from opsd_diag.errors import OpsdError
    from opsd_diag.report import export

    monkeypatch.setattr(export, "check_image_export", lambda: None)
    calls = []

    def flaky(fig, **kw):
        calls.append(kw["format"])
        if len(calls) == 1:
            raise NameError("name 'kaleido_scopes' is not defined")
        return b"PNG"
    monkeypatch.setattr(export.pio, "to_image", flaky)
    assert export.figure_image(go.Figure(), "png") == b"PNG" and calls == ["png", "png"]

    def broken(fig, **kw):
        calls.append(kw["format"])
        raise RuntimeError("no browser\nmore")
    calls.clear()
    monkeypatch.setattr(export.pio, "to_image", broken)
    with pytest.raises(OpsdError, match=r"PNG export failed twice \(RuntimeError: no browser\).*HTML export"):
        export.figure_image(go.Figure(), "png")
    assert calls == ["png", "png"]


def test_tooltip_names_its_config_and_signal_and_outlines_hide_no_digit(run):
    """Issue 23 item 8: the tooltip did not name its config; orange outlines hid the digits of stacked rows."""
    html = run.heatmap(0, ["teacher", "self_ctx"], "a_d2", hot={1, 2})
    tips = re.findall(r"<span class='tip'><table>(.*?)</table>", html)
    assert any("config teacher · coloured by a_d2" in t for t in tips)
    assert any("config self_ctx · coloured by a_d2" in t for t in tips)
    hot = re.search(r"\.opsd-hm \.t\.hot\{([^}]*)\}", heatmap.CSS).group(1)
    assert "outline" not in hot and "inset 0 -3px" in hot  # a bar inside the token, over no neighbour


def test_the_report_shows_the_top_ranked_config(run):
    html = run.report_html("r_opd", n_heatmaps=1)
    top = run.top_config()
    assert f"{top}, coloured by r_opd" in html


def test_a_config_has_one_colour_in_every_run():
    """Issue 23 item 8: the same config had different colours in Compare's A and B."""
    a = figures._colors(["teacher", "self_full", "self_hint"])
    b = figures._colors(["self_hint", "base_teacher", "teacher"])
    assert a["teacher"] == b["teacher"] == figures.config_color("teacher")
    assert a["self_hint"] == b["self_hint"]
    many = figures._colors([f"c{i}" for i in range(20)])
    assert len(set(many.values())) == 20  # within one figure, never two configs with one colour


def test_entropy_figure_says_why_its_third_panel_is_empty(run):
    """Issue 23 item 8: an empty third panel with overlapping 0.0% labels."""
    s = run.summary
    zero = s.model_copy(update={"configs": {c: e.model_copy(update={"high_entropy_share": e.high_entropy_share
                                                                    .model_copy(update={"student": 0.0, "teacher": 0.0})})
                                            for c, e in s.configs.items()}})
    fig = figures.entropy_figure(zero)
    bars = [t for t in fig.data if t.xaxis == "x3"]
    assert bars and all(txt == "" for b in bars for txt in b.text)
    assert any("no token reaches" in a.text for a in fig.layout.annotations)
    assert not any("no token reaches" in a.text for a in figures.entropy_figure(s).layout.annotations) or \
        all((e.high_entropy_share.student or 0) == 0 and (e.high_entropy_share.teacher or 0) == 0
            for e in s.configs.values())


def test_tooltip_cells_match_cell_value_by_value():
    """The per-column formatting of the tooltip (one %-format over a column) prints what ``cell`` prints."""
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-5, -1e-4, 5e-4, 1e-3, -1e-3, 0.0015, 123.456, -2.5, 17.0])
    for col in ("r_opd", "kl_rev", "rank_t", "gate", "lp_s", "jsd"):
        assert heatmap._cells(col, v) == [f"<tr><td>{col}</td><td>{heatmap.cell(col, x)}</td></tr>" for x in v]


def test_kept_tooltips_give_the_heatmap_a_fresh_run_draws(run, tmp_path):
    """Run.heatmap keeps a rollout's tooltips across signals: the HTML equals a fresh Run's, per tokenizer."""
    from opsd_diag.run import Run

    class Tok:
        def __init__(self, mark):
            self.mark = mark

        def decode(self, ids):
            return f"{self.mark}{ids[0]}"

    a, b = Tok("alt-a"), Tok("alt-b")
    for signal in ("r_opd", "jsd", "rank_t"):
        run.heatmap(2, ["teacher", "self_ctx"], signal, a, hot={1})
    kept = run.heatmap(2, ["teacher", "self_ctx"], "a_d2", a, hot={1}, entropy_bin="[0.5, 1)")
    fresh = Run.load(run.path).heatmap(2, ["teacher", "self_ctx"], "a_d2", a, hot={1}, entropy_bin="[0.5, 1)")
    assert kept == fresh and "&quot;alt-a" in kept and "<tr class=sel><td>a_d2</td>" in kept
    other = run.heatmap(2, ["teacher", "self_ctx"], "a_d2", b, hot={1}, entropy_bin="[0.5, 1)")
    assert "&quot;alt-b" in other and "alt-a" not in other  # another tokenizer: its own alternatives
    assert kept.count("class=sel>") == kept.count("data-pos=")  # one marked row per token, never two


def test_the_bundled_splits_are_found_from_any_working_directory(tmp_path, monkeypatch):
    """The New-diagnosis form's bundled splits lie beside the app, not under the working directory: relative paths
    from the repository root (the saved YAML is the same in any checkout), absolute ones from anywhere else."""
    repo = Path(workbench.__file__).resolve().parents[1]
    monkeypatch.chdir(repo)
    assert workbench.bundled_data() == [f"sample_data/problems/{n}.jsonl" for n in ("dev", "test", "train")]
    monkeypatch.chdir(tmp_path)
    far = workbench.bundled_data()
    assert far == [str(repo / "sample_data" / "problems" / f"{n}.jsonl") for n in ("dev", "test", "train")]
    assert all(Path(p).is_file() for p in far)
