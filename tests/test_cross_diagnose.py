"""A diagnosis with a teacher of another tokenizer, end to end, against a float64 full-forward reference."""

from __future__ import annotations

import functools
import json
import math
import shutil

import pandas as pd
import pytest
import torch
from conftest import REPO, ZOO, tiny_config, write_jsonl
from fixtures_crosstok import build_other_family
from transformers import AutoModelForCausalLM, AutoTokenizer

from opsd_diag import cli
from opsd_diag.engine.cross_scoring import SPAN_COLUMNS
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.errors import OpsdError
from opsd_diag.config.spec import from_dict
from opsd_diag.io.retokenize import retokenize
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.zoo import task

pytestmark = pytest.mark.slow  # runs models end to end

CROSS_COLUMNS = ("lp_s", "lp_t", "lp_b", "r_opd", "r_delta", "a_ex", "h_s", "h_t", "h_b", "rank_t", "uld")


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    root = tmp_path_factory.mktemp("family")
    teacher, base = build_other_family(root)
    return {"teacher": teacher, "base": base, "data": write_jsonl(root / "p.jsonl", task.generate(4, 11))}


def run(cfg: dict, out) -> tuple[pd.DataFrame, pd.DataFrame]:
    shutil.rmtree(out, ignore_errors=True)
    run_diagnosis(from_dict(cfg), out, show_progress=False)
    return pd.read_parquet(out / "tokens.parquet"), pd.read_parquet(out / "rollouts.parquet")


@functools.lru_cache(maxsize=4)
def float64_model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir).double().eval()


def ref_logprobs(model_dir, prompt: list[int], completion: list[int], tau: float) -> torch.Tensor:
    """float64 log-softmax of one plain forward over prompt + completion, at the completion positions."""
    model = float64_model(model_dir)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) + len(completion) - 1]  # [n, V]
    return torch.log_softmax(logits.double() / tau, -1)


def ref_uld(lp, lq) -> float:
    p = sorted(math.exp(x) for x in lp.tolist())[::-1]
    q = sorted(math.exp(x) for x in lq.tolist())[::-1]
    width = max(len(p), len(q))
    p, q = p + [0.0] * (width - len(p)), q + [0.0] * (width - len(q))
    return sum(abs(a - b) for a, b in zip(p, q))


def check_rows(tokens, rollouts, name, student_dir, teacher_dir, base_dir, base_side, ref, lam=1.25, tau=1.0,
               stop=None):
    """Every span row of ``name`` recomputed with explicit loops over float64 full forwards (a row cut short,
    ``Retokenized.n_student``, up to its cut; ``base_dir`` None: a run without a base, its columns NaN)."""
    s_tok, t_tok = AutoTokenizer.from_pretrained(student_dir), AutoTokenizer.from_pretrained(teacher_dir)
    stop = stop if stop is not None else [s_tok.convert_tokens_to_ids("<|im_end|>"), s_tok.pad_token_id]
    rows = tokens[tokens.config == name]
    checked = 0
    for _, r in rollouts.iterrows():
        if r[f"left_out.{name}"] or not r["length"]:
            assert not (rows.rollout_id == r["rollout_id"]).any()
            continue
        got = rows[rows.rollout_id == r["rollout_id"]].sort_values("pos")
        comp = [int(t) for t in r["completion_ids"]]
        al = retokenize(comp, s_tok, t_tok, stop, t_tok.eos_token_id)
        n = al.n_student  # the whole completion unless it was cut
        text = s_tok.decode([t for t in comp[:n] if t not in stop])
        assert al.teacher_ids[:len(al.teacher_ids) - al.stopped] == t_tok(text, add_special_tokens=False)["input_ids"]
        assert "".join(got.token) == s_tok.decode(comp[:n]) and got.span_len.sum() == n
        lps = ref_logprobs(student_dir, list(r["prompt_ids.student"]), comp, tau)
        lpt = ref_logprobs(teacher_dir, list(r[f"prompt_ids.{name}"]), al.teacher_ids, tau)
        if base_dir is None:  # no base: its columns are NaN (checked below)
            lpb, b_ids, b_spans = lps, comp, al.spans.student
        elif base_side == "student":  # the base after the student's prompt (scoring.base_view: student)
            lpb = ref_logprobs(base_dir, list(r["prompt_ids.student"]), comp, tau)
            b_ids, b_spans = comp, al.spans.student
        else:  # a base of the teacher's family after the teacher's prompt (base_view: teacher)
            lpb = ref_logprobs(base_dir, list(r[f"prompt_ids.{name}"]), al.teacher_ids, tau)
            b_ids, b_spans = al.teacher_ids, al.spans.teacher
        for j, ((s_lo, s_hi), (t_lo, t_hi), (b_lo, b_hi)) in enumerate(zip(al.spans.student, al.spans.teacher,
                                                                               b_spans)):
            lp_s = sum(float(lps[i, comp[i]]) for i in range(s_lo, s_hi))
            lp_t = sum(float(lpt[i, al.teacher_ids[i]]) for i in range(t_lo, t_hi))
            lp_b = sum(float(lpb[i, b_ids[i]]) for i in range(b_lo, b_hi))
            lp_r = lp_b if ref == "base" else lp_s
            want = {"lp_s": lp_s, "lp_t": lp_t, "lp_b": lp_b, "r_opd": lp_t - lp_s, "r_delta": lp_t - lp_b,
                    "a_ex": lam * (lp_t - lp_r) - (lp_s - lp_r),
                    "h_s": -float((lps[s_lo].exp() * lps[s_lo]).sum()), "h_t": -float((lpt[t_lo].exp() * lpt[t_lo]).sum()),
                    "h_b": -float((lpb[b_lo].exp() * lpb[b_lo]).sum()),
                    "rank_t": float((lpt[t_lo] > lpt[t_lo, al.teacher_ids[t_lo]]).sum()),
                    "uld": ref_uld(lps[s_lo], lpt[t_lo])}
            row = got.iloc[j]
            assert row.pos == s_lo and row.span_len == s_hi - s_lo
            assert list(row.teacher_tokens) == [t_tok.decode([t]) for t in al.teacher_ids[t_lo:t_hi]]
            for c in CROSS_COLUMNS:
                if base_dir is None and c in ("lp_b", "r_delta", "h_b"):
                    assert math.isnan(row[c]), c
                    continue
                assert row[c] == pytest.approx(want[c], rel=1e-4, abs=1e-4), (c, j)
            for c in ("kl_rev", "kl_fwd", "jsd", "a_opd", "a_delta", "gate", "a_d2", "top1_agree", "teachability",
                      "topk_overlap"):
                assert math.isnan(row[c])
            top_v, top_i = lpt[t_lo].topk(5)  # the teacher's top-k there, its own pieces as text
            assert list(row.teacher_topk) == [t_tok.decode([t]) for t in top_i.tolist()], j
            assert list(row.teacher_topk_lp) == pytest.approx(top_v.tolist(), abs=1e-4)
            checked += 1
    return checked


def test_cross_teacher_beside_same_tokenizer_configs(family, tmp_path):
    cfg = tiny_config(ZOO, family["data"])
    before, before_r = run(cfg, tmp_path / "today")
    cfg["teachers"].append({"name": "xt", "model": str(family["teacher"]), "context": "full_solution"})
    tokens, rollouts = run(cfg, tmp_path / "cross")
    # the same-tokenizer configs give exactly today's numbers, in the same run
    same = tokens[tokens.config != "xt"].drop(columns=list(SPAN_COLUMNS)).reset_index(drop=True)
    pd.testing.assert_frame_equal(same, before.reset_index(drop=True))
    assert (rollouts.completion_ids.map(list) == before_r.completion_ids.map(list)).all()
    assert (rollouts["left_out.xt"] == "").mean() > 0.5
    summary = json.loads((tmp_path / "cross" / "summary.json").read_text())
    assert summary["left_out"]["xt"]["rollouts"] == int((rollouts["left_out.xt"] != "").sum())
    for c in ("teachability", "topk_overlap"):  # one vocabulary only: not available for xt, measured beside it
        assert summary["configs"]["xt"]["overall"]["columns"][c]["mean"] is None
        assert summary["configs"]["teacher"]["overall"]["columns"][c]["mean"] is not None
    assert summary["left_out"]["xt"]["of"] == len(rollouts) and "left_out" not in json.loads(
        (tmp_path / "today" / "summary.json").read_text())
    spans = tokens[tokens.config == "xt"]
    assert (spans.span_len > 1).any() and (spans.teacher_tokens.map(len) > 1).any()  # splits differ both ways
    assert check_rows(tokens, rollouts, "xt", ZOO / "student", family["teacher"], ZOO / "base", "student", "student") > 20
    # the app's token page stacks a span heatmap (the teacher's pieces in its tooltips) under a token one
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=120)
    at.session_state["runs_root"], at.session_state["run_dir"] = str(tmp_path), str(tmp_path / "cross")
    at = at.run().switch_page("views/tokens.py").run()
    at.multiselect(key="tok_configs").set_value(["teacher", "xt"]).run()
    at.selectbox(key="tt_config").select("xt").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert at.html[0].value.count("class='opsd-hm'") == 2 and "teacher tokens" in at.html[0].value
    # the predictor, run later on this diagnosis, judges the cross config too (tests/test_cross_predictor.py)
    assert cli.main(["predict", str(tmp_path / "cross"), "--budget", "40", "--k", "1", "--m", "1"]) == 0
    nodes = pd.read_parquet(tmp_path / "cross" / "nodes.parquet")
    assert set(nodes.config) == {"teacher", "self_full", "xt"}


def test_cross_teacher_with_a_base_of_its_family(family, tmp_path):
    cfg = tiny_config(ZOO, family["data"], base={"model": str(family["base"])},
                      teachers=[{"name": "xt", "model": str(family["teacher"]), "context": "answer_only"}],
                      scoring={"batch_size": 3, "chunk_size": 5, "exopd_reference": "base", "base_view": "teacher"})
    tokens, rollouts = run(cfg, tmp_path / "run")
    assert set(SIGNAL_COLUMNS) <= set(tokens.columns)
    assert check_rows(tokens, rollouts, "xt", ZOO / "student", family["teacher"], family["base"], "teacher", "base") > 20


@pytest.mark.parametrize("change,message", [
    ({"base_family": True}, "has another tokenizer than the student"),
])
def test_what_is_not_supported_is_refused_in_one_line(family, tmp_path, change, message):
    cfg = tiny_config(ZOO, family["data"])
    cfg["teachers"].append({"name": "xt", "model": str(family["teacher"])})
    if change.pop("base_family", False):
        cfg["base"] = {"model": str(family["base"])}
    cfg.update(change)
    with pytest.raises(OpsdError, match=message) as e:
        run_diagnosis(from_dict(cfg), tmp_path / "run", show_progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()
