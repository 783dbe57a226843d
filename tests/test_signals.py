"""core/signals.py against a slow, obvious float64 reference: explicit loops over positions and vocabulary."""

from __future__ import annotations

import math

import pytest
import torch

from opsd_diag.core import signals as S
from opsd_diag.core.signals import COMPAT_K
from opsd_diag.schema import BASE_COLUMNS, BY_NAME, SIGNAL_COLUMNS

N, V = 5, 11
RTOL, ATOL = 1e-5, 1e-5
BETAS = (0.0, 0.3, 0.5, 1.0)


# ---------------------------------------------------------------- float64 reference (loops)
# Rows are lists of 0-d float64 tensors so the same code also gives autograd gradients.

def ref_log_softmax(row, tau=1.0):
    z = [x / tau for x in row]
    top = max(float(x.detach()) for x in z)  # a constant shift: no gradient needed
    log_norm = top + torch.log(sum(torch.exp(x - top) for x in z))
    return [x - log_norm for x in z]


def ref_kl(lp, lq):
    """KL(p || q), written out."""
    return sum(torch.exp(lp[v]) * (lp[v] - lq[v]) for v in range(len(lp)))


def ref_entropy(lp):
    return -sum(torch.exp(x) * x for x in lp)


def ref_jsd(lp_student, lq_teacher, beta):
    if beta == 0.0:
        return ref_kl(lq_teacher, lp_student)  # forward KL(teacher || student)
    if beta == 1.0:
        return ref_kl(lp_student, lq_teacher)  # reverse KL(student || teacher)
    # mixture formed directly in probability space (a different path from the logaddexp code)
    lm = [torch.log(beta * torch.exp(lq_teacher[v]) + (1 - beta) * torch.exp(lp_student[v]))
          for v in range(len(lp_student))]
    return beta * ref_kl(lq_teacher, lm) + (1 - beta) * ref_kl(lp_student, lm)


def ref_centered(lp, f, tok, k):
    if k is None:
        support = range(len(lp))
    else:
        order = sorted(range(len(lp)), key=lambda v: -float(lp[v]))
        support = set(order[:k]) | {tok}
    return sum(math.exp(float(lp[v])) * float(f[v]) for v in support)


def ref_top_k(lp, k):
    """The k most likely ids, ties toward the lower id (a stable sort), k clamped to the vocabulary."""
    return set(sorted(range(len(lp)), key=lambda v: (-lp[v], v))[:min(k, len(lp))])


def ref_compat(lp, lq, k=COMPAT_K):
    """teachability and topk_overlap at one position, float64 loops."""
    top_p, top_q = ref_top_k(lp, k), ref_top_k(lq, k)
    return {"teachability": sum(math.exp(lq[v]) for v in top_p),
            "topk_overlap": len(top_p & top_q) / min(k, len(lp))}


def ref_rows(logits, tau=1.0):
    x = logits.detach().double()
    return [[float(y) for y in ref_log_softmax(list(x[n]), tau)] for n in range(x.shape[0])]


def ref_signals(student, teacher, tokens, base=None, tau=1.0, beta=0.5, k=None, lam=1.25, ref_lp=None):
    """Every key of token_signals, position by position, float64."""
    out = {key: [] for key in SIGNAL_COLUMNS}
    vocab = student.shape[1]
    lps_rows, lpt_rows = ref_rows(student, tau), ref_rows(teacher, tau)
    lpb_rows = ref_rows(base, tau) if base is not None else None
    for n in range(student.shape[0]):
        lp, lq, y = lps_rows[n], lpt_rows[n], int(tokens[n])
        as_t = lambda row: [torch.tensor(x, dtype=torch.float64) for x in row]  # noqa: E731
        lp_s, lp_t = lp[y], lq[y]
        r_opd = lp_t - lp_s
        a_opd = r_opd - ref_centered(lp, [lq[v] - lp[v] for v in range(vocab)], y, k)
        lp_ref = lp_s if ref_lp is None else float(ref_lp[n])
        row = {
            "lp_s": lp_s, "lp_t": lp_t, "r_opd": r_opd,
            "kl_rev": float(ref_kl(as_t(lp), as_t(lq))), "kl_fwd": float(ref_kl(as_t(lq), as_t(lp))),
            "jsd": float(ref_jsd(as_t(lp), as_t(lq), beta)), "a_opd": a_opd,
            "a_ex": lam * (lp_t - lp_ref) - (lp_s - lp_ref),
            "h_s": float(ref_entropy(as_t(lp))), "h_t": float(ref_entropy(as_t(lq))),
            "rank_t": float(sum(1 for v in range(vocab) if lq[v] > lq[y])),
            "top1_agree": float(max(range(V), key=lambda v: lp[v]) == max(range(V), key=lambda v: lq[v])),
            **ref_compat(lp, lq),
        }
        if lpb_rows is None:
            row.update({key: math.nan for key in BASE_COLUMNS})
        else:
            lb = lpb_rows[n]
            r_delta = lp_t - lb[y]
            a_delta = r_delta - ref_centered(lp, [lq[v] - lb[v] for v in range(vocab)], y, k)
            gate = 1.0 if a_delta * a_opd > 0 else 0.0
            row.update(lp_b=lb[y], r_delta=r_delta, a_delta=a_delta, gate=gate, a_d2=gate * a_delta,
                       h_b=float(ref_entropy(as_t(lb))))
        for key in SIGNAL_COLUMNS:
            out[key].append(row[key])
    return {key: torch.tensor(vals, dtype=torch.float64) for key, vals in out.items()}


# ---------------------------------------------------------------- helpers

def make(seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    student, teacher, base = (torch.randn(N, V, generator=g) * scale for _ in range(3))
    tokens = torch.randint(0, V, (N,), generator=g)
    return student, teacher, base, tokens


def sig(student, teacher, tokens, **kw):
    """token_signals with the config's defaults unless a test sets a value."""
    settings = {"temperature": 1.0, "jsd_beta": 0.5, "centering": None, "exopd_lambda": 1.25, **kw}
    return S.token_signals(student, teacher, tokens, **settings)


def close(actual, expected, rtol=RTOL, atol=ATOL):
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------- elementary functions

@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_log_probs_token_logprob_entropy(seed, tau):
    student, _, _, tokens = make(seed)
    logp = S.log_probs(student, tau)
    ref = torch.tensor(ref_rows(student, tau), dtype=torch.float64)
    close(logp, ref)
    close(S.token_logprob(logp, tokens), torch.stack([ref[n, tokens[n]] for n in range(N)]))
    expected_h = [float(ref_entropy(list(ref[n]))) for n in range(N)]
    close(S.entropy(logp), torch.tensor(expected_h))


def test_log_probs_rejects_bad_temperature():
    with pytest.raises(ValueError):
        S.log_probs(torch.zeros(2, 3), 0.0)


def test_bf16_logits_are_computed_in_float32():
    student, teacher, base, tokens = make(3)
    s16, t16, b16 = student.bfloat16(), teacher.bfloat16(), base.bfloat16()
    logp = S.log_probs(s16)
    assert logp.dtype == torch.float32
    # the reference upcasts the (exact) bf16 values: a bf16 log-softmax would miss this tolerance
    close(logp, torch.tensor(ref_rows(s16.float()), dtype=torch.float64))
    got = sig(s16, t16, tokens, base_logits=b16)
    ref = ref_signals(s16.float(), t16.float(), tokens, base=b16.float())
    for key in SIGNAL_COLUMNS:
        close(got[key], ref[key])


@pytest.mark.parametrize("seed", [0, 1])
def test_kl_values_and_directions(seed):
    student, teacher, _, _ = make(seed)
    lp, lq = S.log_probs(student), S.log_probs(teacher)
    rp, rq = ref_rows(student), ref_rows(teacher)
    as_t = lambda row: [torch.tensor(x, dtype=torch.float64) for x in row]  # noqa: E731
    close(S.kl(lp, lq), torch.tensor([float(ref_kl(as_t(rp[n]), as_t(rq[n]))) for n in range(N)]))
    close(S.kl(lq, lp), torch.tensor([float(ref_kl(as_t(rq[n]), as_t(rp[n]))) for n in range(N)]))
    assert not torch.allclose(S.kl(lp, lq), S.kl(lq, lp))  # KL is not symmetric: direction matters


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("beta", BETAS)
def test_generalized_jsd_values(seed, beta):
    student, teacher, _, _ = make(seed)
    lp, lq = S.log_probs(student), S.log_probs(teacher)
    rp, rq = ref_rows(student), ref_rows(teacher)
    as_t = lambda row: [torch.tensor(x, dtype=torch.float64) for x in row]  # noqa: E731
    expected = [float(ref_jsd(as_t(rp[n]), as_t(rq[n]), beta)) for n in range(N)]
    close(S.generalized_jsd(lp, lq, beta), torch.tensor(expected))


def test_generalized_jsd_ends_are_forward_and_reverse_kl():
    student, teacher, _, _ = make(4)
    lp, lq = S.log_probs(student), S.log_probs(teacher)
    torch.testing.assert_close(S.generalized_jsd(lp, lq, 0.0), S.kl(lq, lp))  # KL(teacher || student)
    torch.testing.assert_close(S.generalized_jsd(lp, lq, 1.0), S.kl(lp, lq))  # KL(student || teacher)
    with pytest.raises(ValueError):
        S.generalized_jsd(lp, lq, 1.5)


@pytest.mark.parametrize("beta", [0.0, 0.3, 1.0, "kl"])
def test_divergence_gradients_match_float64_autograd(beta):
    student, teacher, _, _ = make(5)
    s32, t32 = student.clone().requires_grad_(True), teacher.clone().requires_grad_(True)
    lp, lq = S.log_probs(s32), S.log_probs(t32)
    loss = S.kl(lp, lq) if beta == "kl" else S.generalized_jsd(lp, lq, beta)
    loss.sum().backward()

    s64, t64 = student.double().requires_grad_(True), teacher.double().requires_grad_(True)
    total = 0.0
    for n in range(N):
        rp, rq = ref_log_softmax(list(s64[n])), ref_log_softmax(list(t64[n]))
        total = total + (ref_kl(rp, rq) if beta == "kl" else ref_jsd(rp, rq, beta))
    total.backward()
    for got, want in ((s32.grad, s64.grad), (t32.grad, t64.grad)):  # both inputs are differentiable
        assert want.abs().max() > 1e-3  # a real gradient, not a trivial zero
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- centring

@pytest.mark.parametrize("k", [None, 1, 3, V, V + 5])
@pytest.mark.parametrize("which", ["random", "outside_topk"])
def test_centred_advantage(k, which):
    student, _, _, tokens = make(6)
    f = torch.randn(N, V, generator=torch.Generator().manual_seed(7))
    d = S.dist(S.log_probs(student), tokens)
    if which == "outside_topk":
        tokens = d.logp.argmin(-1)  # the student's least likely token: outside any top-k with k < V
    rp = ref_rows(student)
    expected = [float(f[n, tokens[n]]) - ref_centered(rp[n], [float(x) for x in f[n]], int(tokens[n]), k)
                for n in range(N)]
    close(S.centred_advantage(d, f, tokens, centering=k), torch.tensor(expected))
    if k is not None and k < V:
        full = S.centred_advantage(d, f, tokens, centering=None)
        assert not torch.allclose(S.centred_advantage(d, f, tokens, centering=k), full)


def test_centred_advantage_adds_sampled_token_once():
    lp = S.log_probs(torch.tensor([[3.0, 2.0, 1.0, 0.0]]))
    f = torch.tensor([[1.0, 10.0, 100.0, 1000.0]])
    p = lp.exp()[0]
    d = S.dist(lp, torch.tensor([1]))
    inside = S.centred_advantage(d, f, torch.tensor([1]), centering=2)
    outside = S.centred_advantage(S.dist(lp, torch.tensor([3])), f, torch.tensor([3]), centering=2)
    torch.testing.assert_close(inside, (10 - (p[0] * 1 + p[1] * 10)).view(1))  # not renormalised, no double count
    torch.testing.assert_close(outside, (1000 - (p[0] * 1 + p[1] * 10 + p[3] * 1000)).view(1))
    with pytest.raises(ValueError):
        S.centred_advantage(d, f, torch.tensor([1]), centering=0)


@pytest.mark.parametrize("k", [None, 5])
def test_near_certain_student_keeps_the_sign_of_a_delta_in_float32(k):
    """The textbook form r_delta - E_p[log q - log b] cancels to 0 in float32 when p(y) rounds to 1."""
    vocab, y = 377, 42
    student, teacher, base = (torch.zeros(1, vocab) for _ in range(3))
    student[0, y], teacher[0, y], base[0, y] = 25.0, 26.0, 2.0
    tokens = torch.tensor([y])
    got = sig(student, teacher, tokens, base_logits=base, centering=k)
    assert float(S.log_probs(student).exp()[0, y]) == 1.0  # the student's probability rounds to 1
    assert got["a_delta"].item() > 0 and got["a_opd"].item() > 0 and got["gate"].item() == 1.0
    ref = ref_signals(student.double(), teacher.double(), tokens, base=base.double(), k=k)
    for key in ("a_opd", "a_delta", "a_d2"):  # relative precision, not just the sign
        torch.testing.assert_close(got[key].double(), ref[key], rtol=1e-4, atol=0)


# ---------------------------------------------------------------- the token_signals bundle

@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("beta", BETAS)
def test_token_signals_every_key(seed, tau, k, beta):
    student, teacher, base, tokens = make(seed)
    if seed == 1:
        tokens = S.log_probs(student).argmin(-1)  # sampled tokens outside the student's top-k
    got = sig(student, teacher, tokens, base_logits=base, temperature=tau, jsd_beta=beta, centering=k)
    assert set(got) == set(SIGNAL_COLUMNS)
    ref = ref_signals(student, teacher, tokens, base=base, tau=tau, beta=beta, k=k)
    for key in SIGNAL_COLUMNS:
        assert got[key].shape == (N,) and not got[key].requires_grad, key
        close(got[key], ref[key])
    # centring over the full vocabulary is exactly the table's identity a_opd = r_opd + KL(p || q)
    if k is None:
        close(got["a_opd"], (got["r_opd"] + got["kl_rev"]).double())


def test_token_signals_reference_logprob_for_exopd():
    student, teacher, base, tokens = make(8)
    ref_lp = S.token_logprob(S.log_probs(base), tokens)  # the teacher's base as the reference R
    got = sig(student, teacher, tokens, exopd_lambda=1.5, ref_logprob=ref_lp)
    close(got["a_ex"], ref_signals(student, teacher, tokens, lam=1.5, ref_lp=ref_lp)["a_ex"])
    default = sig(student, teacher, tokens, exopd_lambda=1.5)
    close(default["a_ex"], (1.5 * default["r_opd"]).double())  # default reference: the student itself


def test_token_signals_without_base_are_nan():
    student, teacher, _, tokens = make(9)
    got = sig(student, teacher, tokens)
    for key in SIGNAL_COLUMNS:
        assert got[key].dtype == torch.float32
        assert torch.isnan(got[key]).all() == (key in BASE_COLUMNS), key


@pytest.mark.parametrize("k", [None, 3])
def test_identity_teacher_equals_student(k):
    student, _, base, tokens = make(10)
    got = sig(student, student.clone(), tokens, base_logits=base, centering=k)
    for key in ("kl_rev", "kl_fwd", "r_opd", "a_opd"):
        torch.testing.assert_close(got[key], torch.zeros(N), atol=1e-6, rtol=0)
    assert (got["top1_agree"] == 1).all()
    lp = S.log_probs(student)
    for beta in BETAS:
        torch.testing.assert_close(S.generalized_jsd(lp, lp, beta), torch.zeros(N), atol=1e-6, rtol=0)


def test_rank_t_counts_strictly_better_tokens():
    teacher = torch.tensor([[0.0, 5.0, 1.0, 5.0], [9.0, 1.0, 2.0, 3.0]])
    got = sig(torch.zeros(2, 4), teacher, torch.tensor([2, 0]))
    assert got["rank_t"].tolist() == [2.0, 0.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, COMPAT_K, V, V + 9])  # V + 9: clamped to the vocabulary
@pytest.mark.parametrize("tied", [False, True])
def test_topk_compat_against_float64_loops(seed, k, tied):
    """teachability and topk_overlap, also where several ids tie at the k-th value (integer logits)."""
    g = torch.Generator().manual_seed(seed)
    if tied:
        student, teacher = (torch.randint(-1, 2, (N, V), generator=g).float() for _ in range(2))
    else:
        student, teacher = (torch.randn(N, V, generator=g) * 3 for _ in range(2))
    for tau in (1.0, 0.7):
        lp, lq = S.log_probs(student, tau), S.log_probs(teacher, tau)
        got = S.topk_compat(lp, lq, k)
        rp, rq = ref_rows(student, tau), ref_rows(teacher, tau)
        want = [ref_compat(rp[n], rq[n], k) for n in range(N)]
        for key in ("teachability", "topk_overlap"):
            close(got[key], torch.tensor([w[key] for w in want], dtype=torch.float64))
        ids = S.top_k_ids(lp, k)  # exactly k distinct ids, ties or not
        assert ids.shape == (N, min(k, V)) and all(len(set(r)) == min(k, V) for r in ids.tolist())
    same = S.topk_compat(lp, lp, k)  # a teacher equal to the student: full overlap, its own top-k mass
    assert (same["topk_overlap"] == 1).all()
    close(same["teachability"], lp.double().exp().topk(min(k, V), -1).values.sum(-1))


def test_top_k_ids_breaks_ties_toward_the_lower_id():
    x = torch.tensor([[1.0, 2.0, 2.0, 2.0, 0.0, 2.0], [3.0, 2.0, 2.0, 1.0, 2.0, 0.0]])
    assert [sorted(r) for r in S.top_k_ids(x, 2).tolist()] == [[1, 2], [0, 1]]
    assert [sorted(r) for r in S.top_k_ids(x, 9).tolist()] == [list(range(6))] * 2  # k above the vocabulary: every id


@pytest.mark.parametrize("seed", range(4))
def test_top_k_ids_equal_a_sort_by_value_then_id(seed):
    """Heavy ties (values in {-1, 0, 1}): the ids are the first k of an explicit (-value, id) sort."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-1, 2, (16, 23), generator=g).float()
    for k in (1, 2, 5, 23, 30):
        got = S.top_k_ids(x, k).tolist()
        for n in range(x.shape[0]):
            assert sorted(got[n]) == sorted(ref_top_k([float(v) for v in x[n]], k)), (seed, k, n)


def test_a_shared_student_top_ids_changes_no_column():
    """The scorers compute the student's compatibility ids once a chunk (with_top_ids): every column is the same."""
    g = torch.Generator().manual_seed(3)
    student, teacher = (torch.randint(-2, 3, (12, 9), generator=g).float() for _ in range(2))  # heavy ties
    tokens = torch.randint(0, 9, (12,), generator=g)
    s, t = S.distribution(student, tokens), S.distribution(teacher, tokens)
    shared = S.with_top_ids(s)
    assert torch.equal(shared.top_ids, S.top_k_ids(s.logp, COMPAT_K)) and s.top_ids is None
    kw = dict(base=None, jsd_beta=0.5, centering=None, exopd_lambda=1.25)
    a, b = S.signals_from(s, t, tokens, **kw), S.signals_from(shared, t, tokens, **kw)
    assert a.keys() == b.keys()
    for c in a:  # bitwise, NaN where there is no base
        torch.testing.assert_close(a[c], b[c], rtol=0, atol=0, equal_nan=True)


def test_the_column_reference_states_the_named_k():
    assert COMPAT_K == 5  # changing it changes what every stored run means: say so in docs/signals.md
    for name in ("teachability", "topk_overlap"):
        assert BY_NAME[name].formula.endswith(f"k = {COMPAT_K}") and f"top-{COMPAT_K} " in BY_NAME[name].meaning


def test_token_signals_use_the_named_k():
    student, teacher, _, tokens = make(13)
    got = sig(student, teacher, tokens, temperature=0.8)
    want = S.topk_compat(S.log_probs(student, 0.8), S.log_probs(teacher, 0.8), COMPAT_K)
    for key in ("teachability", "topk_overlap"):
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)


# ---------------------------------------------------------------- training helpers

def test_topk():
    student, _, _, _ = make(11)
    lp = S.log_probs(student)
    values, ids = S.topk(lp, 4)
    rp = ref_rows(student)
    for n in range(N):
        order = sorted(range(V), key=lambda v: -rp[n][v])[:4]
        assert ids[n].tolist() == order
        close(values[n], torch.tensor([rp[n][v] for v in order]))
    assert S.topk(lp, V + 3)[1].shape == (N, V)


def test_policy_gradient_loss_stops_gradient_on_advantage():
    student, teacher, _, tokens = make(12)
    s = student.clone().requires_grad_(True)
    lp_s = S.token_logprob(S.log_probs(s), tokens)
    advantage = S.token_logprob(S.log_probs(teacher), tokens) - lp_s  # r_opd: depends on the student
    loss = S.policy_gradient_loss(lp_s, advantage)
    torch.testing.assert_close(loss, -(advantage.detach() * lp_s.detach()))
    loss.sum().backward()
    # d/ds of -sum A * lp_s with A held constant
    s2 = student.clone().requires_grad_(True)
    (-(advantage.detach() * S.token_logprob(S.log_probs(s2), tokens))).sum().backward()
    torch.testing.assert_close(s.grad, s2.grad)

    leaf_adv = torch.randn(N, requires_grad=True)
    leaf_lp = torch.randn(N, requires_grad=True)
    S.policy_gradient_loss(leaf_lp, leaf_adv).sum().backward()
    assert leaf_adv.grad is None
    torch.testing.assert_close(leaf_lp.grad, -leaf_adv.detach())


def test_masked_sum_and_count():
    per_token = torch.randn(N, requires_grad=True)
    mask = torch.tensor([1, 0, 1, 1, 0])
    total, count = S.masked_sum_and_count(per_token, mask)
    expected = sum(float(per_token[n].detach()) for n in range(N) if mask[n])
    assert math.isclose(total.item(), expected, rel_tol=1e-6) and int(count) == 3
    total.backward()
    assert per_token.grad.tolist() == mask.float().tolist()


def test_masked_sum_and_count_empty_mask_keeps_graph():
    per_token = torch.randn(N, requires_grad=True)
    total, count = S.masked_sum_and_count(per_token, torch.zeros(N, dtype=torch.bool))
    assert total.item() == 0.0 and int(count) == 0
    assert total.requires_grad and total.grad_fn is not None
    total.backward()
    assert per_token.grad is not None and (per_token.grad == 0).all()


def test_masked_sum_and_count_ignores_nan_padding():
    per_token = torch.tensor([1.0, float("nan"), 2.0], requires_grad=True)
    total, count = S.masked_sum_and_count(per_token, torch.tensor([True, False, True]))
    assert total.item() == 3.0 and int(count) == 2
    total.backward()
    assert per_token.grad.tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(ValueError):
        S.masked_sum_and_count(per_token, torch.ones(2, dtype=torch.bool))


STUDENT_ONLY = {"lp_s", "h_s", "lp_b", "h_b"}  # the columns that do not read the teacher


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_teacher_row_makes_every_teacher_column_nan(bad):
    """rank_t, top1_agree and gate are comparisons: without care a NaN row reads 0 (rank_t = 0 would claim
    the teacher's first choice); every column derived from a non-finite distribution must be NaN instead."""
    student, teacher, base, tokens = make(11)
    teacher[2, 3] = bad  # one vocabulary entry of position 2
    got = sig(student, teacher, tokens, base_logits=base)
    rest = [0, 1, 3, 4]
    clean = sig(student[rest], teacher[rest], tokens[rest], base_logits=base[rest])
    for key in SIGNAL_COLUMNS:
        assert torch.isnan(got[key][2]).item() == (key not in STUDENT_ONLY), key
        torch.testing.assert_close(got[key][rest], clean[key], equal_nan=True)  # the other positions: untouched


def test_a_non_finite_base_or_student_row_is_nan_where_it_is_read():
    student, teacher, base, tokens = make(12)
    base[1, 0] = float("nan")
    student[3, 5] = float("nan")
    got = sig(student, teacher, tokens, base_logits=base)
    for key in ("lp_b", "h_b", "r_delta", "a_delta", "gate", "a_d2"):
        assert torch.isnan(got[key][1]), key
    for key in ("lp_t", "h_t", "r_opd", "a_opd", "kl_rev", "rank_t", "top1_agree"):
        assert torch.isfinite(got[key][1]), key  # the base does not enter these
    for key in SIGNAL_COLUMNS:
        if key not in ("lp_t", "h_t", "rank_t", "lp_b", "h_b", "r_delta"):  # no student in these
            assert torch.isnan(got[key][3]), key
