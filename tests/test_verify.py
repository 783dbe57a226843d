import json

import pytest

from opsd_diag.errors import OpsdError
from opsd_diag.io.verify import extract_answer, is_correct, normalize, reference_answer


@pytest.mark.parametrize("text, method, expected", [
    ("a) 3+4=7\nAnswer: 7", "toy", "7"),
    ("Answer: 3\nwait, Answer: 5", "toy", "5"),                     # last answer line wins
    ("The answer is: 12.", "toy", "12"),
    ("answer = \\boxed{4}", "toy", "4"),
    ("so \\boxed{\\frac{1}{2}} done", "boxed", "\\frac{1}{2}"),    # nested braces
    ("\\boxed{1} then \\boxed{2}", "boxed", "2"),
    ("\\boxed{3", "boxed", None),                                   # cut-off box: no answer
    ("x = 3, y = -4.5", "last_number", "-4.5"),
    ("total 1,234 apples", "last_number", "1,234"),
    ("no digits here", "auto", None),
    ("steps 1 2 3 \\boxed{9} and 10", "auto", "9"),                  # boxed beats last number
    ("Answer: 6<|im_end|>", "auto", "6<|im_end|>"),
    ("", "auto", None),
])
def test_extract(text, method, expected):
    assert extract_answer(text, method) == expected


@pytest.mark.parametrize("a, b", [("1,234", "1234"), ("0.50", "1/2"), ("$7$", "7"), (" 7. ", "7"),
                                  ("\\text{Yes}", "yes"), ("-3", "-3.0")])
def test_normalize_equal(a, b):
    assert normalize(a) == normalize(b)


def test_is_correct():
    assert is_correct("a) 1+1=2\nAnswer: 2", "2", "toy")
    assert not is_correct("a) 1+1=2\nAnswer: 3", "2", "toy")
    assert not is_correct("no answer at all", "2", "toy")
    assert not is_correct("Answer: 12", "2", "toy")   # no substring matches
    assert is_correct("the result is \\boxed{12}", 12)


def test_unknown_method():
    with pytest.raises(OpsdError, match="unknown answer checker"):
        extract_answer("1", "regex")


# GSM8K- and MATH-shaped records, written for these tests: the answer column holds the whole worked
# solution, ending in `#### N` (GSM8K) or holding the answer in `\boxed{}` (MATH).
GSM8K_LIKE = {"question": "A baker fills 3 trays with 12 rolls each and sells 5 rolls. How many rolls are left?",
              "answer": "The trays hold 3 * 12 = <<3*12=36>>36 rolls.\nAfter selling 5, 36 - 5 = <<36-5=31>>31 "
                        "rolls are left.\n#### 31"}
GSM8K_BIG = {"question": "A shop earns $1,250 a day for 4 days. How much in all?",
             "answer": "It earns 1,250 * 4 = <<1250*4=5000>>5,000 dollars.\n#### 5,000"}
MATH_LIKE = {"problem": "Solve $4x = 2$.", "level": "Level 1",
             "solution": "Dividing both sides by 4 gives $x = \\frac{2}{4} = \\boxed{\\frac{1}{2}}$."}


@pytest.mark.parametrize("reference, final", [
    (GSM8K_LIKE["answer"], "31"), (GSM8K_BIG["answer"], "5,000"), (MATH_LIKE["solution"], "\\frac{1}{2}"),
    ("a) 1+2=3\nb) 3*2=6\nAnswer: 6", "6"), ("42", "42"), (" 7 ", "7"), ("x = 3 and y = 4", "x = 3 and y = 4"),
])
def test_reference_answer_is_the_final_answer(reference, final):
    assert reference_answer(reference) == final
    assert reference_answer(reference, "exact") == reference.strip()


@pytest.mark.parametrize("method", ["gsm8k", "auto"])
def test_gsm8k_answers_are_checked_against_the_number_after_the_hashes(method):
    ref = GSM8K_LIKE["answer"]
    assert is_correct("3 trays of 12 is 36, minus 5 is 31.\n#### 31", ref, method)
    assert is_correct("They have 36 - 5 = 31 rolls left. The answer is 31.", ref, method)
    assert not is_correct("36 rolls.\n#### 36", ref, method)
    assert is_correct("Total: 5000 dollars.\n#### 5000", GSM8K_BIG["answer"], method)  # thousands separators
    assert is_correct("#### $5,000.", GSM8K_BIG["answer"], method)
    assert extract_answer("so 31 rolls\n#### 31\n", "gsm8k") == "31"
    assert extract_answer("no marker, last number 12 then 14", "gsm8k") == "14"


@pytest.mark.parametrize("method", ["boxed", "auto"])
def test_math_answers_are_checked_against_the_boxed_reference(method):
    ref = MATH_LIKE["solution"]
    assert is_correct("So $x = \\boxed{\\frac12}$.", ref, method)
    assert is_correct("x = \\boxed{\\dfrac{1}{2}}", ref, method)
    assert is_correct("\\boxed{0.5}", ref, method)
    assert not is_correct("\\boxed{2}", ref, method)
    assert is_correct("\\boxed{\\frac{\\sqrt{3}}{2}}", "Hence $\\boxed{\\frac{\\sqrt{3}}{2}}$.", method)


def test_a_correct_answer_is_no_longer_marked_wrong_against_a_whole_rationale():
    """Before reference parsing every checker compared with the whole reference string."""
    for method in ("auto", "gsm8k", "last_number"):
        assert is_correct("#### 31", GSM8K_LIKE["answer"], method)
        assert is_correct("the answer is 31", GSM8K_LIKE["answer"], method)


def test_gsm8k_and_math_records_through_the_data_loader_and_the_contexts(tmp_path):
    from opsd_diag.io import templates
    from opsd_diag.config.spec import DataSpec
    from opsd_diag.io.data import load_problems

    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text("".join(json.dumps(r) + "\n" for r in (GSM8K_LIKE, GSM8K_BIG)))
    probs = load_problems(DataSpec(path=str(gsm), fields={"prompt": "question", "solution": "answer"}))
    ans = templates.render(templates.resolve("answer_only"), templates.context_fields(probs[0]))
    assert "The correct final answer is 31." in ans
    assert "<<" not in ans and "trays hold" not in ans  # never the rationale
    full = templates.render(templates.resolve("full_solution"), templates.context_fields(probs[0]))
    assert "3 * 12 = <<3*12=36>>36" in full  # the solution context shows the worked solution
    assert is_correct("#### 31", probs[0]["answer"], "gsm8k")

    math = tmp_path / "math.json"  # one JSON array, as MATH is often shipped
    math.write_text(json.dumps([MATH_LIKE]))
    m = load_problems(DataSpec(path=str(math), fields={"prompt": "problem", "answer": "solution"}))[0]
    ans = templates.render(templates.resolve("answer_only"), templates.context_fields(m))
    assert "The correct final answer is \\frac{1}{2}." in ans and "Dividing" not in ans
    assert is_correct("\\boxed{1/2}", m["answer"], "boxed")


def test_answer_only_refuses_a_rationale_without_a_final_answer_marker():
    from opsd_diag.io import templates

    rationale = {"id": "r1", "prompt": "q", "answer": "3 trays of 12 is 36.\nSelling 5 leaves 31."}
    with pytest.raises(OpsdError, match="whole solution"):
        templates.check_problems(templates.resolve("answer_only"), [rationale], "teachers.0 'ans'", {})
    templates.check_problems(templates.resolve("full_solution"), [{**rationale, "solution": "s"}], "t", {})
