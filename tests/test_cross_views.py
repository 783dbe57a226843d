"""Which tokenizer renders which view when a teacher has another vocabulary (io.views): its own tokens
always (its template, or the student's prompt_format without one), and the base in its family's tokens."""

from __future__ import annotations

import copy

import pytest
from fixtures_crosstok import corpus, teacher_tokenizer

from opsd_diag.errors import OpsdError
from opsd_diag.config.spec import from_dict
from opsd_diag.io.views import base_renderer, build_views, student_renderer, teacher_renderer
from opsd_diag.io.views import student_view
from opsd_diag.zoo.tokenizer import train_tokenizer

PROBLEM = {"id": "p0", "prompt": "What is 12 + 30?", "solution": "12 + 30 = 42", "answer": "42"}


@pytest.fixture(scope="module")
def toks():
    texts = corpus()
    student = train_tokenizer(texts, vocab_size=400)
    student.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    other = teacher_tokenizer(texts)
    bare = copy.deepcopy(other)
    bare.chat_template = None  # a -Base checkpoint of the other family
    return student, other, bare


def _cfg(fmt="chat", base_view="student"):
    return from_dict({"student": {"model": "s", "prompt_format": fmt}, "base": {"model": "b"},
                      "teachers": [{"name": "x", "model": "x", "context": "{prompt}\nReference: {solution}"}],
                      "data": {"path": "x.jsonl"}, "scoring": {"base_view": base_view}})


def test_teacher_of_another_vocabulary_renders_in_its_own_tokens(toks):
    student, other, bare = toks
    cfg = _cfg()
    t = cfg.teachers[0]
    r = teacher_renderer(cfg, t, student, other)
    assert r.tok is other and r.fmt.kind == "chat"
    ids = build_views(cfg, [PROBLEM], student_renderer(cfg, student), {"x": r}, None).teachers["x"][0]
    text = other.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|begin_of_text|><|start_header_id|>user") and "Reference: 12 + 30 = 42" in text
    assert teacher_renderer(cfg, t, student, bare).tok is bare  # no template: still its own tokens, never ids
    with pytest.raises(OpsdError, match="teacher config 'x'.*no chat template.*prompt_format: raw"):
        build_views(cfg, [PROBLEM], student_renderer(cfg, student), {"x": teacher_renderer(cfg, t, student, bare)},
                    None)
    raw = _cfg("raw")
    r = teacher_renderer(raw, raw.teachers[0], student, bare)
    assert r.tok is bare and r.fmt.kind == "raw"
    ids = build_views(raw, [PROBLEM], student_renderer(raw, student), {"x": r}, None).teachers["x"][0]
    assert bare.decode(ids) == "What is 12 + 30?\nReference: 12 + 30 = 42"
    same = copy.deepcopy(student)
    same.chat_template = None
    assert teacher_renderer(cfg, t, student, same).tok is student  # one vocabulary: the student's rendering


@pytest.mark.parametrize("base_view", ["student", "teacher"])
def test_base_renders_in_its_family_tokens(toks, base_view):
    student, other, _ = toks
    cfg = _cfg(base_view=base_view)
    t = cfg.teachers[0]
    s_render, t_render = student_renderer(cfg, student), teacher_renderer(cfg, t, student, other)
    of_teacher = base_renderer(cfg, t, s_render, t_render, other)
    of_student = base_renderer(cfg, t, s_render, t_render)
    if base_view == "teacher":
        assert of_teacher is t_render
        assert of_student.tok is student and of_student.fmt.kind == "chat"
        text = student.decode(build_views(cfg, [PROBLEM], s_render, {"x": of_student}, None).teachers["x"][0],
                              skip_special_tokens=False)
        assert text.startswith("<|im_start|>user\n") and "Reference: 12 + 30 = 42" in text
    else:
        assert of_student is s_render
        assert of_teacher.tok is other and of_teacher.fmt == s_render.fmt
        text = other.decode(student_view(of_teacher.tok, PROBLEM, None, of_teacher.fmt).ids,
                            skip_special_tokens=False)
        assert text.startswith("<|begin_of_text|><|start_header_id|>user") and "What is 12 + 30?" in text
