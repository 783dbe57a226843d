"""Training against a teacher with another tokenizer: span losses against a slow reference, and short runs."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import ZOO
from fixtures_crosstok import build_other_family
from fixtures_trainer import config_dict, one_thread, read_metrics, world, write_config  # noqa: F401 (fixtures)

from opsd_diag.errors import OpsdError
from opsd_diag.config.spec import from_dict
from opsd_diag.io.retokenize import Retokenized, retokenize
from opsd_diag.config import training as config
from trainer import cli
from trainer import cross_losses as CL
from trainer.cross_step import cross_micro_batch_backward
from opsd_diag.engine.train_step import CompletionHidden
from opsd_diag.engine.train_step import MicroBatch
from trainer.setup import prepare

# span 0: 1 student token / 3 teacher tokens; span 1: 3 / 1; span 2: 1 / 1
S_SPAN, T_SPAN, N_SPANS = [0, 1, 1, 1, 2], [0, 0, 0, 1, 2], 3


@pytest.mark.parametrize("method,ref,clip", [("opd", "student", None), ("exopd", "student", None),
                                             ("exopd", "base", None), ("opd", "student", 0.5)])
def test_span_token_advantages_match_explicit_loops(method, ref, clip):
    g = torch.Generator().manual_seed(1)
    lp_s, lp_r = -torch.rand(5, generator=g) * 3, -torch.rand(5, generator=g) * 3
    lp_t, lp_b = -torch.rand(5, generator=g) * 3, -torch.rand(5, generator=g) * 3
    lam = 1.25
    got, stats = CL.span_token_advantages(lp_s, torch.tensor(S_SPAN), lp_t, torch.tensor(T_SPAN), N_SPANS,
                                          method=method, exopd_lambda=lam, clip=clip, base_lp=lp_b,
                                          base_span=torch.tensor(T_SPAN), ref=ref, ref_lp=lp_r)
    want = []
    for i in range(5):
        j = S_SPAN[i]
        s = sum(float(lp_s[k]) for k in range(5) if S_SPAN[k] == j)
        t = sum(float(lp_t[k]) for k in range(5) if T_SPAN[k] == j)
        b = sum(float(lp_b[k]) for k in range(5) if T_SPAN[k] == j)
        r = b if ref == "base" else sum(float(lp_r[k]) for k in range(5) if S_SPAN[k] == j)
        a = t - s if method == "opd" else lam * (t - r) - (s - r)
        want.append(max(-clip, min(clip, a)) if clip else a)
    torch.testing.assert_close(got.double(), torch.tensor(want, dtype=torch.float64), rtol=1e-5, atol=1e-6)
    assert stats["r_opd"].shape == (N_SPANS,)
    if clip:
        assert stats["clipped"].sum() > 0
    with pytest.raises(ValueError):
        CL.span_token_advantages(lp_s, torch.tensor(S_SPAN), lp_t, torch.tensor(T_SPAN), N_SPANS, method="jsd",
                                 exopd_lambda=lam, clip=None)


def test_uld_loss_gives_no_gradient_to_the_teacher():
    s = torch.randn(3, 7, requires_grad=True)
    t = torch.randn(3, 9, requires_grad=True)
    CL.uld_loss(torch.log_softmax(s, -1), torch.log_softmax(t, -1)).sum().backward()
    assert s.grad.abs().sum() > 0 and t.grad is None


# ------------------------------------------------------------------------------- against a plain forward

@pytest.fixture(scope="module")
def family(world):
    return build_other_family(world, seed=5)


def cross_config(world, family, **training):
    cfg = config_dict(world, **training)
    cfg["teachers"] = [{"name": "xt", "model": str(family[0]), "context": "full_solution"}]
    cfg["base"] = {"model": str(family[1])}
    return cfg


def ref_token_logp(model, prompt, completion, tau=1.0):
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1:len(prompt) + len(completion) - 1]
    return torch.log_softmax(logits.double() / tau, -1)  # [n, V]


def ref_uld(lp, lq):
    p = sorted(lp.exp(), key=lambda x: -float(x.detach()))
    q = sorted(lq.exp(), key=lambda x: -float(x.detach()))
    zero = torch.zeros((), dtype=torch.float64)
    width = max(len(p), len(q))
    p, q = p + [zero] * (width - len(p)), q + [zero] * (width - len(q))
    return sum((a - b).abs() for a, b in zip(p, q))


@pytest.mark.slow
@pytest.mark.parametrize("method,ref", [("opd", None), ("exopd", "student"), ("exopd", "base"), ("uld", None)])
def test_cross_gradient_equals_a_plain_forward_reference(world, family, method, ref):
    training = {"method": method, **({"exopd_reference": ref} if ref else {})}
    tc = config.resolve_training(from_dict(cross_config(world, family, **training)))
    st = prepare(tc, torch.device("cpu"))
    assert st.roles.cross is not None and st.roles.cross.base_side == ("teacher" if ref == "base" else None)
    s_tok, t_tok = st.tok, st.roles.cross.teacher_tok
    texts = ["a) 3+4=7\nb) 7*2=4", "Answer: 12", "c) 8-9=9\nAnswer: 9"]
    comps = [s_tok(x, add_special_tokens=False)["input_ids"] for x in texts]
    comps[1] = comps[1] + [st.stop_ids[0]]  # a finished row: the stop id pairs with the teacher's EOS
    letters, lead = [s_tok.convert_tokens_to_ids(c) for c in "Step"], s_tok.convert_tokens_to_ids("\u00c3")
    comps.append(letters + [lead] + letters)  # non-canonical, cut before the half "é": trains its first 4 tokens
    comps.append([lead] + letters)  # nothing round-trips: left out, trains nothing
    rows = [0, 1, 2, 3, 4]
    mb = MicroBatch(0, rows, [st.train.student_prompts[i] for i in rows], [st.train.teacher_prompts[i] for i in rows],
                    [st.train.base_prompts[i] for i in rows], comps, [False, True, False, False, False])
    n = mb.n_tokens
    student = st.roles.student
    student.zero_grad(set_to_none=True)
    sums = cross_micro_batch_backward(CompletionHidden(student), st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=4,
                                      scale=1.0 / n, ref=st.reference, cross=st.roles.cross)
    got = {k: p.grad.clone() for k, p in student.named_parameters() if p.grad is not None}
    assert sums.stats["left_out"] == 1 and sums.counts["left_out"] == 5

    student.zero_grad(set_to_none=True)
    from transformers import AutoModelForCausalLM

    teacher = AutoModelForCausalLM.from_pretrained(family[0]).double().eval()  # copies: the loaded ones are cached
    base = AutoModelForCausalLM.from_pretrained(family[1]).double().eval()
    lam = st.loss.exopd_lambda
    total = 0.0
    for r in range(4):
        al = retokenize(comps[r], s_tok, t_tok, st.stop_ids, t_tok.eos_token_id)
        assert isinstance(al, Retokenized) and al.n_student == (4 if r == 3 else len(comps[r]))
        lps = ref_token_logp(student, mb.student_prompts[r], comps[r])  # float32 forward, float64 softmax, grad
        with torch.no_grad():
            lpt = ref_token_logp(teacher, mb.teacher_prompts[r], al.teacher_ids)
            lpb = ref_token_logp(base, mb.base_prompts[r], al.teacher_ids)
        for (s_lo, s_hi), (t_lo, t_hi) in zip(al.spans.student, al.spans.teacher):
            span_lp = sum(lps[i, comps[r][i]] for i in range(s_lo, s_hi))
            if method == "uld":
                total = total + ref_uld(lps[s_lo], lpt[t_lo])
                continue
            s_val = float(span_lp.detach())
            t_val = sum(float(lpt[i, al.teacher_ids[i]]) for i in range(t_lo, t_hi))
            b_val = sum(float(lpb[i, al.teacher_ids[i]]) for i in range(t_lo, t_hi))
            r_val = b_val if ref == "base" else s_val  # step 0: the initial student is the student
            adv = t_val - s_val if method == "opd" else lam * (t_val - r_val) - (s_val - r_val)
            total = total - adv * span_lp
    (total / n).backward()
    want = {k: p.grad for k, p in student.named_parameters() if p.grad is not None}
    assert set(got) == set(want)
    biggest = max(float(w.abs().max()) for w in want.values())
    assert biggest > 1e-4
    for k in want:
        torch.testing.assert_close(got[k], want[k].float(), rtol=1e-3, atol=1e-5 * biggest)
    assert math.isfinite(float(sums.loss))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["opd", "uld"])
def test_short_training_run_against_a_teacher_of_another_tokenizer(world, family, tmp_path, method):
    import yaml

    cfg = cross_config(world, family, method=method, max_steps=3, num_generations=2)
    cfg.pop("base")
    cfg["student"] = {"model": str(ZOO / "student")}  # trained: its samples are mostly canonical text (random ones are not)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert cli.main([str(path), "--out", str(tmp_path / "run")]) == 0
    recs = read_metrics(tmp_path / "run")
    assert [r["step"] for r in recs] == [1, 2, 3]
    for r in recs:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0
        assert 0.0 <= r["left_out_ratio"] < 1.0
        assert ("uld" in r) == (method == "uld")
    assert all(math.isfinite(r["r_opd"]) and math.isfinite(r["kl_k3"]) for r in recs)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["jsd", "opd2"])
def test_methods_that_need_one_vocabulary_are_refused_in_one_line(world, family, method):
    tc = config.resolve_training(from_dict(cross_config(world, family, method=method)))
    with pytest.raises(OpsdError, match="needs one vocabulary") as e:
        prepare(tc, torch.device("cpu"))
    assert "\n" not in str(e.value)
