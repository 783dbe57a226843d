import pytest

from opsd_diag.errors import OpsdError
from opsd_diag.io.verify import extract_answer, is_correct, normalize


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
