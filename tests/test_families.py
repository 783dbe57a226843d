"""Conformance of real model families (issue 21): the real chat templates of Qwen3, Llama-3.1/3.2 and
Gemma-2/3/4 (tests/fixtures/templates/) on tiny random models built by tests/families.py.

Per family: the exact rendered prompts (one BOS, the generation prompt, the system prompt), template
options (thinking on/off, the date), stop ids and the end of an SFT target, thinking-aware answer
checks, a Base without template, padded LM heads, the text config's softcap, per-model loading.
"""

from __future__ import annotations

import os
import types

import pytest
import torch
from families import FAMILIES, build, ids, template

from opsd_diag.errors import OpsdError
from opsd_diag.io import models as hub
from opsd_diag.config.spec import from_dict
from opsd_diag.io.thinking import check, split_text
from opsd_diag.io.views import FIXED_DATE, Format, student_view, teacher_view

PROBLEM = {"id": "p1", "prompt": "What is 3+4?", "solution": "3+4=7\nAnswer: 7", "answer": "7"}


@pytest.fixture(scope="module")
def fam(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    made = {}

    def get(name: str, **kw):
        key = (name, tuple(sorted(kw.items())))
        if key not in made:
            made[key] = build(name, root / f"{name}-{len(made)}", **kw)
        return made[key]
    return get


def tok_of(fam, name, **kw):
    return hub.load_tokenizer(str(fam(name, **kw)))


def text(tok, view) -> str:
    return tok.decode(view.ids, skip_special_tokens=False)


# ------------------------------------------------------------------------------ rendered prompts

EXPECTED = {
    "qwen3": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 3+4?<|im_end|>\n"
             "<|im_start|>assistant\n",
    "llama3_1": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                "What is 3+4?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "gemma3": "<bos><start_of_turn>user\nBe brief.\n\nWhat is 3+4?<end_of_turn>\n<start_of_turn>model\n",
    "gemma4": "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nWhat is 3+4?<turn|>\n<|turn>model\n",
}


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_student_prompt_exact(fam, family):
    tok = tok_of(fam, family)
    v = student_view(tok, PROBLEM, "Be brief.")
    assert text(tok, v) == EXPECTED[family]
    if tok.bos_token_id is not None:
        assert v.ids.count(tok.bos_token_id) == 1 and v.ids[0] == tok.bos_token_id  # one BOS, never two


def test_teacher_prompt_exact_llama(fam):
    tok = tok_of(fam, "llama3_1")
    v = teacher_view(tok, PROBLEM, "answer_only")
    assert text(tok, v).endswith("<|start_header_id|>user<|end_header_id|>\n\nWhat is 3+4?\n\nThe correct final "
                                 "answer is 7.\n\nNow solve the problem yourself, step by step.<|eot_id|>"
                                 "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert v.ids.count(tok.bos_token_id) == 1


def test_qwen3_thinking_on_and_off(fam):
    tok = tok_of(fam, "qwen3")
    on = text(tok, student_view(tok, PROBLEM))
    off = text(tok, student_view(tok, PROBLEM, fmt=Format.of("chat", {"enable_thinking": False})))
    assert on.endswith("<|im_start|>assistant\n")
    assert off == on + "<think>\n\n</think>\n\n"


def test_gemma4_thinking_on_and_off(fam):
    tok = tok_of(fam, "gemma4")
    off = text(tok, student_view(tok, PROBLEM))
    on = text(tok, student_view(tok, PROBLEM, fmt=Format.of("chat", {"enable_thinking": True})))
    assert "<|think|>" not in off
    assert on == "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nWhat is 3+4?<turn|>\n<|turn>model\n"


def test_llama32_date_is_fixed_unless_given(fam):
    tok = tok_of(fam, "llama3_2")
    assert "strftime_now" in template("llama3_2")
    assert f"Today Date: {FIXED_DATE}\n" in text(tok, student_view(tok, PROBLEM))
    given = text(tok, student_view(tok, PROBLEM, fmt=Format.of("chat", {"date_string": "01 Jan 2025"})))
    assert "Today Date: 01 Jan 2025\n" in given


def test_template_error_is_one_clear_line(fam):
    tok = tok_of(fam, "gemma2")
    assert "<start_of_turn>user\nWhat is 3+4?" in text(tok, student_view(tok, PROBLEM))
    with pytest.raises(OpsdError) as e:
        student_view(tok, PROBLEM, "Be brief.", Format.of(who="the student model 'gemma2'"))
    msg = str(e.value)
    assert "System role not supported" in msg and "data.system_prompt" in msg and "\n" not in msg
    assert "problem 'p1'" in msg and "gemma2" in msg


# ------------------------------------------------------------------------------ end-of-turn and stop ids

STOPS = {"qwen3": "<|im_end|>", "qwen3_base": "<|im_end|>", "llama3_1": "<|eot_id|>", "llama3_2": "<|eot_id|>",
         "gemma3": "<end_of_turn>", "gemma4": "<turn|>"}


@pytest.mark.parametrize("family", sorted(STOPS))
def test_stop_ids_start_with_end_of_turn(fam, family):
    path = fam(family)
    tok, model = hub.load_tokenizer(str(path)), hub.load_model(str(path))
    stops = hub.stop_token_ids(model, tok)
    assert stops[0] == tok.convert_tokens_to_ids(STOPS[family])
    assert set(ids(tok, *FAMILIES[family]["gen_eos"])) <= set(stops) and tok.eos_token_id in stops
    assert len(stops) == len(set(stops))


def test_end_of_turn_without_generation_config(fam):
    path = fam("gemma3", generation_config=False)
    assert not (path / "generation_config.json").exists()
    tok, model = hub.load_tokenizer(str(path)), hub.load_model(str(path))
    assert hub.stop_token_ids(model, tok)[:2] == ids(tok, "<end_of_turn>", "<eos>")


@pytest.mark.parametrize("family", ["llama3_1", "gemma3", "qwen3"])
def test_sft_target_ends_with_end_of_turn(fam, family):
    from opsd_diag.io.views import reference_ids

    path = fam(family)
    tok, model = hub.load_tokenizer(str(path)), hub.load_model(str(path))
    target = reference_ids(tok, PROBLEM, "{solution}", hub.stop_token_ids(model, tok)[0])
    assert target[-1] == tok.convert_tokens_to_ids(STOPS[family])
    assert tok.decode(target[:-1]) == PROBLEM["solution"]


# ------------------------------------------------------------------------------ thinking-aware answers

def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_qwen3_answer_after_think_block(fam):
    tok = tok_of(fam, "qwen3")
    prompt = student_view(tok, PROBLEM).ids
    done = _ids(tok, "<think>\nmaybe Answer: 7\n</think>\n\nSo \\boxed{5}<|im_end|>")
    r = check(tok, prompt, done, True, "5", "auto")
    assert (r.pred, r.correct, r.truncated, r.in_thinking) == ("5", True, False, False)
    assert check(tok, prompt, done, True, "7", "auto").correct is False  # the reasoning's "Answer: 7" never wins
    cut = _ids(tok, "<think>\nthe sum is 7, Answer: 7")
    r = check(tok, prompt, cut, False, "7", "auto")
    assert (r.pred, r.correct, r.truncated, r.in_thinking) == (None, False, True, True)
    # closed early, then cut at max length: truncated, incorrect by default, checked with analysis.truncated: check
    late = _ids(tok, "<think>\nok\n</think>\n\nAnswer: 7\nand then more")
    assert check(tok, prompt, late, False, "7", "auto").correct is False
    assert check(tok, prompt, late, False, "7", "auto", "check").correct is True


def test_qwen3_non_thinking_prompt_holds_the_closed_block(fam):
    tok = tok_of(fam, "qwen3")
    prompt = student_view(tok, PROBLEM, fmt=Format.of("chat", {"enable_thinking": False})).ids
    r = check(tok, prompt, _ids(tok, "Answer: 7<|im_end|>"), True, "7", "toy")
    assert (r.correct, r.in_thinking) == (True, False)


def test_gemma4_thought_channel(fam):
    tok = tok_of(fam, "gemma4")
    prompt = student_view(tok, PROBLEM, fmt=Format.of("chat", {"enable_thinking": True})).ids
    comp = _ids(tok, "<|channel>thought\nAnswer: 7<channel|>The answer is \\boxed{5}<turn|>")
    assert tok.convert_tokens_to_ids("<channel|>") in comp  # a special token, dropped by decoding
    r = check(tok, prompt, comp, True, "5", "auto")
    assert (r.pred, r.correct, r.in_thinking) == ("5", True, False)
    inside = check(tok, prompt, _ids(tok, "<|channel>thought\nAnswer: 5"), False, "5", "auto")
    assert (inside.pred, inside.correct, inside.in_thinking) == (None, False, True)


def test_text_markers_without_tokens():
    assert split_text("<think>Answer: 7</think>\nAnswer: 5") == ("\nAnswer: 5", False)
    assert split_text("<think>Answer: 7") == ("<think>Answer: 7", True)
    assert split_text("Answer: 5") == ("Answer: 5", False)


# ------------------------------------------------------------------------------ Base checkpoints

def test_base_without_template_loads_and_raw_prompt(fam):
    path = fam("llama3_base")
    tok = hub.load_tokenizer(str(path))  # no chat template: fine for a base or a raw student
    assert not tok.chat_template
    raw = student_view(tok, PROBLEM, fmt=Format.of("raw"))
    assert raw.ids[0] == tok.bos_token_id and raw.ids.count(tok.bos_token_id) == 1
    assert tok.decode(raw.ids[1:]) == PROBLEM["prompt"]
    with pytest.raises(OpsdError, match="no chat template.*prompt_format: raw"):
        student_view(tok, PROBLEM)
    model = hub.load_model(str(path))
    assert hub.stop_token_ids(model, tok, use_template=False) == ids(tok, "<|end_of_text|>")


def test_stop_strings_cut_completion(fam):
    from opsd_diag.engine.sampling import Completion, cut_at_strings

    tok = tok_of(fam, "llama3_base")
    c = Completion(_ids(tok, "Answer: 7\n\nQuestion: what is 12 * 3?"), False)
    cut = cut_at_strings(tok, c, ["\n\nQuestion:"])
    assert cut.finished and tok.decode(cut.ids).endswith("\n\nQuestion:") and len(cut.ids) < len(c.ids)
    assert tok.decode(cut.ids[:-1]).find("\n\nQuestion:") < 0  # the first token that completes it
    assert cut_at_strings(tok, c, ["nowhere"]) == c


# ------------------------------------------------------------------------------ config

def _cfg(**over):
    cfg = {"student": {"model": "s"}, "teachers": [{"name": "t"}], "data": {"path": "x.jsonl"}}
    cfg.update(over)
    return from_dict(cfg)


def test_config_template_options_and_inheritance(fam):
    from opsd_diag.config.model_options import teacher_model_spec, view_template_kwargs

    cfg = _cfg(student={"model": "s", "chat_template_kwargs": {"enable_thinking": True}, "dtype": "bfloat16",
                             "attn_implementation": "sdpa"},
               teachers=[{"name": "think", "model": "t"},
                         {"name": "no_think", "model": "t", "chat_template_kwargs": {"enable_thinking": False},
                          "dtype": "float32", "device_map": "auto", "allow_download": True}])
    think, no_think = cfg.teachers
    assert view_template_kwargs(cfg.student, think) == {"enable_thinking": True}
    assert view_template_kwargs(cfg.student, no_think) == {"enable_thinking": False}
    spec = teacher_model_spec(cfg.student, no_think)
    assert (spec.model, spec.dtype, spec.device_map, spec.allow_download, spec.attn_implementation) == (
        "t", "float32", "auto", True, "sdpa")
    assert teacher_model_spec(cfg.student, think).dtype == "bfloat16"


@pytest.mark.parametrize("over, match", [
    ({"teachers": [{"name": "t", "dtype": "float32"}]}, "self-teacher uses the student's weights"),
    ({"base": {"model": "b", "chat_template_kwargs": {"enable_thinking": False}}}, "never renders its own"),
    ({"student": {"model": "s", "device": "gpu"}}, "unknown device"),
    ({"student": {"model": "s", "enable_thinking": False}}, "unknown key"),
])
def test_config_errors(over, match):
    with pytest.raises(OpsdError, match=match):
        _cfg(**over)


# ------------------------------------------------------------------------------ loading

def test_offline_env_during_load(fam, monkeypatch):
    from huggingface_hub import constants
    from transformers import AutoModelForCausalLM

    seen = []
    real = AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, *a, **k):
        seen.append((os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE))
        return real(cls, *a, **k)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    hub.load_model.__wrapped__(str(fam("qwen3")))
    assert seen == [("1", True)]
    assert "HF_HUB_OFFLINE" not in os.environ and constants.HF_HUB_OFFLINE is False
    hub.load_model.__wrapped__(str(fam("qwen3")), allow_download=True)
    assert seen[-1] == (None, False)


def test_attn_implementation_and_dtype_per_model(fam):
    model = hub.load_model.__wrapped__(str(fam("llama3_1")), None, "float32", "cpu", False, False, None, "eager")
    assert model.config._attn_implementation == "eager" and model.dtype == torch.float32


def test_softcap_from_text_config(fam):
    from opsd_diag.engine.scoring import lm_logits, logit_softcap

    path = fam("gemma3", softcap=0.5)
    model = hub.load_model(str(path))
    x = torch.tensor([[2, 10, 11, 12]])
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
        got = lm_logits(model, out.hidden_states[-1][0])
    torch.testing.assert_close(got, out.logits[0].float())  # the model's own softcapped logits
    assert float(got.abs().max()) <= 0.5
    # a multimodal config (Gemma-4): the cap lives in the text config only
    text_cfg = types.SimpleNamespace(final_logit_softcapping=30.0)
    outer = types.SimpleNamespace(config=types.SimpleNamespace(get_text_config=lambda: text_cfg))
    assert logit_softcap(outer) == 30.0


def test_padded_head_scores_on_tokenizer_rows(fam):
    """A teacher with LM-head rows beyond its tokenizer scores exactly as the same weights cut to the tokenizer."""
    from opsd_diag.engine.scoring import TeacherInput, score_batch
    from opsd_diag.config.settings import ScoreSettings

    tok = tok_of(fam, "qwen3")
    student = hub.load_model(str(fam("qwen3")))
    padded = hub.load_model(str(fam("qwen3", seed=1, extra_rows=8)))
    n = len(tok)
    assert padded.get_output_embeddings().weight.shape[0] == n + 8
    hub.check_compatible({"student": ("s", tok, student), "teacher": ("t", tok, padded)})  # main: refused
    cut = hub.load_model.__wrapped__(str(fam("qwen3", seed=1, extra_rows=8)))
    with torch.no_grad():
        head = torch.nn.Linear(16, n, bias=False)
        head.weight.copy_(cut.get_output_embeddings().weight[:n])
        cut.lm_head = head
        emb = torch.nn.Embedding(n, 16)
        emb.weight.copy_(cut.get_input_embeddings().weight[:n])
        cut.model.embed_tokens = emb
    prompts, comps = [student_view(tok, PROBLEM).ids] * 2, [[10, 11, 12, 2], [13, 2]]
    s = ScoreSettings(temperature=1.0, jsd_beta=0.5, centering=None, exopd_lambda=1.25, exopd_reference="student",
                      top_k=3, chunk_size=4)
    a, _ = score_batch(student, comps, prompts, {"t": TeacherInput(padded, prompts, None)}, s, tok.pad_token_id)
    b, _ = score_batch(student, comps, prompts, {"t": TeacherInput(cut, prompts, None)}, s, tok.pad_token_id)
    for col in ("lp_t", "h_t", "kl_rev", "jsd"):
        torch.testing.assert_close(torch.as_tensor(a["t"][col]), torch.as_tensor(b["t"][col]), rtol=1e-5, atol=1e-6)
    # float64 reference: log-softmax over the first len(tokenizer) rows of the full head
    with torch.no_grad():
        x = torch.tensor([prompts[0] + comps[0]])
        full = padded(input_ids=x).logits[0, len(prompts[0]) - 1:-1].double()  # [4, n + 8]
        ref = torch.log_softmax(full[:, :n], -1).gather(1, torch.tensor(comps[0])[:, None])[:, 0]
    got = torch.as_tensor(a["t"]["lp_t"][a["t"]["row"] == 0]).double()
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_padded_head_is_never_sampled(fam):
    from opsd_diag.engine.decode import sample
    from opsd_diag.config.settings import SamplingSettings

    tok = tok_of(fam, "qwen3")
    model = hub.load_model.__wrapped__(str(fam("qwen3", seed=2, extra_rows=64)))
    with torch.no_grad():
        model.lm_head.weight[len(tok):] = 50.0 * model.lm_head.weight[:1].sign()  # huge logits on padding rows
    hub.limit_rows(model, len(tok))
    s = SamplingSettings(num_samples=4, temperature=1.0, top_p=1.0, max_new_tokens=6, seed=0, batch_size=4)
    out = sample(model, tok, [student_view(tok, PROBLEM).ids], s, [2])
    assert all(t < len(tok) for c in out[0] for t in c.ids)


def test_lora_adapter_is_merged(fam, tmp_path):
    peft = pytest.importorskip("peft", reason="peft is the optional extra opsd-diag[peft]")
    path = fam("llama3_1")
    base = hub.load_model.__wrapped__(str(path))
    lora = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                     init_lora_weights=False))  # non-zero B: a visible change
    lora.save_pretrained(tmp_path / "adapter")
    x = torch.tensor([[0, 10, 11, 12]])
    with torch.no_grad():
        want = lora(input_ids=x).logits
        merged = hub.load_model.__wrapped__(str(path), adapter=str(tmp_path / "adapter"))
        plain = hub.load_model.__wrapped__(str(path))
        torch.testing.assert_close(merged(input_ids=x).logits, want, rtol=1e-4, atol=1e-5)
        assert not torch.allclose(plain(input_ids=x).logits, want)
    assert all(p.requires_grad for p in merged.parameters())
    with pytest.raises(OpsdError, match="no adapter_config.json"):
        hub.load_model.__wrapped__(str(path), adapter=str(tmp_path))


def test_predictor_reads_answers_after_the_think_block(fam):
    from opsd_diag.io.thinking import answer_text

    tok = tok_of(fam, "qwen3")
    assert answer_text(tok, _ids(tok, "<think>\nAnswer: 7\n</think>\n\nAnswer: 5")).strip() == "Answer: 5"
    assert answer_text(tok, _ids(tok, "<think>\nAnswer: 7")) == ""
    tok4 = tok_of(fam, "gemma4")
    assert answer_text(tok4, _ids(tok4, "<|channel>thought\nAnswer: 7<channel|>Answer: 5")) == "Answer: 5"


def test_gemma4_multimodal_softcap_matches_the_model():
    """Gemma-4's multimodal config keeps final_logit_softcapping in its text config only: the scored logits
    equal the model's own (main read the top level and scored uncapped logits)."""
    import transformers

    from opsd_diag.engine.scoring import completion_hidden, lm_logits

    if not hasattr(transformers, "Gemma4Config"):
        pytest.skip(f"transformers {transformers.__version__} has no Gemma-4 (added in a later 5.x)")
    text_cfg = transformers.Gemma4TextConfig(
        vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, final_logit_softcapping=30.0, layer_types=["full_attention"])
    cfg = transformers.Gemma4Config(text_config=text_cfg.to_dict(), vision_config=None, audio_config=None)
    assert getattr(cfg, "final_logit_softcapping", None) is None
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    prompt, comp = [2, 10, 11, 12], [13, 14, 15]
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(1000.0)  # raw logits far beyond the cap
        want = model(input_ids=torch.tensor([prompt + comp])).logits[0, len(prompt) - 1:-1].float()  # [3, V]
        got = lm_logits(model, completion_hidden(model, [prompt], [comp], 0))  # [3, V]
    assert float(want.abs().max()) <= 30.0 + 1e-4
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_device_map_is_passed_and_the_model_is_not_moved(fam, monkeypatch):
    from transformers import AutoModelForCausalLM

    from opsd_diag.config.spec import ModelSpec

    seen = []
    real = AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, *a, **k):
        seen.append(k.get("device_map"))
        return real(cls, *a, **k)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    spec = ModelSpec(model=str(fam("qwen3")), device_map={"": "cpu"})
    args = hub.model_args(spec, "auto")
    assert args[6] == (("", "cpu"),)  # hashable for the cache
    model = hub.load_model.__wrapped__(*args)
    assert seen == [{"": "cpu"}] and not model.training


def test_form_preview_renders_an_external_teacher_with_its_own_template(fam, tmp_path):
    """The app's New diagnosis preview (workbench.prompt_previews) shows each view as the run renders it:
    a teacher whose tokenizer carries another template gets that template, not the student's."""
    import copy
    import json

    from app import workbench

    student = tok_of(fam, "llama3_1")
    teacher = copy.deepcopy(student)  # load_tokenizer is cached: a copy, so the student keeps its template
    teacher.chat_template = "{{ bos_token }}TEACHER: {{ messages[-1]['content'] }}"
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"id": "p0", "prompt": "What is 3+4?", "answer": "7"}) + "\n")
    cfg = from_dict({"student": {"model": "s"}, "data": {"path": str(data)},
                     "teachers": [{"name": "t", "model": "t"}, {"name": "self", "context": "answer_only"}]})
    shown = {v.who: v.text for v in workbench.prompt_previews(cfg, {"id": "p0", "prompt": "What is 3+4?",
                                                                     "answer": "7"}, student, {"t": teacher})}
    assert shown["t"] == "<|begin_of_text|>TEACHER: What is 3+4?"
    assert shown["student"] == text(student, student_view(student, {"id": "p0", "prompt": "What is 3+4?"}))
    assert shown["self"].startswith("<|begin_of_text|><|start_header_id|>")  # the student's template


def test_qwen3_think_tags_in_user_text_stay_text(fam):
    """Qwen3's <think> and </think> are added tokens that are not special (so split_special_tokens does not
    cover them): spelled in a prompt, they stay text; the template's own (non-thinking mode) stay tokens."""
    tok = tok_of(fam, "qwen3")
    think, end = ids(tok, "<think>"), ids(tok, "</think>")
    problem = {"id": "p0", "prompt": "Say <think> then </think> and stop."}
    view = student_view(tok, problem, fmt=Format.of("chat", {"enable_thinking": False}))
    rendered = text(tok, view)
    assert rendered.count("<think>") == 2 and rendered.count("</think>") == 2  # the user's and the template's
    assert view.ids.count(think[0]) == 1 and view.ids.count(end[0]) == 1  # only the template's
    assert rendered.endswith("<think>\n\n</think>\n\n")
