"""Token views: the exact prompt ids each model sees, and the completion spliced in as ids.

Every view goes through the same ``apply_chat_template(..., add_generation_prompt=True)`` call and
is tokenised with ``add_special_tokens=False`` (the template already holds any BOS), so special
tokens are never added twice. Completions are spliced as token ids, never re-tokenised text.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsd_diag.errors import OpsdError
from opsd_diag.io import templates


@dataclass(frozen=True)
class PromptView:
    ids: list[int]
    context_truncated: bool = False


def _messages(problem: dict, user_text: str | None, system_prompt: str | None) -> list[dict]:
    prompt = problem["prompt"]
    msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if user_text is not None:
        msgs[-1] = {"role": "user", "content": user_text}
    if system_prompt and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": system_prompt})
    return msgs


def encode_chat(tok, messages: list[dict]) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def student_view(tok, problem: dict, system_prompt: str | None = None) -> PromptView:
    return PromptView(encode_chat(tok, _messages(problem, None, system_prompt)))


def teacher_view(tok, problem: dict, context: str, *, partial_fraction: float = 0.5,
                 system_prompt: str | None = None, max_length: int = 2048) -> PromptView:
    """The teacher's prompt: the question with the privileged context rendered in.

    When it is longer than ``max_length`` only the privileged fields are shortened (never the
    question, never the completion), and the view records that it happened.
    """
    template = templates.resolve(context)
    fields = templates.context_fields(problem, partial_fraction)

    def build(keep: float) -> list[int]:
        cut = {k: (v[:max(1, int(len(v) * keep))] if k in templates.PRIVILEGED and keep < 1 else v)
               for k, v in fields.items()}
        return encode_chat(tok, _messages(problem, templates.render(template, cut), system_prompt))

    ids = build(1.0)
    if len(ids) <= max_length:
        return PromptView(ids)
    if not templates.placeholders(template) & set(templates.PRIVILEGED):
        raise OpsdError(f"problem {problem['id']}: the prompt alone is {len(ids)} tokens, over "
                        f"scoring.max_prompt_length={max_length}: raise the limit")
    if len(build(0.0)) > max_length:
        raise OpsdError(f"problem {problem['id']}: the teacher prompt does not fit scoring.max_prompt_length="
                        f"{max_length} even without its context: raise the limit")
    lo, hi = 0.0, 1.0  # bisect the kept share of the privileged text
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if len(build(mid)) <= max_length else (lo, mid)
    return PromptView(build(lo), context_truncated=True)

