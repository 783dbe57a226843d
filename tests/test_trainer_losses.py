"""Per-method loss gradients w.r.t. the student logits against a float64 reference written as loops.

The reference builds each loss from 0-d float64 tensors, position by position and token by token,
so autograd gives the reference gradient; the trainer's loss (float32, vectorised, through
``opsd_diag.core.signals``) must match it. Advantages also match the diagnosis' ``token_signals``.
"""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from opsd_diag.core import signals
from opsd_diag.config.settings import LossSettings
from opsd_diag.core.losses import token_loss

N, V = 6, 9
TOL = dict(rtol=1e-5, atol=1e-6)


def loss_settings(method: str, temperature: float = 1.0, **kw) -> LossSettings:
    """LossSettings with the config's defaults unless a test sets a value."""
    return LossSettings(**{"method": method, "temperature": temperature, "beta": 0.5, "centering": None,
                           "exopd_lambda": 1.25, "clip": None, **kw})


def ref_log_softmax(row, tau):
    z = [x / tau for x in row]
    top = max(float(x.detach()) for x in z)
    log_norm = top + torch.log(sum(torch.exp(x - top) for x in z))
    return [x - log_norm for x in z]


def ref_kl(lp, lq):
    return sum(torch.exp(lp[v]) * (lp[v] - lq[v]) for v in range(len(lp)))


def ref_jsd(lp, lq, beta):
    if beta == 0.0:
        return ref_kl(lq, lp)
    if beta == 1.0:
        return ref_kl(lp, lq)
    lm = [torch.log(beta * torch.exp(lq[v]) + (1 - beta) * torch.exp(lp[v])) for v in range(len(lp))]
    return beta * ref_kl(lq, lm) + (1 - beta) * ref_kl(lp, lm)


def ref_centered(lp, f, tok, k):
    """E_p[f] over the full vocabulary or the student's top-k plus the sampled token; p not renormalised."""
    support = range(len(lp)) if k is None else \
        set(sorted(range(len(lp)), key=lambda v: -float(lp[v]))[:k]) | {tok}
    return sum(math.exp(float(lp[v])) * float(f[v]) for v in support)


def reference_loss(method, s_logits, t_logits, b_logits, r_logits, ids, tau, beta=0.5, k=None, lam=1.25,
                   clip=None):
    """Mean over positions of the method's per-token loss, built in float64 loops."""
    total = 0.0
    for n in range(N):
        srow = [s_logits[n, v] for v in range(V)]
        y = int(ids[n])
        if method == "sft":
            total = total - ref_log_softmax(srow, 1.0)[y]
            continue
        lp = ref_log_softmax(srow, tau)
        lq = [x.detach() for x in ref_log_softmax(list(t_logits[n]), tau)]
        if method == "jsd":
            total = total + ref_jsd(lp, lq, beta)
            continue
        lp_s, lp_t = float(lp[y].detach()), float(lq[y])
        if method == "opd":
            adv = lp_t - lp_s
        elif method == "opd2":
            lb = [float(x) for x in ref_log_softmax(list(b_logits[n]), tau)]
            lpd = [float(x.detach()) for x in lp]
            a_opd = (lp_t - lp_s) - ref_centered(lpd, [float(lq[v]) - lpd[v] for v in range(V)], y, k)
            a_delta = (lp_t - lb[y]) - ref_centered(lpd, [float(lq[v]) - lb[v] for v in range(V)], y, k)
            adv = a_delta if a_delta * a_opd > 0 else 0.0
        elif method == "exopd":
            lp_r = float(ref_log_softmax(list(r_logits[n]), tau)[y])
            adv = lam * (lp_t - lp_r) - (lp_s - lp_r)
        if clip is not None:
            adv = max(-clip, min(clip, adv))
        total = total - adv * lp[y]  # the advantage is a plain float: stop-gradient by construction
    return total / N


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    s, t, b, r = (torch.randn(N, V, generator=g, dtype=torch.float64) * 2 for _ in range(4))
    ids = torch.randint(0, V, (N,), generator=g)
    return s, t, b, r, ids


CASES = [
    ("opd", {}), ("opd", {"clip": 0.3}), ("jsd", {"beta": 0.0}), ("jsd", {"beta": 0.5}), ("jsd", {"beta": 1.0}),
    ("opd2", {}), ("opd2", {"centering": 3}), ("exopd", {"exopd_lambda": 1.25}), ("exopd", {"exopd_lambda": 1.0}),
    ("sft", {}),
]


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("method,kw", CASES)
def test_gradient_matches_float64_reference(method, kw, tau):
    s, t, b, r, ids = _inputs(zlib.crc32(repr((method, kw, tau)).encode()) % 1000)
    # reference: float64 loops, autograd through the student logits only
    s_ref = s.clone().requires_grad_(True)
    ref = reference_loss(method, s_ref, t, b, r, ids, tau, beta=kw.get("beta", 0.5), k=kw.get("centering"),
                         lam=kw.get("exopd_lambda", 1.25), clip=kw.get("clip"))
    (g_ref,) = torch.autograd.grad(ref, s_ref)
    # trainer: float32, chunked exactly like the loop does, normalised by the token count
    settings = loss_settings(method, tau, **kw)
    s32 = s.float().requires_grad_(True)
    ref_lp = signals.token_logprob(signals.log_probs(r.float(), tau), ids) if method == "exopd" else None
    per_token, _ = token_loss(s32, ids, settings, teacher_logits=t.float(), base_logits=b.float(),
                              ref_logprob=ref_lp)
    total, count = signals.masked_sum_and_count(per_token, torch.ones(N, dtype=torch.bool))
    loss = total / count
    (g,) = torch.autograd.grad(loss, s32)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), rel=1e-5, abs=1e-5)
    torch.testing.assert_close(g.double(), g_ref, **TOL)


def test_teacher_gets_no_gradient():
    s, t, b, r, ids = _inputs(3)
    t32 = t.float().requires_grad_(True)
    for method in ("opd", "jsd", "opd2"):
        per_token, _ = token_loss(s.float().requires_grad_(True), ids, loss_settings(method),
                                  teacher_logits=t32, base_logits=b.float())
        per_token.sum().backward()
        assert t32.grad is None


@pytest.mark.parametrize("centering", [None, 4])
def test_advantages_equal_the_diagnosis_signals(centering):
    """The trainer optimises exactly what the diagnosis measured: same a_opd gate, a_d2 and a_ex."""
    s, t, b, r, ids = (x.float() if x.dtype == torch.float64 else x for x in _inputs(11))
    tau = 0.8
    ref_lp = signals.token_logprob(signals.log_probs(r, tau), ids)
    sig = signals.token_signals(s, t, ids, base_logits=b, temperature=tau, centering=centering, jsd_beta=0.5,
                                exopd_lambda=1.5, ref_logprob=ref_lp)
    _, st = token_loss(s, ids, loss_settings("opd", tau), teacher_logits=t)
    torch.testing.assert_close(st["advantage"], sig["r_opd"])
    _, st = token_loss(s, ids, loss_settings("opd2", tau, centering=centering), teacher_logits=t, base_logits=b)
    torch.testing.assert_close(st["advantage"], sig["a_d2"])
    torch.testing.assert_close(st["gate"], sig["gate"])
    _, st = token_loss(s, ids, loss_settings("exopd", tau, exopd_lambda=1.5), teacher_logits=t, ref_logprob=ref_lp)
    torch.testing.assert_close(st["advantage"], sig["a_ex"])


def test_teacher_equal_to_student_gives_zero_gradient():
    s, _, _, _, ids = _inputs(5)
    for method, kw in (("opd", {}), ("jsd", {"beta": 0.5}), ("jsd", {"beta": 0.0})):
        s32 = s.float().requires_grad_(True)
        per_token, _ = token_loss(s32, ids, loss_settings(method, **kw), teacher_logits=s.float())
        (g,) = torch.autograd.grad(per_token.sum(), s32)
        torch.testing.assert_close(g, torch.zeros_like(g), atol=1e-6, rtol=0)
