import pytest

from opsd_diag.errors import OpsdError
from opsd_diag.io import templates

PROBLEM = {"id": "p1", "prompt": "Start at 1. Apply +2. Result?", "solution": "a) 1+2=3\nb) 3*2=6\nc) 6-1=5\nd) 5+0=5",
           "answer": "5"}


@pytest.mark.parametrize("name", list(templates.BUILTIN))
def test_builtins_render_question_first(name):
    text = templates.render(templates.resolve(name), templates.context_fields(PROBLEM))
    assert text.startswith(PROBLEM["prompt"])


def test_builtin_contents():
    f = templates.context_fields(PROBLEM, partial_fraction=0.5)
    assert PROBLEM["solution"] in templates.render(templates.resolve("full_solution"), f)
    assert "answer is 5" in templates.render(templates.resolve("answer_only"), f)
    partial = templates.render(templates.resolve("partial_solution"), f)
    assert "a) 1+2=3\nb) 3*2=6" in partial and "c) 6-1=5" not in partial
    assert "Hint: a) 1+2=3" in templates.render(templates.resolve("hint"), f)
    assert templates.render(templates.resolve("none"), f) == PROBLEM["prompt"]


def test_user_template_and_literal_braces():
    t = templates.resolve("Q: {prompt}\nRef {{json}}: {solution}")
    out = templates.render(t, templates.context_fields(PROBLEM))
    assert out == f"Q: {PROBLEM['prompt']}\nRef {{json}}: {PROBLEM['solution']}"


@pytest.mark.parametrize("bad, match", [
    ("Use the solution: {solution}", "no {prompt} placeholder"),
    ("{prompt} {prompt.__class__}", "not allowed"),
    ("{prompt} {solution[0]}", "not allowed"),
    ("{prompt} {__import__('os')}", "not allowed"),
    ("{prompt} {0}", "not allowed"),
    ("{prompt} {", "unmatched"),
    ("{prompt} }", "unmatched"),
])
def test_bad_templates(bad, match):
    with pytest.raises(OpsdError, match=match):
        templates.resolve(bad)


def test_missing_privileged_field_is_an_error_not_blank():
    t = templates.resolve("full_solution")
    with pytest.raises(OpsdError, match="has no solution"):
        templates.render(t, templates.context_fields({"id": "x", "prompt": "q"}))
