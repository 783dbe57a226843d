"""The lookahead's forgetting set (issue 32, item 1; ``lookahead.forgetting``, engine.lookahead): the stored pass@1
change against the initial and the stepped student sampled again by hand with the documented seed on the forgetting
problems rendered by hand, an unchanged student's change exactly 0, the table column (opsd_diag.features) and the
user errors, each one message naming the key before any model loads."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import ZOO, tiny_config, write_jsonl
from test_ideal import one_torch_thread  # noqa: F401 (the shared autouse fixture: one torch thread)
from test_v2_quantities import ref_mean_ci

from opsd_diag.config.spec import from_dict
from opsd_diag.engine import lookahead
from opsd_diag.engine.diagnose import forgetting_problems
from opsd_diag.errors import OpsdError

SYSTEM = "Solve it."
REFERENCE = "{solution}\nAnswer: {answer}"  # lookahead.reference: the toy task's response (zoo.task.reasoning_response)


def forgetting_rows(n: int = 5) -> list[dict]:
    """Problems unlike the diagnosis' (another seed and prefix), and one without an answer (left out)."""
    from opsd_diag.zoo import task

    rows = task.generate(n, 97, prefix="f")
    return [*rows, {"id": "no_answer", "prompt": rows[0]["prompt"] + " again"}]


@pytest.fixture(scope="module")
def forgetting_run(tmp_path_factory):
    from opsd_diag.engine.diagnose import prepare, run_diagnosis
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("forgetting_run")
    data = write_jsonl(root / "problems.jsonl", task.generate(6, 11))
    forget = write_jsonl(root / "forget.jsonl", forgetting_rows())
    cfg = from_dict(tiny_config(ZOO, data, sampling={"num_samples": 4, "max_completion_length": 24,
                                                     "teacher_samples": 1},
                                lookahead={"methods": ["opd"], "steps": 2, "rollouts_per_step": 4,
                                           "learning_rate": 3e-3, "forgetting_samples": 3, "levers": True,
                                           "forgetting": {"path": str(forget), "system_prompt": SYSTEM},
                                           "reference": REFERENCE}))
    run_diagnosis(cfg, root / "run", show_progress=False)
    return cfg, prepare(cfg), root / "run"


def hand_wins(model, prep, prompts, answers, cfg, n: int):
    """[P][n] 0/1 outcomes of ``model``'s samples at the forgetting seed, each checked as the diagnosis checks, and
    the tokens sampled."""
    from opsd_diag.config.settings import derive_seed
    from opsd_diag.engine.sampling import sample_hf
    from opsd_diag.io.thinking import answer_text
    from opsd_diag.io.verify import is_correct

    sampling = cfg.sampling.settings(derive_seed(cfg.lookahead.seed, 43), num_samples=n)
    comps = sample_hf(model, prep.tok, prompts, sampling, prep.stop_ids)
    wins = [[float(is_correct(answer_text(prep.tok, c.ids), a, cfg.analysis.checker)) for c in cs]
            for cs, a in zip(comps, answers)]
    return wins, sum(len(c.ids) for cs in comps for c in cs)


def logp64(model, prompt: list[int], completion: list[int], temperature: float):
    """``[len(completion), V]`` float64 log-probs of ``model`` (at ``temperature``) at the completion's positions, from
    one unpadded forward of a float64 copy."""
    from copy import deepcopy

    import torch

    with torch.no_grad():
        logits = deepcopy(model).double()(input_ids=torch.tensor([prompt + completion])).logits[0]
    return torch.log_softmax(logits[len(prompt) - 1:len(prompt) + len(completion) - 1] / temperature, -1)


def stepped_by_hand(cfg, prep, out, config: str = "teacher"):
    from opsd_diag.config.settings import LossSettings
    from opsd_diag.config.spec import centering_k
    from opsd_diag.engine.train_step import Roles
    from opsd_diag.io import store

    s, clip = lookahead.settings(cfg)
    step_rows, _ = lookahead.split(store.read_table(out, "rollouts"))
    sc = cfg.scoring
    loss = LossSettings(method="opd", temperature=cfg.scoring_temperature, beta=sc.jsd_beta,
                        centering=centering_k(sc.centering), exopd_lambda=sc.exopd_lambda, clip=clip)
    stepped, _ = lookahead.take_steps(
        prep.student, lambda t: Roles(t, None, "external", prep.teacher_models[config], None, prep.student),
        step_rows, config, loss, None, s, prep.tok.pad_token_id)
    return stepped


def test_forgetting_change_equals_samples_drawn_again_by_hand(forgetting_run):
    """(teacher, opd): the problems rendered by hand as the student's view (io.views.student_view, the set's system
    prompt), sampled from the initial and the stepped student with derive_seed(lookahead.seed, 43), per-problem pass@1
    changes and their bootstrap over problems in loops; the costs and the table column."""
    from opsd_diag.io.views import student_view
    from opsd_diag.run import Run

    cfg, prep, out = forgetting_run
    la = json.loads((out / "summary.json").read_text())["lookahead"]
    problems = [p for p in forgetting_rows() if p.get("answer") is not None]
    prompts = [student_view(prep.tok, p, SYSTEM, prep.renderers[0].fmt).ids for p in problems]
    assert prep.forgetting.prompts == prompts and [p["id"] for p in prep.forgetting.problems] == [
        p["id"] for p in problems]
    assert all(len(ids) > len(student_view(prep.tok, p, None, prep.renderers[0].fmt).ids)
               for ids, p in zip(prompts, problems))  # the set's own system prompt is in its views
    answers = [p["answer"] for p in problems]
    old, old_tokens = hand_wins(prep.student, prep, prompts, answers, cfg, 3)
    stepped = stepped_by_hand(cfg, prep, out)
    new, new_tokens = hand_wins(stepped, prep, prompts, answers, cfg, 3)
    assert hand_wins(prep.student, prep, prompts, answers, cfg, 3)[0] == old  # the same seed: the same samples
    assert old != new and any(map(any, new))  # a change, not a collapse: the comparison can tell problems apart
    assert la["forgetting_prompts"] == len(problems) == 5  # the problem without an answer is left out
    assert la["forgetting_initial_tokens"] == old_tokens
    assert la["forgetting_initial_pass1"] == pytest.approx(sum(sum(o) / 3 for o in old) / len(old), abs=1e-12)
    r = la["configs"]["teacher"]["opd"]
    assert r["forgetting_sampled_tokens"] == new_tokens
    per = {p["id"]: [sum(n) / 3 - sum(o) / 3] for p, o, n in zip(problems, old, new)}
    want = ref_mean_ci(per, cfg.analysis.bootstrap, cfg.sampling.seed)
    got = r["forgetting"]["pass@1"]
    assert (got["estimate"], got["lo"], got["hi"]) == pytest.approx(want, abs=1e-9)
    assert got["n_prompts"] == 5 and set(r["forgetting"]) == {"pass@1"}
    assert "fresh" not in r or r["fresh"] == {}  # fresh_samples 0: no fresh samples
    frame = Run.load(out).lookahead_frame()
    row = frame[(frame["config"] == "teacher") & (frame["method"] == "opd")].iloc[0]
    assert (row["forgetting_pass1"], row["forgetting_pass1_lo"], row["forgetting_pass1_hi"]) == pytest.approx(want,
                                                                                                              abs=1e-9)
    assert set(la["configs"]) == {"teacher", "self_full"}
    for c in la["configs"]:  # every (config, method) measured it
        assert la["configs"][c]["opd"]["forgetting"]["pass@1"]["n_prompts"] == 5


def test_an_unchanged_student_forgets_nothing(forgetting_run, tmp_path):
    """A learning rate too small to move a float32 weight: the stepped student's samples are the initial one's
    (common random numbers), so every change is exactly 0 with a zero-width interval."""
    import torch

    from opsd_diag.engine.sampling import sample_hf

    cfg, prep, out = forgetting_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    tiny = cfg.model_copy(update={"lookahead": cfg.lookahead.model_copy(update={"learning_rate": 1e-30})})
    res = lookahead.for_diagnosis(copy, tiny, prep.student, prep.teacher_models, prep.base, prep.tok, [],
                                  problems=prep.problems, forgetting=prep.forgetting,
                                  sample=lambda m, p, s: sample_hf(m, prep.tok, p, s, prep.stop_ids))
    stepped = stepped_by_hand(tiny, prep, out)
    assert all(torch.equal(a.float(), b.float()) for a, b in zip(stepped.parameters(), prep.student.parameters()))
    for c, methods in res["configs"].items():
        got = methods["opd"]["forgetting"]["pass@1"]
        assert (got["estimate"], got["lo"], got["hi"]) == (0.0, 0.0, 0.0), c
        assert methods["opd"]["forgetting_sampled_tokens"] == res["forgetting_initial_tokens"]
        for key in ("forgetting_ll", "forgetting_kl", "reference_ll", "reference_kl"):  # scored the same
            assert (methods["opd"][key]["estimate"], methods["opd"][key]["hi"]) == (0.0, 0.0), (c, key)


def test_no_forgetting_set_no_columns():
    """A lookahead without ``lookahead.forgetting`` (``lookahead.reference``) stores none and its table has no
    forgetting (reference) columns."""
    from types import SimpleNamespace

    from opsd_diag import features
    from opsd_diag.summary import Lookahead

    def summary(la):  # lookahead_frame reads only the summary's lookahead
        return SimpleNamespace(lookahead=Lookahead.model_validate(la))

    ci = {"estimate": 0.1, "lo": 0.0, "hi": 0.2, "n_prompts": 3}
    la = {"status": "ok", "configs": {"t": {"opd": {"dv": ci, "dll": ci, "kl": ci}}}}
    assert not any(c.startswith(("forgetting", "reference")) for c in features.lookahead_frame(summary(la)).columns)
    with_set = {**la, "forgetting_prompts": 3,
                "configs": {"t": {"opd": {"dv": ci, "dll": ci, "kl": ci, "forgetting": {"pass@1": ci}},
                                  "jsd": {"dv": ci, "dll": ci, "kl": ci}}}}
    frame = features.lookahead_frame(summary(with_set)).set_index("method")
    assert frame.loc["opd", "forgetting_pass1"] == 0.1 and frame.loc["opd", "forgetting_pass1_hi"] == 0.2
    assert np.isnan(frame.loc["jsd", "forgetting_pass1"])  # not measured there: NaN


# ------------------------------------------------------------------------------------ user errors

def _config(tmp_path, forgetting: dict, **lookahead_over):
    from opsd_diag.zoo import task

    data = write_jsonl(tmp_path / "problems.jsonl", task.generate(4, 11))
    # a student that does not exist: an error about the forgetting set proves it came before any model loads
    return from_dict({**tiny_config(ZOO, data), "student": {"model": str(tmp_path / "no_such_model")},
                      "lookahead": {"forgetting": forgetting, **lookahead_over}})


@pytest.mark.parametrize("make, match", [
    (lambda d: {"path": str(d / "missing.jsonl")}, r"missing\.jsonl not found: set lookahead\.forgetting\.path"),
    (lambda d: {"path": str(write_jsonl(d / "f.jsonl", [{"prompt": "1+1"}]))},
     r"lookahead\.forgetting \(.*f\.jsonl\) has no answers.*fields: \{answer: \.\.\.\}"),
    (lambda d: {"path": str(write_jsonl(d / "f.jsonl", [{"q": "1+1", "a": "2"}])), "fields": {"prompt": "q",
                                                                                                 "answer": "ans"}},
     r"lookahead\.forgetting\.fields maps answer to 'ans'.*check the spelling"),
    (lambda d: {"path": str(write_jsonl(d / "f.jsonl", [{"question": "1+1", "answer": "2"}]))},
     r"has no 'prompt' field: map your prompt column with lookahead\.forgetting\.fields"),
    (lambda d: {"path": str(d / "f.txt")}, r"set lookahead\.forgetting\.format"),
])
def test_forgetting_set_errors_name_the_key_before_any_model_loads(tmp_path, make, match):
    from opsd_diag.engine.diagnose import prepare

    (tmp_path / "f.txt").write_text("x")
    cfg = _config(tmp_path, make(tmp_path))
    with pytest.raises(OpsdError, match=match) as e:
        prepare(cfg)
    assert "\n" not in str(e.value) and "no_such_model" not in str(e.value)


def test_forgetting_section_keys_are_checked(tmp_path):
    with pytest.raises(OpsdError, match=r"lookahead\.forgetting\.fieldz: unknown key"):
        _config(tmp_path, {"path": "f.jsonl", "fieldz": {}})
    with pytest.raises(OpsdError, match=r"lookahead\.forgetting_samples"):
        _config(tmp_path, {"path": "f.jsonl"}, forgetting_samples=0)
    off = _config(tmp_path, {"path": str(tmp_path / "missing.jsonl")}, enabled=False)
    assert forgetting_problems(off) is None  # a lookahead that does not run reads no forgetting set


def test_forgetting_is_not_taken_from_the_regression_set(tmp_path):
    """The documented decision: training.eval.regression does not fill lookahead.forgetting (it costs samples)."""
    from opsd_diag.zoo import task

    data = write_jsonl(tmp_path / "problems.jsonl", task.generate(4, 11))
    cfg = from_dict({**tiny_config(ZOO, data), "lookahead": {},
                     "training": {"method": "opd", "teacher": "teacher",
                                  "eval": {"regression": {"path": str(data)}}}})
    assert cfg.lookahead.forgetting is None and forgetting_problems(cfg) is None


def test_a_forgetting_prompt_too_long_for_the_student_is_named(tmp_path):
    """Rendered and checked with the models loaded, before the run directory exists."""
    from opsd_diag.engine.diagnose import prepare
    from opsd_diag.zoo import task

    data = write_jsonl(tmp_path / "problems.jsonl", task.generate(4, 11))
    long = write_jsonl(tmp_path / "f.jsonl", [{"id": "long", "prompt": "1+1 " * 2000, "answer": "2"}])
    cfg = from_dict(tiny_config(ZOO, data, lookahead={"forgetting": {"path": str(long)}}))
    with pytest.raises(OpsdError, match=r"problem 'long': its prompt is \d+ tokens for the student model .*leave "
                                        r"it out of lookahead\.forgetting, or lower sampling\.max_completion_length"):
        prepare(cfg)


def test_the_lever_lookahead_measures_the_forgetting_set(forgetting_run):
    """engine.levers with the forgetting set's sampler: all-token training's change is the lookahead's (the same
    steps, the same seeds), and a masked candidate's equals its stepped student sampled again by hand."""
    from opsd_diag.config.levers import CANDIDATES, TokenMaskSpec
    from opsd_diag.engine import levers
    from opsd_diag.engine.sampling import sample_hf
    from opsd_diag.engine.train_step import Roles
    from opsd_diag.io import store
    from opsd_diag.levers import frame

    cfg, prep, out = forgetting_run
    forget = lookahead.forgetting_sampler(cfg, prep.tok, lambda m, p, s: sample_hf(m, prep.tok, p, s, prep.stop_ids),
                                          prep.forgetting)
    res = levers.run(cfg, prep.student, prep.teacher_models["teacher"], prep.base, store.read_table(out, "rollouts"),
                     "teacher", "opd", prep.tok.pad_token_id, lookahead, None, forget)
    plain = json.loads((out / "summary.json").read_text())["lookahead"]["configs"]["teacher"]["opd"]["forgetting"]
    got_all = res["settings"]["all"]["forgetting"]["pass@1"]
    assert [got_all[k] for k in ("estimate", "lo", "hi")] == pytest.approx(
        [plain["pass@1"][k] for k in ("estimate", "lo", "hi")], abs=1e-12)
    problems = [p for p in forgetting_rows() if p.get("answer") is not None]
    answers = [p["answer"] for p in problems]
    s, clip = lookahead.settings(cfg)
    step_rows, _ = lookahead.split(store.read_table(out, "rollouts"))
    mask = TokenMaskSpec(**CANDIDATES["entropy_top50"]).settings()
    stepped, _ = lookahead.take_steps(
        prep.student, lambda t: Roles(t, None, "external", prep.teacher_models["teacher"], None, prep.student),
        step_rows, "teacher", lookahead.loss_settings(cfg, "opd", clip), None, s, prep.tok.pad_token_id, mask=mask)
    old, _ = hand_wins(prep.student, prep, prep.forgetting.prompts, answers, cfg, 3)
    new, new_tokens = hand_wins(stepped, prep, prep.forgetting.prompts, answers, cfg, 3)
    assert new != old  # the masked steps moved the samples: the comparison is not trivially 0
    per = {p["id"]: [sum(n) / 3 - sum(o) / 3] for p, o, n in zip(problems, old, new)}
    want = ref_mean_ci(per, cfg.analysis.bootstrap, cfg.sampling.seed)
    r = res["settings"]["entropy_top50"]
    assert [r["forgetting"]["pass@1"][k] for k in ("estimate", "lo", "hi")] == pytest.approx(want, abs=1e-9)
    assert r["forgetting_sampled_tokens"] == new_tokens
    table = frame(res).set_index("setting")
    assert table.loc["entropy_top50", ["forgetting_pass1", "forgetting_pass1_lo", "forgetting_pass1_hi"]].tolist() == \
        pytest.approx(want, abs=1e-9)
    stored = json.loads((out / "summary.json").read_text())["levers"]  # the diagnosis measured it too
    assert all(v["forgetting"]["pass@1"]["n_prompts"] == 5 for v in stored["settings"].values())
    if (stored["config"], stored["method"]) == ("teacher", "opd"):
        assert stored["settings"]["entropy_top50"]["forgetting"]["pass@1"]["estimate"] == pytest.approx(want[0])
    without = levers.run(cfg, prep.student, prep.teacher_models["teacher"], prep.base,
                         store.read_table(out, "rollouts"), "teacher", "opd", prep.tok.pad_token_id, lookahead)
    assert all("forgetting" not in v for v in without["settings"].values())
    assert frame(without)["forgetting_pass1"].isna().all()


def test_forgetting_loglik_and_kl_equal_a_float64_rescoring_of_the_initial_samples(forgetting_run):
    """(teacher, opd): the initial student's forgetting samples drawn again by hand (the same seed), each scored by
    one unpadded float64 forward of the initial and the stepped student; per problem the mean over its correct samples
    of the per-token log-likelihood change, the KL summed over the vocabulary at every sample position, both
    bootstrapped over problems in loops; the table columns."""
    from opsd_diag.config.settings import derive_seed
    from opsd_diag.engine.sampling import sample_hf
    from opsd_diag.io.thinking import answer_text
    from opsd_diag.io.verify import is_correct
    from opsd_diag.io.views import student_view
    from opsd_diag.run import Run

    cfg, prep, out = forgetting_run
    r = json.loads((out / "summary.json").read_text())["lookahead"]["configs"]["teacher"]["opd"]
    problems = [p for p in forgetting_rows() if p.get("answer") is not None]
    prompts = [student_view(prep.tok, p, SYSTEM, prep.renderers[0].fmt).ids for p in problems]
    comps = sample_hf(prep.student, prep.tok, prompts, cfg.sampling.settings(derive_seed(cfg.lookahead.seed, 43),
                                                                             num_samples=3), prep.stop_ids)
    stepped = stepped_by_hand(cfg, prep, out)

    def logp(model, prompt, completion):
        return logp64(model, prompt, completion, cfg.sampling.temperature)

    ll, kl, tokens, n_correct = {}, {}, 0, 0
    for p, prompt, cs in zip(problems, prompts, comps):
        ll_p, kl_p = [], []
        for c in cs:
            ids = list(c.ids)
            if not ids:
                continue
            new, old = logp(stepped, prompt, ids), logp(prep.student, prompt, ids)
            tokens += len(ids)
            for t in range(len(ids)):
                kl_p.append(sum(float(new[t, v].exp() * (new[t, v] - old[t, v])) for v in range(new.shape[1])))
            if is_correct(answer_text(prep.tok, ids), p["answer"], cfg.analysis.checker):
                n_correct += 1
                ll_p.append(sum(float(new[t, ids[t]] - old[t, ids[t]]) for t in range(len(ids))) / len(ids))
        kl[p["id"]] = kl_p
        if ll_p:
            ll[p["id"]] = [sum(ll_p) / len(ll_p)]
    assert n_correct > 0 and tokens == r["forgetting_measured_tokens"]
    for key, ref in (("forgetting_ll", ll), ("forgetting_kl", kl)):
        want = ref_mean_ci(ref, cfg.analysis.bootstrap, cfg.sampling.seed)
        got = r[key]
        assert (got["estimate"], got["lo"], got["hi"]) == pytest.approx(want, abs=2e-5), key
    assert r["forgetting_kl"]["estimate"] > 0 and r["forgetting_ll"]["estimate"] != 0  # the steps moved the student
    assert r["forgetting_ll"]["n_prompts"] == len(ll) and r["forgetting_kl"]["n_prompts"] == len(problems)
    frame = Run.load(out).lookahead_frame()
    row = frame[(frame["config"] == "teacher") & (frame["method"] == "opd")].iloc[0]
    assert (row["forgetting_ll"], row["forgetting_kl"]) == pytest.approx(
        (r["forgetting_ll"]["estimate"], r["forgetting_kl"]["estimate"]), abs=1e-12)


def test_reference_loglik_and_kl_equal_a_float64_rescoring_of_the_reference_responses(forgetting_run):
    """(teacher, opd): each measurement problem's reference response written out by hand (the template filled with
    str.format, plain tokens, the template's stop id), scored by one unpadded float64 forward of the initial and the
    stepped student; per problem its mean per-token log-likelihood change, the KL at every position, both bootstrapped
    over problems in loops; the table columns."""
    from opsd_diag.io import store
    from opsd_diag.run import Run

    cfg, prep, out = forgetting_run
    la = json.loads((out / "summary.json").read_text())["lookahead"]
    r = la["configs"]["teacher"]["opd"]
    _, measured = lookahead.split(store.read_table(out, "rollouts"))
    first = measured.drop_duplicates("problem_id")
    stepped = stepped_by_hand(cfg, prep, out)
    temp = cfg.sampling.temperature
    ll, kl, tokens = {}, {}, 0
    for pid, prompt, i in zip(first["problem_id"], first["prompt_ids.student"], first["problem_index"]):
        problem = prep.problems[int(i)]
        text = "{solution}\nAnswer: {answer}".format(solution=problem["solution"], answer=problem["answer"])
        ids = prep.tok(text, add_special_tokens=False)["input_ids"] + [prep.stop_ids[0]]
        prompt = [int(t) for t in prompt]
        new, old = logp64(stepped, prompt, ids, temp), logp64(prep.student, prompt, ids, temp)
        tokens += len(ids)
        ll[pid] = [sum(float(new[t, ids[t]] - old[t, ids[t]]) for t in range(len(ids))) / len(ids)]
        kl[pid] = [sum(float(new[t, v].exp() * (new[t, v] - old[t, v])) for v in range(new.shape[1]))
                   for t in range(len(ids))]
    assert la["reference_prompts"] == len(ll) >= 2 and tokens == r["reference_measured_tokens"]
    for key, ref in (("reference_ll", ll), ("reference_kl", kl)):
        want = ref_mean_ci(ref, cfg.analysis.bootstrap, cfg.sampling.seed)
        got = r[key]
        assert (got["estimate"], got["lo"], got["hi"]) == pytest.approx(want, abs=2e-5), key
        assert got["n_prompts"] == len(ll)
    assert r["reference_kl"]["estimate"] > 0 and r["reference_ll"]["estimate"] != 0  # the steps moved the student
    frame = Run.load(out).lookahead_frame()
    row = frame[(frame["config"] == "teacher") & (frame["method"] == "opd")].iloc[0]
    assert (row["reference_ll"], row["reference_kl"]) == pytest.approx(
        (r["reference_ll"]["estimate"], r["reference_kl"]["estimate"]), abs=1e-12)


@pytest.mark.parametrize("rows, template, match", [
    ([{"id": "a", "prompt": "1+1", "answer": "2"}], "{solution}",
     r"lookahead\.reference needs problems with a solution, and none has one: map your solution column"),
    ([{"id": "a", "prompt": "1+1", "solution": "1+1=2"}], "{solution}\nAnswer: {answer}",
     r"lookahead\.reference needs \{answer\}, but in problem 'a' the column 'answer' is missing or empty"),
])
def test_reference_template_errors_name_the_key_before_any_model_loads(tmp_path, rows, template, match):
    from opsd_diag.engine.diagnose import prepare

    data = write_jsonl(tmp_path / "problems.jsonl", rows)
    cfg = from_dict({**tiny_config(ZOO, data), "student": {"model": str(tmp_path / "no_such_model")},
                     "teachers": [{"name": "teacher", "model": str(tmp_path / "no_such_model")}],
                     "lookahead": {"reference": template}})
    with pytest.raises(OpsdError, match=match) as e:
        prepare(cfg)
    assert "\n" not in str(e.value) and "no_such_model" not in str(e.value)
