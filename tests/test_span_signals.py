"""core/span_signals.py against a slow float64 reference: explicit loops over spans, tokens and vocabularies."""

from __future__ import annotations

import math

import pytest
import torch

from opsd_diag.core import signals
from opsd_diag.core import span_signals as SS
from opsd_diag.core.align import Spans
from opsd_diag.schema import SIGNAL_COLUMNS

V_S, V_T = 13, 17  # two vocabularies of different sizes
# span 0: one student token, three teacher tokens; span 1: three student tokens, one teacher token;
# span 2: one each; span 3: two student tokens, two teacher tokens
SPANS = Spans(student=((0, 1), (1, 4), (4, 5), (5, 7)), teacher=((0, 3), (3, 4), (4, 5), (5, 7)),
              chars=((0, 4), (4, 9), (9, 10), (10, 14)))
N_S, N_T, S = 7, 7, 4


def ref_log_softmax(row: list[float]) -> list[float]:
    top = max(row)
    norm = top + math.log(sum(math.exp(x - top) for x in row))
    return [x - norm for x in row]


def ref_uld(lp: list[float], lq: list[float]) -> float:
    p = sorted((math.exp(x) for x in lp), reverse=True)
    q = sorted((math.exp(x) for x in lq), reverse=True)
    width = max(len(p), len(q))
    p, q = p + [0.0] * (width - len(p)), q + [0.0] * (width - len(q))
    return sum(abs(p[i] - q[i]) for i in range(width))


def ref_rows(student, teacher, s_ids, t_ids, base=None, ref="student", lam=1.25):
    """Every span column, span by span, in float64."""
    rs = [ref_log_softmax([float(x) for x in row]) for row in student.double()]
    rt = [ref_log_softmax([float(x) for x in row]) for row in teacher.double()]
    rb = None if base is None else [ref_log_softmax([float(x) for x in row]) for row in base.double()]
    out = {k: [] for k in (*SIGNAL_COLUMNS, "uld")}
    for (s_lo, s_hi), (t_lo, t_hi) in zip(SPANS.student, SPANS.teacher):
        lp_s = sum(rs[i][int(s_ids[i])] for i in range(s_lo, s_hi))
        lp_t = sum(rt[i][int(t_ids[i])] for i in range(t_lo, t_hi))
        lp_b = math.nan if rb is None else sum(rb[i][int(t_ids[i])] for i in range(t_lo, t_hi))  # teacher's family
        lp_r = lp_b if ref == "base" else lp_s
        row = {"lp_s": lp_s, "lp_t": lp_t, "lp_b": lp_b, "r_opd": lp_t - lp_s, "r_delta": lp_t - lp_b,
               "a_ex": lam * (lp_t - lp_r) - (lp_s - lp_r),
               "h_s": -sum(math.exp(x) * x for x in rs[s_lo]), "h_t": -sum(math.exp(x) * x for x in rt[t_lo]),
               "h_b": math.nan if rb is None else -sum(math.exp(x) * x for x in rb[t_lo]),
               "rank_t": float(sum(1 for x in rt[t_lo] if x > rt[t_lo][int(t_ids[t_lo])])),
               "uld": ref_uld(rs[s_lo], rt[t_lo])}
        for k in out:
            out[k].append(row.get(k, math.nan))  # the id-by-id columns: not available
    return {k: torch.tensor(v, dtype=torch.float64) for k, v in out.items()}


def make(seed, scale=2.5):
    g = torch.Generator().manual_seed(seed)
    student = torch.randn(N_S, V_S, generator=g) * scale
    teacher = torch.randn(N_T, V_T, generator=g) * scale
    base = torch.randn(N_T, V_T, generator=g) * scale
    return (student, teacher, base, torch.randint(0, V_S, (N_S,), generator=g),
            torch.randint(0, V_T, (N_T,), generator=g))


def rows(student, teacher, s_ids, t_ids, base=None, ref="student", lam=1.25):
    """span_rows the way the scorer calls it: token log-probs, entropies, and the first positions."""
    from opsd_diag.core import signals
    s_span = torch.tensor(SPANS.student_index())
    t_span = torch.tensor(SPANS.teacher_index())
    ds, dt = signals.distribution(student, s_ids), signals.distribution(teacher, t_ids)
    fs, ft = SS.first_positions(s_span, S), SS.first_positions(t_span, S)
    start = SS.start_signals(ds.logp[fs], dt.logp[ft], t_ids[ft])
    db = None if base is None else signals.distribution(base, t_ids)
    return SS.span_rows(ds.lp, ds.h, s_span, dt.lp, dt.h, t_span, start, S,
                        base_lp=None if db is None else db.lp, base_h=None if db is None else db.h,
                        base_span=None if db is None else t_span, ref=ref, exopd_lambda=lam)


def close(actual, expected):
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("with_base,ref", [(False, "student"), (True, "student"), (True, "base")])
def test_span_rows_match_the_float64_reference(seed, with_base, ref):
    student, teacher, base, s_ids, t_ids = make(seed)
    got = rows(student, teacher, s_ids, t_ids, base if with_base else None, ref)
    want = ref_rows(student, teacher, s_ids, t_ids, base if with_base else None, ref)
    assert set(got) == set(want)
    for k in want:
        close(got[k], want[k])
    for k in SS.NOT_AVAILABLE:  # never computed on mismatched ids
        assert got[k].isnan().all()
    assert got["r_opd"].isfinite().all() and (got["uld"] > 0).all()


def test_identical_models_on_identical_tokens_give_zero():
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(N_S, V_S, generator=g)
    ids = torch.randint(0, V_S, (N_S,), generator=g)
    from opsd_diag.core import signals
    d = signals.distribution(logits, ids)
    span = torch.tensor(SPANS.student_index())
    first = SS.first_positions(span, S)
    start = SS.start_signals(d.logp[first], d.logp[first], ids[first])
    out = SS.span_rows(d.lp, d.h, span, d.lp, d.h, span, start, S, exopd_lambda=1.25)
    assert (out["r_opd"] == 0).all() and (out["a_ex"] == 0).all() and (out["uld"] == 0).all()


def test_uld_is_id_free_and_padded():
    g = torch.Generator().manual_seed(3)
    lp = torch.log_softmax(torch.randn(4, 9, generator=g), -1)
    perm = lp[:, torch.randperm(9, generator=g)]
    assert torch.allclose(signals.uld(lp, perm), torch.zeros(4), atol=1e-6)  # a relabelling of the ids costs nothing
    wide = torch.cat([perm, torch.full((4, 5), -40.0)], -1)  # a larger vocabulary with near-zero extra mass
    assert torch.allclose(signals.uld(lp, wide), torch.zeros(4), atol=1e-5)
    lq = torch.log_softmax(torch.randn(4, 6, generator=g), -1)
    want = torch.tensor([ref_uld(lp[n].double().tolist(), lq[n].double().tolist()) for n in range(4)],
                        dtype=torch.float64)
    close(signals.uld(lp, lq), want)
    assert (signals.uld(lp, lq) <= 2 + 1e-6).all()


def test_uld_gradient_matches_float64_autograd():
    g = torch.Generator().manual_seed(5)
    s, t = torch.randn(3, 8, generator=g), torch.randn(3, 11, generator=g)
    s32, t32 = s.clone().requires_grad_(True), t.clone().requires_grad_(True)
    signals.uld(torch.log_softmax(s32, -1), torch.log_softmax(t32, -1)).sum().backward()
    s64, t64 = s.double().requires_grad_(True), t.double().requires_grad_(True)
    total = 0.0
    for n in range(3):
        p = sorted(torch.softmax(s64[n], -1), key=lambda x: -float(x.detach()))
        q = sorted(torch.softmax(t64[n], -1), key=lambda x: -float(x.detach()))
        p_pad = p + [torch.zeros((), dtype=torch.float64)] * (len(q) - len(p))  # the student's is the shorter
        total = total + sum((p_pad[i] - q[i]).abs() for i in range(len(q)))
    total.backward()
    for got, want in ((s32.grad, s64.grad), (t32.grad, t64.grad)):
        assert want.abs().max() > 1e-3
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_nonfinite_logits_make_their_spans_nan():
    student, teacher, _, s_ids, t_ids = make(4)
    teacher[1, 3] = float("nan")  # teacher token 1 lies in span 0
    student[5, 0] = float("inf")  # student token 5 lies in span 3
    got = rows(student, teacher, s_ids, t_ids)
    assert got["lp_t"][0].isnan() and got["r_opd"][0].isnan() and got["uld"][0].isnan()
    assert got["lp_s"][3].isnan() and got["r_opd"][3].isnan()
    assert got["r_opd"][1:3].isfinite().all()


def test_spread_puts_the_span_value_on_each_student_token():
    values = torch.tensor([1.0, -2.0, 3.0, 0.5])
    index = torch.tensor(SPANS.student_index())
    assert SS.spread(values, index).tolist() == [1.0, -2.0, -2.0, -2.0, 3.0, 0.5, 0.5]
    with pytest.raises(ValueError):
        SS.first_positions(torch.tensor([0, 2, 1]), 3)
