"""Scoring: positions line up, padding/batching/chunking change nothing, EOS rules, truncation."""

import numpy as np
import pytest
import torch
from compare import assert_topk_close, rank_bounds

from opsd_diag.engine.sampling import trim_completion
from opsd_diag.engine.scoring import TeacherInput, score_batch
from opsd_diag.errors import OpsdError
from opsd_diag.io.models import load_model, load_tokenizer
from opsd_diag.io.views import encode_chat, student_view, teacher_view
from opsd_diag.core.signals import COMPAT_K
from opsd_diag.schema import SIGNAL_COLUMNS as COLUMNS
from opsd_diag.config.settings import ScoreSettings
from opsd_diag.zoo import task

TIE = 1e-5  # log-probs closer than this may order either way on another CPU (docs/design.md, conventions)


@pytest.fixture(scope="module")
def world(ci_zoo):
    tok = load_tokenizer(str(ci_zoo / "student"))
    return {"tok": tok, **{r: load_model(str(ci_zoo / r)) for r in ("student", "teacher", "base")}}


def _problems(n=4):
    return task.generate(n, 3)


def _rollouts(world, problems, lengths=(5, 9, 1, 7)):
    g = torch.Generator().manual_seed(0)
    V = world["student"].config.vocab_size
    return [torch.randint(3, V, (n,), generator=g).tolist() for n in lengths[:len(problems)]]


def settings(**kw) -> ScoreSettings:
    return ScoreSettings(**{"temperature": 0.9, "jsd_beta": 0.5, "centering": None, "exopd_lambda": 1.25,
                            "exopd_reference": "student", "top_k": 3, "chunk_size": 4, **kw})


def _score(world, problems, comps, s=None, base=True):
    tok = world["tok"]
    s = s or settings()
    sp = [student_view(tok, p).ids for p in problems]
    teachers = {"teacher": TeacherInput(world["teacher"], sp),
                "self_full": TeacherInput(world["student"], [teacher_view(tok, p, "full_solution").ids for p in problems])}
    return score_batch(world["student"], comps, sp, teachers, s, tok.pad_token_id,
                       base=world["base"] if base else None, base_prompts=sp if base else None)


def _reference(model, prompt, completion, temperature):
    """Float64 log-softmax of an unpadded single-row forward: row j predicts completion token j."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].double() / temperature
    return torch.log_softmax(logits, -1)


def test_signals_match_unpadded_float64_reference(world):
    probs = _problems()
    comps = _rollouts(world, probs)
    tokens, topk = _score(world, probs, comps)
    tok, T = world["tok"], 0.9
    compat_checked = 0
    for i, (p, c) in enumerate(zip(probs, comps)):
        sp = student_view(tok, p).ids
        tp = teacher_view(tok, p, "full_solution").ids
        ls = _reference(world["student"], sp, c, T)
        lb = _reference(world["base"], sp, c, T)
        for name, lt in (("teacher", _reference(world["teacher"], sp, c, T)),
                         ("self_full", _reference(world["student"], tp, c, T))):
            got = {k: v[tokens[name]["row"] == i] for k, v in tokens[name].items()}
            for j, y in enumerate(c):
                p_, q_, b_ = ls[j].exp(), lt[j].exp(), lb[j].exp()
                lp_s, lp_t, lp_b = ls[j, y].item(), lt[j, y].item(), lb[j, y].item()
                kl_rev = float((p_ * (ls[j] - lt[j])).sum())
                a_opd = (lp_t - lp_s) - float((p_ * (lt[j] - ls[j])).sum())
                a_delta = (lp_t - lp_b) - float((p_ * (lt[j] - lb[j])).sum())
                expect = {"lp_s": lp_s, "lp_t": lp_t, "lp_b": lp_b, "r_opd": lp_t - lp_s, "r_delta": lp_t - lp_b,
                          "kl_rev": kl_rev, "kl_fwd": float((q_ * (lt[j] - ls[j])).sum()), "a_opd": a_opd,
                          "a_delta": a_delta, "a_d2": a_delta * (a_delta * a_opd > 0), "a_ex": 1.25 * (lp_t - lp_s),
                          "h_s": float(-(p_ * ls[j]).sum()), "h_t": float(-(q_ * lt[j]).sum()),
                          "h_b": float(-(b_ * lb[j]).sum())}
                for k, v in expect.items():
                    assert got[k][j] == pytest.approx(v, abs=2e-4), (name, i, j, k)
                # counts and argmaxes of floats: exact unless two log-probs tie within float32 noise
                lo, hi = rank_bounds(lt[j], y, TIE)
                assert lo <= got["rank_t"][j] <= hi, (name, i, j, "rank_t")
                s_top, t_top = (set(np.flatnonzero((r >= r.max() - TIE).numpy())) for r in (ls[j], lt[j]))
                if len(s_top) == len(t_top) == 1:
                    assert got["top1_agree"][j] == float(s_top == t_top), (name, i, j, "top1_agree")
                # the top-5 sets, from float64 sorting: exact unless the 5th and 6th log-probs tie within noise
                s5, t5 = (r.sort(descending=True) for r in (ls[j], lt[j]))
                if all(float(v.values[COMPAT_K - 1] - v.values[COMPAT_K]) > TIE for v in (s5, t5)):
                    top_s, top_t = set(s5.indices[:COMPAT_K].tolist()), set(t5.indices[:COMPAT_K].tolist())
                    assert got["teachability"][j] == pytest.approx(float(q_[list(top_s)].sum()), abs=2e-4)
                    assert got["topk_overlap"][j] == len(top_s & top_t) / COMPAT_K, (name, i, j, "topk_overlap")
                    compat_checked += 1
                assert got["pos"][j] == j
    assert compat_checked >= sum(len(c) for c in comps)  # a near tie at every position would check nothing
    # top-k: the student's best alternatives at each position
    vals, ids = topk["student"]
    ls0 = _reference(world["student"], student_view(tok, probs[0]).ids, comps[0], T)
    ref = ls0[0].topk(3)
    assert_topk_close(ref.values.numpy()[None], ref.indices.numpy()[None], vals[:1], ids[:1], rtol=0, atol=2e-4)


def test_padding_batch_composition_and_chunking_do_not_matter(world):
    probs = _problems()
    comps = _rollouts(world, probs)
    together, _ = _score(world, probs, comps)
    for i in range(len(probs)):
        alone, _ = _score(world, [probs[i]], [comps[i]],
                          settings(chunk_size=1 + i * 5))
        for name in together:
            sel = together[name]["row"] == i
            for c in COLUMNS:
                np.testing.assert_allclose(alone[name][c], together[name][c][sel], atol=2e-5, err_msg=f"{name} {c}")
    reordered, _ = _score(world, probs[::-1], comps[::-1])
    for name in together:
        n_last = len(comps[-1])
        np.testing.assert_allclose(reordered[name]["lp_t"][:n_last],
                                   together[name]["lp_t"][together[name]["row"] == len(comps) - 1], atol=2e-5)


def test_without_base_columns_are_nan(world):
    probs = _problems(2)
    tokens, _ = _score(world, probs, _rollouts(world, probs), base=False)
    assert np.isnan(tokens["teacher"]["lp_b"]).all() and np.isnan(tokens["teacher"]["a_d2"]).all()
    assert np.isfinite(tokens["teacher"]["a_opd"]).all()


def test_eos_rules():
    assert trim_completion([5, 6, 2, 7, 2], [2]) == ([5, 6, 2], True)       # first EOS kept, rest dropped
    assert trim_completion([5, 9, 6, 2], [2, 9]) == ([5, 9], True)          # several stop ids
    assert trim_completion([5, 6, 7], [2]) == ([5, 6, 7], False)            # truncated: no EOS, all scored


def test_pad_equals_eos_scores_the_eos_token(world):
    probs = _problems(2)
    eos = world["tok"].pad_token_id
    comps = [[7, 8, eos], [9, eos]]
    tokens, _ = _score(world, probs, comps)
    assert len(tokens["teacher"]["lp_s"]) == 5 and np.isfinite(tokens["teacher"]["lp_s"]).all()


def test_context_truncation_keeps_question(world):
    tok = world["tok"]
    p = task.generate(1, 9, levels=(4,))[0]
    full = teacher_view(tok, p, "full_solution")
    plain = student_view(tok, p).ids
    short = teacher_view(tok, p, "full_solution", max_length=len(full.ids) - 10)
    assert not full.context_truncated and short.context_truncated
    assert len(short.ids) <= len(full.ids) - 10
    text = tok.decode(short.ids)
    assert p["prompt"] in text and p["solution"] not in text
    with pytest.raises(OpsdError, match="max_prompt_length"):
        teacher_view(tok, p, "full_solution", max_length=len(plain) - 1)


def test_chat_template_adds_special_tokens_once(world):
    tok = world["tok"]
    ids = encode_chat(tok, [{"role": "user", "content": "hi"}])
    start = tok.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(start) == 2 and ids[0] == start   # user turn + generation prompt, nothing added twice
