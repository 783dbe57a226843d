"""The training levers (issue 33): token masks and context schedules against slow float64 references, and
short training runs of the tiny world with a mask and a schedule."""

from __future__ import annotations

import math
import random

import pytest
import torch
from fixtures_trainer import config_dict, one_thread, read_metrics, world, write_config  # noqa: F401 (fixtures)

from opsd_diag.config import training as config
from opsd_diag.config.levers import ContextScheduleSpec, TokenMaskSpec
from opsd_diag.config.spec import from_dict
from opsd_diag.core import context_schedule as cs
from opsd_diag.core import token_mask as tm
from opsd_diag.engine.step_sums import StepSums
from opsd_diag.engine.train_step import CompletionHidden, MicroBatch, micro_batch_backward, rescale_to_kept
from opsd_diag.errors import OpsdError
from trainer import cli
from trainer.setup import prepare


def mask(**kw) -> tm.MaskSettings:
    return TokenMaskSpec(**kw).settings()


# ------------------------------------------------------------------------------- the kept tokens

def ref_surprising(logprobs: list, share: float) -> list[bool]:
    """Per rollout: visit the rollouts from the largest mean surprisal down (ties: the earlier first, counted by
    hand), keeping each whose tokens still fit in ``share`` of all the tokens."""
    mine = [r for r in range(len(logprobs)) if len(logprobs[r]) > 0]
    budget = share * sum(len(lp) for lp in logprobs)
    surprise = {r: -math.fsum(logprobs[r]) / len(logprobs[r]) for r in mine}
    order = sorted(mine, key=lambda r: sum(1 for q in mine if surprise[q] > surprise[r]
                                           or (surprise[q] == surprise[r] and q < r)))
    kept, used = [False] * len(logprobs), 0
    for r in order:
        if used + len(logprobs[r]) <= budget:
            kept[r] = True
            used += len(logprobs[r])
    return kept


def ref_keep(m: tm.MaskSettings, scores: dict, lengths: list[int], correct, logprobs=None) -> list[bool]:
    """Explicit loops over rollouts and tokens, ranks counted by hand."""
    out, start = [], 0
    surprising = ref_surprising(logprobs, m.rollouts_share) if m.rollouts == "surprising" else None
    for r, L in enumerate(lengths):
        idx = list(range(start, start + L))
        for t, i in enumerate(idx):
            if m.kind == "all":
                k = True
            elif m.kind == "position":
                k = m.positions[0] <= t and (m.positions[1] is None or t < m.positions[1])
            elif m.kind == "opd2_gate":
                k = scores["gate"][i] == 1.0
            elif m.kind == "confident_disagreement":
                k = scores["teacher_top1_p"][i] >= m.teacher_confidence and scores["disagree"][i] == 1.0
            else:
                key = "h_s" if m.kind == "entropy" else "signal"
                v = [float(scores[key][j]) for j in idx]
                v = [x if math.isfinite(x) else -math.inf for x in v]
                rank = sum(1 for j in range(L) if v[j] < v[t] or (v[j] == v[t] and j < t))
                if m.kind == "entropy":
                    u = (rank + 0.5) / L
                    k = m.entropy_quantiles[0] < u <= m.entropy_quantiles[1]
                else:
                    k = rank >= L - math.ceil(m.advantage_top * L)
                k = k and math.isfinite(float(scores[key][i]))
            if m.rollouts == "surprising":
                k = k and surprising[r]
            elif m.rollouts != "all":
                k = k and correct[r] is not None and correct[r] == (m.rollouts == "correct")
            out.append(bool(k))
        start += L
    return out


MASKS = [dict(kind="all"), dict(kind="entropy", entropy_quantiles=[0.5, 1.0]),
         dict(kind="entropy", entropy_quantiles=[0.2, 0.7]), dict(kind="advantage", advantage_top=0.2),
         dict(kind="advantage", advantage_top=0.5, rollouts="incorrect"), dict(kind="opd2_gate"),
         dict(kind="confident_disagreement", teacher_confidence=0.4), dict(kind="position", positions=[1, 4]),
         dict(kind="position", positions=[2, None], rollouts="correct"), dict(kind="all", rollouts="correct"),
         dict(kind="all", rollouts="surprising"), dict(kind="position", positions=[1, None], rollouts="surprising",
                                                       rollouts_share=0.7),
         dict(kind="entropy", entropy_quantiles=[0.5, 1.0], rollouts="surprising", rollouts_share=0.3)]


@pytest.mark.parametrize("kw", MASKS, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_kept_tokens_equal_explicit_loops(kw):
    g = torch.Generator().manual_seed(3)
    for trial in range(5):
        lengths = [int(x) for x in torch.randint(0, 9, (5,), generator=g)]
        n = sum(lengths)
        scores = {"h_s": torch.rand(n, generator=g).round(decimals=1),  # ties on purpose
                  "signal": torch.randn(n, generator=g).abs(),
                  "gate": torch.randint(0, 2, (n,), generator=g).float(),
                  "teacher_top1_p": torch.rand(n, generator=g), "disagree": torch.randint(0, 2, (n,), generator=g).float()}
        if n:
            scores["signal"][0] = float("nan")  # never kept by a scored rule
        correct = [random.Random(trial * 7 + r).choice([True, False, None]) for r in range(5)]
        logprobs = [(-torch.rand(L, generator=g).round(decimals=1)).tolist() for L in lengths]  # ties on purpose
        m = mask(**kw)
        got = tm.keep(m, scores, lengths, correct, logprobs).tolist()
        assert got == ref_keep(m, scores, lengths, correct, logprobs)


def test_entropy_halves_keep_at_most_half_and_partition_each_rollout():
    g = torch.Generator().manual_seed(0)
    lengths = [1, 2, 3, 7, 8]
    scores = {"h_s": torch.rand(sum(lengths), generator=g)}
    hi = tm.keep(mask(kind="entropy", entropy_quantiles=[0.5, 1.0]), scores, lengths)
    lo = tm.keep(mask(kind="entropy", entropy_quantiles=[0.0, 0.5]), scores, lengths)
    assert bool((hi ^ lo).all())  # every token in exactly one half
    for part in torch.split(hi, lengths):
        assert int(part.sum()) <= len(part) / 2 + 1e-9


def test_token_scores_equal_float64_reference():
    g = torch.Generator().manual_seed(1)
    n, v, tau = 6, 11, 0.7
    s, t, b = (torch.randn(n, v, generator=g) * 2 for _ in range(3))
    ids = torch.randint(0, v, (n,), generator=g)
    got = tm.token_scores(s, t, b, ids, torch.randn(n, generator=g), temperature=tau, centering=None)
    for i in range(n):
        ls = torch.log_softmax(s[i].double() / tau, -1)
        lt = torch.log_softmax(t[i].double() / tau, -1)
        lb = torch.log_softmax(b[i].double() / tau, -1)
        h = -sum(float(ls[j].exp() * ls[j]) for j in range(v))
        a_opd = float(lt[ids[i]] - ls[ids[i]]) - sum(float(ls[j].exp() * (lt[j] - ls[j])) for j in range(v))
        a_delta = float(lt[ids[i]] - lb[ids[i]]) - sum(float(ls[j].exp() * (lt[j] - lb[j])) for j in range(v))
        assert float(got["h_s"][i]) == pytest.approx(h, rel=1e-5, abs=1e-6)
        assert float(got["gate"][i]) == float(a_opd * a_delta > 0)
        assert float(got["teacher_top1_p"][i]) == pytest.approx(float(lt.max().exp()), rel=1e-5)
        assert float(got["disagree"][i]) == float(int(lt.argmax()) != int(ids[i]))


# ------------------------------------------------------------------------------- the masked loss

def _reference_grads(st, mb: MicroBatch, m: tm.MaskSettings, method: str, tau: float, beta: float) -> dict:
    """Float64, one rollout at a time: per-token losses, the kept tokens by ``ref_keep``, sum / kept count."""
    student = __import__("copy").deepcopy(st.roles.student).double()
    teacher = __import__("copy").deepcopy(st.roles.teacher).double()
    per_token, scores = [], {"h_s": [], "signal": []}
    for p_s, p_t, c in zip(mb.student_prompts, mb.teacher_prompts, mb.completions):
        ls_all = torch.log_softmax(student(torch.tensor([p_s + c])).logits[0, len(p_s) - 1:-1] / tau, -1)
        with torch.no_grad():
            lt_all = torch.log_softmax(teacher(torch.tensor([p_t + c])).logits[0, len(p_t) - 1:-1] / tau, -1)
        for t, y in enumerate(c):
            ls, lt = ls_all[t], lt_all[t]
            if method == "opd":
                adv = float((lt[y] - ls[y]).detach())
                loss = -adv * ls[y]
            else:  # generalised JSD, m = beta q + (1 - beta) p, term by term
                terms = []
                for j in range(ls.shape[0]):
                    p, q = ls[j].exp(), lt[j].exp()
                    mix = beta * q + (1 - beta) * p
                    terms.append(beta * q * (lt[j] - torch.log(mix)) + (1 - beta) * p * (ls[j] - torch.log(mix)))
                loss = sum(terms)
                adv = float(loss)
            per_token.append(loss)
            scores["h_s"].append(float(-(ls.exp() * ls).sum()))
            scores["signal"].append(abs(adv))
    kept = ref_keep(m, {k: torch.tensor(v) for k, v in scores.items()}, [len(c) for c in mb.completions],
                    mb.correct, mb.sampler_logprobs)
    total = sum(x for x, k in zip(per_token, kept) if k) / max(1, sum(kept))
    student.zero_grad()
    total.backward()
    return {n: p.grad.float() for n, p in student.named_parameters()}


@pytest.mark.parametrize("method,kw", [
    ("opd", dict(kind="advantage", advantage_top=0.4)),
    ("opd", dict(kind="entropy", entropy_quantiles=[0.5, 1.0], rollouts="correct")),
    ("jsd", dict(kind="entropy", entropy_quantiles=[0.0, 0.5])),
    ("jsd", dict(kind="advantage", advantage_top=0.3)),
    ("opd", dict(kind="all", rollouts="incorrect")),  # known before any model runs: rows dropped, then cut
    ("jsd", dict(kind="position", positions=[1, 4])),
    ("opd", dict(kind="position", positions=[2, None], rollouts="correct")),
    ("jsd", dict(kind="advantage", advantage_top=0.5, rollouts="incorrect")),
    ("opd", dict(kind="all", rollouts="surprising")),  # known before any model runs
    ("jsd", dict(kind="entropy", entropy_quantiles=[0.5, 1.0], rollouts="surprising", rollouts_share=0.7)),
])
def test_masked_loss_gradient_equals_float64_reference(world, method, kw):
    tc = config.resolve_training(from_dict(config_dict(world, method=method, beta=0.5, chunk_size=5)))
    st = prepare(tc, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    rows = list(range(4))
    comps = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (3, 7, 1, 6)]
    logprobs = [(-torch.rand(len(c), generator=g) * 3).tolist() for c in comps]
    mb = MicroBatch(0, rows, [st.train.student_prompts[i] for i in rows], [st.train.teacher_prompts[i] for i in rows],
                    None, comps, [False] * 4, correct=[True, False, True, None], sampler_logprobs=logprobs)
    m = mask(**kw)
    student = st.roles.student
    student.zero_grad(set_to_none=True)
    sums = micro_batch_backward(CompletionHidden(student), st.roles, mb, st.loss, pad_id=st.pad_id,
                                chunk_size=st.chunk_size, scale=1.0 / mb.n_tokens, mask=m)
    kept_ratio = float(sums.stats["kept"]) / sums.counts["kept"]
    assert 0.0 < kept_ratio < 1.0
    rescale_to_kept(list(student.parameters()), kept_ratio)
    ref = _reference_grads(st, mb, m, method, st.loss.temperature, st.loss.beta)
    for name, p in student.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=2e-3, atol=2e-6, msg=name)


class _Recording(torch.nn.Module):
    """``CompletionHidden`` that records the completions each forward receives."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.seen = CompletionHidden(model), []

    def forward(self, prompts, completions, pad_id):
        self.seen.append([list(c) for c in completions])
        return self.inner(prompts, completions, pad_id)


def _tiny_batch(world, method="opd", correct=(True, False, True, None)):
    tc = config.resolve_training(from_dict(config_dict(world, method=method, chunk_size=5)))
    st = prepare(tc, torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    rows = list(range(4))
    comps = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (3, 7, 1, 6)]
    return st, MicroBatch(0, rows, [st.train.student_prompts[i] for i in rows],
                          [st.train.teacher_prompts[i] for i in rows], None, comps, [True, False, True, False],
                          correct=list(correct))


def test_a_mask_known_before_the_models_runs_only_its_rows_up_to_their_last_kept_token(world):
    st, mb = _tiny_batch(world)
    hidden = _Recording(st.roles.student)
    sums = micro_batch_backward(hidden, st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=st.chunk_size,
                                scale=1.0 / mb.n_tokens, mask=mask(kind="position", positions=[0, 2],
                                                                   rollouts="correct"))
    assert hidden.seen == [[mb.completions[0][:2], mb.completions[2][:1]]]  # correct rows 0 and 2, cut after t=1
    assert sums.counts["kept"] == mb.n_tokens and float(sums.stats["kept"]) == 3.0  # counted over every token
    assert (sums.tokens, sums.rows, sums.finished) == (mb.n_tokens, 4, 2)  # the whole micro-batch's counts


def test_a_surprising_mask_runs_only_the_rollouts_it_keeps(world):
    st, mb = _tiny_batch(world)  # lengths 3, 7, 1, 6: a budget of 8.5 of 17 tokens
    mb.sampler_logprobs = [[-2.0] * 3, [-0.1] * 7, [-0.5], [-3.0] * 6]
    hidden = _Recording(st.roles.student)
    sums = micro_batch_backward(hidden, st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=st.chunk_size,
                                scale=1.0 / mb.n_tokens, mask=mask(rollouts="surprising"))
    # by surprisal: row 3 (6 tokens) fits, row 0 (3 more) would pass 8.5 and is skipped, row 2 (1 more) fits
    assert hidden.seen == [[mb.completions[2], mb.completions[3]]]
    assert float(sums.stats["kept"]) == 7.0 and sums.counts["kept"] == mb.n_tokens


def test_a_step_that_keeps_nothing_still_runs_a_zero_backward(world):
    st, mb = _tiny_batch(world, correct=(False, False, None, False))
    hidden = _Recording(st.roles.student)
    st.roles.student.zero_grad(set_to_none=True)
    sums = micro_batch_backward(hidden, st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=st.chunk_size,
                                scale=1.0 / mb.n_tokens, mask=mask(kind="all", rollouts="correct"))
    assert hidden.seen == [[mb.completions[0][:1]]]  # one token: every DDP process must run its backward
    assert float(sums.stats["kept"]) == 0.0 and float(sums.loss) == 0.0
    grads = [p.grad for p in st.roles.student.parameters() if p.requires_grad]
    assert grads and all(gr is not None and not gr.any() for gr in grads)


def test_a_non_finite_kept_token_is_located_in_its_rollout():
    mb = MicroBatch(0, [5, 6], [[1], [1]], None, None, [[7, 7, 7], [7, 7, 7, 7]], [False, False])
    sums = StepSums()
    flags = torch.tensor([False, False, True])  # the third of the chunk's kept tokens
    sums.note(mb, torch.tensor([0, 2, 4]), {"nonfinite": {"student": flags}})
    assert sums.first_nonfinite() == ("student", mb, 1, 1)  # flat position 4: row 1, completion position 1
    sums = StepSums()
    sums.note(mb, 3, {"nonfinite": {"teacher": torch.tensor([False, True])}})  # contiguous from flat 3
    assert sums.first_nonfinite() == ("teacher", mb, 1, 1)


# ------------------------------------------------------------------------------- the schedules

def ref_fraction(kind, start, end, steps, step, accuracies, ema):
    if kind == "fixed":
        return start
    if kind == "decay":
        return end + (start - end) * max(0.0, 1.0 - step / steps)
    a = 0.0
    for x in accuracies[:step]:  # the running accuracy before this step
        a = ema * a + (1 - ema) * x
    return end + (start - end) * (1 - a)


@pytest.mark.parametrize("kind", ["fixed", "decay", "adaptive"])
def test_revealed_fraction_equals_reference(kind):
    spec = ContextScheduleSpec(kind=kind, start=0.9, end=0.2, decay_steps=6, accuracy_ema=0.7)
    s = spec.settings(max_steps=10)
    accs = [0.1, 0.5, 0.25, 1.0, 0.0, 0.75, 0.5, 0.5, 1.0, 1.0]
    running = 0.0
    for step in range(10):
        assert cs.revealed_fraction(s, step, running) == pytest.approx(ref_fraction(kind, 0.9, 0.2, 6, step, accs,
                                                                                    0.7), abs=1e-12)
        running = cs.update_accuracy(s, running, accs[step])


def ref_reveal(text: str, f: float) -> str:
    """Walk the characters, counting words; stop right after the k-th."""
    n_words = len(text.split())
    k = math.floor(f * n_words + 0.5) if f < 1 else n_words
    if f >= 1:
        return text
    out, seen, in_word = [], 0, False
    for ch in text:
        if ch.isspace():
            if in_word and seen == k:
                break
            in_word = False
        else:
            if not in_word:
                if seen == k:
                    break
                seen += 1
            in_word = True
        out.append(ch)
    return "".join(out).rstrip() if k else ""


@pytest.mark.parametrize("f", [0.0, 0.1, 0.25, 0.5, 0.6, 0.99, 1.0])
def test_reveal_equals_character_walk(f):
    for text in ["a) 3+4=7\nb) 7*2=14\n  c) 14-1=13\nAnswer: 13", "one", "", "  lead and  trail  "]:
        assert cs.reveal(text, f) == ref_reveal(text, f)


def test_teacher_view_at_a_share_is_the_view_of_the_cut_solution(world, tmp_path):
    import json

    tc = config.resolve_training(from_dict(config_dict(world, method="opsd", teacher="self_full",
                                                       context_schedule={"kind": "decay", "start": 1.0, "end": 0.3})))
    st = prepare(tc, torch.device("cpu"))
    for f in (0.3, 0.55):
        got, _ = st.train.reveal([0, 3], f)
        cut = [{**st.train.problems[i], "solution": ref_reveal(st.train.problems[i]["solution"], f)} for i in (0, 3)]
        path = tmp_path / f"cut{f}.jsonl"
        path.write_text("".join(json.dumps(p) + "\n" for p in cut))
        plain = config_dict(world, method="opsd", teacher="self_full", data={"path": str(path)})
        want = prepare(config.resolve_training(from_dict(plain)), torch.device("cpu")).train.teacher_prompts
        assert got == want  # the unscheduled path on the cut problems
        assert got != [st.train.teacher_prompts[i] for i in (0, 3)]


# ------------------------------------------------------------------------------- config and short runs

@pytest.mark.parametrize("training,needle", [
    ({"method": "sft", "token_mask": {"kind": "entropy"}}, "does not apply to method sft"),
    ({"method": "opd", "teacher": "teacher", "context_schedule": {"kind": "decay"}}, "sees no solution"),
    ({"token_mask": {"kind": "entropy", "entropy_quantiles": [0.7, 0.2]}}, "entropy_quantiles"),
    ({"context_schedule": {"kind": "decay", "start": 0.2, "end": 0.8}}, "must not exceed start"),
    ({"token_mask": {"kind": "everything"}}, "token_mask.kind"),
])
def test_lever_config_errors_name_the_key(world, training, needle):
    with pytest.raises(OpsdError) as e:
        config.resolve_training(from_dict(config_dict(world, **training)))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_opd2_gate_without_a_base_is_refused(world):
    d = config_dict(world, token_mask={"kind": "opd2_gate"})
    d.pop("base")
    with pytest.raises(OpsdError, match="opd2_gate needs a base"):
        config.resolve_training(from_dict(d))


def test_short_run_with_a_mask_keeps_its_share_and_logs_it(world, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=2, num_generations=2,
                       token_mask={"kind": "entropy", "entropy_quantiles": [0.5, 1.0]})
    assert cli.main([str(cfg), "--out", str(tmp_path / "run")]) == 0
    for r in read_metrics(tmp_path / "run"):
        assert 0.0 < r["kept_ratio"] <= 0.5 + 1e-9  # at most half of each rollout
        assert r["kept_tokens"] == round(r["tokens"] * r["kept_ratio"]) and math.isfinite(r["loss"])
        assert r["revealed_fraction"] == 1.0


def test_short_run_keeping_the_most_surprising_rollouts_trains_at_most_their_share(world, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=2, num_generations=2,
                       token_mask={"rollouts": "surprising", "rollouts_share": 0.5})
    assert cli.main([str(cfg), "--out", str(tmp_path / "run")]) == 0
    for r in read_metrics(tmp_path / "run"):
        assert 0.0 < r["kept_ratio"] <= 0.5 + 1e-9 and math.isfinite(r["loss"])


def test_a_position_window_samples_only_to_its_end_and_trains_as_on_whole_rollouts(world, tmp_path, monkeypatch,
                                                                                     one_thread):
    cfg = write_config(tmp_path / "c.yaml", world, max_steps=2, num_generations=2,
                       token_mask={"kind": "position", "positions": [0, 3]})
    assert cli.main([str(cfg), "--out", str(tmp_path / "cut")]) == 0
    from opsd_diag.config.settings import MaskSettings
    monkeypatch.setattr(MaskSettings, "sampled_length", lambda self, n: n)  # as before: whole rollouts sampled
    assert cli.main([str(cfg), "--out", str(tmp_path / "whole")]) == 0
    cut, whole = read_metrics(tmp_path / "cut"), read_metrics(tmp_path / "whole")
    assert len(cut) == len(whole) == 2
    for c, w in zip(cut, whole):
        assert c["completion_length"] <= 3 < w["completion_length"]  # sampling stopped at the window's end
        assert c["kept_tokens"] == w["kept_tokens"]  # the same tokens trained: the rollouts' first three
        # float32 on batches of other lengths: a CPU's kernels may sum in another order, so the second step agrees to
        # float32 rounding (2.5e-6 relative seen on one Xeon), not bit for bit; other tokens would move the loss itself
        assert c["loss"] == pytest.approx(w["loss"], rel=1e-5, abs=1e-9)
        assert c["grad_norm"] == pytest.approx(w["grad_norm"], rel=1e-5)
    assert MaskSettings(kind="position", entropy_quantiles=(0.0, 1.0), advantage_top=1.0, teacher_confidence=0.0,
                        positions=(0, 3), rollouts="correct").sampled_length(64) == 64  # an outcome needs it all


def test_short_run_with_a_decay_schedule_follows_its_fractions(world, tmp_path):
    cfg = write_config(tmp_path / "c.yaml", world, method="opsd", teacher="self_full", max_steps=3,
                       context_schedule={"kind": "decay", "start": 1.0, "end": 0.25, "decay_steps": 2})
    assert cli.main([str(cfg), "--out", str(tmp_path / "run")]) == 0
    assert [r["revealed_fraction"] for r in read_metrics(tmp_path / "run")] == pytest.approx([1.0, 0.625, 0.25])


def test_short_adaptive_run_reads_the_rollouts_outcomes_and_resumes_its_accuracy(world, tmp_path, monkeypatch):
    import trainer.rollouts

    monkeypatch.setattr(trainer.rollouts, "outcome", lambda tok, ps, i, ids, f, checker: i % 3 == 0)
    training = dict(method="opsd", teacher="self_full", max_steps=4, save_steps=2,
                    context_schedule={"kind": "adaptive", "start": 1.0, "end": 0.25, "accuracy_ema": 0.5},
                    token_mask={"kind": "all", "rollouts": "incorrect"})
    cfg = write_config(tmp_path / "c.yaml", world, **training)
    assert cli.main([str(cfg), "--out", str(tmp_path / "run")]) == 0
    recs = read_metrics(tmp_path / "run")
    running = 0.0
    for r in recs:
        assert r["revealed_fraction"] == pytest.approx(0.25 + 0.75 * (1 - running), abs=1e-12)
        running = 0.5 * running + 0.5 * r["rollout_accuracy"]
        assert r["running_accuracy"] == pytest.approx(running, abs=1e-12)
        assert (r["kept_ratio"] < 1.0) == (r["rollout_accuracy"] > 0)  # the correct rollouts' tokens are left out
        assert (r["kept_ratio"] == 0.0) == (r["rollout_accuracy"] == 1.0)
    assert any(0.0 < r["rollout_accuracy"] < 1.0 for r in recs)
    # stopped after step 2 and resumed: the same records (the running accuracy is in the checkpoint)
    import trainer.loop as loop
    from fixtures_trainer import without_time

    from opsd_diag import jobs
    out, real_step = tmp_path / "half", loop.train_step

    def stop_after_two(acc, st, *a, **kw):
        rec = real_step(acc, st, *a, **kw)
        if a[-1] == 1:
            (out / jobs.STOP).touch()
        return rec

    monkeypatch.setattr(loop, "train_step", stop_after_two)
    out.mkdir()
    assert cli.main([str(cfg), "--out", str(out)]) == 0
    monkeypatch.setattr(loop, "train_step", real_step)
    assert jobs.read_status(out)["status"] == "stopped"
    assert cli.main([str(cfg), "--out", str(out), "--resume"]) == 0
    assert without_time(read_metrics(out)) == without_time(recs)
