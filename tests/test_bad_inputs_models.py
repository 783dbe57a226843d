"""The bad-input corpus, grown by models, adapters and chat templates (issue 30, items 3, 4 and 7).

Rows follow tests/test_bad_inputs.py (its Env, fixtures and case helpers): each ends in exit status 2
with one `PROG: error: ...` line holding the row's `expect`, no traceback, the test folder and the
shared finished run unchanged, and here also no Python warning raised by a library before the line
(a warning shown ahead of the error is what a user reads first).

Classes: chat-template options that the tool decides itself; chat templates that raise, recurse or hit
the sandbox's limits; adapters of another base, of another rank, truncated, a pickle that runs code;
device maps naming unknown modules or absent devices; a hub id not in the cache without download
permission. What is right is accepted: a template that reads today's date renders the fixed day (any
path to the clock), a plain-tensor pickle adapter merges as its safetensors twin, a padded base scores
exactly as the same weights cut to the tokenizer's rows (float64 reference).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_bad_inputs import (  # noqa: F401 - env, finished and world are the corpus' fixtures
    Case,
    assert_one_error_line,
    Env,
    base_config,
    diag,
    env,
    finished,
    run_over,
    train,
    tree,
    world,
)

from opsd_diag import cli as diag_cli
from trainer import cli as train_cli

STUDENT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] "
                    "+ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                    "{%- endif %}")


def peft_missing() -> str | None:
    try:
        import peft  # noqa: F401
    except ImportError:
        return "peft is the optional extra opsd-diag[peft]"
    return None


# ----------------------------------------------------------------------------------- input makers

def kwargs_row(id: str, where: str, kwargs: dict, expect: str) -> Case:
    """A run whose student (or first teacher) passes ``kwargs`` to its chat template."""
    def over(e: Env) -> dict:
        if where == "student":
            return {"student": {"model": str(e.world / "student"), "chat_template_kwargs": kwargs}}
        return {"teachers": [{"name": "teacher", "model": str(e.world / "teacher"), "chat_template_kwargs": kwargs},
                             {"name": "self_full", "context": "full_solution"}]}
    return diag(id, lambda e: ["run", e.cfg(over(e)), "--out", e.out], expect)


def with_template(text: str, role: str = "student") -> Callable[[Env], list[str]]:
    """A run over a copy of the student (or the external teacher) whose chat template is ``text``."""
    def make(e: Env) -> list[str]:
        m = e.model_copy(role, f"{role}_tpl")
        (m / "chat_template.jinja").write_text(text)
        if role == "student":
            return ["run", e.cfg({"student": {"model": str(m)}}), "--out", e.out]
        return ["run", e.cfg({"teachers": [{"name": "teacher", "model": str(m)},
                                           {"name": "self_full", "context": "full_solution"}]}), "--out", e.out]
    return make


def lora(e: Env, role: str = "student", name: str = "adapter", r: int = 2, source: Path | None = None) -> Path:
    """A LoRA adapter (non-zero B: a visible change) of the world's ``role`` model, or of the model at ``source``."""
    import peft
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(source or e.world / role)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's and transformers' deprecation notices to each other
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=r, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                             init_lora_weights=False))
        wrapped.save_pretrained(e.tmp / name)
    return e.tmp / name


def edit_config(path: Path, **fields) -> None:
    cfg = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**cfg, **fields}))


def to_pickle(path: Path, extra: dict | None = None) -> None:
    """The adapter's weights as adapter_model.bin (torch's pickle), with ``extra`` objects beside the tensors."""
    from safetensors.torch import load_file

    state = load_file(path / "adapter_model.safetensors")
    (path / "adapter_model.safetensors").unlink()
    torch.save({**state, **(extra or {})}, path / "adapter_model.bin")


class RunsCode:
    """A pickled object that would run a command when unpickled without torch's safe loader."""

    def __reduce__(self):
        import os

        return os.system, ("touch PWNED",)


def adapter_row(id: str, change: Callable[[Env], Path], expect: str, role: str = "student", **kw) -> Case:
    """A run whose ``role`` ('student' or the external 'teacher') merges the adapter ``change`` makes."""
    def make(e: Env) -> list[str]:
        path = str(change(e))
        if role == "student":
            return ["run", e.cfg({"student": {"model": str(e.world / "student"), "adapter": path}}), "--out", e.out]
        return ["run", e.cfg({"teachers": [{"name": "teacher", "model": str(e.world / "teacher"), "adapter": path},
                                           {"name": "self_full", "context": "full_solution"}]}), "--out", e.out]
    return diag(id, make, expect, skip=peft_missing, **kw)


def rank_mismatch(e: Env) -> Path:
    path = lora(e)
    edit_config(path, r=4)
    return path


def truncated_adapter(e: Env) -> Path:
    path = lora(e)
    data = (path / "adapter_model.safetensors").read_bytes()
    (path / "adapter_model.safetensors").write_bytes(data[:len(data) // 2])
    return path


def code_pickle_adapter(e: Env) -> Path:
    path = lora(e)
    to_pickle(path, {"payload": RunsCode()})
    return path


def other_sizes_adapter(e: Env) -> Path:
    """An adapter of a Qwen3 with the student's module names and other layer sizes (hidden 16, not 32)."""
    from families import build

    return lora(e, source=build("qwen3", e.tmp / "other_qwen3"))


def other_targets_adapter(e: Env) -> Path:
    path = lora(e)
    edit_config(path, target_modules=["c_attn"])
    return path


def code_pickle_model(e: Env) -> list[str]:
    from safetensors.torch import load_file

    m = e.model_copy()
    state = load_file(m / "model.safetensors")
    (m / "model.safetensors").unlink()
    torch.save({**state, "payload": RunsCode()}, m / "pytorch_model.bin")
    return ["run", e.cfg({"student": {"model": str(m)}}), "--out", e.out]


def device_map_row(id: str, device_map, expect: str, role: str = "student") -> Case:
    def make(e: Env) -> list[str]:
        if role == "student":
            return ["run", e.cfg({"student": {"model": str(e.world / "student"), "device_map": device_map}}),
                    "--out", e.out]
        return ["run", e.cfg({"teachers": [{"name": "teacher", "model": str(e.world / "teacher"),
                                            "device_map": device_map},
                                           {"name": "self_full", "context": "full_solution"}]}), "--out", e.out]
    return diag(id, make, expect)


# ------------------------------------------------------------------------------------------ the rows

RENDER = "is an argument of the render, which opsd-diag sets itself"
CASES: list[Case] = [
    # ------------------------------------------------------- chat-template options the tool decides
    kwargs_row("tmpl-kwarg-add-generation-prompt", "student", {"add_generation_prompt": False},
               f"student.chat_template_kwargs: 'add_generation_prompt' {RENDER}"),
    kwargs_row("tmpl-kwarg-tokenize", "teacher", {"tokenize": True},
               f"teachers.0.chat_template_kwargs: 'tokenize' {RENDER}"),
    kwargs_row("tmpl-kwarg-continue-final-message", "student", {"continue_final_message": True},
               f"'continue_final_message' {RENDER}"),
    kwargs_row("tmpl-kwarg-chat-template", "student", {"chat_template": "{{ messages }}"},
               f"'chat_template' {RENDER}"),
    kwargs_row("tmpl-kwarg-tools", "student", {"tools": [{"type": "function", "function": {"name": "f"}}]},
               "student.chat_template_kwargs: 'tools' is an input the template gets from the data"),
    kwargs_row("tmpl-kwarg-messages", "teacher", {"messages": "hi"}, "'messages' is an input the template gets"),
    kwargs_row("tmpl-kwarg-bos-token", "student", {"bos_token": ""}, "'bos_token' is a special token the template "
               "gets from the tokenizer"),
    kwargs_row("tmpl-kwarg-strftime-now", "student", {"strftime_now": "01 Jan 2030"},
               "'strftime_now' is a function the template calls (strftime_now tells the fixed day: set date_string"),
    kwargs_row("tmpl-kwarg-raise-exception", "teacher", {"raise_exception": False}, "'raise_exception' is a function"),
    train("tmpl-kwarg-train-return-dict", lambda e: [e.train_cfg({}, {"student": {
        "model": str(e.world / "student"), "chat_template_kwargs": {"return_dict": True}}}), "--out", e.out],
        f"student.chat_template_kwargs: 'return_dict' {RENDER}"),
    # ------------------------------------------------- chat templates that raise, recurse, hit limits
    diag("tmpl-raises", with_template("{{ raise_exception('this model only chats in French') }}"),
         "the chat template of the student model '"),
    diag("tmpl-raises-message", with_template("{{ raise_exception('this model only chats in French') }}"),
         "(student view): 'this model only chats in French': check the prompt's messages and chat_template_kwargs"),
    diag("tmpl-teacher-raises", with_template("{{ raise_exception('no') }}", "teacher"),
         "the chat template of teacher config 'teacher' (model '"),
    diag("tmpl-division-by-zero", with_template("{{ 1 / 0 }}" + STUDENT_TEMPLATE),
         "fails (ZeroDivisionError: division by zero) on problem '"),
    diag("tmpl-undefined-attribute", with_template("{{ messages.nothing.here }}"), "fails (UndefinedError:"),
    diag("tmpl-recurses", with_template("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
         "recurses without end (a macro that calls itself) on problem '"),
    diag("tmpl-range-beyond-sandbox", with_template("{% for i in range(10 ** 7) %}x{% endfor %}"),
         "asks for a range beyond the template sandbox's limit (100,000 items)"),
    diag("tmpl-unsafe-attribute", with_template("{{ messages.__class__.__mro__ }}"),
         "breaks the template sandbox's rules (access to attribute '__class__'"),
    diag("tmpl-syntax-error", with_template("{% if messages %}unclosed"), "has a syntax error at line 1"),
    train("tmpl-train-raises", lambda e: [e.train_cfg({}, {"student": {"model": str(
        (lambda m: ((m / "chat_template.jinja").write_text("{{ raise_exception('no') }}"), m)[1])(e.model_copy()))}}),
        "--out", e.out], "the chat template of the student model '"),
    # ---------------------------------------------------------------------------------- adapters
    adapter_row("adapter-of-a-deeper-base", lambda e: lora(e, "teacher"), "it has LoRA weights for "
                "model.layers.1.self_attn.q_proj (and 1 more), which that model does not have: it was trained on "
                "another base model ("),
    adapter_row("adapter-of-a-shallower-base", lambda e: lora(e, "student"), "it targets "
                "model.layers.1.self_attn.q_proj (and 1 more) of that model but holds no weights for it", "teacher"),
    adapter_row("adapter-of-other-layer-sizes", other_sizes_adapter, "its LoRA weights for "
                "model.layers.0.self_attn.q_proj are for a 16 -> 16 layer, the model's is 32 -> 32: it was trained on "
                "another base model"),
    adapter_row("adapter-of-other-target-modules", other_targets_adapter, "its adapter_config.json targets "
                "['c_attn'], which that model does not have"),
    adapter_row("adapter-rank-mismatch", rank_mismatch, "have rank 2 but adapter_config.json says r: 4: set r to 2 "
                "there if the weights are right, or save the adapter again"),
    adapter_row("adapter-weights-truncated", truncated_adapter, "adapter_model.safetensors is truncated or damaged"),
    adapter_row("adapter-pickle-that-runs-code", code_pickle_adapter, "adapter_model.bin is a pickle that holds "
                "more than tensors, so it was refused: unpickling it could run code: use the adapter's safetensors"),
    adapter_row("adapter-config-not-json", lambda e: ((p := lora(e)) / "adapter_config.json").write_text("{r: 2") and p,
                "its adapter_config.json is not a JSON object"),
    adapter_row("adapter-not-lora", lambda e: (edit_config(p := lora(e), peft_type="IA3"), p)[1],
                "is a IA3 adapter, not LoRA"),
    adapter_row("adapter-without-weights", lambda e: ((p := lora(e)) / "adapter_model.safetensors").unlink() or p,
                "has no adapter_model.safetensors or adapter_model.bin"),
    train("adapter-train-rank-mismatch", lambda e: [e.train_cfg({}, {"student": {
        "model": str(e.world / "student"), "adapter": str(rank_mismatch(e))}}), "--out", e.out],
        "have rank 2 but adapter_config.json says r: 4", skip=peft_missing),
    # ------------------------------------------------------------------ model files and options
    diag("model-pickle-that-runs-code", code_pickle_model, "pytorch_model.bin is a pickle that holds more than "
         "tensors, so it was refused: unpickling it could run code): use a safetensors copy"),
    run_over("model-hub-id-not-cached", {"student": {"model": "no-such-org/no-such-model"}},
             "cannot load model 'no-such-org/no-such-model': it is not in the local Hugging Face cache and "
             "allow_download is false: set allow_download: true for this model"),
    run_over("teacher-hub-id-not-cached", {"teachers": [{"name": "t", "model": "no-such-org/teacher"}]},
             "cannot load model 'no-such-org/teacher': it is not in the local Hugging Face cache"),
    run_over("model-bare-name-not-cached", {"student": {"model": "no-such-model-name"}},
             "there is no directory of that name and it is not in the local Hugging Face cache"),
    run_over("model-name-blank", {"student": {"model": " "}},
             "the model name ' ' is empty: give a local directory or a hub id 'org/name'"),
    train("train-teacher-model-missing", lambda e: [e.train_cfg({}, {"teachers": [
        {"name": "teacher", "model": str(e.tmp / "gone")}]}), "--out", e.out],
        "teacher 'teacher': model directory "),
    device_map_row("device-map-unknown-module", {"model.nope": "cpu"}, "device_map of model '"),
    device_map_row("device-map-unknown-module-named", {"model": "cpu", "lm_head": "cpu", "model.vision": "cpu"},
                   "names 'model.vision', which is not a module of that model: use its module names (at the top: "
                   "model, lm_head"),
    device_map_row("device-map-teacher-unknown-module", {"transformer.h.0": "cpu"}, "names 'transformer.h.0'",
                   "teacher"),
    device_map_row("device-map-leaves-weights-out", {"model.layers.0": "cpu"}, "places no device for "
                   "model.embed_tokens.weight"),
    device_map_row("device-map-absent-gpu", {"": "cuda:63"}, "puts the whole model ('') on cuda:63, but this "
                   "machine has"),
    device_map_row("device-map-absent-gpu-index", {"model": 63, "lm_head": "cpu"}, "puts 'model' on 63"),
    device_map_row("device-map-unknown-strategy", "fastest", "student.device_map: device_map 'fastest': use auto"),
    device_map_row("device-map-unknown-device", {"model": "gpu", "lm_head": "cpu"},
                   "student.device_map: device_map puts 'model' on 'gpu'"),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else [])
                                  for c in CASES])
def test_model_bad_input(case: Case, env: Env, capsys):
    if case.skip is not None and (why := case.skip()):
        pytest.skip(why)
    argv = case.make(env)
    capsys.readouterr()  # what building the inputs printed (a progress bar) is not the command's
    before = tree(env.tmp), tree(env.run)
    main = diag_cli.main if case.prog == "opsd-diag" else train_cli.main
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    out, err = capsys.readouterr()
    assert_one_error_line(code, out, err, case.prog, case.expect)
    assert not caught, f"library warnings before the error line: {[str(w.message) for w in caught]}"
    assert (tree(env.tmp), tree(env.run)) == before, "a user error left files behind or changed the run"


def test_the_new_classes_are_in_the_corpus_with_unique_ids():
    import test_bad_inputs

    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and not set(ids) & {c.id for c in test_bad_inputs.CASES}
    for prefix in ("tmpl-kwarg-", "tmpl-", "adapter-", "device-map-", "model-"):
        assert sum(i.startswith(prefix) for i in ids) >= 3, prefix


def test_every_reserved_option_is_refused_and_every_call_argument_is_reserved():
    """The render's own arguments (this transformers' apply_chat_template) are all reserved; each reserved key is
    refused in one line naming it, on the student and on a teacher."""
    import inspect

    from transformers import PreTrainedTokenizerBase

    from opsd_diag.errors import OpsdError
    from opsd_diag.config.spec import from_dict
    from opsd_diag.config.model_options import RESERVED_TEMPLATE_OPTIONS

    args = set(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters) - {"self", "kwargs"}
    assert args <= set(RESERVED_TEMPLATE_OPTIONS), args - set(RESERVED_TEMPLATE_OPTIONS)
    world = Path("/nonexistent")
    for key in RESERVED_TEMPLATE_OPTIONS:
        for over in ({"student": {"model": "m", "chat_template_kwargs": {key: True}}},
                     {"teachers": [{"name": "t", "context": "hint", "chat_template_kwargs": {key: True}}]}):
            with pytest.raises(OpsdError) as e:
                from_dict(base_config(world, **over))
            assert f"chat_template_kwargs: '{key}' is " in str(e.value) and "\n" not in str(e.value)
    from_dict(base_config(world, student={"model": "m", "chat_template_kwargs": {"enable_thinking": False,
                                                                                "date_string": "1 Jan 2025"}}))


# --------------------------------------------------------------------- the date: any path, one day

def _render(template: str, kwargs: dict | None = None) -> str:
    from families import tokenizer

    from opsd_diag.io.views import Format, render_chat

    tok = tokenizer("qwen3", template_text=template)
    return render_chat(tok, [{"role": "user", "content": "hi"}], Format.of("chat", kwargs))


@pytest.mark.parametrize("template, want", [
    ("{{ strftime_now('%d %b %Y') }}", "26 Jul 2024"),
    ("{{ strftime_now('%Y-%m-%d %A %-d %B %H:%M %%') }}", "2024-07-26 Friday 26 July 00:00 %"),
    ("{% set clock = strftime_now %}{{ clock('%d/%m/%y') }}", "26/07/24"),
    ("{% macro today() %}{{ strftime_now('%b %d') }}{% endmacro %}{{ today() }}", "Jul 26"),
    ("{% if strftime_now is defined %}{{ strftime_now('%j') }}{% endif %}", "208"),
    ("{% if not date_string is defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}{{ date_string }}",
     "26 Jul 2024"),
])
def test_a_template_that_reads_the_clock_gets_the_fixed_day_by_any_path(template, want, monkeypatch):
    import datetime as real

    import transformers.utils.chat_template_utils as ctu

    class Later(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return real.datetime(2031, 3, 4, 5, 6, 7)

    assert _render(template) == want
    if hasattr(ctu, "datetime"):  # the clock moves: the prompt does not
        monkeypatch.setattr(ctu, "datetime", Later)
        assert _render(template) == want


def test_the_users_date_string_is_the_day_when_it_reads_as_a_date():
    assert _render("{{ strftime_now('%Y-%m-%d') }}", {"date_string": "01 Jan 2025"}) == "2025-01-01"
    assert _render("{{ strftime_now('%d %B') }}", {"date_string": "2025-02-03"}) == "03 February"
    assert _render("{{ strftime_now('%Y') }}|{{ date_string }}", {"date_string": "soon"}) == "2024|soon"


def test_the_fixed_day_leaves_the_templates_own_text_alone():
    """The macro in front of the template adds nothing: leading whitespace, newlines and the rest are as written."""
    template = "\n  {{ strftime_now('%Y') }} | {{ messages[0].content }}\n{%- if add_generation_prompt %}\n>{% endif %}"
    assert _render(template) == _render(template.replace("strftime_now('%Y')", "'2024'"))


def test_a_run_over_a_template_that_reads_the_clock_stores_the_fixed_day(env: Env, capsys):
    m = env.model_copy()
    (m / "chat_template.jinja").write_text("{{ strftime_now('%Y-%m-%d') }}|" + STUDENT_TEMPLATE)
    assert diag_cli.main(["run", env.cfg({"student": {"model": str(m)}}), "--out", env.out, "--quiet"]) == 0
    shown = json.loads((env.tmp / "out" / "manifest.json").read_text())["rendered_prompts"]["student"]
    assert shown.startswith("2024-07-26|<|im_start|>user\n")


# --------------------------------------------------------------------------- rightly accepted

def test_a_plain_tensor_pickle_adapter_merges_as_its_safetensors_twin(env: Env):
    pytest.importorskip("peft", reason="peft is the optional extra opsd-diag[peft]")
    from opsd_diag.io import models as hub

    st = lora(env, name="st")
    pk = lora(env, name="pk")
    to_pickle(pk)
    x = torch.tensor([[0, 10, 11, 12]])
    with torch.no_grad():
        a = hub.load_model.__wrapped__(str(env.world / "student"), adapter=str(st))(input_ids=x).logits
        b = hub.load_model.__wrapped__(str(env.world / "student"), adapter=str(pk))(input_ids=x).logits
        plain = hub.load_model.__wrapped__(str(env.world / "student"))(input_ids=x).logits
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, plain)


def test_an_adapter_that_fits_but_names_another_base_is_merged_with_one_warning(env: Env, capsys):
    pytest.importorskip("peft", reason="peft is the optional extra opsd-diag[peft]")
    path = lora(env)
    edit_config(path, base_model_name_or_path="Qwen/Qwen3-1.7B-Base")
    argv = ["run", env.cfg({"student": {"model": str(env.world / "student"), "adapter": str(path)}}), "--out",
            env.out, "--quiet"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert diag_cli.main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"warning: adapter {path} was trained on 'Qwen/Qwen3-1.7B-Base' (its adapter_config.json), not on "
                   f"'{env.world / 'student'}': its shapes fit, so it is merged; check that it belongs to this model"]
    assert not [w for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]


def test_a_device_map_of_the_models_modules_runs(env: Env, capsys):
    over = {"student": {"model": str(env.world / "student"), "device_map": {"model": "cpu", "lm_head": "cpu"}}}
    argv = ["run", env.cfg(over), "--out", env.out, "--quiet"]
    assert diag_cli.main(argv) == 0


# ------------------------------------------------------------------ a padded base (item 7)

def _padded_copy(src: Path, dst: Path, extra: int) -> Path:
    """``src`` with ``extra`` embedding/LM-head rows beyond its tokenizer, as Qwen's and Gemma's checkpoints ship;
    the padding rows are large, so a logit computed over them would move every base number."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src)
    n = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(n + extra, mean_resizing=False)
    with torch.no_grad():
        model.get_output_embeddings().weight[n:] = 5.0
        model.get_input_embeddings().weight[n:] = 5.0
    model.save_pretrained(dst)
    AutoTokenizer.from_pretrained(src).save_pretrained(dst)
    return dst


def test_a_padded_base_scores_on_the_tokenizers_rows_against_float64(tmp_path):
    """score_batch and score_batch_fused with a padded base (loaded as a run loads it) equal the same weights cut
    to the tokenizer, and a float64 log-softmax over the tokenizer's rows of the full head."""
    from families import build

    from opsd_diag.engine.fast.fused_scoring import score_batch_fused
    from opsd_diag.engine.scoring import TeacherInput, score_batch
    from opsd_diag.io import models as hub
    from opsd_diag.config.spec import ModelSpec
    from opsd_diag.io.views import student_view
    from opsd_diag.schema import BASE_COLUMNS
    from opsd_diag.config.settings import ScoreSettings

    tok, student = hub.load_spec(ModelSpec(model=str(build("qwen3", tmp_path / "s", seed=0))), "cpu")
    _, cut = hub.load_spec(ModelSpec(model=str(build("qwen3", tmp_path / "b", seed=1))), "cpu")
    _, padded = hub.load_spec(ModelSpec(model=str(_padded_copy(tmp_path / "b", tmp_path / "bp", 24))), "cpu")
    n = len(tok)
    assert padded.get_input_embeddings().weight.shape[0] == n + 24 == padded.get_output_embeddings().weight.shape[0]
    prompt = student_view(tok, {"id": "p", "prompt": "What is 3+4?"}).ids
    prompts, comps = [prompt, prompt], [[10, 11, 12, 2], [13, 2]]
    s = ScoreSettings(temperature=1.0, jsd_beta=0.5, centering=None, exopd_lambda=1.25, exopd_reference="base",
                      top_k=3, chunk_size=4)
    teachers = {"t": TeacherInput(student, prompts, None)}
    for score in (score_batch, score_batch_fused):
        a, _ = score(student, comps, prompts, teachers, s, tok.pad_token_id, base=padded, base_prompts=prompts)
        b, _ = score(student, comps, prompts, teachers, s, tok.pad_token_id, base=cut, base_prompts=prompts)
        for col in (*BASE_COLUMNS, "a_ex"):
            torch.testing.assert_close(torch.as_tensor(a["t"][col]), torch.as_tensor(b["t"][col]), rtol=1e-5,
                                       atol=1e-6, equal_nan=True)
        with torch.no_grad():  # float64: log-softmax over the first len(tokenizer) rows of the padded head
            full = padded(input_ids=torch.tensor([prompt + comps[0]])).logits[0, len(prompt) - 1:-1].double()
            logp = torch.log_softmax(full[:, :n], -1)  # [4, n]
        rows = a["t"]["row"] == 0
        torch.testing.assert_close(torch.as_tensor(a["t"]["lp_b"][rows]).double(),
                                   logp.gather(1, torch.tensor(comps[0])[:, None])[:, 0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(torch.as_tensor(a["t"]["h_b"][rows]).double(), -(logp.exp() * logp).sum(-1),
                                   rtol=1e-4, atol=1e-5)


def test_a_run_with_a_padded_base_equals_the_run_with_the_unpadded_one(env: Env, capsys):
    """End to end, through the CLI's own loading: every token column of a run with a padded base equals the run
    with the same base unpadded."""
    padded = _padded_copy(env.world / "base", env.tmp / "padded_base", 40)
    tables = []
    for name, base in (("plain", env.world / "base"), ("padded", padded)):
        cfg = env.cfg({"base": {"model": str(base)}, "scoring": {"exopd_reference": "base"}, "device": "cpu"},
                      name=f"{name}.yaml")  # float32 on the CPU: the comparison is of code paths, not of kernels
        assert diag_cli.main(["run", cfg, "--out", str(env.tmp / name), "--quiet"]) == 0
        tables.append(pd.read_parquet(env.tmp / name / "tokens.parquet"))
    plain, pad = tables
    assert len(plain) == len(pad) and plain["lp_b"].notna().all()
    for col in plain.columns:
        if pd.api.types.is_float_dtype(plain[col]):
            pd.testing.assert_series_equal(plain[col], pad[col], rtol=1e-5, atol=1e-6)
        else:
            assert plain[col].tolist() == pad[col].tolist(), col
