"""Token views: the exact prompt ids each model sees, and the completion spliced in as ids.

Every view goes through the same ``apply_chat_template(..., add_generation_prompt=True)`` call and
is tokenised with ``add_special_tokens=False`` (the template already holds any BOS), so special
tokens are never added twice. Completions are spliced as token ids, never re-tokenised text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from opsd_diag.io import templates
from opsd_diag.io.data import prompt_text
from opsd_diag.errors import OpsdError


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
    fields = templates.context_fields({**problem, "prompt_text": prompt_text(problem)}, partial_fraction)

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


def trim_completion(ids: list[int], stop_ids: list[int]) -> tuple[list[int], bool]:
    """Cut generated ids after the first stop id (kept); returns (ids, finished)."""
    for i, t in enumerate(ids):
        if t in stop_ids:
            return list(ids[:i + 1]), True
    return list(ids), False


def pack(prompts: list[list[int]], completions: list[list[int]], pad_id: int):
    """Left-pad prompts, right-pad completions: every completion starts at the same column.

    Returns input_ids, attention_mask, position_ids [B, P+C] and completion_mask [B, C]; the
    logits predicting completion token j sit at column P + j - 1. Masks come from lengths, never
    from pad == eos.
    """
    if len(prompts) != len(completions) or not prompts:
        raise ValueError("pack needs one prompt per completion")
    P = max(len(p) for p in prompts)
    C = max(1, max(len(c) for c in completions))
    B = len(prompts)
    input_ids = torch.full((B, P + C), pad_id, dtype=torch.long)  # [B, P+C]
    attention = torch.zeros((B, P + C), dtype=torch.long)  # [B, P+C]
    completion_mask = torch.zeros((B, C), dtype=torch.bool)  # [B, C]
    for i, (p, c) in enumerate(zip(prompts, completions)):
        if not p:
            raise OpsdError("an empty prompt cannot be scored: every view needs at least one token")
        input_ids[i, P - len(p):P] = torch.tensor(p)
        input_ids[i, P:P + len(c)] = torch.tensor(c, dtype=torch.long)
        attention[i, P - len(p):P + len(c)] = 1
        completion_mask[i, :len(c)] = True
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P+C] explicit with left padding
    return input_ids, attention, position_ids, completion_mask
