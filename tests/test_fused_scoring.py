"""Fused per-chunk scoring (opsd_diag.engine.fast.fused_scoring) equals engine.scoring.score_batch, on CPU."""

import numpy as np
import pytest
import torch
from compare import assert_topk_close

from opsd_diag.engine.fast import fused_scoring
from opsd_diag.engine.scoring import TeacherInput, score_batch
from opsd_diag.io.models import load_model, load_tokenizer
from opsd_diag.io.views import student_view, teacher_view
from opsd_diag.schema import SIGNAL_COLUMNS as COLUMNS
from opsd_diag.config.settings import ScoreSettings
from opsd_diag.zoo import task


def settings(**kw) -> ScoreSettings:
    return ScoreSettings(**{"temperature": 1.0, "jsd_beta": 0.5, "centering": None, "exopd_lambda": 1.25,
                            "exopd_reference": "student", "top_k": 5, "chunk_size": 128, **kw})


@pytest.fixture(scope="module")
def world(ci_zoo):
    tok = load_tokenizer(str(ci_zoo / "student"))
    return {"tok": tok, **{r: load_model(str(ci_zoo / r)) for r in ("student", "teacher", "base")}}


def _inputs(world, n=4, lengths=(5, 9, 1, 7), base_view_teacher=False):
    tok = world["tok"]
    problems = task.generate(n, 3)
    g = torch.Generator().manual_seed(0)
    V = world["student"].config.vocab_size
    comps = [torch.randint(3, V, (k,), generator=g).tolist() for k in lengths[:n]]
    sp = [student_view(tok, p).ids for p in problems]
    tp = [teacher_view(tok, p, "full_solution").ids for p in problems]
    teachers = {"teacher": TeacherInput(world["teacher"], sp),
                "self_full": TeacherInput(world["student"], tp, tp if base_view_teacher else None)}
    return comps, sp, teachers


def _assert_same(got, ref):
    (got_t, got_k), (ref_t, ref_k) = got, ref
    assert got_t.keys() == ref_t.keys() and got_k.keys() == ref_k.keys()
    for name in ref_t:
        assert set(got_t[name]) == set(ref_t[name]) == {*COLUMNS, "row", "pos"}
        for c in ref_t[name]:
            np.testing.assert_allclose(got_t[name][c], ref_t[name][c], rtol=1e-5, atol=2e-6, err_msg=f"{name} {c}")
    for name in ref_k:
        assert_topk_close(ref_k[name][0], ref_k[name][1], got_k[name][0], got_k[name][1], rtol=1e-5, atol=2e-6)


SETTINGS = [
    settings(temperature=0.9, jsd_beta=0.5, top_k=3, chunk_size=4),  # several chunks, a partial last one
    settings(temperature=1.0, jsd_beta=0.0, exopd_reference="base", top_k=0, chunk_size=7),  # no top-k
    settings(temperature=1.3, jsd_beta=1.0, exopd_lambda=2.0, top_k=5, chunk_size=128),  # one chunk
]


@pytest.mark.parametrize("s", SETTINGS)
@pytest.mark.parametrize("with_base,base_view_teacher", [(True, False), (True, True), (False, False)])
def test_fused_equals_score_batch(world, s, with_base, base_view_teacher):
    comps, sp, teachers = _inputs(world, base_view_teacher=base_view_teacher)
    pad = world["tok"].pad_token_id
    kw = {"base": world["base"], "base_prompts": sp} if with_base else {}
    ref = score_batch(world["student"], comps, sp, teachers, s, pad, **kw)
    got = fused_scoring.score_batch_fused(world["student"], comps, sp, teachers, s, pad, **kw)
    _assert_same(got, ref)
    if not with_base:
        assert np.isnan(got[0]["teacher"]["lp_b"]).all() and np.isfinite(got[0]["teacher"]["a_opd"]).all()


def test_switch_default_and_fallback(world):
    from opsd_diag.config.spec import ScoringSpec

    assert ScoringSpec().engine == "reference" and fused_scoring.pick(score_batch, "reference") is score_batch
    with pytest.raises(ValueError, match="scoring engine"):
        fused_scoring.pick(score_batch, "fast")
    # top-k centring is not fused: the reference runs (and its result comes back unchanged)
    comps, sp, teachers = _inputs(world)
    s = settings(temperature=1.0, centering=3, top_k=2, chunk_size=5)
    pad = world["tok"].pad_token_id
    got = fused_scoring.pick(score_batch, "fused")(world["student"], comps, sp, teachers, s, pad, base=world["base"],
                                          base_prompts=sp)
    _assert_same(got, score_batch(world["student"], comps, sp, teachers, s, pad, base=world["base"],
                                  base_prompts=sp))


@pytest.mark.slow
@pytest.mark.parametrize("s,with_base,base_view_teacher", [(SETTINGS[0], True, True), (SETTINGS[1], False, False)])
def test_compiled_equals_score_batch_for_every_signal_and_compiles_once(world, s, with_base, base_view_teacher):
    """torch.compile(fullgraph=True) of the chunk function: every column and the top-k equal the reference, and one
    graph serves every chunk of a run and a second run of another length (counted by dynamo; one compile per case)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    pad = world["tok"].pad_token_id
    compiled = fused_scoring.pick(score_batch, "compiled")
    for lengths in ((5, 9, 1, 7), (3, 12, 6, 2)):  # 22 and 23 tokens: 6 chunks each, the last one padded
        comps, sp, teachers = _inputs(world, lengths=lengths, base_view_teacher=base_view_teacher)
        kw = {"base": world["base"], "base_prompts": sp} if with_base else {}
        assert -(-sum(lengths) // s.chunk_size) > 1
        ref = score_batch(world["student"], comps, sp, teachers, s, pad, **kw)
        _assert_same(compiled(world["student"], comps, sp, teachers, s, pad, **kw), ref)
        assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])  # no recompile across chunks or runs
