"""Thinking-aware answer checking: the answer is what follows the last thinking block.

Qwen3 thinks in ``<think> ... </think>``, Gemma-4 in its thought channel ``<|channel>thought ...
<channel|>``. An ``Answer: 7`` written while thinking must not beat the final ``\\boxed{5}``, and a
rollout that ends inside its thinking block has no answer at all. The blocks are found on the token
ids when the markers are tokens of the tokenizer (Gemma-4's are special tokens, which decoding
drops), else in the text. A rollout is *truncated* when it was cut at ``max_completion_length``
without a stop or ends inside its thinking block; ``analysis.truncated`` decides whether it counts
as incorrect (the default) or is checked like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsd_diag.io.verify import extract_answer, is_correct

MARKERS = (("<think>", "</think>"), ("<|channel>", "<channel|>"))


def marker_ids(tok) -> tuple[set[int], set[int]]:
    """(opening ids, closing ids) of the thinking markers that are single tokens of ``tok``."""
    opens, closes = set(), set()
    vocab = tok.get_vocab()
    for o, c in MARKERS:
        if o in vocab and c in vocab:
            opens.add(vocab[o])
            closes.add(vocab[c])
    return opens, closes


def _last(ids: list[int], wanted: set[int]) -> int:
    return max((i for i, t in enumerate(ids) if t in wanted), default=-1)


def split_ids(prompt: list[int], completion: list[int], opens: set[int], closes: set[int]) -> tuple[list[int], bool]:
    """(the completion ids after its last closing marker, whether it ends inside a thinking block).

    The prompt counts for the state: Qwen3's non-thinking prompt holds an empty closed block, a
    prompt that opens the block (DeepSeek-R1 style) leaves the model inside it.
    """
    both = list(prompt) + list(completion)
    inside = _last(both, opens) > _last(both, closes)
    close = _last(list(completion), closes)
    return list(completion[close + 1:]), inside


def split_text(text: str) -> tuple[str, bool]:
    """The same on text, for markers that are not tokens (then they survive decoding as plain text)."""
    best, inside = text, False
    for o, c in MARKERS:
        if o in text or c in text:
            close = text.rfind(c)
            inside = text.rfind(o) > close
            best = text[close + len(c):] if close >= 0 else text
    return best, inside


def answer_text(tok, ids: list[int], prompt: list[int] = ()) -> str:
    """The text after the last thinking block ("" when the ids end inside one): what an answer is read from."""
    opens, closes = marker_ids(tok)
    if opens:
        tail, inside = split_ids(list(prompt), ids, opens, closes)
        return "" if inside else tok.decode(tail, skip_special_tokens=True)
    text, inside = split_text(tok.decode(ids, skip_special_tokens=True))
    return "" if inside else text


@dataclass(frozen=True)
class Checked:
    text: str  # the whole completion, special tokens dropped (what the report shows)
    answer_text: str  # what follows the last thinking block
    pred: str | None
    correct: bool | None  # None: the problem has no reference answer
    truncated: bool  # cut at max_completion_length without a stop, or ends inside its thinking block
    in_thinking: bool


def check(tok, prompt: list[int], ids: list[int], finished: bool, answer, checker: str,
          truncated_policy: str = "incorrect") -> Checked:
    """Extract and check the answer of one completion (``answer`` None: no reference)."""
    text = tok.decode(ids, skip_special_tokens=True)
    opens, closes = marker_ids(tok)
    if opens:
        tail, inside = split_ids(prompt, ids, opens, closes)
        answer_text = tok.decode(tail, skip_special_tokens=True)
    else:
        answer_text, inside = split_text(text)
    truncated = inside or not finished
    pred = None if inside else extract_answer(answer_text, checker)
    if answer is None:
        return Checked(text, answer_text, pred, None, truncated, inside)
    ok = pred is not None and is_correct(answer_text, answer, checker)
    if truncated and truncated_policy == "incorrect":
        ok = False
    return Checked(text, answer_text, pred, ok, truncated, inside)
