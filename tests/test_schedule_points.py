"""What the teacher sees, and when (issue 33, item 2): ``lookahead.schedule_points``. The revealed view against the
template rendered on an explicitly cut solution, the schedule table against summary.json and a float64 per-token
recomputation of the mismatch, the recommendation, ``Run.schedule()``, the report's line and the user errors."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from fixtures_trainer import build_world

from opsd_diag.config.spec import from_dict
from opsd_diag.core.context_schedule import revealed_problem
from opsd_diag.engine import lookahead, schedule_points
from opsd_diag.errors import OpsdError
from opsd_diag.io import store, views
from opsd_diag.io.data import load_problems
from opsd_diag.io.models import load_spec


def _cut(text: str, f: float) -> str:
    """The first floor(f * W + 1/2) whitespace-separated words of ``text``, cut after the last one: a loop."""
    ends, inside = [], False
    for i, ch in enumerate(text):
        if not ch.isspace():
            inside = True
        elif inside:
            ends.append(i)
            inside = False
    if inside:
        ends.append(len(text))
    k = int(math.floor(f * len(ends) + 0.5))
    return text[:ends[k - 1]] if k else ""


def _cfg(world, **lookahead_section) -> dict:
    return {"student": {"model": str(world / "student")},
            "teachers": [{"name": "self_full", "context": "full_solution"}],
            "data": {"path": str(world / "train.jsonl"), "limit": 8},
            "sampling": {"num_samples": 3, "max_completion_length": 6, "teacher_samples": 1},
            "analysis": {"bootstrap": 20, "checker": "toy"}, "shard_size": 4,
            "lookahead": {"methods": ["jsd"], "steps": 2, "rollouts_per_step": 4, "learning_rate": 1e-2,
                          **lookahead_section}}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"))


def test_revealed_view_is_the_template_on_the_cut_solution_and_f1_is_todays_view(world):
    cfg = schedule_points.with_schedule_points(from_dict(_cfg(world, schedule_points=[0.5, 0.25])))
    assert [(t.name, t.reveal) for t in cfg.teachers] == [("self_full", 1.0), ("self_full.reveal0.5", 0.5),
                                                           ("self_full.reveal0.25", 0.25)]
    assert schedule_points.with_schedule_points(cfg) == cfg  # idempotent: the stored config is resolved already
    tok, _ = load_spec(cfg.student, "cpu")
    problems = load_problems(cfg.data)
    s_render = views.student_renderer(cfg, tok)
    renders = {t.name: views.teacher_renderer(cfg, t, tok) for t in cfg.teachers}
    built = views.build_views(cfg, problems, s_render, renders, None)
    fmt = renders["self_full"].fmt
    for i, p in enumerate(problems):
        assert built.teachers["self_full"][i] == views.teacher_view(tok, p, "full_solution", fmt=fmt).ids  # today's
        for name, f in (("self_full.reveal0.5", 0.5), ("self_full.reveal0.25", 0.25)):
            cut = _cut(p["solution"], f)
            assert cut and cut != p["solution"] and revealed_problem(p, f)["solution"] == cut
            want = views.teacher_view(tok, {**p, "solution": cut}, "full_solution", fmt=fmt).ids
            assert built.teachers[name][i] == want
            text = tok.decode(want)
            assert cut in text and p["solution"] not in text


def test_user_errors_are_one_clear_message(world, tmp_path):
    for bad in ([1.0], [0.0], [-0.2], [1.5]):
        with pytest.raises(OpsdError, match=r"lookahead\.schedule_points: .* is not a share strictly between 0 "
                                            r"and 1 \(the whole solution, f = 1, is always in the table"):
            from_dict(_cfg(world, schedule_points=bad))
    with pytest.raises(OpsdError, match="repeats a point"):
        from_dict(_cfg(world, schedule_points=[0.5, 0.5]))
    no_source = _cfg(world, schedule_points=[0.5])
    no_source["teachers"] = [{"name": "hint_only", "context": "answer_only"},
                             {"name": "other", "model": str(world / "teacher"), "context": "full_solution"}]
    with pytest.raises(OpsdError, match=r"^lookahead\.schedule_points needs a self-teacher config .* add one to "
                                        r"teachers, or remove schedule_points$"):
        schedule_points.with_schedule_points(from_dict(no_source))
    from opsd_diag.engine.diagnose import run_diagnosis

    with pytest.raises(OpsdError, match="needs a self-teacher config"):  # before anything is written
        run_diagnosis(from_dict(no_source), tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()
    taken = _cfg(world, schedule_points=[0.5])
    taken["teachers"].append({"name": "self_full.reveal0.5", "context": "none"})
    with pytest.raises(OpsdError, match=r"names the copy of 'self_full' shown 0.5 of the solution "
                                        r"'self_full.reveal0.5', and another teacher config has that name"):
        schedule_points.with_schedule_points(from_dict(taken))
    short = schedule_points.with_schedule_points(from_dict(_cfg(world, schedule_points=[0.01])))
    problems = load_problems(short.data)
    with pytest.raises(OpsdError, match=r"teachers\.1 'self_full\.reveal0\.01' \(share 0.01 of the solution\) shows "
                                        r"no word of problem .* use schedule points of at least"):
        schedule_points.check_problems(short, problems)


def test_recommendation_moves_off_the_whole_solution_only_on_a_difference_above_zero():
    def row(share, method, dll, diff=None):
        return {"source": "s", "share": share, "config": f"s{share}", "method": method, "gap": None,
                "dll": None if dll is None else {"estimate": dll, "lo": dll - 1, "hi": dll + 1},
                **({} if share == 1.0 else {"dll_vs_full": diff})}

    def d(est, lo):
        return {"estimate": est, "lo": lo, "hi": est + 1, "n_prompts": 4}
    rows = [row(0.25, "jsd", 0.1, d(0.05, 0.01)), row(0.25, "opd", float("nan"), None),
            row(0.5, "jsd", 0.4, d(0.3, -0.1)), row(0.5, "opd", 0.3, d(0.08, 0.02)), row(1.0, "jsd", 0.2),
            row(1.0, "opd", 0.1)]
    r = schedule_points.recommend(rows)  # 0.5/jsd has the largest Δll, but its difference's interval reaches 0
    assert (r["config"], r["share"], r["method"]) == ("s0.5", 0.5, "opd")
    assert r["dll_vs_full"]["estimate"] == 0.08 and r["dll_full"]["estimate"] == 0.1
    assert r["context_schedule"] == {"kind": "fixed", "start": 0.5} and r["basis"] == schedule_points.BASIS
    whole = schedule_points.recommend([rows[1], rows[2], rows[4]])
    assert whole["source"] is None and whole["share"] == 1.0 and whole["basis"] == schedule_points.WHOLE
    blind = schedule_points.recommend([{**rows[1], "dll_vs_full": {"estimate": None, "lo": None, "n_prompts": 0}},
                                       row(1.0, "opd", None)])
    assert blind["share"] == 1.0 and blind["source"] is None and blind["basis"] == schedule_points.BLIND
    assert schedule_points.recommend([]) is None


def test_paired_with_full_is_the_per_prompt_difference_from_the_same_source_and_loss():
    def row(share, method, prompts):
        return {"source": "s", "share": share, "method": method, "dll_prompts": prompts}
    rows = [row(0.5, "jsd", {"a": 0.3, "b": 0.1, "c": float("nan")}), row(0.5, "opd", None),
            row(1.0, "jsd", {"a": 0.1, "b": 0.2, "c": 0.4}), row(1.0, "opd", {"a": 0.0})]
    out = schedule_points.paired_with_full(rows, 50, 0)
    assert all("dll_prompts" not in r for r in out) and "dll_vs_full" not in out[2]
    assert out[0]["dll_vs_full"]["estimate"] == pytest.approx(((0.3 - 0.1) + (0.1 - 0.2)) / 2, abs=1e-12)
    assert out[0]["dll_vs_full"]["n_prompts"] == 2 and out[1]["dll_vs_full"] is None


@pytest.fixture(scope="module")
def diagnosed(world, tmp_path_factory):
    from opsd_diag.engine.diagnose import run_diagnosis

    cfg = from_dict(_cfg(world, schedule_points=[0.5, 0.25]))
    out = run_diagnosis(cfg, tmp_path_factory.mktemp("run") / "run", show_progress=False)
    original = store.read_table(out, "rollouts")
    assert store.read_json(out / "summary.json")["schedule"]["status"] == "ok"
    # random models solve nothing: give the rollouts mixed outcomes (the lookahead's input), then look ahead again
    rollouts = original.copy()
    known = rollouts["correct"].notna()
    rollouts.loc[known, "correct"] = [bool((i + j) % 2) for i, j in zip(rollouts.loc[known, "problem_index"],
                                                                        range(int(known.sum())))]
    store.write_table(out, "rollouts", rollouts)
    stored = from_dict(yaml.safe_load((out / "config.yaml").read_text()))
    tok, student = load_spec(stored.student, "cpu")
    lookahead.for_diagnosis(out, stored, student, {t.name: student for t in stored.teachers}, None, tok, [])
    schedule_points.for_diagnosis(out, stored)
    return stored, out, original


def test_the_stored_config_holds_the_copies(diagnosed):
    stored, out, _ = diagnosed
    assert [(t.name, t.reveal) for t in stored.teachers] == [("self_full", 1.0), ("self_full.reveal0.5", 0.5),
                                                              ("self_full.reveal0.25", 0.25)]
    assert schedule_points.with_schedule_points(stored) == stored
    assert set(store.read_json(out / "summary.json")["configs"]) == {t.name for t in stored.teachers}


def _reference_mismatch(cfg, rows, config: str, reveal: float, problems) -> tuple[float, float]:
    """Mean JSD and reverse KL over every token of the student's rollouts, float64, token by token: the student
    after its own prompt against itself after the view shown ``reveal`` of the solution (rendered here)."""
    tok, student = load_spec(cfg.student, "cpu")
    model = student.double()
    tau, beta = cfg.scoring_temperature, cfg.scoring.jsd_beta
    fmt = views.teacher_renderer(cfg, cfg.teachers[0], tok).fmt
    by_id = {p["id"]: p for p in problems}
    jsd, kl, n = 0.0, 0.0, 0
    with torch.no_grad():
        for _, r in rows.iterrows():
            p = by_id[r["problem_id"]]
            view = views.teacher_view(tok, {**p, "solution": _cut(p["solution"], reveal)}, "full_solution", fmt=fmt).ids
            assert [int(t) for t in r[f"prompt_ids.{config}"]] == view
            c = [int(t) for t in r["completion_ids"]]
            sides = []
            for prompt in ([int(t) for t in r["prompt_ids.student"]], view):
                logits = model(input_ids=torch.tensor([prompt + c])).logits[0, len(prompt) - 1:-1]
                sides.append(torch.log_softmax(logits / tau, -1))  # [L, V]
            ls, lt = sides
            for t in range(len(c)):
                for v in range(ls.shape[1]):
                    lp, lq = float(ls[t, v]), float(lt[t, v])
                    pv, qv = math.exp(lp), math.exp(lq)
                    lm = math.log(beta * qv + (1 - beta) * pv)
                    jsd += beta * qv * (lq - lm) + (1 - beta) * pv * (lp - lm)
                    kl += pv * (lp - lq)
                n += 1
    return jsd / n, kl / n


def test_schedule_table_equals_the_configs_and_a_float64_recomputation(diagnosed):
    from opsd_diag.run import Run

    cfg, out, original = diagnosed
    summary = store.read_json(out / "summary.json")
    frame = Run.load(out).schedule()
    assert list(frame["share"]) == [0.25, 0.5, 1.0] and list(frame["method"]) == ["jsd"] * 3
    assert list(frame["config"]) == ["self_full.reveal0.25", "self_full.reveal0.5", "self_full"]
    problems = load_problems(cfg.data)
    student = original[original["correct"].notna()]
    for _, row in frame.iterrows():
        entry = summary["configs"][row["config"]]
        g, ci = entry["teacher_minus_student_accuracy"], entry["ci"]
        la = summary["lookahead"]["configs"][row["config"]]["jsd"]
        assert (row["gap"], row["gap_lo"], row["gap_hi"]) == (g["estimate"], g["lo"], g["hi"])
        assert (row["jsd"], row["kl_rev"]) == (ci["jsd"]["estimate"], ci["kl_rev"]["estimate"])
        assert (row["dll"], row["dll_lo"], row["dll_hi"]) == (la["dll"]["estimate"], la["dll"]["lo"], la["dll"]["hi"])
        assert (row["dv"], row["kl"]) == (la["dv"]["estimate"], la["kl"]["estimate"])
        # G: the view's sampled accuracy minus the student's, a loop over the samples (the original outcomes)
        teacher = store.read_table(out, "teacher_rollouts")
        mine = [bool(c) for c, k in zip(teacher["correct"], teacher["config"]) if k == row["config"] and c == c]
        assert mine and row["gap"] == pytest.approx(sum(mine) / len(mine) - sum(map(bool, student["correct"]))
                                                    / len(student), abs=1e-12)
        jsd, kl = _reference_mismatch(cfg, original, row["config"], row["share"], problems)
        assert row["jsd"] == pytest.approx(jsd, rel=1e-4, abs=1e-7)
        assert row["kl_rev"] == pytest.approx(kl, rel=1e-4, abs=1e-7)
    # tokens.parquet holds what the mismatch averages
    tokens = store.read_table(out, "tokens")
    for config in frame["config"]:
        vals = [float(v) for v, k in zip(tokens["jsd"], tokens["config"]) if k == config and math.isfinite(v)]
        assert summary["configs"][config]["ci"]["jsd"]["estimate"] == pytest.approx(sum(vals) / len(vals), rel=1e-9)
    assert frame["dll"].notna().all()
    # each share against the whole solution, prompt by prompt, from the lookahead's per-prompt Δll
    full = summary["lookahead"]["configs"]["self_full"]["jsd"]["dll_prompts"]
    for _, row in frame[frame["share"] < 1].iterrows():
        mine = summary["lookahead"]["configs"][row["config"]]["jsd"]["dll_prompts"]
        both = [p for p in mine if mine[p] is not None and full.get(p) is not None]
        assert both and row["dll_vs_full"] == pytest.approx(sum(mine[p] - full[p] for p in both) / len(both),
                                                            abs=1e-12)
        finite = [v for v in mine.values() if v is not None]
        assert row["dll"] == pytest.approx(sum(finite) / len(finite), abs=1e-12)
    above = frame[(frame["share"] < 1) & (frame["dll_vs_full_lo"] > 0)]
    rec = summary["schedule"]["recommendation"]
    if above.empty:
        assert rec["source"] is None and rec["share"] == 1.0 and not frame["recommended"].any()
    else:
        best = above["dll_vs_full"].idxmax()
        assert frame["recommended"].tolist() == [i == best for i in frame.index]
        assert (rec["config"], rec["share"]) == (frame.loc[best, "config"], frame.loc[best, "share"])
        assert rec["dll_full"] == summary["lookahead"]["configs"]["self_full"]["jsd"]["dll"]


def test_report_shows_the_schedule_recommendation(diagnosed, capsys):
    from opsd_diag import cli

    from opsd_diag import schedule_points as view

    _, out, _ = diagnosed
    schedule = store.read_json(out / "summary.json")["schedule"]
    assert cli.main(["report", str(out)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("schedule recommendation")]
    assert lines == view.text(schedule)[:1]
    # both kinds of recommendation, whichever this run made: a share (rule 2 found one) and the whole solution
    point = next(r for r in schedule["rows"] if r["share"] < 1)
    full = next(r for r in schedule["rows"] if r["share"] == 1 and r["method"] == point["method"])
    diff = {"estimate": 0.02, "lo": 0.01, "hi": 0.03, "n_prompts": 3}
    moved = {**schedule, "recommendation": {"config": point["config"], "source": "self_full", "share": point["share"],
                                            "method": point["method"], "dll": point["dll"], "gap": point["gap"],
                                            "dll_full": full["dll"], "dll_vs_full": diff,
                                            "basis": schedule_points.BASIS}}
    line = view.text(moved)[0]
    d = point["dll"]
    assert line.startswith(f"schedule recommendation for self_full / {point['method']}: show {point['share']:g}")
    assert f"[{d['lo']:+.4f}, {d['hi']:+.4f}]" in line and f"whole solution {full['dll']['estimate']:+.4f}" in line
    assert "difference +0.0200 [+0.0100, +0.0300]" in line
    whole = {**schedule, "recommendation": {"config": None, "source": None, "share": 1.0, "method": None,
                                            "basis": schedule_points.WHOLE}}
    assert view.text(whole)[0].startswith("schedule recommendation: show the whole solution, as today (no share's")


def test_overview_shows_the_schedule_recommendation_in_the_decision_box(diagnosed):
    from test_app import _app, _ok

    from app import common
    from opsd_diag import schedule_points as view

    _, out, _ = diagnosed
    lines = view.text(store.read_json(out / "summary.json")["schedule"])
    assert lines
    at = _app(out.parent, out.name)
    _ok(at)
    boxes = [[m.value for m in b.markdown] for b in at.container]  # each container's markdown (subtree)
    assert any(any(common.md(lines[0]) in v for v in b) and any(v.startswith("#### ") for v in b) for b in boxes)


def test_train_form_is_prefilled_with_the_schedule_recommendation(diagnosed, tmp_path):
    """The Train form of the recommended (source config, loss) starts at the recommended share; the command it shows
    carries --reveal SHARE and the config it trains a fixed context schedule at that share; opsd-train --reveal
    gives the same section and a share outside [0, 1] is one message naming the key."""
    import shutil

    from test_app import _app, _ok

    from opsd_diag.config import training as train_config
    from trainer import cli as train_cli

    stored, src, _ = diagnosed
    out = tmp_path / "run"
    shutil.copytree(src, out)
    summary = store.read_json(out / "summary.json")
    point = next(r for r in summary["schedule"]["rows"] if r["share"] == 0.5)  # a share below the whole solution
    rec = {**summary["schedule"]["recommendation"], "config": point["config"], "source": point["source"],
           "method": point["method"], "share": 0.5}
    store.atomic_write_json(out / "summary.json", {**summary, "schedule": {**summary["schedule"], "recommendation": rec}})
    signal = {"opd": "r_opd", "jsd": "jsd"}[rec["method"]]
    at = _app(out.parent, out.name)
    at.session_state["train_this"] = {"run": str(out), "config": rec["source"], "signal": signal}
    at.switch_page("views/train.py").run()
    _ok(at)
    key = f"{rec['source']}-{rec['method']}"
    assert at.checkbox(key=f"tt_reveal_on-{key}").value is True
    assert at.number_input(key=f"tt_reveal-{key}").value == pytest.approx(0.5)
    assert any("--reveal 0.5" in c.value for c in at.code)
    assert any("context_schedule:" in c.value and "start: 0.5" in c.value for c in at.code)
    assert train_cli.reveal_schedule(train_cli.parser().parse_args(["--reveal", "0.5"]).reveal) == {
        "kind": "fixed", "start": 0.5}
    with pytest.raises(OpsdError, match="context_schedule"):
        train_config.resolve_training(train_config.with_training(
            stored, {"method": "opsd", "teacher": rec["source"], "context_schedule": train_cli.reveal_schedule(1.5)},
            "t"), "t")


def test_export_writes_the_schedule_table(diagnosed, tmp_path):
    import pandas as pd

    from opsd_diag.run import Run

    _, out, _ = diagnosed
    run = Run.load(out)
    assert "schedule" in run.table_names()
    pd.testing.assert_frame_equal(run.export_table("schedule"), run.schedule())
    run.export(tmp_path / "export", table_format="parquet", figure_format="html")
    got = pd.read_parquet(tmp_path / "export" / "schedule.parquet")
    assert list(got["config"]) == list(run.schedule()["config"])
    assert got["share"].tolist() == run.schedule()["share"].tolist()
