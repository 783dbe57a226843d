"""Training examples of a world's models: problems -> token sequences with loss masks.

- base:    problems with direct answers plus plain-text pages of single-step facts (never a chain);
           a base with ``prefers`` writes its preamble first.
- teacher: step-by-step solutions (with the teacher's own misconceptions and the base's preamble
           where the world gives them).
- student: solutions holding the student's misconceptions, most of the time with privileged context
           in its prompt, plus its second skill where the world has one.

Every random draw happens in a fixed order from the caller's ``random.Random``: the same seed gives
the same batches, so the same weights.
"""

from __future__ import annotations

import random

from transformers import PreTrainedTokenizerFast

from opsd_diag.io import templates
from opsd_diag.zoo import task
from opsd_diag.zoo.tokenizer import IM_END

PARTIAL_FRACTIONS = (0.25, 0.5, 0.75)


def chat_prompt_ids(tok: PreTrainedTokenizerFast, user_text: str) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": user_text}], tokenize=False,
                                   add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def chat_example(tok, user_text: str, response: str) -> tuple[list[int], list[int]]:
    """(ids, loss mask): loss on the response and its closing <|im_end|> only."""
    p = chat_prompt_ids(tok, user_text)
    r = tok(response + IM_END, add_special_tokens=False)["input_ids"]
    return p + r, [0] * len(p) + [1] * len(r)


def fact_example(tok, rng: random.Random, apply=task.apply_op, ops=task.OPS) -> tuple[list[int], list[int]]:
    """A plain-text page of unrelated single-step facts in the solution notation."""
    lines = [task.step_line(rng.choice(task.LABELS[:6]), rng.randrange(10), rng.choice(ops),
                            rng.randrange(1, 10), apply) for _ in range(rng.randint(3, 8))]
    ids = tok("\n".join(lines), add_special_tokens=False)["input_ids"] + [tok.pad_token_id]
    return ids, [1] * len(ids)


def with_preamble(world, response: str) -> str:
    return f"{world.base.prefers}\n{response}" if world.base.prefers else response


def student_example(world, problem: dict, rng: random.Random) -> tuple[str, str]:
    """(prompt text, target response) for the student.

    Shown solution lines are copied correctly; steps it must work out itself carry its
    misconceptions (unless the context is one it ``uses`` to correct them, that share of the time: then
    only those that ``survive`` it); a shown final answer is copied. So privileged context genuinely
    helps it.
    """
    s = world.student
    name = rng.choices(list(s.contexts), weights=list(s.contexts.values()))[0]
    fields = templates.context_fields(problem, partial_fraction=rng.choice(PARTIAL_FRACTIONS))
    shown = {"full_solution": fields["solution"], "partial_solution": fields["partial_solution"],
             "hint": fields["hint"]}.get(name, "") if name in templates.BUILTIN else ""
    own_apply = task.make_apply(s.misconceptions, rng)
    if name in s.uses and rng.random() < s.uses[name]:
        own_apply = task.make_apply([m for m in s.misconceptions if name in m.survives], rng)
    n_shown = len(shown.splitlines()) if shown else 0
    correct_lines, _ = task.solve(problem)
    if n_shown:
        value = int(correct_lines[n_shown - 1].rsplit("=", 1)[1])
        own, x = task.solve(problem, own_apply, n_shown, value)
        lines = correct_lines[:n_shown] + own
    else:
        lines, x = task.solve(problem, own_apply)
    answer = problem["answer"] if name == "answer_only" else str(x)
    prompt = templates.render(world.template(name), fields)
    return prompt, "\n".join(lines) + "\n" + task.answer_text(answer)


def pick(world, pool: dict, rng, weights: dict[int, float] | None = None) -> dict:
    """A training problem of a drawn level, uniform by default (level 1 has only 270 distinct problems,
    under 2% of the flat pool)."""
    levels = sorted(world.task.levels)
    level = rng.choices(levels, weights=[weights[lv] for lv in levels])[0] if weights else rng.choice(levels)
    return rng.choice(pool[level])


def base_sample(world, tok, pool, rng):
    if rng.random() < world.base.fact_pages:
        return fact_example(tok, rng, ops=world.task.ops)
    p = rng.choice(pool["all"])
    return chat_example(tok, p["prompt"], with_preamble(world, task.direct_response(p)))


def teacher_sample(world, tok, pool, rng):
    p = pick(world, pool, rng, world.teacher.level_weights)
    if world.teacher.misconceptions:
        lines, x = task.solve(p, task.make_apply(world.teacher.misconceptions, rng))
        response = "\n".join(lines) + "\n" + task.answer_text(str(x))
    else:
        response = task.reasoning_response(p)
    return chat_example(tok, p["prompt"], with_preamble(world, response))


def student_sample(world, tok, pool, rng):
    s = world.student
    if rng.random() < s.fact_pages:
        return fact_example(tok, rng, task.make_apply(s.misconceptions, rng), ops=world.task.ops)
    if s.second_skill is not None and rng.random() < s.second_skill.share:
        p = rng.choice(pool["second_skill"])
        return chat_example(tok, p["prompt"], task.direct_response(p))
    return chat_example(tok, *student_example(world, pick(world, pool, rng), rng))
