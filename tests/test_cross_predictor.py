"""The ideal-gradient predictor with a teacher of another tokenizer (docs/signals.md, the predictor across
vocabularies), against float64 references; and the same-tokenizer case through the cross path."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ZOO, tiny_config, write_jsonl
from fixtures_crosstok import build_model_dir, build_other_family, corpus, teacher_tokenizer
from test_cross_diagnose import ref_logprobs
from transformers import AutoModelForCausalLM, AutoTokenizer

from opsd_diag.engine import setup
from opsd_diag.engine.cross_nodes import candidate_logprobs, mapped_topk, plan_rows
from opsd_diag.engine.cross_scoring import CrossTeacher
from opsd_diag.engine.diagnose import run_diagnosis
from opsd_diag.config.spec import from_dict
from opsd_diag.io.retokenize import candidate_teacher_ids, special_ids, teacher_candidate_student_id
from opsd_diag.zoo import task

S_TOK = AutoTokenizer.from_pretrained(ZOO / "student")
STOP = [S_TOK.convert_tokens_to_ids("<|im_end|>"), S_TOK.pad_token_id]


@pytest.fixture(scope="module")
def t_tok():
    return teacher_tokenizer(corpus())


def spelled(tok, ids):
    return [tok.decode([i]) for i in ids]


def test_candidates_map_by_their_text_both_ways(t_tok):
    eos = t_tok.eos_token_id
    # a word of one student token and three teacher tokens: the teacher's own spelling of it
    one_three = [i for i in range(len(S_TOK)) if len(candidate_teacher_ids(i, S_TOK, t_tok, STOP, eos) or ()) == 3]
    assert one_three
    for c in one_three:
        ids = candidate_teacher_ids(c, S_TOK, t_tok, STOP, eos)
        assert ids == t_tok(S_TOK.decode([c]), add_special_tokens=False)["input_ids"]
        assert "".join(spelled(t_tok, ids)) == S_TOK.decode([c])
    # the reverse, a teacher token of three student tokens, proposes no student candidate
    three_one = [i for i in range(len(t_tok)) if i not in special_ids(t_tok) and "\ufffd" not in t_tok.decode([i])
                 and len(S_TOK(t_tok.decode([i]), add_special_tokens=False)["input_ids"]) == 3]
    assert three_one and all(teacher_candidate_student_id(i, t_tok, S_TOK, STOP, eos) is None for i in three_one)
    # a teacher token the student spells as one token proposes it
    for i in range(len(t_tok)):
        c = teacher_candidate_student_id(i, t_tok, S_TOK, STOP, eos)
        if c is not None and i not in special_ids(t_tok):
            assert S_TOK.decode([c]) == t_tok.decode([i])
    # stop ids end the teacher's turn; other specials and byte fragments have no text to spell
    assert candidate_teacher_ids(STOP[0], S_TOK, t_tok, STOP, eos) == [eos]
    assert teacher_candidate_student_id(eos, t_tok, S_TOK, STOP, eos) == STOP[0]
    assert candidate_teacher_ids(S_TOK.convert_tokens_to_ids("<|im_start|>"), S_TOK, t_tok, STOP, eos) is None
    assert teacher_candidate_student_id(t_tok.pad_token_id, t_tok, S_TOK, STOP, eos) is None
    fragments = [i for i in range(len(S_TOK)) if "\ufffd" in S_TOK.decode([i])]
    assert fragments and all(candidate_teacher_ids(i, S_TOK, t_tok, STOP, eos) is None for i in fragments)
    # with the student's own tokenizer both maps are the identity on every text token
    texts = [i for i in range(len(S_TOK)) if i not in special_ids(S_TOK) and "\ufffd" not in S_TOK.decode([i])]
    assert all(candidate_teacher_ids(i, S_TOK, S_TOK, STOP, S_TOK.eos_token_id) == [i] for i in texts)
    assert all(teacher_candidate_student_id(i, S_TOK, S_TOK, STOP, S_TOK.eos_token_id) == i for i in texts)


def test_plan_rows_keep_one_token_spans_of_every_cross_config():
    tokens = pd.DataFrame({"config": ["a"] * 4 + ["x"] * 3 + ["y"] * 2, "rollout_id": [0] * 9,
                           "pos": [0, 1, 2, 3, 0, 1, 3, 0, 3], "span_len": [np.nan] * 4 + [1, 2, 1, 3, 1],
                           "h_s": [0.1, 0.2, 0.3, 0.4, 0.1, 0.2, 0.4, 0.1, 0.4]})
    assert plan_rows(tokens, ["a", "x"], ["x"])["pos"].tolist() == [0, 3]
    assert plan_rows(tokens, ["a", "x", "y"], ["x", "y"])["pos"].tolist() == [3]
    assert plan_rows(tokens, ["x", "a"], ["x"])["pos"].tolist() == [0, 3]
    assert plan_rows(tokens, ["a"], [])["pos"].tolist() == [0, 1, 2, 3]


@pytest.mark.slow
def test_candidate_logprobs_match_float64_forwards(t_tok, tmp_path):
    t_dir = build_model_dir(tmp_path / "t", t_tok, seed=5)
    model = AutoModelForCausalLM.from_pretrained(t_dir).eval()  # float32, as the predictor runs it
    ct = CrossTeacher(t_tok, [t_tok.eos_token_id], t_tok.eos_token_id, None)
    prompt = t_tok("<|begin_of_text|>Q: 12+7?", add_special_tokens=False)["input_ids"]
    prefix = t_tok("Step 1:", add_special_tokens=False)["input_ids"]
    eos = t_tok.eos_token_id
    multi = [i for i in range(len(S_TOK)) if len(candidate_teacher_ids(i, S_TOK, t_tok, STOP, eos) or ()) == 3][:3]
    cands = [*multi, S_TOK.convert_tokens_to_ids("<|im_start|>"), STOP[0],
             *(i for i in range(len(S_TOK)) if len(candidate_teacher_ids(i, S_TOK, t_tok, STOP, eos) or ()) == 1)][:8]
    node = ref_logprobs(t_dir, prompt, prefix + [0], 1.3)[len(prefix)].float()  # the node's next-token row
    got = candidate_logprobs(model, ct, S_TOK, STOP, prompt, prefix, node, cands, 1.3)
    for c, g in zip(cands, got):
        ids = candidate_teacher_ids(c, S_TOK, t_tok, STOP, eos)
        if ids is None:
            assert math.isnan(g)
            continue
        lp = ref_logprobs(t_dir, prompt, prefix + ids, 1.3)  # float64, one plain forward, explicit loop
        want = sum(float(lp[len(prefix) + i, ids[i]]) for i in range(len(ids)))
        assert g == pytest.approx(want, abs=1e-4)
    assert math.isnan(got[3]) and np.isfinite(got[:3]).all()
    # the teacher's top-k as student candidates: the ones it spells as one student token
    top = node.topk(6).indices.tolist()
    assert mapped_topk(node, 6, ct, S_TOK, STOP, prefix) == [c for c in (
        teacher_candidate_student_id(t, t_tok, S_TOK, STOP, eos, prefix[-1:]) for t in top) if c is not None]


def predictor_config(root) -> dict:
    data = write_jsonl(root / "p.jsonl", task.generate(4, 11))
    return tiny_config(ZOO, data, sampling={"max_completion_length": 14},
                       ideal={"budget": 400, "k": 2, "m": 2, "seed": 3})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("xpred")
    teacher, _ = build_other_family(root)
    cfg = predictor_config(root)
    cfg["teachers"].append({"name": "xt", "model": str(teacher), "context": "full_solution"})
    run_diagnosis(from_dict(cfg), root / "cross", show_progress=False)
    return {"root": root, "teacher": teacher}


def _table(run_dir, name):
    return pd.read_parquet(run_dir / f"{name}.parquet")


@pytest.mark.slow
def test_cross_predictor_matches_a_float64_reference(runs):
    run_dir, t_dir = runs["root"] / "cross", runs["teacher"]
    t_tok = AutoTokenizer.from_pretrained(t_dir)
    nodes, tokens, rollouts = _table(run_dir, "nodes"), _table(run_dir, "tokens"), _table(run_dir, "rollouts")
    xt_spans = tokens[tokens.config == "xt"].set_index(["rollout_id", "pos"])
    assert (xt_spans.span_len > 1).any()  # spans of several student tokens exist, and get no node
    ro = rollouts.set_index("rollout_id")
    checked = multi = 0
    union = nodes[nodes.config == "teacher"].set_index("node_id").cand_ids
    for _, n in nodes[nodes.config == "xt"].iterrows():
        rid, pos = int(n.rollout_id), int(n.pos)
        assert xt_spans.loc[(rid, pos), "span_len"] == 1
        r = ro.loc[rid]
        comp = [int(t) for t in r["completion_ids"]]
        body = comp[:-1] if comp[-1] in STOP else comp
        text = S_TOK.decode(body)
        at = len(S_TOK.decode(comp[:pos]))  # the node's character position
        enc = t_tok(text, add_special_tokens=False, return_offsets_mapping=True)
        prefix_t = [i for i, (_, b) in zip(enc["input_ids"], enc["offset_mapping"]) if b <= at]
        assert "".join(t_tok.decode([i]) for i in prefix_t) == text[:at]  # a boundary of the teacher's tokens
        # the union's candidates the teacher cannot spell are exactly the ones left out of its K
        assert n.cand_ids.tolist() == [c for c in union[n.node_id].tolist() if candidate_teacher_ids(
            c, S_TOK, t_tok, STOP, t_tok.eos_token_id, prefix_t[-1:]) is not None]
        lq = []
        for c in n.cand_ids:
            ids = [t_tok.eos_token_id] if c in STOP else t_tok(S_TOK.decode([int(c)]), add_special_tokens=False)[
                "input_ids"]
            lp = ref_logprobs(t_dir, list(r["prompt_ids.xt"]), prefix_t + ids, 1.0)
            lq.append(sum(float(lp[len(prefix_t) + i, ids[i]]) for i in range(len(ids))))
            multi += len(ids) > 1
        lp_s = ref_logprobs(ZOO / "student", list(r["prompt_ids.student"]), comp[:pos + 1], 1.0)[pos]
        ls = [float(lp_s[int(c)]) for c in n.cand_ids]
        log_q, log_p = np.array(lq) - np.logaddexp.reduce(lq), np.array(ls) - np.logaddexp.reduce(ls)
        q, p = np.exp(log_q), np.exp(log_p)
        # in log space: a peaky toy teacher gives some candidates a probability far below any tolerance
        np.testing.assert_allclose(np.log(np.maximum(n.q_tilde, 1e-300)), np.maximum(log_q, math.log(1e-300)),
                                   atol=1e-3)
        np.testing.assert_allclose(np.log(np.maximum(n.p_tilde, 1e-300)), np.maximum(log_p, math.log(1e-300)),
                                   atol=1e-3)
        s = np.array(n.s_hat)
        assert n.A_T == pytest.approx(sum((qk - pk) * sk for qk, pk, sk in zip(q, p, s)), abs=1e-4)
        g = p * (s - p @ s)
        d = p * ((np.log(q) - np.log(p)) - p @ (np.log(q) - np.log(p)))
        if np.linalg.norm(g) > 1e-9:
            assert n.align_rev_kl == pytest.approx(g @ d / (np.linalg.norm(g) * np.linalg.norm(d)), abs=1e-3)
        r_opd = xt_spans.loc[(rid, pos), "r_opd"]  # the span's sampled advantage, one token's here
        assert n.r_opd == pytest.approx(r_opd) and math.isnan(n.a_d2) and math.isnan(n.kl_rev)
        checked += 1
    print("CHECKED", checked, multi)
    assert checked >= 5 and multi >= 1, (checked, multi)
    ideal = json.loads((run_dir / "summary.json").read_text())["ideal"]
    assert "xt" in ideal["configs"] and "cross_tokenizer" in ideal
    assert set(ideal["cross_tokenizer"]["left_out"]) == {"xt"}


@pytest.mark.slow
def test_same_tokenizer_through_the_cross_path_gives_today_numbers(tmp_path, monkeypatch):
    cfg = predictor_config(tmp_path)
    cfg.pop("base")  # a base of the student's family beside configs forced across is refused
    today = tmp_path / "today"
    run_diagnosis(from_dict(cfg), today, show_progress=False)
    real = setup.vocab_fingerprint  # what the one cross-tokenizer planner (setup.plan_cross) compares
    monkeypatch.setattr(setup, "vocab_fingerprint",  # the zoo teacher, of the student's tokenizer, taken across
                        lambda tok: "forced" if str(tok.name_or_path).rstrip("/").endswith("teacher") else real(tok))
    forced = tmp_path / "forced"
    run_diagnosis(from_dict(cfg), forced, show_progress=False)
    spans = _table(forced, "tokens")
    assert (spans[spans.config == "teacher"].span_len == 1).all()  # one span per token: every node is kept
    a, b = _table(today, "nodes"), _table(forced, "nodes")
    assert len(a) == len(b) > 0
    for col in ("node_id", "config", "rollout_id", "pos", "cand_ids", "n_samples", "s_hat"):
        assert a[col].map(lambda v: np.asarray(v).tolist()).tolist() == b[col].map(
            lambda v: np.asarray(v).tolist()).tolist(), col
    same = ["p_tilde", "q_tilde", "V", "V_teacher", "A_T", "p_mass", "q_mass", "g_norm",
            *(f"{m}_{o}" for m in ("align", "gain") for o in ("rev_kl", "fwd_kl", "jsd", "r_opd", "a_ex"))]
    for col in same:
        flat = [np.concatenate([np.atleast_1d(np.asarray(v, dtype=float)) for v in t[col]]) for t in (b, a)]
        np.testing.assert_allclose(*flat, atol=1e-5, err_msg=col)
    # a_d2 and the per-token divergences have no cross-vocabulary form: NaN on the config taken across
    x = b[b.config == "teacher"]
    assert x.align_a_d2.isna().all() and x.kl_rev.isna().all() and not x.align_rev_kl.isna().all()
    assert torch.equal(torch.tensor(a[a.config == "self_full"].align_a_d2.fillna(9).to_numpy()),
                       torch.tensor(b[b.config == "self_full"].align_a_d2.fillna(9).to_numpy()))
