"""The diagnosis' levers (issue 33, item 2): kept shares against a float64 per-rollout reference, the lever
lookahead against the plain lookahead, the recommendation, and ``Run.levers``."""

from __future__ import annotations

import math

import pytest
import torch
from fixtures_trainer import build_world
from test_levers import ref_keep, ref_surprising

from opsd_diag.config.levers import TokenMaskSpec
from opsd_diag.config.spec import from_dict
from opsd_diag.core import token_mask as tm
from opsd_diag.engine import levers, lookahead
from opsd_diag.io import store


def test_shares_equal_explicit_sums():
    g = torch.Generator().manual_seed(2)
    kept = torch.rand(13, generator=g) > 0.4
    signal = torch.randn(13, generator=g)
    signal[3] = float("nan")
    k, s = tm.shares(kept, signal)
    mags = [0.0 if math.isnan(float(x)) else abs(float(x)) for x in signal]
    assert k == pytest.approx(sum(map(bool, kept)) / 13)
    assert s == pytest.approx(sum(m for m, b in zip(mags, kept) if b) / sum(mags), rel=1e-12)


def _diff(est, lo, hi):
    return {"estimate": est, "lo": lo, "hi": hi, "n_prompts": 5}


def test_recommendation_moves_off_all_tokens_only_on_a_difference_above_zero():
    """Rule 2 (lever study amendment 4): the largest paired difference among those whose interval lies above 0,
    else all tokens; a larger Δll whose difference interval reaches 0 does not count."""
    all_ = {"dll": {"estimate": 0.1, "lo": 0.0, "hi": 0.2}, "dll_vs_all": _diff(0.0, 0.0, 0.0)}
    a = {"dll": {"estimate": 0.3, "lo": 0.1, "hi": 0.5}, "dll_vs_all": _diff(0.2, 0.05, 0.3)}
    b = {"dll": {"estimate": 0.5, "lo": -0.1, "hi": 0.9}, "dll_vs_all": _diff(0.4, -0.01, 0.8)}
    c = {"dll": {"estimate": 0.2, "lo": 0.1, "hi": 0.3}, "dll_vs_all": _diff(0.1, 0.02, 0.2)}
    nan = {"dll": {"estimate": float("nan"), "lo": None, "hi": None}, "dll_vs_all": _diff(float("nan"), None, None)}
    r = levers.recommend({"all": all_, "entropy_top50": a, "advantage_top20": b, "correct_only": c,
                          "incorrect_only": nan})
    assert r["setting"] == "entropy_top50" and r["dll_vs_all"]["lo"] == 0.05 and r["dll_all"]["estimate"] == 0.1
    assert r["token_mask"] == levers.CANDIDATES["entropy_top50"] and "above 0" in r["basis"]
    r = levers.recommend({"all": all_, "advantage_top20": b, "incorrect_only": nan})
    assert r["setting"] == "all" and r["token_mask"] == {} and "no candidate" in r["basis"]
    assert levers.recommend({"all": all_})["setting"] == "all"
    blind = {**nan, "dll_vs_all": {**nan["dll_vs_all"], "n_prompts": 0}}
    r = levers.recommend({"all": all_, "incorrect_only": blind})
    assert r["setting"] == "all" and r["basis"] == levers.NO_COMPARISON  # says why nothing could be compared


def test_beyond_noise_is_the_largest_estimate_whose_interval_lies_above_zero():
    from opsd_diag.core.stats import beyond_noise

    assert beyond_noise({"a": _diff(0.3, 0.0, 0.6), "b": _diff(0.1, 0.01, 0.2), "c": _diff(0.2, 0.02, 0.3),
                         "d": None, "e": _diff(0.9, float("nan"), 1.0), "f": _diff(0.2, 0.05, 0.4)}) == "c"
    assert beyond_noise({"a": _diff(0.3, 0.0, 0.6), "d": None}) is None and beyond_noise({}) is None


def test_paired_difference_equals_an_explicit_loop():
    import numpy as np

    from opsd_diag.core.stats import paired_difference, prompt_draws

    rng = np.random.default_rng(3)
    a = {f"p{i}": float(x) for i, x in enumerate(rng.normal(size=12))}
    b = {f"p{i}": float(x) for i, x in enumerate(rng.normal(size=12)) if i != 4}  # p4 only in a
    a["p2"], b["p7"], b["p20"] = float("nan"), float("inf"), 1.0  # not finite in one; only in b
    got = paired_difference(a, b, 300, 7)
    keys = sorted(k for k in a if k in b and math.isfinite(a[k]) and math.isfinite(b[k]))
    diff = [a[k] - b[k] for k in keys]
    assert got["n_prompts"] == len(keys) == 9
    assert got["estimate"] == pytest.approx(sum(diff) / len(diff), abs=1e-12)
    reps = []
    for draw in prompt_draws(len(keys), 300, 7):
        reps.append(sum(diff[j] for j in draw) / len(draw))
    lo, hi = np.quantile(reps, [0.025, 0.975])
    assert (got["lo"], got["hi"]) == pytest.approx((lo, hi), abs=1e-12)
    assert paired_difference({"p": 1.0}, {"q": 1.0}, 10, 0)["n_prompts"] == 0


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    from opsd_diag.engine.diagnose import run_diagnosis

    world = build_world(tmp_path_factory.mktemp("world"))
    cfg = from_dict({
        "student": {"model": str(world / "student")}, "base": {"model": str(world / "base")},
        "teachers": [{"name": "teacher", "model": str(world / "teacher")}],
        "data": {"path": str(world / "train.jsonl"), "limit": 8},
        "sampling": {"num_samples": 3, "max_completion_length": 6, "teacher_samples": 0},
        "analysis": {"bootstrap": 20, "checker": "toy"}, "shard_size": 4,
        "lookahead": {"methods": ["jsd"], "steps": 2, "rollouts_per_step": 4, "learning_rate": 1e-2, "levers": True},
        "training": {"method": "jsd", "teacher": "teacher"}})
    out = run_diagnosis(cfg, tmp_path_factory.mktemp("run") / "run", show_progress=False)
    assert store.read_json(out / "summary.json")["levers"]["status"] == "ok"  # the diagnosis ran the levers
    # random models solve nothing: give the rollouts mixed outcomes (inputs of the levers), then look ahead again
    from opsd_diag.io.models import load_spec

    rollouts = store.read_table(out, "rollouts")
    known = rollouts["correct"].notna()
    rollouts.loc[known, "correct"] = [bool((i + j) % 2) for i, j in zip(rollouts.loc[known, "problem_index"],
                                                                        range(int(known.sum())))]
    store.write_table(out, "rollouts", rollouts)
    tok, student = load_spec(cfg.student, "cpu")
    _, teacher = load_spec(cfg.student.model_copy(update={"model": cfg.teachers[0].model}), "cpu")
    _, base = load_spec(cfg.base, "cpu")
    lookahead.for_diagnosis(out, cfg, student, {"teacher": teacher}, base, tok, [])
    levers.for_diagnosis(out, cfg, student, {"teacher": teacher}, base, tok, [], lookahead)
    return cfg, out


def _naive(model, prompt, completion, tau):
    ids = torch.tensor([prompt + completion])
    return torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1:-1].double() / tau, -1)  # [L, V]


def _reference_scores(cfg, rows):
    """Float64 student entropy and |JSD| (the jsd method's signal) of every token of ``rows``, lengths, outcomes."""
    from opsd_diag.io.models import load_spec

    tok, student = load_spec(cfg.student, "cpu")
    _, teacher = load_spec(cfg.student.model_copy(update={"model": cfg.teachers[0].model}), "cpu")
    student, teacher = student.double(), teacher.double()
    tau, beta = cfg.scoring_temperature, cfg.scoring.jsd_beta
    h, sig, lengths, correct = [], [], [], []
    with torch.no_grad():
        for _, r in rows.iterrows():
            c = [int(t) for t in r["completion_ids"]]
            ls = _naive(student, [int(t) for t in r["prompt_ids.student"]], c, tau)
            lt = _naive(teacher, [int(t) for t in r["prompt_ids.teacher"]], c, tau)
            for t in range(len(c)):
                p, q = ls[t].exp(), lt[t].exp()
                m = beta * q + (1 - beta) * p
                jsd = sum(float(beta * q[j] * (lt[t][j] - m[j].log()) + (1 - beta) * p[j] * (ls[t][j] - m[j].log()))
                          for j in range(len(p)))
                h.append(-float((p * ls[t]).sum()))
                sig.append(abs(jsd))
            lengths.append(len(c))
            correct.append(None if r["correct"] != r["correct"] else bool(r["correct"]))
    return {"h_s": torch.tensor(h), "signal": torch.tensor(sig)}, sig, lengths, correct


def _ref_kept(cfg, kw: dict, scores: dict, lengths: list[int], correct: list, rows) -> list[bool]:
    """``ref_keep``'s flags; a surprising mask ranks the rollouts of each lookahead micro-batch (``rows`` in the
    order the diagnosis cuts them) by their sampler log-probs."""
    if kw.get("rollouts") != "surprising":
        return ref_keep(TokenMaskSpec(**kw).settings(), scores, lengths, correct)
    size = lookahead.settings(cfg)[0].rollouts_per_step
    lps = [list(x) for x in rows["sampler_logprobs"]]
    flags = [f for lo in range(0, len(lps), size) for f in ref_surprising(lps[lo:lo + size], kw["rollouts_share"])]
    return [f for f, L in zip(flags, lengths) for _ in range(L)]


def test_kept_shares_equal_a_float64_per_rollout_reference(diagnosed):
    cfg, out = diagnosed
    lv = store.read_json(out / "summary.json")["levers"]
    assert lv["status"] == "ok" and (lv["config"], lv["method"]) == ("teacher", "jsd")
    assert set(lv["settings"]) == set(levers.CANDIDATES)
    step_rows, _ = lookahead.split(store.read_table(out, "rollouts"))
    scores, sig, lengths, correct = _reference_scores(cfg, step_rows)
    for name, kw in levers.CANDIDATES.items():
        if kw.get("kind") == "confident_disagreement":
            continue  # reads the teacher's top-1 (tested in test_levers.test_token_scores_equal_float64_reference)
        kept = _ref_kept(cfg, kw, scores, lengths, correct, step_rows)
        want_k = sum(kept) / len(kept)
        want_s = sum(s for s, k in zip(sig, kept) if k) / sum(sig)
        got = lv["settings"][name]
        assert got["kept_share"] == pytest.approx(want_k, abs=1e-12), name
        assert got["signal_share"] == pytest.approx(want_s, rel=1e-4, abs=1e-7), name
    assert lv["settings"]["entropy_top50"]["kept_share"] <= 0.5


def test_all_tokens_lever_lookahead_is_the_lookahead_and_the_recommendation_is_shown(diagnosed):
    from opsd_diag.run import Run

    _, out = diagnosed
    summary = store.read_json(out / "summary.json")
    plain, lv = summary["lookahead"]["configs"]["teacher"]["jsd"], summary["levers"]
    for k in ("dll", "kl"):
        assert lv["settings"]["all"][k]["estimate"] == pytest.approx(plain[k]["estimate"], rel=1e-6, abs=1e-9)
    assert all(math.isfinite(v["dll"]["estimate"]) for v in lv["settings"].values())
    assert lv["settings"]["all"]["dll_vs_all"]["estimate"] == 0 == lv["settings"]["all"]["dll_vs_all"]["hi"]
    above = {s: v["dll_vs_all"]["estimate"] for s, v in lv["settings"].items() if v["dll_vs_all"]["lo"] > 0}
    best = max(above, key=above.get) if above else "all"
    assert lv["recommendation"]["setting"] == best
    frame = Run.load(out).levers()
    assert list(frame["setting"]) == list(levers.CANDIDATES)
    assert frame.loc[frame["setting"] == best, "recommended"].item()
    assert frame["kept_share"].tolist() == pytest.approx([lv["settings"][s]["kept_share"] for s in levers.CANDIDATES])
    assert frame["dll_vs_all_lo"].tolist() == pytest.approx([lv["settings"][s]["dll_vs_all"]["lo"]
                                                             for s in levers.CANDIDATES])


def test_difference_from_all_tokens_is_the_per_prompt_lookahead_stepped_by_hand(diagnosed):
    """A masked candidate's ``dll_vs_all``: the two steppings repeated by hand (the lookahead's seeds), their
    per-prompt Δll, the mean over the prompts where both are finite; each stepping's per-prompt values average to
    its Δll."""
    from opsd_diag.io.models import load_spec

    cfg, out = diagnosed
    tok, student = load_spec(cfg.student, "cpu")
    _, teacher = load_spec(cfg.student.model_copy(update={"model": cfg.teachers[0].model}), "cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread for both computations: Adam's steps magnify a reduction order's last bits
    try:
        lv = levers.run(cfg, student, teacher, None, store.read_table(out, "rollouts"), "teacher", "jsd",
                        tok.pad_token_id, lookahead)
        per = _by_hand(cfg, out, tok, student, teacher)
    finally:
        torch.set_num_threads(threads)
    for name in per:
        finite = [v for v in per[name].values() if math.isfinite(v)]
        assert lv["settings"][name]["dll"]["estimate"] == pytest.approx(sum(finite) / len(finite), abs=1e-12)
    both = [p for p in per["all"] if math.isfinite(per["all"][p]) and math.isfinite(per["advantage_top20"][p])]
    want = sum(per["advantage_top20"][p] - per["all"][p] for p in both) / len(both)
    got = lv["settings"]["advantage_top20"]["dll_vs_all"]
    assert got["estimate"] == pytest.approx(want, abs=1e-12) and got["n_prompts"] == len(both) > 0


def _by_hand(cfg, out, tok, student, teacher) -> dict:
    from opsd_diag.config.levers import CANDIDATES, TokenMaskSpec
    from opsd_diag.engine.train_step import Roles

    s, clip = lookahead.settings(cfg)
    loss = lookahead.loss_settings(cfg, "jsd", clip)
    step_rows, measure_rows = lookahead.split(store.read_table(out, "rollouts"))
    initial = lookahead.measure_initial(student, measure_rows, tok.pad_token_id, s.sampling_temperature)
    per = {}
    for name in ("all", "advantage_top20"):
        stepped, _ = lookahead.take_steps(student, lambda t: Roles(t, None, "external", teacher, None, student),
                                          step_rows, "teacher", loss, None, s, tok.pad_token_id, cfg.scoring.base_view,
                                          mask=TokenMaskSpec(**CANDIDATES[name]).settings())
        per[name] = lookahead.measure(stepped, initial, tok.pad_token_id, s.sampling_temperature, 20, 0,
                                      per_prompt=True)["dll_prompts"]
    return per


def test_report_shows_the_lever_recommendation(diagnosed, capsys):
    from opsd_diag import cli

    _, out = diagnosed
    lv = store.read_json(out / "summary.json")["levers"]
    assert cli.main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("lever recommendation for teacher / jsd"))
    d = lv["recommendation"]["dll"]
    assert f"({lv['recommendation']['setting']})" in line and f"[{d['lo']:+.4f}, {d['hi']:+.4f}]" in line


def test_overview_shows_the_lever_recommendation(diagnosed):
    from test_app import _app, _ok

    _, out = diagnosed
    lv = store.read_json(out / "summary.json")["levers"]
    at = _app(out.parent, out.name)
    _ok(at)
    shown = [m.value for m in at.markdown if "lever recommendation for teacher / jsd" in m.value]
    from app import common

    assert len(shown) == 1 and common.md(f"({lv['recommendation']['setting']})") in shown[0]  # markdown-escaped
    # inside the decision's box (v2's panel, or the v1 rule's when the run has no v2 prediction)
    boxes = [[m.value for m in b.markdown] for b in at.container]  # each container's markdown (subtree)
    assert any(any("lever recommendation" in v for v in b) and any(v.startswith("#### ") for v in b) for b in boxes)


def test_train_form_is_prefilled_with_the_lever_recommendation(diagnosed):
    """The Train form's token mask starts at the diagnosis' recommendation for (teacher, jsd); the command and the
    config it shows train with that mask in full, and ``opsd-train --token-mask`` resolves to the same section."""
    from test_app import _app, _ok

    from opsd_diag.config import training as train_config
    from opsd_diag.config.levers import CANDIDATES, TokenMaskSpec, named_mask
    from trainer import cli as train_cli

    cfg, out = diagnosed
    rec = store.read_json(out / "summary.json")["levers"]["recommendation"]["setting"]
    at = _app(out.parent, out.name)
    at.session_state["train_this"] = {"run": str(out), "config": "teacher", "signal": "jsd"}  # "Train this" on jsd
    at.switch_page("views/train.py").run()
    _ok(at)
    assert at.selectbox(key="tt_mask-teacher-jsd").value == rec
    assert any(f"--token-mask {rec}" in c.value for c in at.code)  # the exact command
    assert any("Token mask pre-filled with the diagnosis' lever recommendation" in c.value for c in at.caption)
    # the named mask is a whole section (it replaces a config's own mask), and the CLI takes every name
    for name, kw in CANDIDATES.items():
        assert named_mask(name) == TokenMaskSpec(**kw).model_dump()
        assert train_cli.parser().parse_args(["--token-mask", name]).token_mask == name
    before = train_config.with_training(cfg, {"token_mask": {"kind": "entropy", "entropy_quantiles": [0.0, 0.5]}}, "t")
    after = train_config.with_training(before, {"token_mask": named_mask(rec)}, "t")
    assert after.training.token_mask.model_dump() == named_mask(rec)


def test_node_alignment_equals_an_explicit_loop():
    import numpy as np
    import pandas as pd

    rows = pd.DataFrame({"rollout_id": [4, 7, 9], "completion_ids": [[1, 2, 3], [5, 6], [7, 8, 9, 10]]})
    flags = {"a": torch.tensor([True, False, True, True, False, False, True, True, False]),
             "b": torch.ones(9, dtype=torch.bool)}
    nodes = pd.DataFrame({"rollout_id": [4, 4, 7, 9, 9, 9], "pos": [0, 1, 0, 1, 2, 3],
                          "problem_id": ["p", "p", "q", "r", "r", "r"],
                          "align_jsd": [0.5, -0.2, float("nan"), 0.9, 0.1, -0.4]})
    got = levers.node_alignment(nodes, rows, flags, "jsd", 50, 0)
    offset = {4: 0, 7: 3, 9: 5}
    for name, f in flags.items():
        vals = [a for r, p, a in zip(nodes["rollout_id"], nodes["pos"], nodes["align_jsd"])
                if bool(f[offset[r] + p]) and not math.isnan(a)]
        assert got[name]["estimate"] == pytest.approx(sum(vals) / len(vals), abs=1e-12)
        assert got[name]["n_nodes"] == len(vals)
        assert got[name]["lo"] <= got[name]["estimate"] <= got[name]["hi"]


def test_alignment_on_kept_tokens_follows_the_masks_float64_reference(diagnosed, tmp_path, capsys):
    """Nodes at real positions of the run (alignment values planted): each mask's alignment is the mean over the
    nodes a float64 per-rollout reference keeps, on rollouts of both halves; shown by Run.levers() and the report."""
    import shutil

    import numpy as np
    import pandas as pd

    from opsd_diag.io.models import load_spec
    from opsd_diag.run import Run

    cfg, src = diagnosed
    out = tmp_path / "run"
    shutil.copytree(src, out)
    rollouts = store.read_table(out, "rollouts")
    rng = np.random.default_rng(5)
    picked = rollouts[rollouts["length"] > 0].iloc[::2]  # every other rollout: both halves
    nodes = pd.DataFrame([{"node_id": i, "config": "teacher", "rollout_id": int(r.rollout_id), "pos": int(p),
                           "token_id": int(r.completion_ids[p]), "cand_ids": [int(r.completion_ids[p])],
                           "problem_id": r.problem_id, "align_jsd": float(rng.uniform(-1, 1))}
                          for i, (_, r) in enumerate(picked.iterrows()) for p in range(int(r.length))])
    store.write_table(out, "nodes", nodes)
    tok, student = load_spec(cfg.student, "cpu")
    _, teacher = load_spec(cfg.student.model_copy(update={"model": cfg.teachers[0].model}), "cpu")
    _, base = load_spec(cfg.base, "cpu")
    levers.for_diagnosis(out, cfg, student, {"teacher": teacher}, base, tok, [], lookahead)
    lv = store.read_json(out / "summary.json")["levers"]
    rows = picked.sort_values("rollout_id")
    scores, _, lengths, correct = _reference_scores(cfg, rows)
    flat = [(int(r), p) for r, L in zip(rows["rollout_id"], lengths) for p in range(L)]
    for name, kw in levers.CANDIDATES.items():
        if kw.get("kind") == "confident_disagreement":
            continue
        kept = dict(zip(flat, _ref_kept(cfg, kw, scores, lengths, correct, rows)))
        vals = [a for r, p, a in zip(nodes["rollout_id"], nodes["pos"], nodes["align_jsd"]) if kept[(r, p)]]
        got = lv["settings"][name]["alignment"]
        if vals:
            assert got["estimate"] == pytest.approx(sum(vals) / len(vals), abs=1e-12), name
        else:
            assert got["estimate"] is None or math.isnan(got["estimate"]), name
    assert lv["settings"]["all"]["alignment"]["n_nodes"] == len(nodes)
    frame = Run.load(out).levers()
    assert frame["alignment"].tolist() == pytest.approx(
        [math.nan if (e := lv["settings"][s]["alignment"]["estimate"]) is None else e for s in levers.CANDIDATES],
        nan_ok=True)
    from opsd_diag import cli

    assert cli.main(["report", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("lever recommendation"))
    kept = lv["settings"][lv["recommendation"]["setting"]]["alignment"]["estimate"]
    every = lv["settings"]["all"]["alignment"]["estimate"]
    assert kept is None or f"signal alignment on its kept tokens {kept:+.3f} (all tokens {every:+.3f})" in line


def test_export_writes_the_lever_table(diagnosed, tmp_path):
    import pandas as pd

    from opsd_diag.run import Run

    _, out = diagnosed
    run = Run.load(out)
    assert "levers" in run.table_names()
    files = run.export(tmp_path / "export", table_format="csv", figure_format="html")
    assert tmp_path / "export" / "levers.csv" in files
    got = pd.read_csv(tmp_path / "export" / "levers.csv")
    assert list(got["setting"]) == list(run.levers()["setting"])
    assert got["kept_share"].tolist() == pytest.approx(run.levers()["kept_share"].tolist())


def test_a_surprising_mask_is_not_looked_ahead_on_rollouts_without_sampler_log_probs(diagnosed):
    """Rollouts read from a file without log-probs (or sampled by vLLM) cannot rank rollouts by surprisal: that
    candidate is left out with the reason, in the summary and the report's lines; the others are looked ahead."""
    from opsd_diag import levers as lever_view
    from opsd_diag.io.models import load_spec

    cfg, out = diagnosed
    tok, student = load_spec(cfg.student, "cpu")
    _, teacher = load_spec(cfg.student.model_copy(update={"model": cfg.teachers[0].model}), "cpu")
    rollouts = store.read_table(out, "rollouts").drop(columns=["sampler_logprobs"])
    lv = levers.run(cfg, student, teacher, None, rollouts, "teacher", "jsd", tok.pad_token_id, lookahead)
    skipped = [k for k, v in levers.CANDIDATES.items() if v.get("rollouts") == "surprising"]
    assert skipped and set(lv["not_run"]) == set(skipped) and "no sampler log-probs" in lv["not_run"][skipped[0]]
    assert set(lv["settings"]) == set(levers.CANDIDATES) - set(skipped)
    assert lv["recommendation"]["setting"] in lv["settings"]
    assert any(line.startswith(f"not looked ahead: {skipped[0]}: ") for line in lever_view.text(lv))
