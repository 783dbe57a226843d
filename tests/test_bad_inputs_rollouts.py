"""The bad-input corpus, grown by rollouts files (issue 34, item 2): `opsd-diag run --rollouts FILE` (or the
config's `rollouts` section) over a malformed file ends in exit status 2 with one `opsd-diag: error: ...` line
naming the line and the fix, no traceback, and nothing written (rows follow tests/test_bad_inputs.py: its Env,
fixtures and helpers)."""

from __future__ import annotations

import json

import pytest
from test_bad_inputs import (  # noqa: F401 - env, finished and world are the corpus' fixtures
    Case,
    Env,
    assert_one_error_line,
    diag,
    env,
    finished,
    jsonl,
    tree,
    world,
)

from opsd_diag import cli as diag_cli


def _first(e: Env) -> dict:
    return json.loads((e.world / "dev.jsonl").read_text().splitlines()[0])


def rows(id: str, make_rows, expect: str, over: dict | None = None, flag: bool = True) -> Case:
    """A run over a rollouts file of ``make_rows(env)`` (records or raw lines), given by --rollouts (``flag``)
    or by the config's rollouts.path."""
    def make(e: Env) -> list[str]:
        path = e.file("r.jsonl", jsonl(*make_rows(e)) if not isinstance(make_rows, str) else make_rows)
        if flag:
            return ["run", e.cfg(over), "--out", e.out, "--rollouts", path]
        return ["run", e.cfg({**(over or {}), "rollouts": {"path": path}}), "--out", e.out]
    return diag(id, make, expect)


def one(**fields):
    """Rows of one record for the world's first problem, with ``fields``."""
    return lambda e: [{"problem_id": _first(e)["id"], **fields}]


CASES: list[Case] = [
    rows("roll-bad-json", lambda e: [{"problem_id": "x", "completion": "a"}, "{not json"], "line 2 is not valid JSON"),
    rows("roll-not-object", lambda e: ["[1, 2]"], "line 1 is not a JSON object"),
    rows("roll-empty", "\n\n", "holds no rollouts"),
    rows("roll-no-completion", one(), "no completion: give 'completion'"),
    rows("roll-ids-not-ints", one(completion_ids=["a"]), "'completion_ids' must be a list of token ids"),
    rows("roll-logprob-positive", one(completion_ids=[5], logprobs=[0.5]), "not a finite log-prob <= 0"),
    rows("roll-temperature-text", one(completion="a", temperature="hot"), "'temperature' must be a positive number"),
    rows("roll-vllm-no-outputs", lambda e: [{"prompt": "q", "outputs": []}], "'outputs' must be a non-empty list"),
    rows("roll-vllm-logprob-missing-id", lambda e: [{"prompt": "q", "outputs": [
        {"token_ids": [5], "logprobs": [{"6": {"logprob": -1.0}}]}]}], "does not hold the sampled token 5"),
    rows("roll-finish-reason", lambda e: [{"prompt": "q", "outputs": [{"token_ids": [5], "finish_reason": "abort"}]}],
         "unknown finish reason 'abort'"),
    rows("roll-slime-length", lambda e: [{"prompt": "q", "tokens": [1, 2], "response_length": 9}],
         "'response_length' must be the number of response ids"),
    rows("roll-verl-no-output", lambda e: [{"input": "q", "output": 3}], "'output' (the completion text) is missing"),
    diag("roll-config-format", lambda e: ["run", e.cfg({"rollouts": {"path": e.file("r.jsonl", jsonl(*one(
        completion="a")(e))), "format": "vllm"}}), "--out", e.out], "'outputs' must be a non-empty list"),
    diag("roll-unknown-field", lambda e: ["run", e.cfg({"rollouts": {"path": "r.jsonl", "fields": {"bogus": "x"}}}),
                                          "--out", e.out], "unknown field bogus"),
    diag("roll-missing-file", lambda e: ["run", e.cfg(), "--out", e.out, "--rollouts", str(e.tmp / "none.jsonl")],
         "rollouts file"),
    # past parsing: matched against the problems and the student's tokenizer (the models load)
    rows("roll-unknown-problem", lambda e: [{"problem_id": "nope", "completion": "a"}],
         "problem_id 'nope' is not in the data"),
    rows("roll-prompt-mismatch", one(prompt="another question", completion="a"), "its prompt is not problem"),
    rows("roll-prompt-matches-nothing", lambda e: [{"prompt": "What is love?", "completion": "a"}],
         "its prompt 'What is love?' matches no problem"),
    rows("roll-no-prompt-no-id", lambda e: [{"completion": "a"}], "no problem_id and no prompt"),
    rows("roll-ids-out-of-vocab", one(completion_ids=[5, 99999]), "token id 99999 is outside the student's vocabulary"),
    rows("roll-count", one(completion_ids=[5]), "1 rollouts per problem but sampling.num_samples is 2"),
    rows("roll-temperature", one(completion_ids=[5], temperature=0.5),
         "sampled at temperature 0.5 but sampling.temperature is 1"),
    rows("roll-logprobs-length", one(completion_ids=[5, 6], logprobs=[-1.0]), "1 log-probs for 2 completion ids"),
    rows("roll-logprobs-without-ids", one(completion="a b", logprobs=[-1.0]), "log-probs need the sampled token ids"),
    rows("roll-too-long", one(completion_ids=[5] * 10), "10 tokens, more than sampling.max_completion_length 4"),
    rows("roll-empty-completion", one(completion=""), "the completion is empty"),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_rollouts_bad_input(case: Case, env: Env, capsys):
    argv = case.make(env)
    before = tree(env.tmp), tree(env.run)
    code = diag_cli.main(argv)
    out, err = capsys.readouterr()
    assert_one_error_line(code, out, err, "opsd-diag", case.expect)
    assert (tree(env.tmp), tree(env.run)) == before, "a user error left files behind or changed the run"


def test_the_rows_have_unique_ids_apart_from_the_corpus():
    import test_bad_inputs

    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and not set(ids) & {c.id for c in test_bad_inputs.CASES}
